//===- Sha256.h - SHA-256 (FIPS 180-4) --------------------------*- C++ -*-===//
//
// A small, dependency-free SHA-256 for the artifact's checksums and model /
// schedule hashes. Streaming (update any number of times, then finish) and
// one-shot helpers; digests print as 64 lowercase hex digits, as sha256sum
// prints them. Tested against the FIPS 180-4 / NIST example vectors
// (test/unit/artifact/Sha256Test.cpp).
//
// Not constant-time and not meant for secrets: it detects truncated and
// corrupted files, nothing more.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_ARTIFACT_SHA256_H
#define CSA_RUNTIME_ARTIFACT_SHA256_H

#include "absl/status/statusor.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace csa {
namespace artifact {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
public:
  Sha256();
  /// Appends `size` bytes. Must not be called after finish().
  void update(const void *data, size_t size);
  void update(std::string_view data) { update(data.data(), data.size()); }
  /// Pads, returns the digest. The object is spent afterwards (reset() to
  /// reuse it).
  Sha256Digest finish();
  void reset();

private:
  void compress(const uint8_t *block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t totalBytes_ = 0;
};

/// 64 lowercase hex digits.
std::string toHex(const Sha256Digest &digest);
/// SHA-256 of `data` as hex.
std::string sha256Hex(std::string_view data);
/// SHA-256 of a whole file as hex, read in 1 MiB chunks. Errors name the
/// file.
absl::StatusOr<std::string> sha256File(const std::string &path);
/// Whether `text` is 64 lowercase hex digits.
bool isSha256Hex(std::string_view text);

} // namespace artifact
} // namespace csa

#endif // CSA_RUNTIME_ARTIFACT_SHA256_H

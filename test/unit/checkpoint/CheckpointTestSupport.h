//===- CheckpointTestSupport.h - Checkpoint test helpers --------*- C++ -*-===//
//
// Raw safetensors images built from a header text (so a test can write any
// corruption), file helpers and status matchers; TempDir is shared.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TEST_UNIT_CHECKPOINT_CHECKPOINTTESTSUPPORT_H
#define CSA_TEST_UNIT_CHECKPOINT_CHECKPOINTTESTSUPPORT_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "test/unit/support/TempDir.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

namespace csa::test {

namespace fs = std::filesystem;

inline std::vector<uint8_t> readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void writeBytes(const std::string &path,
                       const std::vector<uint8_t> &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(bytes.data()),
            std::streamsize(bytes.size()));
}

inline void writeText(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

/// A safetensors image: length field (of `header`, or `lengthOverride`),
/// the header text, then `dataBytes` bytes 0, 1, 2, ...
inline std::vector<uint8_t> makeImage(const std::string &header,
                                      uint64_t dataBytes,
                                      int64_t lengthOverride = -1) {
  uint64_t length =
      lengthOverride >= 0 ? uint64_t(lengthOverride) : uint64_t(header.size());
  std::vector<uint8_t> image;
  for (int i = 0; i < 8; ++i)
    image.push_back(uint8_t(length >> (8 * i)));
  image.insert(image.end(), header.begin(), header.end());
  for (uint64_t i = 0; i < dataBytes; ++i)
    image.push_back(uint8_t(i));
  return image;
}

/// The status is an error whose message contains every piece.
inline ::testing::AssertionResult
failsWith(const absl::Status &status,
          std::initializer_list<std::string> pieces) {
  if (status.ok())
    return ::testing::AssertionFailure() << "expected an error, got OK";
  std::string message(status.message());
  for (const std::string &piece : pieces)
    if (message.find(piece) == std::string::npos)
      return ::testing::AssertionFailure()
             << "message lacks '" << piece << "': " << message;
  return ::testing::AssertionSuccess();
}

template <typename T>
::testing::AssertionResult
failsWith(const absl::StatusOr<T> &value,
          std::initializer_list<std::string> pieces) {
  return failsWith(value.status(), pieces);
}

} // namespace csa::test

#endif // CSA_TEST_UNIT_CHECKPOINT_CHECKPOINTTESTSUPPORT_H

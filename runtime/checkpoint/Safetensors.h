//===- Safetensors.h - Memory-mapped safetensors files ----------*- C++ -*-===//
//
// Reads one safetensors file without copying: the file is mapped read-only
// and every tensor is a view into the mapping.
//
// Format (https://github.com/huggingface/safetensors): an unsigned 64-bit
// little-endian header length N, then N bytes of JSON (an object mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, plus an
// optional "__metadata__" object of strings), then the data section. Offsets
// are relative to the data section. Like the reference implementation, the
// reader insists that the tensors tile the data section exactly: no overlap,
// no gap, nothing after the last tensor. Every error names the file and,
// where there is one, the tensor.
//
// Tensors are packed back to back, so `TensorView::data` is only as aligned
// as the sizes of the tensors before it: read multi-byte elements with
// memcpy, not through a cast pointer.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_CHECKPOINT_SAFETENSORS_H
#define CSA_RUNTIME_CHECKPOINT_SAFETENSORS_H

#include "runtime/checkpoint/DType.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace csa {
namespace checkpoint {

/// Largest header the reader accepts. The released checkpoint's largest shard
/// header is a few hundred KB; anything near this limit is a corrupt length.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

/// One tensor of a mapped file. Valid while the file (or the Checkpoint that
/// owns it) is alive.
struct TensorView {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
  const uint8_t *data = nullptr;
  uint64_t bytes = 0;
  /// Path of the file that holds the tensor (for messages).
  std::string file;

  /// Product of the shape (1 for a scalar).
  uint64_t numElements() const;
};

/// "[2304, 2560]".
std::string formatShape(const std::vector<int64_t> &shape);

/// A read-only memory mapping of a whole file. A read of it that raises
/// SIGBUS (the file truncated or changed under the mapping) ends the process
/// with an error naming the file (exit 1), not a signal.
class MappedFile {
public:
  static absl::StatusOr<std::unique_ptr<MappedFile>>
  open(const std::string &path);
  ~MappedFile();
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  const uint8_t *data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string &path() const { return path_; }

private:
  MappedFile() = default;
  std::string path_;
  const uint8_t *data_ = nullptr;
  uint64_t size_ = 0;
  void *slot_ = nullptr; ///< its entry in the SIGBUS handler's table
};

/// A parsed, validated, mapped safetensors file.
class SafetensorsFile {
public:
  /// Maps and validates `path`.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>>
  open(const std::string &path);

  /// Validates a file image already in memory (`path` names it in
  /// messages). The views point into `bytes`, which must outlive the result.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>>
  parse(const uint8_t *bytes, uint64_t size, const std::string &path);

  const std::string &path() const { return path_; }
  /// Tensors in data-offset order.
  const std::vector<TensorView> &tensors() const { return tensors_; }
  /// nullptr if the file has no tensor `name`.
  const TensorView *find(const std::string &name) const;
  /// The "__metadata__" entries (empty if absent).
  const std::map<std::string, std::string> &metadata() const {
    return metadata_;
  }
  /// Length of the JSON header (without the 8-byte length field).
  uint64_t headerBytes() const { return headerBytes_; }
  uint64_t fileBytes() const { return fileBytes_; }

private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> mapping_;
  std::string path_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> byName_;
  std::map<std::string, std::string> metadata_;
  uint64_t headerBytes_ = 0;
  uint64_t fileBytes_ = 0;
};

} // namespace checkpoint
} // namespace csa

#endif // CSA_RUNTIME_CHECKPOINT_SAFETENSORS_H

//===- SafetensorsWriter.h - Writing safetensors checkpoints ----*- C++ -*-===//
//
// SafetensorsWriter writes one .safetensors file; CheckpointWriter splits the
// tensors over shards by a byte budget and writes model.safetensors.index.json
// as Hugging Face does (a single shard becomes model.safetensors, no index).
//
// A tensor's data is given either as bytes or as a filler that produces any
// chunk of it on demand, so a multi-gigabyte tensor (the Engram tables are
// 98 GB each in the released model) is streamed to disk in bounded memory.
// The header is padded with spaces so the data section starts at a multiple
// of 8 bytes, as the format recommends; files are written to a temporary name
// and renamed into place, so a failed write never leaves a valid-looking file.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_CHECKPOINT_SAFETENSORSWRITER_H
#define CSA_RUNTIME_CHECKPOINT_SAFETENSORSWRITER_H

#include "runtime/checkpoint/DType.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace csa {
namespace checkpoint {

/// Produces bytes [offset, offset + size) of a tensor's data into `dst`.
/// Called in order with chunks of at most kWriteChunkBytes; `offset` is a
/// multiple of kWriteChunkBytes, so chunks start on element boundaries.
using TensorFiller =
    std::function<void(uint64_t offset, uint64_t size, uint8_t *dst)>;

constexpr uint64_t kWriteChunkBytes = 8ull << 20;

/// Threads a TensorFiller may use for one chunk: the cores divided among the
/// shards a CheckpointWriter is writing in parallel (every core when none).
unsigned fillerThreads();

/// A tensor waiting to be written.
struct PendingTensor {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  TensorFiller fill;
};

/// Checks a name/shape and computes the byte size.
absl::StatusOr<PendingTensor> makePendingTensor(std::string name, DType dtype,
                                                std::vector<int64_t> shape,
                                                TensorFiller fill);

/// The tensors and metadata a writer collects before it writes them: names
/// unique, sizes checked, in the order added.
class TensorSet {
public:
  /// Adds a tensor with its bytes (size must match dtype x shape).
  absl::Status add(std::string name, DType dtype, std::vector<int64_t> shape,
                   std::vector<uint8_t> data);
  /// Adds a tensor whose bytes `fill` produces at write time.
  absl::Status add(std::string name, DType dtype, std::vector<int64_t> shape,
                   TensorFiller fill);
  absl::Status add(PendingTensor tensor);

  /// A "__metadata__" entry (of every file written).
  void setMetadata(const std::string &key, const std::string &value);

  size_t numTensors() const { return tensors_.size(); }
  uint64_t dataBytes() const { return dataBytes_; }

protected:
  std::vector<PendingTensor> tensors_;
  std::set<std::string> names_;
  std::map<std::string, std::string> metadata_;
  uint64_t dataBytes_ = 0;
};

/// One safetensors file.
class SafetensorsWriter : public TensorSet {
public:
  /// The JSON header with its padding, as write() emits it after the length.
  std::string header() const;

  /// Writes the file: temporary name first, renamed on success.
  absl::Status write(const std::string &path) const;
};

struct CheckpointWriterOptions {
  /// Largest data section of one shard; a tensor larger than this gets a
  /// shard of its own.
  uint64_t shardBytes = 4ull << 30;
  /// Write the index even when everything fits in one shard.
  bool alwaysIndex = false;
  /// Replace a checkpoint already in the directory (its index, model.
  /// safetensors and model-*-of-*.safetensors files); otherwise that is an
  /// error.
  bool overwrite = false;
  /// Called with the bytes of each chunk of tensor data written (from the
  /// shards' threads at once: it must be thread-safe); for progress.
  std::function<void(uint64_t)> onWritten;
};

/// A checkpoint directory: shards of at most `shardBytes` and, when there is
/// more than one (or `alwaysIndex`), model.safetensors.index.json.
class CheckpointWriter : public TensorSet {
public:
  explicit CheckpointWriter(CheckpointWriterOptions options = {})
      : options_(options) {}

  /// Writes the shards (in the order tensors were added) and the index into
  /// `directory`, creating it. Returns the paths of the files written.
  absl::StatusOr<std::vector<std::string>>
  write(const std::string &directory) const;

private:
  CheckpointWriterOptions options_;
};

/// The name of shard `index` (0-based) of `count`:
/// "model-00001-of-00048.safetensors".
std::string shardFileName(size_t index, size_t count);

} // namespace checkpoint
} // namespace csa

#endif // CSA_RUNTIME_CHECKPOINT_SAFETENSORSWRITER_H

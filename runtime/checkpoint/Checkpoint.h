//===- Checkpoint.h - Sharded safetensors checkpoints -----------*- C++ -*-===//
//
// A checkpoint is a directory with `model.safetensors.index.json`
// ({"metadata": {...}, "weight_map": {tensor: shard file}}, the Hugging Face
// convention the released DeepSeek-V4.1-Flash checkpoint follows with 48
// shards), a directory with a single `model.safetensors`, or a single
// .safetensors file. Shards are mapped on first use, so opening a 500 GB
// checkpoint reads only the index; tensors are zero-copy views.
//
// Errors name the tensor and the file: "tensor 'x' not found in DIR", a shard
// that the index lists but that is missing, a tensor that the index places in
// a shard whose header does not have it, and every header problem
// SafetensorsFile reports.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_CHECKPOINT_CHECKPOINT_H
#define CSA_RUNTIME_CHECKPOINT_CHECKPOINT_H

#include "runtime/checkpoint/Safetensors.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <memory>
#include <string>
#include <vector>

namespace csa {
namespace checkpoint {

constexpr const char *kIndexFileName = "model.safetensors.index.json";
constexpr const char *kSingleFileName = "model.safetensors";

class Checkpoint {
public:
  /// Opens a checkpoint directory or a single .safetensors file. A directory
  /// with an index uses the index; otherwise it needs model.safetensors.
  static absl::StatusOr<Checkpoint> open(const std::string &path);

  Checkpoint(Checkpoint &&) noexcept;
  Checkpoint &operator=(Checkpoint &&) noexcept;
  ~Checkpoint();

  /// The path given to open().
  const std::string &path() const;
  /// Whether the checkpoint has a model.safetensors.index.json.
  bool isSharded() const;

  /// The view of tensor `name`, mapping its shard if needed. Thread-safe.
  absl::StatusOr<TensorView> tensor(const std::string &name) const;
  bool contains(const std::string &name) const;
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;
  /// The file (path) that holds tensor `name`, without opening it.
  absl::StatusOr<std::string> fileOf(const std::string &name) const;
  /// Every data file, sorted.
  std::vector<std::string> files() const;

  /// Opens every file and checks that the index and the headers agree: every
  /// listed tensor is in its shard and every shard tensor is listed.
  /// Returns the first problem.
  absl::Status validate() const;

private:
  struct Impl;
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace checkpoint
} // namespace csa

#endif // CSA_RUNTIME_CHECKPOINT_CHECKPOINT_H

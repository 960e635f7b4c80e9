//===- SafetensorsWriter.cpp - Writing safetensors checkpoints ------------===//
#include "runtime/checkpoint/SafetensorsWriter.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Safetensors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <regex>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace csa {
namespace checkpoint {

namespace {
/// Shards being written in parallel right now (0: none).
std::atomic<unsigned> shardsInFlight{0};
} // namespace

unsigned fillerThreads() {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1u, cores / std::max(1u, shardsInFlight.load()));
}


namespace fs = std::filesystem;
using nlohmann::json;

absl::StatusOr<PendingTensor> makePendingTensor(std::string name, DType dtype,
                                                std::vector<int64_t> shape,
                                                TensorFiller fill) {
  if (name.empty() || name == "__metadata__")
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' cannot be a tensor name"));
  uint64_t bytes = dtypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "': negative dimension in ", formatShape(shape)));
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "': shape ", formatShape(shape), " is too large"));
  }
  if (!fill)
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': no data"));
  return PendingTensor{std::move(name), dtype, std::move(shape), bytes,
                       std::move(fill)};
}

namespace {

/// A filler that copies from an owned buffer.
absl::StatusOr<PendingTensor> fromBytes(std::string name, DType dtype,
                                        std::vector<int64_t> shape,
                                        std::vector<uint8_t> data) {
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(data));
  auto tensor =
      makePendingTensor(std::move(name), dtype, std::move(shape),
                        [owned](uint64_t offset, uint64_t size, uint8_t *dst) {
                          std::memcpy(dst, owned->data() + offset, size);
                        });
  if (tensor.ok() && tensor->bytes != owned->size())
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor->name, "': ", formatShape(tensor->shape), " of ",
        dtypeName(dtype), " needs ", tensor->bytes, " bytes, got ",
        owned->size()));
  return tensor;
}

std::string headerFor(const std::vector<PendingTensor> &tensors,
                      const std::map<std::string, std::string> &metadata) {
  json header = json::object();
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const PendingTensor &t : tensors) {
    header[t.name] = {{"dtype", std::string(dtypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string text = header.dump();
  // Pad so that the data section (8 + header bytes) starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

/// Closes the file and removes it unless released.
class TempFile {
public:
  explicit TempFile(std::string path) : path_(std::move(path)) {
    file_ = std::fopen(path_.c_str(), "wb");
  }
  ~TempFile() {
    if (file_)
      std::fclose(file_);
    if (!kept_)
      std::remove(path_.c_str());
  }
  FILE *get() const { return file_; }
  /// Flushes and closes; false on error (disk full shows up here).
  bool close() {
    bool ok = std::fflush(file_) == 0;
    ok &= std::fclose(file_) == 0;
    file_ = nullptr;
    return ok;
  }
  void keep() { kept_ = true; }

private:
  std::string path_;
  FILE *file_ = nullptr;
  bool kept_ = false;
};

absl::Status writeFile(const std::string &path,
                       const std::vector<PendingTensor> &tensors,
                       const std::map<std::string, std::string> &metadata,
                       const std::function<void(uint64_t)> &onWritten = {}) {
  const std::string temp = path + ".partial";
  TempFile out(temp);
  auto ioError = [&](const char *what) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot ", what, ": ", std::strerror(errno)));
  };
  if (!out.get())
    return ioError("create");
  const std::string header = headerFor(tensors, metadata);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<uint8_t>(uint64_t(header.size()) >> (8 * i));
  if (std::fwrite(length, 1, 8, out.get()) != 8 ||
      std::fwrite(header.data(), 1, header.size(), out.get()) != header.size())
    return ioError("write");
  std::vector<uint8_t> chunk;
  for (const PendingTensor &t : tensors) {
    for (uint64_t offset = 0; offset < t.bytes; offset += kWriteChunkBytes) {
      uint64_t size = std::min(kWriteChunkBytes, t.bytes - offset);
      chunk.resize(size);
      t.fill(offset, size, chunk.data());
      if (std::fwrite(chunk.data(), 1, size, out.get()) != size)
        return ioError("write");
      if (onWritten)
        onWritten(size);
    }
  }
  if (!out.close())
    return ioError("write");
  if (std::rename(temp.c_str(), path.c_str()) != 0)
    return ioError("rename the finished file to");
  out.keep();
  return absl::OkStatus();
}

/// Checkpoint files of a directory: the index, model.safetensors and shards.
std::vector<fs::path> existingCheckpointFiles(const std::string &directory) {
  static const std::regex shard(R"(model-\d+-of-\d+\.safetensors)");
  std::vector<fs::path> out;
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(directory, ec)) {
    std::string name = e.path().filename().string();
    if (name == kIndexFileName || name == kSingleFileName ||
        std::regex_match(name, shard))
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

//===----------------------------------------------------------------------===//
// TensorSet
//===----------------------------------------------------------------------===//

absl::Status TensorSet::add(std::string name, DType dtype,
                            std::vector<int64_t> shape,
                            std::vector<uint8_t> data) {
  auto tensor =
      fromBytes(std::move(name), dtype, std::move(shape), std::move(data));
  if (!tensor.ok())
    return tensor.status();
  return add(std::move(*tensor));
}

absl::Status TensorSet::add(std::string name, DType dtype,
                            std::vector<int64_t> shape, TensorFiller fill) {
  auto tensor = makePendingTensor(std::move(name), dtype, std::move(shape),
                                  std::move(fill));
  if (!tensor.ok())
    return tensor.status();
  return add(std::move(*tensor));
}

absl::Status TensorSet::add(PendingTensor tensor) {
  if (!names_.insert(tensor.name).second)
    return absl::AlreadyExistsError(
        absl::StrCat("tensor '", tensor.name, "' added twice"));
  dataBytes_ += tensor.bytes;
  tensors_.push_back(std::move(tensor));
  return absl::OkStatus();
}

void TensorSet::setMetadata(const std::string &key, const std::string &value) {
  metadata_[key] = value;
}

//===----------------------------------------------------------------------===//
// SafetensorsWriter
//===----------------------------------------------------------------------===//

std::string SafetensorsWriter::header() const {
  return headerFor(tensors_, metadata_);
}

absl::Status SafetensorsWriter::write(const std::string &path) const {
  return writeFile(path, tensors_, metadata_);
}

//===----------------------------------------------------------------------===//
// CheckpointWriter
//===----------------------------------------------------------------------===//

std::string shardFileName(size_t index, size_t count) {
  return absl::StrFormat("model-%05d-of-%05d.safetensors", index + 1, count);
}

absl::StatusOr<std::vector<std::string>>
CheckpointWriter::write(const std::string &directory) const {
  if (options_.shardBytes == 0)
    return absl::InvalidArgumentError("the shard budget must be > 0 bytes");
  std::error_code ec;
  // A 500 GB checkpoint should fail before it fills the disk (and before it
  // creates anything), not after.
  fs::path existing = fs::absolute(directory, ec);
  while (!existing.empty() && !fs::exists(existing, ec) &&
         existing != existing.parent_path())
    existing = existing.parent_path();
  if (fs::space_info space = fs::space(existing, ec);
      !ec && space.available < dataBytes_)
    return absl::ResourceExhaustedError(
        absl::StrCat(directory, ": the checkpoint needs ", dataBytes_,
                     " bytes but only ", space.available, " are free"));
  fs::create_directories(directory, ec);
  if (ec || !fs::is_directory(directory))
    return absl::InternalError(absl::StrCat(
        directory, ": cannot create the directory: ", ec.message()));
  std::vector<fs::path> stale = existingCheckpointFiles(directory);
  if (!stale.empty()) {
    if (!options_.overwrite)
      return absl::AlreadyExistsError(
          absl::StrCat(directory, ": already holds a checkpoint (",
                       stale.front().filename().string(),
                       "); remove it or ask to overwrite"));
    for (const fs::path &p : stale)
      if (!fs::remove(p, ec) || ec)
        return absl::InternalError(
            absl::StrCat(p.string(), ": cannot remove: ", ec.message()));
  }

  // Greedy split in insertion order: a new shard when the next tensor would
  // overflow a non-empty one.
  std::vector<std::vector<const PendingTensor *>> shards(1);
  uint64_t current = 0;
  for (const PendingTensor &t : tensors_) {
    if (!shards.back().empty() && current + t.bytes > options_.shardBytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(&t);
    current += t.bytes;
  }

  const bool index = shards.size() > 1 || options_.alwaysIndex;
  std::vector<std::string> written;
  std::vector<std::vector<PendingTensor>> parts(shards.size());
  json weightMap = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    std::string file =
        index ? shardFileName(s, shards.size()) : std::string(kSingleFileName);
    for (const PendingTensor *t : shards[s]) {
      parts[s].push_back(*t);
      weightMap[t->name] = file;
    }
    written.push_back((fs::path(directory) / file).string());
  }
  // Shards are independent files: with several, each is a thread and the
  // cores are shared among the shards in flight (fillerThreads), so filling
  // and writing use every core and the last shard gets them all.
  std::vector<absl::Status> results(shards.size());
  const size_t workers =
      std::min<size_t>(shards.size(), std::max(1u, std::thread::hardware_concurrency()));
  if (workers <= 1) {
    for (size_t s = 0; s < shards.size(); ++s)
      results[s] = writeFile(written[s], parts[s], metadata_, options_.onWritten);
  } else {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t s; (s = next.fetch_add(1)) < shards.size();) {
        struct InFlight {
          InFlight() { ++shardsInFlight; }
          ~InFlight() { --shardsInFlight; }
        } inFlight;
        try {
          results[s] = writeFile(written[s], parts[s], metadata_, options_.onWritten);
        } catch (const std::exception &e) {
          results[s] = absl::InternalError(
              absl::StrCat(written[s], ": cannot write: ", e.what()));
        }
      }
    };
    std::vector<std::thread> pool;
    try {
      for (size_t w = 1; w < workers; ++w)
        pool.emplace_back(work);
    } catch (const std::system_error &) {
      // Fewer threads than asked for: the ones started and this one share
      // the shards.
    }
    work();
    for (std::thread &t : pool)
      t.join();
  }
  for (const absl::Status &st : results)
    if (!st.ok())
      return st;
  if (index) {
    json root = {{"metadata", {{"total_size", dataBytes_}}},
                 {"weight_map", weightMap}};
    std::string path = (fs::path(directory) / kIndexFileName).string();
    std::string text = root.dump(2) + "\n";
    const std::string temp = path + ".partial";
    {
      TempFile out(temp);
      if (!out.get() ||
          std::fwrite(text.data(), 1, text.size(), out.get()) != text.size() ||
          !out.close())
        return absl::InternalError(
            absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
      if (std::rename(temp.c_str(), path.c_str()) != 0)
        return absl::InternalError(absl::StrCat(
            path, ": cannot rename the finished file: ", std::strerror(errno)));
      out.keep();
    }
    written.push_back(path);
  }
  return written;
}

} // namespace checkpoint
} // namespace csa

//===- Checkpoint.cpp - Sharded safetensors checkpoints -------------------===//
#include "runtime/checkpoint/Checkpoint.h"

#include "absl/strings/str_cat.h"
#include <nlohmann/json.hpp>
#include "runtime/support/JsonLimits.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

namespace csa {
namespace checkpoint {

namespace fs = std::filesystem;
using nlohmann::json;

struct Checkpoint::Impl {
  std::string path;      ///< as given to open()
  std::string directory; ///< where shard names are resolved
  std::string indexPath; ///< empty for a single file
  /// tensor -> shard file name (relative to `directory`)
  std::map<std::string, std::string, std::less<>> weightMap;

  std::mutex mutex;
  /// Opened (or failed) shards, by file name.
  std::map<std::string, absl::StatusOr<std::unique_ptr<SafetensorsFile>>>
      shards;

  std::string shardPath(const std::string &file) const {
    return (fs::path(directory) / file).string();
  }

  /// Opens a shard once; later calls return the cached result.
  absl::StatusOr<const SafetensorsFile *> shard(const std::string &file) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = shards.find(file);
    if (it == shards.end())
      it = shards.emplace(file, SafetensorsFile::open(shardPath(file))).first;
    if (!it->second.ok())
      return it->second.status();
    return it->second->get();
  }
};

namespace {

absl::StatusOr<std::string> readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(path + ": cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

/// A shard name must stay inside the checkpoint directory.
bool isPlainRelative(const std::string &name) {
  if (name.empty())
    return false;
  fs::path p(name);
  if (p.is_absolute())
    return false;
  for (const fs::path &part : p)
    if (part == "..")
      return false;
  return true;
}

absl::Status parseIndex(const std::string &indexPath,
                        std::map<std::string, std::string, std::less<>> &out) {
  auto text = readText(indexPath);
  if (!text.ok())
    return text.status();
  auto error = [&](const std::string &what) {
    return absl::DataLossError(absl::StrCat(indexPath, ": ", what));
  };
  json root = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    std::string why = "parse error";
    try {
      json unreachable = json::parse(*text);
      (void)unreachable;
    } catch (const json::exception &e) {
      why = e.what();
    }
    return error("not valid JSON: " + why);
  }
  if (support::jsonDepth(root) > support::kMaxJsonDepth)
    return error(absl::StrCat("nested deeper than ", support::kMaxJsonDepth, " levels"));
  if (!root.is_object())
    return error(
        absl::StrCat("an index is a JSON object, got ", root.type_name()));
  auto map = root.find("weight_map");
  if (map == root.end() || !map->is_object())
    return error("'weight_map' must be an object mapping tensor names to "
                 "shard files");
  if (auto meta = root.find("metadata");
      meta != root.end() && !meta->is_object() && !meta->is_null())
    return error("'metadata' must be an object");
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it.value().is_string())
      return error(absl::StrCat("tensor '", it.key(),
                                "': shard must be a file name, got ",
                                it.value().type_name()));
    std::string file = it.value().get<std::string>();
    if (!isPlainRelative(file))
      return error(absl::StrCat("tensor '", it.key(), "': shard '", file,
                                "' is not a file name inside the checkpoint "
                                "directory"));
    out.emplace(it.key(), std::move(file));
  }
  return absl::OkStatus();
}

} // namespace

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::Checkpoint(Checkpoint &&) noexcept = default;
Checkpoint &Checkpoint::operator=(Checkpoint &&) noexcept = default;
Checkpoint::~Checkpoint() = default;

absl::StatusOr<Checkpoint> Checkpoint::open(const std::string &path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    return absl::NotFoundError(
        absl::StrCat(path, ": no such checkpoint file or directory"));

  std::string singleFile;
  if (fs::is_directory(status)) {
    impl->directory = path;
    fs::path index = fs::path(path) / kIndexFileName;
    fs::path single = fs::path(path) / kSingleFileName;
    if (fs::exists(index, ec)) {
      impl->indexPath = index.string();
    } else if (fs::exists(single, ec)) {
      singleFile = kSingleFileName;
    } else {
      return absl::NotFoundError(
          absl::StrCat(path, ": not a checkpoint directory (it has neither ",
                       kIndexFileName, " nor ", kSingleFileName, ")"));
    }
  } else {
    fs::path p(path);
    impl->directory =
        p.has_parent_path() ? p.parent_path().string() : std::string(".");
    singleFile = p.filename().string();
  }

  Checkpoint checkpoint(std::move(impl));
  Impl &self = *checkpoint.impl_;
  if (!self.indexPath.empty()) {
    if (absl::Status s = parseIndex(self.indexPath, self.weightMap); !s.ok())
      return s;
  } else {
    // A single file is opened (and validated) right away: its header is the
    // only list of names there is.
    auto file = self.shard(singleFile);
    if (!file.ok())
      return file.status();
    for (const TensorView &t : (*file)->tensors())
      self.weightMap.emplace(t.name, singleFile);
  }
  return checkpoint;
}

const std::string &Checkpoint::path() const { return impl_->path; }
bool Checkpoint::isSharded() const { return !impl_->indexPath.empty(); }

bool Checkpoint::contains(const std::string &name) const {
  return impl_->weightMap.find(name) != impl_->weightMap.end();
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->weightMap.size());
  for (const auto &[name, file] : impl_->weightMap)
    out.push_back(name);
  return out;
}

std::vector<std::string> Checkpoint::files() const {
  std::vector<std::string> out;
  for (const auto &[name, file] : impl_->weightMap)
    out.push_back(impl_->shardPath(file));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::StatusOr<std::string> Checkpoint::fileOf(const std::string &name) const {
  auto it = impl_->weightMap.find(name);
  if (it == impl_->weightMap.end())
    return absl::NotFoundError(
        absl::StrCat("tensor '", name, "' not found in ", impl_->path));
  return impl_->shardPath(it->second);
}

absl::StatusOr<TensorView> Checkpoint::tensor(const std::string &name) const {
  auto it = impl_->weightMap.find(name);
  if (it == impl_->weightMap.end())
    return absl::NotFoundError(
        absl::StrCat("tensor '", name, "' not found in ", impl_->path));
  const std::string &file = it->second;
  auto shard = impl_->shard(file);
  if (!shard.ok()) {
    if (absl::IsNotFound(shard.status()) && !impl_->indexPath.empty())
      return absl::NotFoundError(absl::StrCat(
          "tensor '", name, "': shard '", file, "' listed in ",
          impl_->indexPath, " is missing (", shard.status().message(), ")"));
    return absl::Status(
        shard.status().code(),
        absl::StrCat("tensor '", name, "': ", shard.status().message()));
  }
  const TensorView *view = (*shard)->find(name);
  if (!view)
    return absl::DataLossError(
        absl::StrCat((*shard)->path(), ": tensor '", name, "' is listed in ",
                     kIndexFileName, " but not in this shard"));
  return *view;
}

absl::Status Checkpoint::validate() const {
  std::map<std::string, std::vector<std::string>> byFile;
  for (const auto &[name, file] : impl_->weightMap)
    byFile[file].push_back(name);
  for (const auto &[file, names] : byFile) {
    for (const std::string &name : names)
      if (auto t = tensor(name); !t.ok())
        return t.status();
    // Every tensor in the shard must be listed (and listed in this shard).
    auto shard = impl_->shard(file);
    for (const TensorView &t : (*shard)->tensors()) {
      auto listed = impl_->weightMap.find(t.name);
      if (listed == impl_->weightMap.end())
        return absl::DataLossError(absl::StrCat((*shard)->path(), ": tensor '",
                                                t.name, "' is not listed in ",
                                                impl_->indexPath));
      if (listed->second != file)
        return absl::DataLossError(absl::StrCat(
            (*shard)->path(), ": tensor '", t.name, "' is listed in ",
            impl_->indexPath, " under shard '", listed->second, "'"));
    }
  }
  return absl::OkStatus();
}

} // namespace checkpoint
} // namespace csa

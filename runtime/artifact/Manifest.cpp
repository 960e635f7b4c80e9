//===- Manifest.cpp - manifest.json and weights.json
//-----------------------===//
#include "runtime/artifact/Manifest.h"

#include "runtime/artifact/JsonFields.h"
#include "runtime/artifact/Sha256.h"

#include "absl/strings/str_cat.h"

#include <cctype>
#include <map>

namespace csa {
namespace artifact {

using detail::Fields;
using nlohmann::json;

const char *targetName(Target target) {
  switch (target) {
  case Target::HostX86_64:
    return "host-x86_64";
  case Target::NvptxSm90a:
    return "nvptx-sm_90a";
  }
  return "?";
}

std::optional<Target> parseTarget(std::string_view name) {
  for (Target t : {Target::HostX86_64, Target::NvptxSm90a})
    if (name == targetName(t))
      return t;
  return std::nullopt;
}

const FileEntry *Manifest::findFile(std::string_view path) const {
  for (const FileEntry &file : files)
    if (file.path == path)
      return &file;
  return nullptr;
}

bool isArtifactRelativePath(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.back() == '/')
    return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos)
      end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..")
      return false;
    start = end + 1;
  }
  for (char c : path)
    if (c == '\\' || c == '\0' || static_cast<unsigned char>(c) < 0x20)
      return false;
  return true;
}

std::string canonicalJson(const json &value) { return value.dump(); }

namespace {

void formatInto(const json &value, int indent, std::string &out) {
  std::string compact = value.dump();
  bool container = value.is_object() || value.is_array();
  if (!container || value.empty() || indent + compact.size() <= 100) {
    out += compact;
    return;
  }
  const std::string pad(size_t(indent + 2), ' ');
  out += value.is_object() ? "{\n" : "[\n";
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!first)
      out += ",\n";
    first = false;
    out += pad;
    if (value.is_object()) {
      std::string key = json(it.key()).dump();
      out += key + ": ";
      formatInto(it.value(), indent + 2, out);
    } else {
      formatInto(*it, indent + 2, out);
    }
  }
  out +=
      "\n" + std::string(size_t(indent), ' ') + (value.is_object() ? "}" : "]");
}

} // namespace

std::string formatJson(const json &value) {
  std::string out;
  formatInto(value, 0, out);
  return out + "\n";
}

absl::StatusOr<Manifest> parseManifest(const json &root,
                                       const std::string &source) {
  CSA_ARTIFACT_TRY_STATUS(detail::expectObject(root, source, ""));
  Fields f(root, source, "");
  Manifest m;
  // What the file is, then its version, before anything else: a newer
  // version may have any other shape.
  CSA_ARTIFACT_TRY(m.format, f.string("format", /*allowEmpty=*/true));
  if (m.format != kFormatName)
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": format: not a csa artifact: format is '",
                     m.format, "', expected '", kFormatName, "'"));
  CSA_ARTIFACT_TRY(m.formatVersion, f.integer("format_version", 1));
  if (m.formatVersion > kFormatVersion)
    return absl::FailedPreconditionError(
        absl::StrCat(source, ": artifact format version ", m.formatVersion,
                     " is newer than this runtime's ", kFormatVersion,
                     "; rebuild the runtime or recompile"));
  CSA_ARTIFACT_TRY_STATUS(f.onlyKnown(
      {"format", "format_version", "model", "model_hash", "schedule",
       "schedule_hash", "target", "created_by", "command", "files"}));
  CSA_ARTIFACT_TRY(m.model, f.string("model"));
  CSA_ARTIFACT_TRY(m.modelHash, f.string("model_hash"));
  if (!isSha256Hex(m.modelHash))
    return f.error("model_hash", absl::StrCat("'", m.modelHash,
                                              "' is not 64 lowercase hex "
                                              "digits (a SHA-256)"));
  CSA_ARTIFACT_TRY(m.schedule, f.string("schedule"));
  for (char c : m.schedule)
    if (!std::isgraph(static_cast<unsigned char>(c)))
      return f.error("schedule",
                     absl::StrCat("'", m.schedule,
                                  "' is not a compact schedule string "
                                  "(printable ASCII, no spaces)"));
  CSA_ARTIFACT_TRY(m.scheduleHash, f.string("schedule_hash"));
  if (!isSha256Hex(m.scheduleHash))
    return f.error("schedule_hash", absl::StrCat("'", m.scheduleHash,
                                                 "' is not 64 lowercase hex "
                                                 "digits (a SHA-256)"));
  CSA_ARTIFACT_TRY(std::string target, f.string("target"));
  auto parsed = parseTarget(target);
  if (!parsed)
    return f.error("target", absl::StrCat("unknown target '", target,
                                          "' (expected host-x86_64 or "
                                          "nvptx-sm_90a)"));
  m.target = *parsed;
  CSA_ARTIFACT_TRY(m.createdBy, f.string("created_by"));
  if (f.has("command")) {
    CSA_ARTIFACT_TRY(const json *command, f.array("command"));
    for (size_t i = 0; i < command->size(); ++i) {
      if (!(*command)[i].is_string())
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": ", detail::indexPath("command", i), ": expected a string"));
      m.command.push_back((*command)[i].get<std::string>());
    }
  }

  CSA_ARTIFACT_TRY(const json *files, f.array("files"));
  std::map<std::string, std::string> seen;
  for (size_t i = 0; i < files->size(); ++i) {
    std::string path = detail::indexPath("files", i);
    const json &value = (*files)[i];
    CSA_ARTIFACT_TRY_STATUS(detail::expectObject(value, source, path));
    Fields e(value, source, path);
    CSA_ARTIFACT_TRY_STATUS(e.onlyKnown({"path", "bytes", "sha256"}));
    FileEntry file;
    CSA_ARTIFACT_TRY(file.path, e.string("path"));
    if (!isArtifactRelativePath(file.path))
      return e.error("path", absl::StrCat("'", file.path,
                                          "' is not a relative path inside "
                                          "the artifact"));
    if (file.path == kManifestFile)
      return e.error("path", "manifest.json does not list itself");
    auto [it, inserted] = seen.emplace(file.path, path);
    if (!inserted)
      return e.error("path",
                     absl::StrCat("'", file.path, "' is listed twice (also ",
                                  it->second, ")"));
    CSA_ARTIFACT_TRY(int64_t bytes, e.integer("bytes", 0));
    file.bytes = uint64_t(bytes);
    CSA_ARTIFACT_TRY(file.sha256, e.string("sha256"));
    if (!isSha256Hex(file.sha256))
      return e.error("sha256", absl::StrCat("'", file.sha256,
                                            "' is not 64 lowercase hex "
                                            "digits"));
    m.files.push_back(std::move(file));
  }
  for (const char *required : {kPlanFile, kWeightsFile})
    if (!seen.count(required))
      return f.error("files", absl::StrCat("does not list ", required,
                                           " (every artifact has one)"));
  return m;
}

absl::StatusOr<Manifest> parseManifestText(const std::string &text,
                                           const std::string &source) {
  CSA_ARTIFACT_TRY(json root, detail::parseJsonText(text, source));
  return parseManifest(root, source);
}

json manifestToJson(const Manifest &m) {
  json files = json::array();
  for (const FileEntry &file : m.files)
    files.push_back(
        {{"path", file.path}, {"bytes", file.bytes}, {"sha256", file.sha256}});
  json out = {{"format", m.format},
          {"format_version", m.formatVersion},
          {"model", m.model},
          {"model_hash", m.modelHash},
          {"schedule", m.schedule},
          {"schedule_hash", m.scheduleHash},
          {"target", targetName(m.target)},
          {"created_by", m.createdBy},
          {"files", std::move(files)}};
  if (!m.command.empty())
    out["command"] = m.command;
  return out;
}

bool WeightsManifest::isIgnored(std::string_view name) const {
  for (const std::string &prefix : ignoredPrefixes)
    if (name.substr(0, prefix.size()) == prefix)
      return true;
  return false;
}

absl::StatusOr<WeightsManifest> parseWeights(const json &root,
                                             const std::string &source) {
  CSA_ARTIFACT_TRY_STATUS(detail::expectObject(root, source, ""));
  Fields f(root, source, "");
  WeightsManifest w;
  CSA_ARTIFACT_TRY(w.version, f.integer("version", 1));
  if (w.version > kWeightsVersion)
    return absl::FailedPreconditionError(
        absl::StrCat(source, ": weights manifest version ", w.version,
                     " is newer than this runtime's ", kWeightsVersion,
                     "; rebuild the runtime or recompile"));
  CSA_ARTIFACT_TRY_STATUS(
      f.onlyKnown({"version", "tensors", "ignored_prefixes"}));
  CSA_ARTIFACT_TRY(const json *tensors, f.array("tensors"));
  std::map<std::string, std::string> seen;
  for (size_t i = 0; i < tensors->size(); ++i) {
    std::string path = detail::indexPath("tensors", i);
    const json &value = (*tensors)[i];
    CSA_ARTIFACT_TRY_STATUS(detail::expectObject(value, source, path));
    Fields t(value, source, path);
    CSA_ARTIFACT_TRY_STATUS(t.onlyKnown({"name", "dtype", "shape"}));
    WeightEntry entry;
    CSA_ARTIFACT_TRY(entry.name, t.string("name"));
    auto [it, inserted] = seen.emplace(entry.name, path);
    if (!inserted)
      return t.error("name",
                     absl::StrCat("tensor '", entry.name,
                                  "' is listed twice (also ", it->second, ")"));
    CSA_ARTIFACT_TRY(std::string dtype, t.string("dtype"));
    auto parsed = checkpoint::parseDType(dtype);
    if (!parsed)
      return t.error("dtype", absl::StrCat("unknown dtype '", dtype,
                                           "' (safetensors spelling: BF16, "
                                           "F32, F8_E4M3, ...)"));
    entry.dtype = *parsed;
    CSA_ARTIFACT_TRY(const json *shape, t.array("shape"));
    for (size_t d = 0; d < shape->size(); ++d) {
      std::string dimPath = detail::indexPath(t.pathOf("shape"), d);
      CSA_ARTIFACT_TRY(int64_t dim,
                       Fields::integerValue((*shape)[d], 0,
                                            std::numeric_limits<int64_t>::max(),
                                            [&](const std::string &what) {
                                              return t.errorAt(dimPath, what);
                                            }));
      entry.shape.push_back(dim);
    }
    w.tensors.push_back(std::move(entry));
  }
  if (f.has("ignored_prefixes")) {
    CSA_ARTIFACT_TRY(const json *prefixes, f.array("ignored_prefixes"));
    for (size_t i = 0; i < prefixes->size(); ++i) {
      const json &value = (*prefixes)[i];
      if (!value.is_string() || value.get<std::string>().empty())
        return f.errorAt(detail::indexPath("ignored_prefixes", i),
                         "must be a non-empty string");
      w.ignoredPrefixes.push_back(value.get<std::string>());
    }
  }
  for (const WeightEntry &entry : w.tensors)
    if (w.isIgnored(entry.name))
      return f.errorAt(
          seen[entry.name],
          absl::StrCat("tensor '", entry.name, "' is under an ignored prefix"));
  return w;
}

absl::StatusOr<WeightsManifest> parseWeightsText(const std::string &text,
                                                 const std::string &source) {
  CSA_ARTIFACT_TRY(json root, detail::parseJsonText(text, source));
  return parseWeights(root, source);
}

json weightsToJson(const WeightsManifest &w) {
  json tensors = json::array();
  for (const WeightEntry &entry : w.tensors)
    tensors.push_back({{"name", entry.name},
                       {"dtype", checkpoint::dtypeName(entry.dtype)},
                       {"shape", entry.shape}});
  return {{"version", w.version},
          {"tensors", std::move(tensors)},
          {"ignored_prefixes", w.ignoredPrefixes}};
}

} // namespace artifact
} // namespace csa

//===- Artifact.cpp - Opening and checking a compiled artifact
//-------------===//
#include "runtime/artifact/Artifact.h"

#include "runtime/artifact/JsonFields.h"
#include "runtime/artifact/Sha256.h"

#include "absl/strings/str_cat.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

namespace csa {
namespace artifact {

namespace fs = std::filesystem;

namespace {

/// The same status with "artifact DIR: " in front.
absl::Status prefixed(const std::string &dir, const absl::Status &status) {
  return absl::Status(status.code(),
                      absl::StrCat("artifact ", dir, ": ", status.message()));
}

absl::StatusOr<std::string> readFile(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad())
    return absl::DataLossError(absl::StrCat(path.string(), ": read error"));
  return buffer.str();
}

/// Every listed file is there with its size and (optionally) checksum.
absl::Status checkFile(const std::string &dir, const FileEntry &file,
                       bool verifyChecksum) {
  fs::path path = fs::path(dir) / file.path;
  std::error_code ec;
  fs::file_status status = fs::symlink_status(path, ec);
  if (ec || !fs::exists(status))
    return absl::NotFoundError(absl::StrCat(
        "file '", file.path, "' listed in manifest.json is missing"));
  if (!fs::is_regular_file(status))
    return absl::DataLossError(absl::StrCat(
        "'", file.path, "' listed in manifest.json is not a regular file"));
  uint64_t size = fs::file_size(path, ec);
  if (ec)
    return absl::DataLossError(absl::StrCat(
        "file '", file.path, "': cannot read its size: ", ec.message()));
  if (size < file.bytes)
    return absl::DataLossError(
        absl::StrCat("file '", file.path, "' is truncated: ", size,
                     " bytes on disk, manifest.json says ", file.bytes));
  if (size > file.bytes)
    return absl::DataLossError(
        absl::StrCat("file '", file.path, "' has ", size,
                     " bytes on disk, manifest.json says ", file.bytes,
                     " (changed after the compile?)"));
  if (!verifyChecksum)
    return absl::OkStatus();
  auto digest = sha256File(path.string());
  if (!digest.ok())
    return absl::DataLossError(
        absl::StrCat("file '", file.path, "': ", digest.status().message()));
  if (*digest != file.sha256)
    return absl::DataLossError(
        absl::StrCat("file '", file.path, "' is corrupted: its SHA-256 is ",
                     *digest, ", manifest.json says ", file.sha256));
  return absl::OkStatus();
}

/// Nothing but the manifest and the listed files (directories aside).
absl::Status checkNoUnlisted(const std::string &dir, const Manifest &manifest) {
  std::set<std::string> listed;
  for (const FileEntry &file : manifest.files)
    listed.insert(file.path);
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec))
      continue;
    std::string relative =
        fs::path(it->path()).lexically_relative(dir).generic_string();
    if (relative == kManifestFile || listed.count(relative))
      continue;
    return absl::DataLossError(absl::StrCat(
        "file '", relative,
        "' is not listed in manifest.json (remove it or recompile)"));
  }
  if (ec)
    return absl::DataLossError(
        absl::StrCat("cannot list the directory: ", ec.message()));
  return absl::OkStatus();
}

/// Kernel objects are listed files under kernels/; weight arguments are
/// weights.json tensors.
absl::Status crossCheck(const Manifest &manifest, const Plan &plan,
                        const WeightsManifest &weights) {
  std::set<std::string> tensorNames;
  for (const WeightEntry &entry : weights.tensors)
    tensorNames.insert(entry.name);
  auto error = [](const std::string &path, const std::string &what) {
    return absl::InvalidArgumentError(
        absl::StrCat(kPlanFile, ": ", path, ": ", what));
  };
  for (const char *name : {"prefill", "decode"}) {
    const std::vector<KernelCall> &calls =
        std::string_view(name) == "prefill" ? plan.prefill : plan.decode;
    for (size_t i = 0; i < calls.size(); ++i) {
      const KernelCall &call = calls[i];
      std::string path = absl::StrCat("entry_points.", name, "[", i, "]");
      const bool builtin = isBuiltinKernel(call.kernel); // no object
      if (!builtin && call.object.rfind(std::string(kKernelsDir) + "/", 0) != 0)
        return error(path + ".object",
                     absl::StrCat("'", call.object, "' is not under kernels/"));
      if (!builtin && !manifest.findFile(call.object))
        return error(path + ".object",
                     absl::StrCat("'", call.object,
                                  "' is not a file of the artifact (not in "
                                  "manifest.json files)"));
      for (size_t a = 0; a < call.args.size(); ++a) {
        const KernelArg &arg = call.args[a];
        if (arg.kind == ArgKind::Weight && !tensorNames.count(arg.name))
          return error(
              absl::StrCat(path, ".args[", a, "].weight"),
              absl::StrCat("tensor '", arg.name, "' is not in weights.json"));
      }
    }
  }
  return absl::OkStatus();
}

std::string describe(checkpoint::DType dtype,
                     const std::vector<int64_t> &shape) {
  return absl::StrCat(checkpoint::dtypeName(dtype), " ",
                      checkpoint::formatShape(shape));
}

} // namespace

std::string Artifact::pathOf(const std::string &relative) const {
  return (fs::path(directory_) / relative).string();
}

absl::StatusOr<Artifact> Artifact::open(const std::string &directory,
                                        const OpenOptions &options) {
  std::error_code ec;
  if (!fs::exists(directory, ec))
    return absl::NotFoundError(
        absl::StrCat("artifact ", directory, ": no such directory"));
  if (!fs::is_directory(directory, ec))
    return absl::InvalidArgumentError(
        absl::StrCat("artifact ", directory,
                     ": not a directory (an artifact is the "
                     "directory csa-compile writes)"));
  fs::path manifestPath = fs::path(directory) / kManifestFile;
  if (!fs::exists(manifestPath, ec))
    return absl::NotFoundError(absl::StrCat(
        "artifact ", directory,
        ": no manifest.json (not an artifact, or its compile did not "
        "finish)"));

  Artifact artifact;
  artifact.directory_ = directory;
  auto text = readFile(manifestPath);
  if (!text.ok())
    return prefixed(directory, text.status());
  auto manifest = parseManifestText(*text, kManifestFile);
  if (!manifest.ok())
    return prefixed(directory, manifest.status());
  artifact.manifest_ = std::move(*manifest);

  for (const FileEntry &file : artifact.manifest_.files)
    if (absl::Status s = checkFile(directory, file, options.verifyChecksums);
        !s.ok())
      return prefixed(directory, s);
  if (absl::Status s = checkNoUnlisted(directory, artifact.manifest_); !s.ok())
    return prefixed(directory, s);

  // What follows reads the bytes it checks (a file swapped after the pass
  // above is refused, not parsed).
  auto verified = [&](const std::string &relative) -> absl::StatusOr<std::string> {
    if (!options.verifyChecksums)
      return readFile(fs::path(directory) / relative);
    return artifact.readVerified(relative);
  };
  // The model hash is the config's: recomputed, not trusted.
  if (artifact.manifest_.findFile(kConfigFile)) {
    auto configText = verified(kConfigFile);
    if (!configText.ok())
      return prefixed(directory, configText.status());
    auto config = detail::parseJsonText(*configText, kConfigFile);
    if (!config.ok())
      return prefixed(directory, config.status());
    if (std::string hash = sha256Hex(canonicalJson(*config)); hash != artifact.manifest_.modelHash)
      return prefixed(directory,
                      absl::DataLossError(absl::StrCat(
                          "config.json hashes to ", hash, ", manifest.json's model_hash is ",
                          artifact.manifest_.modelHash, " (one of them was edited)")));
  }

  auto planText = verified(kPlanFile);
  if (!planText.ok())
    return prefixed(directory, planText.status());
  auto plan = parsePlanText(*planText, kPlanFile);
  if (!plan.ok())
    return prefixed(directory, plan.status());
  artifact.plan_ = std::move(*plan);

  auto weightsText = verified(kWeightsFile);
  if (!weightsText.ok())
    return prefixed(directory, weightsText.status());
  auto weights = parseWeightsText(*weightsText, kWeightsFile);
  if (!weights.ok())
    return prefixed(directory, weights.status());
  artifact.weights_ = std::move(*weights);

  if (absl::Status s =
          crossCheck(artifact.manifest_, artifact.plan_, artifact.weights_);
      !s.ok())
    return prefixed(directory, s);
  return artifact;
}

absl::StatusOr<std::string> Artifact::readVerified(const std::string &relative) const {
  const FileEntry *entry = manifest_.findFile(relative);
  if (!entry)
    return absl::NotFoundError(absl::StrCat("artifact ", directory_, ": '", relative,
                                            "' is not listed in manifest.json"));
  auto bytes = readFile(fs::path(directory_) / relative);
  if (!bytes.ok())
    return prefixed(directory_, bytes.status());
  if (bytes->size() != entry->bytes || sha256Hex(*bytes) != entry->sha256)
    return absl::DataLossError(absl::StrCat(
        "artifact ", directory_, ": file '", relative,
        "' changed after the artifact was opened (its size or SHA-256 is no longer "
        "manifest.json's); nothing of it was loaded"));
  return std::move(*bytes);
}

absl::Status Artifact::checkKernelRecord(const std::string &object, const char *configText,
                                         const char *schedule) const {
  auto fail = [&](const std::string &why) {
    return absl::FailedPreconditionError(
        absl::StrCat("artifact ", directory_, ": ", object, " ", why));
  };
  if (!configText || !schedule)
    return fail("records no model config and schedule (csa_kernels_config, "
                "csa_kernels_schedule): compiled by an older csa-compile? Recompile the artifact");
  auto config = detail::parseJsonText(configText, object + "'s csa_kernels_config");
  if (!config.ok())
    return fail(std::string(config.status().message()));
  if (std::string hash = sha256Hex(canonicalJson(*config)); hash != manifest_.modelHash)
    return fail(absl::StrCat("was built for another model config (its config hashes to ", hash,
                             ", manifest.json's model_hash is ", manifest_.modelHash, ")"));
  if (manifest_.schedule != schedule)
    return fail(absl::StrCat("was built for schedule '", schedule, "', the artifact's is '",
                             manifest_.schedule, "'"));
  return absl::OkStatus();
}

absl::Status checkWeights(const WeightsManifest &weights,
                          const checkpoint::Checkpoint &checkpoint,
                          const std::string &artifactName, bool allowUnused,
                          std::vector<std::string> *unused) {
  std::string first;
  int64_t problems = 0;
  std::vector<std::string> missing;
  auto note = [&](std::string what) {
    if (problems++ == 0)
      first = std::move(what);
  };
  std::set<std::string> expected;
  for (const WeightEntry &entry : weights.tensors) {
    expected.insert(entry.name);
    if (!checkpoint.contains(entry.name)) {
      missing.push_back(entry.name);
      note(absl::StrCat("tensor '", entry.name, "' (",
                        describe(entry.dtype, entry.shape),
                        ") is not in the checkpoint"));
      continue;
    }
    auto view = checkpoint.tensor(entry.name);
    if (!view.ok()) {
      if (problems == 0)
        return view.status(); // a damaged checkpoint, not a mismatch
      continue;
    }
    if (view->dtype != entry.dtype || view->shape != entry.shape)
      note(absl::StrCat("tensor '", entry.name, "' is ",
                        describe(view->dtype, view->shape),
                        " in the checkpoint, the artifact expects ",
                        describe(entry.dtype, entry.shape)));
  }
  for (const std::string &name : checkpoint.names()) {
    if (expected.count(name) || weights.isIgnored(name))
      continue;
    if (allowUnused) {
      if (unused)
        unused->push_back(name);
      continue;
    }
    note(absl::StrCat("the checkpoint has tensor '", name,
                      "', which the artifact does not use (--allow-unused-weights "
                      "runs a schedule that needs fewer tensors)"));
  }
  if (problems == 0)
    return absl::OkStatus();
  std::string lacking;
  if (missing.size() > 1) {
    lacking = absl::StrCat("; the checkpoint lacks ", missing.size(), " tensors the artifact needs: ");
    for (size_t i = 0; i < missing.size() && i < 12; ++i)
      absl::StrAppend(&lacking, i ? ", " : "", missing[i]);
    if (missing.size() > 12)
      absl::StrAppend(&lacking, ", ...");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint ", checkpoint.path(), " does not match ", artifactName,
      ": weights for another model? ", first,
      problems > 1 ? absl::StrCat(" (and ", problems - 1, " more mismatches)")
                   : std::string(),
      lacking));
}

absl::Status checkWeights(const Artifact &artifact,
                          const checkpoint::Checkpoint &checkpoint,
                          bool allowUnused, std::vector<std::string> *unused) {
  const Manifest &m = artifact.manifest();
  return checkWeights(artifact.weights(), checkpoint,
                      absl::StrCat("artifact ", artifact.directory(),
                                   " (model '", m.model, "', schedule '",
                                   m.schedule, "')"),
                      allowUnused, unused);
}

} // namespace artifact
} // namespace csa

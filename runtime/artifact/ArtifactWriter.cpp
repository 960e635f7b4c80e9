//===- ArtifactWriter.cpp - Writing a compiled artifact ------------------===//
#include "runtime/artifact/ArtifactWriter.h"

#include "runtime/artifact/Artifact.h"
#include "runtime/artifact/Sha256.h"
#include "runtime/support/AtomicFile.h"

#include "absl/strings/str_cat.h"

#include <filesystem>
#include <system_error>

namespace csa {
namespace artifact {

namespace fs = std::filesystem;

namespace {

absl::Status writeBytes(const fs::path &path, const std::string &bytes) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec)
    return absl::InternalError(absl::StrCat(path.parent_path().string(),
                                            ": cannot create: ", ec.message()));
  return support::writeStagedFile(path.string(), bytes);
}

} // namespace

void ArtifactWriter::setModel(std::string name, const nlohmann::json &config) {
  manifest_.model = std::move(name);
  manifest_.modelHash = sha256Hex(canonicalJson(config));
}

void ArtifactWriter::setSchedule(std::string schedule,
                                 const nlohmann::json &detail) {
  manifest_.schedule = std::move(schedule);
  manifest_.scheduleHash = sha256Hex(canonicalJson(detail));
}

absl::Status ArtifactWriter::addFile(const std::string &path,
                                     std::string bytes) {
  // Kernels, and the config the artifact was compiled for.
  if (!isArtifactRelativePath(path) ||
      (path != "config.json" &&
       path.rfind(std::string(kKernelsDir) + "/", 0) != 0))
    return absl::InvalidArgumentError(absl::StrCat(
        "artifact file '", path,
        "': must be config.json or a relative path under kernels/ (manifest.json, "
        "plan.json and weights.json are written by the writer)"));
  files_[path] = std::move(bytes);
  return absl::OkStatus();
}

absl::StatusOr<Manifest>
ArtifactWriter::write(const std::string &directory) const {
  std::error_code ec;
  fs::path dir(directory);
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec) ||
        (!fs::is_empty(dir, ec) && !fs::exists(dir / kManifestFile, ec)))
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing to replace ", directory,
          ": it exists and is not an artifact (no manifest.json)"));
  }
  // Built in a staging directory of its own beside the target and swapped
  // in whole (runtime/support/AtomicFile.h): the old artifact stays until
  // the new one is complete and checked, and two writers never mix files.
  auto staging = support::makeStagingDirectory(directory);
  if (!staging.ok())
    return staging.status();
  fs::path partial = *staging;
  auto discard = [&](absl::Status st) {
    support::discardStagingDirectory(*staging);
    return st;
  };

  Manifest manifest = manifest_;
  manifest.format = kFormatName;
  manifest.formatVersion = kFormatVersion;
  manifest.files.clear();
  std::map<std::string, std::string> all = files_;
  all[kPlanFile] = formatJson(planToJson(plan_));
  all[kWeightsFile] = formatJson(weightsToJson(weights_));
  for (const auto &[path, bytes] : all) {
    if (absl::Status s = writeBytes(partial / path, bytes); !s.ok())
      return discard(s);
    manifest.files.push_back({path, bytes.size(), sha256Hex(bytes)});
  }
  // The manifest last: a directory without one is not an artifact.
  if (absl::Status s = writeBytes(partial / kManifestFile,
                                  formatJson(manifestToJson(manifest)));
      !s.ok())
    return discard(s);

  auto check = Artifact::open(partial.string());
  if (!check.ok())
    return discard(absl::Status(
        check.status().code(),
        absl::StrCat("the artifact csa would write is invalid: ", check.status().message())));
  if (absl::Status st = support::commitDirectory(partial.string(), directory); !st.ok())
    return st;
  return manifest;
}

} // namespace artifact
} // namespace csa

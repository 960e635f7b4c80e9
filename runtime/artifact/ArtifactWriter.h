//===- ArtifactWriter.h - Writing a compiled artifact -----------*- C++ -*-===//
//
// What csa-compile uses to write an artifact (docs/artifact-format.md):
// set the model, schedule, target, producer, plan and weight manifest, add
// the kernel files, write(). The writer computes every checksum, writes the
// artifact into `DIR.partial`, opens it with Artifact::open (so it never
// produces an artifact the runtime rejects) and only then moves it to DIR.
// An existing DIR is replaced only if it is empty or an artifact (has a
// manifest.json); anything else is refused.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_ARTIFACT_ARTIFACTWRITER_H
#define CSA_RUNTIME_ARTIFACT_ARTIFACTWRITER_H

#include "runtime/artifact/Manifest.h"
#include "runtime/artifact/Plan.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <nlohmann/json.hpp>

#include <map>
#include <string>

namespace csa {
namespace artifact {

class ArtifactWriter {
public:
  /// `config` is the model's config JSON; model_hash is
  /// sha256Hex(canonicalJson(config)).
  void setModel(std::string name, const nlohmann::json &config);
  /// `schedule` is the compact string ("WWF.C.R."); `detail` a JSON
  /// description that fixes every layer's mode, ratio and sources (the
  /// string alone does not show overridden sources); schedule_hash is
  /// sha256Hex(canonicalJson(detail)).
  void setSchedule(std::string schedule, const nlohmann::json &detail);
  void setTarget(Target target) { manifest_.target = target; }
  /// "csa-compile 0.1.0 (commit 9b5dea5)" (tools/support/Version.h).
  void setCreatedBy(std::string createdBy) {
    manifest_.createdBy = std::move(createdBy);
  }
  /// The command line that writes the artifact (provenance; optional).
  void setCommand(std::vector<std::string> command) { manifest_.command = std::move(command); }
  void setPlan(Plan plan) { plan_ = std::move(plan); }
  void setWeights(WeightsManifest weights) { weights_ = std::move(weights); }

  /// Adds a file (kernel object, PTX, ...) at an artifact-relative path
  /// under kernels/. Replaces an earlier file of the same path.
  absl::Status addFile(const std::string &path, std::string bytes);

  /// Writes the artifact to `directory` and returns its manifest.
  absl::StatusOr<Manifest> write(const std::string &directory) const;

private:
  Manifest manifest_;
  Plan plan_;
  WeightsManifest weights_;
  std::map<std::string, std::string> files_;
};

} // namespace artifact
} // namespace csa

#endif // CSA_RUNTIME_ARTIFACT_ARTIFACTWRITER_H

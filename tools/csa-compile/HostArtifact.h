//===- HostArtifact.h - Writing a host artifact (plain C++) ------*- C++ -*-===//
//
// The part of csa-compile that touches JSON, compiled with exceptions as
// nlohmann-json needs (the MLIR side of the tool is built without them, and
// an inline JSON function instantiated there would abort where this code
// expects an exception).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_CSA_COMPILE_HOSTARTIFACT_H
#define CSA_TOOLS_CSA_COMPILE_HOSTARTIFACT_H

#include "models/config/ModelConfig.h"
#include "runtime/artifact/Plan.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <string>
#include <vector>

namespace csa {

/// The flat config JSON text an artifact is compiled for (the csa.config
/// attribute): `config` with its schedule written into the layer lists.
std::string artifactConfigText(const ModelConfig &config);

/// The schedule letters of the config text `configText` (csa.config), as
/// the artifact's manifest records them.
absl::StatusOr<std::string> artifactScheduleLetters(const std::string &configText);

struct HostArtifactParts {
  std::string model;        ///< csa.model
  std::string configText;   ///< csa.config
  std::string schedule;     ///< csa.schedule letters (checked)
  artifact::Plan plan;      ///< from buildHostPlan
  std::string library;      ///< the bytes of kernels/host.so
  std::string listing;      ///< kernels/host.json: each kernel's signature
  std::string ptx;          ///< kernels/kernels.ptx (optional: --with-ptx)
  std::string ptxListing;   ///< kernels/kernels.json, with ptx
  std::vector<std::string> command; ///< csa-compile's argv (manifest.json's command)
  /// The compiled graph's IR (generic form, no locations): its SHA-256 is
  /// part of the schedule detail, so an edited stage gets its own
  /// schedule_hash.
  std::string graphText;
  /// csa.index_publication ("owner" or "release"): a release artifact's
  /// schedule detail says so.
  std::string indexPublication = "owner";
};

/// Writes `directory`: manifest, plan.json, weights.json (the weight
/// manifest of the config), config.json and kernels/host.so. Errors name
/// the problem (a config that does not parse, a schedule mismatch, a plan
/// naming a tensor the config has no weight for, ...).
absl::Status writeHostArtifact(const HostArtifactParts &parts,
                               const std::string &directory);

} // namespace csa

#endif // CSA_TOOLS_CSA_COMPILE_HOSTARTIFACT_H

//===- Artifact.h - Opening and checking a compiled artifact ----*- C++ -*-===//
//
// An artifact is the directory csa-compile writes and csa-run loads
// (docs/artifact-format.md):
//
//   manifest.json   format, version, model + hash, schedule + hash, target,
//                   producer, and {path, bytes, sha256} of every other file
//   plan.json       caches, transients, max_context, kernel calls (Plan.h)
//   weights.json    the tensors the kernels read (Manifest.h)
//   kernels/...     generated objects, opaque here (only checksummed)
//
// Artifact::open checks everything a load depends on before anything runs,
// and never crashes on a bad directory: the manifest is present and JSON,
// `format` and `format_version` are ones this runtime reads, every listed
// file is present with its size and checksum (a truncated or corrupted file
// is named), no unlisted file is present, config.json (where listed) hashes
// to the manifest's model_hash, plan.json and weights.json (parsed from the
// bytes that were hashed) follow
// their schemas (errors name the field path), every kernel's object is a
// listed file under kernels/, and every weight argument is a weights.json
// tensor. Messages start with "artifact DIR: ".
//
// checkWeights compares a checkpoint with weights.json before weights are
// loaded ("weights for another model" names the first mismatching tensor);
// checkContext (Plan.h) compares a context length with the plan.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_ARTIFACT_ARTIFACT_H
#define CSA_RUNTIME_ARTIFACT_ARTIFACT_H

#include "runtime/artifact/Manifest.h"
#include "runtime/artifact/Plan.h"
#include "runtime/checkpoint/Checkpoint.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <string>

namespace csa {
namespace artifact {

struct OpenOptions {
  /// Hash every listed file (sizes are always checked). Off only for tools
  /// that inspect a manifest they do not run.
  bool verifyChecksums = true;
};

class Artifact {
public:
  static absl::StatusOr<Artifact> open(const std::string &directory,
                                       const OpenOptions &options = {});

  const std::string &directory() const { return directory_; }
  const Manifest &manifest() const { return manifest_; }
  const Plan &plan() const { return plan_; }
  const WeightsManifest &weights() const { return weights_; }
  /// `directory/relative` (relative as the manifest and plan spell it).
  std::string pathOf(const std::string &relative) const;
  /// The bytes of the listed file `relative`, read once and checked against
  /// the manifest's size and SHA-256 (a file changed since open() is an
  /// error naming it). Loaders use these bytes, so what runs is what was
  /// hashed (docs/files.md, "The artifact's code").
  absl::StatusOr<std::string> readVerified(const std::string &relative) const;
  /// OK when a kernel library's own record of what it was built for (the
  /// config text and schedule letters it exports: csa_kernels_config and
  /// csa_kernels_schedule) is this artifact's: the config's canonical JSON
  /// hashes to the manifest's model_hash and the letters are its schedule.
  /// Null records (a library from before the record) are an error that says
  /// to recompile. `object` names the library in messages.
  absl::Status checkKernelRecord(const std::string &object, const char *configText,
                                 const char *schedule) const;

private:
  Artifact() = default;
  std::string directory_;
  Manifest manifest_;
  Plan plan_;
  WeightsManifest weights_;
};

/// OK if `checkpoint` holds every weights.json tensor with its dtype and
/// shape, and nothing else outside the ignored prefixes. Otherwise a
/// FailedPrecondition naming the first mismatch in weights.json order, e.g.
///   checkpoint /tmp/w does not match artifact /tmp/a (model 'tiny',
///   schedule 'WWF.C.R.'): weights for another model? tensor 'embed.weight'
///   is BF16 [512, 64] in the checkpoint, the artifact expects BF16
///   [1024, 64]
/// (then, for a missing tensor, "tensor 'x' (BF16 [..]) is not in the
/// checkpoint"; for an extra one, "the checkpoint has tensor 'x', which the
/// artifact does not use"). Checkpoint read errors pass through.
/// When tensors are missing, the message also lists them (the first 12 and
/// the count), so a user sees what another schedule needs.
///
/// `allowUnused`: tensors of the checkpoint that the artifact does not use
/// (another schedule's indexers and compressors) are no error; their names
/// go to `unused` when it is given.
absl::Status checkWeights(const Artifact &artifact,
                          const checkpoint::Checkpoint &checkpoint,
                          bool allowUnused = false,
                          std::vector<std::string> *unused = nullptr);
/// The same against a weights manifest; `artifactName` names it in messages.
absl::Status checkWeights(const WeightsManifest &weights,
                          const checkpoint::Checkpoint &checkpoint,
                          const std::string &artifactName,
                          bool allowUnused = false,
                          std::vector<std::string> *unused = nullptr);

} // namespace artifact
} // namespace csa

#endif // CSA_RUNTIME_ARTIFACT_ARTIFACT_H

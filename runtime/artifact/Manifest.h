//===- Manifest.h - manifest.json and weights.json --------------*- C++ -*-===//
//
// The two small JSON files of an artifact besides the plan:
//
//   manifest.json  what the artifact is (format and version, model and its
//                  config hash, schedule and its hash, target, producer) and
//                  every other file with its size and SHA-256;
//   weights.json   the tensors (name, dtype, shape) the artifact was compiled
//                  for, so a checkpoint is checked before anything runs.
//
// The schemas are documented in docs/artifact-format.md. Parsers name the
// file and the field path of every error; the format version is checked
// before anything else, so a newer artifact gets "artifact format version 2
// is newer than this runtime's 1; rebuild the runtime or recompile" rather
// than a complaint about a field it does not know.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_ARTIFACT_MANIFEST_H
#define CSA_RUNTIME_ARTIFACT_MANIFEST_H

#include "runtime/checkpoint/DType.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace csa {
namespace artifact {

constexpr const char *kFormatName = "csa-artifact";
/// The artifact format version this runtime writes and reads.
constexpr int64_t kFormatVersion = 1;
/// The weights.json schema version this runtime reads.
constexpr int64_t kWeightsVersion = 1;

constexpr const char *kManifestFile = "manifest.json";
constexpr const char *kPlanFile = "plan.json";
constexpr const char *kWeightsFile = "weights.json";
/// The config the artifact was compiled for (its canonical JSON hashes to
/// model_hash).
constexpr const char *kConfigFile = "config.json";
constexpr const char *kKernelsDir = "kernels";

enum class Target : uint8_t {
  HostX86_64, ///< "host-x86_64": host code for the CPU backend
  NvptxSm90a, ///< "nvptx-sm_90a": PTX / cubins for Hopper
};
const char *targetName(Target target);
std::optional<Target> parseTarget(std::string_view name);

/// One file of the artifact other than manifest.json.
struct FileEntry {
  std::string path; ///< relative, '/'-separated ("kernels/host.so")
  uint64_t bytes = 0;
  std::string sha256; ///< 64 lowercase hex digits
};

struct Manifest {
  std::string format = kFormatName;
  int64_t formatVersion = kFormatVersion;
  std::string model;        ///< e.g. "tiny", "deepseek-v4.1-flash"
  std::string modelHash;    ///< SHA-256 of canonicalJson(config)
  std::string schedule;     ///< compact schedule string ("WWF.C.R.")
  std::string scheduleHash; ///< SHA-256 of canonicalJson(schedule detail)
  Target target = Target::HostX86_64;
  std::string createdBy; ///< "csa-compile 0.1.0 (commit 9b5dea5)"
  /// The command line that wrote the artifact, argv[0] first (optional: an
  /// artifact from a writer that did not record it has none).
  std::vector<std::string> command;
  std::vector<FileEntry> files;

  const FileEntry *findFile(std::string_view path) const;
};

/// Whether `path` may name a file inside an artifact: relative, '/'
/// separators, no empty, "." or ".." component, no backslash or NUL.
bool isArtifactRelativePath(std::string_view path);

absl::StatusOr<Manifest>
parseManifest(const nlohmann::json &root,
              const std::string &source = kManifestFile);
absl::StatusOr<Manifest>
parseManifestText(const std::string &text,
                  const std::string &source = kManifestFile);
nlohmann::json manifestToJson(const Manifest &manifest);

/// One tensor the artifact's kernels read.
struct WeightEntry {
  std::string name;
  checkpoint::DType dtype = checkpoint::DType::BF16;
  std::vector<int64_t> shape;
};

struct WeightsManifest {
  int64_t version = kWeightsVersion;
  /// In model order (the order checkWeights reports the first mismatch in).
  std::vector<WeightEntry> tensors;
  /// Checkpoint tensors under these name prefixes are not part of the
  /// artifact and are ignored ("mtp.", "vision.", ...). Any other checkpoint
  /// tensor not in `tensors` is a mismatch.
  std::vector<std::string> ignoredPrefixes;

  bool isIgnored(std::string_view name) const;
};

absl::StatusOr<WeightsManifest>
parseWeights(const nlohmann::json &root,
             const std::string &source = kWeightsFile);
absl::StatusOr<WeightsManifest>
parseWeightsText(const std::string &text,
                 const std::string &source = kWeightsFile);
nlohmann::json weightsToJson(const WeightsManifest &weights);

/// The canonical text of a JSON value: object keys sorted, no whitespace,
/// numbers as nlohmann-json prints them (integers exactly, floats as the
/// shortest text that reads back to the same double), strings as UTF-8.
/// model_hash is sha256Hex(canonicalJson(config)).
std::string canonicalJson(const nlohmann::json &value);

/// How the writer lays the JSON files out for people: objects and arrays
/// that fit in 100 columns on one line, larger ones one member per line
/// (indented by 2), so weights.json has a line per tensor and plan.json a
/// line per cache and argument. Ends with a newline.
std::string formatJson(const nlohmann::json &value);

} // namespace artifact
} // namespace csa

#endif // CSA_RUNTIME_ARTIFACT_MANIFEST_H

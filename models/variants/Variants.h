//===- Variants.h - Named model variants -------------------------*- C++ -*-===//
//
// The variants a user can name on the command line (`--variant=`): the
// released model, a tiny model for tests with every structure present, and
// ablations a researcher asks for. Configs are embedded in the binary, so
// named variants work from any directory.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_MODELS_VARIANTS_VARIANTS_H
#define CSA_MODELS_VARIANTS_VARIANTS_H

#include "models/config/ModelConfig.h"
#include "models/schedule/Schedule.h"

#include "absl/status/statusor.h"

#include <string>
#include <vector>

namespace csa {

struct ModelVariant {
  std::string name; ///< variant name, or the config path
  ModelConfig config;
  Schedule schedule;
};

struct VariantInfo {
  std::string name;
  std::string description;
};

/// Every named variant, in the order `csa-compile --list-variants` prints.
const std::vector<VariantInfo> &namedVariants();

/// The text of an embedded config: "deepseek-v4.1-flash",
/// "deepseek-v4.1-flash-hf" (same model, Hugging Face layout) or "tiny".
absl::StatusOr<std::string> embeddedConfig(const std::string &name);

/// Builds a named variant.
absl::StatusOr<ModelVariant> loadVariant(const std::string &name);

/// Ablation: every compressed layer becomes Full (no cross-layer sharing).
Schedule makeAllFull(const Schedule &schedule);
/// Ablation: Reindex layers become Reuse layers and no HSI pool is built.
Schedule makeNoReindex(const Schedule &schedule);
/// Ablation of CED (spec §3.6): the decoder layers, which read the ratio-1
/// source's compressed KV (Reuse or Reindex), become Full layers of their own
/// at that ratio; HSI pools nothing reads any more are dropped. Sources are
/// re-derived. Every layer then is a KV source, so bounded replay has no
/// layer to start at: every layer runs on every token.
Schedule makeNoCed(const Schedule &schedule);

} // namespace csa

#endif // CSA_MODELS_VARIANTS_VARIANTS_H

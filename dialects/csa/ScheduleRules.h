//===- ScheduleRules.h - Legality rules of a CSA2 layer schedule -*- C++ -*-===//
//
// A DeepSeek-V4.1 layer schedule says, per attention layer, which CSA2 mode it
// runs (Full / Reindex / Reuse / SWA-only), at which compression ratio, and
// which earlier layers it reads its compressed KV, its top-k indices and its
// HSI candidate pool from. These rules are plain C++ (no MLIR) so that the op
// verifiers, the config front end and the runtime reject exactly the same
// schedules with exactly the same messages.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_DIALECTS_CSA_SCHEDULERULES_H
#define CSA_DIALECTS_CSA_SCHEDULERULES_H

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace csa {

/// The CSA2 attention mode of one layer (spec §1, §3.5).
enum class LayerMode : uint32_t {
  /// Compressor + indexer of its own; owns a global (compressed) KV cache.
  Full = 0,
  /// Own indexer queries scored against a Full layer's index keys, restricted
  /// to that layer's HSI candidate pool; stores nothing global.
  Reindex = 1,
  /// Reads another layer's compressed KV and top-k; no indexer, no compressor.
  Reuse = 2,
  /// Sliding window only (ratio 0).
  SwaOnly = 3,
};

std::string_view layerModeName(LayerMode mode);
std::optional<LayerMode> parseLayerMode(std::string_view name);

/// What one layer does in a schedule. Source fields are layer indices, or -1
/// when absent. A Full layer is its own KV and index source.
struct LayerRole {
  int64_t layer = 0;
  LayerMode mode = LayerMode::SwaOnly;
  int64_t ratio = 0;
  int64_t kvSource = -1;
  int64_t indexSource = -1;
  int64_t candidateSource = -1;
  /// Whether this (Full) layer builds the HSI candidate pool.
  bool candidatePool = false;
};

/// Looks up the role of another layer; returns nullptr if it does not exist.
using LayerLookup = std::function<const LayerRole *(int64_t layer)>;

/// Checks the rules that involve only `role` itself.
/// Returns an error message naming the layer and the rule, or nullopt.
std::optional<std::string> checkLayerLocal(const LayerRole &role);

/// Checks the rules that relate `role` to the layers it reads from.
/// Assumes checkLayerLocal passed for every layer involved.
std::optional<std::string> checkLayerSources(const LayerRole &role,
                                             const LayerLookup &lookup);

/// A short description "layer 24 (reindex)" used to start every message.
std::string describeLayer(const LayerRole &role);

} // namespace csa

#endif // CSA_DIALECTS_CSA_SCHEDULERULES_H

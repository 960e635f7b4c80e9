//===- ReferenceModel.h - The plain C++ reference forward --------*- C++ -*-===//
//
// DeepSeek-V4.1 for any config and schedule, written to be read: the oracle
// every compiled path is checked against (never the executor). It follows the
// released `inference/model.py` (spec §2-§5) operation by operation, with
// bf16 rounding where the reference holds bf16 tensors, and keeps its caches
// in the released byte formats (288 B FP4 main-KV rows, 68 B FP4 index-key
// rows, 528 B FP8 SWA rows at the released sizes).
//
// One sequence: `prefill` once (position 0, any length), then `decode` one
// token at a time.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_MODELS_REFERENCE_REFERENCEMODEL_H
#define CSA_MODELS_REFERENCE_REFERENCEMODEL_H

#include "models/config/ModelConfig.h"
#include "models/schedule/Schedule.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace csa::reference {

/// One checkpoint tensor as bytes (a view; the source keeps it alive).
struct TensorBytes {
  std::string dtype; ///< safetensors spelling: BF16, F32, F8_E4M3, F8_E8M0, I8
  std::vector<int64_t> shape;
  const uint8_t *data = nullptr;
  uint64_t bytes = 0;
};

/// Finds a tensor by its official name (see models/weights/).
using TensorSource =
    std::function<absl::StatusOr<TensorBytes>(const std::string &name)>;

} // namespace csa::reference

namespace csa::checkpoint {
class Checkpoint;
} // namespace csa::checkpoint

namespace csa::reference {

/// The tensors of an opened checkpoint; `checkpoint` must outlive the source
/// and every model created from it (tensors are views into its mappings).
TensorSource checkpointTensorSource(const checkpoint::Checkpoint &checkpoint);

/// Maps a token history to Engram table rows for one layer:
/// `(history, start, count)` -> `count x columns` row ids (layer offset
/// included). The default is the official n-gram hash.
using EngramHashFn = std::function<std::vector<int64_t>(
    int64_t layer, const std::vector<int64_t> &history, int64_t start,
    int64_t count)>;

struct ReferenceOptions {
  /// Which index keys a ratio-2 Full layer scores against on decode steps
  /// that complete no group (spec §10.1): its own (`Owner`, as transformers
  /// and the engines do) or the last published ones (`Release`, bit-for-bit
  /// with the released model.py).
  enum class IndexPublication { Owner, Release };
  IndexPublication publication = IndexPublication::Owner;

  /// The main (compressed) KV row format, a cache format variant (spec §4):
  /// the released FP4 row (`V41_FP4`, 288 B at the released widths) or V4's
  /// FP8 row (`V4`, 584 B: E4M3 NoPE values, bf16 RoPE values).
  enum class MainKvFormat { Fp4, Fp8 };
  MainKvFormat mainKvFormat = MainKvFormat::Fp4;

  /// The index-key row format: the released FP4 row (68 B) or an FP8 row
  /// (132 B: E4M3 values, one fp32 scale). The indexer's queries go through
  /// the keys' format too, and both are read rounded to bf16.
  enum class IndexKeyFormat { Fp4, Fp8 };
  IndexKeyFormat indexKeyFormat = IndexKeyFormat::Fp4;

  /// CED bounded replay (spec §3.7): layers from `replayStartLayer` on run
  /// only on the last `replayTail` prompt tokens in prefill.
  bool boundedReplay = false;
  int64_t replayStartLayer = -1; ///< -1: the layer after the last KV source
  int64_t replayTail = -1;       ///< -1: the window size

  /// Engram hashing; empty = the official hash (models/reference/EngramHash).
  EngramHashFn engramHash;
  /// The official hash's raw -> compressed token map (vocab_size entries);
  /// empty: t mod engram_compressed_vocab_size (random weights).
  std::vector<int64_t> engramTokenMap;

  /// An array a forward shows to `onDump` (csa-reference --dump-hidden,
  /// --dump-decisions write them in csa-run's layout, runtime/support/Dumps.h):
  /// `what` is hidden (the hc streams a block leaves, float32 [rows, hc,
  /// dim]), topk (an indexer's selected compressed positions, int32 [rows,
  /// topk], -1 for none), hsi_pool (a candidate source's pool, a uint8 mask
  /// [rows, entries]), moe_ids (int32 [rows, top_k]) or moe_weights (float32
  /// [rows, top_k]); `block` is "layers.<i>.attn" or "layers.<i>.ffn".
  struct DumpArray {
    std::string block, what, descr;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::function<void(const DumpArray &)> onDump;
};

/// Per-layer state, exposed for tests and inspection.
struct LayerState {
  /// SWA ring: `window` rows of FP8 bytes; slot p % window holds position p.
  std::vector<uint8_t> swaRing;
  /// Full layers: compressed entries (main-KV rows in the options' format)
  /// and index keys.
  std::vector<uint8_t> mainKv;
  std::vector<uint8_t> indexKeys;
  int64_t entries = 0;
  /// Ratio > 1 Full layers: the partial group, fp32 [ratio x head_dim].
  std::vector<float> stateKv, stateScore;
  /// The compressed positions each query row of the last call attended
  /// (before the window offset; -1 = none), [rows x k].
  std::vector<std::vector<int32_t>> lastTopK;
  /// The candidate source: the HSI pool of each query row of the last call
  /// (a mask over compressed positions).
  std::vector<std::vector<char>> lastCandidates;
};

class ReferenceModel {
public:
  static absl::StatusOr<std::unique_ptr<ReferenceModel>>
  create(const ModelConfig &config, const Schedule &schedule,
         const TensorSource &weights, ReferenceOptions options = {});
  ~ReferenceModel();

  /// Runs the prompt at position 0; returns the last position's logits.
  absl::StatusOr<std::vector<float>> prefill(const std::vector<int32_t> &tokens);
  /// Runs one token at the current position; returns its logits.
  absl::StatusOr<std::vector<float>> decode(int32_t token);

  int64_t position() const;
  const LayerState &layerState(int64_t layer) const;
  const ModelConfig &config() const;

private:
  struct Impl;
  explicit ReferenceModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace csa::reference

#endif // CSA_MODELS_REFERENCE_REFERENCEMODEL_H

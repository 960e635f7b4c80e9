//===- WeightManifest.h - Tensor names, shapes and dtypes -------*- C++ -*-===//
//
// Every tensor a DeepSeek-V4.1 checkpoint holds for a config and a layer
// schedule, named as the released checkpoint names them: the module paths of
// the official inference/model.py ("layers.20.attn.indexer.wq_b.weight"),
// which the Hugging Face checkpoint uses unchanged (no convert step renames
// them). Quantized linears keep model.py's `scale` parameter beside the
// weight:
//
//   FP8 linear [N, K]:  <p>.weight F8_E4M3 [N, K]
//                       <p>.scale  F8_E8M0 [ceil(N/32), ceil(K/32)]  (32x32)
//   FP4 linear [N, K]:  <p>.weight I8      [N, K/2]  (E2M1 pairs, even k in
//                                                     the low nibble)
//                       <p>.scale  F8_E8M0 [N, K/32]
//   Engram table:       engram.embed.weight F8_E4M3 [rows, head_dim]
//                       engram.embed.scale  F8_E8M0 [rows, ceil(head_dim/32)]
//
// Which dense linears are quantized follows the checkpoint, not model.py's
// runtime dtypes: wo_a is FP8 in the checkpoint (convert.py dequantizes it to
// bf16 for the reference), compressor.wkv/wgate are BF16 (model.py promotes
// them to fp32 at ratio > 1), head.weight is BF16 (fp32 in model.py). All of
// this was checked against the per-subsystem tensor and byte counts of the
// released 48-shard checkpoint (the manifest test repeats the totals).
//
// Backbone only: the DSpark draft layers (`mtp.*`), the vision tower
// (`vision.*`, `aligner.*`) and the image-span embeddings (`image_start`,
// `image_end`, `image_newline`) are not in the manifest; checkAgainstManifest
// accepts them in a checkpoint and ignores them.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_MODELS_WEIGHTS_WEIGHTMANIFEST_H
#define CSA_MODELS_WEIGHTS_WEIGHTMANIFEST_H

#include "models/config/ModelConfig.h"
#include "models/schedule/Schedule.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/DType.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace csa {

/// What a tensor is: how the model uses it, and how a random checkpoint
/// fills it.
enum class TensorKind : uint8_t {
  Embedding,   ///< embed.weight [vocab, dim]
  Head,        ///< head.weight [vocab, dim]
  Norm,        ///< RMSNorm weight
  Linear,      ///< projection weight [out, in] (any storage)
  Scale,       ///< UE8M0 block scales of the quantized tensor `scaleOf`
  AttnSink,    ///< attn.attn_sink [heads], fp32 logits
  HcFn,        ///< hc_{attn,ffn}_fn [(2+hc)*hc, hc*dim]
  HcBase,      ///< hc_{attn,ffn}_base [(2+hc)*hc]
  HcScale,     ///< hc_{attn,ffn}_scale [3]
  RouterBias,  ///< ffn.gate.bias / bias_vl (selection only)
  EngramTable, ///< engram.embed.weight, FP8 rows
  EngramGate,  ///< engram.q_weight / k_weight [hc, dim]
};

/// How the values of a weight are stored.
enum class WeightStorage : uint8_t {
  Plain,     ///< values in `dtype` (BF16, F32)
  Fp8Block,  ///< E4M3 codes, one UE8M0 scale per block (Scale sibling)
  Fp4Packed, ///< I8 bytes of two E2M1 codes, UE8M0 per 32 along K
};

struct TensorSpec {
  std::string name;
  checkpoint::DType dtype = checkpoint::DType::BF16;
  std::vector<int64_t> shape; ///< as stored
  TensorKind kind = TensorKind::Linear;
  WeightStorage storage = WeightStorage::Plain;
  /// The values' shape: [N, K] for an FP4-packed weight whose stored shape
  /// is [N, K/2]; the stored shape otherwise. For a Scale, the shape of the
  /// values it scales.
  std::vector<int64_t> logicalShape;
  /// Quantized tensors and their scales: the rows x columns of values one
  /// scale entry covers (32 x 32 for FP8 linears, 1 x 32 otherwise).
  int64_t blockRows = 1, blockCols = 1;
  /// Scale tensors: the tensor they scale; quantized tensors: their scale.
  std::string scaleOf, scaleName;
  int64_t layer = -1; ///< backbone layer, -1 for global tensors

  /// Model parameters held: 0 for a Scale, 2 per byte for FP4-packed I8.
  int64_t parameterCount() const;
  /// Stored bytes.
  uint64_t byteSize() const;
};

struct ManifestOptions {
  /// Include `ffn.gate.bias_vl` (the router bias of image-span tokens).
  /// model.py creates it only when the vision tower is enabled; ModelConfig
  /// does not read vision_n_layers, so the default follows the released
  /// checkpoint (and the cost report), which has it.
  bool routerVisionBias = true;
};

/// The backbone tensors of `config` under `schedule`, in model order:
/// embed, layers 0.., norm, head. Errors name the config and the rule a
/// shape breaks (e.g. FP4 weights need K to be a multiple of 32).
absl::StatusOr<std::vector<TensorSpec>>
weightManifest(const ModelConfig &config, const Schedule &schedule,
               const ManifestOptions &options = {});

struct ManifestTotals {
  int64_t tensors = 0;
  int64_t parameters = 0; ///< as the cost report counts them
  uint64_t bytes = 0;
};
ManifestTotals manifestTotals(const std::vector<TensorSpec> &manifest);

struct ManifestCheckOptions {
  /// Accept tensors the manifest does not name outside the namespaces that
  /// are known not to be backbone (mtp., vision., aligner., image_*).
  bool allowUnknownTensors = false;
  /// How many problems the message lists before "... and N more".
  int maxListed = 20;
};

/// Checks that `checkpoint` holds every manifest tensor with its dtype and
/// shape, and nothing the manifest does not expect (a tensor of another
/// schedule, say). The message lists each problem with the tensor and file.
absl::Status checkAgainstManifest(const checkpoint::Checkpoint &checkpoint,
                                  const std::vector<TensorSpec> &manifest,
                                  const ManifestCheckOptions &options = {});

/// Whether `name` belongs to a part of the released checkpoint the manifest
/// leaves out (DSpark, vision, image-span embeddings).
bool isNonBackboneTensor(const std::string &name);

} // namespace csa

#endif // CSA_MODELS_WEIGHTS_WEIGHTMANIFEST_H

//===- ReferenceModel.cpp - The plain C++ reference forward ---------------===//
//
// Read top to bottom like model.py: weights, then the attention layer (Q, SWA
// KV, compressor, indexer, HSI, top-k, sparse attention, output), MoE, mHC,
// Engram, and the model. Comments name the spec section or model.py behaviour
// each piece reproduces.
//
//===----------------------------------------------------------------------===//
#include "models/reference/ReferenceModel.h"

#include "models/reference/EngramHash.h"
#include "models/reference/Kernels.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/numerics/Numerics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>

namespace csa::reference {

namespace nx = csa::numerics;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

#define CSA_CONCAT_INNER(a, b) a##b
#define CSA_CONCAT(a, b) CSA_CONCAT_INNER(a, b)
#define CSA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                              \
  auto tmp = (expr);                                                           \
  if (!tmp.ok())                                                               \
    return tmp.status();                                                       \
  lhs = std::move(*tmp)
/// Statement macro (not for use as the body of an unbraced `if`).
#define CSA_ASSIGN_OR_RETURN(lhs, expr)                                        \
  CSA_ASSIGN_OR_RETURN_IMPL(CSA_CONCAT(statusOr, __LINE__), lhs, expr)

std::string shapeString(const std::vector<int64_t> &shape) {
  return "[" + absl::StrJoin(shape, ", ") + "]";
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

struct LayerWeights {
  // Attention (every layer).
  Weight wqA, wqB, wkv, woA, woB;
  std::vector<float> qNorm, kvNorm, sink;
  std::vector<uint16_t> woABf16; ///< wo_a converted to bf16 at load
  // Compressor (Full layers).
  Weight cWkv, cWgate;
  std::vector<float> cNorm;
  // Indexer (index sources; wk and k_norm on Full layers only).
  Weight iWqB, iWeightsProj, iWk;
  std::vector<float> iKNorm;
  // MoE.
  Weight gate;
  std::vector<float> gateBias;
  std::vector<std::array<Weight, 3>> experts; ///< w1, w2, w3
  std::array<Weight, 3> shared;
  // mHC and norms.
  std::vector<float> hcAttnFn, hcAttnBase, hcAttnScale;
  std::vector<float> hcFfnFn, hcFfnBase, hcFfnScale;
  std::vector<float> attnNorm, ffnNorm;
  // Engram.
  bool engram = false;
  TensorBytes engramTable, engramTableScale;
  int64_t engramRows = 0;
  Weight engramWkv;
  std::vector<float> engramQ, engramK;
};

class WeightLoader {
public:
  explicit WeightLoader(const TensorSource &source) : source(source) {}

  absl::StatusOr<TensorBytes> tensor(const std::string &name,
                                     const std::vector<std::string> &dtypes,
                                     const std::vector<int64_t> &shape) {
    auto t = source(name);
    if (!t.ok())
      return t.status();
    if (std::find(dtypes.begin(), dtypes.end(), t->dtype) == dtypes.end())
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has dtype ", t->dtype,
                       "; expected ", absl::StrJoin(dtypes, " or ")));
    if (t->shape != shape)
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has shape ", shapeString(t->shape),
                       "; expected ", shapeString(shape)));
    return t;
  }

  /// A vector parameter (norm weights, biases, sinks, mHC tables).
  absl::StatusOr<std::vector<float>> vec(const std::string &name,
                                         const std::vector<int64_t> &shape) {
    CSA_ASSIGN_OR_RETURN(TensorBytes t, tensor(name, {"BF16", "F32"}, shape));
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      out[size_t(i)] = t.dtype == "F32" ? loadF32(t.data, i)
                                        : nx::bf16ToFloat(loadU16(t.data, i));
    return out;
  }

  /// A linear layer `name.weight` [out, in] (and `name.scale` when
  /// quantized). The stored dtype picks the GEMM, as `linear()` in model.py;
  /// `fp32` computes a bf16-stored weight in fp32 (compressor, gate, head).
  absl::StatusOr<Weight> linear(const std::string &name, int64_t out,
                                int64_t in, bool fp32 = false) {
    auto t = source(name + ".weight");
    if (!t.ok())
      return t.status();
    Weight w;
    w.rows = out;
    w.cols = in;
    w.data = t->data;
    if (t->dtype == "F8_E4M3") {
      CSA_ASSIGN_OR_RETURN(TensorBytes weight,
                           tensor(name + ".weight", {"F8_E4M3"}, {out, in}));
      CSA_ASSIGN_OR_RETURN(
          TensorBytes scale,
          tensor(name + ".scale", {"F8_E8M0"},
                 {(out + 31) / 32, (in + 31) / 32}));
      w.kind = WeightKind::FP8;
      w.data = weight.data;
      w.scale = scale.data;
      return w;
    }
    if (t->dtype == "I8") {
      if (in % 32 != 0)
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", name, ".weight': FP4 needs in_features % 32 == 0"));
      CSA_ASSIGN_OR_RETURN(TensorBytes weight,
                           tensor(name + ".weight", {"I8"}, {out, in / 2}));
      CSA_ASSIGN_OR_RETURN(TensorBytes scale, tensor(name + ".scale",
                                                     {"F8_E8M0"}, {out, in / 32}));
      w.kind = WeightKind::FP4;
      w.data = weight.data;
      w.scale = scale.data;
      return w;
    }
    CSA_ASSIGN_OR_RETURN(TensorBytes weight,
                         tensor(name + ".weight", {"BF16", "F32"}, {out, in}));
    w.data = weight.data;
    w.storedF32 = weight.dtype == "F32";
    w.kind = fp32 ? WeightKind::F32 : WeightKind::BF16;
    return w;
  }

private:
  const TensorSource &source;
};

//===----------------------------------------------------------------------===//
// Small helpers
//===----------------------------------------------------------------------===//


} // namespace

//===----------------------------------------------------------------------===//
// The model
//===----------------------------------------------------------------------===//

struct ReferenceModel::Impl {
  ModelConfig c;
  Schedule schedule;
  ReferenceOptions options;
  TensorSource source; ///< kept alive: weights are views into it

  std::vector<LayerWeights> layers;
  std::vector<LayerState> states;
  std::vector<RopeTable> ropes; ///< per layer
  TensorBytes embed;
  Weight head;
  std::vector<float> finalNorm;
  std::vector<std::unique_ptr<EngramHasher>> hashers; ///< per layer or null

  int64_t position = 0;
  std::vector<int64_t> history; ///< token ids so far (Engram)

  // Row sizes of the caches.
  int64_t swaRowBytes = 0, mainRowBytes = 0, indexRowBytes = 0;
  bool mainKvFp8() const {
    return options.mainKvFormat == ReferenceOptions::MainKvFormat::Fp8;
  }
  /// A main-KV row in the options' format, and back.
  void quantizeMainKv(const float *x, uint8_t *row) const {
    if (mainKvFp8())
      nx::quantizeMainKvFp8Row(x, size_t(c.headDim), size_t(c.ropeHeadDim), row);
    else
      nx::quantizeMainKvRow(x, size_t(c.headDim), row);
  }
  void dequantizeMainKv(const uint8_t *row, float *out) const {
    if (mainKvFp8())
      nx::dequantizeMainKvFp8Row(row, size_t(c.headDim), size_t(c.ropeHeadDim), out);
    else
      nx::dequantizeMainKvRow(row, size_t(c.headDim), out);
  }
  bool indexKeyFp8() const {
    return options.indexKeyFormat == ReferenceOptions::IndexKeyFormat::Fp8;
  }
  /// An index-key row in the options' format, and back (the FP8 row's
  /// values rounded to bf16, as the scoring reads them; exact for FP4).
  void quantizeIndexKey(const float *x, uint8_t *row) const {
    if (indexKeyFp8())
      nx::quantizeIndexKeyFp8Row(x, size_t(c.indexHeadDim), row);
    else
      nx::quantizeIndexKeyRow(x, size_t(c.indexHeadDim), row);
  }
  void dequantizeIndexKey(const uint8_t *row, float *out) const {
    if (!indexKeyFp8()) {
      nx::dequantizeIndexKeyRow(row, size_t(c.indexHeadDim), out);
      return;
    }
    nx::dequantizeIndexKeyFp8Row(row, size_t(c.indexHeadDim), out);
    for (int64_t i = 0; i < c.indexHeadDim; ++i)
      out[i] = bf16(out[i]);
  }

  // What source layers publish to later layers in the same forward
  // (`SharedAttentionRuntime`). Top-k rows are raw positions (-1 = none),
  // indexed by absolute position - publishedBase.
  int64_t publishedIndexKeys = -1; ///< layer whose index keys are published
  int64_t publishedBase = 0;       ///< position of publishedTopK's row 0
  std::vector<std::vector<int32_t>> publishedTopK;
  int64_t candidatesBase = 0;      ///< position of publishedCandidates' row 0
  std::vector<std::vector<char>> publishedCandidates;

  const LayerRole &role(int64_t l) const { return schedule.layers[size_t(l)]; }

  /// Shows `values` (a C-order array of `shape`) to options.onDump as the
  /// array `what` of layer l's block `site` ("attn" or "ffn").
  template <typename T>
  void show(int64_t l, const char *site, const char *what, const char *descr,
            std::vector<int64_t> shape, const std::vector<T> &values) const {
    if (!options.onDump)
      return;
    ReferenceOptions::DumpArray a;
    a.block = absl::StrCat("layers.", l, ".", site);
    a.what = what;
    a.descr = descr;
    a.shape = std::move(shape);
    a.bytes.resize(values.size() * sizeof(T));
    if (!values.empty())
      std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
    options.onDump(a);
  }
  /// Rows of selections as int32 [rows, width], -1 past a row's end.
  void showRows(int64_t l, const char *what, const std::vector<std::vector<int32_t>> &rows,
                int64_t width) const {
    if (!options.onDump)
      return;
    std::vector<int32_t> flat(rows.size() * size_t(width), -1);
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t j = 0; j < rows[i].size() && int64_t(j) < width; ++j)
        flat[i * size_t(width) + j] = rows[i][j];
    show(l, "attn", what, "<i4", {int64_t(rows.size()), width}, flat);
  }

  absl::Status load();
  Mat attention(int64_t l, const Mat &x, int64_t pos0, bool decode);
  Mat compress(int64_t l, const Mat &x, bool decode, int64_t pos);
  std::vector<std::vector<int32_t>> indexer(int64_t l, const Mat &x,
                                            const Mat &qr, const Mat *latent,
                                            int64_t pos0, bool decode);
  Mat moe(int64_t l, const Mat &x);
  absl::Status engram(int64_t l, std::vector<Mat> &streams, int64_t pos0);
  absl::StatusOr<std::vector<float>> forward(const std::vector<int32_t> &tokens,
                                             bool decode);

  std::vector<float> dequantIndexKey(int64_t l, int64_t entry) const {
    std::vector<float> out(static_cast<size_t>(c.indexHeadDim));
    dequantizeIndexKey(&states[size_t(l)].indexKeys[size_t(entry * indexRowBytes)],
                       out.data());
    return out;
  }
};

absl::Status ReferenceModel::Impl::load() {
  WeightLoader w(source);
  const int64_t d = c.dim, hd = c.headDim, heads = c.nHeads;
  swaRowBytes = int64_t(nx::swaKvRowBytes(size_t(hd)));
  mainRowBytes = mainKvFp8()
                     ? int64_t(nx::mainKvFp8RowBytes(size_t(hd), size_t(c.ropeHeadDim)))
                     : int64_t(nx::mainKvRowBytes(size_t(hd)));
  indexRowBytes = indexKeyFp8() ? int64_t(nx::indexKeyFp8RowBytes(size_t(c.indexHeadDim)))
                                : int64_t(nx::indexKeyRowBytes(size_t(c.indexHeadDim)));

  CSA_ASSIGN_OR_RETURN(embed, w.tensor("embed.weight", {"BF16"}, {c.vocabSize, d}));
  CSA_ASSIGN_OR_RETURN(head, w.linear("head", c.vocabSize, d, /*fp32=*/true));
  CSA_ASSIGN_OR_RETURN(finalNorm, w.vec("norm.weight", {d}));

  const int64_t mixHc = (2 + c.hcMult) * c.hcMult;
  layers.resize(size_t(c.nLayers));
  states.resize(size_t(c.nLayers));
  ropes.resize(size_t(c.nLayers));
  hashers.resize(size_t(c.nLayers));
  for (int64_t l = 0; l < c.nLayers; ++l) {
    const LayerRole &r = role(l);
    LayerWeights &lw = layers[size_t(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::string a = p + "attn.";
    CSA_ASSIGN_OR_RETURN(lw.wqA, w.linear(a + "wq_a", c.qLoraRank, d));
    CSA_ASSIGN_OR_RETURN(lw.qNorm, w.vec(a + "q_norm.weight", {c.qLoraRank}));
    CSA_ASSIGN_OR_RETURN(lw.wqB, w.linear(a + "wq_b", heads * hd, c.qLoraRank));
    CSA_ASSIGN_OR_RETURN(lw.wkv, w.linear(a + "wkv", hd, d));
    CSA_ASSIGN_OR_RETURN(lw.kvNorm, w.vec(a + "kv_norm.weight", {hd}));
    CSA_ASSIGN_OR_RETURN(lw.woA, w.linear(a + "wo_a", c.oGroups * c.oLoraRank,
                                          heads * hd / c.oGroups));
    // convert.py dequantizes wo_a to bf16 (exact for E4M3 x 2^k).
    lw.woABf16.resize(size_t(lw.woA.rows * lw.woA.cols));
    {
      std::vector<float> rowBuf(static_cast<size_t>(lw.woA.cols));
      for (int64_t i = 0; i < lw.woA.rows; ++i) {
        lw.woA.dequantizeRow(i, rowBuf.data());
        for (int64_t j = 0; j < lw.woA.cols; ++j)
          lw.woABf16[size_t(i * lw.woA.cols + j)] = nx::floatToBf16(rowBuf[size_t(j)]);
      }
      lw.woA.kind = WeightKind::BF16;
      lw.woA.storedF32 = false;
      lw.woA.scale = nullptr;
      lw.woA.data = reinterpret_cast<const uint8_t *>(lw.woABf16.data());
    }
    CSA_ASSIGN_OR_RETURN(lw.woB, w.linear(a + "wo_b", d, c.oGroups * c.oLoraRank));
    CSA_ASSIGN_OR_RETURN(lw.sink, w.vec(a + "attn_sink", {heads}));

    if (r.mode == LayerMode::Full) {
      const bool pooled = r.ratio > 1;
      CSA_ASSIGN_OR_RETURN(lw.cWkv, w.linear(a + "compressor.wkv", hd, d, pooled));
      if (pooled) {
        CSA_ASSIGN_OR_RETURN(lw.cWgate,
                             w.linear(a + "compressor.wgate", hd, d, true));
      }
      CSA_ASSIGN_OR_RETURN(lw.cNorm, w.vec(a + "compressor.norm.weight", {hd}));
      CSA_ASSIGN_OR_RETURN(lw.iWk, w.linear(a + "indexer.wk", c.indexHeadDim, hd));
      CSA_ASSIGN_OR_RETURN(lw.iKNorm,
                           w.vec(a + "indexer.k_norm.weight", {c.indexHeadDim}));
    }
    if (r.mode == LayerMode::Full || r.mode == LayerMode::Reindex) {
      CSA_ASSIGN_OR_RETURN(lw.iWqB, w.linear(a + "indexer.wq_b",
                                             c.indexNHeads * c.indexHeadDim,
                                             c.qLoraRank));
      CSA_ASSIGN_OR_RETURN(lw.iWeightsProj,
                           w.linear(a + "indexer.weights_proj", c.indexNHeads, d));
    }

    const std::string f = p + "ffn.";
    CSA_ASSIGN_OR_RETURN(lw.gate, w.linear(f + "gate", c.nRoutedExperts, d, true));
    CSA_ASSIGN_OR_RETURN(lw.gateBias, w.vec(f + "gate.bias", {c.nRoutedExperts}));
    lw.experts.resize(size_t(c.nRoutedExperts));
    for (int64_t e = 0; e < c.nRoutedExperts; ++e) {
      const std::string x = f + "experts." + std::to_string(e) + ".";
      CSA_ASSIGN_OR_RETURN(lw.experts[size_t(e)][0], w.linear(x + "w1", c.moeInterDim, d));
      CSA_ASSIGN_OR_RETURN(lw.experts[size_t(e)][1], w.linear(x + "w2", d, c.moeInterDim));
      CSA_ASSIGN_OR_RETURN(lw.experts[size_t(e)][2], w.linear(x + "w3", c.moeInterDim, d));
    }
    CSA_ASSIGN_OR_RETURN(lw.shared[0], w.linear(f + "shared_experts.w1", c.moeInterDim, d));
    CSA_ASSIGN_OR_RETURN(lw.shared[1], w.linear(f + "shared_experts.w2", d, c.moeInterDim));
    CSA_ASSIGN_OR_RETURN(lw.shared[2], w.linear(f + "shared_experts.w3", c.moeInterDim, d));

    CSA_ASSIGN_OR_RETURN(lw.hcAttnFn, w.vec(p + "hc_attn_fn", {mixHc, c.hcMult * d}));
    CSA_ASSIGN_OR_RETURN(lw.hcAttnBase, w.vec(p + "hc_attn_base", {mixHc}));
    CSA_ASSIGN_OR_RETURN(lw.hcAttnScale, w.vec(p + "hc_attn_scale", {3}));
    CSA_ASSIGN_OR_RETURN(lw.hcFfnFn, w.vec(p + "hc_ffn_fn", {mixHc, c.hcMult * d}));
    CSA_ASSIGN_OR_RETURN(lw.hcFfnBase, w.vec(p + "hc_ffn_base", {mixHc}));
    CSA_ASSIGN_OR_RETURN(lw.hcFfnScale, w.vec(p + "hc_ffn_scale", {3}));
    CSA_ASSIGN_OR_RETURN(lw.attnNorm, w.vec(p + "attn_norm.weight", {d}));
    CSA_ASSIGN_OR_RETURN(lw.ffnNorm, w.vec(p + "ffn_norm.weight", {d}));

    auto engramAt = std::find(c.engramLayerIds.begin(), c.engramLayerIds.end(), l);
    if (engramAt != c.engramLayerIds.end()) {
      lw.engram = true;
      lw.engramRows = c.engramNumEmbeddings[size_t(engramAt - c.engramLayerIds.begin())];
      const std::string e = p + "engram.";
      const int64_t hdE = c.engramHeadDim;
      CSA_ASSIGN_OR_RETURN(lw.engramTable,
                           w.tensor(e + "embed.weight", {"F8_E4M3"}, {lw.engramRows, hdE}));
      CSA_ASSIGN_OR_RETURN(lw.engramTableScale,
                           w.tensor(e + "embed.scale", {"F8_E8M0"}, {lw.engramRows, hdE / 32}));
      const int64_t cols = (c.engramMaxNgramSize - 1) * c.engramNHeads;
      CSA_ASSIGN_OR_RETURN(lw.engramWkv,
                           w.linear(e + "wkv", d * (c.hcMult + 1), cols * hdE));
      CSA_ASSIGN_OR_RETURN(lw.engramQ, w.vec(e + "q_weight", {c.hcMult, d}));
      CSA_ASSIGN_OR_RETURN(lw.engramK, w.vec(e + "k_weight", {c.hcMult, d}));
      if (!options.engramHash) {
        auto hasher = EngramHasher::create(c, l, options.engramTokenMap);
        if (!hasher.ok())
          return hasher.status();
        hashers[size_t(l)] = std::make_unique<EngramHasher>(std::move(*hasher));
      }
    }

    // One RoPE table per layer: YaRN for compressed layers, base otherwise.
    ropes[size_t(l)] =
        r.ratio > 0 ? RopeTable(c.ropeHeadDim, c.compressRopeTheta,
                                c.originalSeqLen, c.ropeFactor, c.betaFast,
                                c.betaSlow)
                    : RopeTable(c.ropeHeadDim, c.ropeTheta, 0, 1, 0, 0);

    LayerState &s = states[size_t(l)];
    s.swaRing.assign(size_t(c.windowSize * swaRowBytes), 0);
    if (r.mode == LayerMode::Full && r.ratio > 1) {
      s.stateKv.assign(size_t(r.ratio * hd), 0.f);
      s.stateScore.assign(size_t(r.ratio * hd), kNegInf);
    }
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// `Compressor.forward`: returns one pre-RoPE latent row per completed group.
Mat ReferenceModel::Impl::compress(int64_t l, const Mat &x, bool decode,
                                   int64_t pos) {
  const LayerRole &r = role(l);
  LayerWeights &lw = layers[size_t(l)];
  LayerState &s = states[size_t(l)];
  const int64_t hd = c.headDim, ratio = r.ratio;
  if (ratio == 1) // one token per group: no gate, no fp32
    return rmsNorm(linear(x, lw.cWkv), lw.cNorm, c.normEps);

  Mat kv = linear(x, lw.cWkv), score = linear(x, lw.cWgate); // fp32
  Mat pooled;
  auto pool = [&](const float *kvRows, const float *scoreRows, float *out) {
    poolGroup(kvRows, scoreRows, ratio, hd, out);
  };
  if (!decode) {
    const int64_t groups = x.rows / ratio, remainder = x.rows % ratio;
    pooled = Mat(groups, hd);
    for (int64_t g = 0; g < groups; ++g)
      pool(kv.row(g * ratio), score.row(g * ratio), pooled.row(g));
    // The trailing partial group waits in the state.
    for (int64_t t = 0; t < remainder; ++t) {
      std::copy(kv.row(groups * ratio + t), kv.row(groups * ratio + t) + hd,
                s.stateKv.begin() + t * hd);
      std::copy(score.row(groups * ratio + t),
                score.row(groups * ratio + t) + hd,
                s.stateScore.begin() + t * hd);
    }
  } else {
    const int64_t slot = pos % ratio;
    std::copy(kv.row(0), kv.row(0) + hd, s.stateKv.begin() + slot * hd);
    std::copy(score.row(0), score.row(0) + hd, s.stateScore.begin() + slot * hd);
    if ((pos + 1) % ratio != 0)
      return Mat(0, hd);
    pooled = Mat(1, hd);
    pool(s.stateKv.data(), s.stateScore.data(), pooled.row(0));
  }
  roundBf16(pooled); // kv.to(dtype) before the norm
  return rmsNorm(pooled, lw.cNorm, c.normEps);
}

/// `Indexer.forward`: top-k compressed positions per query row (raw
/// positions, -1 for none), after publishing this layer's index keys.
std::vector<std::vector<int32_t>>
ReferenceModel::Impl::indexer(int64_t l, const Mat &x, const Mat &qr,
                              const Mat *latent, int64_t pos0, bool decode) {
  const LayerRole &r = role(l);
  LayerWeights &lw = layers[size_t(l)];
  LayerState &s = states[size_t(l)];
  const RopeTable &rope = ropes[size_t(l)];
  const int64_t ratio = r.ratio, n = x.rows, ih = c.indexNHeads,
                id = c.indexHeadDim, end = pos0 + n;

  if (r.mode == LayerMode::Full && latent && latent->rows > 0) {
    // Index keys from the pre-RoPE latent; group j is rotated at j * ratio.
    Mat k = rmsNorm(linear(*latent, lw.iWk), lw.iKNorm, c.normEps);
    const int64_t first = decode ? pos0 / ratio : 0;
    for (int64_t g = 0; g < k.rows; ++g) {
      rope.apply(k.row(g), id, (first + g) * ratio, false);
      std::vector<uint8_t> bytes(static_cast<size_t>(indexRowBytes));
      quantizeIndexKey(k.row(g), bytes.data());
      size_t at = size_t((first + g) * indexRowBytes);
      if (s.indexKeys.size() < at + bytes.size())
        s.indexKeys.resize(at + bytes.size());
      std::copy(bytes.begin(), bytes.end(), s.indexKeys.begin() + at);
    }
    publishedIndexKeys = l;
  }

  // Queries: RoPE at the token positions, then quantize-dequantize in the
  // keys' format.
  Mat q = linear(qr, lw.iWqB);
  std::vector<uint8_t> qRow(static_cast<size_t>(indexRowBytes));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < ih; ++h) {
      float *qh = q.row(i) + h * id;
      rope.apply(qh, id, pos0 + i, false);
      if (indexKeyFp8()) {
        quantizeIndexKey(qh, qRow.data());
        dequantizeIndexKey(qRow.data(), qh);
      } else {
        fp4QuantDequantUe8m0(qh, id);
      }
    }
  Mat w = linear(x, lw.iWeightsProj);
  const float scale = float(std::pow(double(id), -0.5) * std::pow(double(ih), -0.5));
  for (float &v : w.v)
    v = bf16(v * scale);

  // Whose keys: a Full layer's own (owner) or the last published (release);
  // a Reindex layer reads its KV source's keys.
  int64_t keysOf = r.mode == LayerMode::Full ? l : r.kvSource;
  if (options.publication == ReferenceOptions::IndexPublication::Release &&
      publishedIndexKeys >= 0)
    keysOf = publishedIndexKeys;
  const LayerState &keyState = states[size_t(keysOf)];
  const int64_t available = int64_t(keyState.indexKeys.size()) / indexRowBytes;
  const int64_t width = std::min(end / ratio, available);
  std::vector<std::vector<float>> keys(static_cast<size_t>(width));
  for (int64_t t = 0; t < width; ++t) {
    keys[size_t(t)].resize(size_t(id));
    dequantizeIndexKey(&keyState.indexKeys[size_t(t * indexRowBytes)],
                       keys[size_t(t)].data());
  }

  std::vector<std::vector<int32_t>> result(static_cast<size_t>(n));
  const int64_t topk = std::min(c.indexTopk, end / ratio);
  if (r.candidatePool) {
    publishedCandidates.clear();
    candidatesBase = pos0;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t visible = decode ? end / ratio : (pos0 + i + 1) / ratio;
    std::vector<float> score(static_cast<size_t>(end / ratio), kNegInf);
    for (int64_t t = 0; t < width; ++t) {
      // bf16 einsum, relu, times the head weight (bf16), summed over heads.
      score[size_t(t)] =
          t < visible ? indexScore(q.row(i), keys[size_t(t)].data(), w.row(i), ih, id)
                      : kNegInf;
    }
    if (r.candidatePool) {
      publishedCandidates.push_back(selectCandidateBlocks(
          score, visible, c.candidateTopkBlocks, c.candidateBlockSize));
    } else if (r.mode == LayerMode::Reindex) {
      const auto &mask = publishedCandidates[size_t(pos0 + i - candidatesBase)];
      for (size_t t = 0; t < score.size(); ++t)
        if (t >= mask.size() || !mask[t])
          score[t] = kNegInf;
    }
    std::vector<int64_t> picked = topkIndices(score, topk);
    std::sort(picked.begin(), picked.end());
    for (int64_t t : picked)
      result[size_t(i)].push_back(t < visible ? int32_t(t) : -1);
  }
  if (r.candidatePool)
    s.lastCandidates = publishedCandidates;
  if (r.candidatePool && options.onDump) {
    // This call's rows of the pool, as a uint8 mask over the entries.
    const int64_t entries = end / ratio;
    std::vector<uint8_t> mask(size_t(n * entries), 0);
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<char> &row = publishedCandidates[size_t(pos0 + i - candidatesBase)];
      for (int64_t t = 0; t < entries && t < int64_t(row.size()); ++t)
        mask[size_t(i * entries + t)] = row[size_t(t)] ? 1 : 0;
    }
    show(l, "attn", "hsi_pool", "|u1", {n, entries}, mask);
  }
  return result;
}

/// One attention layer over `x` (rows at positions pos0..): prefill of a
/// chunk when !decode, one decode token otherwise.
Mat ReferenceModel::Impl::attention(int64_t l, const Mat &x, int64_t pos0,
                                    bool decode) {
  const LayerRole &r = role(l);
  LayerWeights &lw = layers[size_t(l)];
  LayerState &s = states[size_t(l)];
  const RopeTable &rope = ropes[size_t(l)];
  const int64_t n = x.rows, hd = c.headDim, heads = c.nHeads,
                win = c.windowSize, rd = c.ropeHeadDim;

  // Q path (no per-head norm in V4.1).
  Mat qr = rmsNorm(linear(x, lw.wqA), lw.qNorm, c.normEps);
  Mat q = linear(qr, lw.wqB);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < heads; ++h)
      rope.apply(q.row(i) + h * hd, hd, pos0 + i, false);

  // SWA KV: RMSNorm, RoPE, FP8 rows (whole 512 channels) into the ring.
  Mat kv = rmsNorm(linear(x, lw.wkv), lw.kvNorm, c.normEps);
  std::vector<uint8_t> rowBytes(static_cast<size_t>(swaRowBytes));
  for (int64_t i = 0; i < n; ++i) {
    rope.apply(kv.row(i), hd, pos0 + i, false);
    nx::quantizeSwaKvRow(kv.row(i), size_t(hd), rowBytes.data());
    nx::dequantizeSwaKvRow(rowBytes.data(), size_t(hd), kv.row(i));
    if (decode || i >= n - win) {
      const int64_t slot = (pos0 + i) % win;
      std::copy(rowBytes.begin(), rowBytes.end(),
                s.swaRing.begin() + slot * swaRowBytes);
    }
  }

  // The rows attention gathers from: window rows first, then compressed.
  Mat rows;
  std::vector<std::vector<int32_t>> windowIdx(static_cast<size_t>(n));
  if (!decode) {
    rows = kv; // the fresh rows of this chunk
    for (int64_t i = 0; i < n; ++i) {
      const int64_t first = std::max<int64_t>(0, i - win + 1);
      for (int64_t j = 0; j < std::min(n, win); ++j)
        windowIdx[size_t(i)].push_back(first + j > i ? -1 : int32_t(first + j));
    }
  } else {
    rows = Mat(win, hd);
    for (int64_t slot = 0; slot < win; ++slot)
      nx::dequantizeSwaKvRow(&s.swaRing[size_t(slot * swaRowBytes)], size_t(hd),
                             rows.row(slot));
    const int64_t oldest = pos0 % win + 1;
    for (int64_t j = 0; j < win; ++j) {
      int64_t slot = (oldest + j) % win;
      windowIdx[0].push_back(slot > pos0 ? -1 : int32_t(slot));
    }
  }
  const int64_t offset = rows.rows;

  std::vector<std::vector<int32_t>> compressedIdx(static_cast<size_t>(n));
  if (r.ratio > 0) {
    const int64_t ratio = r.ratio, end = pos0 + n, compressLen = end / ratio;
    Mat latent;
    const bool full = r.mode == LayerMode::Full;
    if (full)
      latent = compress(l, x, decode, pos0);
    if (r.mode == LayerMode::Full || r.mode == LayerMode::Reindex) {
      if (compressLen == 0)
        compressedIdx.assign(size_t(n), {});
      else
        compressedIdx = indexer(l, x, qr, full ? &latent : nullptr, pos0, decode);
      showRows(l, "topk", compressedIdx, c.indexTopk);
      publishedTopK = compressedIdx;
      publishedBase = pos0;
    } else {
      for (int64_t i = 0; i < n; ++i)
        compressedIdx[size_t(i)] = publishedTopK[size_t(pos0 + i - publishedBase)];
    }
    s.lastTopK = compressedIdx;
    if (full && latent.rows > 0) {
      // RoPE at the group's first token, then the row format: FP4 with E4M3
      // scales per 16, or V4's FP8 NoPE + bf16 RoPE.
      const int64_t first = decode ? pos0 / ratio : 0;
      std::vector<uint8_t> bytes(static_cast<size_t>(mainRowBytes));
      for (int64_t g = 0; g < latent.rows; ++g) {
        rope.apply(latent.row(g), hd, (first + g) * ratio, false);
        quantizeMainKv(latent.row(g), bytes.data());
        size_t at = size_t((first + g) * mainRowBytes);
        if (s.mainKv.size() < at + bytes.size())
          s.mainKv.resize(at + bytes.size());
        std::copy(bytes.begin(), bytes.end(), s.mainKv.begin() + at);
      }
      s.entries = int64_t(s.mainKv.size()) / mainRowBytes;
    }
    // Append the KV source's first compressLen entries to the gather rows.
    const LayerState &source = states[size_t(r.kvSource)];
    Mat all(offset + compressLen, hd);
    std::copy(rows.v.begin(), rows.v.end(), all.v.begin());
    for (int64_t e = 0; e < compressLen; ++e)
      dequantizeMainKv(&source.mainKv[size_t(e * mainRowBytes)], all.row(offset + e));
    rows = std::move(all);
  }

  // Sparse attention: one softmax over window + selected rows per head,
  // online over blocks of 64 indices with bf16 probabilities, sink in the
  // denominator only (kernel.py `sparse_attn`).
  const float softmaxScale = float(std::pow(double(hd), -0.5));
  Mat o(n, heads * hd);
  parallelFor(n * heads, [&](int64_t begin, int64_t endIt) {
    for (int64_t it = begin; it < endIt; ++it) {
      const int64_t i = it / heads, h = it % heads;
      std::vector<int32_t> idx = windowIdx[size_t(i)];
      for (int32_t t : compressedIdx[size_t(i)])
        idx.push_back(t < 0 ? -1 : int32_t(t + offset));
      float *out = o.row(i) + h * hd;
      sparseAttentionHead(q.row(i) + h * hd, rows, idx, lw.sink[size_t(h)],
                          softmaxScale, out);
      // Remove the query rotation from the output.
      rope.apply(out, hd, pos0 + i, true);
    }
  });
  (void)rd;

  // Grouped low-rank output: wo_a is block-diagonal over o_groups (bf16
  // einsum), then wo_b (FP8).
  const int64_t groups = c.oGroups, rank = c.oLoraRank,
                groupWidth = heads * hd / groups;
  Mat u(n, groups * rank);
  parallelFor(groups * rank, [&](int64_t begin, int64_t endIt) {
    std::vector<float> wrow(static_cast<size_t>(groupWidth));
    for (int64_t gr = begin; gr < endIt; ++gr) {
      const int64_t g = gr / rank;
      lw.woA.dequantizeRow(gr, wrow.data());
      for (int64_t i = 0; i < n; ++i) {
        const float *og = o.row(i) + g * groupWidth;
        // 32-block partials added in order, as every linear (Kernels.h).
        float acc = 0.f;
        for (int64_t kb = 0; kb < groupWidth; kb += reference::kLinearBlock) {
          float partial = 0.f;
          const int64_t end = std::min(groupWidth, kb + reference::kLinearBlock);
          for (int64_t e = kb; e < end; ++e)
            partial += og[e] * wrow[size_t(e)];
          acc += partial;
        }
        u.at(i, gr) = bf16(acc);
      }
    }
  });
  return linear(u, lw.woB);
}

//===----------------------------------------------------------------------===//
// MoE
//===----------------------------------------------------------------------===//

Mat ReferenceModel::Impl::moe(int64_t l, const Mat &x) {
  LayerWeights &lw = layers[size_t(l)];
  const int64_t n = x.rows, d = c.dim, k = c.nActivatedExperts;
  // Gate in fp32: sqrt(softplus(.)), the bias only selects.
  Mat logits = linear(x, lw.gate);
  std::vector<std::vector<int64_t>> chosen(static_cast<size_t>(n));
  std::vector<std::vector<float>> weights(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    routeToken(logits.row(i), lw.gateBias, k, float(c.routeScale),
               chosen[size_t(i)], weights[size_t(i)]);
  if (options.onDump) {
    std::vector<int32_t> ids(size_t(n * k), -1);
    std::vector<float> wts(size_t(n * k), 0.f);
    for (int64_t i = 0; i < n; ++i)
      for (size_t t = 0; t < chosen[size_t(i)].size() && int64_t(t) < k; ++t) {
        ids[size_t(i * k) + t] = int32_t(chosen[size_t(i)][t]);
        wts[size_t(i * k) + t] = weights[size_t(i)][t];
      }
    show(l, "ffn", "moe_ids", "<i4", {n, k}, ids);
    show(l, "ffn", "moe_weights", "<f4", {n, k}, wts);
  }
  auto expert = [&](const std::array<Weight, 3> &e, const Mat &in,
                    const std::vector<float> *rowWeights) {
    Mat g = linear(in, e[0]), up = linear(in, e[2]);
    Mat h(in.rows, c.moeInterDim);
    const float limit = float(c.swigluLimit);
    for (int64_t i = 0; i < in.rows; ++i)
      for (int64_t j = 0; j < c.moeInterDim; ++j)
        h.at(i, j) = swiglu(g.at(i, j), up.at(i, j), limit,
                            rowWeights ? (*rowWeights)[size_t(i)] : 1.f);
    return linear(h, e[1]);
  };
  Mat y(n, d);
  // Routed experts in ascending id, as model.py accumulates them.
  for (int64_t e = 0; e < c.nRoutedExperts; ++e) {
    std::vector<int64_t> rowsOf;
    std::vector<float> rowWeights;
    for (int64_t i = 0; i < n; ++i)
      for (size_t t = 0; t < chosen[size_t(i)].size(); ++t)
        if (chosen[size_t(i)][t] == e) {
          rowsOf.push_back(i);
          rowWeights.push_back(weights[size_t(i)][t]);
        }
    if (rowsOf.empty())
      continue;
    Mat in(int64_t(rowsOf.size()), d);
    for (size_t r = 0; r < rowsOf.size(); ++r)
      std::copy(x.row(rowsOf[r]), x.row(rowsOf[r]) + d, in.row(int64_t(r)));
    Mat out = expert(lw.experts[size_t(e)], in, &rowWeights);
    for (size_t r = 0; r < rowsOf.size(); ++r)
      for (int64_t j = 0; j < d; ++j)
        y.at(rowsOf[r], j) += out.at(int64_t(r), j);
  }
  Mat shared = expert(lw.shared, x, nullptr);
  for (size_t i = 0; i < y.v.size(); ++i)
    y.v[i] = bf16(y.v[i] + shared.v[i]);
  return y;
}

//===----------------------------------------------------------------------===//
// Engram
//===----------------------------------------------------------------------===//

absl::Status ReferenceModel::Impl::engram(int64_t l, std::vector<Mat> &streams,
                                          int64_t pos0) {
  LayerWeights &lw = layers[size_t(l)];
  const int64_t n = streams[0].rows, d = c.dim, hc = c.hcMult,
                hdE = c.engramHeadDim,
                cols = (c.engramMaxNgramSize - 1) * c.engramNHeads;
  std::vector<int64_t> ids;
  if (options.engramHash) {
    ids = options.engramHash(l, history, pos0, n);
  } else {
    auto hashed = hashers[size_t(l)]->hash(history, pos0, n);
    if (!hashed.ok())
      return hashed.status();
    ids = std::move(*hashed);
  }
  Mat rows(n, cols * hdE);
  const uint8_t *table = lw.engramTable.data,
                *scales = lw.engramTableScale.data;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t col = 0; col < cols; ++col) {
      int64_t id = ids[size_t(i * cols + col)];
      if (id < 0 || id >= lw.engramRows)
        id = 0; // cannot happen with a consistent table; keep it defined
      for (int64_t e = 0; e < hdE; ++e)
        rows.at(i, col * hdE + e) =
            bf16(nx::decodeE4M3(table[id * hdE + e]) *
                 nx::decodeUe8m0(scales[id * (hdE / 32) + e / 32]));
    }
  Mat kv = linear(rows, lw.engramWkv); // [n, (hc + 1) * d], bf16
  const float eps = float(c.normEps);
  for (int64_t i = 0; i < n; ++i) {
    const float *value = kv.row(i) + hc * d;
    for (int64_t j = 0; j < hc; ++j)
      engramGate(streams[size_t(j)].row(i), kv.row(i) + j * d, value,
                 &lw.engramQ[size_t(j * d)], &lw.engramK[size_t(j * d)], d, eps);
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// The whole model
//===----------------------------------------------------------------------===//

absl::StatusOr<std::vector<float>>
ReferenceModel::Impl::forward(const std::vector<int32_t> &tokens, bool decode) {
  const int64_t s = int64_t(tokens.size()), d = c.dim, hc = c.hcMult;
  for (int32_t t : tokens)
    if (t < 0 || t >= c.vocabSize)
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", t, " is outside the vocabulary of ", c.vocabSize));
  int64_t pos0 = position;
  for (int32_t t : tokens)
    history.push_back(t);

  // Embedding, copied into hc streams; the first pre-mix is one-hot(0).
  Mat h(s, d);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t e = 0; e < d; ++e)
      h.at(i, e) = nx::bf16ToFloat(
          loadU16(embed.data, int64_t(tokens[size_t(i)]) * d + e));
  std::vector<Mat> streams(static_cast<size_t>(hc), h);
  Mat preMix(s, hc);
  for (int64_t i = 0; i < s; ++i)
    preMix.at(i, 0) = 1.f;

  // Bounded replay: layers from `replayStart` on see only the tail rows.
  int64_t replayStart = c.nLayers, tail = s;
  if (!decode && options.boundedReplay) {
    replayStart = options.replayStartLayer;
    if (replayStart < 0) {
      replayStart = 0;
      for (const LayerRole &r : schedule.layers)
        if (r.mode == LayerMode::Full)
          replayStart = r.layer + 1;
    }
    tail = options.replayTail >= 0 ? options.replayTail : c.windowSize;
    tail = std::min(tail, s);
  }

  int64_t rowBase = pos0; // absolute position of row 0 of `streams`
  for (int64_t l = 0; l < c.nLayers; ++l) {
    LayerWeights &lw = layers[size_t(l)];
    if (l == replayStart && tail < streams[0].rows) {
      const int64_t drop = streams[0].rows - tail;
      for (Mat &m : streams) {
        Mat cut(tail, d);
        std::copy(m.v.begin() + drop * d, m.v.end(), cut.v.begin());
        m = std::move(cut);
      }
      Mat cut(tail, hc);
      std::copy(preMix.v.begin() + drop * hc, preMix.v.end(), cut.v.begin());
      preMix = std::move(cut);
      rowBase += drop;
    }
    const int64_t n = streams[0].rows;
    if (lw.engram)
      if (absl::Status st = engram(l, streams, rowBase); !st.ok())
        return st;

    auto streamPtrs = [&](int64_t i) {
      std::vector<const float *> p;
      for (Mat &m : streams)
        p.push_back(m.row(i));
      return p;
    };
    auto mixesOf = [&](bool attn) {
      std::vector<Mixes> out;
      for (int64_t i = 0; i < n; ++i)
        out.push_back(hcMixes(streamPtrs(i), d, attn ? lw.hcAttnFn : lw.hcFfnFn,
                              attn ? lw.hcAttnBase : lw.hcFfnBase,
                              attn ? lw.hcAttnScale : lw.hcFfnScale,
                              c.hcSinkhornIters, float(c.hcEps),
                              float(c.normEps)));
      return out;
    };
    auto showHidden = [&](const char *site) {
      if (!options.onDump)
        return;
      std::vector<float> h(size_t(n * hc * d));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < hc; ++j)
          std::copy(streams[size_t(j)].row(i), streams[size_t(j)].row(i) + d,
                    h.begin() + (i * hc + j) * d);
      show(l, site, "hidden", "<f4", {n, hc, d}, h);
    };
    auto post = [&](const Mat &y, const std::vector<Mixes> &mixes) {
      std::vector<Mat> next(static_cast<size_t>(hc), Mat(n, d));
      std::vector<const float *> in(static_cast<size_t>(hc));
      std::vector<float *> out(static_cast<size_t>(hc));
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < hc; ++j) {
          in[size_t(j)] = streams[size_t(j)].row(i);
          out[size_t(j)] = next[size_t(j)].row(i);
        }
        hcUpdate(in, y.row(i), mixes[size_t(i)], d, out);
      }
      streams = std::move(next);
    };

    // Attention site.
    std::vector<Mixes> attnMixes = mixesOf(true);
    Mat x(n, d);
    for (int64_t i = 0; i < n; ++i)
      hcPre(streamPtrs(i), preMix.row(i), d, x.row(i));
    Mat y = attention(l, rmsNorm(x, lw.attnNorm, c.normEps), rowBase, decode);
    post(y, attnMixes);
    showHidden("attn");

    // FFN site: its input mixes with the attention site's pre (Single-Pass).
    std::vector<Mixes> ffnMixes = mixesOf(false);
    for (int64_t i = 0; i < n; ++i)
      hcPre(streamPtrs(i), attnMixes[size_t(i)].pre.data(), d, x.row(i));
    y = moe(l, rmsNorm(x, lw.ffnNorm, c.normEps));
    post(y, ffnMixes);
    showHidden("ffn");
    for (int64_t i = 0; i < n; ++i)
      std::copy(ffnMixes[size_t(i)].pre.begin(), ffnMixes[size_t(i)].pre.end(),
                preMix.row(i));
  }

  // Collapse with the last FFN pre, final norm, fp32 head on the last row.
  const int64_t last = streams[0].rows - 1;
  Mat out(1, d);
  {
    std::vector<const float *> p;
    for (Mat &m : streams)
      p.push_back(m.row(last));
    hcPre(p, preMix.row(last), d, out.row(0));
  }
  Mat logits = linear(rmsNorm(out, finalNorm, c.normEps), head);
  position = pos0 + s;
  return logits.v;
}

//===----------------------------------------------------------------------===//
// Public interface
//===----------------------------------------------------------------------===//

TensorSource checkpointTensorSource(const checkpoint::Checkpoint &checkpoint) {
  return [&checkpoint](const std::string &name) -> absl::StatusOr<TensorBytes> {
    auto view = checkpoint.tensor(name);
    if (!view.ok())
      return view.status();
    return TensorBytes{std::string(checkpoint::dtypeName(view->dtype)),
                       view->shape, view->data, view->bytes};
  };
}

ReferenceModel::ReferenceModel(std::unique_ptr<Impl> impl)
    : impl(std::move(impl)) {}
ReferenceModel::~ReferenceModel() = default;

absl::StatusOr<std::unique_ptr<ReferenceModel>>
ReferenceModel::create(const ModelConfig &config, const Schedule &schedule,
                       const TensorSource &weights, ReferenceOptions options) {
  if (int64_t(schedule.layers.size()) != config.nLayers)
    return absl::InvalidArgumentError(
        absl::StrCat("schedule has ", schedule.layers.size(),
                     " layers; the config has ", config.nLayers));
  if (absl::Status s = validateSchedule(config, schedule, "reference schedule");
      !s.ok())
    return s;
  if (options.boundedReplay) {
    int64_t start = options.replayStartLayer;
    for (const LayerRole &r : schedule.layers) {
      if (start >= 0 && r.layer >= start && r.mode == LayerMode::Full)
        return absl::InvalidArgumentError(absl::StrCat(
            "bounded replay from layer ", start, ": layer ", r.layer,
            " is a KV source after the replay start"));
    }
    // Decode reads the late layers' rings as full windows: the tail must
    // fill them (as csa-bounded-replay requires).
    if (options.replayTail >= 0 && options.replayTail < config.windowSize)
      return absl::InvalidArgumentError(absl::StrCat(
          "bounded replay tail ", options.replayTail,
          " is shorter than the attention window ", config.windowSize));
    int64_t lastFull = -1;
    for (const LayerRole &r : schedule.layers)
      if (r.mode == LayerMode::Full)
        lastFull = r.layer;
    if (start < 0)
      start = lastFull + 1;
    for (int64_t e : config.engramLayerIds)
      if (e >= start)
        return absl::InvalidArgumentError(absl::StrCat(
            "bounded replay from layer ", start, ": Engram layer ", e,
            " runs after the replay start"));
  }
  auto impl = std::make_unique<Impl>();
  impl->c = config;
  impl->schedule = schedule;
  impl->options = std::move(options);
  impl->source = weights;
  if (absl::Status s = impl->load(); !s.ok())
    return s;
  return std::unique_ptr<ReferenceModel>(new ReferenceModel(std::move(impl)));
}

absl::StatusOr<std::vector<float>>
ReferenceModel::prefill(const std::vector<int32_t> &tokens) {
  if (impl->position != 0)
    return absl::FailedPreconditionError(
        "prefill runs once, at position 0; use decode afterwards");
  if (tokens.empty())
    return absl::InvalidArgumentError("prefill needs at least one token");
  return impl->forward(tokens, /*decode=*/false);
}

absl::StatusOr<std::vector<float>> ReferenceModel::decode(int32_t token) {
  if (impl->position == 0)
    return absl::FailedPreconditionError("decode needs a prefill first");
  return impl->forward({token}, /*decode=*/true);
}

int64_t ReferenceModel::position() const { return impl->position; }
const LayerState &ReferenceModel::layerState(int64_t layer) const {
  return impl->states.at(size_t(layer));
}
const ModelConfig &ReferenceModel::config() const { return impl->c; }

} // namespace csa::reference

//===- WeightManifest.cpp - Official tensor names, shapes, dtypes ---------===//
//
// The layout mirrors model.py's module tree: Block = attn (Attention, with a
// Compressor on KV sources and an Indexer on index sources), ffn (MoE: Gate,
// experts, shared_experts), optional engram, attn_norm/ffn_norm and the mHC
// parameters; Transformer = embed, layers, norm, head.
//
//===----------------------------------------------------------------------===//
#include "models/weights/WeightManifest.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <set>

namespace csa {

using checkpoint::DType;

int64_t TensorSpec::parameterCount() const {
  if (kind == TensorKind::Scale)
    return 0;
  int64_t n = 1;
  for (int64_t d : logicalShape)
    n *= d;
  return n;
}

uint64_t TensorSpec::byteSize() const {
  uint64_t n = checkpoint::dtypeSize(dtype);
  for (int64_t d : shape)
    n *= static_cast<uint64_t>(d);
  return n;
}

namespace {

/// model.py's fp8_block_size and fp4_block_size.
constexpr int64_t kFp8Block = 32;
constexpr int64_t kFp4Group = 32;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

class ManifestBuilder {
public:
  ManifestBuilder(const ModelConfig &config) : c(config) {}

  std::vector<TensorSpec> specs;
  absl::Status status = absl::OkStatus();
  int64_t layer = -1;

  void add(std::string name, DType dtype, std::vector<int64_t> shape,
           TensorKind kind) {
    TensorSpec spec;
    spec.name = std::move(name);
    spec.dtype = dtype;
    spec.logicalShape = shape;
    spec.shape = std::move(shape);
    spec.kind = kind;
    spec.layer = layer;
    specs.push_back(std::move(spec));
  }

  void norm(const std::string &prefix, int64_t dim) {
    add(prefix + ".weight", DType::BF16, {dim}, TensorKind::Norm);
  }

  /// A Linear(in, out) stored as `format` ("fp8", "fp4" or "bf16", the
  /// config's dtype names); `what` names the dimensions for errors.
  void linear(const std::string &prefix, int64_t out, int64_t in,
              const std::string &format, const std::string &what = "") {
    TensorSpec weight;
    weight.name = prefix + ".weight";
    weight.kind = TensorKind::Linear;
    weight.logicalShape = {out, in};
    weight.layer = layer;
    if (format == "fp8") {
      weight.dtype = DType::F8E4M3;
      weight.shape = {out, in};
      weight.storage = WeightStorage::Fp8Block;
      addQuantized(std::move(weight), prefix + ".scale",
                   {ceilDiv(out, kFp8Block), ceilDiv(in, kFp8Block)}, kFp8Block,
                   kFp8Block);
    } else if (format == "fp4") {
      if (in % kFp4Group != 0 && status.ok())
        status = absl::InvalidArgumentError(absl::StrCat(
            c.source, ": ", prefix, ": FP4 weights pack pairs and scale per ",
            kFp4Group, " input features, so ", what.empty() ? "K" : what, " = ",
            in, " must be a multiple of ", kFp4Group));
      weight.dtype = DType::I8;
      weight.shape = {out, in / 2};
      weight.storage = WeightStorage::Fp4Packed;
      addQuantized(std::move(weight), prefix + ".scale", {out, in / kFp4Group},
                   1, kFp4Group);
    } else {
      weight.dtype = format == "f32" ? DType::F32 : DType::BF16;
      weight.shape = {out, in};
      specs.push_back(std::move(weight));
    }
  }

  void addQuantized(TensorSpec weight, std::string scaleName,
                    std::vector<int64_t> scaleShape, int64_t blockRows,
                    int64_t blockCols) {
    TensorSpec scale;
    scale.name = std::move(scaleName);
    scale.dtype = DType::F8E8M0;
    scale.shape = std::move(scaleShape);
    scale.kind = TensorKind::Scale;
    scale.logicalShape = weight.logicalShape;
    scale.blockRows = blockRows;
    scale.blockCols = blockCols;
    scale.scaleOf = weight.name;
    scale.layer = layer;
    weight.scaleName = scale.name;
    weight.blockRows = blockRows;
    weight.blockCols = blockCols;
    specs.push_back(std::move(weight));
    specs.push_back(std::move(scale));
  }

  void attention(const LayerRole &role, const std::string &p) {
    const std::string &dense = c.dtype;
    const int64_t qk = c.nHeads * c.headDim;
    add(p + "attn_sink", DType::F32, {c.nHeads}, TensorKind::AttnSink);
    linear(p + "wq_a", c.qLoraRank, c.dim, dense);
    norm(p + "q_norm", c.qLoraRank);
    linear(p + "wq_b", qk, c.qLoraRank, dense);
    linear(p + "wkv", c.headDim, c.dim, dense);
    norm(p + "kv_norm", c.headDim);
    // Grouped output: each of o_groups projects its own heads' slice.
    linear(p + "wo_a", c.oGroups * c.oLoraRank, qk / c.oGroups, dense);
    linear(p + "wo_b", c.dim, c.oGroups * c.oLoraRank, dense);
    if (role.mode == LayerMode::Full) {
      // Compressor (KV sources); the gate exists only where groups pool.
      linear(p + "compressor.wkv", c.headDim, c.dim, "bf16");
      if (role.ratio > 1)
        linear(p + "compressor.wgate", c.headDim, c.dim, "bf16");
      norm(p + "compressor.norm", c.headDim);
    }
    if (role.mode == LayerMode::Full || role.mode == LayerMode::Reindex) {
      linear(p + "indexer.wq_b", c.indexNHeads * c.indexHeadDim, c.qLoraRank,
             dense);
      linear(p + "indexer.weights_proj", c.indexNHeads, c.dim, "bf16");
      // Index keys come from the own latent: KV sources only.
      if (role.mode == LayerMode::Full) {
        linear(p + "indexer.wk", c.indexHeadDim, c.headDim, "bf16");
        norm(p + "indexer.k_norm", c.indexHeadDim);
      }
    }
  }

  void moe(const std::string &p, const ManifestOptions &options) {
    linear(p + "gate", c.nRoutedExperts, c.dim, "bf16");
    add(p + "gate.bias", DType::F32, {c.nRoutedExperts},
        TensorKind::RouterBias);
    if (options.routerVisionBias)
      add(p + "gate.bias_vl", DType::F32, {c.nRoutedExperts},
          TensorKind::RouterBias);
    for (int64_t e = 0; e < c.nRoutedExperts; ++e)
      expert(absl::StrCat(p, "experts.", e, "."), c.expertDtype);
    if (c.nSharedExperts == 1)
      expert(p + "shared_experts.", c.dtype);
    else if (c.nSharedExperts > 1 && status.ok())
      status = absl::InvalidArgumentError(absl::StrCat(
          c.source, ": n_shared_experts = ", c.nSharedExperts,
          ": the reference model has one shared expert (or none)"));
  }

  void expert(const std::string &p, const std::string &format) {
    linear(p + "w1", c.moeInterDim, c.dim, format, "dim");
    linear(p + "w2", c.dim, c.moeInterDim, format, "moe_inter_dim");
    linear(p + "w3", c.moeInterDim, c.dim, format, "dim");
  }

  void engram(const std::string &p, int64_t rows) {
    const int64_t hd = c.engramHeadDim;
    TensorSpec table;
    table.name = p + "embed.weight";
    table.dtype = DType::F8E4M3;
    table.shape = table.logicalShape = {rows, hd};
    table.kind = TensorKind::EngramTable;
    table.storage = WeightStorage::Fp8Block;
    table.layer = layer;
    // One scale per 32 channels of a row; a head_dim that is not a multiple
    // of 32 (the tiny model's 16) gets a partial last group.
    addQuantized(std::move(table), p + "embed.scale",
                 {rows, ceilDiv(hd, kFp8Block)}, 1, kFp8Block);
    const int64_t width = (c.engramMaxNgramSize - 1) * c.engramNHeads * hd;
    linear(p + "wkv", c.dim * (c.hcMult + 1), width, c.dtype);
    add(p + "q_weight", DType::BF16, {c.hcMult, c.dim}, TensorKind::EngramGate);
    add(p + "k_weight", DType::BF16, {c.hcMult, c.dim}, TensorKind::EngramGate);
  }

  void hyperConnections(const std::string &p) {
    const int64_t mixes = (2 + c.hcMult) * c.hcMult;
    for (const char *site : {"attn", "ffn"}) {
      add(absl::StrCat(p, "hc_", site, "_fn"), DType::F32,
          {mixes, c.hcMult * c.dim}, TensorKind::HcFn);
      add(absl::StrCat(p, "hc_", site, "_base"), DType::F32, {mixes},
          TensorKind::HcBase);
      add(absl::StrCat(p, "hc_", site, "_scale"), DType::F32, {3},
          TensorKind::HcScale);
    }
  }

private:
  const ModelConfig &c;
};

} // namespace

absl::StatusOr<std::vector<TensorSpec>>
weightManifest(const ModelConfig &config, const Schedule &schedule,
               const ManifestOptions &options) {
  if (int64_t(schedule.layers.size()) != config.nLayers)
    return absl::InvalidArgumentError(absl::StrCat(
        config.source, ": the schedule names ", schedule.layers.size(),
        " layers; the model has ", config.nLayers));
  ManifestBuilder b(config);
  b.add("embed.weight", DType::BF16, {config.vocabSize, config.dim},
        TensorKind::Embedding);
  for (const LayerRole &role : schedule.layers) {
    b.layer = role.layer;
    const std::string p = absl::StrCat("layers.", role.layer, ".");
    b.attention(role, p + "attn.");
    b.moe(p + "ffn.", options);
    auto engram = std::find(config.engramLayerIds.begin(),
                            config.engramLayerIds.end(), role.layer);
    if (engram != config.engramLayerIds.end())
      b.engram(p + "engram.", config.engramNumEmbeddings.at(
                                  engram - config.engramLayerIds.begin()));
    b.norm(p + "attn_norm", config.dim);
    b.norm(p + "ffn_norm", config.dim);
    b.hyperConnections(p);
  }
  b.layer = -1;
  b.norm("norm", config.dim);
  b.add("head.weight", DType::BF16, {config.vocabSize, config.dim},
        TensorKind::Head);
  if (!b.status.ok())
    return b.status;
  return std::move(b.specs);
}

ManifestTotals manifestTotals(const std::vector<TensorSpec> &manifest) {
  ManifestTotals totals;
  for (const TensorSpec &spec : manifest) {
    ++totals.tensors;
    totals.parameters += spec.parameterCount();
    totals.bytes += spec.byteSize();
  }
  return totals;
}

bool isNonBackboneTensor(const std::string &name) {
  for (const char *prefix : {"mtp.", "vision.", "aligner."})
    if (absl::StartsWith(name, prefix))
      return true;
  return name == "image_start" || name == "image_end" ||
         name == "image_newline";
}

absl::Status checkAgainstManifest(const checkpoint::Checkpoint &checkpoint,
                                  const std::vector<TensorSpec> &manifest,
                                  const ManifestCheckOptions &options) {
  std::vector<std::string> problems;
  absl::StatusCode code = absl::StatusCode::kOk;
  auto problem = [&](absl::StatusCode c, std::string message) {
    if (code == absl::StatusCode::kOk)
      code = c;
    problems.push_back(std::move(message));
  };

  std::set<std::string> expected;
  for (const TensorSpec &spec : manifest) {
    expected.insert(spec.name);
    const std::string wanted =
        absl::StrCat(checkpoint::dtypeName(spec.dtype), " ",
                     checkpoint::formatShape(spec.shape));
    auto view = checkpoint.tensor(spec.name);
    if (!view.ok()) {
      problem(view.status().code(), absl::StrCat(view.status().message(),
                                                 " (expected ", wanted, ")"));
      continue;
    }
    if (view->dtype != spec.dtype)
      problem(absl::StatusCode::kInvalidArgument,
              absl::StrCat(view->file, ": tensor '", spec.name, "' has dtype ",
                           checkpoint::dtypeName(view->dtype),
                           "; the manifest expects ", wanted));
    if (view->shape != spec.shape)
      problem(absl::StatusCode::kInvalidArgument,
              absl::StrCat(view->file, ": tensor '", spec.name, "' has shape ",
                           checkpoint::formatShape(view->shape),
                           "; the manifest expects ", wanted));
  }
  if (!options.allowUnknownTensors)
    for (const std::string &name : checkpoint.names())
      if (!expected.count(name) && !isNonBackboneTensor(name)) {
        auto file = checkpoint.fileOf(name);
        problem(absl::StatusCode::kInvalidArgument,
                absl::StrCat(file.ok() ? *file : checkpoint.path(),
                             ": unexpected tensor '", name,
                             "' (not in the manifest of this config and "
                             "schedule)"));
      }
  if (problems.empty())
    return absl::OkStatus();

  std::string message = absl::StrCat(
      checkpoint.path(), ": ", problems.size(),
      problems.size() == 1 ? " problem" : " problems",
      " against the weight manifest (", manifest.size(), " tensors):");
  const size_t listed =
      std::min(problems.size(), size_t(std::max(options.maxListed, 1)));
  for (size_t i = 0; i < listed; ++i)
    absl::StrAppend(&message, "\n  ", problems[i]);
  if (listed < problems.size())
    absl::StrAppend(&message, "\n  ... and ", problems.size() - listed,
                    " more");
  return absl::Status(code, message);
}

} // namespace csa

//===- WeightManifestTest.cpp - Tensor names, shapes, dtypes --------------===//
//
// The released model's manifest against spec §6 and against the released
// checkpoint's own accounting (93,418 backbone tensors of 96,085; their bytes
// from the per-subsystem byte counts of the 48 shard headers), and its
// parameter total against the cost report (748,494,684,784, by op).
//
//===----------------------------------------------------------------------===//
#include "CheckpointTestSupport.h"

#include "models/variants/Variants.h"
#include "models/weights/WeightManifest.h"

#include "absl/strings/match.h"
#include <nlohmann/json.hpp>

#include <map>

namespace csa::test {
namespace {

using checkpoint::DType;
using nlohmann::json;

std::vector<TensorSpec> manifestOf(const std::string &variant,
                                   const ManifestOptions &options = {}) {
  auto v = loadVariant(variant);
  EXPECT_TRUE(v.ok()) << v.status();
  if (!v.ok())
    return {};
  auto manifest = weightManifest(v->config, v->schedule, options);
  EXPECT_TRUE(manifest.ok()) << manifest.status();
  return manifest.ok() ? *manifest : std::vector<TensorSpec>{};
}

const TensorSpec *find(const std::vector<TensorSpec> &manifest,
                       const std::string &name) {
  for (const TensorSpec &spec : manifest)
    if (spec.name == name)
      return &spec;
  return nullptr;
}

/// Expects `name` with this dtype and stored shape.
::testing::AssertionResult has(const std::vector<TensorSpec> &manifest,
                               const std::string &name, DType dtype,
                               std::vector<int64_t> shape) {
  const TensorSpec *spec = find(manifest, name);
  if (!spec)
    return ::testing::AssertionFailure() << name << " is not in the manifest";
  if (spec->dtype != dtype || spec->shape != shape)
    return ::testing::AssertionFailure()
           << name << " is " << checkpoint::dtypeName(spec->dtype) << " "
           << checkpoint::formatShape(spec->shape);
  return ::testing::AssertionSuccess();
}

class Released : public ::testing::Test {
protected:
  static void SetUpTestSuite() { manifest = manifestOf("released"); }
  static std::vector<TensorSpec> manifest;
};
std::vector<TensorSpec> Released::manifest;

TEST_F(Released, Totals) {
  ManifestTotals totals = manifestTotals(manifest);
  EXPECT_EQ(totals.tensors, 93418);
  // The cost report's parameters.total (csa-compile --report=json).
  EXPECT_EQ(totals.parameters, 748494684784);
  // The released checkpoint's backbone bytes: its 510,286,023,000 bytes less
  // DSpark, vision and the image-span embeddings.
  EXPECT_EQ(totals.bytes, 501382611408u);
}

TEST_F(Released, ParametersByOpMatchTheCostReport) {
  std::map<std::string, int64_t> byOp;
  for (const TensorSpec &spec : manifest) {
    const std::string &n = spec.name;
    std::string op = n == "embed.weight"                ? "embed"
                     : n == "head.weight"               ? "lm_head"
                     : absl::StrContains(n, ".engram.") ? "engram"
                     : absl::StrContains(n, ".hc_")     ? "hc_mix"
                     : absl::StrContains(n, ".attn.")   ? "attention"
                     : absl::StrContains(n, ".ffn.")    ? "moe"
                                                        : "rms_norm";
    byOp[op] += spec.parameterCount();
  }
  EXPECT_EQ(byOp["attention"], 5126564864);
  EXPECT_EQ(byOp["embed"], 661913600);
  EXPECT_EQ(byOp["engram"], 196928504320);
  EXPECT_EQ(byOp["hc_mix"], 39323760);
  EXPECT_EQ(byOp["lm_head"], 661913600);
  EXPECT_EQ(byOp["moe"], 545076049920);
  EXPECT_EQ(byOp["rms_norm"], 414720);
}

TEST_F(Released, TensorsPerLayerKind) {
  std::map<int64_t, int> perLayer;
  for (const TensorSpec &spec : manifest)
    ++perLayer[spec.layer];
  // Every layer: 13 attention, 3 router, 384 x 6 expert, 6 shared-expert,
  // 2 norms, 6 mHC tensors.
  const int base = 13 + 3 + 384 * 6 + 6 + 2 + 6;
  EXPECT_EQ(base, 2334);
  EXPECT_EQ(perLayer[0], base);          // SWA-only
  EXPECT_EQ(perLayer[1], base + 6);      // SWA-only + Engram
  EXPECT_EQ(perLayer[2], base + 8);      // Full, ratio 2
  EXPECT_EQ(perLayer[3], base);          // Reuse
  EXPECT_EQ(perLayer[8], base + 8);      // Full, ratio 2
  EXPECT_EQ(perLayer[14], base + 8 + 6); // Full, ratio 2 + Engram
  EXPECT_EQ(perLayer[20], base + 7);     // Full, ratio 1 (no wgate)
  EXPECT_EQ(perLayer[21], base);         // Reuse
  EXPECT_EQ(perLayer[24], base + 3);     // Reindex
  EXPECT_EQ(perLayer[39], base);         // Reuse
  EXPECT_EQ(perLayer[-1], 3);            // embed, norm, head
  EXPECT_EQ(perLayer.size(), 41u);       // 40 layers + globals
}

TEST_F(Released, AttentionShapesOfSpec6) {
  const std::string p = "layers.2.attn.";
  EXPECT_TRUE(has(manifest, p + "wq_a.weight", DType::F8E4M3, {1280, 5120}));
  EXPECT_TRUE(has(manifest, p + "wq_a.scale", DType::F8E8M0, {40, 160}));
  EXPECT_TRUE(has(manifest, p + "q_norm.weight", DType::BF16, {1280}));
  EXPECT_TRUE(has(manifest, p + "wq_b.weight", DType::F8E4M3, {32768, 1280}));
  EXPECT_TRUE(has(manifest, p + "wq_b.scale", DType::F8E8M0, {1024, 40}));
  EXPECT_TRUE(has(manifest, p + "wkv.weight", DType::F8E4M3, {512, 5120}));
  EXPECT_TRUE(has(manifest, p + "wkv.scale", DType::F8E8M0, {16, 160}));
  EXPECT_TRUE(has(manifest, p + "kv_norm.weight", DType::BF16, {512}));
  EXPECT_TRUE(has(manifest, p + "wo_a.weight", DType::F8E4M3, {8192, 4096}));
  EXPECT_TRUE(has(manifest, p + "wo_a.scale", DType::F8E8M0, {256, 128}));
  EXPECT_TRUE(has(manifest, p + "wo_b.weight", DType::F8E4M3, {5120, 8192}));
  EXPECT_TRUE(has(manifest, p + "wo_b.scale", DType::F8E8M0, {160, 256}));
  EXPECT_TRUE(has(manifest, p + "attn_sink", DType::F32, {64}));
  // Full layers own the compressor and the index keys.
  EXPECT_TRUE(
      has(manifest, p + "compressor.wkv.weight", DType::BF16, {512, 5120}));
  EXPECT_TRUE(
      has(manifest, p + "compressor.wgate.weight", DType::BF16, {512, 5120}));
  EXPECT_TRUE(has(manifest, p + "compressor.norm.weight", DType::BF16, {512}));
  EXPECT_TRUE(has(manifest, p + "indexer.wk.weight", DType::BF16, {128, 512}));
  EXPECT_TRUE(has(manifest, p + "indexer.k_norm.weight", DType::BF16, {128}));
  EXPECT_TRUE(
      has(manifest, p + "indexer.wq_b.weight", DType::F8E4M3, {4096, 1280}));
  EXPECT_TRUE(
      has(manifest, p + "indexer.wq_b.scale", DType::F8E8M0, {128, 40}));
  EXPECT_TRUE(has(manifest, p + "indexer.weights_proj.weight", DType::BF16,
                  {32, 5120}));
  EXPECT_EQ(find(manifest, p + "compressor.ape"), nullptr);
  // Layer 20 pools nothing: no gate.
  EXPECT_TRUE(has(manifest, "layers.20.attn.compressor.wkv.weight", DType::BF16,
                  {512, 5120}));
  EXPECT_EQ(find(manifest, "layers.20.attn.compressor.wgate.weight"), nullptr);
  // Reindex: own queries and weights, no keys, no compressor.
  EXPECT_NE(find(manifest, "layers.24.attn.indexer.wq_b.weight"), nullptr);
  EXPECT_NE(find(manifest, "layers.24.attn.indexer.weights_proj.weight"),
            nullptr);
  EXPECT_EQ(find(manifest, "layers.24.attn.indexer.wk.weight"), nullptr);
  EXPECT_EQ(find(manifest, "layers.24.attn.compressor.wkv.weight"), nullptr);
  // Reuse and SWA-only: neither.
  for (const char *layer : {"0", "3", "21", "25"}) {
    const std::string q = std::string("layers.") + layer + ".attn.";
    EXPECT_EQ(find(manifest, q + "indexer.wq_b.weight"), nullptr) << layer;
    EXPECT_EQ(find(manifest, q + "compressor.wkv.weight"), nullptr) << layer;
  }
}

TEST_F(Released, FfnAndHyperConnectionShapes) {
  const std::string p = "layers.5.";
  EXPECT_TRUE(has(manifest, p + "ffn.gate.weight", DType::BF16, {384, 5120}));
  EXPECT_TRUE(has(manifest, p + "ffn.gate.bias", DType::F32, {384}));
  EXPECT_TRUE(has(manifest, p + "ffn.gate.bias_vl", DType::F32, {384}));
  for (int e : {0, 383}) {
    const std::string x = p + "ffn.experts." + std::to_string(e) + ".";
    EXPECT_TRUE(has(manifest, x + "w1.weight", DType::I8, {2304, 2560}));
    EXPECT_TRUE(has(manifest, x + "w1.scale", DType::F8E8M0, {2304, 160}));
    EXPECT_TRUE(has(manifest, x + "w3.weight", DType::I8, {2304, 2560}));
    EXPECT_TRUE(has(manifest, x + "w3.scale", DType::F8E8M0, {2304, 160}));
    EXPECT_TRUE(has(manifest, x + "w2.weight", DType::I8, {5120, 1152}));
    EXPECT_TRUE(has(manifest, x + "w2.scale", DType::F8E8M0, {5120, 72}));
  }
  EXPECT_EQ(find(manifest, p + "ffn.experts.384.w1.weight"), nullptr);
  EXPECT_TRUE(has(manifest, p + "ffn.shared_experts.w1.weight", DType::F8E4M3,
                  {2304, 5120}));
  EXPECT_TRUE(has(manifest, p + "ffn.shared_experts.w1.scale", DType::F8E8M0,
                  {72, 160}));
  EXPECT_TRUE(has(manifest, p + "ffn.shared_experts.w2.weight", DType::F8E4M3,
                  {5120, 2304}));
  EXPECT_TRUE(has(manifest, p + "ffn.shared_experts.w2.scale", DType::F8E8M0,
                  {160, 72}));
  for (const char *site : {"attn", "ffn"}) {
    const std::string h = p + "hc_" + site;
    EXPECT_TRUE(has(manifest, h + "_fn", DType::F32, {24, 20480}));
    EXPECT_TRUE(has(manifest, h + "_base", DType::F32, {24}));
    EXPECT_TRUE(has(manifest, h + "_scale", DType::F32, {3}));
  }
  EXPECT_TRUE(has(manifest, p + "attn_norm.weight", DType::BF16, {5120}));
  EXPECT_TRUE(has(manifest, p + "ffn_norm.weight", DType::BF16, {5120}));
}

TEST_F(Released, EngramAndGlobals) {
  for (auto [layer, rows] : {std::pair<int, int64_t>{1, 384006168},
                             std::pair<int, int64_t>{14, 384016682}}) {
    const std::string p = "layers." + std::to_string(layer) + ".engram.";
    EXPECT_TRUE(has(manifest, p + "embed.weight", DType::F8E4M3, {rows, 256}));
    EXPECT_TRUE(has(manifest, p + "embed.scale", DType::F8E8M0, {rows, 8}));
    EXPECT_TRUE(has(manifest, p + "wkv.weight", DType::F8E4M3, {25600, 6144}));
    EXPECT_TRUE(has(manifest, p + "wkv.scale", DType::F8E8M0, {800, 192}));
    EXPECT_TRUE(has(manifest, p + "q_weight", DType::BF16, {4, 5120}));
    EXPECT_TRUE(has(manifest, p + "k_weight", DType::BF16, {4, 5120}));
  }
  EXPECT_EQ(find(manifest, "layers.2.engram.wkv.weight"), nullptr);
  EXPECT_TRUE(has(manifest, "embed.weight", DType::BF16, {129280, 5120}));
  EXPECT_TRUE(has(manifest, "head.weight", DType::BF16, {129280, 5120}));
  EXPECT_TRUE(has(manifest, "norm.weight", DType::BF16, {5120}));
  for (const TensorSpec &spec : manifest) {
    EXPECT_FALSE(isNonBackboneTensor(spec.name)) << spec.name;
    EXPECT_FALSE(absl::StartsWith(spec.name, "layers.40.")) << spec.name;
  }
  EXPECT_TRUE(isNonBackboneTensor("mtp.0.main_proj.weight"));
  EXPECT_TRUE(isNonBackboneTensor("vision.blocks.0.attn.wo.weight"));
  EXPECT_TRUE(isNonBackboneTensor("image_newline"));
  EXPECT_FALSE(isNonBackboneTensor("layers.0.attn.wq_a.weight"));
}

TEST_F(Released, QuantizedPairsAndParameterCounts) {
  const TensorSpec *w1 = find(manifest, "layers.0.ffn.experts.0.w1.weight");
  ASSERT_NE(w1, nullptr);
  EXPECT_EQ(w1->storage, WeightStorage::Fp4Packed);
  EXPECT_EQ(w1->logicalShape, (std::vector<int64_t>{2304, 5120}));
  EXPECT_EQ(w1->parameterCount(), 2304 * 5120); // 2 values per I8 byte
  EXPECT_EQ(w1->scaleName, "layers.0.ffn.experts.0.w1.scale");
  EXPECT_EQ(w1->blockCols, 32);
  const TensorSpec *scale = find(manifest, w1->scaleName);
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->kind, TensorKind::Scale);
  EXPECT_EQ(scale->scaleOf, w1->name);
  EXPECT_EQ(scale->parameterCount(), 0);
  const TensorSpec *wq = find(manifest, "layers.0.attn.wq_a.weight");
  ASSERT_NE(wq, nullptr);
  EXPECT_EQ(wq->storage, WeightStorage::Fp8Block);
  EXPECT_EQ(wq->blockRows, 32);
  EXPECT_EQ(wq->blockCols, 32);
  // Every quantized tensor is followed by its scale.
  for (size_t i = 0; i < manifest.size(); ++i)
    if (!manifest[i].scaleName.empty()) {
      ASSERT_LT(i + 1, manifest.size());
      EXPECT_EQ(manifest[i + 1].name, manifest[i].scaleName);
    }
}

TEST(WeightManifest, SchedulesChangeTheTensors) {
  // The cost report's totals of the ablations.
  EXPECT_EQ(manifestTotals(manifestOf("all-full")).parameters, 748787586928);
  EXPECT_EQ(manifestTotals(manifestOf("no-reindex")).parameters, 748473057904);
  // Bytes as well as parameters follow the schedule: no-reindex drops 4 x
  // (wq_b + scale + weights_proj).
  EXPECT_EQ(manifestTotals(manifestOf("released")).tensors -
                manifestTotals(manifestOf("no-reindex")).tensors,
            12);
}

TEST(WeightManifest, WithoutTheVisionRouterBias) {
  ManifestOptions options;
  options.routerVisionBias = false;
  std::vector<TensorSpec> manifest = manifestOf("released", options);
  EXPECT_EQ(manifestTotals(manifest).tensors, 93418 - 40);
  EXPECT_EQ(find(manifest, "layers.0.ffn.gate.bias_vl"), nullptr);
  EXPECT_NE(find(manifest, "layers.0.ffn.gate.bias"), nullptr);
}

absl::StatusOr<std::vector<TensorSpec>>
editedManifest(const std::function<void(json &)> &edit) {
  auto text = embeddedConfig("tiny");
  EXPECT_TRUE(text.ok());
  json root = json::parse(*text);
  edit(root);
  auto config = parseModelConfig(root.dump(), "edited.json");
  if (!config.ok())
    return config.status();
  auto schedule = scheduleFromConfig(*config);
  if (!schedule.ok())
    return schedule.status();
  return weightManifest(*config, *schedule);
}

TEST(WeightManifest, WeightDTypesFollowTheConfig) {
  auto bf16 = editedManifest([](json &j) { j["dtype"] = "bf16"; });
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_TRUE(has(*bf16, "layers.0.attn.wq_a.weight", DType::BF16, {32, 64}));
  EXPECT_EQ(find(*bf16, "layers.0.attn.wq_a.scale"), nullptr);
  // Experts keep their own format; the Engram table is always FP8.
  EXPECT_TRUE(
      has(*bf16, "layers.0.ffn.experts.0.w1.weight", DType::I8, {32, 32}));
  const TensorSpec *table = find(*bf16, "layers.1.engram.embed.weight");
  const TensorSpec *tableScale = find(*bf16, "layers.1.engram.embed.scale");
  ASSERT_TRUE(table && tableScale);
  EXPECT_EQ(table->dtype, DType::F8E4M3);
  EXPECT_EQ(table->shape[1], 32);
  EXPECT_EQ(tableScale->dtype, DType::F8E8M0);
  // One UE8M0 scale per 32 channels of a row.
  EXPECT_EQ(tableScale->shape, (std::vector<int64_t>{table->shape[0], 1}));

  auto fp8 = editedManifest([](json &j) { j["expert_dtype"] = "fp8"; });
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  EXPECT_TRUE(
      has(*fp8, "layers.0.ffn.experts.0.w1.weight", DType::F8E4M3, {32, 64}));
  EXPECT_TRUE(
      has(*fp8, "layers.0.ffn.experts.0.w1.scale", DType::F8E8M0, {1, 2}));
}

TEST(WeightManifest, Fp4NeedsKAMultipleOf32) {
  auto bad = editedManifest([](json &j) { j["moe_inter_dim"] = 48; });
  EXPECT_TRUE(failsWith(bad, {"edited.json", "layers.0.ffn.experts.0.w2",
                              "moe_inter_dim = 48 must be a multiple of 32"}));
}

TEST(WeightManifest, ScheduleMustCoverTheModel) {
  auto v = loadVariant("tiny");
  ASSERT_TRUE(v.ok());
  Schedule shorter = v->schedule;
  shorter.layers.pop_back();
  EXPECT_TRUE(failsWith(weightManifest(v->config, shorter),
                        {"the schedule names 7 layers; the model has 8"}));
}

} // namespace
} // namespace csa::test

//===- RandomCheckpointTest.cpp - Generated checkpoints -------------------===//
//
// The tiny variant generated to disk, reopened through the real loader and
// checked against its manifest; determinism; health of the values (every
// weight dequantized with the numerics library); config.json round trips;
// and checkAgainstManifest naming each kind of mismatch.
//
//===----------------------------------------------------------------------===//
#include "CheckpointTestSupport.h"

#include "models/variants/Variants.h"
#include "models/weights/RandomCheckpoint.h"
#include "models/weights/WeightManifest.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/numerics/Numerics.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <cstring>
#include <functional>
#include <map>

namespace csa::test {
namespace {

using checkpoint::Checkpoint;
using checkpoint::DType;
using checkpoint::TensorView;
using nlohmann::json;

ModelVariant variant(const std::string &name) {
  auto v = loadVariant(name);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : ModelVariant{};
}

std::vector<TensorSpec> manifestOf(const ModelVariant &v) {
  auto manifest = weightManifest(v.config, v.schedule);
  EXPECT_TRUE(manifest.ok()) << manifest.status();
  return manifest.ok() ? *manifest : std::vector<TensorSpec>{};
}

RandomCheckpointResult generate(const ModelVariant &v, const std::string &dir,
                                uint64_t seed = 0,
                                uint64_t shardBytes = 4ull << 30) {
  RandomCheckpointOptions options;
  options.seed = seed;
  options.writer.shardBytes = shardBytes;
  options.origin = "variant '" + v.name + "'";
  auto result = writeRandomCheckpoint(v.config, v.schedule, dir, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : RandomCheckpointResult{};
}

Checkpoint openOrDie(const std::string &path) {
  auto checkpoint = Checkpoint::open(path);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  if (!checkpoint.ok())
    std::abort();
  return std::move(*checkpoint);
}

TEST(RandomCheckpoint, TinyPassesTheManifestCheck) {
  TempDir dir;
  ModelVariant tiny = variant("tiny");
  RandomCheckpointResult result = generate(tiny, dir.path());
  ASSERT_EQ(result.files.size(), 3u);
  EXPECT_EQ(fs::path(result.files[0]).filename(), "model.safetensors");
  EXPECT_EQ(fs::path(result.files[1]).filename(), "config.json");
  // tiny has Engram layers and no tokenizer: it carries the modulo map (its
  // 512 ids in 512 classes: the identity).
  EXPECT_EQ(fs::path(result.files[2]).filename(), kRandomEngramTokenMapFile);
  {
    std::ifstream in(result.files[2]);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string expected = "[";
    for (int t = 0; t < 512; ++t)
      expected += (t ? "," : "") + std::to_string(t);
    EXPECT_EQ(text, expected + "]\n");
  }

  Checkpoint checkpoint = openOrDie(dir.path());
  EXPECT_TRUE(checkpoint.validate().ok());
  std::vector<TensorSpec> manifest = manifestOf(tiny);
  absl::Status check = checkAgainstManifest(checkpoint, manifest);
  EXPECT_TRUE(check.ok()) << check;
  EXPECT_EQ(int64_t(checkpoint.names().size()), result.totals.tensors);
  EXPECT_EQ(result.totals.tensors, int64_t(manifest.size()));
  uint64_t bytes = 0;
  for (const std::string &name : checkpoint.names())
    bytes += checkpoint.tensor(name)->bytes;
  EXPECT_EQ(bytes, result.totals.bytes);
}

TEST(RandomCheckpoint, ConfigJsonDescribesTheVariant) {
  TempDir dir;
  for (const char *name : {"tiny", "tiny-all-full", "tiny-no-reindex"}) {
    ModelVariant v = variant(name);
    const std::string out = dir / name;
    generate(v, out);
    auto config = loadModelConfig(out + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    auto schedule = scheduleFromConfig(*config);
    ASSERT_TRUE(schedule.ok()) << schedule.status();
    EXPECT_EQ(schedule->letters(), v.schedule.letters()) << name;
    EXPECT_EQ(flatConfigJson(*config), flatConfigJson(v.config)) << name;
    // So `check` with the written config finds the same manifest.
    auto manifest = weightManifest(*config, *schedule);
    ASSERT_TRUE(manifest.ok());
    EXPECT_TRUE(checkAgainstManifest(openOrDie(out), *manifest).ok()) << name;
  }
}

TEST(RandomCheckpoint, FlatConfigRoundTripsTheReleasedConfig) {
  for (const char *name : {"deepseek-v4.1-flash", "deepseek-v4.1-flash-hf"}) {
    auto text = embeddedConfig(name);
    ASSERT_TRUE(text.ok());
    auto config = parseModelConfig(*text, name);
    ASSERT_TRUE(config.ok()) << config.status();
    json original = json::parse(*text);
    nlohmann::ordered_json flat = flatConfigJson(*config, &original);
    auto again = parseModelConfig(flat.dump(), "flat");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(flatConfigJson(*again), flatConfigJson(*config)) << name;
    EXPECT_EQ(again->layout, ConfigLayout::Flat);
    // Fields ModelConfig does not model survive from a flat original only.
    EXPECT_EQ(flat.contains("vision_n_layers"),
              std::string(name) == "deepseek-v4.1-flash");
  }
}

TEST(RandomCheckpoint, DeterministicForASeed) {
  TempDir dir;
  ModelVariant tiny = variant("tiny");
  generate(tiny, dir / "a", 7);
  generate(tiny, dir / "b", 7);
  generate(tiny, dir / "c", 8);
  std::vector<uint8_t> a = readBytes(dir / "a/model.safetensors");
  EXPECT_EQ(a, readBytes(dir / "b/model.safetensors"));
  std::vector<uint8_t> c = readBytes(dir / "c/model.safetensors");
  ASSERT_EQ(a.size(), c.size()); // same header, other values
  EXPECT_NE(a, c);
}

// A seed names a checkpoint: the same seed must give the same bytes in every
// build (results quoted with --random-weights=N stay reproducible, and the
// batched, vectorized generator must equal the per-element one it replaced,
// whose bytes these are). Covers every storage: BF16, F32, FP8 blocks, FP4.
TEST(RandomCheckpoint, BytesOfASeedArePinned) {
  TempDir dir;
  generate(variant("tiny"), dir / "a", 7);
  const std::vector<uint8_t> bytes = readBytes(dir / "a/model.safetensors");
  uint64_t h = 0xCBF29CE484222325ull; // FNV-1a
  for (uint8_t b : bytes)
    h = (h ^ b) * 0x100000001B3ull;
  EXPECT_EQ(bytes.size(), 1036674u);
  EXPECT_EQ(h, 0x28a788d0b30e6e52ull) << std::hex << "0x" << h;
}

TEST(RandomCheckpoint, ShardingDoesNotChangeTheValues) {
  TempDir dir;
  ModelVariant tiny = variant("tiny");
  generate(tiny, dir / "one");
  RandomCheckpointResult sharded = generate(tiny, dir / "many", 0, 64 << 10);
  EXPECT_GT(sharded.files.size(), 5u); // shards + index + config
  Checkpoint one = openOrDie(dir / "one"), many = openOrDie(dir / "many");
  EXPECT_TRUE(many.isSharded());
  EXPECT_TRUE(many.validate().ok());
  ASSERT_EQ(one.names(), many.names());
  for (const std::string &name : one.names()) {
    TensorView x = *one.tensor(name), y = *many.tensor(name);
    ASSERT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(0, std::memcmp(x.data, y.data, x.bytes)) << name;
  }
}

//===----------------------------------------------------------------------===//
// Health of the values
//===----------------------------------------------------------------------===//

/// The fp32 values a tensor stands for (quantized ones dequantized with their
/// scale, as the reference does).
std::vector<float> valuesOf(const Checkpoint &checkpoint,
                            const TensorSpec &spec) {
  TensorView view = *checkpoint.tensor(spec.name);
  const int64_t n = spec.logicalShape.empty() ? 1 : spec.logicalShape[0];
  const int64_t k = spec.logicalShape.size() == 2 ? spec.logicalShape[1] : 1;
  std::vector<float> out(size_t(n * k));
  if (spec.storage == WeightStorage::Plain) {
    for (size_t i = 0; i < out.size(); ++i) {
      if (spec.dtype == DType::F32) {
        std::memcpy(&out[i], view.data + 4 * i, 4);
      } else {
        uint16_t bits =
            uint16_t(view.data[2 * i] | (view.data[2 * i + 1] << 8));
        out[i] = numerics::bf16ToFloat(bits);
      }
    }
    return out;
  }
  TensorView scale = *checkpoint.tensor(spec.scaleName);
  if (spec.storage == WeightStorage::Fp4Packed) {
    numerics::dequantizeFp4Weight(view.data, scale.data, size_t(n), size_t(k),
                                  out.data());
  } else if (spec.blockRows == 32) {
    numerics::dequantizeFp8Weight(view.data, scale.data, size_t(n), size_t(k),
                                  out.data(), 32);
  } else { // per-row groups of 32 (the Engram table)
    const int64_t groups = scale.shape[1];
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c)
        out[size_t(r * k + c)] =
            numerics::decodeE4M3(view.data[r * k + c]) *
            numerics::decodeUe8m0(scale.data[r * groups + c / 32]);
  }
  return out;
}

struct Stats {
  double mean = 0, std = 0, maxAbs = 0;
  bool finite = true;
};
Stats statsOf(const std::vector<float> &v) {
  Stats s;
  double sum = 0, sq = 0;
  for (float x : v) {
    s.finite &= std::isfinite(x);
    sum += x;
    sq += double(x) * x;
    s.maxAbs = std::max(s.maxAbs, double(std::fabs(x)));
  }
  s.mean = sum / double(v.size());
  s.std = std::sqrt(std::max(0.0, sq / double(v.size()) - s.mean * s.mean));
  return s;
}

TEST(RandomCheckpoint, ValuesKeepTheModelHealthy) {
  TempDir dir;
  ModelVariant tiny = variant("tiny");
  generate(tiny, dir.path(), 3);
  Checkpoint checkpoint = openOrDie(dir.path());
  std::map<int, int> scaleExponents; // over all FP8 linears
  for (const TensorSpec &spec : manifestOf(tiny)) {
    if (spec.kind == TensorKind::Scale)
      continue;
    std::vector<float> v = valuesOf(checkpoint, spec);
    Stats s = statsOf(v);
    ASSERT_TRUE(s.finite) << spec.name;
    switch (spec.kind) {
    case TensorKind::Linear:
    case TensorKind::Head: {
      const double sigma = 1.0 / std::sqrt(double(spec.logicalShape[1]));
      // FP4 rounding adds a little noise; FP8 and bf16 keep the std.
      const double tolerance =
          spec.storage == WeightStorage::Fp4Packed ? 0.25 : 0.15;
      EXPECT_NEAR(s.std / sigma, 1.0, tolerance) << spec.name;
      EXPECT_LT(std::fabs(s.mean), 0.2 * sigma) << spec.name;
      EXPECT_LE(s.maxAbs, 3.5 * sigma) << spec.name;
      break;
    }
    case TensorKind::Embedding:
    case TensorKind::EngramTable:
      EXPECT_NEAR(s.std, 1.0, 0.1) << spec.name;
      break;
    case TensorKind::Norm:
    case TensorKind::EngramGate:
      EXPECT_NEAR(s.mean, 1.0, 0.02) << spec.name;
      EXPECT_LE(s.maxAbs, 1.06) << spec.name;
      break;
    case TensorKind::AttnSink:
      EXPECT_LE(s.maxAbs, 0.5) << spec.name;
      break;
    case TensorKind::RouterBias:
      EXPECT_LE(s.maxAbs, 0.02) << spec.name;
      break;
    case TensorKind::HcScale:
      EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.5f) << spec.name;
      EXPECT_LE(s.maxAbs, 1.0) << spec.name;
      break;
    case TensorKind::HcBase: {
      const int64_t hc = tiny.config.hcMult;
      for (int64_t j = 0; j < hc; ++j) // pre: sigmoid ~ 1/hc
        EXPECT_NEAR(1.0 / (1.0 + std::exp(-v[size_t(j)])), 1.0 / double(hc),
                    0.03)
            << spec.name;
      for (int64_t r = 0; r < hc; ++r) // comb: identity-dominant
        EXPECT_NEAR(v[size_t(2 * hc + r * hc + r)], 1.0, 0.1) << spec.name;
      break;
    }
    case TensorKind::HcFn:
      EXPECT_NEAR(s.std * std::sqrt(double(spec.shape[1])), 0.5, 0.08)
          << spec.name;
      break;
    case TensorKind::Scale:
      break;
    }
    if (spec.storage == WeightStorage::Fp8Block &&
        spec.kind == TensorKind::Linear) {
      TensorView scale = *checkpoint.tensor(spec.scaleName);
      for (uint64_t i = 0; i < scale.bytes; ++i)
        ++scaleExponents[int(scale.data[i]) - 127];
    }
  }
  // Scales vary between blocks (the common one and twice it).
  EXPECT_GE(scaleExponents.size(), 2u);
}

TEST(RandomCheckpoint, UnitInputsGiveUnitOutputsFarFromTheSwigluClamp) {
  TempDir dir;
  ModelVariant tiny = variant("tiny");
  generate(tiny, dir.path(), 5);
  Checkpoint checkpoint = openOrDie(dir.path());
  std::vector<TensorSpec> manifest = manifestOf(tiny);
  uint64_t state = 1;
  auto gaussian = [&] { // Box-Muller on an LCG: test inputs only
    auto u = [&] {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return (double(state >> 11) + 0.5) / 9007199254740992.0;
    };
    return std::sqrt(-2 * std::log(u())) * std::cos(6.283185307179586 * u());
  };
  for (const char *name :
       {"layers.0.ffn.experts.0.w1.weight",
        "layers.0.ffn.shared_experts.w3.weight", "layers.2.attn.wq_b.weight"}) {
    const TensorSpec *spec = nullptr;
    for (const TensorSpec &s : manifest)
      if (s.name == name)
        spec = &s;
    ASSERT_NE(spec, nullptr) << name;
    std::vector<float> w = valuesOf(checkpoint, *spec);
    const int64_t n = spec->logicalShape[0], k = spec->logicalShape[1];
    std::vector<float> y;
    for (int trial = 0; trial < 64; ++trial) {
      std::vector<double> x(static_cast<size_t>(k));
      for (double &xi : x)
        xi = gaussian();
      for (int64_t r = 0; r < n; ++r) {
        double acc = 0;
        for (int64_t c = 0; c < k; ++c)
          acc += w[size_t(r * k + c)] * x[size_t(c)];
        y.push_back(float(acc));
      }
    }
    Stats s = statsOf(y);
    EXPECT_NEAR(s.std, 1.0, 0.25) << name;
    EXPECT_LT(s.maxAbs, 0.6 * tiny.config.swigluLimit) << name;
  }
}

//===----------------------------------------------------------------------===//
// checkAgainstManifest names each mismatch
//===----------------------------------------------------------------------===//

/// Copies the checkpoint at `from` to `to`, letting `edit` drop (return
/// false), rename, reshape or retype each tensor, then `extra` add some.
void rewrite(const std::string &from, const std::string &to,
             const std::function<bool(std::string &, DType &,
                                      std::vector<int64_t> &)> &edit,
             const std::vector<std::string> &extra = {}) {
  Checkpoint source = openOrDie(from);
  checkpoint::CheckpointWriter writer;
  for (const std::string &name : source.names()) {
    TensorView view = *source.tensor(name);
    std::string newName = name;
    DType dtype = view.dtype;
    std::vector<int64_t> shape = view.shape;
    if (!edit(newName, dtype, shape))
      continue;
    std::vector<uint8_t> data(view.data, view.data + view.bytes);
    ASSERT_TRUE(writer.add(newName, dtype, shape, data).ok()) << newName;
  }
  for (const std::string &name : extra)
    ASSERT_TRUE(writer.add(name, DType::BF16, {2}, {0, 0, 0, 0}).ok());
  ASSERT_TRUE(writer.write(to).ok());
}

class ManifestMismatch : public ::testing::Test {
protected:
  void SetUp() override {
    tiny = variant("tiny");
    manifest = manifestOf(tiny);
    generate(tiny, dir / "good");
  }
  absl::Status check(const std::string &path) {
    return checkAgainstManifest(openOrDie(path), manifest);
  }
  TempDir dir;
  ModelVariant tiny;
  std::vector<TensorSpec> manifest;
};

TEST_F(ManifestMismatch, MissingTensor) {
  const std::string out = dir / "missing";
  rewrite(dir / "good", out, [](std::string &name, DType &, auto &) {
    return name != "layers.2.attn.indexer.wk.weight";
  });
  EXPECT_TRUE(failsWith(check(out),
                        {out + ": 1 problem against the weight manifest",
                         "tensor 'layers.2.attn.indexer.wk.weight' not found "
                         "in " +
                             out + " (expected BF16 [32, 32])"}));
}

TEST_F(ManifestMismatch, WrongShape) {
  const std::string out = dir / "shape";
  rewrite(dir / "good", out,
          [](std::string &name, DType &, std::vector<int64_t> &shape) {
            if (name == "layers.0.attn.wq_a.weight")
              std::swap(shape[0], shape[1]);
            return true;
          });
  EXPECT_TRUE(failsWith(check(out),
                        {out + "/model.safetensors: tensor "
                               "'layers.0.attn.wq_a.weight' has shape [64, "
                               "32]; the manifest expects F8_E4M3 [32, 64]"}));
}

TEST_F(ManifestMismatch, WrongDType) {
  const std::string out = dir / "dtype";
  rewrite(dir / "good", out, [](std::string &name, DType &dtype, auto &) {
    if (name == "layers.0.attn_norm.weight")
      dtype = DType::F16;
    return true;
  });
  EXPECT_TRUE(failsWith(check(out),
                        {out + "/model.safetensors: tensor "
                               "'layers.0.attn_norm.weight' has dtype F16; the "
                               "manifest expects BF16 [64]"}));
}

TEST_F(ManifestMismatch, UnexpectedTensorsAndSeveralProblems) {
  const std::string out = dir / "extra";
  rewrite(
      dir / "good", out,
      [](std::string &name, DType &, auto &) { return name != "norm.weight"; },
      {"layers.3.attn.compressor.wkv.weight", "mtp.0.main_proj.weight",
       "vision.patch_embed.weight", "image_start"});
  absl::Status status = check(out);
  EXPECT_TRUE(failsWith(status, {"2 problems", "tensor 'norm.weight' not found",
                                 "unexpected tensor "
                                 "'layers.3.attn.compressor.wkv.weight'"}));
  // DSpark, vision and image-span tensors are not backbone: accepted.
  EXPECT_EQ(std::string(status.message()).find("mtp.0"), std::string::npos);
  EXPECT_EQ(std::string(status.message()).find("image_start"),
            std::string::npos);
  ManifestCheckOptions lenient;
  lenient.allowUnknownTensors = true;
  EXPECT_TRUE(failsWith(checkAgainstManifest(openOrDie(out), manifest, lenient),
                        {"1 problem", "norm.weight"}));
}

TEST_F(ManifestMismatch, CheckpointOfAnotherSchedule) {
  generate(variant("tiny-all-full"), dir / "all-full");
  EXPECT_TRUE(
      failsWith(check(dir / "all-full"),
                {"unexpected tensor 'layers.3.attn.compressor.wkv."
                 "weight'",
                 "unexpected tensor 'layers.6.attn.indexer.wk.weight'"}));
}

TEST_F(ManifestMismatch, TruncatedShard) {
  // A single file is validated when it is opened.
  const std::string file = dir / "good/model.safetensors";
  std::vector<uint8_t> bytes = readBytes(file);
  bytes.resize(bytes.size() / 2);
  writeBytes(file, bytes);
  EXPECT_TRUE(failsWith(Checkpoint::open(dir / "good"),
                        {file, "extend past the end of the data section"}));
  // A shard is validated when the check first reads from it.
  RandomCheckpointResult sharded = generate(tiny, dir / "sharded", 0, 64 << 10);
  const std::string shard = sharded.files[1];
  bytes = readBytes(shard);
  bytes.resize(bytes.size() - 1);
  writeBytes(shard, bytes);
  EXPECT_TRUE(failsWith(check(dir / "sharded"),
                        {"problems against the weight manifest", shard,
                         "extend past the end of the data section"}));
}

TEST_F(ManifestMismatch, ListIsCapped) {
  const std::string out = dir / "empty";
  rewrite(dir / "good", out, [](std::string &name, DType &, auto &) {
    return name == "norm.weight";
  });
  ManifestCheckOptions options;
  options.maxListed = 3;
  absl::Status status = checkAgainstManifest(openOrDie(out), manifest, options);
  EXPECT_TRUE(failsWith(
      status, {std::to_string(manifest.size() - 1) + " problems",
               "... and " + std::to_string(manifest.size() - 4) + " more"}));
}

} // namespace
} // namespace csa::test

//===- ReferenceTest.cpp - The reference forward's invariants ------------===//
//
// The reference is the oracle, so these tests check it against what must
// hold of the model itself: prefill == prefill + decode, Reuse layers reuse,
// Reindex layers stay in the HSI pool, the newest block is always pooled,
// owner and release publication differ exactly where the spec says, caches
// hold rows of the documented byte sizes; plus its error paths.
//
//===----------------------------------------------------------------------===//
#include "models/reference/ReferenceModel.h"
#include "models/variants/Variants.h"
#include "models/weights/RandomCheckpoint.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/numerics/Quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

namespace csa::reference {
namespace {

namespace fs = std::filesystem;

/// A random checkpoint of a variant, written once per test binary.
struct Fixture {
  ModelVariant variant;
  std::unique_ptr<checkpoint::Checkpoint> weights;
  TensorSource source;
};

const Fixture &fixture(const std::string &name) {
  static std::map<std::string, std::unique_ptr<Fixture>> cache;
  auto &slot = cache[name];
  if (slot)
    return *slot;
  auto variant = loadVariant(name);
  EXPECT_TRUE(variant.ok()) << variant.status();
  fs::path dir = fs::temp_directory_path() /
                 ("csa-reference-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RandomCheckpointOptions options;
  options.seed = 1234;
  auto written = writeRandomCheckpoint(variant->config, variant->schedule,
                                       dir.string(), options);
  EXPECT_TRUE(written.ok()) << written.status();
  auto ckpt = checkpoint::Checkpoint::open(dir.string());
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  slot = std::make_unique<Fixture>();
  slot->variant = *variant;
  slot->weights = std::make_unique<checkpoint::Checkpoint>(std::move(*ckpt));
  slot->source = checkpointTensorSource(*slot->weights);
  return *slot;
}

std::unique_ptr<ReferenceModel> makeModel(const std::string &variant,
                                          ReferenceOptions options = {}) {
  const Fixture &f = fixture(variant);
  auto model = ReferenceModel::create(f.variant.config, f.variant.schedule,
                                      f.source, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

std::vector<int32_t> prompt(int64_t n, int64_t vocab, uint32_t seed = 7) {
  std::vector<int32_t> ids;
  uint32_t x = seed;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    ids.push_back(int32_t((x >> 8) % uint32_t(vocab)));
  }
  return ids;
}

/// max |a - b| / max |a|: logits are compared relative to their range.
double relativeDiff(const std::vector<float> &a, const std::vector<float> &b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(a[i])));
  }
  return diff / scale;
}

bool allFinite(const std::vector<float> &v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// The tolerance of prefill-vs-decode agreement, relative to the largest
// logit. Both paths compute the same function; where a row gathers more than
// 64 indices they block sparse attention differently (decode lists the ring
// with -1 holes, so bf16 probabilities round against another running max),
// which may move logits by bf16 ulps. On `tiny` (at most 12 indices per row)
// the measured difference is exactly 0 at every length tested.
constexpr double kPrefillDecodeTolerance = 1e-3;

TEST(Reference, TinyPrefillIsFiniteAndDeterministic) {
  auto a = makeModel("tiny"), b = makeModel("tiny");
  ASSERT_TRUE(a && b);
  auto ids = prompt(21, a->config().vocabSize);
  auto la = a->prefill(ids), lb = b->prefill(ids);
  ASSERT_TRUE(la.ok()) << la.status();
  ASSERT_TRUE(lb.ok()) << lb.status();
  EXPECT_EQ(la->size(), size_t(a->config().vocabSize));
  EXPECT_TRUE(allFinite(*la));
  EXPECT_EQ(*la, *lb); // same inputs, same bits
  // Not a constant function of the input.
  auto c = makeModel("tiny");
  auto lc = c->prefill(prompt(21, a->config().vocabSize, 99));
  ASSERT_TRUE(lc.ok());
  EXPECT_GT(relativeDiff(*la, *lc), 1e-3);
}

// Prefill of N+1 tokens == prefill of N, then one decode step. Lengths cover
// an odd and an even prompt (ratio-2 partial groups), prompts shorter and
// longer than the window (8), more compressed entries than top-k (4) and
// more ratio-1 entries than the HSI pool holds (2 blocks x 4).
class PrefillDecode : public ::testing::TestWithParam<int64_t> {};

TEST_P(PrefillDecode, LastLogitsAgree) {
  const int64_t n = GetParam();
  auto whole = makeModel("tiny"), split = makeModel("tiny");
  ASSERT_TRUE(whole && split);
  auto ids = prompt(n + 1, whole->config().vocabSize);
  auto expected = whole->prefill(ids);
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto first = split->prefill({ids.begin(), ids.end() - 1});
  ASSERT_TRUE(first.ok()) << first.status();
  auto got = split->decode(ids.back());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_LT(relativeDiff(*expected, *got), kPrefillDecodeTolerance) << "n=" << n;
  EXPECT_EQ(split->position(), n + 1);
}

INSTANTIATE_TEST_SUITE_P(Lengths, PrefillDecode,
                         ::testing::Values(1, 2, 3, 6, 7, 8, 9, 16, 25, 40));

TEST(Reference, ManyDecodeStepsMatchOnePrefill) {
  auto whole = makeModel("tiny"), stepped = makeModel("tiny");
  ASSERT_TRUE(whole && stepped);
  auto ids = prompt(30, whole->config().vocabSize, 3);
  auto expected = whole->prefill(ids);
  ASSERT_TRUE(expected.ok());
  auto got = stepped->prefill({ids.begin(), ids.begin() + 11});
  ASSERT_TRUE(got.ok());
  for (size_t i = 11; i < ids.size(); ++i) {
    got = stepped->decode(ids[i]);
    ASSERT_TRUE(got.ok()) << got.status();
  }
  EXPECT_LT(relativeDiff(*expected, *got), kPrefillDecodeTolerance);
}

TEST(Reference, ReuseLayersUseTheirSourceTopK) {
  auto model = makeModel("tiny");
  ASSERT_TRUE(model);
  ASSERT_TRUE(model->prefill(prompt(29, model->config().vocabSize)).ok());
  // WWF.C.R.: 3 reuses 2, 5 reuses 4, 7 reuses 6's selection.
  EXPECT_EQ(model->layerState(3).lastTopK, model->layerState(2).lastTopK);
  EXPECT_EQ(model->layerState(5).lastTopK, model->layerState(4).lastTopK);
  EXPECT_EQ(model->layerState(7).lastTopK, model->layerState(6).lastTopK);
  EXPECT_NE(model->layerState(6).lastTopK, model->layerState(4).lastTopK);
  ASSERT_TRUE(model->decode(5).ok());
  EXPECT_EQ(model->layerState(7).lastTopK, model->layerState(6).lastTopK);
}

TEST(Reference, ReindexSelectsInsidePoolAndNewestBlockIsPooled) {
  auto model = makeModel("tiny");
  ASSERT_TRUE(model);
  const int64_t n = 37, block = model->config().candidateBlockSize;
  ASSERT_TRUE(model->prefill(prompt(n, model->config().vocabSize, 11)).ok());
  const LayerState &pool = model->layerState(4), &reindex = model->layerState(6);
  ASSERT_EQ(pool.lastCandidates.size(), size_t(n));
  ASSERT_EQ(reindex.lastTopK.size(), size_t(n));
  int64_t restricted = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t visible = i + 1; // ratio 1
    const auto &mask = pool.lastCandidates[size_t(i)];
    // The block holding the newest visible position is always in the pool.
    for (int64_t t = ((visible - 1) / block) * block; t < visible; ++t)
      EXPECT_TRUE(mask[size_t(t)]) << "row " << i << " position " << t;
    int64_t pooled = std::count(mask.begin(), mask.end(), char(1));
    EXPECT_LE(pooled, model->config().candidateTopkBlocks * block);
    if (pooled < visible)
      ++restricted;
    for (int32_t t : reindex.lastTopK[size_t(i)])
      if (t >= 0)
        EXPECT_TRUE(mask[size_t(t)]) << "row " << i << " selected " << t;
  }
  EXPECT_GT(restricted, 0) << "the pool never restricted anything";
}

TEST(Reference, OwnerAndReleaseDifferOnlyOnNonCompletingSteps) {
  ReferenceOptions release;
  release.publication = ReferenceOptions::IndexPublication::Release;
  auto owner = makeModel("tiny"), released = makeModel("tiny", release);
  ASSERT_TRUE(owner && released);
  const int64_t n = 13; // odd: the first decode step (P = 13) completes a group
  auto ids = prompt(n + 4, owner->config().vocabSize, 5);
  auto a = owner->prefill({ids.begin(), ids.begin() + n});
  auto b = released->prefill({ids.begin(), ids.begin() + n});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b) << "prefill publishes every Full layer's own keys";
  // P = 13 is odd: layer 2 (ratio 2) completes a group and publishes.
  a = owner->decode(ids[size_t(n)]);
  b = released->decode(ids[size_t(n)]);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  // P = 14 is even: release scores layer 2 against layer 4's keys.
  a = owner->decode(ids[size_t(n + 1)]);
  b = released->decode(ids[size_t(n + 1)]);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
}

TEST(Reference, CachesHoldTheReleasedRowSizes) {
  auto model = makeModel("tiny");
  ASSERT_TRUE(model);
  const int64_t n = 23;
  ASSERT_TRUE(model->prefill(prompt(n, model->config().vocabSize)).ok());
  // tiny: head_dim 32 -> main row 16 + 2 = 18 B, SWA row 32 + 1 = 33 B;
  // index_dim 32 -> 16 + 1 = 17 B.
  const auto &c = model->config();
  for (int64_t l = 0; l < c.nLayers; ++l)
    EXPECT_EQ(model->layerState(l).swaRing.size(), size_t(c.windowSize * 33));
  EXPECT_EQ(model->layerState(2).mainKv.size(), size_t(n / 2 * 18));
  EXPECT_EQ(model->layerState(2).indexKeys.size(), size_t(n / 2 * 17));
  EXPECT_EQ(model->layerState(4).mainKv.size(), size_t(n * 18));
  EXPECT_EQ(model->layerState(4).indexKeys.size(), size_t(n * 17));
  EXPECT_TRUE(model->layerState(3).mainKv.empty()) << "Reuse stores nothing";
  EXPECT_TRUE(model->layerState(6).mainKv.empty()) << "Reindex stores nothing";
  // The odd token waits in the ratio-2 compressor state; decoding the next
  // token completes the group.
  ASSERT_TRUE(model->decode(1).ok());
  EXPECT_EQ(model->layerState(2).mainKv.size(), size_t((n + 1) / 2 * 18));
}

// The V4 FP8 main-KV variant: tiny's head_dim 32 = 24 NoPE + 8 RoPE gives
// 24 E4M3 bytes, 16 bytes of bf16 RoPE and 3 scales (group 8) padded to 8:
// 48 B a row. The other caches keep their formats; prefill and decode agree
// as they do with the FP4 rows; the logits move, by less than between two
// prompts.
TEST(Reference, Fp8MainKvRowsAreV4Rows) {
  ReferenceOptions fp8;
  fp8.mainKvFormat = ReferenceOptions::MainKvFormat::Fp8;
  auto model = makeModel("tiny", fp8), released = makeModel("tiny");
  ASSERT_TRUE(model && released);
  const auto &c = model->config();
  const int64_t n = 23;
  auto ids = prompt(n + 1, c.vocabSize, 3);
  auto a = model->prefill({ids.begin(), ids.end() - 1});
  auto b = released->prefill({ids.begin(), ids.end() - 1});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(model->layerState(2).mainKv.size(), size_t(n / 2 * 48));
  EXPECT_EQ(model->layerState(4).mainKv.size(), size_t(n * 48));
  EXPECT_EQ(model->layerState(2).indexKeys.size(), size_t(n / 2 * 17));
  EXPECT_EQ(model->layerState(0).swaRing.size(), size_t(c.windowSize * 33));
  // The stored rows are what the numerics library makes of them: the RoPE
  // part is bf16, exact after a round trip.
  const auto &rows = model->layerState(4).mainKv;
  std::vector<float> row(32);
  numerics::dequantizeMainKvFp8Row(rows.data(), 32, 8, row.data());
  std::vector<uint8_t> again(48);
  numerics::quantizeMainKvFp8Row(row.data(), 32, 8, again.data());
  std::vector<float> back(32);
  numerics::dequantizeMainKvFp8Row(again.data(), 32, 8, back.data());
  EXPECT_EQ(back, row);
  EXPECT_TRUE(std::any_of(row.begin(), row.end(), [](float v) { return v != 0; }));
  EXPECT_NE(*a, *b) << "the main-KV format changes what attention reads";
  auto other = makeModel("tiny", fp8);
  auto c2 = other->prefill(prompt(n, c.vocabSize, 99));
  ASSERT_TRUE(c2.ok());
  EXPECT_LT(relativeDiff(*b, *a), relativeDiff(*a, *c2));
  // Prefill of n + 1 equals prefill of n and one decode step.
  auto whole = makeModel("tiny", fp8);
  auto expected = whole->prefill(ids);
  auto got = model->decode(ids.back());
  ASSERT_TRUE(expected.ok() && got.ok());
  EXPECT_LT(relativeDiff(*expected, *got), kPrefillDecodeTolerance);
}

// The FP8 index-key variant: tiny's index_dim 32 gives 32 E4M3 bytes and an
// fp32 scale (36 B a row); the main rows keep their format; the selections
// and logits move, and prefill and decode still agree.
TEST(Reference, Fp8IndexKeysAreE4M3RowsWithAnFp32Scale) {
  ReferenceOptions fp8;
  fp8.indexKeyFormat = ReferenceOptions::IndexKeyFormat::Fp8;
  auto model = makeModel("tiny", fp8), released = makeModel("tiny");
  ASSERT_TRUE(model && released);
  const auto &c = model->config();
  const int64_t n = 23;
  auto ids = prompt(n + 1, c.vocabSize, 4);
  auto a = model->prefill({ids.begin(), ids.end() - 1});
  auto b = released->prefill({ids.begin(), ids.end() - 1});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(model->layerState(2).indexKeys.size(), size_t(n / 2 * 36));
  EXPECT_EQ(model->layerState(4).indexKeys.size(), size_t(n * 36));
  EXPECT_EQ(model->layerState(4).mainKv.size(), size_t(n * 18));
  // Each stored row's scale is the fp32 rule of its own values.
  const auto &rows = model->layerState(4).indexKeys;
  for (int64_t e = 0; e < n; ++e) {
    std::vector<float> v(32);
    numerics::dequantizeIndexKeyFp8Row(rows.data() + e * 36, 32, v.data());
    float scale = 0;
    std::memcpy(&scale, rows.data() + e * 36 + 32, 4);
    EXPECT_GT(scale, 0.f) << e;
    float amax = 0;
    for (float x : v)
      amax = std::max(amax, std::fabs(x));
    EXPECT_LE(amax, 448.f * scale) << e;
  }
  EXPECT_NE(*a, *b);
  auto whole = makeModel("tiny", fp8);
  auto expected = whole->prefill(ids);
  auto got = model->decode(ids.back());
  ASSERT_TRUE(expected.ok() && got.ok());
  EXPECT_LT(relativeDiff(*expected, *got), kPrefillDecodeTolerance);
}

TEST(Reference, BoundedReplayWithFullTailIsExact) {
  auto plain = makeModel("tiny");
  ReferenceOptions replay;
  replay.boundedReplay = true;
  replay.replayTail = 64; // longer than the prompt: nothing is dropped
  auto full = makeModel("tiny", replay);
  ASSERT_TRUE(plain && full);
  auto ids = prompt(33, plain->config().vocabSize);
  auto a = plain->prefill(ids), b = full->prefill(ids);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(Reference, BoundedReplayDropsTheHead) {
  auto plain = makeModel("tiny");
  ReferenceOptions replay;
  replay.boundedReplay = true; // tail = window (8) from layer 5 on
  auto tailed = makeModel("tiny", replay);
  ASSERT_TRUE(plain && tailed);
  auto ids = prompt(33, plain->config().vocabSize);
  auto a = plain->prefill(ids), b = tailed->prefill(ids);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_TRUE(allFinite(*b));
  EXPECT_NE(*a, *b) << "decoder layers saw only the last 8 tokens";
  // Decoding continues from the replayed state.
  auto next = tailed->decode(3);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(allFinite(*next));
}

TEST(Reference, BoundedReplayRejectsAKvSourceAfterItsStart) {
  ReferenceOptions replay;
  replay.boundedReplay = true;
  replay.replayStartLayer = 3; // layer 4 is a KV source
  const Fixture &f = fixture("tiny");
  auto model = ReferenceModel::create(f.variant.config, f.variant.schedule,
                                      f.source, replay);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("layer 4 is a KV source after the "
                                          "replay start"),
            std::string::npos)
      << model.status();
}

TEST(Reference, BoundedReplayRejectsATailShorterThanTheWindow) {
  ReferenceOptions replay;
  replay.boundedReplay = true;
  replay.replayTail = 7; // tiny's window is 8
  const Fixture &f = fixture("tiny");
  auto model = ReferenceModel::create(f.variant.config, f.variant.schedule,
                                      f.source, replay);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find(
                "bounded replay tail 7 is shorter than the attention window 8"),
            std::string::npos)
      << model.status();
}

TEST(Reference, Errors) {
  auto model = makeModel("tiny");
  ASSERT_TRUE(model);
  auto early = model->decode(1);
  EXPECT_FALSE(early.ok());
  EXPECT_NE(early.status().message().find("decode needs a prefill first"),
            std::string::npos);
  auto bad = model->prefill({1, 2, int32_t(model->config().vocabSize)});
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("outside the vocabulary"),
            std::string::npos);
  ASSERT_TRUE(model->prefill({1, 2, 3}).ok());
  auto twice = model->prefill({1});
  EXPECT_FALSE(twice.ok());
}

TEST(Reference, MissingTensorIsNamed) {
  const Fixture &f = fixture("tiny");
  TensorSource missing = [&](const std::string &n) -> absl::StatusOr<TensorBytes> {
    if (n == "layers.6.attn.indexer.wq_b.weight")
      return absl::NotFoundError("tensor '" + n + "' not found in test");
    return f.source(n);
  };
  auto model = ReferenceModel::create(f.variant.config, f.variant.schedule, missing);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("layers.6.attn.indexer.wq_b.weight"),
            std::string::npos);
}

TEST(Reference, WrongShapeIsNamed) {
  const Fixture &f = fixture("tiny");
  TensorSource wrong = [&](const std::string &n) -> absl::StatusOr<TensorBytes> {
    auto t = f.source(n);
    if (t.ok() && n == "layers.2.attn.kv_norm.weight")
      t->shape = {31};
    return t;
  };
  auto model = ReferenceModel::create(f.variant.config, f.variant.schedule, wrong);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find(
                "tensor 'layers.2.attn.kv_norm.weight' has shape [31]; "
                "expected [32]"),
            std::string::npos)
      << model.status();
}

} // namespace
} // namespace csa::reference

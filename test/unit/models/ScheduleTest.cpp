//===- ScheduleTest.cpp - Schedule tests ----------------------------------===//
//
// The released schedule derived from the config (spec §1 schedule table),
// schedules from compact strings, and JSON overrides; rule violations carry
// the messages of ScheduleRules naming the layer.
//
//===----------------------------------------------------------------------===//

#include "ModelsTestSupport.h"

#include <map>

using namespace csa;
using namespace csa::test;

namespace {

const char *const kReleasedLetters = "WWF.....F.....F.....C...R...R...R...R...";

/// The released schedule, from the flat config.
Schedule releasedSchedule() { return scheduleOf(releasedConfig()); }

//===----------------------------------------------------------------------===//
// The released schedule from the config.
//===----------------------------------------------------------------------===//

TEST(ScheduleFromConfig, ReleasedLetters) {
  EXPECT_EQ(releasedSchedule().letters(), kReleasedLetters);
}

TEST(ScheduleFromConfig, OneRolePerBackboneLayerInOrder) {
  const Schedule s = releasedSchedule();
  ASSERT_EQ(s.layers.size(), 40u);
  for (int64_t l = 0; l < 40; ++l)
    EXPECT_EQ(s.layers[l].layer, l);
}

TEST(ScheduleFromConfig, ReleasedModeCounts) {
  std::map<LayerMode, int> count;
  for (const LayerRole &role : releasedSchedule().layers)
    ++count[role.mode];
  EXPECT_EQ(count[LayerMode::Full], 4);
  EXPECT_EQ(count[LayerMode::Reindex], 4);
  EXPECT_EQ(count[LayerMode::Reuse], 30);
  EXPECT_EQ(count[LayerMode::SwaOnly], 2);
}

TEST(ScheduleFromConfig, ReleasedRatios) {
  const Schedule s = releasedSchedule();
  for (const LayerRole &role : s.layers)
    EXPECT_EQ(role.ratio, role.layer < 2 ? 0 : role.layer < 20 ? 2 : 1)
        << describeLayer(role);
}

TEST(ScheduleFromConfig, LayersZeroAndOneAreSwaOnlyWithoutSources) {
  const Schedule s = releasedSchedule();
  for (int l : {0, 1}) {
    const LayerRole &role = s.layers[l];
    EXPECT_EQ(role.mode, LayerMode::SwaOnly) << l;
    EXPECT_EQ(role.kvSource, -1) << l;
    EXPECT_EQ(role.indexSource, -1) << l;
    EXPECT_EQ(role.candidateSource, -1) << l;
    EXPECT_FALSE(role.candidatePool) << l;
  }
}

TEST(ScheduleFromConfig, FullLayersAreTheirOwnSources) {
  const Schedule s = releasedSchedule();
  for (int l : {2, 8, 14, 20}) {
    const LayerRole &role = s.layers[l];
    EXPECT_EQ(role.mode, LayerMode::Full) << l;
    EXPECT_EQ(role.kvSource, l) << l;
    EXPECT_EQ(role.indexSource, l) << l;
    EXPECT_EQ(role.candidateSource, -1) << l;
  }
}

TEST(ScheduleFromConfig, OnlyLayer20BuildsTheCandidatePool) {
  for (const LayerRole &role : releasedSchedule().layers)
    EXPECT_EQ(role.candidatePool, role.layer == 20) << describeLayer(role);
}

TEST(ScheduleFromConfig, ReindexLayersReadLayer20) {
  const Schedule s = releasedSchedule();
  for (int l : {24, 28, 32, 36}) {
    const LayerRole &role = s.layers[l];
    EXPECT_EQ(role.mode, LayerMode::Reindex) << l;
    EXPECT_EQ(role.kvSource, 20) << l;
    EXPECT_EQ(role.candidateSource, 20) << l;
    EXPECT_EQ(role.indexSource, l) << l;
    EXPECT_FALSE(role.candidatePool) << l;
  }
}

TEST(ScheduleFromConfig, ReuseSourcesMatchSpecTable) {
  struct Row {
    int first, last, kv, index;
  };
  // Spec §1, per-layer mode schedule.
  const Row rows[] = {{3, 7, 2, 2},     {9, 13, 8, 8},    {15, 19, 14, 14},
                      {21, 23, 20, 20}, {25, 27, 20, 24}, {29, 31, 20, 28},
                      {33, 35, 20, 32}, {37, 39, 20, 36}};
  const Schedule s = releasedSchedule();
  int reuse = 0;
  for (const Row &row : rows)
    for (int l = row.first; l <= row.last; ++l, ++reuse) {
      const LayerRole &role = s.layers[l];
      EXPECT_EQ(role.mode, LayerMode::Reuse) << l;
      EXPECT_EQ(role.kvSource, row.kv) << l;
      EXPECT_EQ(role.indexSource, row.index) << l;
      EXPECT_EQ(role.candidateSource, -1) << l;
      EXPECT_FALSE(role.candidatePool) << l;
    }
  EXPECT_EQ(reuse, 30);
}

TEST(ScheduleFromConfig, HfLayoutGivesTheSameSchedule) {
  EXPECT_TRUE(sameSchedule(scheduleOf(parsedConfig("deepseek-v4.1-flash-hf")),
                           releasedSchedule()));
}

TEST(ScheduleFromConfig, TinySchedule) {
  const Schedule s = scheduleOf(tinyConfig());
  EXPECT_EQ(s.letters(), "WWF.C.R.");
  EXPECT_EQ(s.layers[3].kvSource, 2);
  EXPECT_EQ(s.layers[3].indexSource, 2);
  EXPECT_EQ(s.layers[5].kvSource, 4);
  EXPECT_EQ(s.layers[5].indexSource, 4);
  EXPECT_EQ(s.layers[6].kvSource, 4);
  EXPECT_EQ(s.layers[6].candidateSource, 4);
  EXPECT_EQ(s.layers[7].kvSource, 4);
  EXPECT_EQ(s.layers[7].indexSource, 6);
}

TEST(ScheduleFromConfig, ValidatesAgainstTheRules) {
  const ModelConfig config = releasedConfig();
  EXPECT_TRUE(validateSchedule(config, releasedSchedule(), "x").ok());
}

//===----------------------------------------------------------------------===//
// Schedule strings.
//===----------------------------------------------------------------------===//

TEST(ScheduleFromString, ReleasedLettersReproduceConfigSchedule) {
  auto s = scheduleFromString(releasedConfig(), kReleasedLetters);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(sameSchedule(*s, releasedSchedule()));
}

TEST(ScheduleFromString, LettersRoundTrip) {
  auto s = scheduleFromString(tinyConfig(), "WWF.C.R.");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->letters(), "WWF.C.R.");
  EXPECT_TRUE(sameSchedule(*s, scheduleOf(tinyConfig())));
}

TEST(ScheduleFromString, SpacesAndBarsAreIgnored) {
  auto s = scheduleFromString(
      releasedConfig(), " WW | F..... | F..... | F..... | C... R... R... R... R... ");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(sameSchedule(*s, releasedSchedule()));
}

TEST(ScheduleFromString, RatioDigitsOverrideTheConfigRatio) {
  // Tiny ratios are [0,0,2,2,1,1,1,1]; layers 2 and 3 move to ratio 1.
  auto s = scheduleFromString(tinyConfig(), "WWF1.1C.R.");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->letters(), "WWF.C.R.");
  EXPECT_EQ(s->layers[2].ratio, 1);
  EXPECT_EQ(s->layers[3].ratio, 1);
  EXPECT_EQ(s->layers[4].ratio, 1);
}

TEST(ScheduleFromString, RatioDigitsCanMakeASwaLayerCompressed) {
  // Layer 1 has ratio 0 in the config; "F2" makes it a ratio-2 Full layer.
  auto s = scheduleFromString(tinyConfig(), "WF2F.C.R.");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->layers[1].mode, LayerMode::Full);
  EXPECT_EQ(s->layers[1].ratio, 2);
  EXPECT_EQ(s->layers[3].kvSource, 2);
}

TEST(ScheduleFromString, WOnACompressedLayerSetsRatioZero) {
  auto s = scheduleFromString(tinyConfig(), "WWWWC.R.");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->layers[2].mode, LayerMode::SwaOnly);
  EXPECT_EQ(s->layers[2].ratio, 0);
  EXPECT_EQ(s->layers[3].ratio, 0);
}

TEST(ScheduleFromString, ExplicitW0IsAccepted) {
  auto s = scheduleFromString(tinyConfig(), "W0W0F.C.R.");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->letters(), "WWF.C.R.");
}

TEST(ScheduleFromString, BadLetterReportsItsPosition) {
  auto s = scheduleFromString(releasedConfig(), "WWX");
  EXPECT_TRUE(failsWith(s, {"schedule 'WWX': at character 3: 'X' is not a layer "
                            "letter (W = SWA-only, F = Full"}));
}

TEST(ScheduleFromString, PositionCountsIgnoredCharacters) {
  auto s = scheduleFromString(tinyConfig(), "WW | F.C.r.");
  EXPECT_TRUE(failsWith(s, {"at character 10: 'r' is not a layer letter"}));
}

TEST(ScheduleFromString, LeadingDigitIsNotALetter) {
  auto s = scheduleFromString(tinyConfig(), "2WWF.C.R.");
  EXPECT_TRUE(failsWith(s, {"at character 1: '2' is not a layer letter"}));
}

TEST(ScheduleFromString, TooFewLayers) {
  auto s = scheduleFromString(releasedConfig(), "WWF.....");
  EXPECT_TRUE(failsWith(
      s, {"schedule 'WWF.....': names 8 layers; the model has 40"}));
}

TEST(ScheduleFromString, EmptyStringNamesNoLayers) {
  EXPECT_TRUE(failsWith(scheduleFromString(tinyConfig(), ""),
                        {"schedule '': names 0 layers; the model has 8"}));
}

TEST(ScheduleFromString, TooManyLayers) {
  auto s = scheduleFromString(releasedConfig(), std::string(kReleasedLetters) + ".");
  EXPECT_TRUE(failsWith(s, {"at character 41: more than the model's 40 layers"}));
}

TEST(ScheduleFromString, CompressedLetterOnRatioZeroLayerNeedsDigits) {
  auto s = scheduleFromString(tinyConfig(), "WF.F.C.R.");
  EXPECT_TRUE(failsWith(s, {"schedule 'WF.F.C.R.': at character 2: layer 1 "
                            "('F') has ratio 0 in the config; give it one, "
                            "e.g. 'F2'"}));
}

TEST(ScheduleFromString, SwaLetterWithRatioRejected) {
  auto s = scheduleFromString(tinyConfig(), "WW2F.C.R.");
  EXPECT_TRUE(failsWith(s, {"at character 2: a SWA-only layer has ratio 0"}));
}

TEST(ScheduleFromString, OversizedRatioRejected) {
  auto s = scheduleFromString(tinyConfig(), "WWF99999999999999999999.C.R.");
  EXPECT_TRUE(failsWith(s, {"at character 3: bad ratio '99999999999999999999'"}));
}

TEST(ScheduleFromString, ReindexWithoutEarlierPoolBreaksARule) {
  const std::string spec = "WWF.....F.....F.....F...R...R...R...R...";
  auto s = scheduleFromString(releasedConfig(), spec);
  EXPECT_TRUE(failsWith(s, {"schedule '" + spec + "': layer 24 (reindex): a "
                            "Reindex layer needs a candidate_source (a Full "
                            "layer that builds the HSI candidate pool)"}));
}

TEST(ScheduleFromString, ReuseBeforeAnyFullBreaksARule) {
  auto s = scheduleFromString(tinyConfig(), "WW.F.C.R");
  EXPECT_TRUE(failsWith(s, {"schedule 'WW.F.C.R': layer 2 (reuse): a Reuse "
                            "layer needs an earlier Full layer as kv_source"}));
}

TEST(ScheduleFromString, ReindexBeforeAnyFullBreaksARule) {
  auto s = scheduleFromString(tinyConfig(), "WWR.C.R.");
  EXPECT_TRUE(failsWith(s, {"layer 2 (reindex): a Reindex layer needs an "
                            "earlier Full layer as kv_source"}));
}

TEST(ScheduleFromString, ReuseAcrossARatioChangeBreaksARule) {
  // Layer 20 (ratio 1) would reuse layer 14's ratio-2 cache.
  const std::string spec = "WWF.....F.....F.........................";
  ASSERT_EQ(spec.size(), 40u);
  auto s = scheduleFromString(releasedConfig(), spec);
  EXPECT_TRUE(failsWith(s, {"layer 20 (reuse): compression ratio 1 differs "
                            "from its kv_source layer 14's ratio 2; a cache is "
                            "read at its own ratio"}));
}

TEST(ScheduleFromString, ReindexAcrossARatioChangeBreaksARule) {
  auto s = scheduleFromString(tinyConfig(), "WWC.R...");
  EXPECT_TRUE(failsWith(s, {"layer 4 (reindex): compression ratio 1 differs "
                            "from its kv_source layer 2's ratio 2"}));
}

TEST(ScheduleFromString, ReindexWhosePoolIsNotItsCacheBreaksARule) {
  // Layer 6 reads layer 5's cache but the pool of layer 4.
  auto s = scheduleFromString(tinyConfig(), "WWF.CFR.");
  EXPECT_TRUE(failsWith(s, {"layer 6 (reindex): candidate_source 4 builds its "
                            "pool over its own cache, but this layer reads "
                            "layer 5's cache"}));
}

TEST(ScheduleFromString, PoolNeedsCandidateSizesInTheConfig) {
  auto config = parseEdited("tiny", [](json &j) {
    j.erase("candidate_source_layer");
    j.erase("candidate_topk_blocks");
    j.erase("candidate_block_size");
  });
  ASSERT_TRUE(config.ok()) << config.status();
  auto s = scheduleFromString(*config, "WWF.C.R.");
  EXPECT_TRUE(failsWith(s, {"schedule 'WWF.C.R.': layer 4 (full): builds an HSI "
                            "candidate pool but the config sets no "
                            "candidate_topk_blocks / candidate_block_size"}));
}

//===----------------------------------------------------------------------===//
// JSON overrides.
//===----------------------------------------------------------------------===//

/// The released schedule after `override`; fails the test on error.
Schedule overridden(const std::string &override) {
  Schedule s = releasedSchedule();
  absl::Status status =
      applyScheduleOverrides(releasedConfig(), s, override, "override.json");
  EXPECT_TRUE(status.ok()) << status;
  return s;
}

absl::Status overrideStatus(const std::string &override) {
  Schedule s = releasedSchedule();
  return applyScheduleOverrides(releasedConfig(), s, override, "override.json");
}

TEST(ScheduleOverrides, EmptyObjectChangesNothing) {
  EXPECT_TRUE(sameSchedule(overridden("{}"), releasedSchedule()));
}

TEST(ScheduleOverrides, EmptyLayersChangesNothing) {
  EXPECT_TRUE(sameSchedule(overridden(R"({"layers": {}})"), releasedSchedule()));
}

TEST(ScheduleOverrides, ReindexToReuseRewiresItsReaders) {
  const Schedule s = overridden(R"({"layers": {"28": {"mode": "reuse"}}})");
  EXPECT_EQ(s.letters(), "WWF.....F.....F.....C...R.......R...R...");
  EXPECT_EQ(s.layers[28].mode, LayerMode::Reuse);
  EXPECT_EQ(s.layers[28].kvSource, 20);
  EXPECT_EQ(s.layers[28].indexSource, 24);
  EXPECT_EQ(s.layers[28].candidateSource, -1);
  for (int l = 29; l <= 31; ++l) {
    EXPECT_EQ(s.layers[l].kvSource, 20) << l;
    EXPECT_EQ(s.layers[l].indexSource, 24) << l;
  }
  // Later layers keep their own nearest index source.
  for (int l = 33; l <= 35; ++l)
    EXPECT_EQ(s.layers[l].indexSource, 32) << l;
}

TEST(ScheduleOverrides, FirstReindexToReuseFallsBackToTheFullLayer) {
  const Schedule s = overridden(R"({"layers": {"24": {"mode": "reuse"}}})");
  for (int l = 24; l <= 27; ++l)
    EXPECT_EQ(s.layers[l].indexSource, 20) << l;
  EXPECT_EQ(s.layers[28].mode, LayerMode::Reindex);
  EXPECT_EQ(s.layers[29].indexSource, 28);
}

TEST(ScheduleOverrides, ReuseToReindexBecomesAnIndexSource) {
  const Schedule s = overridden(R"({"layers": {"22": {"mode": "reindex"}}})");
  EXPECT_EQ(s.layers[22].mode, LayerMode::Reindex);
  EXPECT_EQ(s.layers[22].kvSource, 20);
  EXPECT_EQ(s.layers[22].candidateSource, 20);
  EXPECT_EQ(s.layers[22].indexSource, 22);
  EXPECT_EQ(s.layers[23].indexSource, 22);
}

TEST(ScheduleOverrides, ExplicitIndexSourceIsKept) {
  const Schedule s =
      overridden(R"({"layers": {"29": {"index_source": 20}}})");
  EXPECT_EQ(s.layers[29].indexSource, 20);
  EXPECT_EQ(s.layers[29].kvSource, 20);
  // Its neighbours keep the derived source.
  EXPECT_EQ(s.layers[30].indexSource, 28);
}

TEST(ScheduleOverrides, ExplicitSourcesEqualToDerivedOnesAreAccepted) {
  const Schedule s = overridden(
      R"({"layers": {"25": {"mode": "reuse", "kv_source": 20, "index_source": 24},
                     "24": {"kv_source": 20, "candidate_source": 20}}})");
  EXPECT_TRUE(sameSchedule(s, releasedSchedule()));
}

TEST(ScheduleOverrides, ScheduleStringReplacesTheSchedule) {
  const Schedule s = overridden(
      R"({"schedule": "WWF.....F.....F.....F..................."})");
  EXPECT_EQ(s.letters(), "WWF.....F.....F.....F...................");
  EXPECT_EQ(s.layers[36].indexSource, 20);
}

TEST(ScheduleOverrides, LayersApplyAfterTheScheduleString) {
  const Schedule s = overridden(
      R"({"schedule": "WWF.....F.....F.....C...R...R...R...R...",
          "layers": {"36": {"mode": "reuse"}}})");
  EXPECT_EQ(s.letters(), "WWF.....F.....F.....C...R...R...R.......");
  EXPECT_EQ(s.layers[39].indexSource, 32);
}

TEST(ScheduleOverrides, SwaOnlyModeSetsRatioZero) {
  const Schedule s = overridden(R"({"layers": {"3": {"mode": "swa_only"}}})");
  EXPECT_EQ(s.layers[3].mode, LayerMode::SwaOnly);
  EXPECT_EQ(s.layers[3].ratio, 0);
  EXPECT_EQ(s.layers[3].kvSource, -1);
  EXPECT_EQ(s.layers[4].kvSource, 2);
}

TEST(ScheduleOverrides, RatioGivesASwaLayerACache) {
  const Schedule s =
      overridden(R"({"layers": {"1": {"mode": "full", "ratio": 2}}})");
  EXPECT_EQ(s.layers[1].mode, LayerMode::Full);
  EXPECT_EQ(s.layers[1].ratio, 2);
  EXPECT_EQ(s.layers[1].kvSource, 1);
}

TEST(ScheduleOverrides, ClearingThePoolBreaksTheReindexLayers) {
  // Layer 20 stops building the pool; the Reindex layers lose their source.
  auto status = overrideStatus(R"({"layers": {"20": {"candidate_pool": false}}})");
  EXPECT_TRUE(failsWith(status, {"override.json: layer 24 (reindex): a Reindex "
                                 "layer needs a candidate_source"}));
}

TEST(ScheduleOverrides, NewFullLayerInTheDecoderBreaksTheReindexLayers) {
  // Layer 26 becomes Full; layer 28 then reads 26's cache but 20's pool.
  auto status = overrideStatus(R"({"layers": {"26": {"mode": "full"}}})");
  EXPECT_TRUE(failsWith(status, {"override.json: layer 28 (reindex): "
                                 "candidate_source 20 builds its pool over its "
                                 "own cache, but this layer reads layer 26's "
                                 "cache"}));
}

TEST(ScheduleOverrides, ForwardSourceRejected) {
  auto status = overrideStatus(R"({"layers": {"25": {"index_source": 28}}})");
  EXPECT_TRUE(failsWith(status, {"override.json: layer 25 (reuse): index_source "
                                 "28 points forward; a layer can only read from "
                                 "an earlier layer"}));
}

TEST(ScheduleOverrides, ForwardKvSourceRejected) {
  auto status = overrideStatus(R"({"layers": {"3": {"kv_source": 8}}})");
  EXPECT_TRUE(failsWith(status, {"layer 3 (reuse): kv_source 8 points forward"}));
}

TEST(ScheduleOverrides, ReuseLayerAsKvSourceRejected) {
  auto status = overrideStatus(R"({"layers": {"25": {"kv_source": 21}}})");
  EXPECT_TRUE(failsWith(status, {"override.json: layer 25 (reuse): kv_source "
                                 "layer 21 (reuse) is not a Full layer; only "
                                 "Full layers own a compressed KV cache"}));
}

TEST(ScheduleOverrides, ReuseLayerAsIndexSourceRejected) {
  auto status = overrideStatus(R"({"layers": {"26": {"index_source": 25}}})");
  EXPECT_TRUE(failsWith(status, {"layer 26 (reuse): index_source layer 25 "
                                 "(reuse) selects no top-k; only Full and "
                                 "Reindex layers are index sources"}));
}

TEST(ScheduleOverrides, NonPoolLayerAsCandidateSourceRejected) {
  auto status = overrideStatus(R"({"layers": {"24": {"candidate_source": 14}}})");
  EXPECT_TRUE(failsWith(status, {"override.json: layer 24 (reindex): "
                                 "candidate_source layer 14 (full) does not "
                                 "build an HSI candidate pool"}));
}

TEST(ScheduleOverrides, IndexSourceOverAnotherCacheRejected) {
  // Layer 29 reads layer 20's cache; layer 14's top-k addresses layer 14's.
  auto status = overrideStatus(R"({"layers": {"29": {"index_source": 14}}})");
  EXPECT_TRUE(failsWith(status, {"layer 29 (reuse): index_source 14 selects "
                                 "positions of layer 14's cache, but this "
                                 "layer reads layer 20's cache"}));
}

TEST(ScheduleOverrides, FullLayerWithForeignKvSourceRejected) {
  auto status = overrideStatus(R"({"layers": {"8": {"kv_source": 2}}})");
  EXPECT_TRUE(failsWith(status, {"layer 8 (full): a Full layer owns its KV "
                                 "cache; kv_source 2 must be absent or the "
                                 "layer itself"}));
}

TEST(ScheduleOverrides, PoolOnANonFullLayerRejected) {
  auto status = overrideStatus(R"({"layers": {"24": {"candidate_pool": true}}})");
  EXPECT_TRUE(failsWith(status, {"layer 24 (reindex): only a Full layer can "
                                 "build the HSI candidate pool"}));
}

TEST(ScheduleOverrides, FullModeOnRatioZeroLayerNeedsARatio) {
  auto status = overrideStatus(R"({"layers": {"0": {"mode": "full"}}})");
  EXPECT_TRUE(failsWith(status, {"layer 0 (full): a compressed mode needs a "
                                 "compression ratio >= 1, got 0"}));
}

TEST(ScheduleOverrides, SwaOnlyWithRatioRejected) {
  auto status =
      overrideStatus(R"({"layers": {"3": {"mode": "swa_only", "ratio": 2}}})");
  EXPECT_TRUE(failsWith(status, {"layer 3 (swa_only): a SWA-only layer has "
                                 "compression ratio 0, got 2"}));
}

TEST(ScheduleOverrides, InvalidJson) {
  EXPECT_TRUE(failsWith(overrideStatus("{\"layers\": "),
                        {"override.json: not valid JSON"}));
}

TEST(ScheduleOverrides, NotAnObject) {
  EXPECT_TRUE(failsWith(overrideStatus("[]"),
                        {"override.json: a schedule override is a JSON object"}));
}

TEST(ScheduleOverrides, UnknownKey) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layer": {}})"),
                        {"override.json: layer: unknown key (expected "
                         "'schedule' and/or 'layers')"}));
}

TEST(ScheduleOverrides, UnknownLayerField) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": {"24": {"mod": "reuse"}}})"),
                        {"override.json: layers.24.mod: unknown field (mode, "
                         "ratio, kv_source, index_source, candidate_source, "
                         "candidate_pool)"}));
}

TEST(ScheduleOverrides, NonNumericLayerKey) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": {"x": {"mode": "reuse"}}})"),
                        {"override.json: layers.x: 'x' is not a layer of the "
                         "40-layer backbone"}));
}

TEST(ScheduleOverrides, OutOfRangeLayerKey) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": {"99": {"mode": "reuse"}}})"),
                        {"layers.99: '99' is not a layer of the 40-layer "
                         "backbone"}));
}

TEST(ScheduleOverrides, MtpLayerKeyIsNotABackboneLayer) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": {"40": {"mode": "reuse"}}})"),
                        {"layers.40: '40' is not a layer"}));
}

TEST(ScheduleOverrides, NegativeLayerKey) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": {"-1": {"mode": "reuse"}}})"),
                        {"layers.-1: '-1' is not a layer"}));
}

TEST(ScheduleOverrides, BadModeName) {
  EXPECT_TRUE(failsWith(
      overrideStatus(R"({"layers": {"24": {"mode": "sparse"}}})"),
      {"override.json: layers.24.mode: 'sparse' is not a mode (full, reindex, "
       "reuse, swa_only)"}));
}

TEST(ScheduleOverrides, ModeNamesAreCaseSensitive) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": {"24": {"mode": "Reuse"}}})"),
                        {"layers.24.mode: 'Reuse' is not a mode"}));
}

TEST(ScheduleOverrides, ModeMustBeAString) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": {"24": {"mode": 2}}})"),
                        {"layers.24.mode: expected a mode name"}));
}

TEST(ScheduleOverrides, SourceMustBeAnInteger) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": {"25": {"kv_source": "20"}}})"),
                        {"layers.25.kv_source: expected an integer"}));
}

TEST(ScheduleOverrides, RatioMustBeAnInteger) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": {"25": {"ratio": 1.5}}})"),
                        {"layers.25.ratio: expected an integer"}));
}

TEST(ScheduleOverrides, CandidatePoolMustBeABool) {
  EXPECT_TRUE(failsWith(
      overrideStatus(R"({"layers": {"20": {"candidate_pool": 1}}})"),
      {"layers.20.candidate_pool: expected true or false"}));
}

TEST(ScheduleOverrides, LayerEntryMustBeAnObject) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": {"24": "reuse"}})"),
                        {"override.json: layers.24: expected an object"}));
}

TEST(ScheduleOverrides, LayersMustBeAnObject) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": [24]})"),
                        {"override.json: layers: expected an object keyed by "
                         "layer number"}));
}

TEST(ScheduleOverrides, ScheduleMustBeAString) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"schedule": 5})"),
                        {"override.json: schedule: expected a schedule string"}));
}

TEST(ScheduleOverrides, BadScheduleStringIsReportedInside) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"schedule": "WWX"})"),
                        {"override.json: schedule: schedule 'WWX': at "
                         "character 3: 'X' is not a layer letter"}));
}

//===----------------------------------------------------------------------===//
// deriveSources and applyScheduleToConfig.
//===----------------------------------------------------------------------===//

TEST(DeriveSources, KeepsExplicitSources) {
  Schedule s = releasedSchedule();
  for (LayerRole &role : s.layers)
    role.kvSource = role.indexSource = role.candidateSource = -1;
  s.layers[30].indexSource = 24;
  deriveSources(s);
  EXPECT_EQ(s.layers[30].indexSource, 24);
  EXPECT_EQ(s.layers[31].indexSource, 28);
}

TEST(DeriveSources, ClearedSourcesAreDerivedAgain) {
  Schedule s = releasedSchedule();
  for (LayerRole &role : s.layers)
    role.kvSource = role.indexSource = role.candidateSource = -1;
  deriveSources(s);
  EXPECT_TRUE(sameSchedule(s, releasedSchedule()));
}

TEST(ApplyScheduleToConfig, WritesRatiosAndSourceLists) {
  ModelConfig config = tinyConfig();
  auto s = scheduleFromString(config, "WWF1.1C.R.");
  ASSERT_TRUE(s.ok()) << s.status();
  applyScheduleToConfig(*s, config);
  EXPECT_EQ(config.compressRatios, (std::vector<int64_t>{0, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(config.kvSourceLayers, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(config.indexSourceLayers, (std::vector<int64_t>{2, 4, 6}));
  EXPECT_EQ(config.candidateSourceLayer, 4);
}

TEST(ApplyScheduleToConfig, RoundTripsThroughScheduleFromConfig) {
  ModelConfig config = releasedConfig();
  const Schedule s = overridden(R"({"layers": {"28": {"mode": "reuse"}}})");
  applyScheduleToConfig(s, config);
  EXPECT_EQ(config.indexSourceLayers,
            (std::vector<int64_t>{2, 8, 14, 20, 24, 32, 36}));
  EXPECT_TRUE(sameSchedule(scheduleOf(config), s));
}

TEST(ApplyScheduleToConfig, LeavesMtpRatiosAlone) {
  ModelConfig config = releasedConfig();
  applyScheduleToConfig(releasedSchedule(), config);
  EXPECT_EQ(config.compressRatios, releasedConfig().compressRatios);
}

} // namespace

TEST(ScheduleOverrides, NegativeSourceRejected) {
  EXPECT_TRUE(failsWith(
      overrideStatus(R"({"layers": {"21": {"kv_source": -5}}})"),
      {"override.json: layers.21.kv_source: must be >= 0"}));
}

TEST(ScheduleOverrides, LayerKeysAreDigitsOnly) {
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": {" 3": {"mode": "reuse"}}})"),
                        {"is not a layer"}));
  EXPECT_TRUE(failsWith(overrideStatus(R"({"layers": {"+5": {"mode": "reuse"}}})"),
                        {"is not a layer"}));
}

TEST(ScheduleOverrides, RejectedOverrideLeavesScheduleUnchanged) {
  Schedule s = releasedSchedule();
  absl::Status status = applyScheduleOverrides(
      releasedConfig(), s,
      R"({"layers": {"25": {"index_source": 21}, "30": {"mode": "bogus"}}})",
      "override.json");
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(sameSchedule(s, releasedSchedule()));
}

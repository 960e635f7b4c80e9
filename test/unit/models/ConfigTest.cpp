//===- ConfigTest.cpp - Config reader tests -------------------------------===//
//
// The released config in both layouts (flat inference config and Hugging
// Face `text_config`) parses to the same values, the values are those of
// spec §1, and every kind of bad config is rejected with a message naming the
// field as the file spells it and the file itself.
//
//===----------------------------------------------------------------------===//

#include "ModelsTestSupport.h"

#include <cstdio>
#include <fstream>
#include <vector>

using namespace csa;
using namespace csa::test;

namespace {

using Ints = std::vector<int64_t>;

ModelConfig releasedHfConfig() { return parsedConfig("deepseek-v4.1-flash-hf"); }

//===----------------------------------------------------------------------===//
// The released config.
//===----------------------------------------------------------------------===//

TEST(ConfigReleased, LayoutsAreDetected) {
  EXPECT_EQ(releasedConfig().layout, ConfigLayout::Flat);
  EXPECT_EQ(releasedHfConfig().layout, ConfigLayout::HuggingFace);
}

TEST(ConfigReleased, SourceIsKept) {
  auto config = parseModelConfig(configText("tiny"), "my/tiny.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->source, "my/tiny.json");
}

// Every field of ModelConfig but source and layout (and max_position_embeddings,
// which only the HF file has; see the next test).
TEST(ConfigReleased, FlatAndHfLayoutsParseToSameValues) {
  const ModelConfig flat = releasedConfig();
  const ModelConfig hf = releasedHfConfig();
#define CSA_EXPECT_SAME(field) EXPECT_EQ(flat.field, hf.field) << #field
  CSA_EXPECT_SAME(vocabSize);
  CSA_EXPECT_SAME(dim);
  CSA_EXPECT_SAME(nLayers);
  CSA_EXPECT_SAME(nMtpLayers);
  CSA_EXPECT_SAME(nHeads);
  CSA_EXPECT_SAME(headDim);
  CSA_EXPECT_SAME(ropeHeadDim);
  CSA_EXPECT_SAME(qLoraRank);
  CSA_EXPECT_SAME(oGroups);
  CSA_EXPECT_SAME(oLoraRank);
  CSA_EXPECT_SAME(windowSize);
  CSA_EXPECT_SAME(normEps);
  CSA_EXPECT_SAME(compressRatios);
  CSA_EXPECT_SAME(kvSourceLayers);
  CSA_EXPECT_SAME(indexSourceLayers);
  CSA_EXPECT_SAME(candidateSourceLayer);
  CSA_EXPECT_SAME(candidateTopkBlocks);
  CSA_EXPECT_SAME(candidateBlockSize);
  CSA_EXPECT_SAME(indexNHeads);
  CSA_EXPECT_SAME(indexHeadDim);
  CSA_EXPECT_SAME(indexTopk);
  CSA_EXPECT_SAME(ropeTheta);
  CSA_EXPECT_SAME(compressRopeTheta);
  CSA_EXPECT_SAME(ropeFactor);
  CSA_EXPECT_SAME(originalSeqLen);
  CSA_EXPECT_SAME(betaFast);
  CSA_EXPECT_SAME(betaSlow);
  CSA_EXPECT_SAME(nRoutedExperts);
  CSA_EXPECT_SAME(nSharedExperts);
  CSA_EXPECT_SAME(nActivatedExperts);
  CSA_EXPECT_SAME(moeInterDim);
  CSA_EXPECT_SAME(scoreFunc);
  CSA_EXPECT_SAME(routeScale);
  CSA_EXPECT_SAME(swigluLimit);
  CSA_EXPECT_SAME(hcMult);
  CSA_EXPECT_SAME(hcSinkhornIters);
  CSA_EXPECT_SAME(hcEps);
  CSA_EXPECT_SAME(engramLayerIds);
  CSA_EXPECT_SAME(engramNumEmbeddings);
  CSA_EXPECT_SAME(engramVocabSize);
  CSA_EXPECT_SAME(engramMaxNgramSize);
  CSA_EXPECT_SAME(engramNHeads);
  CSA_EXPECT_SAME(engramHeadDim);
  CSA_EXPECT_SAME(engramPadId);
  CSA_EXPECT_SAME(engramCompressedVocabSize);
  CSA_EXPECT_SAME(dtype);
  CSA_EXPECT_SAME(expertDtype);
  CSA_EXPECT_SAME(weightBlockSize);
#undef CSA_EXPECT_SAME
}

// The released flat inference config has no max_position_embeddings; only the
// HF config states the 1M context (spec §1 "max context", source HF-cfg).
TEST(ConfigReleased, MaxPositionEmbeddingsAgreesAcrossLayouts) {
  // HF states it; the flat config derives it as original_seq_len x factor.
  EXPECT_EQ(releasedHfConfig().maxPositionEmbeddings, 1048576);
  EXPECT_EQ(releasedConfig().maxPositionEmbeddings, 1048576);
}

TEST(ConfigReleased, Dimensions) {
  const ModelConfig c = releasedConfig();
  EXPECT_EQ(c.vocabSize, 129280);
  EXPECT_EQ(c.dim, 5120);
  EXPECT_EQ(c.nLayers, 40);
  EXPECT_EQ(c.nMtpLayers, 3);
  EXPECT_EQ(c.nHeads, 64);
  EXPECT_EQ(c.headDim, 512);
  EXPECT_EQ(c.ropeHeadDim, 64);
  EXPECT_EQ(c.qLoraRank, 1280);
  EXPECT_EQ(c.oGroups, 8);
  EXPECT_EQ(c.oLoraRank, 1024);
  EXPECT_EQ(c.windowSize, 128);
  EXPECT_EQ(c.normEps, 1e-20);
}

TEST(ConfigReleased, CompressRatios) {
  Ints expected = {0, 0};
  expected.insert(expected.end(), 18, 2);
  expected.insert(expected.end(), 20, 1);
  expected.insert(expected.end(), {0, 0, 0});
  ASSERT_EQ(expected.size(), 43u);
  const ModelConfig c = releasedConfig();
  EXPECT_EQ(c.compressRatios, expected);
  EXPECT_EQ(c.ratio(0), 0);
  EXPECT_EQ(c.ratio(19), 2);
  EXPECT_EQ(c.ratio(20), 1);
}

TEST(ConfigReleased, SourceLayers) {
  const ModelConfig c = releasedConfig();
  EXPECT_EQ(c.kvSourceLayers, (Ints{2, 8, 14, 20}));
  EXPECT_EQ(c.indexSourceLayers, (Ints{2, 8, 14, 20, 24, 28, 32, 36}));
}

TEST(ConfigReleased, CandidatePool) {
  const ModelConfig c = releasedConfig();
  EXPECT_EQ(c.candidateSourceLayer, 20);
  EXPECT_EQ(c.candidateTopkBlocks, 2048);
  EXPECT_EQ(c.candidateBlockSize, 8);
}

TEST(ConfigReleased, Indexer) {
  const ModelConfig c = releasedConfig();
  EXPECT_EQ(c.indexNHeads, 32);
  EXPECT_EQ(c.indexHeadDim, 128);
  EXPECT_EQ(c.indexTopk, 512);
}

TEST(ConfigReleased, Rope) {
  const ModelConfig c = releasedConfig();
  EXPECT_EQ(c.ropeTheta, 10000);
  EXPECT_EQ(c.compressRopeTheta, 160000);
  EXPECT_EQ(c.ropeFactor, 16);
  EXPECT_EQ(c.originalSeqLen, 65536);
  EXPECT_EQ(c.betaFast, 32);
  EXPECT_EQ(c.betaSlow, 1);
}

TEST(ConfigReleased, MoeAndMhc) {
  const ModelConfig c = releasedConfig();
  EXPECT_EQ(c.nRoutedExperts, 384);
  EXPECT_EQ(c.nSharedExperts, 1);
  EXPECT_EQ(c.nActivatedExperts, 6);
  EXPECT_EQ(c.moeInterDim, 2304);
  EXPECT_EQ(c.scoreFunc, "sqrtsoftplus");
  EXPECT_EQ(c.routeScale, 1.5);
  EXPECT_EQ(c.swigluLimit, 10.0);
  EXPECT_EQ(c.hcMult, 4);
  EXPECT_EQ(c.hcSinkhornIters, 20);
  EXPECT_EQ(c.hcEps, 1e-6);
}

TEST(ConfigReleased, Engram) {
  const ModelConfig c = releasedConfig();
  EXPECT_EQ(c.engramLayerIds, (Ints{1, 14}));
  EXPECT_EQ(c.engramNumEmbeddings, (Ints{384006168, 384016682}));
  EXPECT_EQ(c.engramVocabSize, 16000000);
  EXPECT_EQ(c.engramMaxNgramSize, 4);
  EXPECT_EQ(c.engramNHeads, 8);
  EXPECT_EQ(c.engramHeadDim, 256);
  EXPECT_EQ(c.engramPadId, 2);
  EXPECT_EQ(c.engramCompressedVocabSize, 99092);
}

TEST(ConfigReleased, WeightFormats) {
  const ModelConfig c = releasedConfig();
  EXPECT_EQ(c.dtype, "fp8");
  EXPECT_EQ(c.expertDtype, "fp4");
  EXPECT_EQ(c.weightBlockSize, 32);
}

TEST(ConfigReleased, HfQuantMethodIsTheDenseDtype) {
  auto config = parseEditedHf(
      [](json &j) { j["quantization_config"]["quant_method"] = "bf16"; });
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->dtype, "bf16");
}

TEST(ConfigReleased, TinyParses) {
  const ModelConfig c = tinyConfig();
  EXPECT_EQ(c.nLayers, 8);
  EXPECT_EQ(c.nMtpLayers, 0);
  EXPECT_EQ(c.compressRatios, (Ints{0, 0, 2, 2, 1, 1, 1, 1}));
  EXPECT_EQ(c.candidateSourceLayer, 4);
}

TEST(ConfigLoad, ReadsAFile) {
  const std::string path = ::testing::TempDir() + "csa_models_test_tiny.json";
  {
    std::ofstream out(path, std::ios::binary);
    out << configText("tiny");
  }
  auto config = loadModelConfig(path);
  std::remove(path.c_str());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->source, path);
  EXPECT_EQ(config->dim, 64);
}

TEST(ConfigLoad, MissingFileIsNotFound) {
  auto config = loadModelConfig("/nonexistent/csa/config.json");
  EXPECT_TRUE(failsWith(config,
                        {"/nonexistent/csa/config.json: cannot open config"},
                        absl::StatusCode::kNotFound));
}

//===----------------------------------------------------------------------===//
// Malformed documents.
//===----------------------------------------------------------------------===//

TEST(ConfigErrors, InvalidJsonNamesSourceAndPosition) {
  auto config = parseModelConfig("{\"dim\": 5120,\n \"n_layers\": }", "bad.json");
  EXPECT_TRUE(failsWith(config, {"bad.json: not valid JSON", "line 2"}));
}

TEST(ConfigErrors, EmptyTextIsInvalidJson) {
  EXPECT_TRUE(failsWith(parseModelConfig("", "empty.json"),
                        {"empty.json: not valid JSON"}));
}

TEST(ConfigErrors, ArrayIsNotAConfig) {
  EXPECT_TRUE(failsWith(parseModelConfig("[1, 2]", "bad.json"),
                        {"bad.json: a config is a JSON object, got array"}));
}

TEST(ConfigErrors, NumberIsNotAConfig) {
  EXPECT_TRUE(failsWith(parseModelConfig("42", "bad.json"),
                        {"bad.json: a config is a JSON object, got number"}));
}

//===----------------------------------------------------------------------===//
// Missing fields and wrong types.
//===----------------------------------------------------------------------===//

TEST(ConfigErrors, MissingFlatField) {
  auto config = parseEditedFlat([](json &j) { j.erase("dim"); });
  EXPECT_TRUE(failsWith(config, {"bad.json: field 'dim': missing required field"}));
}

TEST(ConfigErrors, MissingHfField) {
  auto config =
      parseEditedHf([](json &j) { j["text_config"].erase("hidden_size"); });
  EXPECT_TRUE(failsWith(
      config, {"bad.json: field 'text_config.hidden_size': missing required field"}));
}

TEST(ConfigErrors, MissingHfFieldWithOtherName) {
  auto config = parseEditedHf(
      [](json &j) { j["text_config"].erase("routed_scaling_factor"); });
  EXPECT_TRUE(failsWith(config, {"field 'text_config.routed_scaling_factor': "
                                 "missing required field"}));
}

TEST(ConfigErrors, MissingSourceList) {
  auto config = parseEditedFlat([](json &j) { j.erase("kv_source_layers"); });
  EXPECT_TRUE(
      failsWith(config, {"bad.json: field 'kv_source_layers': missing required field"}));
}

TEST(ConfigErrors, NullCountsAsMissing) {
  auto config = parseEditedFlat([](json &j) { j["n_heads"] = nullptr; });
  EXPECT_TRUE(failsWith(config, {"field 'n_heads': missing required field"}));
}

TEST(ConfigErrors, EngramFieldsRequiredWhenEngramLayersGiven) {
  auto config = parseEditedFlat([](json &j) { j.erase("engram_pad_id"); });
  EXPECT_TRUE(failsWith(config, {"field 'engram_pad_id': missing required field"}));
}

TEST(ConfigErrors, EngramFieldsOptionalWithoutEngramLayers) {
  auto config = parseEditedFlat([](json &j) {
    for (const char *key :
         {"engram_layer_ids", "engram_num_embeddings", "engram_vocab_size",
          "engram_max_ngram_size", "engram_n_heads", "engram_head_dim",
          "engram_pad_id", "engram_compressed_vocab_size"})
      j.erase(key);
  });
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->engramLayerIds.empty());
}

TEST(ConfigErrors, StringWhereIntegerExpected) {
  auto config = parseEditedFlat([](json &j) { j["n_heads"] = "64"; });
  EXPECT_TRUE(failsWith(config, {"bad.json: field 'n_heads': expected an "
                                 "integer, got string \"64\""}));
}

TEST(ConfigErrors, HfStringWhereIntegerExpected) {
  auto config = parseEditedHf(
      [](json &j) { j["text_config"]["num_attention_heads"] = "64"; });
  EXPECT_TRUE(failsWith(config, {"field 'text_config.num_attention_heads': "
                                 "expected an integer, got string"}));
}

TEST(ConfigErrors, FractionWhereIntegerExpected) {
  auto config = parseEditedFlat([](json &j) { j["dim"] = 5120.5; });
  EXPECT_TRUE(
      failsWith(config, {"field 'dim': expected an integer, got number 5120.5"}));
}

// Found by fuzz-config (test/fuzz/regressions/fuzz-config/): a float past
// int64's range was converted (undefined behaviour) before it was compared.
TEST(ConfigErrors, FloatBeyondInt64IsOutOfRange) {
  auto config = parseEditedFlat([](json &j) { j["rope_head_dim"] = 1.11111e63; });
  EXPECT_TRUE(failsWith(config, {"field 'rope_head_dim': integer out of range"}));
  config = parseEditedFlat([](json &j) { j["dim"] = -1e300; });
  EXPECT_TRUE(failsWith(config, {"field 'dim': integer out of range"}));
}

TEST(ConfigErrors, IntegralFloatIsAnInteger) {
  auto config = parseEditedFlat([](json &j) { j["dim"] = 5120.0; });
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->dim, 5120);
}

TEST(ConfigErrors, BoolWhereIntegerExpected) {
  auto config = parseEditedFlat([](json &j) { j["hc_mult"] = true; });
  EXPECT_TRUE(
      failsWith(config, {"field 'hc_mult': expected an integer, got boolean"}));
}

TEST(ConfigErrors, StringWhereNumberExpected) {
  auto config = parseEditedFlat([](json &j) { j["norm_eps"] = "1e-20"; });
  EXPECT_TRUE(
      failsWith(config, {"field 'norm_eps': expected a number, got string"}));
}

TEST(ConfigErrors, NumberWhereStringExpected) {
  auto config = parseEditedHf([](json &j) { j["text_config"]["scoring_func"] = 1; });
  EXPECT_TRUE(failsWith(config, {"field 'text_config.scoring_func': expected a "
                                 "string, got number 1"}));
}

TEST(ConfigErrors, ListWithNonInteger) {
  auto config =
      parseEditedFlat([](json &j) { j["kv_source_layers"] = json::array({2, "8", 14, 20}); });
  EXPECT_TRUE(failsWith(config, {"bad.json: field 'kv_source_layers': entry 1: "
                                 "expected an integer, got string \"8\""}));
}

TEST(ConfigErrors, HfListWithNonInteger) {
  auto config = parseEditedHf(
      [](json &j) { j["text_config"]["compress_ratios"][5] = 2.5; });
  EXPECT_TRUE(failsWith(config, {"field 'text_config.compress_ratios': entry 5: "
                                 "expected an integer, got number 2.5"}));
}

TEST(ConfigErrors, ScalarWhereListExpected) {
  auto config = parseEditedFlat([](json &j) { j["index_source_layers"] = 2; });
  EXPECT_TRUE(failsWith(config, {"field 'index_source_layers': expected a list "
                                 "of integers, got number 2"}));
}

//===----------------------------------------------------------------------===//
// Values out of range.
//===----------------------------------------------------------------------===//

TEST(ConfigErrors, ZeroDim) {
  auto config = parseEditedFlat([](json &j) { j["dim"] = 0; });
  EXPECT_TRUE(failsWith(config, {"bad.json: field 'dim': must be positive, got 0"}));
}

TEST(ConfigErrors, HfNegativeHiddenSize) {
  auto config =
      parseEditedHf([](json &j) { j["text_config"]["hidden_size"] = -5120; });
  EXPECT_TRUE(failsWith(
      config, {"field 'text_config.hidden_size': must be positive, got -5120"}));
}

TEST(ConfigErrors, NonPositiveDimsNameTheirField) {
  for (const char *field :
       {"vocab_size", "n_layers", "n_heads", "q_lora_rank", "o_lora_rank",
        "window_size", "index_n_heads", "index_topk", "n_routed_experts",
        "n_activated_experts", "moe_inter_dim", "hc_mult"}) {
    SCOPED_TRACE(field);
    auto config = parseEditedFlat([&](json &j) { j[field] = 0; });
    EXPECT_TRUE(failsWith(config, {std::string("field '") + field +
                                   "': must be positive, got 0"}));
  }
}

TEST(ConfigErrors, HfNonPositiveDimsNameTheirField) {
  for (const char *field :
       {"num_hidden_layers", "num_attention_heads", "qk_rope_head_dim",
        "sliding_window", "num_experts_per_tok", "moe_intermediate_size"}) {
    SCOPED_TRACE(field);
    auto config =
        parseEditedHf([&](json &j) { j["text_config"][field] = 0; });
    EXPECT_TRUE(failsWith(config, {std::string("field 'text_config.") + field +
                                   "': must be positive, got 0"}));
  }
}

TEST(ConfigErrors, NegativeMtpLayers) {
  auto config = parseEditedFlat([](json &j) { j["n_mtp_layers"] = -1; });
  EXPECT_TRUE(failsWith(config, {"field 'n_mtp_layers': must be >= 0"}));
}

TEST(ConfigErrors, HeadDimNotMultipleOf32) {
  auto config = parseEditedFlat([](json &j) { j["head_dim"] = 496 + 8; });
  EXPECT_TRUE(failsWith(
      config, {"bad.json: field 'head_dim': 504 is not a multiple of 32"}));
}

TEST(ConfigErrors, HfHeadDimNotMultipleOf32) {
  auto config = parseEditedHf([](json &j) { j["text_config"]["head_dim"] = 520; });
  EXPECT_TRUE(failsWith(
      config, {"field 'text_config.head_dim': 520 is not a multiple of 32"}));
}

TEST(ConfigErrors, IndexHeadDimNotMultipleOf32) {
  auto config = parseEditedFlat([](json &j) { j["index_head_dim"] = 100; });
  EXPECT_TRUE(failsWith(
      config, {"field 'index_head_dim': 100 is not a multiple of 32"}));
}

TEST(ConfigErrors, RopeHeadDimLargerThanIndexHeadDim) {
  auto config = parseEditedFlat([](json &j) { j["rope_head_dim"] = 192; });
  EXPECT_TRUE(failsWith(config, {"field 'rope_head_dim': 192 must be even"}));
}

TEST(ConfigErrors, OGroupsNotDividingHeads) {
  auto config = parseEditedFlat([](json &j) { j["o_groups"] = 7; });
  EXPECT_TRUE(failsWith(
      config, {"bad.json: field 'o_groups': 7 does not divide n_heads = 64"}));
}

TEST(ConfigErrors, HfOGroupsNotDividingHeads) {
  auto config = parseEditedHf([](json &j) { j["text_config"]["o_groups"] = 6; });
  EXPECT_TRUE(failsWith(config, {"field 'text_config.o_groups': 6 does not "
                                 "divide text_config.num_attention_heads = 64"}));
}

TEST(ConfigErrors, MoreActivatedThanRoutedExperts) {
  auto config = parseEditedFlat([](json &j) { j["n_activated_experts"] = 385; });
  EXPECT_TRUE(failsWith(config, {"field 'n_activated_experts': 385 exceeds 384 "
                                 "routed experts"}));
}

TEST(ConfigErrors, UnsupportedScoreFunc) {
  auto config = parseEditedFlat([](json &j) { j["score_func"] = "softmax"; });
  EXPECT_TRUE(failsWith(config, {"bad.json: field 'score_func': 'softmax' is not "
                                 "supported", "'sqrtsoftplus'"}));
}

TEST(ConfigErrors, HfUnsupportedScoringFunc) {
  auto config =
      parseEditedHf([](json &j) { j["text_config"]["scoring_func"] = "sigmoid"; });
  EXPECT_TRUE(failsWith(config, {"field 'text_config.scoring_func': 'sigmoid' is "
                                 "not supported"}));
}

TEST(ConfigErrors, HfUnsupportedQuantMethod) {
  auto config = parseEditedHf(
      [](json &j) { j["quantization_config"]["quant_method"] = "int4"; });
  EXPECT_TRUE(failsWith(config, {"field 'quantization_config.quant_method': "
                                 "'int4' is not supported"}));
}

TEST(ConfigErrors, UnsupportedExpertDtype) {
  auto config = parseEditedFlat([](json &j) { j["expert_dtype"] = "int4"; });
  EXPECT_TRUE(
      failsWith(config, {"field 'expert_dtype': 'int4' is not supported"}));
}

TEST(ConfigErrors, RopeFactorBelowOne) {
  auto config = parseEditedFlat([](json &j) { j["rope_factor"] = 0.5; });
  EXPECT_TRUE(failsWith(config, {"field 'rope_factor': must be >= 1"}));
}

// Found by fuzz-config (test/fuzz/regressions/fuzz-config/
// yarn-context-past-int64.json): the context a flat config derives from YaRN
// overflowed int64 (undefined behaviour) instead of being refused.
TEST(ConfigErrors, YarnContextPastInt64) {
  auto config = parseEditedFlat([](json &j) {
    j.erase("max_position_embeddings");
    j["rope_factor"] = 1.8446744073709552e20;
  });
  EXPECT_TRUE(failsWith(config, {"original_seq_len (", ") x rope_factor (",
                                 "is past 2^62 positions; give max_position_embeddings"}));
}

TEST(ConfigErrors, YarnWithoutOriginalSeqLen) {
  auto config = parseEditedHf([](json &j) {
    j["text_config"]["rope_scaling"].erase("original_max_position_embeddings");
  });
  EXPECT_TRUE(failsWith(config, {"field 'text_config.rope_scaling.factor': YaRN "
                                 "needs original_seq_len > 0"}));
}

TEST(ConfigErrors, CompressRatiosTooShort) {
  auto config = parseEditedFlat([](json &j) { j["compress_ratios"].erase(size_t(42)); });
  EXPECT_TRUE(failsWith(config, {"bad.json: field 'compress_ratios': has 42 "
                                 "entries; expected n_layers + n_mtp_layers = "
                                 "40 + 3"}));
}

TEST(ConfigErrors, HfCompressRatiosTooLong) {
  auto config = parseEditedHf(
      [](json &j) { j["text_config"]["compress_ratios"].push_back(0); });
  EXPECT_TRUE(failsWith(config, {"field 'text_config.compress_ratios': has 44 "
                                 "entries"}));
}

TEST(ConfigErrors, CompressRatiosMustCountMtpLayers) {
  auto config = parseEditedFlat([](json &j) { j["n_mtp_layers"] = 0; });
  EXPECT_TRUE(failsWith(config, {"field 'compress_ratios': has 43 entries; "
                                 "expected n_layers + n_mtp_layers = 40 + 0"}));
}

TEST(ConfigErrors, NegativeRatio) {
  auto config = parseEditedFlat([](json &j) { j["compress_ratios"][5] = -1; });
  EXPECT_TRUE(
      failsWith(config, {"field 'compress_ratios': layer 5: ratio -1 < 0"}));
}

TEST(ConfigErrors, KvSourceOutOfRange) {
  auto config =
      parseEditedFlat([](json &j) { j["kv_source_layers"] = json::array({2, 8, 14, 40}); });
  EXPECT_TRUE(failsWith(config, {"bad.json: field 'kv_source_layers': layer 40 "
                                 "is outside the 40 backbone layers"}));
}

TEST(ConfigErrors, HfIndexSourceNegative) {
  auto config = parseEditedHf(
      [](json &j) { j["text_config"]["index_source_layer_ids"][0] = -1; });
  EXPECT_TRUE(failsWith(config, {"field 'text_config.index_source_layer_ids': "
                                 "layer -1 is outside the 40 backbone layers"}));
}

TEST(ConfigErrors, CandidateSourceInMtpRange) {
  auto config = parseEditedFlat([](json &j) { j["candidate_source_layer"] = 41; });
  EXPECT_TRUE(failsWith(config, {"field 'candidate_source_layer': layer 41 is "
                                 "outside the 40 backbone layers"}));
}

TEST(ConfigErrors, HfCandidateSourceOutOfRange) {
  auto config = parseEditedHf(
      [](json &j) { j["text_config"]["candidate_source_layer_id"] = 99; });
  EXPECT_TRUE(failsWith(config, {"field 'text_config.candidate_source_layer_id': "
                                 "layer 99 is outside"}));
}

TEST(ConfigErrors, EngramLayerOutOfRange) {
  auto config = parseEditedFlat([](json &j) { j["engram_layer_ids"] = json::array({1, 40}); });
  EXPECT_TRUE(failsWith(config, {"field 'engram_layer_ids': layer 40 is outside"}));
}

TEST(ConfigErrors, CandidateSourceWithoutBlockCount) {
  auto config = parseEditedFlat([](json &j) { j.erase("candidate_topk_blocks"); });
  EXPECT_TRUE(failsWith(config, {"field 'candidate_topk_blocks': "
                                 "candidate_topk_blocks and candidate_block_size "
                                 "must be positive"}));
}

TEST(ConfigErrors, EngramNumEmbeddingsLengthMismatch) {
  auto config = parseEditedFlat(
      [](json &j) { j["engram_num_embeddings"] = json::array({384006168}); });
  EXPECT_TRUE(failsWith(config, {"bad.json: field 'engram_num_embeddings': has 1 "
                                 "entries for 2 engram layers"}));
}

TEST(ConfigErrors, HfEngramNumEmbeddingsLengthMismatch) {
  auto config = parseEditedHf([](json &j) {
    j["text_config"]["engram_num_embeddings"].push_back(7);
  });
  EXPECT_TRUE(failsWith(config, {"field 'text_config.engram_num_embeddings': has "
                                 "3 entries for 2 engram layers"}));
}

TEST(ConfigErrors, EngramNgramTooShort) {
  auto config = parseEditedFlat([](json &j) { j["engram_max_ngram_size"] = 1; });
  EXPECT_TRUE(failsWith(config, {"field 'engram_max_ngram_size': engram needs "
                                 "max_ngram_size >= 2"}));
}

//===----------------------------------------------------------------------===//
// Source lists that contradict each other (reported by scheduleFromConfig,
// with the config's field names).
//===----------------------------------------------------------------------===//

absl::Status scheduleStatus(const absl::StatusOr<ModelConfig> &config) {
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok())
    return config.status();
  return scheduleFromConfig(*config).status();
}

TEST(ConfigSourceErrors, KvSourceNotIndexSource) {
  auto config = parseEditedFlat(
      [](json &j) { j["index_source_layers"] = json::array({2, 14, 20, 24, 28, 32, 36}); });
  EXPECT_TRUE(failsWith(scheduleStatus(config),
                        {"bad.json: field 'index_source_layers': layer 8 is a "
                         "KV source but not an index source"}));
}

TEST(ConfigSourceErrors, HfKvSourceNotIndexSource) {
  auto config = parseEditedHf([](json &j) {
    j["text_config"]["index_source_layer_ids"] = json::array({8, 14, 20, 24, 28, 32, 36});
  });
  EXPECT_TRUE(failsWith(scheduleStatus(config),
                        {"bad.json: field 'text_config.index_source_layer_ids': "
                         "layer 2 is a KV source but not an index source"}));
}

TEST(ConfigSourceErrors, KvSourceWithRatioZero) {
  auto config = parseEditedFlat([](json &j) {
    j["kv_source_layers"] = json::array({1, 2, 8, 14, 20});
    j["index_source_layers"] = json::array({1, 2, 8, 14, 20, 24, 28, 32, 36});
  });
  EXPECT_TRUE(failsWith(scheduleStatus(config),
                        {"bad.json: field 'compress_ratios': layer 1 is a KV "
                         "source but has compression ratio 0"}));
}

TEST(ConfigSourceErrors, IndexSourceWithRatioZero) {
  auto config = parseEditedHf([](json &j) {
    j["text_config"]["index_source_layer_ids"] = json::array({0, 2, 8, 14, 20, 24, 28, 32, 36});
  });
  EXPECT_TRUE(failsWith(scheduleStatus(config),
                        {"bad.json: field 'text_config.compress_ratios': layer 0",
                         "index source but has compression ratio 0"}));
}

TEST(ConfigSourceErrors, CandidateSourceNotKvSource) {
  auto config = parseEditedFlat([](json &j) { j["candidate_source_layer"] = 24; });
  EXPECT_TRUE(failsWith(scheduleStatus(config),
                        {"bad.json: field 'candidate_source_layer': layer 24 "
                         "must be a KV source (a Full layer) to build the "
                         "candidate pool"}));
}

TEST(ConfigSourceErrors, HfCandidateSourceNotKvSource) {
  auto config = parseEditedHf(
      [](json &j) { j["text_config"]["candidate_source_layer_id"] = 21; });
  EXPECT_TRUE(failsWith(scheduleStatus(config),
                        {"field 'text_config.candidate_source_layer_id': layer "
                         "21 must be a KV source"}));
}

TEST(ConfigSourceErrors, ReindexWithoutCandidateSourceBreaksARule) {
  auto config = parseEditedFlat([](json &j) { j.erase("candidate_source_layer"); });
  EXPECT_TRUE(failsWith(scheduleStatus(config),
                        {"bad.json: schedule: layer 24 (reindex): a Reindex "
                         "layer needs a candidate_source"}));
}

TEST(ConfigSourceErrors, ReuseBeforeFirstFullBreaksARule) {
  // Layer 2 is no longer Full, so layers 2-7 have no earlier Full layer.
  auto config = parseEditedFlat([](json &j) {
    j["kv_source_layers"] = json::array({8, 14, 20});
    j["index_source_layers"] = json::array({8, 14, 20, 24, 28, 32, 36});
  });
  EXPECT_TRUE(failsWith(scheduleStatus(config),
                        {"bad.json: schedule: layer 2 (reuse): a Reuse layer "
                         "needs an earlier Full layer as kv_source"}));
}

} // namespace

TEST(ConfigErrors, SourceListedTwice) {
  auto config = parseEditedFlat(
      [](json &j) { j["kv_source_layers"] = {2, 8, 8, 14, 20}; });
  EXPECT_TRUE(failsWith(config, {"field 'kv_source_layers': layer 8 is listed "
                                 "twice"}));
}

TEST(ConfigErrors, IntegerBeyondInt64) {
  auto config = parseEditedFlat(
      [](json &j) { j["dim"] = uint64_t(18446744073709551615ull); });
  EXPECT_TRUE(failsWith(config, {"field 'dim': integer out of range"}));
}

TEST(ConfigErrors, NegativeCandidateSizesWithoutSource) {
  auto config = parseEditedFlat([](json &j) {
    j.erase("candidate_source_layer");
    j["candidate_topk_blocks"] = -3;
  });
  EXPECT_TRUE(failsWith(config, {"field 'candidate_topk_blocks'", ">= 0"}));
}

//===- LaunchRuleTest.cpp - kernels.json launch rules ---------------------===//
#include "runtime/cuda/LaunchRuleJson.h"

#include <gtest/gtest.h>

using csa::cuda::launchShape;
using csa::cuda::parseLaunchRule;
using nlohmann::json;

TEST(LaunchRule, RowOutputsGridIsRowsByOutputBlocks) {
  auto rule = parseLaunchRule(
      json{{"rule", "row_outputs"}, {"block", 128}, {"rows_argument", 0},
           {"outputs", 300}, {"outputs_per_block", 4}},
      "linear", 4);
  ASSERT_TRUE(rule.ok()) << rule.status();
  auto shape = launchShape(*rule, 7);
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->gridX, 7u);
  EXPECT_EQ(shape->gridY, 75u); // ceil(300 / 4): a warp per output
  EXPECT_EQ(shape->blockX, 128u);
  // No rows still launches one block (the kernel skips rows past the end).
  EXPECT_EQ(launchShape(*rule, 0)->gridX, 1u);
  // More output blocks than CUDA's grid.y allows: an error, not a wrap.
  rule->outputs = 4 * 65536;
  EXPECT_FALSE(launchShape(*rule, 1).ok());
}

TEST(LaunchRule, RowOutputsBlocksMayHaveSeveralWarpsAnOutput) {
  // Sparse attention's head form: a block of 256 per (row, head).
  auto rule = parseLaunchRule(
      json{{"rule", "row_outputs"}, {"block", 256}, {"rows_argument", 0},
           {"outputs", 64}, {"outputs_per_block", 1}},
      "sparse_attention_64x512", 6);
  ASSERT_TRUE(rule.ok()) << rule.status();
  auto shape = launchShape(*rule, 2);
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->gridX, 2u);
  EXPECT_EQ(shape->gridY, 64u);
  EXPECT_EQ(shape->blockX, 256u);
}

TEST(LaunchRule, RowTilesGridIsRowTilesByOutputTiles) {
  auto rule = parseLaunchRule(
      json{{"rule", "row_tiles"}, {"block", 128}, {"rows_argument", 0},
           {"rows_per_block", 8}, {"outputs", 300}, {"outputs_per_block", 128}},
      "linear_tiled", 4);
  ASSERT_TRUE(rule.ok()) << rule.status();
  auto shape = launchShape(*rule, 37);
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->gridX, 5u); // ceil(37 / 8) row tiles
  EXPECT_EQ(shape->gridY, 3u); // ceil(300 / 128): a thread per output
  EXPECT_EQ(shape->blockX, 128u);
  EXPECT_EQ(launchShape(*rule, 0)->gridX, 1u);
}

TEST(LaunchRule, ExpertTilesGridIsExpertsByOutputTiles) {
  // The routed experts' grouped tensor-core form: a block per (expert,
  // output tile) however many rows.
  auto rule = parseLaunchRule(
      json{{"rule", "expert_tiles"}, {"block", 256}, {"rows_argument", 0},
           {"experts", 64}, {"outputs", 2304}, {"outputs_per_block", 128}},
      "linear_fp4_e2m1_5120x2304_e64_s6_mma", 5);
  ASSERT_TRUE(rule.ok()) << rule.status();
  for (int64_t rows : {0, 2, 4096}) {
    auto shape = launchShape(*rule, rows);
    ASSERT_TRUE(shape.ok());
    EXPECT_EQ(shape->gridX, 64u);
    EXPECT_EQ(shape->gridY, 18u);
    EXPECT_EQ(shape->blockX, 256u);
  }
  auto noExperts = parseLaunchRule(
      json{{"rule", "expert_tiles"}, {"block", 256}, {"rows_argument", 0},
           {"experts", 0}, {"outputs", 2304}, {"outputs_per_block", 128}},
      "k", 5);
  ASSERT_FALSE(noExperts.ok());
  EXPECT_EQ(noExperts.status().message(), "kernel 'k': launch.experts is 0, not in [1, 1048576]");
}

TEST(LaunchRule, RowTilesBlocksMayHaveMoreThreadsThanOutputs) {
  // The mHC mix sums' decode form: a block of 256 per (row, sum), 25 sums.
  auto rule = parseLaunchRule(
      json{{"rule", "row_tiles"}, {"block", 256}, {"rows_argument", 0},
           {"rows_per_block", 1}, {"outputs", 25}, {"outputs_per_block", 1}},
      "hc_mix_sums_4x5120", 3);
  ASSERT_TRUE(rule.ok()) << rule.status();
  auto shape = launchShape(*rule, 3);
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->gridX, 3u);
  EXPECT_EQ(shape->gridY, 25u);
  EXPECT_EQ(shape->blockX, 256u);
}

TEST(LaunchRule, RowTilesOutputsMayGrowWithAnArgument) {
  // The index scores' block form: a block per (row, 8 keys), the keys the
  // width of the scores (argument 4, dimension 1).
  auto rule = parseLaunchRule(
      json{{"rule", "row_tiles"}, {"block", 256}, {"rows_argument", 0},
           {"rows_per_block", 1}, {"outputs", 1}, {"outputs_per_block", 8},
           {"element_dims", json::array({json::array({4, 1})})}},
      "index_score_32x128", 5);
  ASSERT_TRUE(rule.ok()) << rule.status();
  std::vector<std::vector<int64_t>> sizes = {{2, 32, 128}, {1001, 128}, {2, 32}, {2}, {2, 1001}};
  auto sizesOf = [&](int64_t i) {
    return i < int64_t(sizes.size()) ? &sizes[size_t(i)] : nullptr;
  };
  auto shape = csa::cuda::launchShapeFor(*rule, sizesOf);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->gridX, 2u);
  EXPECT_EQ(shape->gridY, 126u); // ceil(1001 / 8)
  sizes[4] = {2, 0};
  EXPECT_EQ(csa::cuda::launchShapeFor(*rule, sizesOf)->gridY, 1u); // never empty
}

TEST(LaunchRule, RowTilesStrideOverTilesPastMaxTileBlocks) {
  // The index scores at 1M tokens: 131072 tiles of 8 keys, more than
  // CUDA's 65535 blocks on grid.y; with max_tile_blocks the grid stops
  // there (the kernel walks the rest), without it the launch is refused.
  json launch{{"rule", "row_tiles"}, {"block", 256}, {"rows_argument", 0},
              {"rows_per_block", 1}, {"outputs", 1}, {"outputs_per_block", 8},
              {"element_dims", json::array({json::array({4, 1})})}};
  std::vector<std::vector<int64_t>> sizes = {{3, 32, 128}, {1 << 20, 128}, {3, 32}, {3},
                                             {3, 1 << 20}};
  auto sizesOf = [&](int64_t i) {
    return i < int64_t(sizes.size()) ? &sizes[size_t(i)] : nullptr;
  };
  auto uncapped = parseLaunchRule(launch, "index_score_32x128", 5);
  ASSERT_TRUE(uncapped.ok()) << uncapped.status();
  auto refused = csa::cuda::launchShapeFor(*uncapped, sizesOf);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "launch: grid 3 x 131072 exceeds CUDA's 2^31-1 x 65535");
  launch["max_tile_blocks"] = 65535;
  auto capped = parseLaunchRule(launch, "index_score_32x128", 5);
  ASSERT_TRUE(capped.ok()) << capped.status();
  auto shape = csa::cuda::launchShapeFor(*capped, sizesOf);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->gridX, 3u);
  EXPECT_EQ(shape->gridY, 65535u);
  sizes[4] = {3, 1001}; // fewer tiles than the cap: a block a tile
  EXPECT_EQ(csa::cuda::launchShapeFor(*capped, sizesOf)->gridY, 126u);
  launch["max_tile_blocks"] = 70000;
  auto bad = parseLaunchRule(launch, "k", 5);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "kernel 'k': launch.max_tile_blocks is 70000, not in [1, 65535]");
}

TEST(LaunchRule, RowsGridCoversRowTilesPerThread) {
  auto rule = parseLaunchRule(json{{"rule", "rows"}, {"block", 128},
                                   {"rows_argument", 1}, {"rows_per_thread", 8}},
                              "rms", 3);
  ASSERT_TRUE(rule.ok()) << rule.status();
  EXPECT_EQ(launchShape(*rule, 8 * 128 + 1)->gridX, 2u);
  EXPECT_EQ(launchShape(*rule, 8 * 128 + 1)->gridY, 1u);
}

TEST(LaunchRule, RowElementsGridCoversEveryIterationOfTheNest) {
  auto rule = parseLaunchRule(json{{"rule", "row_elements"}, {"block", 128},
                                   {"rows_argument", 0}, {"elements_per_row", 64}},
                              "sparse_attention", 7);
  ASSERT_TRUE(rule.ok()) << rule.status();
  EXPECT_EQ(launchShape(*rule, 3)->gridX, 2u); // ceil(3 x 64 / 128)
  EXPECT_EQ(launchShape(*rule, 0)->gridX, 1u);
  // rows x elements_per_row past int64: an error.
  rule->elementsPerRow = int64_t(1) << 40;
  EXPECT_FALSE(launchShape(*rule, int64_t(1) << 30).ok());
}

TEST(LaunchRule, RowElementsMultiplyByDynamicTripCounts) {
  // index_score: a thread per (row, key); the keys are dim 1 of argument 4.
  auto rule = parseLaunchRule(
      json{{"rule", "row_elements"}, {"block", 128}, {"rows_argument", 4},
           {"elements_per_row", 2}, {"element_dims", json::array({json::array({4, 1})})}},
      "index_score", 5);
  ASSERT_TRUE(rule.ok()) << rule.status();
  ASSERT_EQ(rule->elementDims.size(), 1u);
  EXPECT_EQ(rule->elementDims[0], std::make_pair(int64_t(4), int64_t(1)));
  EXPECT_EQ(launchShape(*rule, 3, 1000)->gridX, 47u); // ceil(3 x 2 x 1000 / 128)
  EXPECT_EQ(launchShape(*rule, 3, 0)->gridX, 1u);
  EXPECT_FALSE(launchShape(*rule, int64_t(1) << 20, int64_t(1) << 50).ok());
  auto message = [](const json &dims) {
    auto r = parseLaunchRule(json{{"rule", "row_elements"}, {"block", 128},
                                  {"rows_argument", 0}, {"elements_per_row", 1},
                                  {"element_dims", dims}},
                             "k", 2);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_EQ(message(json::array({json::array({2, 1})})),
            "kernel 'k': launch.element_dims entry [2, 1] is out of range (2 "
            "arguments, dimensions 0..15)");
  EXPECT_EQ(message(json::array({json::array({1})})),
            "kernel 'k': launch.element_dims has an entry that is not [argument, "
            "dimension]");
  EXPECT_EQ(message(json(3)),
            "kernel 'k': launch.element_dims is not a list of [argument, dimension]");
  auto rows = parseLaunchRule(json{{"rule", "rows"}, {"block", 32}, {"rows_argument", 0},
                                   {"rows_per_thread", 1},
                                   {"element_dims", json::array({json::array({0, 1})})}},
                              "k", 2);
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().message(),
            "kernel 'k': launch.element_dims is only for row_elements and row_tiles, not rows");
}

TEST(LaunchRule, ShapeFromTheArguments) {
  auto rule = parseLaunchRule(
      json{{"rule", "row_elements"}, {"block", 128}, {"rows_argument", 0},
           {"elements_per_row", 2}, {"element_dims", json::array({json::array({1, 1})})}},
      "k", 3);
  ASSERT_TRUE(rule.ok()) << rule.status();
  std::vector<std::vector<int64_t>> sizes = {{3, 7}, {5, 1000}};
  auto sizesOf = [&](int64_t i) {
    return i < int64_t(sizes.size()) ? &sizes[size_t(i)] : nullptr;
  };
  auto shape = csa::cuda::launchShapeFor(*rule, sizesOf);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->gridX, 47u); // ceil(3 x 2 x 1000 / 128)
  sizes[1] = {5};
  EXPECT_EQ(csa::cuda::launchShapeFor(*rule, sizesOf).status().message(),
            "launch.element_dims names dimension 1 of argument 1, which has 1 "
            "dimensions");
  sizes[0] = {};
  EXPECT_EQ(csa::cuda::launchShapeFor(*rule, sizesOf).status().message(),
            "launch.rows_argument names dimension 0 of argument 0, which has 0 "
            "dimensions");
}

TEST(LaunchRule, ChannelsGiveEachChannelAThreadWhateverTheRows) {
  auto rule = parseLaunchRule(
      json{{"rule", "channels"}, {"block", 128}, {"channels", 512}}, "k", 2);
  ASSERT_TRUE(rule.ok()) << rule.status();
  std::vector<int64_t> rows = {4096, 512};
  auto shape = csa::cuda::launchShapeFor(
      *rule, [&](int64_t) { return &rows; });
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->gridX, 4u);
  EXPECT_EQ(shape->blockX, 128u);
  rows[0] = 1;
  EXPECT_EQ(csa::cuda::launchShapeFor(*rule, [&](int64_t) { return &rows; })->gridX, 4u);
}

TEST(LaunchRule, MalformedRulesNameTheField) {
  auto message = [](const json &launch) {
    auto rule = parseLaunchRule(launch, "k", 2);
    return rule.ok() ? std::string("ok") : std::string(rule.status().message());
  };
  EXPECT_EQ(message(json{{"rule", "rows"}, {"block", 0}}),
            "kernel 'k': launch.block is 0, not in [1, 1024]");
  EXPECT_EQ(message(json{{"rule", "row_outputs"}, {"block", 32}, {"rows_argument", 0}}),
            "kernel 'k': launch.outputs is missing");
  EXPECT_EQ(message(json{{"rule", "row_outputs"}, {"block", 32}, {"rows_argument", 0},
                         {"outputs", 8}, {"outputs_per_block", 64}}),
            "kernel 'k': launch.outputs_per_block is 64, not in [1, 32]");
  EXPECT_EQ(message(json{{"rule", "row_outputs"}, {"block", 96}, {"rows_argument", 0},
                         {"outputs", 8}, {"outputs_per_block", 2}}),
            "kernel 'k': launch.block is 96, not a multiple of 32 x outputs_per_block (64)");
  EXPECT_EQ(message(json{{"rule", "rows"}, {"block", 32}, {"rows_argument", 5},
                         {"rows_per_thread", 1}}),
            "kernel 'k': launch.rows_argument is 5, not in [0, 1]");
  EXPECT_EQ(message(json{{"rule", "warps"}, {"block", 32}}),
            "kernel 'k': launch.rule 'warps' is not rows, row_elements, row_outputs, "
            "row_tiles, expert_tiles, channels or single");
  EXPECT_EQ(message(json{{"rule", "channels"}, {"block", 128}}),
            "kernel 'k': launch.channels is missing");
  EXPECT_EQ(message(json{{"rule", "row_tiles"}, {"block", 32}, {"rows_argument", 0},
                         {"outputs", 8}, {"outputs_per_block", 64}, {"rows_per_block", 8}}),
            "kernel 'k': launch.outputs_per_block is 64, not in [1, 32]");
  EXPECT_EQ(message(json{{"rule", "row_tiles"}, {"block", 64}, {"rows_argument", 0},
                         {"outputs", 8}, {"outputs_per_block", 64}}),
            "kernel 'k': launch.rows_per_block is missing");
  EXPECT_EQ(message(json::array()), "kernel 'k': launch.rule is missing");
}

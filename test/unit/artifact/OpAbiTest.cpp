//===- OpAbiTest.cpp - The argument layout of each op's plan step ---------===//
//
// The layouts argLayout gives for every conditional case of the table (the
// positions the executor's drivers read), the attrs that do not describe an
// op, and checkArgs' messages naming the slot.
//
//===----------------------------------------------------------------------===//
#include "runtime/artifact/OpAbi.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>

namespace csa::artifact {
namespace {

using nlohmann::json;

std::vector<std::string> labels(const ArgLayout &layout) {
  std::vector<std::string> out;
  for (const ArgSlot &slot : layout.slots())
    out.push_back(slot.label());
  return out;
}

std::vector<std::string> labelsOf(const std::string &op, const json &attrs) {
  auto layout = argLayout(op, attrs);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return layout.ok() ? labels(*layout) : std::vector<std::string>{};
}

std::string errorOf(const std::string &op, const json &attrs) {
  auto layout = argLayout(op, attrs);
  EXPECT_FALSE(layout.ok());
  return layout.ok() ? "" : std::string(layout.status().message());
}

using Labels = std::vector<std::string>;

TEST(OpAbi, EveryPlanOpHasOneEntry) {
  const std::set<std::string> planOps = {
      "csa.embed",       "csa.rms_norm",     "csa.lm_head",
      "csa.hc_expand",   "csa.quantize",     "csa.hsi_select",
      "csa.hc_mix",      "csa.hc_collapse",  "csa.hc_update",
      "csa.linear",      "csa.rope",         "csa.cache_append",
      "csa.compress",    "csa.index_score",  "csa.topk",
      "csa.sparse_attention", "csa.moe",     "csa.engram",
      "tensor.extract_slice", "csa.fusion"};
  std::set<std::string> seen, ops;
  for (const OpAbi &abi : opAbis()) {
    EXPECT_TRUE(planOps.count(abi.op)) << abi.op;
    ops.insert(abi.op);
    EXPECT_TRUE(seen.insert(std::string(abi.op) + "/" +
                            (abi.variant ? abi.variant : ""))
                    .second)
        << abi.op;
    std::set<std::string> names;
    for (const SlotDef &slot : abi.slots) {
      EXPECT_TRUE(names.insert(slot.name).second) << abi.op << " " << slot.name;
      EXPECT_NE(std::string(slot.description), "") << slot.name;
    }
  }
  // Every plan op has an entry; csa.fusion one a region kind.
  EXPECT_EQ(ops, planOps);
  EXPECT_EQ(seen.size(), planOps.size() + 1);
}

TEST(OpAbi, FixedLayouts) {
  EXPECT_EQ(labelsOf("csa.embed", json::object()),
            (Labels{"tokens", "weight", "result"}));
  EXPECT_EQ(labelsOf("csa.hc_mix", json::object()),
            (Labels{"streams", "fn", "base", "scale", "pre", "post", "comb"}));
  EXPECT_EQ(labelsOf("csa.hc_update", json::object()),
            (Labels{"streams", "update", "post", "comb", "result"}));
  EXPECT_EQ(labelsOf("csa.cache_append", json::object()),
            (Labels{"rows", "cache", "position"}));
  EXPECT_EQ(labelsOf("csa.engram", json::object()),
            (Labels{"streams", "tokens", "position", "embed.weight",
                    "embed.scale", "wkv.weight", "wkv.scale", "q_weight",
                    "k_weight", "result"}));
  EXPECT_EQ(labelsOf("tensor.extract_slice", json::object()),
            (Labels{"source", "offset", "size", "result"}));
  auto layout = argLayout("csa.index_score", json::object());
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->slots()[2].kind(), SlotKind::Cache);
  EXPECT_EQ(layout->slots()[3].kind(), SlotKind::Value);
  EXPECT_TRUE(layout->slots()[3].def->result);
  EXPECT_FALSE(layout->slots()[0].def->result);
}

TEST(OpAbi, LinearScaleFollowsTheFormat) {
  for (const char *format : {"bf16", "f32"})
    EXPECT_EQ(labelsOf("csa.linear", {{"format", format}}),
              (Labels{"input", "weight", "result"}))
        << format;
  for (const char *format : {"fp8_block32", "fp4_e2m1", "fp8_as_bf16"})
    EXPECT_EQ(labelsOf("csa.linear", {{"format", format}}),
              (Labels{"input", "weight", "scale", "result"}))
        << format;
  EXPECT_EQ(weightFormatHasScales("fp8_block32"), true);
  EXPECT_EQ(weightFormatHasScales("bf16"), false);
  EXPECT_EQ(weightFormatHasScales("fp8"), std::nullopt);
  EXPECT_EQ(errorOf("csa.linear", {{"format", "fp8"}}),
            "attrs.format must be a weight format (bf16, f32, fp8_block32, "
            "fp4_e2m1, fp8_as_bf16), got \"fp8\" (csa.linear takes scale for "
            "the formats with scales)");
  EXPECT_EQ(errorOf("csa.linear", json::object()),
            "attrs.format must be a weight format (bf16, f32, fp8_block32, "
            "fp4_e2m1, fp8_as_bf16), got nothing (csa.linear takes scale for "
            "the formats with scales)");
}

TEST(OpAbi, CompressStateAndGateFromRatio) {
  EXPECT_EQ(labelsOf("csa.compress", {{"ratio", 1}}),
            (Labels{"input", "position", "wkv.weight", "norm.weight",
                    "result"}));
  EXPECT_EQ(labelsOf("csa.compress", {{"ratio", 4}}),
            (Labels{"input", "position", "state", "wkv.weight",
                    "wgate.weight", "norm.weight", "result"}));
  EXPECT_EQ(errorOf("csa.compress", {{"ratio", 0}}),
            "attrs.ratio must be an integer >= 1, got 0 (csa.compress takes "
            "state, wgate.weight when it is > 1)");
  EXPECT_EQ(errorOf("csa.compress", {{"ratio", "4"}}),
            "attrs.ratio must be an integer >= 1, got \"4\" (csa.compress "
            "takes state, wgate.weight when it is > 1)");
}

TEST(OpAbi, TopkPoolWhenMasked) {
  EXPECT_EQ(labelsOf("csa.topk", {{"masked", false}}),
            (Labels{"scores", "result"}));
  EXPECT_EQ(labelsOf("csa.topk", {{"masked", true}}),
            (Labels{"scores", "pool", "result"}));
  EXPECT_EQ(errorOf("csa.topk", json::object()),
            "attrs.masked must be true or false, got nothing (csa.topk takes "
            "pool when it is true)");
}

TEST(OpAbi, SparseAttentionGlobalAddsCacheAndSelected) {
  auto local = argLayout("csa.sparse_attention", {{"global", false}});
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(labels(*local), (Labels{"query", "window", "fresh", "position",
                                    "sink", "result"}));
  EXPECT_EQ(local->at("sink"), 4u);
  EXPECT_FALSE(local->has("cache"));
  auto global = argLayout("csa.sparse_attention", {{"global", true}});
  ASSERT_TRUE(global.ok());
  EXPECT_EQ(labels(*global),
            (Labels{"query", "window", "fresh", "position", "cache",
                    "selected", "sink", "result"}));
  EXPECT_EQ(global->at("cache"), 4u);
  EXPECT_EQ(global->at("selected"), 5u);
  EXPECT_EQ(global->at("sink"), 6u);
  EXPECT_EQ(global->at("result"), 7u);
  EXPECT_EQ(errorOf("csa.sparse_attention", {{"global", 1}}),
            "attrs.global must be true or false, got 1 (csa.sparse_attention "
            "takes cache, selected when it is true)");
}

TEST(OpAbi, MoeRepeatsTheExpertGroup) {
  auto plain = argLayout("csa.moe", {{"experts", 2},
                                     {"expert_scales", false},
                                     {"shared_scales", false}});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(labels(*plain),
            (Labels{"input", "gate.weight", "gate.bias",
                    "experts[0].w1.weight", "experts[0].w2.weight",
                    "experts[0].w3.weight", "experts[1].w1.weight",
                    "experts[1].w2.weight", "experts[1].w3.weight",
                    "shared.w1.weight", "shared.w2.weight",
                    "shared.w3.weight", "result"}));
  EXPECT_EQ(plain->at("w2.weight", 1), 7u);
  EXPECT_FALSE(plain->has("w1.scale", 0));

  // Scaled experts: weight then scale per projection (the 6 of the
  // executor's perExpert), and the unscaled shared expert after them.
  auto scaled = argLayout("csa.moe", {{"experts", 3},
                                      {"expert_scales", true},
                                      {"shared_scales", false}});
  ASSERT_TRUE(scaled.ok());
  EXPECT_EQ(scaled->size(), 3u + 3 * 6 + 3 + 1);
  for (int64_t e = 0; e < 3; ++e) {
    EXPECT_EQ(scaled->at("w1.weight", e), size_t(3 + 6 * e));
    EXPECT_EQ(scaled->at("w1.scale", e), size_t(4 + 6 * e));
    EXPECT_EQ(scaled->at("w2.weight", e), size_t(5 + 6 * e));
    EXPECT_EQ(scaled->at("w3.scale", e), size_t(8 + 6 * e));
  }
  EXPECT_EQ(scaled->at("shared.w1.weight"), 21u);
  EXPECT_FALSE(scaled->has("shared.w1.scale"));
  EXPECT_EQ(scaled->at("result"), 24u);
  // A repeated slot is found by its repeat only, an unrepeated one without.
  EXPECT_FALSE(scaled->has("w1.weight"));
  EXPECT_FALSE(scaled->has("w1.weight", 3));
  EXPECT_FALSE(scaled->has("shared.w1.weight", 0));

  auto both = argLayout("csa.moe", {{"experts", 1},
                                    {"expert_scales", true},
                                    {"shared_scales", true}});
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(labels(*both),
            (Labels{"input", "gate.weight", "gate.bias",
                    "experts[0].w1.weight", "experts[0].w1.scale",
                    "experts[0].w2.weight", "experts[0].w2.scale",
                    "experts[0].w3.weight", "experts[0].w3.scale",
                    "shared.w1.weight", "shared.w1.scale",
                    "shared.w2.weight", "shared.w2.scale",
                    "shared.w3.weight", "shared.w3.scale", "result"}));

  EXPECT_EQ(errorOf("csa.moe", {{"experts", 0},
                                {"expert_scales", false},
                                {"shared_scales", false}}),
            "attrs.experts must be an integer >= 1, got 0 (csa.moe takes "
            "w1.weight, w1.scale, w2.weight, w2.scale, w3.weight, w3.scale "
            "once for each)");
  EXPECT_EQ(errorOf("csa.moe", {{"experts", 2}, {"expert_scales", false}}),
            "attrs.shared_scales must be true or false, got nothing (csa.moe "
            "takes shared.w1.scale, shared.w2.scale, shared.w3.scale when it "
            "is true)");
  EXPECT_EQ(errorOf("csa.moe", {{"experts", int64_t(1) << 40},
                                {"expert_scales", true},
                                {"shared_scales", true}}),
            "attrs.experts = 1099511627776 gives a csa.moe step more than "
            "1048576 arguments");
}

TEST(OpAbi, FusionByRegionName) {
  EXPECT_EQ(labelsOf("csa.fusion", {{"name", "rope_quantize_store"}}),
            (Labels{"input", "rope_position", "store_position", "cache",
                    "rows"}));
  EXPECT_EQ(errorOf("csa.fusion", {{"name", "rope_store"}}),
            "csa.fusion has no argument layout for attrs.name \"rope_store\" "
            "(known: rope_quantize_store, hc_collapse_norm)");
  EXPECT_EQ(errorOf("csa.fusion", json::object()),
            "csa.fusion has no argument layout for attrs.name nothing "
            "(known: rope_quantize_store, hc_collapse_norm)");
  EXPECT_EQ(labelsOf("csa.fusion", {{"name", "hc_collapse_norm"}}),
            (Labels{"streams", "pre", "weight", "result"}));
}

TEST(OpAbi, UnknownOpAndAttrs) {
  EXPECT_EQ(errorOf("csa.attention", json::object()),
            "no argument layout for op 'csa.attention' (not an op a plan step "
            "carries out)");
  EXPECT_EQ(errorOf("csa.embed", json::array()), "attrs is not an object");
}

TEST(OpAbi, AtThrowsForAMissingSlot) {
  auto layout = argLayout("csa.topk", {{"masked", false}});
  ASSERT_TRUE(layout.ok());
  try {
    (void)layout->at("pool");
    FAIL() << "no throw";
  } catch (const std::logic_error &e) {
    EXPECT_EQ(std::string(e.what()),
              "a csa.topk step has no argument 'pool' (a bug: the layout is "
              "scores, result)");
  }
}

TEST(OpAbi, CheckArgsNamesTheSlot) {
  auto layout = argLayout("csa.sparse_attention", {{"global", true}});
  ASSERT_TRUE(layout.ok());
  std::vector<KernelArg> args = {
      KernelArg::transient("q"),       KernelArg::cache("L2.swa"),
      KernelArg::transient("fresh"),   KernelArg::scalar("position"),
      KernelArg::cache("L2.global"),   KernelArg::transient("sel"),
      KernelArg::weight("layers.2.attn.attn_sink"),
      KernelArg::output("logits")};
  EXPECT_TRUE(checkArgs(*layout, args).ok());
  args[6] = KernelArg::transient("sink");
  EXPECT_EQ(std::string(checkArgs(*layout, args).message()),
            "args[6] (sink) is a transient; csa.sparse_attention takes a "
            "weight there");
  args[6] = KernelArg::weight("layers.2.attn.attn_sink");
  args[3] = KernelArg::input("tokens");
  EXPECT_EQ(std::string(checkArgs(*layout, args).message()),
            "args[3] (position) is an input; csa.sparse_attention takes an "
            "integer (index, scalar or constant) there");
  args[3] = KernelArg::index(json("position"));
  EXPECT_TRUE(checkArgs(*layout, args).ok());
  args[4] = KernelArg::constant(1);
  EXPECT_EQ(std::string(checkArgs(*layout, args).message()),
            "args[4] (cache) is a constant; csa.sparse_attention takes a "
            "cache there");
  args.pop_back();
  EXPECT_EQ(std::string(checkArgs(*layout, args).message()),
            "csa.sparse_attention takes 8 arguments (query, window, fresh, "
            "position, cache, selected, sink, result), the step has 7");

  auto moe = argLayout("csa.moe", {{"experts", 4},
                                   {"expert_scales", true},
                                   {"shared_scales", true}});
  ASSERT_TRUE(moe.ok());
  std::vector<KernelArg> moeArgs(moe->size(), KernelArg::weight("w"));
  moeArgs.front() = KernelArg::transient("x");
  moeArgs.back() = KernelArg::transient("y");
  EXPECT_TRUE(checkArgs(*moe, moeArgs).ok());
  moeArgs[moe->at("w2.scale", 2)] = KernelArg::cache("L0.swa");
  EXPECT_EQ(std::string(checkArgs(*moe, moeArgs).message()),
            "args[18] (experts[2].w2.scale) is a cache; csa.moe takes a "
            "weight there");
  moeArgs.pop_back();
  EXPECT_EQ(std::string(checkArgs(*moe, moeArgs).message()),
            "csa.moe takes 34 arguments (input, gate.weight, gate.bias, "
            "experts[0].w1.weight, experts[0].w1.scale, experts[0].w2.weight, "
            "experts[0].w2.scale, experts[0].w3.weight, experts[0].w3.scale, "
            "experts[1].w1.weight, ... 23 more ..., result), the step has 33");
}

TEST(OpAbi, MarkdownListsEveryOp) {
  const std::string md = opAbiMarkdown();
  for (const OpAbi &abi : opAbis())
    EXPECT_NE(md.find("#### `" + std::string(abi.op) + "`"), std::string::npos)
        << abi.op;
  EXPECT_NE(md.find("| `experts[e].w1.scale` | weight | each e < `experts`; "
                    "`expert_scales` | its scales |"),
            std::string::npos);
  EXPECT_NE(md.find("| `scale` | weight | `format` is `fp8_block32`, "
                    "`fp4_e2m1`, `fp8_as_bf16` |"),
            std::string::npos);
  // The introduction quotes checkArgs (its paragraph is wrapped).
  std::string intro = md.substr(0, md.find("\n\n"));
  std::replace(intro.begin(), intro.end(), '\n', ' ');
  EXPECT_NE(intro.find("`args[4] (sink) is a transient; csa.sparse_attention "
                       "takes a weight there`"),
            std::string::npos)
      << intro;
}

} // namespace
/// One sub-layer's mHC steps: the mix (0), two steps that do not use its
/// results (1, 2) and the update that reads `post` and `comb` (3).
std::vector<KernelCall> mixSteps() {
  auto step = [](const char *op, std::vector<KernelArg> args) {
    return KernelCall{"k", "kernels/host.so", std::move(args), json{{"op", op}}};
  };
  using A = KernelArg;
  return {step("csa.hc_mix", {A::transient("x"), A::weight("fn"), A::weight("base"),
                              A::weight("scale"), A::transient("pre"), A::transient("post"),
                              A::transient("comb")}),
          step("csa.hc_collapse", {A::transient("x"), A::transient("pre0"), A::transient("c")}),
          step("csa.rms_norm", {A::transient("c"), A::weight("norm"), A::transient("n")}),
          step("csa.hc_update", {A::transient("x"), A::transient("n"), A::transient("post"),
                                 A::transient("comb"), A::transient("x1")})};
}

TEST(OpAbi, StepValuesFollowTheResultSlots) {
  auto values = stepValues(mixSteps()[0]);
  ASSERT_TRUE(values.ok()) << values.status();
  // The mix keeps scratch of its own in the executor; the norm does not.
  EXPECT_EQ(values->readSet, (std::set<std::string>{"transient:x", "scratch:csa.hc_mix"}));
  EXPECT_EQ(values->writeSet, (std::set<std::string>{"transient:pre", "transient:post",
                                                     "transient:comb", "scratch:csa.hc_mix"}));
  values = stepValues(mixSteps()[2]);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(values->readSet, (std::set<std::string>{"transient:c"}));
  EXPECT_EQ(values->writeSet, (std::set<std::string>{"transient:n"}));
}

TEST(OpAbi, AStepOverlapsTheStepsBeforeItsResultsFirstReader) {
  std::vector<KernelCall> calls = mixSteps();
  calls[0].overlapsUntil = 3;
  EXPECT_TRUE(checkOverlaps(calls, "decode").ok()) << checkOverlaps(calls, "decode");
  calls[0].overlapsUntil = 4; // past the update, which reads post and comb
  EXPECT_EQ(checkOverlaps(calls, "decode").message(),
            "decode[0].overlaps_until (4): decode[3] reads transient:comb, which the branch "
            "writes (its first reader is its join)");
}

TEST(OpAbi, ConsecutiveStepsWithOneMarkAreOneBranch) {
  // The collapse and the norm as one branch until the update: the update
  // reads the norm's result, so the branch ends there.
  std::vector<KernelCall> calls = mixSteps();
  calls[1].overlapsUntil = 3;
  calls[2].overlapsUntil = 3;
  EXPECT_TRUE(checkOverlaps(calls, "decode").ok()) << checkOverlaps(calls, "decode");
  // A join inside the branch.
  calls[1].overlapsUntil = calls[2].overlapsUntil = 2;
  EXPECT_EQ(checkOverlaps(calls, "decode").message(),
            "decode[1].overlaps_until (2): decode[2] is in the branch, which must end before "
            "step 2");
  // Branches beside each other: the mix until the update and, inside its
  // window, the collapse until the norm, which reads its result (its join).
  calls = mixSteps();
  calls[0].overlapsUntil = 3;
  calls[1].overlapsUntil = 2;
  EXPECT_TRUE(checkOverlaps(calls, "decode").ok()) << checkOverlaps(calls, "decode");
  // The collapse past its reader.
  calls[0].overlapsUntil = -1;
  calls[1].overlapsUntil = 3;
  EXPECT_EQ(checkOverlaps(calls, "decode").message(),
            "decode[1].overlaps_until (3): decode[2] reads transient:c, which the branch writes "
            "(its first reader is its join)");
}

TEST(OpAbi, OverlapsAreRefusedWhereTheyCouldRace) {
  std::vector<KernelCall> calls = mixSteps();
  calls[0].overlapsUntil = 3;
  // A step between that writes what the overlapping step reads.
  calls[2].args[2] = KernelArg::transient("x");
  EXPECT_EQ(checkOverlaps(calls, "decode").message(),
            "decode[0].overlaps_until (3): decode[2] writes transient:x, which the branch reads "
            "or writes");
  // Another step of the same op (the executor's scratch is per op).
  calls = mixSteps();
  calls[0].overlapsUntil = 3;
  calls[1] = calls[0];
  calls[1].overlapsUntil = -1;
  calls[1].args[4] = KernelArg::transient("pre2");
  calls[1].args[5] = KernelArg::transient("post2");
  calls[1].args[6] = KernelArg::transient("comb2");
  EXPECT_EQ(checkOverlaps(calls, "decode").message(),
            "decode[0].overlaps_until (3): decode[1] reads scratch:csa.hc_mix, which the branch "
            "writes (its first reader is its join)");
}

} // namespace csa::artifact

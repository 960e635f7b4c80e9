//===- PlanTest.cpp - plan.json: schema, sizes, errors --------------------===//
//
// parsePlan / planToJson round trip, the per-sequence byte arithmetic
// (matching the cost report's 890 B/token for the released Full layers),
// and one case per schema rule, each asserting the field path it names.
//
//===----------------------------------------------------------------------===//
#include "ArtifactTestSupport.h"

#include "runtime/artifact/Manifest.h"
#include "runtime/artifact/Plan.h"

#include <gtest/gtest.h>

namespace csa::artifact {
namespace {

using nlohmann::json;

TEST(ArtifactPlan, RoundTrip) {
  Plan plan = test::tinyPlan();
  json text = planToJson(plan);
  auto parsed = parsePlan(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(planToJson(*parsed), text);
  EXPECT_EQ(parsed->caches.size(), 5u);
  EXPECT_EQ(parsed->prefill.size(), 3u);
  const KernelCall &attn = parsed->decode[1];
  EXPECT_EQ(attn.kernel, "decode_layer2_attn");
  EXPECT_EQ(attn.object, "kernels/host.so");
  ASSERT_EQ(attn.args.size(), 9u);
  EXPECT_EQ(attn.args[2].kind, ArgKind::Weight);
  EXPECT_EQ(attn.args[2].name, "layers.2.attn.wkv.scale");
  EXPECT_EQ(attn.args[4].kind, ArgKind::Cache);
  EXPECT_EQ(attn.args[6].kind, ArgKind::Scalar);
  EXPECT_EQ(attn.args[7].kind, ArgKind::Constant);
  EXPECT_EQ(attn.args[7].value, 2);
  EXPECT_EQ(attn.attrs, (json{{"grid", {4, 1, 1}}}));
  EXPECT_EQ(parsed->findCache("L2.global")->entryBytes, 356);
  EXPECT_EQ(parsed->findCache("nope"), nullptr);
  EXPECT_EQ(parsed->findTransient("h")->bytes, 8192);
}

TEST(ArtifactPlan, TextAndSpelling) {
  json text = planToJson(test::tinyPlan());
  EXPECT_EQ(text["version"], 6);
  EXPECT_EQ(text["caches"][3], (json{{"id", "L2.global"},
                                     {"layer", 2},
                                     {"kind", "global_cache"},
                                     {"ratio", 2},
                                     {"entry_bytes", 356},
                                     {"main_row_bytes", 288},
                                     {"index_row_bytes", 68}}));
  EXPECT_EQ(text["entry_points"]["decode"][2]["args"],
            (json{{{"transient", "h"}},
                  {{"weight", "head.weight"}},
                  {{"output", "logits"}}}));
  auto fromText = parsePlanText(text.dump(2));
  ASSERT_TRUE(fromText.ok()) << fromText.status();
  EXPECT_EQ(planToJson(*fromText), text);
}

// V4's FP8 main-KV rows name their bf16 channels; the field round-trips and
// is absent for the released FP4 rows.
TEST(ArtifactPlan, MainRowRope) {
  Plan plan = test::tinyPlan();
  EXPECT_FALSE(planToJson(plan)["caches"][3].contains("main_row_rope"));
  CacheBuffer &global = plan.caches[3];
  global.mainRowBytes = 584;
  global.entryBytes = 584 + 68;
  global.mainRowRope = 64;
  json text = planToJson(plan);
  EXPECT_EQ(text["caches"][3]["main_row_rope"], 64);
  auto parsed = parsePlan(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->caches[3].mainRowRope, 64);
  EXPECT_EQ(planToJson(*parsed), text);
}

TEST(ArtifactPlan, IndexRowFormat) {
  Plan plan = test::tinyPlan();
  EXPECT_FALSE(planToJson(plan)["caches"][3].contains("index_row_format"));
  CacheBuffer &global = plan.caches[3];
  global.indexRowBytes = 132;
  global.entryBytes = 288 + 132;
  global.indexRowFp8 = true;
  json text = planToJson(plan);
  EXPECT_EQ(text["caches"][3]["index_row_format"], "fp8");
  auto parsed = parsePlan(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->caches[3].indexRowFp8);
  EXPECT_EQ(planToJson(*parsed), text);
}

// The writer's layout reads back to the same JSON, a line per tensor.
TEST(ArtifactPlan, FormattedJsonReadsBack) {
  json plan = planToJson(test::tinyPlan());
  EXPECT_EQ(json::parse(formatJson(plan)), plan);
  json weights = weightsToJson(test::tinyWeights());
  std::string text = formatJson(weights);
  EXPECT_EQ(json::parse(text), weights);
  EXPECT_NE(text.find("\n    {\"dtype\":\"BF16\",\"name\":\"embed.weight\","
                      "\"shape\":[1024,64]},\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(formatJson(json::array()), "[]\n");
  EXPECT_EQ(formatJson(json{{"a", 1}}), "{\"a\":1}\n");
}

TEST(ArtifactPlan, Bytes) {
  Plan plan = test::tinyPlan();
  // 3 SWA rings of 128 x 528 B, a compressor state of 2 x 2 x 512 x 4 B.
  EXPECT_EQ(plan.fixedBytesPerSequence(), 3u * 67584u + 8192u);
  EXPECT_DOUBLE_EQ(plan.globalBytesPerToken(), 178.0);
  EXPECT_EQ(plan.findCache("L2.global")->entriesAt(4095), 2047);
  EXPECT_EQ(plan.bytesPerSequence(0), plan.fixedBytesPerSequence());
  EXPECT_EQ(plan.bytesPerSequence(4096), 3u * 67584u + 8192u + 2048u * 356u);
  EXPECT_EQ(plan.transientBytes(), 4096u + 8192u);
}

// The released model's Full layers 2, 8, 14 (ratio 2) and 20 (ratio 1) with
// 288 + 68 B entries: the cost report's 890 B/token.
TEST(ArtifactPlan, ReleasedGlobalBytesPerToken) {
  Plan plan;
  plan.maxContext = 131072;
  for (auto [layer, ratio] :
       {std::pair<int, int>{2, 2}, {8, 2}, {14, 2}, {20, 1}}) {
    CacheBuffer cache;
    cache.id = "L" + std::to_string(layer) + ".global";
    cache.layer = layer;
    cache.kind = CacheKind::GlobalCache;
    cache.ratio = ratio;
    cache.entryBytes = 356;
    plan.caches.push_back(cache);
  }
  EXPECT_DOUBLE_EQ(plan.globalBytesPerToken(), 890.0);
  EXPECT_EQ(plan.bytesPerSequence(131072), 131072u * 890u);
}

TEST(ArtifactPlan, KnownNames) {
  EXPECT_TRUE(isKnownScalar("position"));
  EXPECT_TRUE(isKnownScalar("num_tokens"));
  EXPECT_TRUE(isKnownScalar("batch_size"));
  EXPECT_FALSE(isKnownScalar("pos"));
  EXPECT_TRUE(isKnownInput("tokens"));
  EXPECT_TRUE(isKnownOutput("logits"));
  EXPECT_FALSE(isKnownOutput("tokens"));
  for (CacheKind kind :
       {CacheKind::SwaRing, CacheKind::GlobalCache, CacheKind::CompressorState})
    EXPECT_EQ(parseCacheKind(cacheKindName(kind)), kind);
}

struct SchemaCase {
  const char *name;
  std::function<void(json &)> edit;
  std::string message;
};

class ArtifactPlanSchema : public ::testing::TestWithParam<SchemaCase> {};

TEST_P(ArtifactPlanSchema, NamesTheField) {
  json plan = planToJson(test::tinyPlan());
  GetParam().edit(plan);
  auto parsed = parsePlan(plan);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
      << parsed.status();
  EXPECT_EQ(parsed.status().message(), "plan.json: " + GetParam().message);
}

json &decodeArg(json &plan, int call, int arg) {
  return plan["entry_points"]["decode"][call]["args"][arg];
}

INSTANTIATE_TEST_SUITE_P(
    Plan, ArtifactPlanSchema,
    ::testing::Values(
        SchemaCase{"TopLevelNotObject", [](json &p) { p = json::array(); },
                   "(top level): must be an object, got array"},
        SchemaCase{"MissingVersion", [](json &p) { p.erase("version"); },
                   "version: missing (required)"},
        SchemaCase{"UnknownTopLevel", [](json &p) { p["batch"] = 4; },
                   "batch: unknown field (expected one of: version, "
                   "max_context, caches, transients, entry_points)"},
        SchemaCase{"OverlapsItself",
                   [](json &p) { p["entry_points"]["decode"][1]["overlaps_until"] = 1; },
                   "entry_points.decode[1].overlaps_until: must be a later step of decode "
                   "(2 .. 3), got 1"},
        SchemaCase{"OverlapsPastTheEnd",
                   [](json &p) { p["entry_points"]["prefill"][0]["overlaps_until"] = 4; },
                   "entry_points.prefill[0].overlaps_until: must be a later step of prefill "
                   "(1 .. 3), got 4"},
        SchemaCase{"OverlapsUntilNotInteger",
                   [](json &p) { p["entry_points"]["decode"][0]["overlaps_until"] = "end"; },
                   "entry_points.decode[0].overlaps_until: must be an integer, got string"},
        SchemaCase{"MissingMaxContext", [](json &p) { p.erase("max_context"); },
                   "max_context: missing (required)"},
        SchemaCase{"ZeroMaxContext", [](json &p) { p["max_context"] = 0; },
                   "max_context: must be at least 1, got 0"},
        SchemaCase{"FloatMaxContext",
                   [](json &p) { p["max_context"] = 4096.0; },
                   "max_context: must be an integer, got 4096.0"},
        SchemaCase{"CachesNotArray", [](json &p) { p["caches"] = 3; },
                   "caches: must be an array, got number"},
        SchemaCase{"UnknownCacheKind",
                   [](json &p) { p["caches"][1]["kind"] = "ring"; },
                   "caches[1].kind: unknown cache kind 'ring' (expected "
                   "swa_ring, global_cache or compressor_state)"},
        SchemaCase{"NegativeLayer",
                   [](json &p) { p["caches"][0]["layer"] = -1; },
                   "caches[0].layer: must be at least 0, got -1"},
        SchemaCase{
            "MisspeltField",
            [](json &p) { p["caches"][0]["windw"] = p["caches"][0]["window"]; },
            "caches[0].windw: unknown field (expected one of: id, "
            "layer, kind, window, row_bytes, fixed_bytes)"},
        SchemaCase{"FieldOfAnotherKind",
                   [](json &p) { p["caches"][3]["window"] = 128; },
                   "caches[3].window: unknown field (expected one of: id, "
                   "layer, kind, ratio, entry_bytes, main_row_bytes, "
                   "index_row_bytes, main_row_rope, index_row_format)"},
        SchemaCase{"RopeWithoutMainRow",
                   [](json &p) {
                     p["caches"][3].erase("main_row_bytes");
                     p["caches"][3].erase("index_row_bytes");
                     p["caches"][3]["main_row_rope"] = 64;
                   },
                   "caches[3].main_row_rope: needs main_row_bytes (the row it describes)"},
        SchemaCase{"UnknownIndexRowFormat",
                   [](json &p) { p["caches"][3]["index_row_format"] = "fp6"; },
                   "caches[3].index_row_format: must be \"fp8\" (absent: the released FP4 "
                   "row), got \"fp6\""},
        SchemaCase{"Fp8IndexRowTooShort",
                   [](json &p) {
                     p["caches"][3]["index_row_bytes"] = 4;
                     p["caches"][3]["entry_bytes"] = 292;
                     p["caches"][3]["index_row_format"] = "fp8";
                   },
                   "caches[3].index_row_format: needs index_row_bytes above 4 (values, then "
                   "an fp32 scale)"},
        SchemaCase{"NegativeRope",
                   [](json &p) { p["caches"][3]["main_row_rope"] = -1; },
                   "caches[3].main_row_rope: must be at least 1, got -1"},
        SchemaCase{"SwaFixedBytes",
                   [](json &p) { p["caches"][2]["fixed_bytes"] = 1000; },
                   "caches[2].fixed_bytes: must be window x row_bytes = 128 "
                   "x 528, got 1000"},
        SchemaCase{"GlobalEntryBytes",
                   [](json &p) { p["caches"][3]["entry_bytes"] = 288; },
                   "caches[3].entry_bytes: must be main_row_bytes + "
                   "index_row_bytes = 288 + 68, got 288"},
        SchemaCase{"GlobalHalfRows",
                   [](json &p) { p["caches"][3].erase("index_row_bytes"); },
                   "caches[3].index_row_bytes: missing (main_row_bytes and "
                   "index_row_bytes come together)"},
        SchemaCase{"GlobalZeroRatio",
                   [](json &p) { p["caches"][3]["ratio"] = 0; },
                   "caches[3].ratio: must be at least 1, got 0"},
        SchemaCase{"CompressorRatioOne",
                   [](json &p) { p["caches"][4]["ratio"] = 1; },
                   "caches[4].ratio: must be at least 2, got 1"},
        SchemaCase{"DuplicateId",
                   [](json &p) { p["caches"][4]["id"] = "L0.swa"; },
                   "caches[4].id: duplicate buffer id 'L0.swa' (also "
                   "caches[0])"},
        SchemaCase{"TransientSharesCacheId",
                   [](json &p) { p["transients"][1]["id"] = "L2.global"; },
                   "transients[1].id: duplicate buffer id 'L2.global' (also "
                   "caches[3])"},
        SchemaCase{"SecondCacheOfALayer",
                   [](json &p) {
                     json extra = p["caches"][0];
                     extra["id"] = "L0.swa2";
                     p["caches"].push_back(extra);
                   },
                   "caches[5]: layer 0 has a second swa_ring (also "
                   "caches[0]); a layer's cache is one storage"},
        SchemaCase{"TransientZeroBytes",
                   [](json &p) { p["transients"][0]["bytes"] = 0; },
                   "transients[0].bytes: must be at least 1, got 0"},
        SchemaCase{"HugeBytes",
                   [](json &p) {
                     p["transients"][0]["bytes"] = 18446744073709551615ull;
                   },
                   "transients[0].bytes: must be at most "
                   "9223372036854775807, got 18446744073709551615"},
        SchemaCase{"MissingEntryPoint",
                   [](json &p) { p["entry_points"].erase("decode"); },
                   "entry_points.decode: missing (required)"},
        SchemaCase{"UnknownEntryPoint",
                   [](json &p) { p["entry_points"]["verify"] = json::array(); },
                   "entry_points.verify: unknown field (expected one of: "
                   "prefill, decode)"},
        SchemaCase{
            "EmptyEntryPoint",
            [](json &p) { p["entry_points"]["prefill"] = json::array(); },
            "entry_points.prefill: must list at least one kernel call"},
        SchemaCase{"CallNotObject",
                   [](json &p) { p["entry_points"]["decode"][1] = "attn"; },
                   "entry_points.decode[1]: must be an object, got string"},
        SchemaCase{
            "MissingKernel",
            [](json &p) { p["entry_points"]["decode"][0].erase("kernel"); },
            "entry_points.decode[0].kernel: missing (required)"},
        SchemaCase{"KernelNotASymbol",
                   [](json &p) {
                     p["entry_points"]["decode"][0]["kernel"] = "attn layer";
                   },
                   "entry_points.decode[0].kernel: 'attn layer' is not a "
                   "symbol name (letters, digits, _ . $)"},
        SchemaCase{"AttrsNotObject",
                   [](json &p) {
                     p["entry_points"]["decode"][0]["attrs"] = json::array();
                   },
                   "entry_points.decode[0].attrs: must be an object, got "
                   "array"},
        SchemaCase{"ArgTwoMembers",
                   [](json &p) { decodeArg(p, 1, 0)["cache"] = "L0.swa"; },
                   "entry_points.decode[1].args[0]: an argument is an object "
                   "with exactly one of weight, cache, transient, scalar, "
                   "constant, input, output, index; got 2 members"},
        SchemaCase{"ArgUnknownKind",
                   [](json &p) { decodeArg(p, 1, 0) = {{"buffer", "x"}}; },
                   "entry_points.decode[1].args[0].buffer: unknown field "
                   "(expected one of: weight, cache, transient, scalar, "
                   "constant, input, output, index)"},
        SchemaCase{
            "ArgUnknownCache",
            [](json &p) { decodeArg(p, 1, 4) = {{"cache", "L7.global"}}; },
            "entry_points.decode[1].args[4].cache: unknown cache "
            "buffer 'L7.global' (not in caches)"},
        SchemaCase{"ArgUnknownTransient",
                   [](json &p) { decodeArg(p, 1, 0) = {{"transient", "y"}}; },
                   "entry_points.decode[1].args[0].transient: unknown "
                   "transient buffer 'y' (not in transients)"},
        SchemaCase{"ArgUnknownScalar",
                   [](json &p) { decodeArg(p, 1, 6) = {{"scalar", "pos"}}; },
                   "entry_points.decode[1].args[6].scalar: unknown scalar "
                   "'pos' (known: position, num_tokens, batch_size)"},
        SchemaCase{"IndexUnknownVariable",
                   [](json &p) { decodeArg(p, 1, 6) = {{"index", "pos"}}; },
                   "entry_points.decode[1].args[6].index: unknown index "
                   "variable 'pos' (known: position, num_tokens)"},
        SchemaCase{"IndexUnknownOperation",
                   [](json &p) {
                     decodeArg(p, 1, 6) = {
                         {"index", json::array({"mod", "position", 2})}};
                   },
                   "entry_points.decode[1].args[6].index: unknown index "
                   "operation 'mod' (known: rows, add, sub, mul, div, min, "
                   "max)"},
        SchemaCase{"IndexArity",
                   [](json &p) {
                     decodeArg(p, 1, 6) = {{"index", json::array({"div", 2})}};
                   },
                   "entry_points.decode[1].args[6].index: 'div' takes two "
                   "operands, got 1"},
        SchemaCase{"IndexRowsOfUnknownTransient",
                   [](json &p) {
                     decodeArg(p, 1, 6) = {
                         {"index", json::array({"sub", "num_tokens",
                                                json::array({"rows", "y"})})}};
                   },
                   "entry_points.decode[1].args[6].index: [\"rows\", \"y\"]: "
                   "unknown transient buffer"},
        SchemaCase{"BuiltinWithObject",
                   [](json &p) {
                     p["entry_points"]["decode"][0]["kernel"] =
                         "builtin.slice_rows";
                   },
                   "entry_points.decode[0].object: a builtin step has no "
                   "object (\"\")"},
        SchemaCase{"UnknownBuiltin",
                   [](json &p) {
                     p["entry_points"]["decode"][0]["kernel"] = "builtin.gemm";
                   },
                   "entry_points.decode[0].kernel: unknown builtin "
                   "'builtin.gemm' (known: builtin.slice_rows)"},
        SchemaCase{"TransientDtypeWithoutShape",
                   [](json &p) { p["transients"][0]["dtype"] = "bf16"; },
                   "transients[0]: give both dtype and shape, or neither"},
        SchemaCase{"TransientUnknownDtype",
                   [](json &p) {
                     p["transients"][0]["dtype"] = "fp16";
                     p["transients"][0]["shape"] = json::array({-1, 64});
                   },
                   "transients[0].dtype: unknown dtype 'fp16' (known: bf16, "
                   "f32, i8, i32, i64)"},
        SchemaCase{"TransientZeroDimension",
                   [](json &p) {
                     p["transients"][0]["dtype"] = "bf16";
                     p["transients"][0]["shape"] = json::array({-1, 0});
                   },
                   "transients[0].shape: dimension 1 must be an integer >= "
                   "1, or -1 (sized by each step)"},
        SchemaCase{"ArgFloatConstant",
                   [](json &p) { decodeArg(p, 1, 7) = {{"constant", 1.5}}; },
                   "entry_points.decode[1].args[7].constant: must be an "
                   "integer, got 1.5"},
        SchemaCase{"ArgUnknownInput",
                   [](json &p) { decodeArg(p, 0, 0) = {{"input", "images"}}; },
                   "entry_points.decode[0].args[0].input: unknown input "
                   "'images' (known: tokens, positions)"},
        SchemaCase{"ArgUnknownOutput",
                   [](json &p) { decodeArg(p, 2, 2) = {{"output", "probs"}}; },
                   "entry_points.decode[2].args[2].output: unknown output "
                   "'probs' (known: logits)"},
        SchemaCase{"ArgEmptyWeight",
                   [](json &p) { decodeArg(p, 0, 1) = {{"weight", ""}}; },
                   "entry_points.decode[0].args[1].weight: must not be "
                   "empty"}),
    [](const ::testing::TestParamInfo<SchemaCase> &info) {
      return std::string(info.param.name);
    });

TEST(ArtifactPlan, NewerVersionIsCheckedFirst) {
  auto parsed = parsePlan(json{{"version", 7}, {"layout", "v7"}});
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(parsed.status().message(),
            "plan.json: plan version 7 is newer than this runtime's 6; "
            "rebuild the runtime or recompile");
}

TEST(ArtifactPlan, OlderVersionAsksForARecompile) {
  // Version 4 prefill steps fold the position to 0.
  auto parsed = parsePlan(json{{"version", 4}, {"max_context", 8}});
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(parsed.status().message(),
            "plan.json: plan version 4 is older than this runtime's 6 (the "
            "steps' kernels changed); recompile the artifact");
}

TEST(ArtifactPlan, VersionFiveStillRunsWithoutOverlaps) {
  json plan = planToJson(test::tinyPlan());
  plan["version"] = 5;
  auto parsed = parsePlan(plan);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->version, 5);
  plan["entry_points"]["decode"][0]["overlaps_until"] = 2;
  parsed = parsePlan(plan);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(),
            "plan.json: entry_points.decode[0].overlaps_until: plan version 5 has no "
            "overlapping steps (from version 6)");
}

TEST(ArtifactPlan, OverlapsUntilRoundTrips) {
  artifact::Plan plan = test::tinyPlan();
  plan.decode[0].overlapsUntil = 2;
  json written = planToJson(plan);
  EXPECT_EQ(written["entry_points"]["decode"][0]["overlaps_until"], 2);
  EXPECT_FALSE(written["entry_points"]["decode"][1].contains("overlaps_until"));
  auto parsed = parsePlan(written);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->decode[0].overlapsUntil, 2);
  EXPECT_EQ(parsed->decode[1].overlapsUntil, -1);
  EXPECT_EQ(parsed->prefill[0].overlapsUntil, -1);
}

TEST(ArtifactPlan, CheckContext) {
  Plan plan = test::tinyPlan();
  EXPECT_TRUE(checkContext(plan, 4096).ok());
  absl::Status status = checkContext(plan, 4097);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(status.message(),
            "context of 4097 tokens is longer than the plan allows "
            "(max_context 4096); shorten the input or recompile for a context "
            "of at least 4097 tokens");
  EXPECT_EQ(checkContext(plan, -3).message(),
            "context of -3 tokens: must be >= 0");
}

} // namespace
} // namespace csa::artifact

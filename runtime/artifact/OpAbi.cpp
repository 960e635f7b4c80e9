//===- OpAbi.cpp - The argument layout of each op's plan step -------------===//
#include "runtime/artifact/OpAbi.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <iterator>
#include <sstream>
#include <stdexcept>

namespace csa {
namespace artifact {

using nlohmann::json;

namespace {

using Test = SlotCondition::Test;

SlotDef value(const char *name, const char *what) {
  return {name, SlotKind::Value, what, {}, nullptr};
}
SlotDef output(const char *name, const char *what) {
  return {name, SlotKind::Value, what, {}, nullptr, /*result=*/true};
}
SlotDef weight(const char *name, const char *what) {
  return {name, SlotKind::Weight, what, {}, nullptr};
}
SlotDef cache(const char *name, const char *what) {
  return {name, SlotKind::Cache, what, {}, nullptr};
}
SlotDef integer(const char *name, const char *what) {
  return {name, SlotKind::Integer, what, {}, nullptr};
}
SlotDef when(Test test, const char *attr, SlotDef slot) {
  slot.when = {test, attr};
  return slot;
}
SlotDef ifFlag(const char *attr, SlotDef slot) {
  return when(Test::Flag, attr, slot);
}
SlotDef ifAboveOne(const char *attr, SlotDef slot) {
  return when(Test::AboveOne, attr, slot);
}
SlotDef ifScaled(const char *attr, SlotDef slot) {
  return when(Test::ScaledFormat, attr, slot);
}
SlotDef ifGiven(const char *attr, SlotDef slot) {
  return when(Test::Given, attr, slot);
}
SlotDef perRepeat(const char *attr, SlotDef slot) {
  slot.repeat = attr;
  return slot;
}

/// csa's WeightFormat spellings; the last three store a scale tensor beside
/// the weight.
constexpr const char *kFormats[] = {"bf16", "f32", "fp8_block32", "fp4_e2m1",
                                    "fp8_as_bf16"};
constexpr size_t kUnscaledFormats = 2;

/// Bounds a layout (csa.moe's groups repeat attrs.experts times) so that a
/// damaged attr cannot make the check allocate without limit.
constexpr int64_t kMaxSlots = int64_t(1) << 20;

std::vector<OpAbi> makeTable() {
  const char *result = "result";
  std::vector<OpAbi> t;
  t.push_back({"csa.embed", nullptr, nullptr,
               "The token embedding: one table row per token id",
               {value("tokens", "the token ids, i32 [rows]"),
                weight("weight", "the table, bf16 [vocab, dim]"),
                output(result, "the hidden rows, bf16 [rows, dim]")}});
  t.push_back({"csa.hc_expand", nullptr, nullptr,
               "The hidden rows copied into the `hc` residual streams",
               {value("input", "bf16 [rows, dim]"),
                output(result, "bf16 [rows, hc, dim]")}});
  t.push_back({"csa.hc_mix", nullptr, nullptr,
               "The mHC mixing coefficients (sums, then Sinkhorn per row)",
               {value("streams", "bf16 [rows, hc, dim]"),
                weight("fn", "`<weights>_fn`, f32 [(2 + hc) x hc, hc x dim]"),
                weight("base", "`<weights>_base`, f32 [(2 + hc) x hc]"),
                weight("scale", "`<weights>_scale`, f32 [3]"),
                output("pre", "f32 [rows, hc]"),
                output("post", "f32 [rows, hc]"),
                output("comb", "f32 [rows, hc, hc]")}});
  t.push_back({"csa.hc_collapse", nullptr, nullptr,
               "The streams summed with the `pre` weights",
               {value("streams", "bf16 [rows, hc, dim]"),
                value("pre", "f32 [rows, hc]"),
                output(result, "bf16 [rows, dim]")}});
  t.push_back({"csa.hc_update", nullptr, nullptr,
               "The mHC residual update",
               {value("streams", "bf16 [rows, hc, dim]"),
                value("update", "the sub-layer's output, bf16 [rows, dim]"),
                value("post", "f32 [rows, hc]"),
                value("comb", "f32 [rows, hc, hc]"),
                output(result, "bf16 [rows, hc, dim]")}});
  t.push_back({"csa.rms_norm", nullptr, nullptr,
               "RMSNorm over the last dimension",
               {value("input", "bf16 [..., dim]"),
                weight("weight", "bf16 [dim]"),
                output(result, "bf16, the input's shape")}});
  t.push_back({"csa.linear", nullptr, nullptr,
               "`y = x W^T` with the weight in `format`",
               {value("input", "bf16 or f32 [rows, in]"),
                weight("weight", "[out, in] in `format` (FP4: [out, in / 2], "
                                 "pairs packed)"),
                ifScaled("format",
                         weight("scale", "its UE8M0 scales: per 32 x 32 block "
                                         "(FP8) or per 32 inputs (FP4)")),
                output(result, "[rows, out], f32 for an f32 weight, else "
                              "bf16")}});
  t.push_back({"csa.rope", nullptr, nullptr,
               "The rotary embedding, row i at position + i x `stride`",
               {value("input", "bf16 [rows, dim] or [rows, heads, dim]"),
                integer("position", "the position of row 0"),
                output(result, "the input rotated (its shape)")}});
  t.push_back({"csa.quantize", nullptr, nullptr,
               "Quantizes rows into a cache row format",
               {value("input", "bf16 or f32 [rows, dim]"),
                output(result, "one FP8 or FP4 row each, i8 [rows, "
                              "row_bytes]")}});
  t.push_back({"csa.cache_append", nullptr, nullptr,
               "Stores rows into a cache (no result)",
               {value("rows", "i8 [rows, row_bytes]"),
                cache("cache", "the SWA ring, or the global cache whose part "
                               "`part` names"),
                integer("position", "the entry rows[0] is stored at")}});
  t.push_back({"csa.compress", nullptr, nullptr,
               "The KV projection (ratio 1) or compressor (ratio > 1) of a "
               "Full layer",
               {value("input", "bf16 [rows, in]"),
                integer("position", "the position of input row 0"),
                ifAboveOne("ratio",
                           cache("state", "the compressor_state that carries "
                                          "the incomplete group")),
                weight("wkv.weight", "the latent projection, bf16 [dim, in]"),
                ifAboveOne("ratio",
                           weight("wgate.weight", "the gate-score projection, "
                                                  "bf16 [dim, in]")),
                weight("norm.weight", "the latent's RMSNorm, bf16 [dim]"),
                output(result, "a pre-RoPE latent row per group the step "
                              "completes, bf16 [groups, dim]")}});
  t.push_back({"csa.index_score", nullptr, nullptr,
               "The indexer's scores against a global cache's index keys",
               {value("query", "bf16 [rows, heads, dim]"),
                value("head_weights", "bf16 [rows, heads]"),
                cache("cache", "the global cache whose index-key rows are "
                               "scored"),
                ifGiven("published_at",
                        perRepeat("published",
                                  cache("published", "release publication: a "
                                                     "cache whose keys a decode "
                                                     "step at position p reads "
                                                     "where published_at[p % N] "
                                                     "names it (-1: `cache`)"))),
                output("scores", "f32 [rows, (last position + 1) / "
                                "ratio]")}});
  t.push_back({"csa.hsi_select", nullptr, nullptr,
               "HSI level 1: the best blocks of compressed positions",
               {value("scores", "f32 [rows, width]"),
                output("pool", "the candidate-pool mask, i8 [rows, width]")}});
  t.push_back({"csa.topk", nullptr, nullptr,
               "The `k` best compressed positions per row",
               {value("scores", "f32 [rows, width]"),
                ifFlag("masked", value("pool", "the candidate pool to select "
                                               "within, i8 [rows, width]")),
                output(result, "ascending positions, -1 padded, i32 [rows, "
                              "k]")}});
  t.push_back({"csa.sparse_attention", nullptr, nullptr,
               "One softmax over the window rows and the selected compressed "
               "rows",
               {value("query", "bf16 [rows, heads, dim]"),
                cache("window", "the layer's SWA ring"),
                value("fresh", "the step's own SWA rows, i8 [rows, "
                               "row_bytes]"),
                integer("position", "the position of query row 0"),
                ifFlag("global", cache("cache", "the global cache whose "
                                                "main-KV rows `selected` "
                                                "names")),
                ifFlag("global",
                       value("selected", "the top-k set, i32 [rows, k]")),
                weight("sink", "the heads' sink logits, f32 [heads]"),
                output(result, "bf16 [rows, heads, dim]")}});
  const char *experts = "experts";
  t.push_back(
      {"csa.moe", nullptr, nullptr,
       "`top_k` of `experts` routed SwiGLU experts plus the shared one",
       {value("input", "bf16 [rows, dim]"),
        weight("gate.weight", "the router, bf16 [experts, dim]"),
        weight("gate.bias", "the selection-only bias, f32 [experts]"),
        perRepeat(experts, weight("w1.weight", "expert e's gate projection "
                                               "[inter, dim]")),
        perRepeat(experts, ifFlag("expert_scales",
                                  weight("w1.scale", "its scales"))),
        perRepeat(experts, weight("w2.weight", "expert e's down projection "
                                               "[dim, inter]")),
        perRepeat(experts, ifFlag("expert_scales",
                                  weight("w2.scale", "its scales"))),
        perRepeat(experts, weight("w3.weight", "expert e's up projection "
                                               "[inter, dim]")),
        perRepeat(experts, ifFlag("expert_scales",
                                  weight("w3.scale", "its scales"))),
        weight("shared.w1.weight", "the shared expert's gate projection"),
        ifFlag("shared_scales", weight("shared.w1.scale", "its scales")),
        weight("shared.w2.weight", "the shared expert's down projection"),
        ifFlag("shared_scales", weight("shared.w2.scale", "its scales")),
        weight("shared.w3.weight", "the shared expert's up projection"),
        ifFlag("shared_scales", weight("shared.w3.scale", "its scales")),
        output(result, "bf16 [rows, dim]")}});
  t.push_back({"csa.engram", nullptr, nullptr,
               "The Engram n-gram lookup and gated update of the streams",
               {value("streams", "bf16 [rows, hc, dim]"),
                value("tokens", "the step's token ids, i32 [rows]"),
                integer("position", "the position of row 0"),
                weight("embed.weight", "the n-gram table, FP8 [table_rows, "
                                       "head_dim]"),
                weight("embed.scale", "its UE8M0 scales, one per 32 channels "
                                      "of a row"),
                weight("wkv.weight", "the key/value projection, FP8 "
                                     "[(hc + 1) x dim, columns x head_dim]"),
                weight("wkv.scale", "its 32 x 32 block scales"),
                weight("q_weight", "bf16 [hc, dim]"),
                weight("k_weight", "bf16 [hc, dim]"),
                output(result, "the updated streams, bf16 [rows, hc, dim]")}});
  t.push_back({"csa.lm_head", nullptr, nullptr,
               "The output projection to fp32 logits",
               {value("input", "bf16 [rows, dim]"),
                weight("weight", "bf16 [vocab, dim]"),
                output(result, "f32 [rows, vocab]; with `last_only` [1, "
                              "vocab], the last row's")}});
  t.push_back({"csa.fusion", "name", "rope_quantize_store",
               "RoPE, quantization and cache store of rows as one kernel",
               {value("input", "bf16 [rows, dim]"),
                integer("rope_position", "the RoPE position of row 0"),
                integer("store_position", "the cache entry row 0 is stored "
                                          "at"),
                cache("cache", "the SWA ring, or the global cache whose part "
                               "`part` names"),
                output("rows", "the quantized rows (later steps read them), i8 "
                              "[rows, row_bytes]")}});
  t.push_back({"csa.fusion", "name", "hc_collapse_norm",
               "mHC's collapse of the streams and the RMS norm of its rows as one kernel",
               {value("streams", "bf16 [rows, hc, dim]"),
                value("pre", "f32 [rows, hc]"),
                weight("weight", "the norm's weight, bf16 [dim]"),
                output(result, "the normed rows, bf16 [rows, dim] (the collapsed "
                               "rows are not kept)")}});
  t.push_back({"tensor.extract_slice", nullptr, nullptr,
               "Rows [offset, offset + size) of a value: the builtin "
               "`builtin.slice_rows` (bounded replay's cut)",
               {value("source", "the value to slice"),
                integer("offset", "the first row"),
                integer("size", "the row count"),
                output(result, "the rows, the source's dtype")}});
  return t;
}

/// `text` broken into lines of at most `width` columns (at spaces), as the
/// rest of docs/artifact-format.md is.
std::string wrapped(const std::string &text, size_t width) {
  std::string out, line;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      absl::StrAppend(&out, line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  return absl::StrCat(out, line, "\n");
}

std::string gotText(const json *value) {
  return value ? value->dump() : std::string("nothing");
}

/// The names of the slots of `abi` that `pred` picks, "a, b".
template <typename Pred>
std::string slotNames(const OpAbi &abi, Pred pred) {
  std::vector<std::string> names;
  for (const SlotDef &s : abi.slots)
    if (pred(s))
      names.push_back(s.name);
  return absl::StrJoin(names, ", ");
}

/// Whether `slot` is present for `attrs`; an error when the attr that
/// decides it does not say.
absl::StatusOr<bool> present(const OpAbi &abi, const SlotDef &slot,
                             const json &attrs) {
  const SlotCondition &c = slot.when;
  if (c.test == Test::Always)
    return true;
  auto it = attrs.find(c.attr);
  const json *v = it == attrs.end() ? nullptr : &*it;
  auto decided = [&](const SlotDef &s) {
    return s.when.test == c.test && std::strcmp(s.when.attr, c.attr) == 0;
  };
  switch (c.test) {
  case Test::Flag:
    if (!v || !v->is_boolean())
      return absl::InvalidArgumentError(absl::StrCat(
          "attrs.", c.attr, " must be true or false, got ", gotText(v), " (",
          abi.op, " takes ", slotNames(abi, decided), " when it is true)"));
    return v->get<bool>();
  case Test::AboveOne:
    if (!v || !v->is_number_integer() || v->get<int64_t>() < 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "attrs.", c.attr, " must be an integer >= 1, got ", gotText(v), " (",
          abi.op, " takes ", slotNames(abi, decided), " when it is > 1)"));
    return v->get<int64_t>() > 1;
  case Test::ScaledFormat: {
    std::optional<bool> scaled;
    if (v && v->is_string())
      scaled = weightFormatHasScales(v->get<std::string>());
    if (!scaled)
      return absl::InvalidArgumentError(absl::StrCat(
          "attrs.", c.attr, " must be a weight format (",
          absl::StrJoin(kFormats, ", "), "), got ", gotText(v), " (", abi.op,
          " takes ", slotNames(abi, decided), " for the formats with "
          "scales)"));
    return *scaled;
  }
  case Test::Given:
    return v != nullptr;
  case Test::Always:
    break;
  }
  return true;
}

/// The repeats of a group whose count is attrs[attr].
absl::StatusOr<int64_t> repeats(const OpAbi &abi, const char *attr,
                                const json &attrs) {
  auto it = attrs.find(attr);
  const json *v = it == attrs.end() ? nullptr : &*it;
  if (!v || !v->is_number_integer() || v->get<int64_t>() < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "attrs.", attr, " must be an integer >= 1, got ", gotText(v), " (",
        abi.op, " takes ",
        slotNames(abi, [&](const SlotDef &s) {
          return s.repeat && std::strcmp(s.repeat, attr) == 0;
        }),
        " once for each)"));
  return v->get<int64_t>();
}

bool sameRepeat(const char *a, const char *b) {
  return a == b || (a && b && std::strcmp(a, b) == 0);
}

/// The entry of `op` for `attrs` (csa.fusion: by region name).
absl::StatusOr<const OpAbi *> entryOf(std::string_view op, const json &attrs) {
  std::vector<const OpAbi *> candidates;
  for (const OpAbi &abi : opAbis())
    if (op == abi.op)
      candidates.push_back(&abi);
  if (candidates.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("no argument layout for op '", std::string(op),
                     "' (not an op a plan step carries out)"));
  const char *variantAttr = candidates.front()->variantAttr;
  if (!variantAttr)
    return candidates.front();
  auto it = attrs.find(variantAttr);
  std::vector<std::string> known;
  for (const OpAbi *abi : candidates) {
    if (it != attrs.end() && it->is_string() && *it == abi->variant)
      return abi;
    known.push_back(abi->variant);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(op), " has no argument layout for attrs.", variantAttr, " ",
      gotText(it == attrs.end() ? nullptr : &*it), " (known: ",
      absl::StrJoin(known, ", "), ")"));
}

/// What a slot of `kind` takes, with its article.
const char *kindText(SlotKind kind) {
  switch (kind) {
  case SlotKind::Value:
    return "a value (transient, input or output)";
  case SlotKind::Weight:
    return "a weight";
  case SlotKind::Cache:
    return "a cache";
  case SlotKind::Integer:
    return "an integer (index, scalar or constant)";
  }
  return "?";
}

} // namespace

const char *slotKindName(SlotKind kind) {
  switch (kind) {
  case SlotKind::Value:
    return "value";
  case SlotKind::Weight:
    return "weight";
  case SlotKind::Cache:
    return "cache";
  case SlotKind::Integer:
    return "integer";
  }
  return "?";
}

bool fitsSlot(ArgKind kind, SlotKind slot) {
  switch (slot) {
  case SlotKind::Value:
    return kind == ArgKind::Transient || kind == ArgKind::Input ||
           kind == ArgKind::Output;
  case SlotKind::Weight:
    return kind == ArgKind::Weight;
  case SlotKind::Cache:
    return kind == ArgKind::Cache;
  case SlotKind::Integer:
    return kind == ArgKind::Index || kind == ArgKind::Scalar ||
           kind == ArgKind::Constant;
  }
  return false;
}

const std::vector<OpAbi> &opAbis() {
  static const std::vector<OpAbi> table = makeTable();
  return table;
}

std::optional<bool> weightFormatHasScales(std::string_view format) {
  for (size_t i = 0; i < std::size(kFormats); ++i)
    if (format == kFormats[i])
      return i >= kUnscaledFormats;
  return std::nullopt;
}

std::string ArgSlot::label() const {
  if (instance < 0)
    return def->name;
  return absl::StrCat(def->repeat, "[", instance, "].", def->name);
}

std::optional<size_t> ArgLayout::find(std::string_view name,
                                      int64_t instance) const {
  auto it = positions_.find(name);
  if (it == positions_.end())
    return std::nullopt;
  const bool repeated = slots_[it->second.front()].instance >= 0;
  if (repeated != (instance >= 0) ||
      (repeated && size_t(instance) >= it->second.size()))
    return std::nullopt;
  return it->second[repeated ? size_t(instance) : 0];
}

size_t ArgLayout::at(std::string_view name, int64_t instance) const {
  if (auto i = find(name, instance))
    return *i;
  throw std::logic_error(absl::StrCat(
      "a ", op_, " step has no argument '", std::string(name),
      instance >= 0 ? absl::StrCat("' of repeat ", instance) : "'",
      " (a bug: the layout is ", signature(), ")"));
}

std::string ArgLayout::signature() const {
  constexpr size_t kShown = 12;
  std::vector<std::string> labels;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_.size() > kShown && i == kShown - 2) {
      labels.push_back(absl::StrCat("... ", slots_.size() - kShown + 1,
                                    " more ..."));
      i = slots_.size() - 2;
      continue;
    }
    labels.push_back(slots_[i].label());
  }
  return absl::StrJoin(labels, ", ");
}

absl::StatusOr<ArgLayout> argLayout(std::string_view op, const json &attrs) {
  if (!attrs.is_object())
    return absl::InvalidArgumentError("attrs is not an object");
  auto entry = entryOf(op, attrs);
  if (!entry.ok())
    return entry.status();
  const OpAbi &abi = **entry;
  ArgLayout layout;
  layout.op_ = abi.op;
  const std::vector<SlotDef> &defs = abi.slots;
  for (size_t i = 0; i < defs.size();) {
    // [i, end): one slot, or one repeated group.
    size_t end = i + 1;
    while (defs[i].repeat && end < defs.size() &&
           sameRepeat(defs[end].repeat, defs[i].repeat))
      ++end;
    std::vector<const SlotDef *> kept;
    for (size_t d = i; d < end; ++d) {
      auto here = present(abi, defs[d], attrs);
      if (!here.ok())
        return here.status();
      if (*here)
        kept.push_back(&defs[d]);
    }
    if (kept.empty()) { // a condition dropped the whole group
      i = end;
      continue;
    }
    int64_t count = 1;
    if (defs[i].repeat) {
      auto n = repeats(abi, defs[i].repeat, attrs);
      if (!n.ok())
        return n.status();
      count = *n;
      if (count > (kMaxSlots - int64_t(layout.slots_.size())) /
                      std::max<int64_t>(1, int64_t(kept.size())))
        return absl::InvalidArgumentError(absl::StrCat(
            "attrs.", defs[i].repeat, " = ", count, " gives a ", abi.op,
            " step more than ", kMaxSlots, " arguments"));
    }
    for (int64_t e = 0; e < count; ++e)
      for (const SlotDef *def : kept) {
        layout.positions_[def->name].push_back(layout.slots_.size());
        layout.slots_.push_back({def, defs[i].repeat ? e : -1});
      }
    i = end;
  }
  return layout;
}

std::string checkArg(const ArgLayout &layout, size_t i, const KernelArg &arg) {
  const ArgSlot &slot = layout.slots().at(i);
  if (fitsSlot(arg.kind, slot.kind()))
    return "";
  const bool vowel = arg.kind == ArgKind::Index || arg.kind == ArgKind::Input ||
                     arg.kind == ArgKind::Output;
  return absl::StrCat("args[", i, "] (", slot.label(), ") is ",
                      vowel ? "an " : "a ", argKindName(arg.kind), "; ",
                      layout.op(), " takes ", kindText(slot.kind()),
                      " there");
}

absl::Status checkArgs(const ArgLayout &layout,
                       const std::vector<KernelArg> &args) {
  if (args.size() != layout.size())
    return absl::InvalidArgumentError(
        absl::StrCat(layout.op(), " takes ", layout.size(), " arguments (",
                     layout.signature(), "), the step has ", args.size()));
  for (size_t i = 0; i < args.size(); ++i)
    if (std::string problem = checkArg(layout, i, args[i]); !problem.empty())
      return absl::InvalidArgumentError(problem);
  return absl::OkStatus();
}

namespace {
/// Ops whose executor drivers keep no scratch buffer of their own between
/// steps: every other op's steps share one (`scratch:<op>` in StepValues).
constexpr std::string_view kScratchFreeOps[] = {
    "csa.linear", "csa.rms_norm", "csa.rope", "csa.hc_update", "csa.hc_collapse",
    "csa.hc_expand", "csa.embed"};
} // namespace

absl::StatusOr<StepValues> stepValues(const KernelCall &call) {
  if (!call.attrs.contains("op") || !call.attrs["op"].is_string())
    return absl::InvalidArgumentError("attrs.op is missing");
  const std::string op = call.attrs["op"].get<std::string>();
  auto layout = argLayout(op, call.attrs);
  if (!layout.ok())
    return layout.status();
  if (absl::Status st = checkArgs(*layout, call.args); !st.ok())
    return st;
  StepValues v;
  for (size_t a = 0; a < call.args.size(); ++a) {
    const KernelArg &arg = call.args[a];
    const std::string key = absl::StrCat(argKindName(arg.kind), ":", arg.name);
    if (arg.kind == ArgKind::Transient || arg.kind == ArgKind::Output)
      (layout->slots()[a].def->result ? v.writeSet : v.readSet).insert(key);
    if (arg.kind == ArgKind::Cache) { // appended to, read, or both
      v.readSet.insert(key);
      v.writeSet.insert(key);
    }
    if (arg.kind == ArgKind::Index)
      for (const std::string &id : rowsReferences(arg.expr))
        v.readSet.insert(absl::StrCat("transient:", id));
  }
  if (std::find(std::begin(kScratchFreeOps), std::end(kScratchFreeOps), op) ==
      std::end(kScratchFreeOps)) {
    v.readSet.insert("scratch:" + op);
    v.writeSet.insert("scratch:" + op);
  }
  return v;
}

std::optional<std::string> StepValues::reads(const StepValues &other) const {
  for (const std::string &x : readSet)
    if (other.writeSet.count(x))
      return x;
  return std::nullopt;
}

std::optional<std::string> StepValues::writesAny(const std::set<std::string> &values) const {
  for (const std::string &x : writeSet)
    if (values.count(x))
      return x;
  return std::nullopt;
}

absl::Status checkOverlaps(const std::vector<KernelCall> &calls, std::string_view entry) {
  for (size_t i = 0; i < calls.size(); ++i)
    if (absl::Status st = checkOverlap(calls, i, entry); !st.ok())
      return st;
  return absl::OkStatus();
}

absl::Status checkOverlap(const std::vector<KernelCall> &calls, size_t i,
                          std::string_view entry) {
  const KernelCall &call = calls.at(i);
  const int64_t mark = call.overlapsUntil;
  // A branch is checked at its first step.
  if (mark < 0 || (i > 0 && calls[i - 1].overlapsUntil == mark))
    return absl::OkStatus();
  auto fail = [&](size_t j, const std::string &what) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(entry), "[", i,
                                                   "].overlaps_until (", mark, "): ",
                                                   std::string(entry), "[", j, "] ", what));
  };
  // The branch: this step and the ones right after it with the same mark.
  size_t last = i;
  while (last + 1 < calls.size() && calls[last + 1].overlapsUntil == mark)
    ++last;
  const size_t until = size_t(mark);
  if (until <= last || until > calls.size())
    return fail(last, absl::StrCat("is in the branch, which must end before step ", until));
  StepValues own;
  for (size_t b = i; b <= last; ++b) {
    if (isBuiltinKernel(calls[b].kernel))
      return fail(b, "is a builtin (the runtime's own steps run in the chain)");
    auto values = stepValues(calls[b]);
    if (!values.ok())
      return fail(b, std::string(values.status().message()));
    own.readSet.insert(values->readSet.begin(), values->readSet.end());
    own.writeSet.insert(values->writeSet.begin(), values->writeSet.end());
  }
  for (size_t j = last + 1; j < until; ++j) {
    const KernelCall &other = calls[j];
    if (isBuiltinKernel(other.kernel))
      return fail(j, absl::StrCat("is the builtin ", other.kernel,
                                  " (the runtime's own steps do not run beside a branch)"));
    auto values = stepValues(other);
    if (!values.ok())
      return fail(j, std::string(values.status().message()));
    if (auto what = values->reads(own))
      return fail(j, absl::StrCat("reads ", *what,
                                  ", which the branch writes (its first reader is its join)"));
    auto what = values->writesAny(own.writeSet);
    if (!what)
      what = values->writesAny(own.readSet);
    if (what)
      return fail(j, absl::StrCat("writes ", *what, ", which the branch reads or writes"));
  }
  return absl::OkStatus();
}

std::string opAbiMarkdown() {
  // The messages of the introduction are the ones checkArgs gives.
  auto attention = argLayout("csa.sparse_attention", {{"global", false}});
  std::vector<KernelArg> args = {
      KernelArg::transient("q"), KernelArg::cache("L0.swa"),
      KernelArg::transient("rows"), KernelArg::scalar("position"),
      KernelArg::transient("sink")};
  const std::string tooFew(checkArgs(*attention, args).message());
  args.push_back(KernelArg::transient("out"));
  const std::string wrongKind(checkArgs(*attention, args).message());

  std::vector<std::string> scaledFormats;
  for (size_t f = kUnscaledFormats; f < std::size(kFormats); ++f)
    scaledFormats.push_back(absl::StrCat("`", kFormats[f], "`"));

  std::string out = wrapped(absl::StrCat(
      "Each step binds its op's arguments in the order below: the plan writer "
      "binds them by these slot names and the executor reads them by the same "
      "names. A "
      "**value** is a transient, an input or an output; a **weight** a "
      "checkpoint tensor; a **cache** a cache buffer; an **integer** an index "
      "expression, a scalar or a constant. A slot with a condition is there "
      "only when the step's attr says so; the slots repeated per `experts` "
      "come as one group per routed expert, expert 0 first "
      "(`experts[0].w1.weight`, `experts[0].w2.weight`, ...). Results are "
      "values the step writes. The executor rejects a step whose arguments do "
      "not match at load (`",
      tooFew, "`, `", wrongKind, "`)."), 105);
  for (const OpAbi &abi : opAbis()) {
    absl::StrAppend(&out, "\n#### `", abi.op, "`");
    if (abi.variantAttr)
      absl::StrAppend(&out, " (`", abi.variantAttr, "` = `", abi.variant,
                      "`)");
    absl::StrAppend(&out, "\n\n", abi.summary, ".\n\n",
                    "| slot | kind | when | what |\n|---|---|---|---|\n");
    for (const SlotDef &s : abi.slots) {
      std::vector<std::string> when;
      if (s.repeat)
        when.push_back(absl::StrCat("each e < `", s.repeat, "`"));
      switch (s.when.test) {
      case Test::Always:
        break;
      case Test::Flag:
        when.push_back(absl::StrCat("`", s.when.attr, "`"));
        break;
      case Test::AboveOne:
        when.push_back(absl::StrCat("`", s.when.attr, "` > 1"));
        break;
      case Test::ScaledFormat:
        when.push_back(absl::StrCat("`", s.when.attr, "` is ",
                                    absl::StrJoin(scaledFormats, ", ")));
        break;
      case Test::Given:
        when.push_back(absl::StrCat("`", s.when.attr, "` is given"));
        break;
      }
      absl::StrAppend(&out, "| `",
                      s.repeat ? absl::StrCat(s.repeat, "[e].", s.name)
                               : std::string(s.name),
                      "` | ", slotKindName(s.kind), s.result ? " (result)" : "",
                      " | ", absl::StrJoin(when, "; "), " | ", s.description,
                      " |\n");
    }
  }
  return out;
}

} // namespace artifact
} // namespace csa

//===- CostAnalysis.cpp - What a csa model graph costs --------------------===//
#include "passes/CostAnalysis.h"

#include "dialects/csa/CsaDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

using namespace mlir;

namespace csa {

std::vector<int64_t> defaultReportContexts() {
  return {4096, 32768, 131072, 1048576};
}

std::vector<int64_t> prefillReportLengths(ArrayRef<int64_t> contexts) {
  std::vector<int64_t> lengths;
  for (int64_t c : contexts)
    if (c >= 1 && c <= 131072)
      lengths.push_back(c);
  return lengths;
}

/// The schedule letter of a layer (docs/schedules.md).
static char scheduleLetter(AttentionOp op) {
  switch (op.getMode()) {
  case AttentionMode::Full:
    return op.getCandidatePoolAttr() ? 'C' : 'F';
  case AttentionMode::Reindex:
    return 'R';
  case AttentionMode::Reuse:
    return '.';
  case AttentionMode::SwaOnly:
    return 'W';
  }
  return '?';
}

static func::FuncOp pickFunction(Operation *module, StringRef name) {
  func::FuncOp chosen;
  module->walk([&](func::FuncOp fn) {
    if (chosen)
      return;
    if (!name.empty()) {
      if (fn.getSymName() == name)
        chosen = fn;
      return;
    }
    if (fn.getSymName() == "decode")
      chosen = fn;
  });
  if (chosen || !name.empty())
    return chosen;
  module->walk([&](func::FuncOp fn) {
    if (chosen)
      return;
    bool hasCsa = false;
    fn.walk([&](CostOpInterface) { hasCsa = true; });
    if (hasCsa)
      chosen = fn;
  });
  return chosen;
}

/// The layer an op of a model function belongs to: its `layer` attribute, or
/// the N of its weights' "layers.N." prefix; -1 for the embedding and head.
static int64_t layerOf(Operation *op) {
  if (auto layer = op->getAttrOfType<IntegerAttr>("layer"))
    return layer.getInt();
  for (const char *name : {"weights", "weight"})
    if (auto weights = op->getAttrOfType<StringAttr>(name)) {
      StringRef rest = weights.getValue();
      int64_t layer;
      if (rest.consume_front("layers.") && !rest.consumeInteger(10, layer))
        return layer;
    }
  return -1;
}

/// Sums each op's per-token FLOPs over the prompt rows it runs on: every row
/// (position p at context p + 1), or, for layers bounded replay cuts, the
/// last `tail`; the head runs on the last row only.
static void addPrefillCost(func::FuncOp prefill, ModelCost &cost,
                           ArrayRef<int64_t> lengths) {
  for (int64_t n : lengths) {
    PrefillCost p;
    p.tokens = n;
    prefill.walk([&](CostOpInterface op) {
      const int64_t layer = layerOf(op);
      const bool headOnly = isa<LmHeadOp>(op.getOperation());
      // An op whose FLOPs do not change with context needs one evaluation.
      const double first = op.getWeightedDecodeFlops(1);
      const bool flat = first == op.getWeightedDecodeFlops(1 << 20);
      auto rows = [&](int64_t from, int64_t to) { // positions [from, to)
        if (flat)
          return first * double(to - from);
        double sum = 0;
        for (int64_t q = from; q < to; ++q)
          sum += op.getWeightedDecodeFlops(q + 1);
        return sum;
      };
      const double all = headOnly ? rows(n - 1, n) : rows(0, n);
      p.weightedFlops += all;
      const bool cut = cost.replayStartLayer >= 0 && layer >= cost.replayStartLayer;
      p.weightedFlopsReplay +=
          cut && !headOnly ? rows(std::max<int64_t>(0, n - cost.replayTail), n) : all;
    });
    cost.prefill.push_back(p);
  }
}

llvm::Expected<ModelCost> analyzeCost(Operation *module,
                                      ArrayRef<int64_t> contexts,
                                      StringRef functionName,
                                      ArrayRef<int64_t> prefillLengths,
                                      ReplayChoice replay) {
  func::FuncOp fn = pickFunction(module, functionName);
  if (!fn)
    return llvm::createStringError(
        functionName.empty()
            ? std::string("no function with csa ops to analyse")
            : "no function named '" + functionName.str() + "'");

  ModelCost cost;
  cost.function = fn.getSymName().str();
  SmallVector<AttentionOp> layers;
  fn.walk([&](AttentionOp op) { layers.push_back(op); });
  llvm::sort(layers, [](AttentionOp a, AttentionOp b) {
    return a.getLayerAttr().getInt() < b.getLayerAttr().getInt();
  });

  for (AttentionOp op : layers) {
    cost.modeCounts[stringifyAttentionMode(op.getMode()).str()]++;
    cost.schedule.push_back(scheduleLetter(op));
    SwaRingType ring = op.getSwaRingType();
    cost.swaLayers++;
    cost.swaBytesPerSequence += ring.getBytes();
    if (!op.ownsGlobalCache())
      continue;
    GlobalCacheType cache = op.getGlobalCacheType();
    KvSourceCost source;
    source.layer = op.getLayerAttr().getInt();
    source.ratio = cache.getRatio();
    source.mainRowBytes = cache.getMainRow().getBytes();
    source.indexRowBytes = cache.getIndexRow().getBytes();
    source.entryBytes = cache.getEntryBytes();
    source.entriesPerToken = 1.0 / double(cache.getRatio());
    source.bytesPerToken = cache.getBytesPerToken();
    cost.kvSources.push_back(source);
    cost.globalKvBytesPerToken += source.bytesPerToken;
    cost.globalEntriesPerToken += source.entriesPerToken;
    if (cache.getRatio() > 1) {
      cost.compressorLayers++;
      cost.compressorBytesPerSequence +=
          CompressorStateType::get(op.getContext(), cache.getRatio(),
                                   cache.getMainRow().getDim())
              .getBytes();
    }
  }

  fn.walk([&](CostOpInterface op) {
    int64_t params = op.getParameterCount();
    cost.parameters += params;
    cost.activeParameters += op.getActiveParameterCount();
    if (params)
      cost.parametersByOp[op->getName().stripDialect().str()] += params;
  });

  for (int64_t context : contexts) {
    DecodeCost d;
    d.context = context;
    fn.walk([&](CostOpInterface op) {
      d.weightedFlops += op.getWeightedDecodeFlops(context);
    });
    for (AttentionOp op : layers) {
      AttentionConfigAttr c = op.getConfig();
      int64_t scored = op.getScoredRows(context);
      d.indexerRows += scored;
      d.indexerBytes += scored * c.getIndexRow().getBytes();
      int64_t window = std::min<int64_t>(c.getWindow(), context);
      int64_t selected = op.getAttendedRows(context) - window;
      d.attentionRows += window + selected;
      d.attentionBytes += window * c.getSwaRow().getBytes() +
                          selected * c.getMainRow().getBytes();
    }
    for (const KvSourceCost &s : cost.kvSources)
      d.globalKvBytes += double(context / s.ratio) * s.entryBytes;
    cost.decode.push_back(d);
  }

  // Bounded replay's defaults (csa-bounded-replay): from the layer after the
  // last KV source, on the window's worth of tokens; not when an Engram
  // layer comes at or after that start.
  int64_t lastSource = -1;
  for (AttentionOp op : layers)
    if (op.ownsGlobalCache())
      lastSource = std::max<int64_t>(lastSource, op.getLayerAttr().getInt());
  cost.replayCompiled = replay.enabled;
  if (!layers.empty()) {
    cost.replayStartLayer = replay.startLayer >= 0 ? replay.startLayer : lastSource + 1;
    cost.replayTail = replay.tail >= 0 ? replay.tail : layers.front().getConfig().getWindow();
    if (cost.replayStartLayer >= int64_t(layers.size())) {
      cost.replayNote = "the last layer is a KV source";
      cost.replayStartLayer = -1;
    }
    fn.walk([&](EngramOp op) {
      const int64_t layer = layerOf(op);
      if (cost.replayStartLayer >= 0 && layer >= cost.replayStartLayer) {
        cost.replayNote = llvm::formatv("layer {0} has Engram", layer).str();
        cost.replayStartLayer = -1;
      }
    });
  }
  func::FuncOp prefill = pickFunction(module, "prefill");
  if (prefill && !prefillLengths.empty()) {
    for (int64_t n : prefillLengths)
      if (n < 1 || n > (int64_t(1) << 20))
        return llvm::createStringError(
            llvm::formatv("prefill lengths are 1 to 2^20 tokens, got {0}", n).str());
    addPrefillCost(prefill, cost, prefillLengths);
  }
  return cost;
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

/// 1234567 -> "1.23 M", with binary-free SI prefixes for counts.
static std::string human(double v) {
  const char *units[] = {"", " K", " M", " G", " T", " P"};
  int i = 0;
  while (std::abs(v) >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  return llvm::formatv("{0:F2}{1}", v, units[i]).str();
}

static std::string contextName(int64_t context) {
  if (context % (1 << 20) == 0)
    return std::to_string(context >> 20) + "M";
  if (context % 1024 == 0)
    return std::to_string(context >> 10) + "K";
  return std::to_string(context);
}

void printCostText(const ModelCost &cost, llvm::raw_ostream &os) {
  os << "schedule   " << cost.schedule << "\n";
  os << "layers     " << cost.schedule.size() << ":";
  bool first = true;
  for (auto &[mode, n] : cost.modeCounts) {
    os << (first ? " " : ", ") << n << " " << mode;
    first = false;
  }
  os << "\n\nGlobal KV cache (grows with context; Reuse and Reindex layers "
        "store nothing global)\n";
  os << llvm::formatv("  {0,-6} {1,-6} {2,-9} {3,-10} {4,-8} {5,-14} {6}\n",
                      "layer", "ratio", "main row", "index row", "entry",
                      "entries/token", "bytes/token");
  for (const KvSourceCost &s : cost.kvSources)
    os << llvm::formatv(
        "  {0,-6} {1,-6} {2,-9} {3,-10} {4,-8} {5,-14} {6}\n", s.layer,
        s.ratio, std::to_string(s.mainRowBytes) + " B",
        std::to_string(s.indexRowBytes) + " B",
        std::to_string(s.entryBytes) + " B",
        llvm::formatv("1/{0}", s.ratio).str(),
        llvm::formatv("{0}", s.bytesPerToken).str());
  os << llvm::formatv("  total: {0} entries/token -> {1} B/token\n",
                      cost.globalEntriesPerToken, cost.globalKvBytesPerToken);
  os << "\nPer sequence, constant in context\n";
  if (!cost.decode.empty() || cost.swaLayers) {
    os << llvm::formatv("  SWA rings:          {0} layers, {1} B\n",
                        cost.swaLayers, cost.swaBytesPerSequence);
    os << llvm::formatv("  compressor state:   {0} layers, {1} B\n",
                        cost.compressorLayers,
                        cost.compressorBytesPerSequence);
  }
  os << llvm::formatv("Persistent bytes per token: {0} B (global KV only; "
                      "top-k sets and candidate pools are per step)\n",
                      cost.globalKvBytesPerToken);

  os << "\nParameters: " << human(cost.parameters) << " total ("
     << cost.parameters << "), " << human(cost.activeParameters)
     << " read per decode token (" << cost.activeParameters << ")\n";
  for (auto &[op, n] : cost.parametersByOp)
    os << llvm::formatv("  {0,-12} {1,10} ({2})\n", op, human(n), n);

  if (cost.decode.empty())
    return;
  os << "\nDecode, per token (function @" << cost.function << ")\n";
  os << llvm::formatv("  {0,-28}", "context");
  for (const DecodeCost &d : cost.decode)
    os << llvm::formatv("{0,14}", contextName(d.context));
  os << "\n";
  auto row = [&](StringRef name, auto get) {
    os << llvm::formatv("  {0,-28}", name);
    for (const DecodeCost &d : cost.decode)
      os << llvm::formatv("{0,14}", get(d));
    os << "\n";
  };
  row("index-key rows scored", [](const DecodeCost &d) { return d.indexerRows; });
  row("index-key bytes read",
      [](const DecodeCost &d) { return human(d.indexerBytes) + "B"; });
  row("attention rows gathered",
      [](const DecodeCost &d) { return d.attentionRows; });
  row("attention bytes read",
      [](const DecodeCost &d) { return human(d.attentionBytes) + "B"; });
  row("weighted FLOPs",
      [](const DecodeCost &d) { return human(d.weightedFlops); });
  row("global KV held (1 seq)",
      [](const DecodeCost &d) { return human(d.globalKvBytes) + "B"; });

  if (cost.prefill.empty())
    return;
  os << "\nPrefill, per prompt (function @prefill; each op's per-token FLOPs summed over its rows)\n";
  os << llvm::formatv("  {0,-28}", "prompt tokens");
  for (const PrefillCost &p : cost.prefill)
    os << llvm::formatv("{0,14}", contextName(p.tokens));
  os << "\n";
  auto prow = [&](StringRef name, auto get) {
    os << llvm::formatv("  {0,-28}", name);
    for (const PrefillCost &p : cost.prefill)
      os << llvm::formatv("{0,14}", get(p));
    os << "\n";
  };
  prow("weighted FLOPs, every layer", [](const PrefillCost &p) { return human(p.weightedFlops); });
  if (cost.replayStartLayer >= 0) {
    prow(llvm::formatv("  bounded replay ({0}+, {1})", cost.replayStartLayer, cost.replayTail).str(),
         [](const PrefillCost &p) { return human(p.weightedFlopsReplay); });
    prow("  replay saves", [](const PrefillCost &p) {
      return llvm::formatv("{0:F1}%", 100.0 * (1.0 - p.weightedFlopsReplay /
                                                         std::max(p.weightedFlops, 1.0)))
          .str();
    });
    os << "  this build: " << (cost.replayCompiled ? "bounded replay" : "every layer (no bounded replay)")
       << "\n";
  } else {
    os << "  bounded replay: none (" << cost.replayNote << ")\n";
  }
}

void printCostJson(const ModelCost &cost, llvm::raw_ostream &os) {
  llvm::json::Array sources;
  for (const KvSourceCost &s : cost.kvSources)
    sources.push_back(llvm::json::Object{
        {"layer", s.layer},
        {"ratio", s.ratio},
        {"main_row_bytes", s.mainRowBytes},
        {"index_row_bytes", s.indexRowBytes},
        {"entry_bytes", s.entryBytes},
        {"entries_per_token", s.entriesPerToken},
        {"bytes_per_token", s.bytesPerToken}});
  llvm::json::Object modes, params;
  for (auto &[mode, n] : cost.modeCounts)
    modes[mode] = n;
  for (auto &[op, n] : cost.parametersByOp)
    params[op] = n;
  llvm::json::Array decode;
  for (const DecodeCost &d : cost.decode)
    decode.push_back(llvm::json::Object{
        {"context", d.context},
        {"indexer_rows", d.indexerRows},
        {"indexer_bytes", d.indexerBytes},
        {"attention_rows", d.attentionRows},
        {"attention_bytes", d.attentionBytes},
        {"weighted_flops", d.weightedFlops},
        {"global_kv_bytes", d.globalKvBytes}});
  llvm::json::Object root{
      {"function", cost.function},
      {"schedule", cost.schedule},
      {"layers", int64_t(cost.schedule.size())},
      {"modes", std::move(modes)},
      {"global_kv",
       llvm::json::Object{{"bytes_per_token", cost.globalKvBytesPerToken},
                          {"entries_per_token", cost.globalEntriesPerToken},
                          {"sources", std::move(sources)}}},
      {"swa", llvm::json::Object{{"layers", cost.swaLayers},
                                 {"bytes_per_sequence",
                                  cost.swaBytesPerSequence}}},
      {"compressor_state",
       llvm::json::Object{{"layers", cost.compressorLayers},
                          {"bytes_per_sequence",
                           cost.compressorBytesPerSequence}}},
      {"persistent_bytes_per_token", cost.globalKvBytesPerToken},
      {"parameters", llvm::json::Object{{"total", cost.parameters},
                                        {"active_decode",
                                         cost.activeParameters},
                                        {"by_op", std::move(params)}}},
      {"decode", std::move(decode)},
  };
  llvm::json::Array prefill;
  for (const PrefillCost &p : cost.prefill)
    prefill.push_back(llvm::json::Object{{"tokens", p.tokens},
                                         {"weighted_flops", p.weightedFlops},
                                         {"weighted_flops_bounded_replay",
                                          p.weightedFlopsReplay}});
  root["prefill"] = std::move(prefill);
  root["bounded_replay"] =
      cost.replayStartLayer >= 0
          ? llvm::json::Value(llvm::json::Object{{"start_layer", cost.replayStartLayer},
                                                 {"tail", cost.replayTail},
                                                 {"compiled", cost.replayCompiled}})
          : llvm::json::Value(nullptr);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

} // namespace csa

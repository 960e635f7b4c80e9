//===- HostPlan.cpp - The expanded graph as a plan of host kernel calls ---===//
#include "codegen/host/HostPlan.h"

#include "dialects/csa/CsaDialect.h"
#include "runtime/artifact/OpAbi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <optional>

using namespace mlir;
using nlohmann::json;

namespace csa::codegen {

namespace {

using artifact::KernelArg;
using artifact::KernelCall;

int64_t lastDim(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  return type.getDimSize(type.getRank() - 1);
}

std::string withSuffix(StringRef name, StringRef suffix) {
  return name.ends_with(suffix) ? name.str() : (name + suffix).str();
}

/// One function (@prefill or @decode) into its list of steps.
class FunctionPlanner {
public:
  FunctionPlanner(artifact::Plan &plan, const KernelSelection &selection,
                  const HostPlanOptions &options, func::FuncOp fn)
      : plan(plan), selection(selection), options(options), fn(fn),
        prefix(fn.getSymName().str()) {}

  llvm::Expected<std::vector<KernelCall>> run() {
    // Inputs: the token ids (both functions) and, in @decode, the position.
    if (fn.getNumArguments() < 1)
      return error(fn, "takes no token ids");
    bindings[fn.getArgument(0)] = KernelArg::input("tokens");
    tokens = fn.getArgument(0);
    if (fn.getNumArguments() > 1)
      position = fn.getArgument(1);
    // The returned value is the entry point's output.
    fn.walk([&](func::ReturnOp ret) {
      if (ret.getNumOperands() == 1)
        logits = ret.getOperand(0);
    });
    if (!logits)
      return error(fn, "must return exactly the logits");

    // Each step inside a block (from a csa.hc_mix to its csa.hc_update)
    // records the block and its layer, from the mix's weights
    // ("layers.3.hc_ffn": block "layers.3.ffn", layer 3), so that a run's
    // dumps can be limited to layers (csa-run --dump-layers).
    std::string block;
    int64_t layer = -1;
    for (Operation &op : fn.getBody().front()) {
      if (auto mix = dyn_cast<HcMixOp>(&op)) {
        StringRef w = mix.getWeights();
        auto [head, part] = w.rsplit(".hc_");
        StringRef number = head.starts_with("layers.") ? head.drop_front(7) : StringRef();
        block = part.empty() ? w.str() : (head + "." + part).str();
        if (number.getAsInteger(10, layer))
          layer = -1;
      }
      const size_t before = calls.size();
      if (llvm::Error e = planOp(&op))
        return std::move(e);
      for (size_t i = before; i < calls.size() && !block.empty(); ++i) {
        calls[i].attrs["block"] = block;
        if (layer >= 0)
          calls[i].attrs["layer"] = layer;
      }
      if (isa<HcUpdateOp>(op)) {
        block.clear();
        layer = -1;
      }
    }
    return std::move(calls);
  }

private:
  llvm::Error error(Operation *op, const Twine &what) {
    std::string loc;
    llvm::raw_string_ostream os(loc);
    op->getLoc().print(os);
    return llvm::createStringError(
        llvm::formatv("@{0}: '{1}' at {2}: {3}", prefix,
                      op->getName().getStringRef(), loc, what.str())
            .str());
  }

  /// The writer and the op ABI table disagree: a bug of the compiler, not
  /// of the input.
  llvm::Error internal(Operation *op, const Twine &what) {
    return error(op, "internal error: the plan writer and the op ABI "
                     "(runtime/artifact/OpAbi.cpp) disagree: " +
                         what);
  }

  // --- Bindings -----------------------------------------------------------

  /// The dtype and shape of a tensor-like value as a transient holds it.
  llvm::Error describe(Operation *op, Value v, artifact::TransientBuffer &t) {
    Type type = v.getType();
    if (auto topk = dyn_cast<TopKType>(type)) {
      t.dtype = "i32";
      t.shape = {-1, topk.getK()};
      return llvm::Error::success();
    }
    if (isa<CandidatePoolType>(type)) {
      t.dtype = "i8";
      t.shape = {-1, -1};
      return llvm::Error::success();
    }
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor)
      return error(op, "produces a value of an unsupported type");
    for (int64_t d : tensor.getShape())
      t.shape.push_back(ShapedType::isDynamic(d) ? -1 : d);
    Type element = tensor.getElementType();
    if (auto row = dyn_cast<CacheRowTypeInterface>(element)) {
      t.dtype = "i8";
      t.shape.push_back(row.getBytes());
    } else if (element.isBF16()) {
      t.dtype = "bf16";
    } else if (element.isF32()) {
      t.dtype = "f32";
    } else if (element.isInteger(32)) {
      t.dtype = "i32";
    } else if (element.isInteger(64)) {
      t.dtype = "i64";
    } else {
      return error(op, "produces a tensor of an unsupported element type");
    }
    return llvm::Error::success();
  }

  /// Binds a result to a fresh transient (or to the logits output).
  llvm::Expected<KernelArg> result(Operation *op, Value v) {
    if (v == logits) {
      bindings[v] = KernelArg::output("logits");
      return KernelArg::output("logits");
    }
    artifact::TransientBuffer t;
    t.id = llvm::formatv("{0}.v{1}", prefix, counter++).str();
    if (llvm::Error e = describe(op, v, t))
      return std::move(e);
    int64_t bytes = t.elementBytes();
    for (int64_t d : t.shape)
      bytes *= d < 0 ? plan.maxContext : d;
    t.bytes = std::max<int64_t>(bytes, 1);
    plan.transients.push_back(t);
    bindings[v] = KernelArg::transient(t.id);
    return KernelArg::transient(t.id);
  }

  llvm::Expected<KernelArg> operand(Operation *op, Value v) {
    auto it = bindings.find(v);
    if (it != bindings.end())
      return KernelArg(it->second);
    if (v.getType().isIndex()) {
      auto expr = indexExpr(op, v);
      if (!expr)
        return expr.takeError();
      return KernelArg::index(*expr);
    }
    return error(op, "an operand comes from an op the plan cannot express");
  }

  /// The integer expression of an index value (positions, row counts).
  llvm::Expected<json> indexExpr(Operation *user, Value v) {
    if (v == position)
      return json("position");
    Operation *def = v.getDefiningOp();
    if (!def)
      return error(user, "an index operand is not the position or computed "
                         "from it");
    if (auto c = dyn_cast<arith::ConstantIndexOp>(def))
      return json(c.value());
    if (auto dim = dyn_cast<tensor::DimOp>(def)) {
      auto index = dim.getConstantIndex();
      if (!index || *index != 0)
        return error(def, "only the row count (dimension 0) is supported");
      if (dim.getSource() == tokens)
        return json("num_tokens");
      auto it = bindings.find(dim.getSource());
      if (it == bindings.end() || it->second.kind != artifact::ArgKind::Transient)
        return error(def, "the row count of a value that is not a transient");
      return json::array({"rows", it->second.name});
    }
    const char *name = nullptr;
    if (isa<arith::AddIOp>(def))
      name = "add";
    else if (isa<arith::SubIOp>(def))
      name = "sub";
    else if (isa<arith::MulIOp>(def))
      name = "mul";
    else if (isa<arith::DivUIOp, arith::DivSIOp, arith::FloorDivSIOp>(def))
      name = "div";
    else if (isa<arith::MinSIOp, arith::MinUIOp>(def))
      name = "min";
    else if (isa<arith::MaxSIOp, arith::MaxUIOp>(def))
      name = "max";
    if (!name || def->getNumOperands() != 2)
      return error(def, "index arithmetic the plan cannot express");
    auto lhs = indexExpr(def, def->getOperand(0));
    if (!lhs)
      return lhs.takeError();
    auto rhs = indexExpr(def, def->getOperand(1));
    if (!rhs)
      return rhs.takeError();
    return json::array({name, *lhs, *rhs});
  }

  // --- Steps --------------------------------------------------------------

  /// A step calling the op's kernels; `main` is the role named as `kernel`.
  llvm::Expected<KernelCall> step(Operation *op, StringRef main) {
    KernelCall call;
    call.object = options.object;
    call.attrs = json::object();
    call.attrs["op"] = op->getName().getStringRef().str();
    auto found = selection.opKernels.find(op);
    if (found == selection.opKernels.end())
      return error(op, "has no selected host kernel");
    json kernels = json::object();
    for (auto &[role, name] : found->second)
      kernels[role] = "_mlir_ciface_" + name;
    auto mainKernel = found->second.find(main.str());
    if (mainKernel == found->second.end())
      return error(op, "has no '" + main + "' kernel");
    call.kernel = "_mlir_ciface_" + mainKernel->second;
    call.attrs["kernels"] = std::move(kernels);
    return call;
  }

  llvm::Error add(KernelCall call) {
    calls.push_back(std::move(call));
    return llvm::Error::success();
  }

  // The arguments of the step being planned are bound by slot name, in any
  // order, and laid out by the op's ABI (runtime/artifact/OpAbi.h) once its
  // attrs are set: the executor reads the step by the same table.
  struct SlotArg {
    std::string slot;
    int64_t instance; ///< the repeat of a repeated slot (csa.moe's experts)
    KernelArg arg;
  };

  /// Binds operand `v` to `slot`.
  llvm::Error bind(Operation *op, StringRef slot, Value v, int64_t instance = -1) {
    auto arg = operand(op, v);
    if (!arg)
      return arg.takeError();
    slotArgs.push_back({slot.str(), instance, *arg});
    return llvm::Error::success();
  }
  llvm::Error bind(Operation *op,
                   std::initializer_list<std::pair<StringRef, Value>> slots) {
    for (auto &[slot, v] : slots)
      if (llvm::Error e = bind(op, slot, v))
        return e;
    return llvm::Error::success();
  }
  /// Binds the results of `op`, in order, to fresh transients (or the
  /// logits output) in `slots`.
  llvm::Error bindResults(Operation *op, ArrayRef<StringRef> slots) {
    if (slots.size() != op->getNumResults())
      return internal(op, llvm::formatv("the op has {0} results, the plan "
                                        "writer binds {1}",
                                        op->getNumResults(), slots.size()));
    for (auto [slot, v] : llvm::zip_equal(slots, op->getResults())) {
      auto arg = result(op, v);
      if (!arg)
        return arg.takeError();
      slotArgs.push_back({slot.str(), -1, *arg});
    }
    return llvm::Error::success();
  }
  void weight(StringRef slot, const std::string &name, int64_t instance = -1) {
    slotArgs.push_back({slot.str(), instance, KernelArg::weight(name)});
  }
  /// Whether weights of `format` have a scale tensor, as the op ABI says.
  llvm::Expected<bool> hasScales(Operation *op, WeightFormat format) {
    StringRef name = stringifyWeightFormat(format);
    std::optional<bool> scaled = artifact::weightFormatHasScales(name.str());
    if (!scaled)
      return internal(op, "weight format '" + name + "' is not in its list");
    return *scaled;
  }
  /// A linear layer's weight `<name>.weight` in slot `<layer>weight`, and
  /// its scale `<name>.scale` in slot `<layer>scale` when the format has one.
  llvm::Error linearWeights(Operation *op, StringRef layer,
                            const std::string &name, WeightFormat format,
                            int64_t instance = -1) {
    auto scaled = hasScales(op, format);
    if (!scaled)
      return scaled.takeError();
    weight((layer + "weight").str(), name + ".weight", instance);
    if (*scaled)
      weight((layer + "scale").str(), name + ".scale", instance);
    return llvm::Error::success();
  }

  /// Lays the bound slots out as `call.attrs` describe the op: every slot
  /// of the layout bound once, with an argument of its kind.
  llvm::Error layOut(Operation *op, KernelCall &call) {
    const std::string name = call.attrs["op"].get<std::string>();
    auto layout = artifact::argLayout(name, call.attrs);
    if (!layout.ok())
      return internal(op, "its attrs give no argument layout: " +
                              std::string(layout.status().message()));
    std::vector<std::optional<KernelArg>> args(layout->size());
    for (SlotArg &bound : slotArgs) {
      std::string label = bound.slot;
      if (bound.instance >= 0)
        label += llvm::formatv(" (repeat {0})", bound.instance).str();
      std::optional<size_t> at = layout->find(bound.slot, bound.instance);
      if (!at)
        return internal(op, "it binds '" + label + "', which " + name +
                                " (" + layout->signature() +
                                ") does not have with these attrs");
      if (args[*at])
        return internal(op, "it binds '" + label + "' twice");
      std::string problem = artifact::checkArg(*layout, *at, bound.arg);
      if (!problem.empty())
        return internal(op, problem);
      args[*at] = std::move(bound.arg);
    }
    slotArgs.clear();
    call.args.clear();
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i])
        return internal(op, "it binds nothing to args[" + Twine(i) + "] (" +
                                layout->slots()[i].label() + ")");
      call.args.push_back(std::move(*args[i]));
    }
    return llvm::Error::success();
  }

  llvm::Error cacheAlloc(CacheAllocOp op) {
    const int64_t layer = op.getLayer();
    artifact::CacheBuffer cache;
    cache.layer = layer;
    Type type = op.getCache().getType();
    if (auto ring = dyn_cast<SwaRingType>(type)) {
      cache.kind = artifact::CacheKind::SwaRing;
      cache.id = llvm::formatv("L{0}.swa", layer).str();
      cache.window = ring.getWindow();
      cache.rowBytes = ring.getRow().getBytes();
      cache.fixedBytes = cache.window * cache.rowBytes;
    } else if (auto global = dyn_cast<GlobalCacheType>(type)) {
      cache.kind = artifact::CacheKind::GlobalCache;
      cache.id = llvm::formatv("L{0}.global", layer).str();
      cache.ratio = global.getRatio();
      cache.mainRowBytes = global.getMainRow().getBytes();
      if (auto v4 = dyn_cast<Fp8NopeRowType>(global.getMainRow()))
        cache.mainRowRope = v4.getRope();
      cache.indexRowFp8 = isa<Fp8RowType>(global.getIndexRow());
      cache.indexRowBytes = global.getIndexRow().getBytes();
      cache.entryBytes = cache.mainRowBytes + cache.indexRowBytes;
    } else if (auto state = dyn_cast<CompressorStateType>(type)) {
      cache.kind = artifact::CacheKind::CompressorState;
      cache.id = llvm::formatv("L{0}.compressor", layer).str();
      cache.ratio = state.getRatio();
      cache.fixedBytes = state.getBytes();
    } else {
      return error(op, "allocates a cache kind the plan does not know");
    }
    // @prefill and @decode allocate the same per-sequence storage.
    if (const artifact::CacheBuffer *existing = plan.findCache(cache.id)) {
      if (existing->entryBytes != cache.entryBytes ||
          existing->fixedBytes != cache.fixedBytes ||
          existing->window != cache.window ||
          existing->rowBytes != cache.rowBytes ||
          existing->ratio != cache.ratio ||
          existing->mainRowBytes != cache.mainRowBytes)
        return error(op, "allocates '" + cache.id +
                             "' with a different format than the other entry "
                             "point");
    } else {
      plan.caches.push_back(cache);
    }
    bindings[op.getCache()] = KernelArg::cache(cache.id);
    return llvm::Error::success();
  }

  llvm::Error planOp(Operation *op) {
    if (auto alloc = dyn_cast<CacheAllocOp>(op))
      return cacheAlloc(alloc);
    // Index arithmetic and row counts become expressions where used.
    if (isa<arith::ConstantOp, arith::AddIOp, arith::SubIOp, arith::MulIOp,
            arith::DivUIOp, arith::DivSIOp, arith::FloorDivSIOp, arith::MinSIOp,
            arith::MinUIOp, arith::MaxSIOp, arith::MaxUIOp, tensor::DimOp,
            func::ReturnOp>(op))
      return llvm::Error::success();
    if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op)) {
      // A reshape shares its operand's transient, whose rows are dimension 0:
      // only reshapes that keep dimension 0 by itself can.
      auto reassociation =
          isa<tensor::ExpandShapeOp>(op)
              ? cast<tensor::ExpandShapeOp>(op).getReassociationIndices()
              : cast<tensor::CollapseShapeOp>(op).getReassociationIndices();
      if (reassociation.empty() || reassociation[0].size() != 1)
        return error(op, "only reshapes that keep the rows (dimension 0) are "
                         "supported");
      auto it = bindings.find(op->getOperand(0));
      if (it == bindings.end())
        return error(op, "reshapes a value the plan does not hold");
      KernelArg same = it->second; // same bytes, new shape
      bindings[op->getResult(0)] = same;
      return llvm::Error::success();
    }
    if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op))
      return extractSlice(slice);

    StringRef main = "main";
    if (isa<CompressOp, EngramOp>(op))
      main = isa<CompressOp>(op) ? "linear" : "hash";
    if (isa<MoeOp>(op))
      main = "route";
    if (isa<HsiSelectOp>(op))
      main = "expand";
    auto made = step(op, main);
    if (!made)
      return made.takeError();
    KernelCall call = std::move(*made);
    json &attrs = call.attrs;

    // The result slots, in the op's result order.
    SmallVector<StringRef, 3> results = {"result"};
    if (auto embed = dyn_cast<EmbedOp>(op)) {
      if (llvm::Error e = bind(op, "tokens", embed.getTokens()))
        return e;
      weight("weight", embed.getWeight().str());
      attrs["vocab"] = embed.getVocab();
      attrs["dim"] = lastDim(embed.getResult());
    } else if (auto x = dyn_cast<HcExpandOp>(op)) {
      if (llvm::Error e = bind(op, "input", x.getInput()))
        return e;
      auto type = cast<RankedTensorType>(x.getResult().getType());
      attrs["hc"] = type.getDimSize(1);
      attrs["dim"] = type.getDimSize(2);
    } else if (auto mix = dyn_cast<HcMixOp>(op)) {
      if (llvm::Error e = bind(op, "streams", mix.getStreams()))
        return e;
      std::string w = mix.getWeights().str();
      weight("fn", w + "_fn");
      weight("base", w + "_base");
      weight("scale", w + "_scale");
      results = {"pre", "post", "comb"};
      auto type = cast<RankedTensorType>(mix.getStreams().getType());
      attrs["hc"] = type.getDimSize(1);
      attrs["dim"] = type.getDimSize(2);
    } else if (auto collapse = dyn_cast<HcCollapseOp>(op)) {
      if (llvm::Error e = bind(op, {{"streams", collapse.getStreams()},
                                    {"pre", collapse.getPre()}}))
        return e;
      auto type = cast<RankedTensorType>(collapse.getStreams().getType());
      attrs["hc"] = type.getDimSize(1);
      attrs["dim"] = type.getDimSize(2);
    } else if (auto update = dyn_cast<HcUpdateOp>(op)) {
      if (llvm::Error e = bind(op, {{"streams", update.getStreams()},
                                    {"update", update.getUpdate()},
                                    {"post", update.getPost()},
                                    {"comb", update.getComb()}}))
        return e;
      auto type = cast<RankedTensorType>(update.getStreams().getType());
      attrs["hc"] = type.getDimSize(1);
      attrs["dim"] = type.getDimSize(2);
    } else if (auto norm = dyn_cast<RmsNormOp>(op)) {
      if (llvm::Error e = bind(op, "input", norm.getInput()))
        return e;
      weight("weight", withSuffix(norm.getWeight(), ".weight"));
      attrs["dim"] = lastDim(norm.getInput());
    } else if (auto linear = dyn_cast<LinearOp>(op)) {
      if (llvm::Error e = bind(op, "input", linear.getInput()))
        return e;
      if (llvm::Error e = linearWeights(op, "", linear.getWeight().str(),
                                        linear.getFormat()))
        return e;
      attrs["in"] = lastDim(linear.getInput());
      attrs["out"] = lastDim(linear.getResult());
      attrs["format"] = stringifyWeightFormat(linear.getFormat()).str();
    } else if (auto rope = dyn_cast<RopeOp>(op)) {
      if (llvm::Error e = bind(op, {{"input", rope.getInput()},
                                    {"position", rope.getPosition()}}))
        return e;
      auto type = cast<RankedTensorType>(rope.getInput().getType());
      attrs["stride"] = rope.getStride();
      attrs["rows_per_position"] =
          type.getRank() == 3 ? type.getDimSize(1) : int64_t(1);
      attrs["dim"] = lastDim(rope.getInput());
    } else if (auto quantize = dyn_cast<QuantizeOp>(op)) {
      if (llvm::Error e = bind(op, "input", quantize.getInput()))
        return e;
      attrs["dim"] = lastDim(quantize.getInput());
    } else if (auto append = dyn_cast<CacheAppendOp>(op)) {
      if (llvm::Error e = bind(op, {{"rows", append.getRows()},
                                    {"cache", append.getCache()},
                                    {"position", append.getPosition()}}))
        return e;
      results = {};
      Type row = append.getRows().getType().getElementType();
      std::string part = "ring";
      if (auto global = dyn_cast<GlobalCacheType>(append.getCache().getType()))
        part = row == global.getMainRow() ? "main" : "index";
      attrs["part"] = part;
    } else if (auto compress = dyn_cast<CompressOp>(op)) {
      if (llvm::Error e = bind(op, {{"input", compress.getInput()},
                                    {"position", compress.getPosition()}}))
        return e;
      if (compress.getState())
        if (llvm::Error e = bind(op, "state", compress.getState()))
          return e;
      std::string w = compress.getWeights().str();
      weight("wkv.weight", w + ".wkv.weight");
      if (compress.getRatio() > 1)
        weight("wgate.weight", w + ".wgate.weight");
      weight("norm.weight", w + ".norm.weight");
      attrs["ratio"] = compress.getRatio();
      attrs["in"] = lastDim(compress.getInput());
      attrs["dim"] = lastDim(compress.getResult());
    } else if (auto score = dyn_cast<IndexScoreOp>(op)) {
      if (llvm::Error e = bind(op, {{"query", score.getQuery()},
                                    {"head_weights", score.getHeadWeights()},
                                    {"cache", score.getCache()}}))
        return e;
      // Release publication: the caches a decode step may read instead,
      // and which one by position residue.
      for (auto [i, published] : llvm::enumerate(score.getPublished()))
        if (llvm::Error e = bind(op, "published", published, int64_t(i)))
          return e;
      if (std::optional<ArrayRef<int64_t>> at = score.getPublishedAt()) {
        attrs["published"] = int64_t(score.getPublished().size());
        attrs["published_at"] = std::vector<int64_t>(at->begin(), at->end());
      }
      results = {"scores"};
      auto type = cast<RankedTensorType>(score.getQuery().getType());
      auto cache = cast<GlobalCacheType>(score.getCache().getType());
      attrs["heads"] = type.getDimSize(1);
      attrs["dim"] = type.getDimSize(2);
      attrs["ratio"] = cache.getRatio();
    } else if (auto hsi = dyn_cast<HsiSelectOp>(op)) {
      if (llvm::Error e = bind(op, "scores", hsi.getScores()))
        return e;
      results = {"pool"};
      auto source = hsi.getScores().getDefiningOp<IndexScoreOp>();
      if (!source)
        return error(op, "scores must come from csa.index_score");
      attrs["ratio"] = cast<GlobalCacheType>(source.getCache().getType()).getRatio();
      attrs["block_size"] = hsi.getResult().getType().getBlockSize();
    } else if (auto topk = dyn_cast<TopKOp>(op)) {
      if (llvm::Error e = bind(op, "scores", topk.getScores()))
        return e;
      if (topk.getPool())
        if (llvm::Error e = bind(op, "pool", topk.getPool()))
          return e;
      auto source = topk.getScores().getDefiningOp<IndexScoreOp>();
      if (!source)
        return error(op, "scores must come from csa.index_score");
      attrs["ratio"] = cast<GlobalCacheType>(source.getCache().getType()).getRatio();
      attrs["k"] = topk.getResult().getType().getK();
      attrs["masked"] = bool(topk.getPool());
    } else if (auto attention = dyn_cast<SparseAttentionOp>(op)) {
      if (llvm::Error e = bind(op, {{"query", attention.getQuery()},
                                    {"window", attention.getWindow()},
                                    {"fresh", attention.getFresh()},
                                    {"position", attention.getPosition()}}))
        return e;
      if (attention.getCache()) {
        if (llvm::Error e = bind(op, {{"cache", attention.getCache()},
                                      {"selected", attention.getSelected()}}))
          return e;
        attrs["ratio"] =
            cast<GlobalCacheType>(attention.getCache().getType()).getRatio();
      }
      weight("sink", attention.getSink().str());
      auto type = cast<RankedTensorType>(attention.getQuery().getType());
      attrs["heads"] = type.getDimSize(1);
      attrs["dim"] = type.getDimSize(2);
      attrs["window"] = attention.getWindow().getType().getWindow();
      attrs["scale"] = attention.getScale().convertToDouble();
      attrs["global"] = bool(attention.getCache());
    } else if (auto moe = dyn_cast<MoeOp>(op)) {
      if (llvm::Error e = bind(op, "input", moe.getInput()))
        return e;
      std::string w = moe.getWeights().str();
      weight("gate.weight", w + ".gate.weight");
      weight("gate.bias", w + ".gate.bias");
      for (int64_t e = 0; e < moe.getExperts(); ++e)
        for (const char *m : {"w1", "w2", "w3"})
          if (llvm::Error err = linearWeights(
                  op, (Twine(m) + ".").str(),
                  llvm::formatv("{0}.experts.{1}.{2}", w, e, m).str(),
                  moe.getExpertFormat(), e))
            return err;
      if (moe.getShared() != 1)
        return error(op, "the host plan supports exactly one shared expert");
      for (const char *m : {"w1", "w2", "w3"})
        if (llvm::Error e = linearWeights(
                op, ("shared." + Twine(m) + ".").str(),
                llvm::formatv("{0}.shared_experts.{1}", w, m).str(),
                moe.getSharedFormat()))
          return e;
      attrs["experts"] = moe.getExperts();
      attrs["top_k"] = moe.getTopK();
      attrs["inter"] = moe.getInter();
      attrs["dim"] = lastDim(moe.getInput());
      auto expertScales = hasScales(op, moe.getExpertFormat());
      if (!expertScales)
        return expertScales.takeError();
      auto sharedScales = hasScales(op, moe.getSharedFormat());
      if (!sharedScales)
        return sharedScales.takeError();
      attrs["expert_scales"] = *expertScales;
      attrs["shared_scales"] = *sharedScales;
    } else if (auto engram = dyn_cast<EngramOp>(op)) {
      if (llvm::Error e = bind(op, {{"streams", engram.getStreams()},
                                    {"tokens", engram.getTokens()},
                                    {"position", engram.getPosition()}}))
        return e;
      std::string w = engram.getWeights().str();
      weight("embed.weight", w + ".embed.weight");
      weight("embed.scale", w + ".embed.scale");
      if (llvm::Error e =
              linearWeights(op, "wkv.", w + ".wkv", WeightFormat::FP8Block32))
        return e;
      weight("q_weight", w + ".q_weight");
      weight("k_weight", w + ".k_weight");
      auto type = cast<RankedTensorType>(engram.getStreams().getType());
      attrs["hc"] = type.getDimSize(1);
      attrs["dim"] = type.getDimSize(2);
      attrs["max_ngram"] = engram.getMaxNgram();
      attrs["columns"] = (engram.getMaxNgram() - 1) * engram.getHeads();
      attrs["head_dim"] = engram.getHeadDim();
      attrs["table_rows"] = engram.getRows();
      attrs["compressed_vocab"] = engram.getCompressedVocab();
    } else if (auto fusion = dyn_cast<FusionOp>(op);
               fusion && fusion.getKind() == FusionKind::HcCollapseNorm) {
      // hc_collapse_norm: the streams and pre the collapse reads, the norm's
      // weight.
      auto norm = dyn_cast_or_null<RmsNormOp>(
          fusion.getBody().front().getTerminator()->getPrevNode());
      auto inputs = fusion.getInputs();
      if (!norm || inputs.size() != 2)
        return error(op, "a kernel region the host plan does not know");
      if (llvm::Error e = bind(op, {{"streams", inputs[0]}, {"pre", inputs[1]}}))
        return e;
      weight("weight", withSuffix(norm.getWeight(), ".weight"));
      attrs["name"] = stringifyFusionKind(fusion.getKind()).str();
      auto type = cast<RankedTensorType>(inputs[0].getType());
      attrs["hc"] = type.getDimSize(1);
      attrs["dim"] = type.getDimSize(2);
    } else if (auto fusion = dyn_cast<FusionOp>(op)) {
      // rope_quantize_store: its inputs are the x, RoPE position, store
      // position and cache the body reads.
      Block &body = fusion.getBody().front();
      auto rope = dyn_cast<RopeOp>(&body.front());
      auto append = fusion.getBody().front().getTerminator()->getPrevNode();
      auto store = dyn_cast_or_null<CacheAppendOp>(append);
      auto inputs = fusion.getInputs();
      if (!rope || !store || inputs.size() != 4)
        return error(op, "a kernel region the host plan does not know");
      if (llvm::Error e = bind(op, {{"input", inputs[0]},
                                    {"rope_position", inputs[1]},
                                    {"store_position", inputs[2]},
                                    {"cache", inputs[3]}}))
        return e;
      results = {"rows"};
      attrs["name"] = stringifyFusionKind(fusion.getKind()).str();
      attrs["dim"] = lastDim(rope.getInput());
      attrs["rope_stride"] = rope.getStride();
      Type row = store.getRows().getType().getElementType();
      std::string part = "ring";
      if (auto global = dyn_cast<GlobalCacheType>(store.getCache().getType()))
        part = row == global.getMainRow() ? "main" : "index";
      attrs["part"] = part;
    } else if (auto head = dyn_cast<LmHeadOp>(op)) {
      if (llvm::Error e = bind(op, "input", head.getInput()))
        return e;
      weight("weight", head.getWeight().str());
      attrs["vocab"] = head.getVocab();
      attrs["dim"] = lastDim(head.getInput());
      attrs["last_only"] = bool(head.getLastOnly());
    } else {
      return error(op, "has no host plan step");
    }
    if (llvm::Error e = bindResults(op, results))
      return e;
    if (llvm::Error e = layOut(op, call))
      return e;
    return add(std::move(call));
  }

  /// csa-bounded-replay's cut: rows [offset, offset + count) of a value.
  llvm::Error extractSlice(tensor::ExtractSliceOp slice) {
    auto type = cast<RankedTensorType>(slice.getSourceType());
    for (int64_t d = 1; d < type.getRank(); ++d) {
      auto offset = getConstantIntValue(slice.getMixedOffsets()[d]);
      auto size = getConstantIntValue(slice.getMixedSizes()[d]);
      if (!offset || *offset != 0 || !size || *size != type.getDimSize(d))
        return error(slice, "only slices of whole rows are supported");
    }
    for (OpFoldResult stride : slice.getMixedStrides())
      if (getConstantIntValue(stride) != 1)
        return error(slice, "only unit strides are supported");
    KernelCall call;
    call.kernel = "builtin.slice_rows";
    call.attrs = json{{"op", "tensor.extract_slice"}};
    if (llvm::Error e = bind(slice, "source", slice.getSource()))
      return e;
    using Bound = std::pair<StringRef, OpFoldResult>;
    for (auto [slot, ofr] : {Bound{"offset", slice.getMixedOffsets()[0]},
                             Bound{"size", slice.getMixedSizes()[0]}}) {
      if (auto c = getConstantIntValue(ofr)) {
        slotArgs.push_back({slot.str(), -1, KernelArg::index(json(*c))});
        continue;
      }
      auto expr = indexExpr(slice, cast<Value>(ofr));
      if (!expr)
        return expr.takeError();
      slotArgs.push_back({slot.str(), -1, KernelArg::index(*expr)});
    }
    if (llvm::Error e = bindResults(slice, {"result"}))
      return e;
    if (llvm::Error e = layOut(slice, call))
      return e;
    return add(std::move(call));
  }

  artifact::Plan &plan;
  const KernelSelection &selection;
  const HostPlanOptions &options;
  func::FuncOp fn;
  std::string prefix;
  Value tokens, position, logits;
  llvm::DenseMap<Value, KernelArg> bindings;
  std::vector<SlotArg> slotArgs; ///< of the step being planned
  std::vector<KernelCall> calls;
  int64_t counter = 0;
};

/// Ops whose steps may form a branch beside the steps after them, up to the
/// first that reads their results (overlaps_until): value ops with no cache,
/// no host work and no scratch of the executor's but mHC's mix's own. mHC's
/// mix is a chain of small latency-bound kernels whose results are read a
/// whole sub-layer later (by the Single-Pass shift a block's `pre` is the next
/// sub-layer's, `post` and `comb` are used at its end); an attention's query
/// path (its projections, norm and RoPE) is needed only by the attention,
/// after the key path, the compressor and the indexer.
constexpr std::string_view kBranchOps[] = {"csa.hc_mix", "csa.linear", "csa.rms_norm",
                                           "csa.rope"};

/// Marks branches: for each step of kBranchOps not in a branch yet whose
/// results' first reader is two or more steps on, the step and the steps of
/// kBranchOps right before it whose results only it (or they) read before
/// that reader, as long as artifact::checkOverlap allows it.
void markOverlaps(std::vector<KernelCall> &calls) {
  const size_t n = calls.size();
  std::vector<std::optional<artifact::StepValues>> values(n);
  for (size_t i = 0; i < n; ++i)
    if (auto v = artifact::stepValues(calls[i]); v.ok() && !artifact::isBuiltinKernel(calls[i].kernel))
      values[i] = std::move(*v);
  auto branchable = [&](size_t i) {
    const std::string op = calls[i].attrs.value("op", std::string());
    return values[i] && calls[i].overlapsUntil < 0 &&
           std::find(std::begin(kBranchOps), std::end(kBranchOps), op) != std::end(kBranchOps);
  };
  // The first step after `from` that reads what step `i` writes (n: none).
  auto firstReader = [&](size_t i, size_t from) {
    for (size_t j = from + 1; j < n; ++j)
      if (!values[j] || values[j]->reads(*values[i]))
        return j;
    return n;
  };
  for (size_t last = 0; last < n; ++last) {
    if (!branchable(last))
      continue;
    const size_t until = firstReader(last, last);
    if (until < last + 2)
      continue;
    size_t first = last;
    while (first > 0 && branchable(first - 1) && firstReader(first - 1, last) >= until)
      --first;
    for (size_t i = first; i <= last; ++i)
      calls[i].overlapsUntil = int64_t(until);
    if (artifact::checkOverlap(calls, first, "plan").ok())
      continue;
    for (size_t i = first; i < last; ++i) // the last step alone, else none
      calls[i].overlapsUntil = -1;
    if (!artifact::checkOverlap(calls, last, "plan").ok())
      calls[last].overlapsUntil = -1;
  }
}

} // namespace

llvm::Expected<artifact::Plan> buildHostPlan(ModuleOp graph,
                                             const KernelSelection &selection,
                                             const HostPlanOptions &options) {
  artifact::Plan plan;
  auto maxContext = graph->getAttrOfType<IntegerAttr>("csa.max_context");
  if (!maxContext || maxContext.getInt() < 1)
    return llvm::createStringError(
        "the module has no csa.max_context (the context the caches are "
        "planned for)");
  plan.maxContext = maxContext.getInt();
  for (const char *name : {"prefill", "decode"}) {
    auto fn = graph.lookupSymbol<func::FuncOp>(name);
    if (!fn)
      return llvm::createStringError(
          llvm::formatv("the module has no @{0} function", name).str());
    if (!fn.getBody().hasOneBlock())
      return llvm::createStringError(
          llvm::formatv("@{0} must be a single block", name).str());
    FunctionPlanner planner(plan, selection, options, fn);
    auto calls = planner.run();
    if (!calls)
      return calls.takeError();
    markOverlaps(*calls);
    (std::string_view(name) == "prefill" ? plan.prefill : plan.decode) =
        std::move(*calls);
  }
  return plan;
}

} // namespace csa::codegen

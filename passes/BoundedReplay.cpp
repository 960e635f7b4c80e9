//===- BoundedReplay.cpp - CED bounded replay of prefill --------------------===//
//
// Layers after the last KV source only feed the last tokens' logits and their
// own SWA windows, so in prefill they run on the last `tail` tokens. The cut
// is made on the values that cross into the first op of the start layer; the
// graph ops after it are shape-polymorphic in the token rows.
//
//===----------------------------------------------------------------------===//
#include "dialects/csa/CsaDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

#include "llvm/ADT/DenseMap.h"

#include <optional>

namespace csa {
#define GEN_PASS_DEF_BOUNDEDREPLAY
#include "passes/Passes.h.inc"
} // namespace csa

using namespace mlir;
using namespace csa;

namespace {

/// The layer an op belongs to: its `layer` attribute, else the index in its
/// weight prefix ("layers.<N>."). Ops of no layer (embedding, mHC plumbing,
/// head) have none.
std::optional<int64_t> layerOf(Operation *op) {
  if (auto layer = op->getAttrOfType<IntegerAttr>("layer"))
    return layer.getInt();
  for (StringRef name : {"weights", "weight"}) {
    auto weights = op->getAttrOfType<StringAttr>(name);
    if (!weights)
      continue;
    StringRef rest = weights.getValue();
    int64_t layer;
    if (rest.consume_front("layers.") &&
        !rest.split('.').first.getAsInteger(10, layer))
      return layer;
  }
  return std::nullopt;
}

/// A per-token value: a ranked tensor whose leading (row) dimension is
/// dynamic.
bool isPerToken(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.getRank() >= 1 && type.isDynamicDim(0);
}

struct BoundedReplayPass
    : public csa::impl::BoundedReplayBase<BoundedReplayPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fn = module.lookupSymbol<func::FuncOp>(function);
    if (!fn || fn.isExternal())
      return; // a module without prefill: nothing to replay
    if (startLayer < -1 || tail == 0 || tail < -1) {
      module.emitError() << "csa-bounded-replay: start-layer must be >= -1 and "
                            "tail >= 1 or -1, got start-layer="
                         << int64_t(startLayer) << " tail=" << int64_t(tail);
      return signalPassFailure();
    }

    // Already replayed (an edited stage fed back to csa-compile): once is
    // enough, but a different request is a conflict.
    if (auto done = fn->getAttrOfType<DictionaryAttr>("csa.bounded_replay")) {
      auto get = [&](StringRef key) {
        auto value = done.getAs<IntegerAttr>(key);
        return value ? value.getInt() : int64_t(-1);
      };
      if ((startLayer >= 0 && startLayer != get("start_layer")) ||
          (tail > 0 && tail != get("tail"))) {
        fn.emitError() << "csa-bounded-replay: @" << function
                       << " is already replayed with " << done
                       << "; asked for start-layer=" << int64_t(startLayer)
                       << " tail=" << int64_t(tail);
        return signalPassFailure();
      }
      return;
    }

    int64_t lastFull = -1, window = -1;
    bool expanded = false;
    fn.walk([&](Operation *op) {
      if (auto attention = dyn_cast<AttentionOp>(op)) {
        if (attention.getMode() == AttentionMode::Full)
          lastFull = std::max<int64_t>(lastFull, attention.getLayer());
        if (window < 0)
          window = attention.getConfig().getWindow();
      }
      expanded |= isa<CacheAllocOp>(op);
    });
    if (expanded) {
      fn.emitError() << "csa-bounded-replay runs on the graph stage; @"
                     << function << " is already expanded (csa.cache_alloc)";
      return signalPassFailure();
    }
    const int64_t start = startLayer >= 0 ? int64_t(startLayer) : lastFull + 1;
    const int64_t keep = tail > 0 ? int64_t(tail) : window;
    if (keep < 1) {
      fn.emitError() << "csa-bounded-replay: @" << function
                     << " has no csa.attention to take the window from; give "
                        "tail=N";
      return signalPassFailure();
    }

    // Decode reads the late layers' rings as full windows, so the tail must
    // fill them (the released tail is the window, 128).
    if (keep < window) {
      fn.emitError() << "csa-bounded-replay: tail " << keep
                     << " is shorter than the attention window " << window
                     << "; the late layers' SWA rings would start decode "
                        "partly empty";
      return signalPassFailure();
    }

    // Layers that must see every prompt token.
    bool bad = false;
    fn.walk([&](Operation *op) {
      if (auto attention = dyn_cast<AttentionOp>(op);
          attention && attention.getLayer() >= start &&
          attention.getMode() == AttentionMode::Full) {
        attention.emitError() << "bounded replay from layer " << start
                              << ": layer " << attention.getLayer()
                              << " is a KV source (full) after the replay "
                                 "start";
        bad = true;
      }
      if (auto engram = dyn_cast<EngramOp>(op);
          engram && engram.getLayer() >= start) {
        engram.emitError() << "bounded replay from layer " << start
                           << ": Engram layer " << engram.getLayer()
                           << " runs after the replay start (its hash needs "
                              "the earlier tokens)";
        bad = true;
      }
    });
    if (bad)
      return signalPassFailure();

    Block &body = fn.getBody().front();
    Operation *boundary = nullptr;
    for (Operation &op : body) {
      std::optional<int64_t> layer = layerOf(&op);
      if (layer && *layer >= start) {
        boundary = &op;
        break;
      }
    }
    if (!boundary)
      return; // no layer at or after the start: nothing is cut

    auto definedBefore = [&](Value value) {
      if (auto arg = dyn_cast<BlockArgument>(value))
        return arg.getOwner() == &body;
      Operation *def = value.getDefiningOp();
      return def->getBlock() == &body && def->isBeforeInBlock(boundary);
    };

    OpBuilder b(boundary);
    Location loc = boundary->getLoc();
    Value drop, rows;
    llvm::DenseMap<Value, Value> replaced;
    // Rows kept and dropped, from the first per-token value that crosses.
    auto cut = [&](Value value) -> Value {
      if (!drop) {
        Value all = tensor::DimOp::create(b, loc, value, 0);
        Value limit = arith::ConstantIndexOp::create(b, loc, keep);
        rows = arith::MinSIOp::create(b, loc, all, limit);
        drop = arith::SubIOp::create(b, loc, all, rows);
      }
      return drop;
    };
    auto replacement = [&](Value value, bool position) -> Value {
      if (Value done = replaced.lookup(value))
        return done;
      Value result;
      if (position) {
        result = arith::AddIOp::create(b, loc, value, drop);
      } else {
        cut(value);
        auto type = cast<RankedTensorType>(value.getType());
        SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0));
        SmallVector<OpFoldResult> strides(type.getRank(), b.getIndexAttr(1));
        SmallVector<OpFoldResult> sizes = {rows};
        for (int64_t d = 1; d < type.getRank(); ++d)
          sizes.push_back(type.isDynamicDim(d)
                              ? OpFoldResult(
                                    tensor::DimOp::create(b, loc, value, d)
                                        .getResult())
                              : b.getIndexAttr(type.getDimSize(d)));
        offsets[0] = drop;
        result = tensor::ExtractSliceOp::create(b, loc, type, value, offsets,
                                                sizes, strides);
      }
      replaced[value] = result;
      return result;
    };

    // Per-token values first (they define `drop`), then positions.
    SmallVector<Operation *> late;
    for (Operation *op = boundary; op; op = op->getNextNode())
      late.push_back(op);
    for (Operation *op : late)
      for (OpOperand &use : op->getOpOperands())
        if (isPerToken(use.get()) && definedBefore(use.get()))
          use.set(replacement(use.get(), /*position=*/false));
    if (!drop) {
      boundary->emitError() << "csa-bounded-replay: no per-token value "
                               "crosses into layer "
                            << start;
      return signalPassFailure();
    }
    for (Operation *op : late)
      if (auto attention = dyn_cast<AttentionOp>(op))
        if (definedBefore(attention.getPosition()))
          attention.getPositionMutable().assign(
              replacement(attention.getPosition(), /*position=*/true));

    fn->setAttr("csa.bounded_replay",
                b.getDictionaryAttr(
                    {b.getNamedAttr("start_layer", b.getI64IntegerAttr(start)),
                     b.getNamedAttr("tail", b.getI64IntegerAttr(keep))}));
  }
};

} // namespace

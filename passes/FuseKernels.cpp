//===- FuseKernels.cpp - Kernel boundaries as csa.fusion regions ----------===//
#include "dialects/csa/CsaDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace csa {
#define GEN_PASS_DEF_FUSEKERNELS
#include "passes/Passes.h.inc"
} // namespace csa

using namespace mlir;
using namespace csa;

namespace {

/// rope -> quantize -> cache_append, in one block, fusable as described in
/// Passes.td.
struct RopeQuantizeStore {
  RopeOp rope;
  QuantizeOp quantize;
  CacheAppendOp append;

  static std::optional<RopeQuantizeStore> match(CacheAppendOp append) {
    auto quantize = append.getRows().getDefiningOp<QuantizeOp>();
    if (!quantize)
      return std::nullopt;
    auto rope = quantize.getInput().getDefiningOp<RopeOp>();
    if (!rope || !rope->hasOneUse())
      return std::nullopt;
    Block *block = append->getBlock();
    if (quantize->getBlock() != block || rope->getBlock() != block)
      return std::nullopt;
    for (Operation *user : quantize->getUsers())
      if (user != append.getOperation() &&
          (user->getBlock() != block || !append->isBeforeInBlock(user)))
        return std::nullopt;
    // 2-D rows (the KV and compressed rows, not per-head queries).
    if (cast<RankedTensorType>(rope.getInput().getType()).getRank() != 2)
      return std::nullopt;
    return RopeQuantizeStore{rope, quantize, append};
  }

  void fuse(OpBuilder &b) {
    b.setInsertionPoint(append);
    SmallVector<Value> inputs{rope.getInput(), rope.getPosition(),
                              append.getPosition(), append.getCache()};
    Type rowsType = quantize.getResult().getType();
    auto fusion = FusionOp::create(b, append.getLoc(), FusionKind::RopeQuantizeStore,
                                   TypeRange{rowsType}, inputs);
    Block &body = fusion.getBody().front();
    // Each op reads its own block argument (the two positions may be one
    // value outside).
    OpBuilder inner = OpBuilder::atBlockEnd(&body);
    IRMapping ropeMap;
    ropeMap.map(rope.getInput(), body.getArgument(0));
    ropeMap.map(rope.getPosition(), body.getArgument(1));
    Operation *r = inner.clone(*rope, ropeMap);
    IRMapping quantizeMap;
    quantizeMap.map(rope.getResult(), r->getResult(0));
    Operation *q = inner.clone(*quantize, quantizeMap);
    IRMapping appendMap;
    appendMap.map(quantize.getResult(), q->getResult(0));
    appendMap.map(append.getPosition(), body.getArgument(2));
    appendMap.map(append.getCache(), body.getArgument(3));
    inner.clone(*append, appendMap);
    YieldOp::create(inner, append.getLoc(), ValueRange{q->getResult(0)});
    quantize.getResult().replaceAllUsesWith(fusion.getResult(0));
    append->erase();
    quantize->erase();
    rope->erase();
  }
};

struct FuseKernelsPass : public csa::impl::FuseKernelsBase<FuseKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    for (const std::string &p : patterns)
      if (p != "rope_quantize_store") {
        getOperation().emitError()
            << "csa-fuse-kernels: unknown pattern '" << p
            << "' (known: rope_quantize_store)";
        return signalPassFailure();
      }
    SmallVector<RopeQuantizeStore> found;
    getOperation().walk([&](CacheAppendOp append) {
      if (append->getParentOfType<FusionOp>())
        return;
      if (auto m = RopeQuantizeStore::match(append))
        found.push_back(*m);
    });
    OpBuilder b(&getContext());
    for (RopeQuantizeStore &m : found) {
      m.fuse(b);
      ++numFused;
    }
  }
};

} // namespace

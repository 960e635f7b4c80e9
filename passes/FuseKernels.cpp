//===- FuseKernels.cpp - Kernel boundaries as csa.fusion regions ----------===//
#include "dialects/csa/CsaDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

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
};

/// Forms a rope_quantize_store region around each chain RopeQuantizeStore
/// matches, rooted at its cache_append (one region per chain; the region's
/// ops keep their semantics, only the kernel boundary changes).
struct FuseRopeQuantizeStore : public OpRewritePattern<CacheAppendOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(CacheAppendOp append,
                                PatternRewriter &rewriter) const override {
    if (append->getParentOfType<FusionOp>())
      return rewriter.notifyMatchFailure(append, "already in a kernel region");
    std::optional<RopeQuantizeStore> m = RopeQuantizeStore::match(append);
    if (!m)
      return rewriter.notifyMatchFailure(append, "not a fusable rope -> quantize -> store");
    RopeOp rope = m->rope;
    QuantizeOp quantize = m->quantize;
    SmallVector<Value> inputs{rope.getInput(), rope.getPosition(),
                              append.getPosition(), append.getCache()};
    rewriter.setInsertionPoint(append);
    auto fusion = FusionOp::create(rewriter, append.getLoc(), FusionKind::RopeQuantizeStore,
                                   TypeRange{quantize.getResult().getType()}, inputs);
    Block &body = fusion.getBody().front();
    // Each op reads its own block argument (the two positions may be one
    // value outside).
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToEnd(&body);
    IRMapping map;
    map.map(rope.getInput(), body.getArgument(0));
    map.map(rope.getPosition(), body.getArgument(1));
    Operation *r = rewriter.clone(*rope, map);
    map.map(rope.getResult(), r->getResult(0));
    Operation *q = rewriter.clone(*quantize, map);
    IRMapping appendMap;
    appendMap.map(quantize.getResult(), q->getResult(0));
    appendMap.map(append.getPosition(), body.getArgument(2));
    appendMap.map(append.getCache(), body.getArgument(3));
    rewriter.clone(*append, appendMap);
    YieldOp::create(rewriter, append.getLoc(), ValueRange{q->getResult(0)});
    rewriter.eraseOp(append);
    rewriter.replaceAllUsesWith(quantize.getResult(), fusion.getResult(0));
    rewriter.eraseOp(quantize);
    rewriter.eraseOp(rope);
    return success();
  }
};

/// Forms a hc_collapse_norm region around a csa.hc_collapse whose only use
/// is a csa.rms_norm in the same block, rooted at the norm (the region sits
/// where the norm was: the collapse reads nothing defined between them).
struct FuseHcCollapseNorm : public OpRewritePattern<RmsNormOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RmsNormOp norm, PatternRewriter &rewriter) const override {
    if (norm->getParentOfType<FusionOp>())
      return rewriter.notifyMatchFailure(norm, "already in a kernel region");
    auto collapse = norm.getInput().getDefiningOp<HcCollapseOp>();
    if (!collapse || !collapse->hasOneUse() || collapse->getBlock() != norm->getBlock())
      return rewriter.notifyMatchFailure(norm, "not the norm of a collapse used once");
    rewriter.setInsertionPoint(norm);
    auto fusion = FusionOp::create(rewriter, norm.getLoc(), FusionKind::HcCollapseNorm,
                                   TypeRange{norm.getResult().getType()},
                                   ValueRange{collapse.getStreams(), collapse.getPre()});
    Block &body = fusion.getBody().front();
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToEnd(&body);
    IRMapping map;
    map.map(collapse.getStreams(), body.getArgument(0));
    map.map(collapse.getPre(), body.getArgument(1));
    Operation *c = rewriter.clone(*collapse, map);
    map.map(collapse.getResult(), c->getResult(0));
    Operation *n = rewriter.clone(*norm, map);
    YieldOp::create(rewriter, norm.getLoc(), ValueRange{n->getResult(0)});
    rewriter.replaceOp(norm, fusion.getResults());
    rewriter.eraseOp(collapse);
    return success();
  }
};

struct FuseKernelsPass : public csa::impl::FuseKernelsBase<FuseKernelsPass> {
  using Base::Base;

  /// The patterns, checked once (not once a function).
  LogicalResult initialize(MLIRContext *context) override {
    RewritePatternSet set(context);
    bool ropeQuantizeStore = patterns.empty(), hcCollapseNorm = patterns.empty();
    for (const std::string &p : patterns) {
      if (p == "none") {
        if (patterns.size() == 1)
          continue; // no regions: every op its own kernel
        return emitError(UnknownLoc::get(context))
               << "csa-fuse-kernels: 'none' (no regions) stands alone, not beside other "
                  "patterns";
      } else if (p == "rope_quantize_store") {
        ropeQuantizeStore = true;
      } else if (p == "hc_collapse_norm") {
        hcCollapseNorm = true;
      } else {
        return emitError(UnknownLoc::get(context))
               << "csa-fuse-kernels: unknown pattern '" << p
               << "' (known: rope_quantize_store, hc_collapse_norm; or none alone)";
      }
    }
    if (ropeQuantizeStore)
      set.add<FuseRopeQuantizeStore>(context);
    if (hcCollapseNorm)
      set.add<FuseHcCollapseNorm>(context);
    frozen = FrozenRewritePatternSet(std::move(set));
    return success();
  }

  void runOnOperation() override {
    // Only the regions change: no folding, no constant CSE, no region
    // simplification (the fused stage is the expanded one plus its regions).
    GreedyRewriteConfig config;
    config.enableFolding(false).enableConstantCSE(false)
        .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled)
        .setStrictness(GreedyRewriteStrictness::ExistingOps);
    int64_t before = 0, after = 0;
    getOperation().walk([&](FusionOp) { ++before; });
    if (failed(applyPatternsGreedily(getOperation(), frozen, config)))
      return signalPassFailure();
    getOperation().walk([&](FusionOp) { ++after; });
    numFused += after - before;
  }

  FrozenRewritePatternSet frozen;
};

} // namespace

//===- TileKernels.cpp - Target tile parameters on matrix-product ops -----===//
#include "dialects/csa/CsaDialect.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace csa {
#define GEN_PASS_DEF_TILEKERNELS
#include "passes/Passes.h.inc"
} // namespace csa

using namespace mlir;
using namespace csa;

namespace {

struct TileKernelsPass : public csa::impl::TileKernelsBase<TileKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const bool host = target == "host";
    if (!host && target != "sm_90a") {
      module.emitError() << "csa-tile-kernels: unknown target '" << target
                         << "' (host or sm_90a)";
      return signalPassFailure();
    }
    if (rows < 0) {
      module.emitError() << "csa-tile-kernels: rows must be >= 1 (or 0 for "
                            "the target's default), got "
                         << static_cast<int64_t>(rows);
      return signalPassFailure();
    }
    OpBuilder b(module.getContext());
    auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
    // Host: 8 rows keep a tile's activations (8 x K fp32) in L1/L2 for the
    // model widths while each weight block is decoded once per tile.
    // sm_90a: one warpgroup's wgmma m64nNk16 tiles, K staged by 64.
    const int64_t tileRows = rows > 0 ? rows : (host ? 8 : 64);
    SmallVector<NamedAttribute> fields{b.getNamedAttr("rows", i64(tileRows))};
    if (!host) {
      fields.push_back(b.getNamedAttr("cols", i64(128)));
      fields.push_back(b.getNamedAttr("k", i64(64)));
      fields.push_back(b.getNamedAttr("warps", i64(4)));
    }
    DictionaryAttr tile = b.getDictionaryAttr(fields);
    // A call with one static row (a decode step) gains nothing from row
    // tiles on the host: it keeps the untiled kernel.
    DictionaryAttr single = b.getDictionaryAttr({b.getNamedAttr("rows", i64(1))});
    module->setAttr("csa.target", b.getStringAttr(target));
    module.walk([&](Operation *op) {
      if (!isa<LinearOp, CompressOp, MoeOp, EngramOp, LmHeadOp>(op))
        return;
      if (op->hasAttr("csa.tile"))
        return;
      auto input = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
      const bool oneRow = input && input.getDimSize(0) == 1;
      op->setAttr("csa.tile", host && oneRow ? single : tile);
      ++numTiled;
    });
  }
};

} // namespace

//===- TileKernels.cpp - The row tile of every matrix-product op ---------===//
#include "dialects/csa/CsaDialect.h"
#include "passes/Passes.h"

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
    if (target != "host" && target != "sm_90a") {
      module.emitError() << "csa-tile-kernels: unknown target '" << target
                         << "' (host or sm_90a)";
      return signalPassFailure();
    }
    if (rows < 0) {
      module.emitError() << "csa-tile-kernels: rows must be >= 1 (or 0 for "
                            "the default, 8), got "
                         << static_cast<int64_t>(rows);
      return signalPassFailure();
    }
    // 8 rows keep a tile's activations (8 x K fp32) in L1/L2 for the model
    // widths while each weight block is decoded once per tile. The host
    // kernels are the artifact's for every target (the CPU runs them, the
    // NVPTX back end maps them to threads and checks its forms against
    // them), so sm_90a records the same row tile; the GPU's tiles belong to
    // the linear forms.
    MLIRContext *ctx = module.getContext();
    auto tile = RowTileAttr::get(ctx, rows > 0 ? int64_t(rows) : 8);
    // A call with one static row (a decode step) gains nothing from row
    // tiles: it keeps the untiled kernel.
    auto single = RowTileAttr::get(ctx, 1);
    module->setAttr("csa.target", StringAttr::get(ctx, target));
    module.walk([&](Operation *op) {
      if (!isa<LinearOp, CompressOp, MoeOp, EngramOp, LmHeadOp>(op))
        return;
      if (op->hasAttr(kRowTileAttrName))
        return;
      auto input = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
      const bool oneRow = input && input.getDimSize(0) == 1;
      op->setAttr(kRowTileAttrName, oneRow ? single : tile);
      ++numTiled;
    });
  }
};

} // namespace

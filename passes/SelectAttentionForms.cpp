//===- SelectAttentionForms.cpp - The GPU form of every sparse attention --===//
#include "dialects/csa/CsaDialect.h"
#include "passes/FormSelection.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace csa {
#define GEN_PASS_DEF_SELECTATTENTIONFORMS
#include "passes/Passes.h.inc"
} // namespace csa

using namespace mlir;
using namespace csa;

namespace {

struct SelectAttentionFormsPass
    : public csa::impl::SelectAttentionFormsBase<SelectAttentionFormsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<AttentionForm> chosen = symbolizeAttentionForm(form);
    if (!chosen) {
      module.emitError() << "csa-select-attention-forms: unknown form '" << form
                         << "' (warp, head, split or mma)";
      return signalPassFailure();
    }
    MLIRContext *context = module.getContext();
    numChosen += setFormWhereAbsent<SparseAttentionOp>(
        module, kAttentionFormAttrName, [&](Operation *op) -> Attribute {
          // mma where its tiles fit the op's heads and channels, else split.
          auto type = cast<ShapedType>(op->getResult(0).getType());
          const bool fits = sparseAttentionMmaFits(type.getDimSize(1), type.getDimSize(2));
          return AttentionFormAttr::get(
              context, *chosen == AttentionForm::Mma && !fits ? AttentionForm::Split : *chosen);
        });
  }
};

} // namespace

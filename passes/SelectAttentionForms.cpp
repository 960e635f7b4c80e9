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
                         << "' (warp, head or split)";
      return signalPassFailure();
    }
    numChosen += setFormWhereAbsent<SparseAttentionOp>(
        module, kAttentionFormAttrName, AttentionFormAttr::get(module.getContext(), *chosen));
  }
};

} // namespace

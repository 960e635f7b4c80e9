//===- SelectLinearForms.cpp - The GPU form of every op's linears ---------===//
#include "dialects/csa/CsaDialect.h"
#include "passes/FormSelection.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace csa {
#define GEN_PASS_DEF_SELECTLINEARFORMS
#include "passes/Passes.h.inc"
} // namespace csa

using namespace mlir;
using namespace csa;

namespace {

struct SelectLinearFormsPass
    : public csa::impl::SelectLinearFormsBase<SelectLinearFormsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<LinearForm> chosen = symbolizeLinearForm(form);
    if (!chosen) {
      module.emitError() << "csa-select-linear-forms: unknown form '" << form
                         << "' (split_k or per_output)";
      return signalPassFailure();
    }
    numChosen += setFormWhereAbsent<LinearOp, CompressOp, MoeOp, EngramOp, LmHeadOp>(
        module, kLinearFormAttrName, LinearFormAttr::get(module.getContext(), *chosen));
  }
};

} // namespace

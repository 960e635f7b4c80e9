//===- CostReport.cpp - The csa-cost-report pass ---------------------------===//
#include "passes/CostAnalysis.h"
#include "passes/Passes.h"

#include "dialects/csa/CsaDialect.h"

#include "llvm/Support/Error.h"

namespace csa {
#define GEN_PASS_DEF_COSTREPORT
#include "passes/Passes.h.inc"
} // namespace csa

using namespace mlir;

namespace {
struct CostReportPass : public csa::impl::CostReportBase<CostReportPass> {
  using Base::Base;

  void runOnOperation() override {
    if (format != "text" && format != "json") {
      getOperation()->emitError() << "csa-cost-report: format must be 'text' "
                                     "or 'json', got '"
                                  << format << "'";
      return signalPassFailure();
    }
    std::vector<int64_t> lengths(contexts.begin(), contexts.end());
    if (lengths.empty())
      lengths = csa::defaultReportContexts();
    for (int64_t context : lengths)
      if (context < 1) {
        getOperation()->emitError()
            << "csa-cost-report: context lengths must be >= 1, got "
            << context;
        return signalPassFailure();
      }
    // The report reads the graph stage's ops; from expanded IR on they are
    // gone, and a report of zeros would look like a cheap model.
    bool hasGraphOps = false;
    getOperation()->walk([&](csa::AttentionOp) {
      hasGraphOps = true;
      return WalkResult::interrupt();
    });
    if (!hasGraphOps) {
      getOperation()->emitError()
          << "csa-cost-report: no csa.attention ops: the report reads the graph stage "
             "(csa-compile --emit=graph); expanded and later stages have none left";
      return signalPassFailure();
    }
    auto cost = csa::analyzeCost(getOperation(), lengths, function,
                                 csa::prefillReportLengths(lengths));
    if (!cost) {
      getOperation()->emitError()
          << "csa-cost-report: " << llvm::toString(cost.takeError());
      return signalPassFailure();
    }
    if (format == "json")
      csa::printCostJson(*cost, llvm::outs());
    else
      csa::printCostText(*cost, llvm::outs());
    markAllAnalysesPreserved();
  }
};
} // namespace

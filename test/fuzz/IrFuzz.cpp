//===- IrFuzz.cpp - libFuzzer target: csa IR stages -----------------------===//
//
// What `csa-compile --compile-from=STAGE FILE` and `csa-opt` do with a file a
// user edited: parse it with csa's dialects (the graph .. tiled stages),
// verify it, and run the stage pipelines from the graph stage to the tiled
// one (passes/Pipelines.h) on what verifies. An input may be rejected at any
// point with a diagnostic; it must never crash, hang or trip a sanitizer.
// Seeds: the stages tiny's compile dumps (tools/scripts/fuzz.sh).
//
//===----------------------------------------------------------------------===//
#include "dialects/csa/CsaDialect.h"
#include "passes/InputIr.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace {

mlir::MLIRContext &context() {
  static mlir::MLIRContext *ctx = [] {
    mlir::DialectRegistry registry;
    registry.insert<csa::CsaDialect, mlir::func::FuncDialect, mlir::arith::ArithDialect,
                    mlir::tensor::TensorDialect>();
    auto *c = new mlir::MLIRContext(registry, mlir::MLIRContext::Threading::DISABLED);
    c->loadAllAvailableDialects();
    // Diagnostics are the expected outcome of most inputs: drop them.
    c->getDiagEngine().registerHandler([](mlir::Diagnostic &) { return mlir::success(); });
    return c;
  }();
  return *ctx;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // csa-compile reads stage files whole; a fuzz input past 128 KiB (tiny's
  // tiled stage is 84 KB) only slows the search down.
  if (size > (1u << 17))
    return 0;
  mlir::MLIRContext &ctx = context();
  // MLIR's lexer reads up to the terminating NUL that every file buffer
  // (csa-compile's, csa-opt's) carries; libFuzzer's input has none.
  const std::string text(reinterpret_cast<const char *>(data), size);
  // As csa-compile --compile-from reads a stage: parsed, then verified by
  // verifyInputIr.
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(
      text, mlir::ParserConfig(&ctx, /*verifyAfterParse=*/false));
  if (!module || mlir::failed(csa::verifyInputIr(*module)))
    return 0;
  mlir::PassManager pm(&ctx);
  csa::buildGraphToTiledPipeline(pm, csa::StagePipelineOptions{});
  (void)pm.run(*module);
  return 0;
}

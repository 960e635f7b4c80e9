//===- csa-opt.cpp - The csa optimizer driver ------------------------------===//
//
// MlirOptMain with the csa dialect and passes, plus the upstream dialects our
// IR uses (func, arith, tensor) and the generic upstream transforms
// (canonicalize, cse, ...). Gives the standard flags: --pass-pipeline,
// --mlir-print-ir-after-all, --mlir-timing, --verify-diagnostics, ...
//
//===----------------------------------------------------------------------===//
#include "dialects/csa/CsaDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/PrettyStackTrace.h"

int main(int argc, char **argv) {
  llvm::setBugReportMsg("csa-opt crashed; please report the command and the "
                        "input file to the csa issue tracker.\n");
  mlir::registerTransformsPasses();
  csa::registerCsaPasses();

  mlir::DialectRegistry registry;
  registry.insert<csa::CsaDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect,
                  mlir::LLVM::LLVMDialect, mlir::NVVM::NVVMDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "csa optimizer driver\n", registry));
}

//===- csa-opt.cpp - The csa optimizer driver ------------------------------===//
//
// MlirOptMain with the csa dialect, passes and pipelines, the upstream
// dialects of every stage csa-compile dumps (graph .. tiled: func, arith,
// tensor; host: memref, scf, math; gpu: gpu, nvvm, llvm), and the generic
// upstream transforms (canonicalize, cse, ...). Gives the standard flags:
// --pass-pipeline, --mlir-print-ir-after-all, --mlir-timing,
// --verify-diagnostics, ...
//
// Unlike mlir-opt, the input is parsed without the parser's verification
// and the first pass is csa-verify-input-ir: upstream verifiers crash on
// some malformed ops (passes/InputIr.h), and no input may crash csa-opt.
//
//===----------------------------------------------------------------------===//
#include "tools/support/LastResort.h"
#include "tools/support/Version.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"
#include "codegen/Passes.h"
#include "dialects/csa/CsaDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/PrettyStackTrace.h"
#include "llvm/Support/ToolOutputFile.h"

int main(int argc, char **argv) {
  csa::tools::installLastResortHandler("csa-opt");
  // --version: csa's line (its commit), then the LLVM it is built on.
  llvm::cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << csa::tools::versionLine("csa-opt") << "\nLLVM " << LLVM_VERSION_STRING << "\n";
  });
  llvm::setBugReportMsg("csa-opt crashed; please report the command and the "
                        "input file to the csa issue tracker.\n");
  mlir::registerTransformsPasses();
  csa::registerCsaPasses();
  csa::codegen::registerCsaCodegenPasses();
  csa::codegen::registerCsaPipelines();

  mlir::DialectRegistry registry;
  registry.insert<csa::CsaDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect,
                  mlir::memref::MemRefDialect, mlir::scf::SCFDialect,
                  mlir::math::MathDialect, mlir::cf::ControlFlowDialect,
                  mlir::index::IndexDialect, mlir::vector::VectorDialect,
                  mlir::gpu::GPUDialect, mlir::LLVM::LLVMDialect,
                  mlir::NVVM::NVVMDialect>();
  auto [inputFilename, outputFilename] = mlir::registerAndParseCLIOptions(
      argc, argv, "csa optimizer driver\n", registry);
  llvm::InitLLVM initLLVM(argc, argv);

  // The user's flags, then: parse without verifying, and verify (crash-free)
  // as the pipeline's first pass. With the verifier turned off on parsing by
  // the user, nothing is verified, as in mlir-opt.
  const mlir::MlirOptMainConfig userConfig =
      mlir::MlirOptMainConfig::createFromCLOptions();
  mlir::MlirOptMainConfig config = userConfig;
  if (userConfig.shouldVerifyOnParsing()) {
    config.verifyOnParsing(false);
    config.setPassPipelineSetupFn([&userConfig](mlir::PassManager &pm) {
      pm.addPass(csa::createVerifyInputIr());
      return userConfig.setupPassPipeline(pm);
    });
  }

  // As mlir-opt: reading a terminal is more often a mistake than a wish.
  if (inputFilename == "-" && llvm::sys::Process::FileDescriptorIsDisplayed(fileno(stdin)))
    llvm::errs() << "(processing input from stdin now, hit ctrl-c/ctrl-d to interrupt)\n";
  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> input =
      mlir::openInputFile(inputFilename, &errorMessage);
  if (!input) {
    llvm::errs() << errorMessage << "\n";
    return EXIT_FAILURE;
  }
  std::unique_ptr<llvm::ToolOutputFile> output =
      mlir::openOutputFile(outputFilename, &errorMessage);
  if (!output) {
    llvm::errs() << errorMessage << "\n";
    return EXIT_FAILURE;
  }
  if (mlir::failed(
          mlir::MlirOptMain(output->os(), std::move(input), registry, config)))
    return EXIT_FAILURE;
  output->keep();
  return EXIT_SUCCESS;
}

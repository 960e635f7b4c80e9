//===- HostBackend.cpp - Host kernels to a loadable shared object ---------===//
#include "codegen/host/HostBackend.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

#include <cstdlib>

using namespace mlir;

namespace csa::codegen {

LogicalResult lowerHostKernelsToLLVM(ModuleOp module) {
  PassManager pm(module.getContext());
  // bf16 conversions as integer arithmetic (round to nearest even): the
  // system's libgcc may lack the __truncsfbf2 builtin LLVM would call.
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addNestedPass<func::FuncOp>(arith::createArithExpandOpsPass(expand));
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createArithToLLVMConversionPass());
  // csa's transcendentals are arith ops (Transcendental.h); a math op a
  // hand-edited kernel adds becomes a libm call, math.sqrt the sqrtss
  // instruction.
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  return pm.run(module);
}

void recordKernelTarget(ModuleOp module, llvm::StringRef configText, llvm::StringRef schedule) {
  OpBuilder b(module.getContext());
  b.setInsertionPointToStart(module.getBody());
  for (auto [name, text] : {std::pair<llvm::StringRef, llvm::StringRef>{"csa_kernels_config", configText},
                            {"csa_kernels_schedule", schedule}}) {
    std::string bytes = text.str();
    bytes.push_back('\0');
    auto type = LLVM::LLVMArrayType::get(b.getI8Type(), bytes.size());
    LLVM::GlobalOp::create(b, module.getLoc(), type, /*isConstant=*/true, LLVM::Linkage::External,
                           name, b.getStringAttr(bytes));
  }
}

namespace {

/// Translates to an llvm::Module in `context`.
llvm::Expected<std::unique_ptr<llvm::Module>>
toLLVMModule(ModuleOp module, llvm::LLVMContext &context) {
  registerBuiltinDialectTranslation(*module.getContext());
  registerLLVMDialectTranslation(*module.getContext());
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, context, "csa_host_kernels");
  if (!llvmModule)
    return llvm::createStringError(
        "the host kernels do not translate to LLVM IR (are they lowered to "
        "the LLVM dialect?)");
  return llvmModule;
}

} // namespace

llvm::Expected<std::string> translateToLLVMIR(ModuleOp module) {
  llvm::LLVMContext context;
  auto llvmModule = toLLVMModule(module, context);
  if (!llvmModule)
    return llvmModule.takeError();
  std::string text;
  llvm::raw_string_ostream os(text);
  (*llvmModule)->print(os, nullptr);
  return text;
}

llvm::Error emitHostObject(ModuleOp module, const std::string &path) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::LLVMContext context;
  auto llvmModule = toLLVMModule(module, context);
  if (!llvmModule)
    return llvmModule.takeError();

  // The generic x86-64 CPU: an artifact runs on any machine of the target,
  // not only on the build machine.
  llvm::Triple triple(llvm::sys::getProcessTriple());
  std::string error;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return llvm::createStringError("no LLVM target for " + triple.str() +
                                   ": " + error);
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, "generic", "", options, llvm::Reloc::PIC_));
  if (!machine)
    return llvm::createStringError("cannot create a target machine for " +
                                   triple.str());
  (*llvmModule)->setTargetTriple(triple);
  (*llvmModule)->setDataLayout(machine->createDataLayout());

  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return llvm::createStringError("cannot write " + path + ": " +
                                   ec.message());
  llvm::legacy::PassManager passes;
  if (machine->addPassesToEmitFile(passes, out, nullptr,
                                   llvm::CodeGenFileType::ObjectFile))
    return llvm::createStringError("the target cannot emit object files");
  passes.run(**llvmModule);
  out.flush();
  return llvm::Error::success();
}

llvm::Error linkSharedObject(const std::vector<std::string> &objects,
                             const std::string &path) {
  const char *override = std::getenv("CSA_CC");
  std::string driver = override ? override : "cc";
  auto program = llvm::sys::findProgramByName(driver);
  if (!program)
    return llvm::createStringError("cannot find the linker driver '" + driver +
                                   "' (set CSA_CC)");
  std::vector<std::string> args = {*program, "-shared", "-o", path};
  args.insert(args.end(), objects.begin(), objects.end());
  args.push_back("-lm"); // cosf, sinf, sqrtf of the generated code
  std::vector<llvm::StringRef> argRefs(args.begin(), args.end());
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(*program, argRefs, std::nullopt, {}, 0, 0,
                                     &message);
  if (rc != 0)
    return llvm::createStringError("linking " + path + " failed (" +
                                   std::to_string(rc) + "): " + message);
  return llvm::Error::success();
}

} // namespace csa::codegen

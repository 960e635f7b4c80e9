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

#include "llvm/IR/Attributes.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/PassManager.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Transforms/Instrumentation/AddressSanitizer.h"
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

/// The bf16 values ASan's checks carry from one block to the next are
/// narrowed back by a call to the runtime's `__truncsfbf2`, which the host's
/// libgcc (12) lacks: the kernels get their own (hidden, round to nearest
/// even, NaNs kept quiet). Its bf16 is made from the integer bits, so it
/// calls nothing itself.
static void defineTruncSfBf2(llvm::Module &module) {
  llvm::LLVMContext &context = module.getContext();
  llvm::Type *i16 = llvm::Type::getInt16Ty(context), *i32 = llvm::Type::getInt32Ty(context);
  auto *type = llvm::FunctionType::get(llvm::Type::getBFloatTy(context),
                                       {llvm::Type::getFloatTy(context)}, false);
  llvm::Function *fn = module.getFunction("__truncsfbf2");
  if (fn && !fn->isDeclaration())
    return;
  if (!fn)
    fn = llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage, "__truncsfbf2", module);
  fn->setVisibility(llvm::GlobalValue::HiddenVisibility);
  fn->setDSOLocal(true);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(context, "entry", fn));
  llvm::Value *bits = b.CreateBitCast(fn->getArg(0), i32);
  llvm::Value *magnitude = b.CreateAnd(bits, 0x7fffffff);
  llvm::Value *isNan = b.CreateICmpUGT(magnitude, b.getInt32(0x7f800000));
  llvm::Value *quiet = b.CreateOr(b.CreateLShr(bits, 16), 0x40);
  llvm::Value *lsb = b.CreateAnd(b.CreateLShr(bits, 16), 1);
  llvm::Value *rounded = b.CreateLShr(b.CreateAdd(b.CreateAdd(bits, b.getInt32(0x7fff)), lsb), 16);
  llvm::Value *result = b.CreateTrunc(b.CreateSelect(isNan, quiet, rounded), i16);
  b.CreateRet(b.CreateBitCast(result, llvm::Type::getBFloatTy(context)));
}

llvm::Error emitHostObject(ModuleOp module, const std::string &path,
                           const HostObjectOptions &objectOptions) {
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

  if (objectOptions.addressSanitizer) {
    // As clang -fsanitize=address does: every defined function asks for it,
    // then the module pass instruments loads, stores and stack slots and
    // adds the constructor that registers the module with the runtime.
    for (llvm::Function &fn : **llvmModule)
      if (!fn.isDeclaration())
        fn.addFnAttr(llvm::Attribute::SanitizeAddress);
    llvm::LoopAnalysisManager loops;
    llvm::FunctionAnalysisManager functions;
    llvm::CGSCCAnalysisManager sccs;
    llvm::ModuleAnalysisManager modules;
    llvm::PassBuilder builder(machine.get());
    builder.registerModuleAnalyses(modules);
    builder.registerCGSCCAnalyses(sccs);
    builder.registerFunctionAnalyses(functions);
    builder.registerLoopAnalyses(loops);
    builder.crossRegisterProxies(loops, functions, sccs, modules);
    llvm::ModulePassManager pipeline;
    pipeline.addPass(llvm::AddressSanitizerPass(llvm::AddressSanitizerOptions()));
    pipeline.run(**llvmModule, modules);
    defineTruncSfBf2(**llvmModule);
  }

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

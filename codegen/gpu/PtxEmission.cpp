//===- PtxEmission.cpp - The gpu stage to PTX and kernels.json -----------===//
//
// NvptxBackend.h's emitPtx (the gpu.module through LLVM IR, libdevice
// linked, bodies inlined into their entry points, the NVPTX TargetMachine),
// kernelsJson and the chip check.
//
//===----------------------------------------------------------------------===//
#include "codegen/gpu/NvptxBackend.h"

#include "codegen/host/AttentionKernels.h"
#include "codegen/host/HostKernels.h"
#include "codegen/host/KernelSelection.h"
#include "codegen/host/LinearKernels.h"
#include "codegen/host/EngramKernels.h"
#include "codegen/host/LinearMma.h"
#include "codegen/host/LinearSplitK.h"
#include "codegen/host/MoeKernels.h"
#include "codegen/host/QuantizeKernels.h"
#include "codegen/host/MhcKernels.h"
#include "dialects/csa/CsaDialect.h"
#include "passes/Passes.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/Transforms/IPO/Internalize.h"

using namespace mlir;

extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTarget();
extern "C" void LLVMInitializeNVPTXTargetMC();
extern "C" void LLVMInitializeNVPTXAsmPrinter();

namespace csa::codegen {

LogicalResult checkNvvmForChip(Operation *root, const std::string &chip) {
  PassManager pm(root->getContext(), root->getName().getStringRef());
  csa::CheckNvvmTargetOptions options;
  options.chip = chip;
  pm.addPass(csa::createCheckNvvmTarget(options));
  return pm.run(root);
}

llvm::Expected<std::string> emitPtx(ModuleOp module,
                                    const NvptxOptions &options) {
  gpu::GPUModuleOp gpuModule;
  module.walk([&](gpu::GPUModuleOp m) { gpuModule = m; });
  if (!gpuModule)
    return llvm::createStringError("no gpu.module to emit");
  MLIRContext *context = module.getContext();
  registerBuiltinDialectTranslation(*context);
  registerLLVMDialectTranslation(*context);
  registerGPUDialectTranslation(*context);
  registerNVVMDialectTranslation(*context);

  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXTargetMC();
  LLVMInitializeNVPTXAsmPrinter();

  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(gpuModule, llvmContext, "csa_kernels");
  if (!llvmModule)
    return llvm::createStringError(
        "the GPU kernels do not translate to LLVM IR");
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return llvm::createStringError("no NVPTX target in this LLVM: " + error);
  llvm::TargetOptions targetOptions;
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, options.chip, "+ptx" + std::to_string(effectivePtxVersion(options)),
      targetOptions, std::nullopt));
  if (!machine)
    return llvm::createStringError("cannot create an NVPTX target machine for " +
                                   options.chip);
  llvmModule->setTargetTriple(triple);
  llvmModule->setDataLayout(machine->createDataLayout());

  // libdevice for any __nv_ function a kernel calls (csa's call none but
  // fabs, which inlines to abs.f32); only what is called is linked.
  auto buffer = llvm::MemoryBuffer::getFile(options.libdevice);
  if (!buffer)
    return llvm::createStringError("cannot read libdevice " + options.libdevice +
                                   ": " + buffer.getError().message() +
                                   " (the CUDA toolkit's nvvm/libdevice)");
  auto libdevice = llvm::parseBitcodeFile((*buffer)->getMemBufferRef(), llvmContext);
  if (!libdevice)
    return libdevice.takeError();
  (*libdevice)->setTargetTriple(triple);
  (*libdevice)->setDataLayout(machine->createDataLayout());
  if (llvm::Linker::linkModules(*llvmModule, std::move(*libdevice),
                                llvm::Linker::Flags::LinkOnlyNeeded))
    return llvm::createStringError("linking libdevice failed");
  // Only the kernels are visible; everything else may be inlined and dropped.
  llvm::internalizeModule(*llvmModule, [](const llvm::GlobalValue &gv) {
    if (auto *f = llvm::dyn_cast<llvm::Function>(&gv))
      return f->getCallingConv() == llvm::CallingConv::PTX_Kernel;
    return false;
  });
  // Each entry point's body is inlined into it whatever its size (LLVM's
  // inliner gave up on the straight-line FP8/FP4 linears, and the call then
  // passed the memrefs through the parameter stack).
  for (llvm::Function &f : *llvmModule)
    if (!f.isDeclaration() && f.getName().ends_with(kKernelBodySuffix))
      f.addFnAttr(llvm::Attribute::AlwaysInline);

  // O3 with the target's passes (NVVMReflect resolves libdevice's queries).
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder builder(machine.get());
  builder.registerModuleAnalyses(mam);
  builder.registerCGSCCAnalyses(cgam);
  builder.registerFunctionAnalyses(fam);
  builder.registerLoopAnalyses(lam);
  builder.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager passes =
      builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  passes.run(*llvmModule, mam);

  std::string ptx;
  {
    llvm::raw_string_ostream os(ptx);
    llvm::buffer_ostream out(os);
    llvm::legacy::PassManager codegen;
    if (machine->addPassesToEmitFile(codegen, out, nullptr,
                                     llvm::CodeGenFileType::AssemblyFile))
      return llvm::createStringError("the NVPTX target cannot emit assembly");
    codegen.run(*llvmModule);
  }
  return ptx;
}

std::string kernelsJson(const std::vector<PtxKernel> &kernels,
                        const NvptxOptions &options) {
  llvm::json::Array list;
  for (const PtxKernel &k : kernels) {
    llvm::json::Array params, arguments;
    for (const std::string &p : k.params)
      params.push_back(p);
    for (const std::string &a : k.arguments)
      arguments.push_back(a);
    // rows: grid.x = ceil(dim(argument rows_argument, 0) / rows_per_thread
    // / block); single: one block of one thread.
    llvm::json::Object launch{{"rule", k.launch}, {"block", k.blockSize}};
    // row_outputs: grid = (dim(argument rows_argument, 0),
    // ceil(outputs / outputs_per_block)).
    if (k.launch == "rows") {
      launch["rows_argument"] = k.rowsArgument;
      launch["rows_per_thread"] = k.rowsPerThread;
    } else if (k.launch == "row_elements") {
      launch["rows_argument"] = k.rowsArgument;
      launch["elements_per_row"] = k.elementsPerRow;
    } else if (k.launch == "row_outputs") {
      launch["rows_argument"] = k.rowsArgument;
      launch["outputs"] = k.outputs;
      launch["outputs_per_block"] = k.outputsPerBlock;
    } else if (k.launch == "channels") {
      // grid.x = ceil(channels / block): a thread per channel, any rows.
      launch["channels"] = k.outputs;
    } else if (k.launch == "expert_tiles") {
      // grid = (experts, ceil(outputs / outputs_per_block)).
      launch["rows_argument"] = k.rowsArgument;
      launch["experts"] = k.experts;
      launch["outputs"] = k.outputs;
      launch["outputs_per_block"] = k.outputsPerBlock;
    } else if (k.launch == "row_tiles") {
      // grid = (ceil(dim(argument rows_argument, 0) / rows_per_block),
      // ceil(outputs / outputs_per_block)).
      launch["rows_argument"] = k.rowsArgument;
      launch["rows_per_block"] = k.rowsPerBlock;
      launch["outputs"] = k.outputs;
      launch["outputs_per_block"] = k.outputsPerBlock;
      // grid.y = min(that, max_tile_blocks): the kernel strides over tiles.
      if (k.maxTileBlocks > 0)
        launch["max_tile_blocks"] = k.maxTileBlocks;
    }
    // row_elements: grid.x also multiplies by these dimensions (dynamic trip
    // counts); row_tiles: `outputs` does (a tile count that grows).
    if ((k.launch == "row_elements" || k.launch == "row_tiles") && !k.elementDims.empty()) {
      llvm::json::Array dims;
      for (auto [argument, dim] : k.elementDims)
        dims.push_back(llvm::json::Array{argument, dim});
      launch["element_dims"] = std::move(dims);
    }
    llvm::json::Object entry{{"name", k.name},
                             {"launch", std::move(launch)},
                             {"shared_bytes", k.sharedBytes},
                             {"arguments", std::move(arguments)},
                             {"params", std::move(params)},
                             {"status_parameter", k.statusParameter}};
    if (k.moduleState)
      entry["module_state"] = true;
    if (!k.state.empty()) {
      llvm::json::Array state;
      for (const PtxKernel::StateBuffer &buffer : k.state)
        state.push_back(llvm::json::Object{
            {"dims", llvm::json::Array(buffer.dims)}, {"element_bytes", buffer.elementBytes}});
      entry["state"] = std::move(state);
    }
    // An alternative form of kernel `replaces` (same arguments, same bits),
    // for launches of at least `min_rows` rows.
    if (!k.replaces.empty()) {
      entry["replaces"] = k.replaces;
      entry["min_rows"] = k.minRows;
    }
    // Not the host kernel's bits: the bound it is checked against.
    if (!k.tolerance.empty()) {
      llvm::json::Array operands;
      for (const std::string &o : k.toleranceOperands)
        operands.push_back(o);
      entry["tolerance"] = llvm::json::Object{{"rule", k.tolerance},
                                              {"terms", k.toleranceTerms},
                                              {"output", k.toleranceOutput},
                                              {"operands", std::move(operands)}};
      if (k.toleranceIndexLimit > 0)
        (*entry.getObject("tolerance"))["index_limit"] = k.toleranceIndexLimit;
    }
    // An argument of expert ids (values with meaning, for csa-gpu-check).
    if (k.expertIdsArgument >= 0)
      entry["expert_ids"] = llvm::json::Object{{"argument", k.expertIdsArgument},
                                               {"limit", k.expertIdsLimit}};
    list.push_back(std::move(entry));
  }
  llvm::json::Object root{{"chip", options.chip},
                          {"ptx_version", effectivePtxVersion(options)},
                          {"calling_convention",
                           "memref descriptors expanded: allocated ptr, "
                           "aligned ptr, offset, sizes, strides"},
                          {"kernels", std::move(list)}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
  return text;
}

} // namespace csa::codegen

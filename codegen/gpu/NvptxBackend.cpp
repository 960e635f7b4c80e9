//===- NvptxBackend.cpp - Kernels to PTX through LLVM's NVPTX back end ----===//
#include "codegen/gpu/NvptxBackend.h"

#include "codegen/gpu/LoopDistribution.h"
#include "codegen/gpu/NvvmLanes.h"

#include "codegen/host/AttentionKernels.h"
#include "codegen/host/SelectionKernels.h"
#include "codegen/host/AttentionMma.h"
#include "codegen/host/HostKernels.h"
#include "codegen/host/KernelSelection.h"
#include "codegen/host/LinearKernels.h"
#include "codegen/host/EngramKernels.h"
#include "codegen/host/FusedKernels.h"
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


namespace csa::codegen {

using namespace nvvm;

namespace {

/// The loops of `fn` its kernel selection marked independent
/// (csa.parallelism; serial when absent, as for a hand-written kernel).
KernelParallelism parallelismOf(func::FuncOp fn) {
  auto attr = fn->getAttrOfType<KernelParallelismAttr>(kKernelParallelismAttr);
  return attr ? attr.getValue() : KernelParallelism::Serial;
}

std::string typeString(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  type.print(os);
  return s;
}

/// A linear form checked against its host kernel within the dot-product
/// tolerance (kernels.json "tolerance"): each output a sum of K / G
/// products of the activation and the weight (with its UE8M0 scales).
void setDotTolerance(PtxKernel &info, const LinearKernelSpec &linear) {
  const bool grouped = linear.experts > 0;
  const bool scaled = linear.format != LinearFormat::BF16 && linear.format != LinearFormat::F32;
  const char *weight = linear.format == LinearFormat::FP4E2M1 ? "e2m1x2"
                       : scaled                              ? "e4m3"
                                                             : "real";
  info.tolerance = "dot";
  info.toleranceTerms = linear.inFeatures / std::max<int64_t>(linear.groups, 1);
  info.toleranceOperands = {"real", weight};
  if (grouped) {
    info.toleranceOperands.insert(info.toleranceOperands.begin() + 1, "expert_id");
    info.toleranceIndexLimit = linear.experts;
  }
  if (scaled)
    info.toleranceOperands.push_back("ue8m0");
  info.toleranceOutput = int64_t(info.toleranceOperands.size());
  info.toleranceOperands.push_back("output");
}

/// Whether `global` starts as zeros (a zero splat, or no initial value).
bool startsAsZeros(memref::GlobalOp global) {
  if (!global.getInitialValueAttr() || global.isUninitialized())
    return true;
  auto init = dyn_cast<DenseElementsAttr>(global.getInitialValueAttr());
  if (!init || !init.isSplat())
    return false;
  return isa<FloatType>(init.getElementType()) ? init.getSplatValue<APFloat>().isPosZero()
                                                : init.getSplatValue<APInt>().isZero();
}

/// The mutable globals body `fn` keeps between launches (the split attention
/// forms' partials and their counters) become its last arguments, each
/// reading its own buffer (kernels.json "state"): the runtime gives every
/// graph lane its own, so launches on two lanes side by side share nothing.
/// A global shared by all launches could not run so (the NaNs of the
/// fortieth session's sequence lanes). One that does not start as zeros (or
/// has no static shape) stays a global: the kernel says "module_state".
SmallVector<BlockArgument> stateGlobalsToArguments(func::FuncOp fn, PtxKernel &info) {
  SmallVector<memref::GlobalOp> globals;
  fn.walk([&](memref::GetGlobalOp get) {
    auto global = SymbolTable::lookupNearestSymbolFrom<memref::GlobalOp>(get, get.getNameAttr());
    if (!global || global.getConstant())
      return;
    if (!startsAsZeros(global) || !global.getType().hasStaticShape() ||
        !global.getType().getLayout().isIdentity() || global.getType().getMemorySpace())
      info.moduleState = true;
    else if (!llvm::is_contained(globals, global))
      globals.push_back(global);
  });
  SmallVector<BlockArgument> args;
  auto module = fn->getParentOfType<ModuleOp>();
  for (memref::GlobalOp global : globals) {
    MemRefType type = global.getType();
    (void)fn.insertArgument(fn.getNumArguments(), type, DictionaryAttr(), fn.getLoc());
    BlockArgument arg = fn.getArgument(fn.getNumArguments() - 1);
    SmallVector<memref::GetGlobalOp> gets;
    fn.walk([&](memref::GetGlobalOp get) {
      if (get.getName() == global.getSymName())
        gets.push_back(get);
    });
    for (memref::GetGlobalOp get : gets) {
      get.replaceAllUsesWith(arg);
      get.erase();
    }
    if (SymbolTable::symbolKnownUseEmpty(global, module))
      global.erase();
    PtxKernel::StateBuffer buffer;
    buffer.dims.assign(type.getShape().begin(), type.getShape().end());
    buffer.elementBytes = int64_t(type.getElementTypeBitWidth() / 8);
    info.state.push_back(std::move(buffer));
    args.push_back(arg);
  }
  return args;
}

} // namespace

LogicalResult lowerKernelsToNvvm(ModuleOp module, const NvptxOptions &options,
                                 std::vector<PtxKernel> &kernels) {
  MLIRContext *context = module.getContext();
  if (!csa::nvptxChipNumber(options.chip))
    return module.emitError() << "unknown NVPTX chip '" << options.chip
                              << "' (expected sm_<number>[a], e.g. sm_90a)";
  // The LLVM conversions of the dialects in the kernels, which
  // convert-gpu-to-nvvm applies; math goes to libdevice through its own
  // patterns (not math-to-llvm's approximate intrinsics).
  DialectRegistry registry;
  registerConvertFuncToLLVMInterface(registry);
  arith::registerConvertArithToLLVMInterface(registry);
  registerConvertMemRefToLLVMInterface(registry);
  cf::registerConvertControlFlowToLLVMInterface(registry);
  context->appendDialectRegistry(registry);
  context->loadDialect<gpu::GPUDialect, NVVM::NVVMDialect, scf::SCFDialect,
                       arith::ArithDialect, memref::MemRefDialect,
                       func::FuncDialect>();
  OpBuilder b(context);
  Location loc = module.getLoc();
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                  b.getUnitAttr());
  b.setInsertionPointToEnd(module.getBody());
  auto target = NVVM::NVVMTargetAttr::get(
      context, /*optLevel=*/3, "nvptx64-nvidia-cuda", options.chip,
      "+ptx" + std::to_string(effectivePtxVersion(options)));
  auto gpuModule = gpu::GPUModuleOp::create(b, loc, "csa_kernels",
                                            b.getArrayAttr({target}));
  // Everything (kernels, their tables) moves into the GPU module.
  SmallVector<Operation *> toMove;
  for (Operation &op : module.getBody()->getOperations())
    if (&op != gpuModule.getOperation())
      toMove.push_back(&op);
  Block *gpuBody = gpuModule.getBody();
  for (Operation *op : toMove)
    op->moveBefore(gpuBody, gpuBody->end());

  SmallVector<func::FuncOp> entries;
  gpuModule.walk([&](func::FuncOp fn) {
    if (fn->hasAttr("llvm.emit_c_interface"))
      entries.push_back(fn);
  });
  // A kernel that calls another (a fused region's parts) runs the callee's
  // whole loop itself: calls go to an untouched copy, `<name>_all`.
  for (func::FuncOp fn : entries) {
    bool called = !SymbolTable::symbolKnownUseEmpty(fn, gpuModule);
    if (!called)
      continue;
    OpBuilder cb(fn);
    auto copy = cast<func::FuncOp>(cb.clone(*fn));
    copy.setSymName((fn.getSymName() + "_all").str());
    copy->removeAttr("llvm.emit_c_interface");
    copy.setPrivate();
    if (failed(SymbolTable::replaceAllSymbolUses(fn, copy.getSymNameAttr(),
                                                 gpuModule)))
      return fn.emitError("cannot redirect the calls of this kernel");
  }
  // Each linear kernel whose tile fits, and each mHC mix-sums kernel (whose
  // own form has a block per sum, for decode), also gets its row-tiled form,
  // `<name>_tiled`.
  constexpr const char *kTiledOf = "csa.tiled_of";
  auto hasRowTiledForm = [&](func::FuncOp fn) {
    if (fn->hasAttr(kHcMixSumsAttr))
      return true;
    std::optional<LinearKernelSpec> spec = linearSpecOf(fn);
    return spec && spec->experts == 0 && linearTileOutputs(*spec, options.tileOutputs) != 0 &&
           options.tileChunk % 32 == 0 && options.tileRows >= 1 &&
           options.tileChunk * options.tileRows * 4 <= kMaxStaticSharedBytes;
  };
  // Linears the tensor-core form takes (LinearMma.h) get it instead,
  // `<name>_mma`, within the dot-product tolerance.
  constexpr const char *kMmaOf = "csa.mma_of";
  auto hasMmaForm = [&](func::FuncOp fn) {
    std::optional<LinearKernelSpec> spec = linearSpecOf(fn);
    return options.linearTensorCores && spec &&
           linearMmaShape(*spec, options.mmaKBlocks, options.mmaFp8).has_value();
  };
  // Sparse attentions in the mma form get their tensor-core kernel,
  // `<name>_tc`, run from kAttentionSplitRows + 1 query rows on (prefill);
  // `<name>` itself is the split form, for decode rows, where the
  // tensor-core blocks walk their chunks one after another (measured on
  // the H200: bench/RESULTS.md, twenty-fourth session).
  constexpr const char *kAttentionMmaOf = "csa.attention_mma_of";
  auto hasAttentionMmaForm = [&](func::FuncOp fn) {
    auto form = fn->getAttrOfType<AttentionFormAttr>(kAttentionFormAttrName);
    auto attention = fn->getAttrOfType<DictionaryAttr>(kSparseAttentionAttr);
    return form && attention && form.getValue() == AttentionForm::Mma &&
           attentionMmaShape(attention.getAs<IntegerAttr>("heads").getInt(),
                             attention.getAs<IntegerAttr>("dim").getInt())
               .has_value();
  };
  // Split-K linears (the form of their op, or the default) get their batch
  // variant, `<name>_rows<R>`, when it fits (LinearSplitK.h).
  constexpr const char *kSplitKRowsOf = "csa.split_k_rows_of";
  auto splitKRowsOf = [&](func::FuncOp fn) -> int64_t {
    std::optional<LinearKernelSpec> spec = linearSpecOf(fn);
    if (options.linearSplitKRows < 2 || !spec)
      return 0;
    bool splitK = options.linearSplitK;
    if (auto form = fn->getAttrOfType<LinearFormAttr>(kLinearFormAttrName))
      splitK = form.getValue() == LinearForm::SplitK;
    std::optional<LinearSplitKShape> shape =
        splitK ? linearSplitKShape(*spec, options.multiprocessors, options.linearSplitKRows,
                                   kMaxStaticSharedBytes)
               : std::nullopt;
    return shape ? shape->rowsPerBlock : 0;
  };
  // Each such kernel gets one replacement form (and split-K linears their
  // batch variant too): a copy named with its suffix, marked with the
  // kernel it replaces.
  for (size_t i = 0, e = entries.size(); i < e; ++i) {
    func::FuncOp fn = entries[i];
    if (const int64_t rows = splitKRowsOf(fn)) {
      OpBuilder cb(context);
      cb.setInsertionPointAfter(fn);
      auto copy = cast<func::FuncOp>(cb.clone(*fn));
      copy.setSymName((fn.getSymName() + "_rows" + std::to_string(rows)).str());
      copy->setAttr(kSplitKRowsOf, fn.getSymNameAttr());
      entries.push_back(copy);
    }
    const char *suffix = nullptr, *of = nullptr;
    if (hasAttentionMmaForm(fn))
      suffix = "_tc", of = kAttentionMmaOf;
    else if (hasMmaForm(fn))
      suffix = "_mma", of = kMmaOf;
    else if (hasRowTiledForm(fn))
      suffix = "_tiled", of = kTiledOf;
    else
      continue;
    OpBuilder cb(context);
    cb.setInsertionPointAfter(fn);
    auto copy = cast<func::FuncOp>(cb.clone(*fn));
    copy.setSymName((fn.getSymName() + suffix).str());
    copy->setAttr(of, fn.getSymNameAttr());
    entries.push_back(copy);
  }
  for (func::FuncOp fn : entries) {
    const std::string name = fn.getSymName().str();
    PtxKernel info;
    info.name = name;
    FunctionType type = fn.getFunctionType();
    for (Type t : type.getInputs())
      info.arguments.push_back(typeString(t));
    // The body becomes a device function; the entry point calls it.
    fn->removeAttr("llvm.emit_c_interface");
    fn.setSymName((name + kKernelBodySuffix).str());
    fn.setPrivate();
    int64_t rowsPerThread = 1;
    // The body waits for the kernels upstream itself (after what it may do
    // before: LinearSplitKLanes::dependencyWait).
    bool bodyWaits = false;
    // Blocks of the kernel that must fit a multiprocessor at once (0: no
    // bound): ptxas then keeps the registers within 64K / (that x threads).
    int64_t minBlocksPerMultiprocessor = 0;
    auto workgroup =
        gpu::AddressSpaceAttr::get(context, gpu::AddressSpace::Workgroup);
    std::optional<LinearKernelSpec> tiled, mma;
    if (auto of = fn->getAttrOfType<StringAttr>(kTiledOf)) {
      tiled = linearSpecOf(fn);
      info.replaces = of.getValue().str();
      fn->removeAttr(kTiledOf);
    }
    if (auto of = fn->getAttrOfType<StringAttr>(kMmaOf)) {
      mma = linearSpecOf(fn);
      info.replaces = of.getValue().str();
      fn->removeAttr(kMmaOf);
    }
    // The split-K batch variant: the split-K form below, R rows a block.
    int64_t splitKRows = 1;
    if (auto of = fn->getAttrOfType<StringAttr>(kSplitKRowsOf)) {
      info.replaces = of.getValue().str();
      std::optional<LinearKernelSpec> spec = linearSpecOf(fn);
      info.minRows = spec && spec->experts > 0 ? options.groupedSplitKRowsMin
                                                : options.linearSplitKRowsMin;
      splitKRows = options.linearSplitKRows;
      fn->removeAttr(kSplitKRowsOf);
    }
    // Linear kernels: a block per (row, block / 32 outputs), a warp per
    // output (the per-output form: the same bits as the host kernel).
    std::optional<LinearKernelSpec> linear =
        tiled || mma ? std::nullopt : linearSpecOf(fn);
    const bool sharedRow = linear && linearNeedsSharedRow(*linear);
    const int64_t block =
        linear ? std::min(options.linearBlockSize, linear->outFeatures * kPartialLanes) : 0;
    const int64_t outputsPerBlock = block / kPartialLanes;
    const int64_t sharedBytes =
        !linear ? 0
                : (sharedRow ? linear->inFeatures / 32 * (32 + kLinearRowPad) * 2 : 0) +
                      outputsPerBlock * linearPartials(*linear) * 4;
    if (linear && (sharedBytes > kMaxStaticSharedBytes ||
                   block % kPartialLanes != 0))
      linear.reset(); // does not fit: the rows rule below
    int64_t rowsArg = -1;
    // Sparse attention: a block per (row, head) when the head dimension is a
    // multiple of 32 (the row_outputs rule: outputs are the heads).
    int64_t attentionHeads = 0, attentionDim = 0;
    auto sharedOf = [&](ArrayRef<int64_t> shape, Type element) {
      return MemRefType::get(shape, element, MemRefLayoutAttrInterface{}, workgroup);
    };
    // Either attention form: a block per (row, head), the heads the outputs.
    auto attentionLaunch = [&](int64_t threads, int64_t sharedBytes) {
      info.launch = "row_outputs";
      info.blockSize = threads;
      info.rowsArgument = 0;
      info.outputs = attentionHeads;
      info.outputsPerBlock = 1;
      info.sharedBytes = sharedBytes;
    };
    if (auto attention = fn->getAttrOfType<DictionaryAttr>(kSparseAttentionAttr)) {
      fn->removeAttr(kSparseAttentionAttr);
      const int64_t dim = attention.getAs<IntegerAttr>("dim").getInt();
      if (dim % 32 == 0) {
        attentionHeads = attention.getAs<IntegerAttr>("heads").getInt();
        attentionDim = dim;
      }
    }
    // Sparse attention's form: its op's csa.attention_form (the kernel
    // selection put it on the kernel), else the option's default.
    AttentionForm attentionForm =
        options.attentionWarpForm ? AttentionForm::Warp : AttentionForm::Head;
    // The blocks a decode row's walk is split among: the form's, else the
    // option's (0: the form's own choice for the GPU).
    int64_t splitsOfForm = options.attentionSplits;
    if (auto form = fn->getAttrOfType<AttentionFormAttr>(kAttentionFormAttrName)) {
      attentionForm = form.getValue();
      if (form.getSplits())
        splitsOfForm = form.getSplits();
      fn->removeAttr(kAttentionFormAttrName);
    }
    // The mma form: its `_tc` kernel from a few rows on, and the op's own
    // kernel the same blocks with the indices split among more of them
    // (decode rows).
    if (attentionForm == AttentionForm::Mma &&
        !(attentionHeads > 0 && attentionMmaShape(attentionHeads, attentionDim)))
      attentionForm = AttentionForm::Split;
    const bool attentionTensorCores = attentionForm == AttentionForm::Mma;
    const bool attentionMmaSplit = attentionTensorCores && !fn->hasAttr(kAttentionMmaOf);
    if (auto of = fn->getAttrOfType<StringAttr>(kAttentionMmaOf)) {
      info.replaces = of.getValue().str();
      info.minRows = kAttentionSplitRows + 1;
      fn->removeAttr(kAttentionMmaOf);
    }
    const bool attentionWarp = attentionForm != AttentionForm::Head;
    const KernelParallelism parallelism = parallelismOf(fn);
    fn->removeAttr(kKernelParallelismAttr);
    // A linear's form: its op's csa.linear_form (the kernel selection put it
    // on the kernel), else the option's default.
    bool splitK = options.linearSplitK;
    // The split-K block's shape: the form's, else the options'.
    int64_t outputsPerBlockOfForm = options.linearOutputsPerBlock,
            outputsInFlightOfForm = options.linearOutputsInFlight;
    if (auto form = fn->getAttrOfType<LinearFormAttr>(kLinearFormAttrName)) {
      splitK = form.getValue() == LinearForm::SplitK;
      if (form.getOutputsPerBlock())
        outputsPerBlockOfForm = form.getOutputsPerBlock();
      if (form.getOutputsInFlight())
        outputsInFlightOfForm = form.getOutputsInFlight();
      fn->removeAttr(kLinearFormAttrName);
    }
    // A linear grouped over experts (MoE decode) has the split-K form or
    // none: the rows rule, a slot a thread in the host kernel's order, which
    // the executor does not use (it launches the experts one by one then).
    if (linear && linear->experts > 0) {
      std::optional<LinearSplitKShape> split = linearSplitKShape(
          *linear, options.multiprocessors, splitKRows, kMaxStaticSharedBytes);
      if (!options.linearSplitK || !split || split->sharedBytes() > kMaxStaticSharedBytes)
        linear.reset();
      splitK = options.linearSplitK;
    }
    // Top-k ranks: a block of 256 threads per row selects by radix (the
    // row_outputs rule with 8 "outputs", the block's warps).
    auto topk = fn->getAttrOfType<DictionaryAttr>(kTopKRankAttr);
    // mHC mix sums: a block per (tile of rows, group of sums), the operands
    // staged in shared memory for the threads that walk the sums.
    auto mixSums = fn->getAttrOfType<DictionaryAttr>(kHcMixSumsAttr);
    HcMixSumsBlockLanes mixLanes;
    int64_t mixHc = 0, mixDim = 0;
    const bool rowTiledMix = mixSums && !info.replaces.empty();
    if (mixSums) {
      mixHc = mixSums.getAs<IntegerAttr>("hc").getInt();
      mixDim = mixSums.getAs<IntegerAttr>("dim").getInt();
      fn->removeAttr(kHcMixSumsAttr);
      mixLanes.threads = 256;
      mixLanes.rowsPerTile = rowTiledMix ? options.tileRows : 1;
      mixLanes.chainsPerBlock = rowTiledMix ? (2 + mixHc) * mixHc + 1 : 1;
      mixLanes.chunk = hcMixSumsChunk(mixHc, mixDim, mixLanes.rowsPerTile,
                                      mixLanes.chainsPerBlock, kMaxStaticSharedBytes);
      if (mixLanes.chunk == 0 ||
          mixLanes.rowsPerTile * mixLanes.chainsPerBlock > mixLanes.threads) {
        if (rowTiledMix)
          return fn.emitError("the row-tiled form of this mix-sums kernel does not fit");
        mixSums = {}; // does not fit: the rows rule below
      }
    }
    // RMS norms: a block per row, the row staged in shared memory.
    auto rmsNorm = fn->getAttrOfType<DictionaryAttr>(kRmsNormAttr);
    if (rmsNorm) {
      fn->removeAttr(kRmsNormAttr);
      if (rmsNorm.getAs<IntegerAttr>("dim").getInt() * 4 + 4 > kMaxStaticSharedBytes)
        rmsNorm = {}; // does not fit: the rows rule below
    }
    if (auto ids = fn->getAttrOfType<DictionaryAttr>(kExpertIdsAttr)) {
      info.expertIdsArgument = ids.getAs<IntegerAttr>("argument").getInt();
      info.expertIdsLimit = ids.getAs<IntegerAttr>("limit").getInt();
      fn->removeAttr(kExpertIdsAttr);
    }
    // Cache appends: a block per row, a byte a thread.
    auto cacheAppend = fn->getAttrOfType<DictionaryAttr>(kCacheAppendAttr);
    if (cacheAppend)
      fn->removeAttr(kCacheAppendAttr);
    // Quantizers: a block per row, a byte of the row a thread.
    auto quantize = fn->getAttrOfType<DictionaryAttr>(kQuantizeRowsAttr);
    numerics::RowFormat quantizeFormat{};
    int64_t quantizeDim = 0, quantizeThreads = 0;
    if (quantize) {
      fn->removeAttr(kQuantizeRowsAttr);
      quantizeFormat = numerics::RowFormat(quantize.getAs<IntegerAttr>("format").getInt());
      quantizeDim = quantize.getAs<IntegerAttr>("dim").getInt();
      quantizeThreads = quantizeRowsBlockThreads(quantizeFormat, quantizeDim);
      if (quantizeThreads == 0)
        quantize = {}; // does not fit: the nest rule below
    }
    // A rope_quantize_store region: the quantizer's block form with the
    // rotation and the cache store folded in (one launch for the parts'
    // three); without a spec or a block form, the one-thread kernel that
    // calls its parts (the executor then runs the parts instead).
    std::optional<RopeQuantizeStoreSpec> ropeQuantizeStore = ropeQuantizeStoreSpecOf(fn);
    fn->removeAttr(kRopeQuantizeStoreAttr);
    int64_t ropeQuantizeStoreThreads = 0;
    if (ropeQuantizeStore) {
      ropeQuantizeStoreThreads =
          quantizeRowsBlockThreads(ropeQuantizeStore->format, ropeQuantizeStore->dim);
      if (ropeQuantizeStoreThreads == 0)
        ropeQuantizeStore.reset();
    }
    // A hc_collapse_norm region: the RMS norm's word form, its words
    // collapsed from the streams (one launch for the parts' two); without the
    // word form, the one-thread kernel that calls its parts (the executor
    // then runs the parts instead).
    auto hcCollapseNorm = fn->getAttrOfType<DictionaryAttr>(kHcCollapseNormAttr);
    if (hcCollapseNorm) {
      fn->removeAttr(kHcCollapseNormAttr);
      if (!rmsNormWordFormFits(hcCollapseNorm.getAs<IntegerAttr>("dim").getInt()))
        hcCollapseNorm = {};
    }
    // Engram's gate: a block per (row, stream), the products staged in
    // shared memory for the thread that adds them.
    auto engramGate = fn->getAttrOfType<DictionaryAttr>(kEngramGateAttr);
    if (engramGate)
      fn->removeAttr(kEngramGateAttr);
    // mHC's Sinkhorn mix: a warp per row, an entry of the matrix a lane.
    auto hcMix = fn->getAttrOfType<DictionaryAttr>(kHcMixAttr);
    if (hcMix) {
      fn->removeAttr(kHcMixAttr);
      const int64_t hc = hcMix.getAs<IntegerAttr>("hc").getInt();
      if (hc * hc > 32)
        hcMix = {}; // more entries than lanes: the rows rule below
    }
    // The block forms with a block of `threads` per row: row_tiles with one
    // row and one "output" a block.
    auto blockPerRow = [&](int64_t threads, int64_t sharedBytes) {
      info.launch = "row_tiles";
      info.blockSize = threads;
      info.rowsArgument = 0;
      info.rowsPerBlock = 1;
      info.outputs = 1;
      info.outputsPerBlock = 1;
      info.sharedBytes = sharedBytes;
    };
    // An RMS norm's block of a row (the norm and the hc_collapse_norm
    // region): the word form's threads, shuffles and warp sums, or the
    // element form's row buffer.
    auto rmsNormLanes = [&](int64_t dim, bool words) {
      RmsNormBlockLanes lanes;
      static_cast<BlockRowLanes &>(lanes) = blockRowLanes(
          words ? (dim / 8 + 31) / 32 * 32 : std::min<int64_t>(256, (dim + 31) / 32 * 32));
      if (words)
        lanes.shuffleXor = shuffleXorLane;
      lanes.sharedRowType = MemRefType::get({words ? lanes.threads / 32 : dim}, b.getF32Type(),
                                            MemRefLayoutAttrInterface{}, workgroup);
      lanes.sharedScaleType = MemRefType::get({1}, b.getF32Type(),
                                              MemRefLayoutAttrInterface{}, workgroup);
      // The tree's partials sit in the row buffer: one a thread.
      lanes.treeSum = lanes.threads <= dim;
      return lanes;
    };
    // Top-k compaction: a block per row, a segment of the row a thread.
    auto compact = fn->getAttrOfType<DictionaryAttr>(kTopKCompactAttr);
    if (compact)
      fn->removeAttr(kTopKCompactAttr);
    // The greedy token: a block per row of logits, a strided share a thread.
    const bool greedy = fn->hasAttr(kGreedyTokenAttr);
    if (greedy)
      fn->removeAttr(kGreedyTokenAttr);
    // Index scores: a block per (row, tile of keys), a thread per (head, key).
    auto indexScore = fn->getAttrOfType<DictionaryAttr>(kIndexScoreAttr);
    if (indexScore) {
      fn->removeAttr(kIndexScoreAttr);
      if (indexScore.getAs<IntegerAttr>("heads").getInt() > 256)
        indexScore = {}; // more heads than the block's threads: the nest rule below
    }
    // MoE routing: a block per row, a thread per expert.
    auto moeRoute = fn->getAttrOfType<DictionaryAttr>(kMoeRouteAttr);
    if (moeRoute) {
      fn->removeAttr(kMoeRouteAttr);
      if (moeRoute.getAs<IntegerAttr>("experts").getInt() > 1024)
        moeRoute = {}; // more experts than a block's threads: the rows rule below
    }
    if (indexScore) {
      const int64_t heads = indexScore.getAs<IntegerAttr>("heads").getInt();
      const int64_t dim = indexScore.getAs<IntegerAttr>("dim").getInt();
      IndexScoreBlockLanes lanes;
      lanes.row = blockX;
      lanes.tile = blockY;
      lanes.tileStride = gridY;
      lanes.thread = threadX;
      lanes.barrier = blockBarrier;
      lanes.keys = std::max<int64_t>(1, 256 / heads);
      // Rows padded by 2 elements: the lanes reading 4 heads' (or 8 keys')
      // element e hit different banks.
      const int64_t padded = dim + 2;
      lanes.sharedQueriesType = MemRefType::get({heads, padded}, b.getBF16Type(),
                                                MemRefLayoutAttrInterface{}, workgroup);
      lanes.sharedKeysType = MemRefType::get({lanes.keys, padded}, b.getBF16Type(),
                                             MemRefLayoutAttrInterface{}, workgroup);
      lanes.sharedHeadsType = MemRefType::get({lanes.keys, heads}, b.getF32Type(),
                                              MemRefLayoutAttrInterface{}, workgroup);
      buildIndexScoreBlockBody(fn, heads, dim, lanes);
      info.launch = "row_tiles";
      info.blockSize = heads * lanes.keys;
      info.rowsArgument = 0;
      info.rowsPerBlock = 1;
      info.outputs = 1;
      info.outputsPerBlock = lanes.keys;
      info.elementDims = {{4, 1}}; // a tile per `keys` columns of the scores
      info.maxTileBlocks = 65535;   // and past CUDA's grid.y, tiles a block
      info.sharedBytes = (heads + lanes.keys) * padded * 2 + lanes.keys * heads * 4;
    } else if (moeRoute) {
      const int64_t experts = moeRoute.getAs<IntegerAttr>("experts").getInt();
      const int64_t topK = moeRoute.getAs<IntegerAttr>("top_k").getInt();
      MoeRouteLanes lanes;
      static_cast<BlockRowLanes &>(lanes) = blockRowLanes((experts + 31) / 32 * 32);
      lanes.sharedScoresType = MemRefType::get({2, experts}, b.getF32Type(),
                                               MemRefLayoutAttrInterface{}, workgroup);
      lanes.sharedIdsType = MemRefType::get({experts + topK + 1}, b.getI32Type(),
                                            MemRefLayoutAttrInterface{}, workgroup);
      buildMoeRouteBlockBody(
          fn, experts, topK,
          float(moeRoute.getAs<FloatAttr>("route_scale").getValueAsDouble()), lanes);
      blockPerRow(lanes.threads, (2 * experts + experts + topK + 1) * 4);
    } else if (greedy) {
      // At decode a row is a block of the grid, so the block is as large as
      // blocks go (a 129280-logit row: 127 loads a thread).
      constexpr int64_t kGreedyThreads = 1024;
      GreedyTokenLanes lanes;
      static_cast<BlockRowLanes &>(lanes) = blockRowLanes(kGreedyThreads);
      lanes.valuesType = MemRefType::get({kGreedyThreads}, b.getF32Type(),
                                         MemRefLayoutAttrInterface{}, workgroup);
      lanes.idsType = MemRefType::get({2 * kGreedyThreads}, b.getI32Type(),
                                      MemRefLayoutAttrInterface{}, workgroup);
      buildGreedyTokenBlockBody(fn, lanes);
      blockPerRow(kGreedyThreads, kGreedyThreads * 12);
    } else if (compact) {
      TopKCompactLanes lanes;
      static_cast<BlockRowLanes &>(lanes) = blockRowLanes(256);
      lanes.offsetsType = MemRefType::get({lanes.threads + 1}, b.getI32Type(),
                                          MemRefLayoutAttrInterface{}, workgroup);
      buildTopKCompactBlockBody(fn, compact.getAs<IntegerAttr>("k").getInt(), lanes);
      blockPerRow(lanes.threads, (lanes.threads + 1) * 4);
    } else if (ropeQuantizeStore) {
      QuantizeRowsBlockLanes lanes;
      static_cast<BlockRowLanes &>(lanes) = blockRowLanes(ropeQuantizeStoreThreads);
      lanes.shuffleXor = shuffleXorLane;
      buildRopeQuantizeStoreBlockBody(fn, *ropeQuantizeStore, lanes);
      blockPerRow(lanes.threads, 0);
    } else if (quantize) {
      QuantizeRowsBlockLanes lanes;
      static_cast<BlockRowLanes &>(lanes) = blockRowLanes(quantizeThreads);
      lanes.shuffleXor = shuffleXorLane;
      buildQuantizeRowsBlockBody(fn, quantizeFormat, quantizeDim, lanes);
      blockPerRow(lanes.threads, 0);
    } else if (cacheAppend) {
      constexpr int64_t kAppendThreads = 128;
      buildCacheAppendBlockBody(fn, cacheAppend.getAs<IntegerAttr>("row_bytes").getInt(),
                                cacheAppend.getAs<IntegerAttr>("window").getInt(), blockX, threadX,
                                kAppendThreads);
      blockPerRow(kAppendThreads, 0);
    } else if (engramGate) {
      EngramGateBlockLanes lanes;
      lanes.row = blockX;
      lanes.stream = blockY;
      lanes.thread = threadX;
      lanes.barrier = blockBarrier;
      const int64_t hc = engramGate.getAs<IntegerAttr>("hc").getInt();
      const int64_t dim = engramGate.getAs<IntegerAttr>("dim").getInt();
      lanes.chunk = std::min<int64_t>(lanes.chunk, (dim + 31) / 32 * 32);
      lanes.sharedProductsType = MemRefType::get({3, lanes.chunk}, b.getF32Type(),
                                                 MemRefLayoutAttrInterface{}, workgroup);
      lanes.sharedGateType = MemRefType::get({1}, b.getF32Type(), MemRefLayoutAttrInterface{},
                                             workgroup);
      buildEngramGateBlockBody(fn, hc, dim,
                               float(engramGate.getAs<FloatAttr>("eps").getValueAsDouble()),
                               lanes);
      info.launch = "row_tiles";
      info.blockSize = lanes.threads;
      info.rowsArgument = 0;
      info.rowsPerBlock = 1;
      info.outputs = hc;
      info.outputsPerBlock = 1;
      info.sharedBytes = 3 * lanes.chunk * 4 + 16;
    } else if (hcMix) {
      HcMixWarpLanes lanes;
      lanes.row = blockX;
      lanes.lane = threadX;
      lanes.shuffle = [](OpBuilder &b, Location loc, Value v, Value src) -> Value {
        return gpu::ShuffleOp::create(b, loc, v, src,
                                      arith::ConstantIntOp::create(b, loc, 32, 32),
                                      gpu::ShuffleMode::IDX)
            .getShuffleResult();
      };
      buildHcMixWarpBody(fn, hcMix.getAs<IntegerAttr>("hc").getInt(),
                         hcMix.getAs<IntegerAttr>("dim").getInt(),
                         hcMix.getAs<IntegerAttr>("iters").getInt(),
                         float(hcMix.getAs<FloatAttr>("eps").getValueAsDouble()),
                         float(hcMix.getAs<FloatAttr>("norm_eps").getValueAsDouble()), lanes);
      blockPerRow(32, 0);
    } else if (hcCollapseNorm) {
      const int64_t hc = hcCollapseNorm.getAs<IntegerAttr>("hc").getInt(),
                    dim = hcCollapseNorm.getAs<IntegerAttr>("dim").getInt();
      const RmsNormBlockLanes lanes = rmsNormLanes(dim, /*words=*/true);
      buildHcCollapseNormWordBody(fn, hc, dim,
                                  hcCollapseNorm.getAs<FloatAttr>("eps").getValueAsDouble(), lanes);
      blockPerRow(lanes.threads, lanes.threads / 32 * 4 + 4);
      // The collapse is the collapse kernel's bits; the norm meets its bound.
      info.tolerance = "norm";
      info.toleranceTerms = dim;
      info.toleranceOperands = {"real", "real", "real", "output"};
      info.toleranceOutput = 3;
    } else if (rmsNorm) {
      const int64_t dim = rmsNorm.getAs<IntegerAttr>("dim").getInt();
      // The word form (a 16-byte word a thread, shuffles, one barrier) where
      // the row is whole words; otherwise the element form.
      const bool words = rmsNormWordFormFits(dim);
      const RmsNormBlockLanes lanes = rmsNormLanes(dim, words);
      buildRmsNormBlockBody(fn, dim,
                            rmsNorm.getAs<FloatAttr>("eps").getValueAsDouble(), lanes);
      blockPerRow(lanes.threads, (words ? lanes.threads / 32 : dim) * 4 + 4);
      if (lanes.treeSum || words)
        info.tolerance = "norm";
      info.toleranceTerms = dim;
      info.toleranceOperands = {"real", "real", "output"};
      info.toleranceOutput = 2;
    } else if (mixSums && !rowTiledMix) {
      // The decode form: a block per (row, sum), the products split over its
      // threads (within the dot-product tolerance, not the host's bits).
      HcMixSumsSplitLanes lanes;
      lanes.row = blockX;
      lanes.sum = blockY;
      lanes.thread = threadX;
      lanes.barrier = blockBarrier;
      lanes.shuffleXor = shuffleXorLane; // the word form where the row is whole words
      lanes.sharedPartialsType = MemRefType::get({lanes.threads}, b.getF32Type(),
                                                 MemRefLayoutAttrInterface{}, workgroup);
      buildHcMixSumsSplitBody(fn, mixHc, mixDim, lanes);
      info.launch = "row_tiles";
      info.blockSize = lanes.threads;
      info.rowsArgument = 0;
      info.rowsPerBlock = 1;
      info.outputs = (2 + mixHc) * mixHc + 1;
      info.outputsPerBlock = 1;
      info.sharedBytes = lanes.threads * 4;
      info.tolerance = "dot";
      info.toleranceTerms = mixHc * mixDim;
      info.toleranceOperands = {"real", "real", "output"};
      info.toleranceOutput = 2;
    } else if (mixSums) {
      mixLanes.rowTile = blockX;
      mixLanes.chainGroup = blockY;
      mixLanes.thread = threadX;
      mixLanes.barrier = blockBarrier;
      mixLanes.sharedWeightType =
          MemRefType::get({mixLanes.chainsPerBlock, mixLanes.chunk + kHcMixSumsRowPad}, b.getF32Type(),
                          MemRefLayoutAttrInterface{}, workgroup);
      mixLanes.sharedStreamsType =
          MemRefType::get({mixLanes.rowsPerTile, mixLanes.chunk + kHcMixSumsRowPad}, b.getF32Type(),
                          MemRefLayoutAttrInterface{}, workgroup);
      buildHcMixSumsBlockBody(fn, mixHc, mixDim, mixLanes);
      info.launch = "row_tiles";
      info.blockSize = mixLanes.threads;
      info.rowsArgument = 0;
      info.rowsPerBlock = mixLanes.rowsPerTile;
      info.outputs = (2 + mixHc) * mixHc + 1;
      info.outputsPerBlock = mixLanes.chainsPerBlock;
      info.sharedBytes =
          (mixLanes.rowsPerTile + mixLanes.chainsPerBlock) * (mixLanes.chunk + kHcMixSumsRowPad) * 4;
      info.minRows = rowTiledMix ? options.tileMinRows : 0;
    } else if (topk && attentionHeads == 0) {
      // A block a row: at decode one row is the whole grid, so the block is
      // as large as blocks go (1024 threads: 0.36 ms a 128K index row on an
      // H100, 1.07 ms with 256).
      constexpr int64_t kTopKThreads = 1024;
      TopKBlockLanes lanes;
      static_cast<BlockRowLanes &>(lanes) = blockRowLanes(kTopKThreads);
      lanes.histType = MemRefType::get({256}, b.getI32Type(), MemRefLayoutAttrInterface{},
                                       workgroup);
      lanes.stateType = MemRefType::get({2}, b.getI64Type(), MemRefLayoutAttrInterface{},
                                        workgroup);
      buildTopKRankBlockBody(fn, topk.getAs<IntegerAttr>("k").getInt(),
                             topk.getAs<BoolAttr>("masked").getValue(), lanes);
      fn->removeAttr(kTopKRankAttr);
      info.launch = "row_outputs";
      info.blockSize = kTopKThreads;
      info.rowsArgument = 0;
      info.outputs = kTopKThreads / 32;
      info.outputsPerBlock = kTopKThreads / 32;
      info.sharedBytes = 256 * 4 + 2 * 8;
    } else if (std::optional<AttentionMmaShape> attentionMma =
                   attentionHeads > 0 && attentionTensorCores
                       ? attentionMmaShape(attentionHeads, attentionDim)
                       : std::nullopt) {
      AttentionMmaLanes lanes;
      lanes.row = blockX;
      lanes.tile = blockY;
      lanes.thread = threadX;
      lanes.barrier = blockBarrier;
      lanes.mma = mmaBf16;
      lanes.shuffleXor = shuffleXorLane;
      lanes.sharedRowsType = sharedOf({kAttentionMmaChunk, attentionMma->rowWords()},
                                      b.getI32Type());
      lanes.sharedScoresType =
          sharedOf({kAttentionMmaHeads, kAttentionMmaChunk + 4}, b.getF32Type());
      lanes.sharedIndexType = sharedOf({kAttentionMmaChunk}, b.getI32Type());
      if (attentionMmaSplit) {
        // blockIdx.y = tile x splits + split.
        const int64_t splits = splitsOfForm > 0
                                   ? splitsOfForm
                                   : attentionMmaSplits(*attentionMma, options.multiprocessors);
        lanes.splits = splits;
        lanes.splitRows = kAttentionSplitRows;
        SplitGridLanes grid = splitGridLanes(splits);
        lanes.tile = grid.outer;
        lanes.split = grid.split;
        lanes.fence = grid.fence;
      }
      buildSparseAttentionMmaBody(fn, *attentionMma, lanes);
      // A block per (row, 16 heads, channel slice[, slice of the indices]).
      attentionLaunch(kAttentionMmaThreads, attentionMma->sharedBytes());
      info.outputs = attentionMma->blocksPerRow() * lanes.splits;
    } else if (attentionHeads > 0 && attentionWarp &&
               attentionWarpSharedBytes(AttentionWarpLanes{}, attentionDim) <=
                   kMaxStaticSharedBytes) {
      AttentionWarpLanes lanes;
      lanes.row = blockX;
      lanes.head = blockY;
      lanes.lane = threadX;
      if (attentionForm == AttentionForm::Split) {
        // blockIdx.y = head x splits + split.
        const int64_t splits = splitsOfForm > 0
                                   ? splitsOfForm
                                   : attentionSplits(attentionHeads, options.multiprocessors);
        lanes.splits = splits;
        lanes.splitRows = kAttentionSplitRows;
        SplitGridLanes grid = splitGridLanes(splits);
        lanes.head = grid.outer;
        lanes.split = grid.split;
        lanes.fence = grid.fence;
      }
      lanes.barrier = blockBarrier;
      lanes.shuffleXor = shuffleXorLane;
      const int64_t warps = lanes.threads / 32;
      lanes.sharedScoresType = sharedOf({lanes.chunk}, b.getF32Type());
      lanes.sharedIndexType = sharedOf({lanes.chunk}, b.getI32Type());
      lanes.sharedReduceType = sharedOf({2 * warps}, b.getF32Type());
      lanes.sharedAccType = sharedOf({warps, attentionDim}, b.getF32Type());
      buildSparseAttentionWarpBody(fn, attentionHeads, attentionDim, lanes);
      attentionLaunch(lanes.threads, attentionWarpSharedBytes(lanes, attentionDim));
      info.outputs = attentionHeads * lanes.splits;
    } else if (attentionHeads > 0) {
      AttentionHeadLanes lanes;
      lanes.row = blockX;
      lanes.head = blockY;
      lanes.lane = threadX;
      lanes.barrier = blockBarrier;
      lanes.threads = attentionHeadThreads(attentionDim);
      lanes.sharedScoresType = sharedOf({lanes.chunk}, b.getF32Type());
      lanes.sharedIndexType = sharedOf({lanes.chunk}, b.getI32Type());
      lanes.sharedProbsType = sharedOf({64}, b.getF32Type());
      lanes.sharedQueryType = sharedOf({attentionDim}, b.getF32Type());
      buildSparseAttentionHeadBody(fn, attentionHeads, attentionDim, lanes);
      attentionLaunch(lanes.threads, (2 * lanes.chunk + 64 + attentionDim) * 4);
    } else if (mma) {
      LinearMmaShape shape = *linearMmaShape(*mma, options.mmaKBlocks, options.mmaFp8);
      shape.prefetch = options.mmaPrefetch;
      LinearMmaLanes lanes;
      lanes.rowTile = blockX;
      lanes.outputTile = blockY;
      lanes.thread = threadX;
      lanes.barrier = blockBarrier;
      lanes.mma = mmaBf16;
      lanes.mmaE4m3 = mmaE4m3;
      lanes.e4m3CodePair = e4m3CodePair;
      lanes.e4m3PairToF32 = e4m3PairToF32;
      lanes.e4m3RoundPair = e4m3RoundPair;
      lanes.shuffleXor = shuffleXorLane;
      lanes.sharedType = MemRefType::get({shape.sharedBytes()}, b.getI8Type(),
                                         MemRefLayoutAttrInterface{}, workgroup);
      buildLinearMmaBody(fn, *mma, shape, lanes);
      // The E4M3 variant's FP4 tiles took 132 registers (one 256-thread
      // block a multiprocessor); two blocks a multiprocessor hide each
      // other's barriers and loads.
      if (shape.fp8)
        minBlocksPerMultiprocessor = 2;
      // The grouped form: a block per (expert, output tile), whatever the
      // rows; it replaces the grouped kernel from kGroupedMmaMinSlots slots
      // (the length of the expert ids, argument 1) on, for both
      // projections alike (x has the tokens' rows in one, the slots' in the
      // other).
      info.launch = shape.grouped ? "expert_tiles" : "row_tiles";
      info.experts = shape.grouped ? mma->experts : 0;
      info.blockSize = shape.threads();
      info.rowsArgument = shape.grouped ? 1 : 0;
      info.rowsPerBlock = shape.rowsPerTile;
      info.outputs = mma->outFeatures;
      info.outputsPerBlock = shape.outputsPerTile;
      info.sharedBytes = shape.sharedBytes();
      info.minRows = shape.grouped ? options.groupedMmaMinSlots : options.tileMinRows;
      setDotTolerance(info, *mma);
    } else if (tiled) {
      LinearTileLanes lanes;
      lanes.rowTile = blockX;
      lanes.outputTile = blockY;
      lanes.lane = threadX;
      lanes.barrier = blockBarrier;
      lanes.rowsPerTile = options.tileRows;
      lanes.outputsPerTile = linearTileOutputs(*tiled, options.tileOutputs);
      // No more shared memory than the group's K needs (in 32-blocks).
      const int64_t kg = tiled->inFeatures / std::max<int64_t>(tiled->groups, 1);
      lanes.chunk = std::min(options.tileChunk, (kg + 31) / 32 * 32);
      lanes.sharedActType =
          MemRefType::get({lanes.chunk, lanes.rowsPerTile}, b.getF32Type(),
                          MemRefLayoutAttrInterface{}, workgroup);
      buildLinearTiledBody(fn, *tiled, lanes);
      info.launch = "row_tiles";
      info.blockSize = lanes.outputsPerTile;
      info.rowsArgument = 0;
      info.rowsPerBlock = lanes.rowsPerTile;
      info.outputs = tiled->outFeatures;
      info.outputsPerBlock = lanes.outputsPerTile;
      info.sharedBytes = lanes.chunk * lanes.rowsPerTile * 4;
      info.minRows = options.tileMinRows;
    } else if (std::optional<LinearSplitKShape> split =
                   linear && splitK ? linearSplitKShape(*linear, options.multiprocessors,
                                                        splitKRows, kMaxStaticSharedBytes)
                                    : std::nullopt;
               split && split->sharedBytes() <= kMaxStaticSharedBytes) {
      // A chosen number of outputs a block (more blocks, more loads in
      // flight at one row), where it keeps a block's outputs in one group.
      if (const int64_t o = outputsPerBlockOfForm; o > 0) {
        const int64_t g = std::max<int64_t>(linear->groups, 1);
        const int64_t own = split->outputsPerBlock;
        if (g == 1 || (linear->outFeatures / g) % o == 0)
          split->outputsPerBlock = o;
        if (split->sharedBytes() > kMaxStaticSharedBytes)
          split->outputsPerBlock = own; // its partials would not fit
      }
      const int64_t partialRows = split->rowsPerBlock * split->outputsPerBlock;
      LinearSplitKLanes lanes;
      lanes.row = blockX;
      lanes.outputTile = blockY;
      lanes.thread = threadX;
      lanes.barrier = blockBarrier;
      lanes.e4m3PairToF32 = e4m3PairToF32;
      lanes.e2m1ThroughF16 = true;
      lanes.e2m1ThroughE4m3 = options.linearFp4ThroughE4m3;
      lanes.e4m3RoundPair = e4m3RoundPair;
      if (options.linearPrefetchL2) {
        lanes.prefetchL2 = prefetchL2;
        lanes.dependencyWait = dependencyWait;
        bodyWaits = true;
      }
      lanes.sharedPartialsType = MemRefType::get({partialRows, split->threads},
                                                 b.getF32Type(), MemRefLayoutAttrInterface{},
                                                 workgroup);
      lanes.sharedSumsType = MemRefType::get({partialRows, kSplitKParts},
                                             b.getF32Type(), MemRefLayoutAttrInterface{},
                                             workgroup);
      if (split->gathered)
        lanes.sharedListType = MemRefType::get({split->threads + 1}, b.getI32Type(),
                                               MemRefLayoutAttrInterface{}, workgroup);
      split->outputsInFlight = outputsInFlightOfForm > 0 ? outputsInFlightOfForm
                                                         : linearSplitKOutputsInFlight(*split);
      buildLinearSplitKBody(fn, *linear, *split, lanes);
      const bool grouped = linear->experts > 0;
      // Gathered: a block per (expert, output tile), like the grouped
      // tensor-core form; rows_argument (the expert ids) is what min_rows
      // compares, in slots.
      info.launch = split->gathered ? "expert_tiles" : "row_tiles";
      info.experts = split->gathered ? linear->experts : 0;
      info.blockSize = split->threads;
      info.rowsArgument = grouped ? 1 : 0; // the slots' expert ids
      info.rowsPerBlock = split->rowsPerBlock;
      info.outputs = linear->outFeatures;
      info.outputsPerBlock = split->outputsPerBlock;
      info.sharedBytes = split->sharedBytes();
      setDotTolerance(info, *linear);
    } else if (linear) {
      LinearLanes lanes;
      lanes.row = blockX;
      lanes.firstOutput = [outputsPerBlock](OpBuilder &b, Location loc) -> Value {
        return arith::MulIOp::create(b, loc, blockY(b, loc),
                                     arith::ConstantIndexOp::create(b, loc, outputsPerBlock));
      };
      lanes.lane = threadX;
      lanes.lanes = [](OpBuilder &b, Location loc) -> Value {
        return gpu::BlockDimOp::create(b, loc, gpu::Dimension::x);
      };
      lanes.barrier = blockBarrier;
      if (sharedRow)
        lanes.sharedRowType =
            MemRefType::get({linear->inFeatures / 32 * (32 + kLinearRowPad)}, b.getBF16Type(),
                            MemRefLayoutAttrInterface{}, workgroup);
      lanes.sharedPartialsType = MemRefType::get(
          {outputsPerBlock, linearPartials(*linear)}, b.getF32Type(),
          MemRefLayoutAttrInterface{}, workgroup);
      buildLinearPerOutputBody(fn, *linear, lanes);
      info.launch = "row_outputs";
      info.blockSize = block;
      info.rowsArgument = 0;
      info.outputs = linear->outFeatures;
      info.outputsPerBlock = outputsPerBlock;
      info.sharedBytes = sharedBytes;
    } else if (int64_t elementsPerRow = 0;
               parallelism == KernelParallelism::Nest &&
               (rowsArg = distributeElements(fn, elementsPerRow,
                                             info.elementDims)) >= 0) {
      info.launch = "row_elements";
      info.blockSize = options.blockSize;
      info.rowsArgument = rowsArg;
      info.elementsPerRow = elementsPerRow;
    } else if (int64_t channels = 0;
               parallelism == KernelParallelism::Channels &&
               (channels = distributeChannels(fn)) > 0) {
      info.launch = "channels";
      info.blockSize = std::min<int64_t>(options.blockSize, channels);
      info.outputs = channels;
    } else if ((parallelism == KernelParallelism::Rows ||
                parallelism == KernelParallelism::Nest) &&
               (rowsArg = distributeRows(fn, rowsPerThread)) >= 0) {
      info.launch = "rows";
      info.blockSize = options.blockSize;
      info.rowsArgument = rowsArg;
      info.rowsPerThread = rowsPerThread;
    } else {
      singleThread(fn);
      info.launch = "single";
      info.blockSize = 1;
    }
    SmallVector<Type> params(type.getInputs());
    info.statusParameter = !type.getResults().empty();
    // The body's own arguments: the kernel's, then its workgroup buffers.
    const unsigned bodyInputs = fn.getNumArguments();
    SmallVector<BlockArgument> stateArgs = stateGlobalsToArguments(fn, info);
    auto status = MemRefType::get({1}, b.getI32Type());
    if (info.statusParameter) {
      params.push_back(status);
      info.arguments.push_back(typeString(status));
    }
    for (BlockArgument a : stateArgs)
      params.push_back(a.getType());
    OpBuilder kb(context);
    kb.setInsertionPointAfter(fn);
    auto kernel = gpu::GPUFuncOp::create(kb, fn.getLoc(), name,
                                         kb.getFunctionType(params, {}));
    kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), kb.getUnitAttr());
    if (minBlocksPerMultiprocessor > 0) {
      kernel->setAttr("nvvm.maxntid", kb.getDenseI32ArrayAttr({int32_t(info.blockSize), 1, 1}));
      kernel->setAttr("nvvm.minctasm", kb.getI32IntegerAttr(int32_t(minBlocksPerMultiprocessor)));
    }
    if (rowsArg >= 0)
      kernel->setAttr("csa.rows_argument", kb.getI64IntegerAttr(rowsArg));
    Block &kbody = kernel.getBody().front();
    kb.setInsertionPointToStart(&kbody);
    SmallVector<Value> args(kbody.getArguments().take_front(type.getNumInputs()));
    // The body's extra arguments (the linear form's shared buffers) are the
    // kernel's workgroup memory; its state buffers the kernel's last
    // parameters.
    const unsigned firstState = type.getNumInputs() + (info.statusParameter ? 1 : 0);
    for (Type t : fn.getFunctionType().getInputs().slice(type.getNumInputs(),
                                                         bodyInputs - type.getNumInputs()))
      args.push_back(kernel.addWorkgroupAttribution(t, fn.getLoc()));
    for (size_t i = 0; i < stateArgs.size(); ++i)
      args.push_back(kbody.getArgument(unsigned(firstState + i)));
    // Programmatic dependent launch: the kernel waits for the grids it
    // depends on (and their memory) before anything else, then lets the
    // next kernel's blocks be scheduled, so that they are resident, waiting
    // here, when this one ends (the launch gap between two small kernels of
    // a decode step). Both are no-ops for a launch without a programmatic
    // dependency (runtime/cuda: LaunchGraphOptions::programmatic).
    if (!bodyWaits)
      dependencyWait(kb, fn.getLoc());
    auto call = func::CallOp::create(kb, fn.getLoc(), fn, args);
    if (info.statusParameter) {
      Value gid = globalThreadId(kb, fn.getLoc());
      Value zero = arith::ConstantIndexOp::create(kb, fn.getLoc(), 0);
      Value first = arith::CmpIOp::create(kb, fn.getLoc(),
                                          arith::CmpIPredicate::eq, gid, zero);
      auto guard = scf::IfOp::create(kb, fn.getLoc(), first, false);
      OpBuilder g = OpBuilder::atBlockBegin(guard.thenBlock());
      memref::StoreOp::create(g, fn.getLoc(), call.getResult(0),
                              kbody.getArgument(type.getNumInputs()), ValueRange{zero});
    }
    gpu::ReturnOp::create(kb, fn.getLoc());
    // Parameters after descriptor expansion (MLIR's calling convention).
    for (Type t : params) {
      if (auto m = dyn_cast<MemRefType>(t)) {
        info.params.push_back("ptr"); // allocated
        info.params.push_back("ptr"); // aligned
        info.params.push_back("i64"); // offset
        for (int64_t i = 0; i < 2 * m.getRank(); ++i)
          info.params.push_back("i64"); // sizes, strides
      } else if (t.isInteger(64) || t.isIndex()) {
        info.params.push_back("i64");
      } else if (t.isInteger(32)) {
        info.params.push_back("i32");
      } else if (t.isF32()) {
        info.params.push_back("f32");
      } else {
        info.params.push_back(typeString(t));
      }
    }
    kernels.push_back(std::move(info));
  }

  // math.sqrt would become libdevice's __nv_sqrtf, which NVVMReflect turns
  // into sqrt.approx.f32 (and 1/sqrt into rsqrt.approx): the NVVM intrinsic
  // is sqrt.rn.f32, the correctly rounded square root the host's sqrtss
  // computes. (convert-gpu-to-nvvm would send llvm.intr.sqrt to libdevice.)
  WalkResult sqrtWalk = gpuModule.walk([&](math::SqrtOp op) {
    if (!op.getType().isF32())
      return WalkResult(op.emitError("csa kernels take f32 square roots only"));
    OpBuilder sb(op);
    auto call = LLVM::CallIntrinsicOp::create(
        sb, op.getLoc(), op.getType(), sb.getStringAttr("llvm.nvvm.sqrt.rn.f"),
        ValueRange{op.getOperand()});
    op.replaceAllUsesWith(call.getResult(0));
    op.erase();
    return WalkResult::advance();
  });
  if (sqrtWalk.wasInterrupted())
    return failure();
  PassManager pm(context);
  OpPassManager &inGpu = pm.nest<gpu::GPUModuleOp>();
  inGpu.addPass(createSCFToControlFlowPass());
  ConvertGpuOpsToNVVMOpsOptions nvvm;
  nvvm.indexBitwidth = 64;
  inGpu.addPass(createConvertGpuOpsToNVVMOps(nvvm));
  inGpu.addPass(createReconcileUnrealizedCastsPass());
  if (failed(pm.run(module)))
    return failure();
  // Workgroup buffers start on 16 bytes: LLVM's load/store vectorizer turns
  // a form's unrolled shared reads into 16-byte ld.shared.v4 where the
  // offsets allow, and a buffer declared at 4 bytes need not be placed on 16
  // (a second buffer at an odd float offset faulted: misaligned address).
  gpuModule.walk([&](LLVM::GlobalOp global) {
    if (global.getAddrSpace() == 3 && global.getAlignment().value_or(0) < 16)
      global.setAlignment(16);
  });
  return checkNvvmForChip(module, options.chip);
}

std::string nvptxOptionsProblem(const NvptxOptions &options) {
  const int64_t block = options.linearBlockSize;
  if (block < 32 || block > 1024 || block % 32 != 0)
    return "linear-block must be a multiple of 32 from 32 to 1024, got " +
           std::to_string(block);
  if (options.linearOutputsPerBlock < 0 || options.linearOutputsPerBlock > 64)
    return "linear-outputs-per-block must be from 1 to 64 (0: the shape's own), got " +
           std::to_string(options.linearOutputsPerBlock);
  if (options.linearOutputsInFlight < 0 || options.linearOutputsInFlight > 16)
    return "linear-outputs-in-flight must be from 0 (the default's choice) to 16, got " +
           std::to_string(options.linearOutputsInFlight);
  if (options.linearSplitKRows < 1 || options.linearSplitKRows > 16 ||
      (options.linearSplitKRows & (options.linearSplitKRows - 1)) != 0)
    return "linear-split-k-rows must be a power of two from 1 (none) to 16, got " +
           std::to_string(options.linearSplitKRows);
  if (options.linearSplitKRowsMin < 2)
    return "linear-split-k-rows-min must be at least 2, got " +
           std::to_string(options.linearSplitKRowsMin);
  if (options.groupedSplitKRowsMin < 1)
    return "grouped-split-k-rows-min must be at least 1, got " +
           std::to_string(options.groupedSplitKRowsMin);
  if (options.attentionSplits < 0 || options.attentionSplits > 16)
    return "attention-splits must be from 1 to 16 (0: the form's own choice), got " +
           std::to_string(options.attentionSplits);
  if (options.mmaKBlocks < 1 || options.mmaKBlocks > 8 ||
      (options.mmaKBlocks & (options.mmaKBlocks - 1)) != 0)
    return "mma-k-blocks must be 1, 2, 4 or 8, got " + std::to_string(options.mmaKBlocks);
  if (options.tileMinRows < 1 || options.tileMinRows > 4096)
    return "tile-min-rows must be from 1 to 4096, got " + std::to_string(options.tileMinRows);
  if (options.groupedMmaMinSlots < 1 || options.groupedMmaMinSlots > (int64_t(1) << 20))
    return "grouped-mma-min-slots must be from 1 to 1048576, got " +
           std::to_string(options.groupedMmaMinSlots);
  return "";
}

} // namespace csa::codegen

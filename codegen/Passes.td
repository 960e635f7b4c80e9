//===- Passes.td - csa code generation passes --------------*- tablegen -*-===//
//
// The passes that turn the tiled graph into kernels: they wrap the host and
// NVPTX back ends so that csa-opt runs the same lowering csa-compile does
// (docs/pipeline.md). Listed in pipeline order.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_PASSES_TD
#define CSA_CODEGEN_PASSES_TD

include "mlir/Pass/PassBase.td"

def SelectHostKernels : Pass<"csa-select-host-kernels", "::mlir::ModuleOp"> {
  let summary = "Replace an expanded (or fused, tiled) graph by the host "
                "kernels it calls";
  let description = [{
    Builds the CPU kernel of every primitive op of the graph (linear FP8/FP4/
    BF16, row formats, sparse attention, indexer, HSI, top-k, compressor,
    mHC, MoE, Engram; codegen/host) as `func.func`s on memrefs, and replaces
    the module's contents by them: the result is csa-compile's `host` stage
    (`host.mlir` in a `--dump-dir`). The plan of kernel calls that binds the
    graph's values to these kernels is not IR; csa-compile writes it into the
    artifact (`plan.json`). Graph-level `csa.attention` left in the input is
    an error: run csa-graph-to-expanded first.

    Example:
    ```
    csa-opt tiled.mlir --csa-select-host-kernels -o host.mlir
    ```
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::math::MathDialect", "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect", "::mlir::LLVM::LLVMDialect"];
}

def LowerKernelsToNvvm : Pass<"csa-lower-kernels-to-nvvm", "::mlir::ModuleOp"> {
  let summary = "Move the host kernels into a gpu.module mapped to threads "
                "and lower them to NVVM";
  let description = [{
    The NVPTX target (codegen/gpu): every kernel of a `host`-stage module is
    moved into a `gpu.module` for `chip`, mapped to threads by its launch
    form, and lowered through the gpu, NVVM and LLVM dialects; the NVVM ops
    the chip lacks are rejected (csa-check-nvvm-target). The result is
    csa-compile's `gpu` stage (`--emit=gpu`, `gpu.mlir` in a `--dump-dir`),
    which `--emit=ptx` translates to PTX with LLVM's NVPTX back end.

    Example:
    ```
    csa-opt host.mlir --csa-lower-kernels-to-nvvm='chip=sm_90a' -o gpu.mlir
    ```
  }];
  let dependentDialects = [
    "::mlir::gpu::GPUDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::LLVM::LLVMDialect"];
  let options = [
    Option<"chip", "chip", "std::string",
           /*default=*/"::csa::codegen::NvptxOptions{}.chip",
           "The NVPTX chip">,
    Option<"ptxVersion", "ptx-version", "int",
           /*default=*/"::csa::codegen::NvptxOptions{}.ptxVersion",
           "PTX ISA version times 10">,
    Option<"linearBlock", "linear-block", "int64_t",
           /*default=*/"::csa::codegen::NvptxOptions{}.linearBlockSize",
           "The most threads of a per-output linear kernel's block">,
    Option<"linearSplitK", "linear-split-k", "bool",
           /*default=*/"::csa::codegen::NvptxOptions{}.linearSplitK",
           "Linears in the split-K form (within the dot-product tolerance) "
           "where K allows; false: the per-output form (the host's bits)">,
    Option<"attentionWarpForm", "attention-warp-form", "bool",
           /*default=*/"::csa::codegen::NvptxOptions{}.attentionWarpForm",
           "Sparse attention in the warp form (within the tolerance "
           "contract); false: the head form (the host's bits)">,
    Option<"linearTensorCores", "linear-tensor-cores", "bool",
           /*default=*/"::csa::codegen::NvptxOptions{}.linearTensorCores",
           "Prefill linears on tensor cores (mma.sync, within the dot-product "
           "tolerance) where their format and shape allow; false: the "
           "row-tiled form (the host's bits)">,
    Option<"mmaKBlocks", "mma-k-blocks", "int64_t",
           /*default=*/"::csa::codegen::NvptxOptions{}.mmaKBlocks",
           "The tensor-core linears' 32-blocks of K staged between two "
           "barriers, at most (1, 2, 4 or 8; the same bits)">,
    Option<"mmaPrefetch", "mma-prefetch", "bool",
           /*default=*/"::csa::codegen::NvptxOptions{}.mmaPrefetch",
           "The tensor-core linears issue a stage's global loads one stage "
           "ahead (the same bits)">,
    Option<"mmaFp8", "mma-fp8", "bool",
           /*default=*/"::csa::codegen::NvptxOptions{}.mmaFp8",
           "The tensor-core FP8/FP4 linears stage E4M3 codes and multiply "
           "them with mma.m16n8k32 e4m3 (within the dot-product tolerance)">,
    Option<"tileMinRows", "tile-min-rows", "int64_t",
           /*default=*/"::csa::codegen::NvptxOptions{}.tileMinRows",
           "The fewest rows the row-tiled and tensor-core forms replace the "
           "decode forms from">,
    Option<"groupedMmaMinSlots", "grouped-mma-min-slots", "int64_t",
           /*default=*/"::csa::codegen::NvptxOptions{}.groupedMmaMinSlots",
           "The fewest slots (rows x experts a row) the routed experts' "
           "tensor-core grouped form replaces the split-K grouped form from">,
    Option<"linearFp4ThroughE4m3", "linear-fp4-through-e4m3", "bool",
           /*default=*/"::csa::codegen::NvptxOptions{}.linearFp4ThroughE4m3",
           "Split-K FP4 linears decode weights through E4M3 bytes; false: "
           "through f16 bit patterns (both exact)">,
    Option<"linearPrefetchL2", "linear-prefetch-l2", "bool",
           /*default=*/"::csa::codegen::NvptxOptions{}.linearPrefetchL2",
           "Split-K linears prefetch a block's weight rows into L2 first "
           "(an ungrouped one before it waits for the kernel upstream)">,
  ];
}

#endif // CSA_CODEGEN_PASSES_TD

//===- Passes.h - csa code generation passes and pipelines ------*- C++ -*-===//
#ifndef CSA_CODEGEN_PASSES_H
#define CSA_CODEGEN_PASSES_H

#include "codegen/gpu/NvptxBackend.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace csa::codegen {

#define GEN_PASS_DECL
#include "codegen/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "codegen/Passes.h.inc"

/// What csa-host-pipeline and csa-nvptx-pipeline take: the stage pipelines'
/// options (target host) and the NVPTX lowering's.
struct KernelPipelineOptions : StagePipelineOptions {
  std::string chip = NvptxOptions{}.chip;
  int ptxVersion = NvptxOptions{}.ptxVersion;
  int64_t linearBlock = NvptxOptions{}.linearBlockSize;
};

/// graph -> host: csa-graph-to-tiled (target host), csa-select-host-kernels.
void buildHostPipeline(mlir::OpPassManager &pm,
                       const KernelPipelineOptions &options);
/// graph -> gpu: csa-host-pipeline, then csa-lower-kernels-to-nvvm.
void buildNvptxPipeline(mlir::OpPassManager &pm,
                        const KernelPipelineOptions &options);

/// csa-host-pipeline's options.
struct HostPipelineCliOptions
    : public mlir::PassPipelineOptions<HostPipelineCliOptions> {
  CSA_REPLAY_PIPELINE_OPTIONS
  CSA_FUSE_PIPELINE_OPTIONS
  Option<int64_t> rows{
      *this, "rows",
      llvm::cl::desc("Rows per tile of the host matrix products; 0: 8"),
      llvm::cl::init(0)};
  Option<std::string> linearForm{
      *this, "linear-form",
      llvm::cl::desc("GPU form of the linears: split_k or per_output"),
      llvm::cl::init("split_k")};
  KernelPipelineOptions get() const;
};
/// csa-nvptx-pipeline's options.
struct NvptxPipelineCliOptions
    : public mlir::PassPipelineOptions<NvptxPipelineCliOptions> {
  CSA_REPLAY_PIPELINE_OPTIONS
  CSA_FUSE_PIPELINE_OPTIONS
  Option<int64_t> rows{
      *this, "rows",
      llvm::cl::desc("Rows per tile of the host matrix products; 0: 8"),
      llvm::cl::init(0)};
  Option<std::string> chip{*this, "chip", llvm::cl::desc("The NVPTX chip"),
                           llvm::cl::init(NvptxOptions{}.chip)};
  Option<int> ptxVersion{*this, "ptx-version",
                         llvm::cl::desc("PTX ISA version times 10"),
                         llvm::cl::init(NvptxOptions{}.ptxVersion)};
  Option<int64_t> linearBlock{
      *this, "linear-block",
      llvm::cl::desc("The most threads of a per-output linear's block"),
      llvm::cl::init(NvptxOptions{}.linearBlockSize)};
  Option<std::string> linearForm{
      *this, "linear-form",
      llvm::cl::desc("GPU form of the linears: split_k or per_output"),
      llvm::cl::init("split_k")};
  KernelPipelineOptions get() const;
};

/// Registers every csa pipeline: the stage pipelines (passes/Pipelines.h),
/// csa-host-pipeline and csa-nvptx-pipeline.
void registerCsaPipelines();

} // namespace csa::codegen

#endif // CSA_CODEGEN_PASSES_H

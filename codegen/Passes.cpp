//===- Passes.cpp - csa code generation passes and pipelines --------------===//
//
// Thin passes over the back ends' entry points (selectHostKernels,
// lowerKernelsToNvvm), so that the kernel stages are reachable from a pass
// pipeline as well as from csa-compile.
//
//===----------------------------------------------------------------------===//
#include "codegen/Passes.h"

#include "codegen/gpu/NvptxBackend.h"
#include "codegen/host/KernelSelection.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace csa::codegen {

#define GEN_PASS_DEF_SELECTHOSTKERNELS
#define GEN_PASS_DEF_LOWERKERNELSTONVVM
#include "codegen/Passes.h.inc"

namespace {

struct SelectHostKernelsPass
    : public impl::SelectHostKernelsBase<SelectHostKernelsPass> {
  void runOnOperation() override {
    ModuleOp graph = getOperation();
    OwningOpRef<ModuleOp> kernels = ModuleOp::create(graph.getLoc());
    {
      auto selected = selectHostKernels(graph, *kernels);
      if (!selected) {
        // Errors already emitted on the ops need no summary on the module.
        llvm::handleAllErrors(
            selected.takeError(), [](const DiagnosedSelectionError &) {},
            [&](const llvm::ErrorInfoBase &e) { graph.emitError() << e.message(); });
        return signalPassFailure();
      }
    }
    // The module becomes the kernels module: its ops, its attributes (none of
    // the graph's csa.* module attributes stay) and no symbol name.
    graph.getBody()->clear();
    graph.getBody()->getOperations().splice(
        graph.getBody()->end(), kernels->getBody()->getOperations());
    graph->setDiscardableAttrs(kernels->getOperation()->getDiscardableAttrDictionary());
    graph.setSymNameAttr(kernels->getSymNameAttr());
    graph.setSymVisibilityAttr(kernels->getSymVisibilityAttr());
  }
};

struct LowerKernelsToNvvmPass
    : public impl::LowerKernelsToNvvmBase<LowerKernelsToNvvmPass> {
  using Base::Base;
  void runOnOperation() override {
    NvptxOptions options;
    options.chip = chip;
    options.ptxVersion = ptxVersion;
    options.linearBlockSize = linearBlock;
    options.linearSplitK = linearSplitK;
    options.attentionWarpForm = attentionWarpForm;
    options.linearFp4ThroughE4m3 = linearFp4ThroughE4m3;
    options.linearTensorCores = linearTensorCores;
    options.tileMinRows = tileMinRows;
    options.groupedMmaMinSlots = groupedMmaMinSlots;
    options.mmaKBlocks = mmaKBlocks;
    options.mmaPrefetch = mmaPrefetch;
    options.mmaFp8 = mmaFp8;
    options.linearPrefetchL2 = linearPrefetchL2;
    if (std::string problem = nvptxOptionsProblem(options); !problem.empty()) {
      getOperation().emitError() << "csa-lower-kernels-to-nvvm: " << problem;
      return signalPassFailure();
    }
    std::vector<PtxKernel> launchRules;
    if (failed(lowerKernelsToNvvm(getOperation(), options, launchRules)))
      signalPassFailure();
  }
};

} // namespace

KernelPipelineOptions HostPipelineCliOptions::get() const {
  KernelPipelineOptions o;
  copyReplayOptions(*this, o);
  copyFuseOptions(*this, o);
  o.rows = rows;
  o.linearForm = linearForm;
  return o;
}

KernelPipelineOptions NvptxPipelineCliOptions::get() const {
  KernelPipelineOptions o;
  copyReplayOptions(*this, o);
  copyFuseOptions(*this, o);
  o.rows = rows;
  o.chip = chip;
  o.ptxVersion = ptxVersion;
  o.linearBlock = linearBlock;
  o.linearForm = linearForm;
  return o;
}

void buildHostPipeline(OpPassManager &pm, const KernelPipelineOptions &options) {
  StagePipelineOptions stages = options;
  stages.target = "host";
  buildGraphToTiledPipeline(pm, stages);
  pm.addPass(createSelectHostKernels());
}

void buildNvptxPipeline(OpPassManager &pm,
                        const KernelPipelineOptions &options) {
  buildHostPipeline(pm, options);
  LowerKernelsToNvvmOptions lower;
  lower.chip = options.chip;
  lower.ptxVersion = options.ptxVersion;
  lower.linearBlock = options.linearBlock;
  lower.linearSplitK = options.linearForm != "per_output";
  pm.addPass(createLowerKernelsToNvvm(lower));
}

void registerCsaPipelines() {
  registerCsaStagePipelines();
  PassPipelineRegistration<HostPipelineCliOptions>(
      "csa-host-pipeline",
      "graph -> host stage: csa-graph-to-tiled (target=host), then "
      "csa-select-host-kernels (csa-compile --emit=host)",
      [](OpPassManager &pm, const HostPipelineCliOptions &o) {
        buildHostPipeline(pm, o.get());
      });
  PassPipelineRegistration<NvptxPipelineCliOptions>(
      "csa-nvptx-pipeline",
      "graph -> gpu stage: csa-host-pipeline, then csa-lower-kernels-to-nvvm "
      "(csa-compile --emit=gpu)",
      [](OpPassManager &pm, const NvptxPipelineCliOptions &o) {
        buildNvptxPipeline(pm, o.get());
      });
}

} // namespace csa::codegen

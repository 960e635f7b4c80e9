//===- Pipelines.cpp - The compiler's stage pipelines ---------------------===//
#include "passes/Pipelines.h"

#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace csa {

StagePipelineOptions ExpandPipelineCliOptions::get() const {
  StagePipelineOptions o;
  copyReplayOptions(*this, o);
  return o;
}

StagePipelineOptions FusePipelineCliOptions::get() const {
  StagePipelineOptions o;
  copyFuseOptions(*this, o);
  return o;
}

StagePipelineOptions TilePipelineCliOptions::get() const {
  StagePipelineOptions o;
  o.target = target;
  o.rows = rows;
  o.linearForm = linearForm;
  o.attentionForm = attentionForm;
  return o;
}

StagePipelineOptions StagePipelineCliOptions::get() const {
  StagePipelineOptions o;
  copyReplayOptions(*this, o);
  copyFuseOptions(*this, o);
  o.target = target;
  o.rows = rows;
  o.linearForm = linearForm;
  o.attentionForm = attentionForm;
  return o;
}

void buildGraphCleanupPipeline(OpPassManager &pm) {
  pm.addPass(createCSEPass());
}

void buildGraphToExpandedPipeline(OpPassManager &pm,
                                  const StagePipelineOptions &options) {
  if (options.boundedReplay) {
    BoundedReplayOptions replay;
    replay.startLayer = options.replayStartLayer;
    replay.tail = options.replayTail;
    pm.addPass(createBoundedReplay(replay));
  }
  OpPassManager &fn = pm.nest<func::FuncOp>();
  fn.addPass(createExpandModes());
  // Mode expansion leaves duplicate constants and slices behind.
  fn.addPass(createCanonicalizerPass());
  fn.addPass(createCSEPass());
  pm.addPass(createPlanCaches());
}

void buildExpandedToFusedPipeline(OpPassManager &pm, const StagePipelineOptions &options) {
  FuseKernelsOptions fuse;
  fuse.patterns.assign(options.fusions.begin(), options.fusions.end());
  pm.nest<func::FuncOp>().addPass(createFuseKernels(fuse));
}

void buildFusedToTiledPipeline(OpPassManager &pm,
                               const StagePipelineOptions &options) {
  TileKernelsOptions tile;
  tile.target = options.target;
  tile.rows = options.rows;
  pm.addPass(createTileKernels(tile));
  SelectLinearFormsOptions forms;
  forms.form = options.linearForm;
  pm.addPass(createSelectLinearForms(forms));
  SelectAttentionFormsOptions attentionForms;
  attentionForms.form = options.attentionForm;
  pm.addPass(createSelectAttentionForms(attentionForms));
}

void buildGraphToTiledPipeline(OpPassManager &pm,
                               const StagePipelineOptions &options) {
  buildGraphToExpandedPipeline(pm, options);
  buildExpandedToFusedPipeline(pm, options);
  buildFusedToTiledPipeline(pm, options);
}

void registerCsaStagePipelines() {
  PassPipelineRegistration<ExpandPipelineCliOptions>(
      "csa-graph-to-expanded",
      "graph -> expanded stage: bounded replay, CSA2 modes into primitives, "
      "canonicalize, CSE, cache planning (csa-compile --emit=expanded)",
      [](OpPassManager &pm, const ExpandPipelineCliOptions &o) {
        buildGraphToExpandedPipeline(pm, o.get());
      });
  PassPipelineRegistration<FusePipelineCliOptions>(
      "csa-expanded-to-fused",
      "expanded -> fused stage: kernel regions (csa-compile --emit=fused)",
      [](OpPassManager &pm, const FusePipelineCliOptions &o) {
        buildExpandedToFusedPipeline(pm, o.get());
      });
  PassPipelineRegistration<TilePipelineCliOptions>(
      "csa-fused-to-tiled",
      "fused -> tiled stage: the target's lowering parameters "
      "(csa-compile --emit=tiled)",
      [](OpPassManager &pm, const TilePipelineCliOptions &o) {
        buildFusedToTiledPipeline(pm, o.get());
      });
  PassPipelineRegistration<StagePipelineCliOptions>(
      "csa-graph-to-tiled",
      "graph -> tiled stage: csa-graph-to-expanded, csa-expanded-to-fused, "
      "csa-fused-to-tiled",
      [](OpPassManager &pm, const StagePipelineCliOptions &o) {
        buildGraphToTiledPipeline(pm, o.get());
      });
}

} // namespace csa

//===- Pipelines.h - The compiler's stage pipelines --------------*- C++ -*-===//
//
// The pass pipelines between the IR stages (docs/pipeline.md), built in one
// place: csa-compile runs them through these builders and csa-opt registers
// them under the same names (`--csa-graph-to-expanded`, ...), so a stage that
// csa-opt produces from the previous stage's dump is csa-compile's stage.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_PASSES_PIPELINES_H
#define CSA_PASSES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <cstdint>
#include <string>
#include <vector>

namespace csa {

/// What the stage pipelines take (csa-compile's flags, csa-opt's pipeline
/// options of the same names).
struct StagePipelineOptions {
  /// graph -> expanded: run csa-bounded-replay (off: --no-bounded-replay).
  bool boundedReplay = true;
  /// The first prefill layer on the tail only (-1: after the last Full
  /// layer) and the prompt tokens the late layers keep (-1: the window).
  int64_t replayStartLayer = -1, replayTail = -1;
  /// fused -> tiled: the target (host or sm_90a) and rows per tile of the
  /// host matrix products (0: the target's).
  std::string target = "host";
  int64_t rows = 0;
  /// fused -> tiled: the GPU form of the linears of ops that have none
  /// (csa-select-linear-forms: split_k or per_output).
  std::string linearForm = "split_k";
  /// fused -> tiled: the GPU form of the sparse attentions that have none
  /// (csa-select-attention-forms: warp, head, split or mma).
  std::string attentionForm = "mma";
  /// expanded -> fused: the csa-fuse-kernels patterns to apply (empty: all;
  /// {"none"}: no kernel regions).
  std::vector<std::string> fusions;
};

/// The graph stage's cleanup of a freshly built (or read) graph.
void buildGraphCleanupPipeline(mlir::OpPassManager &pm);
/// graph -> expanded: bounded replay, CSA2 modes into primitives, caches
/// planned.
void buildGraphToExpandedPipeline(mlir::OpPassManager &pm,
                                  const StagePipelineOptions &options);
/// expanded -> fused: kernel regions (the patterns of options.fusions).
void buildExpandedToFusedPipeline(mlir::OpPassManager &pm,
                                  const StagePipelineOptions &options);
/// fused -> tiled: the target's lowering parameters on every op.
void buildFusedToTiledPipeline(mlir::OpPassManager &pm,
                               const StagePipelineOptions &options);
/// graph -> tiled: the three above in order.
void buildGraphToTiledPipeline(mlir::OpPassManager &pm,
                               const StagePipelineOptions &options);

// The registered pipelines' options, parsed as `name{key=value ...}`; each
// pipeline takes only the options it uses.
#define CSA_REPLAY_PIPELINE_OPTIONS                                            \
  Option<bool> boundedReplay{                                                  \
      *this, "bounded-replay",                                                 \
      llvm::cl::desc("Run csa-bounded-replay on the prefill (false: the "      \
                     "--no-bounded-replay ablation)"),                         \
      llvm::cl::init(true)};                                                   \
  Option<int64_t> replayStartLayer{                                            \
      *this, "replay-start-layer",                                             \
      llvm::cl::desc("First prefill layer on the tail only; -1: after the "    \
                     "last Full layer"),                                       \
      llvm::cl::init(-1)};                                                     \
  Option<int64_t> replayTail{                                                  \
      *this, "replay-tail",                                                    \
      llvm::cl::desc("Prompt tokens the late layers keep; -1: the window"),    \
      llvm::cl::init(-1)};
#define CSA_TILE_PIPELINE_OPTIONS                                              \
  Option<std::string> target{*this, "target",                                  \
                             llvm::cl::desc("Tiling target: host or sm_90a"),  \
                             llvm::cl::init("host")};                          \
  Option<int64_t> rows{                                                        \
      *this, "rows",                                                           \
      llvm::cl::desc("Rows per tile of the host matrix products; 0: the "      \
                     "target's"),                                              \
      llvm::cl::init(0)};                                                      \
  Option<std::string> linearForm{                                              \
      *this, "linear-form",                                                    \
      llvm::cl::desc("GPU form of the linears: split_k or per_output"),       \
      llvm::cl::init("split_k")};                                              \
  Option<std::string> attentionForm{                                           \
      *this, "attention-form",                                                 \
      llvm::cl::desc("GPU form of the sparse attentions: warp, head, split or mma"), \
      llvm::cl::init("mma")};

#define CSA_FUSE_PIPELINE_OPTIONS                                              \
  ListOption<std::string> fusions{                                             \
      *this, "fusions",                                                        \
      llvm::cl::desc("Kernel-region patterns of csa-fuse-kernels (default: "   \
                     "all; none: no regions)")};

/// The fusion options of any of the command-line option structs below.
template <typename Cli>
void copyFuseOptions(const Cli &cli, StagePipelineOptions &options) {
  options.fusions.assign(cli.fusions.begin(), cli.fusions.end());
}

/// The replay options of any of the command-line option structs below.
template <typename Cli>
void copyReplayOptions(const Cli &cli, StagePipelineOptions &options) {
  options.boundedReplay = cli.boundedReplay;
  options.replayStartLayer = cli.replayStartLayer;
  options.replayTail = cli.replayTail;
}

/// csa-graph-to-expanded's options.
struct ExpandPipelineCliOptions
    : public mlir::PassPipelineOptions<ExpandPipelineCliOptions> {
  CSA_REPLAY_PIPELINE_OPTIONS
  StagePipelineOptions get() const;
};
/// csa-expanded-to-fused's options.
struct FusePipelineCliOptions
    : public mlir::PassPipelineOptions<FusePipelineCliOptions> {
  CSA_FUSE_PIPELINE_OPTIONS
  StagePipelineOptions get() const;
};
/// csa-fused-to-tiled's options.
struct TilePipelineCliOptions
    : public mlir::PassPipelineOptions<TilePipelineCliOptions> {
  CSA_TILE_PIPELINE_OPTIONS
  StagePipelineOptions get() const;
};
/// csa-graph-to-tiled's options.
struct StagePipelineCliOptions
    : public mlir::PassPipelineOptions<StagePipelineCliOptions> {
  CSA_REPLAY_PIPELINE_OPTIONS
  CSA_FUSE_PIPELINE_OPTIONS
  CSA_TILE_PIPELINE_OPTIONS
  StagePipelineOptions get() const;
};

/// Registers csa-graph-to-expanded, csa-expanded-to-fused,
/// csa-fused-to-tiled and csa-graph-to-tiled with the pass registry.
void registerCsaStagePipelines();

} // namespace csa

#endif // CSA_PASSES_PIPELINES_H

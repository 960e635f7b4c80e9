//===- NvptxBackend.h - Kernels to PTX through LLVM's NVPTX back end -*- C++ -*-===//
//
// The GPU route of the loop-level kernels: the same kernel IR the host target
// compiles (codegen/host/) moves into a gpu.module, each kernel behind a
// gpu.func entry point, and goes gpu/scf/memref/math -> NVVM -> LLVM IR
// (libdevice linked for any call left; csa's kernels emit their own exp,
// log1p and sin/cos and take sqrt.rn, so they match the host bits) -> PTX with the NVPTX
// TargetMachine, as Triton does.
//
// Launch rules (the portable baseline; Hopper-specific lowerings replace
// kernels one by one):
//   - "rows": the kernel's top-level row loop is distributed, one thread per
//     iteration (a row, or a tile of rows), grid = ceil(iterations / block);
//   - "row_elements": kernels whose row loop and the loops perfectly nested
//     in it are all parallel (heads, channels, 32-blocks): one thread per
//     iteration of the nest, grid = ceil(rows x elements_per_row x the
//     sizes named by element_dims (dynamic trip counts) / block);
//   - "row_outputs": linear kernels in their per-output form
//     (buildLinearPerOutputBody): a block per (row, `outputs_per_block`
//     outputs); a warp per output whose lanes compute its 32-block partials,
//     the FP8/FP4 activation row quantized once per block into shared
//     memory; grid = (rows,
//     ceil(outputs / outputs_per_block));
//   - "row_tiles" is also the launch of a linear's split-K form
//     (LinearSplitK.h; a block per (row, outputs_per_block outputs), K split
//     over the block's threads), which replaces the per-output form where
//     K allows and is checked against the host kernel within the tolerance
//     contract of a dot product (kernels.json "tolerance");
//     With linearSplitKRows > 1 a split-K linear also gets its batch
//     variant `<name>_rows<R>` ("row_tiles", rows_per_block R, "replaces"
//     and "min_rows" linearSplitKRowsMin), run for rows below the min_rows
//     of the kernel's other form (a kernel may have several: the launcher
//     runs the one with the most min_rows that the rows reach); a grouped
//     one's variant gathers each expert's slots ("expert_tiles", min_rows
//     groupedSplitKRowsMin slots);
//   - "row_tiles": the row-tiled form of a linear kernel
//     (buildLinearTiledBody), listed as its own kernel `<name>_tiled` with
//     "replaces": "<name>" and "min_rows": a launcher runs it instead of
//     <name> from that many rows on (prefill): a block per tile of
//     `rows_per_block` rows x `outputs_per_block` outputs, a thread per
//     output; grid = (ceil(rows / rows_per_block),
//     ceil(outputs / outputs_per_block)). Same bits as <name>. With
//     element_dims, `outputs` is multiplied by the sizes they name (the
//     index scores' block form: a block per (row, tile of keys));
//   - "expert_tiles": the grouped tensor-core form of the routed experts'
//     linears (LinearMma.h), `<name>_mma` with "replaces" and "min_rows" like
//     row_tiles: a block per (expert, tile of `outputs_per_block` outputs);
//     grid = (experts, ceil(outputs / outputs_per_block)); rows_argument
//     (1: the expert ids) is only what min_rows compares, in slots;
//   - sparse attention in the mma form (AttentionMma.h): `<name>` is the
//     split form (decode rows), and `<name>_tc`, with "replaces" and
//     "min_rows" 3, the tensor-core form for prefill rows ("row_outputs",
//     a block per (row, 16 heads, channel slice));
//   - "single": kernels whose iterations depend on each other (a ring's
//     ordered stores, the compressor state, gathers that count) run on one
//     thread.
// A kernel that returns a value (the cache stores' count of rows not
// written) writes it to an extra memref<1xi32> parameter.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_GPU_NVPTXBACKEND_H
#define CSA_CODEGEN_GPU_NVPTXBACKEND_H

#include "codegen/host/LinearMma.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <utility>
#include <vector>

namespace csa::codegen {

/// The suffix of a kernel's body, the function its gpu.func entry point
/// calls (lowerKernelsToNvvm; emitPtx inlines it into the entry point).
inline constexpr llvm::StringLiteral kKernelBodySuffix = "_body";

struct NvptxOptions {
  std::string chip = "sm_90a";
  int ptxVersion = 80; ///< PTX ISA version (80: PTX 8.0, what sm_90a needs)
  /// libdevice bitcode, linked for whatever __nv_ function a kernel calls.
  std::string libdevice = "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc";
  /// Threads per block of rows and row_elements kernels.
  int64_t blockSize = 128;
  /// The most threads of a per-output linear's block (a warp an output, so
  /// 8 outputs a block): more outputs share each block's act_quant-ed row
  /// (256 took 0.70-0.85x the time of 128 at 1 row on an H200).
  int64_t linearBlockSize = 256;
  /// The row-tiled linear kernels: rows and outputs (threads) per block, the
  /// K chunk staged in shared memory, and the fewest rows they (and the
  /// tensor-core forms, and mHC's row-tiled sums) are used for: below it the
  /// decode forms run, a block row a row, the blocks of one output tile side
  /// by side so that rows after the first read the weight from L2 (a batch
  /// decode step's rows: the tensor-core form's 64-row tiles took 0.35 ms
  /// for an 8-row 8192 x 5120 FP8 linear on an H100, the split-K form 20 us
  /// a row). 128: h200-full at 4K on an H100 (forty-third session) stepped
  /// batch 16 in 73-77 ms from 64 or 128 against 106 ms from 16, batch 32 in
  /// 137 ms from 64 against 158 from 32, batch 64 in 261 ms from 128
  /// against 284 from 64 (one 64-row tile: few blocks).
  int64_t tileRows = 8, tileOutputs = 128, tileChunk = 1024, tileMinRows = 128;
  /// The fewest slots (a step's rows times the experts a row) from which
  /// the routed experts' grouped linears take the tensor-core form (a block
  /// per expert and output tile, each walking K for all its expert's slots)
  /// instead of the split-K grouped form (each slot reads its expert's
  /// weights); LinearMma.h's kGroupedMmaMinSlots by default.
  int64_t groupedMmaMinSlots = kGroupedMmaMinSlots;
  /// The form of a linear kernel that carries no csa.linear_form (kernels
  /// from IR that did not run csa-select-linear-forms): the split-K form
  /// (codegen/host/LinearSplitK.h) where K splits into 16-byte words, the
  /// weight read at HBM speed within the tolerance contract of a dot
  /// product; off: the per-output form (the host kernel's bits).
  bool linearSplitK = true;
  /// The form of a sparse attention kernel that carries no
  /// csa.attention_form: the warp form (a warp a row of the chunk, the
  /// tolerance contract of docs/semantics.md); off: the head form, the host
  /// kernel's bits.
  bool attentionWarpForm = true;
  /// Split-K FP4 linears decode their weights through E4M3 bytes (bit
  /// moves, then cvt.rn.f16x2.e4m3x2); off: through f16 bit patterns.
  /// Both are exact: the products are the same.
  bool linearFp4ThroughE4m3 = true;
  /// Linears whose format and shape the tensor-core form takes
  /// (codegen/host/LinearMma.h: bf16 mma.sync, FP8/FP4 codes exact in bf16,
  /// the scales on each 32-block's partial) use it from tileMinRows rows on
  /// instead of the row-tiled form, within the dot-product tolerance; off:
  /// the row-tiled form (the host kernel's bits).
  bool linearTensorCores = true;
  /// The tensor-core form's 32-blocks of K staged between two barriers, at
  /// most (LinearMmaShape::kBlocksPerStage: the most power of two up to
  /// this that divides a group's K blocks); the same bits whatever it is.
  /// 2: a 4096-token h200-full prefill 1882-1887 -> 1777 ms on an H100
  /// (bench/RESULTS.md, thirty-ninth session); 4 with the E4M3 variant
  /// (whose rows fit 4 blocks of 128-output tiles; the bf16 variant's stay
  /// at 2): 1653 -> 1598 ms (fortieth session).
  int64_t mmaKBlocks = 4;
  /// The tensor-core form issues a stage's global loads one stage ahead
  /// (LinearMmaShape::prefetch); the same bits.
  bool mmaPrefetch = false;
  /// FP8 block-scaled and FP4 linears take the tensor-core form's E4M3
  /// variant (LinearMmaShape::fp8: E4M3 codes staged, mma.m16n8k32 e4m3, the
  /// activation's and the weight's scale on each 32-block's partial); off:
  /// the bf16 variant. Both within the dot-product tolerance. Needs PTX 8.4
  /// (the PTX version is raised to it where lower). A 4096-token h200-full
  /// prefill 1778 -> 1598 ms on an H100 (with mmaKBlocks 4; fortieth
  /// session).
  bool mmaFp8 = true;
  /// Split-K linears ask for a block's weight rows and scales in L2 before
  /// anything else (LinearSplitKLanes::prefetchL2), an ungrouped one before
  /// it waits for the kernel upstream (programmatic dependent launch), so
  /// that its weights stream in while that kernel runs. Off: the loads
  /// alone bring the bytes. Measured slower on the H200 (h200-full decode
  /// 10.1-10.3 -> 10.8 ms at 4K, bench/RESULTS.md twenty-eighth session),
  /// hence off.
  bool linearPrefetchL2 = false;
  /// Outputs a split-K block computes (0: linearSplitKShape's choice).
  int64_t linearOutputsPerBlock = 0;
  /// Outputs whose weight loads a split-K thread issues at once (0:
  /// linearSplitKOutputsInFlight's choice; 1 to 16).
  int64_t linearOutputsInFlight = 0;
  /// The split-K form's batch variant, `<name>_rows<R>` (a block per R
  /// rows, each weight word decoded once for all of them), run from
  /// linearSplitKRowsMin rows until the kernel's next form: up to this many
  /// rows a block (a power of two, 1: none; linearSplitKShape may take fewer).
  int64_t linearSplitKRows = 1;
  int64_t linearSplitKRowsMin = 2;
  /// The same for the routed experts' grouped linears, whose variant
  /// gathers each expert's slots (a block per (expert, tile)): from this
  /// many slots (the expert ids' length) on.
  int64_t groupedSplitKRowsMin = 32;
  /// Blocks per (row, head) of sparse attention's split form (0:
  /// attentionSplits' choice for the multiprocessors; 1 to 16).
  int64_t attentionSplits = 0;
  /// The GPU's multiprocessors, for the split-K form's outputs per block.
  int64_t multiprocessors = 132;
};

/// The PTX ISA version the kernels are emitted for: options.ptxVersion,
/// raised to 8.4 where the E4M3 mma (NvptxOptions::mmaFp8) needs it.
inline int effectivePtxVersion(const NvptxOptions &options) {
  return options.mmaFp8 && options.linearTensorCores && options.ptxVersion < 84
             ? 84
             : options.ptxVersion;
}

/// Why `options` cannot be used, or empty when they can: a per-output
/// linear's block is a whole number of warps (a warp an output), at most
/// 1024 threads. csa-compile and csa-lower-kernels-to-nvvm both check it.
std::string nvptxOptionsProblem(const NvptxOptions &options);

/// One PTX entry point, as kernels.json lists it.
struct PtxKernel {
  std::string name;
  std::string launch; ///< "rows", "row_elements", "row_outputs", "row_tiles", "expert_tiles", "single"
  int64_t blockSize = 1;
  /// rows: the argument whose dimension 0 is the number of rows, and the
  /// rows each thread takes (the host row tile).
  int64_t rowsArgument = -1, rowsPerThread = 1;
  /// row_outputs: the outputs per row and per block (grid.y =
  /// ceil(outputs / outputsPerBlock)).
  int64_t outputs = 0, outputsPerBlock = 0;
  /// row_tiles: rows per block, the kernel it replaces and from how many
  /// rows on.
  int64_t rowsPerBlock = 0, minRows = 0;
  std::string replaces;
  /// row_tiles: at most this many blocks on grid.y, the kernel walking its
  /// tiles y, y + grid.y, ... (0: a block a tile). CUDA's grid.y ends at
  /// 65535, and the index scores' tiles at 1M tokens pass it.
  int64_t maxTileBlocks = 0;
  /// expert_tiles: grid.x, a block per expert.
  int64_t experts = 0;
  /// row_elements: threads per row (grid.x = ceil(rows x elementsPerRow x
  /// the sizes of elementDims / block)): the constant part, and the
  /// (argument, dimension) of each dynamic trip count.
  int64_t elementsPerRow = 0;
  std::vector<std::pair<int64_t, int64_t>> elementDims;
  int64_t sharedBytes = 0;
  /// The parameters after the memref descriptors are expanded (MLIR's
  /// default calling convention): "ptr", "i64", "f32", "i32" each.
  std::vector<std::string> params;
  /// The kernel's memref arguments as declared (for launchers): one entry
  /// per source argument, e.g. "memref<?x64xbf16>" or "i64".
  std::vector<std::string> arguments;
  bool statusParameter = false; ///< a trailing memref<1xi32> for the result
  /// Buffers it keeps between launches (the split attention forms' partials
  /// and counters), its last parameters after the status: zeros before its
  /// first launch, then left as its launches leave them. Launches side by
  /// side need buffers of their own (kernels.json "state"; the runtime keeps
  /// a set a graph lane).
  struct StateBuffer {
    std::vector<int64_t> dims;
    int64_t elementBytes = 4;
  };
  std::vector<StateBuffer> state;
  /// It writes memory of its module (a mutable global that is no state
  /// buffer), so two launches of it must not run at once (kernels.json
  /// "module_state"; the runtime keeps them on one lane).
  bool moduleState = false;
  /// How its results compare with the host kernel's (kernels.json
  /// "tolerance"; docs/semantics.md): empty, bit for bit; "dot", each
  /// element of argument `toleranceOutput` is a sum of `toleranceTerms`
  /// products of the other arguments, whose encodings (`toleranceOperands`,
  /// one per argument: "real", "e4m3", "e2m1x2", "ue8m0", "output") say how
  /// to take their magnitudes.
  std::string tolerance;
  int64_t toleranceTerms = 0, toleranceOutput = -1;
  std::vector<std::string> toleranceOperands;
  /// Operands encoded "expert_id" take ids in [0, toleranceIndexLimit).
  int64_t toleranceIndexLimit = 0;
  /// A kernel without a tolerance whose argument `expertIdsArgument` holds
  /// expert ids in [0, expertIdsLimit) (kernels.json "expert_ids"); -1: none.
  int64_t expertIdsArgument = -1, expertIdsLimit = 0;
};

/// Moves the host kernels of `module` (scf/arith/math/memref/func, not yet
/// lowered) into a gpu.module with one gpu.func per kernel and lowers it to
/// the LLVM dialect with NVVM. `kernels` receives the launch rules.
mlir::LogicalResult lowerKernelsToNvvm(mlir::ModuleOp module,
                                       const NvptxOptions &options,
                                       std::vector<PtxKernel> &kernels);

/// Rejects NVVM ops the chip cannot run (the native FP4 conversions exist
/// from sm_100 on; for sm_90 LLVM aborts instead of reporting an error).
mlir::LogicalResult checkNvvmForChip(mlir::Operation *root,
                                     const std::string &chip);

/// PTX text of a module that lowerKernelsToNvvm produced.
llvm::Expected<std::string> emitPtx(mlir::ModuleOp module,
                                    const NvptxOptions &options);

/// kernels.json: one object per kernel (name, launch, block, shared memory,
/// parameters), plus the chip and PTX version.
std::string kernelsJson(const std::vector<PtxKernel> &kernels,
                        const NvptxOptions &options);

} // namespace csa::codegen

#endif // CSA_CODEGEN_GPU_NVPTXBACKEND_H

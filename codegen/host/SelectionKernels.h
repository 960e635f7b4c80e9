//===- SelectionKernels.h - Top-k and HSI selection generated as IR -*- C++ -*-===//
//
// Host kernels for the reference forward's selections: the indexer's top-k
// (`topkIndices` + the ascending re-sort + the -1 rule of
// `ReferenceModel::Impl::indexer`) and HSI level 1 (`selectCandidateBlocks`),
// with the GPU block forms of the top-k's two kernels. Bit-identical picks;
// kernels carry `llvm.emit_c_interface` (call `_mlir_ciface_<name>`).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_SELECTIONKERNELS_H
#define CSA_CODEGEN_HOST_SELECTIONKERNELS_H

#include "codegen/host/GpuFormLanes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <string>

namespace csa::codegen {

/// The reference indexer's top-k (`topkIndices` + `std::sort` + its -1
/// rule; raw positions, no gather offset) in two kernels whose work is
/// parallel. The order: higher score first, then lower position; with
/// `masked`, positions whose mask byte is 0 score -inf first. Scores must
/// not be NaN (the reference's comparator is no ordering with NaN either).
///
/// `name(scores: memref<?x?xf32>, [mask: memref<?x?xi8>,]
///       picked: memref<?x?xi8>)`: picked[i, t] = 1 iff fewer than
/// min(k, T) positions come before t in the order (each position counts
/// them, stopping at min(k, T)): the positions of the min(k, T) first.
mlir::func::FuncOp buildTopKRankKernel(mlir::ModuleOp module,
                                       const std::string &name, int64_t k,
                                       bool masked = false);

/// The attribute buildTopKRankKernel puts on its function: {k, masked}, so
/// that a backend can build the block form of any top-k rank kernel.
inline constexpr const char *kTopKRankAttr = "csa.topk_rank";

/// Where the block form of a top-k rank runs: a block per row.
struct TopKBlockLanes : BlockRowLanes {
  /// Appended to the kernel's arguments, in shared memory: memref<256xi32>
  /// (a digit histogram) and memref<2xi64> (the selection's state).
  mlir::Type histType, stateType;
};

/// Replaces the body of `fn` (from buildTopKRankKernel) with the block form:
/// each position's key is its score's order bits (-0 as +0) above its
/// inverted position, so the reference's order (higher score, then lower
/// position) is the keys' descending order with no ties; eight passes of an
/// 8-bit radix select (a shared histogram, counted with atomic adds, then
/// scanned by the block's threads: their threads must divide 256) find
/// the key of the min(k, T)-th position, and a position is picked iff its key
/// is not below it. NaN scores are picked and count ahead of nothing, as in
/// the host kernel; with fewer other positions than min(k, T), all are
/// picked. The same picks as the host kernel's count of positions ahead, in
/// O(T) a row instead of O(T x k).
void buildTopKRankBlockBody(mlir::func::FuncOp fn, int64_t k, bool masked,
                            const TopKBlockLanes &lanes);

/// The greedy token of each row of a head's logits, as
/// sampling::greedyToken picks it on the host (the largest logit, the
/// lowest id among equal ones, never a -inf one), or -1 where the row needs
/// the host's look: a NaN or +inf logit, or every logit -inf (the runtime
/// then reads that row back for the error that names the logit). A decode
/// step that samples greedily downloads these ids, not the logits.
///
/// `name(logits: memref<?x?xf32>, tokens: memref<?xi32>)`.
mlir::func::FuncOp buildGreedyTokenKernel(mlir::ModuleOp module, const std::string &name);

/// The attribute buildGreedyTokenKernel puts on its function (a unit), so
/// that a backend can build its block form.
inline constexpr const char *kGreedyTokenAttr = "csa.greedy_token";

/// Where the block form of the greedy token runs: a block per row.
struct GreedyTokenLanes : BlockRowLanes {
  /// Appended to the kernel's arguments, in shared memory: memref<threads x
  /// f32> (each thread's largest) and memref<2 threads x i32> (its id, then
  /// whether it saw a NaN or +inf).
  mlir::Type valuesType, idsType;
};

/// Replaces the body of `fn` (from buildGreedyTokenKernel) with the block
/// form: thread t scans ids t, t + threads, ... (the same first largest in
/// its share as a scan in order), then the threads' candidates are folded
/// as a tree (the larger value, the lower id between equal ones; a NaN or
/// +inf anywhere makes the row -1): the host kernel's ids.
void buildGreedyTokenBlockBody(mlir::func::FuncOp fn, const GreedyTokenLanes &lanes);

/// `name(picked: memref<?x?xi8>, visible: memref<?xi64>,
///       out: memref<?xkxi32>)`: per row, the picked positions in ascending
/// order, each position t >= visible[i] written as -1; the columns past the
/// picks are -1.
mlir::func::FuncOp buildTopKCompactKernel(mlir::ModuleOp module,
                                          const std::string &name, int64_t k);

/// The attribute buildTopKCompactKernel puts on its function: {k}.
inline constexpr const char *kTopKCompactAttr = "csa.topk_compact";

/// Where the block form of a top-k compaction runs: a block per row.
struct TopKCompactLanes : BlockRowLanes {
  /// Appended to the kernel's arguments, in shared memory:
  /// memref<(threads + 1) x i32> (each thread's count, then the offsets).
  mlir::Type offsetsType;
};

/// Replaces the body of `fn` (from buildTopKCompactKernel) with the block
/// form: thread t takes the t-th of `threads` consecutive segments of the
/// row, counts its picks, thread 0 turns the counts into offsets (in segment
/// order), and each thread writes its picks from its offset; the same
/// columns as the host kernel's walk of the row on one thread.
void buildTopKCompactBlockBody(mlir::func::FuncOp fn, int64_t k,
                               const TopKCompactLanes &lanes);

/// HSI level 1, `selectCandidateBlocks(score row, visible[i], topBlocks,
/// blockSize)`, in two kernels whose work is parallel per block.
///
/// `name(scores: memref<?x?xf32>, visible: memref<?xi64>,
///       blocks: memref<?x?xf32>)`: blocks[i, b] = the max over the
/// `blockSize` positions of block b (in position order), +inf for the block
/// of position visible[i] - 1 (when visible[i] >= 1); dim 1 of `blocks` is
/// ceil(T / blockSize).
mlir::func::FuncOp buildHsiBlockScoresKernel(mlir::ModuleOp module,
                                             const std::string &name,
                                             int64_t blockSize);

/// HSI's selection is a top-k over the block scores (buildTopKRankKernel
/// with k = topBlocks: the top min(topBlocks, #blocks) blocks, higher score
/// then lower block, which has a block form on the GPU), then this kernel:
/// `name(blocks: memref<?x?xf32>, picked: memref<?x?xi8>,
///       mask: memref<?x?xi8>)`: mask[i, t] = 1 where t's block is picked
/// and its score is not -inf, 0 elsewhere.
mlir::func::FuncOp buildHsiExpandKernel(mlir::ModuleOp module,
                                        const std::string &name, int64_t blockSize);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_SELECTIONKERNELS_H

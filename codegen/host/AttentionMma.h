//===- AttentionMma.h - Sparse attention on tensor cores ---------*- C++ -*-===//
//
// The `mma` GPU form of sparse attention (#csa.attention_form<mma>): the
// heads of a query row share the rows they attend (K = V, one gathered bf16
// row per index), so a block multiplies 16 heads at once against a chunk of
// rows with warp-wide `mma.m16n8k16` (bf16 operands, fp32 accumulators), as
// FlashMLA does on Hopper, instead of one head at a time on CUDA cores.
//
// A block per (query row, 16 heads, slice of the output channels), 4 warps:
//
// * The 16 heads' query is held in registers as mma A fragments (the whole
//   head dimension; each block loads it once).
// * For each chunk of kAttentionMmaChunk indices the block stages their rows
//   in shared memory (16-byte loads, zeros where an index is -1), warp w
//   computes the scores of rows 8w..8w+7 (one n-fragment over all channels)
//   and puts them in shared memory; every warp then reads the chunk's 16 x
//   chunk scores, runs one online-softmax step (running max from -1e30 as the
//   reference, the fp32 probabilities summed for the denominator, the bf16
//   ones multiplied) and adds P.V for its quarter of the block's channels.
// * The denominator adds exp(sink - max); out = bf16(acc / total).
//
// Only the order of the fp32 sums (the mma's, the chunks') and, through it,
// a probability's bf16 rounding differ from the host kernel: the form meets
// the warp form's bound (docs/semantics.md, "The tolerance contract").
//
// The blocks of one row read each of its rows once per (16 heads, channel
// slice): 8 reads at the released widths (64 heads x 512), against 64 for
// the forms that take a head a block. It is the prefill kernel of the form
// (`<kernel>_tc`, from 3 query rows on; NvptxBackend.h).
//
// A decode row has only 8 such blocks, each walking all its chunks one after
// another (measured on the H200: 120-170 us a launch, against 30-45 for the
// warp-based split form; bench/RESULTS.md, twenty-fourth session). So the
// op's own kernel splits the indices too, as flash decoding does: with
// `splits` > 1 and at most `splitRows` query rows, the blocks of a (row,
// tile) take consecutive slices of whole chunks, store their slice's P.V,
// running max and probability sum in global memory, and the last block of
// the (row, tile) to finish combines them: out = sum_s e^(m_s - M) a_s /
// (sum_s e^(m_s - M) l_s + e^(sink - M)). One more fp32 rescale and a sum
// over the slices: inside the same bound.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_ATTENTIONMMA_H
#define CSA_CODEGEN_HOST_ATTENTIONMMA_H

#include "codegen/host/LinearMma.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cstdint>
#include <functional>
#include <optional>

namespace csa::codegen {

/// Indices (rows) a block stages and scores at once: 8 a warp.
inline constexpr int64_t kAttentionMmaChunk = 32;
/// Heads a block takes: one mma's M.
inline constexpr int64_t kAttentionMmaHeads = 16;
/// Threads of a block: 4 warps.
inline constexpr int64_t kAttentionMmaThreads = 128;

/// How the form splits a (row)'s work for `heads` x `headDim`.
struct AttentionMmaShape {
  int64_t heads = 0, headDim = 0;
  /// Output channels a block computes (a slice of headDim; a warp a quarter).
  int64_t channels = 0;
  int64_t headGroups() const { return heads / kAttentionMmaHeads; }
  int64_t channelSlices() const { return headDim / channels; }
  /// Blocks a query row (grid y).
  int64_t blocksPerRow() const { return headGroups() * channelSlices(); }
  /// i32 words of a staged row: headDim / 2 and 4 of padding, so that a
  /// fragment load's 8 rows x 4 words fall in distinct banks.
  int64_t rowWords() const { return headDim / 2 + 4; }
  /// Shared memory: the staged rows (i32 words), the chunk's scores (16 x
  /// (chunk + 4) f32) and its indices (i32).
  int64_t sharedBytes() const {
    return kAttentionMmaChunk * rowWords() * 4 +
           kAttentionMmaHeads * (kAttentionMmaChunk + 4) * 4 + kAttentionMmaChunk * 4;
  }
};

/// The form's shape, or none where it does not apply
/// (csa::sparseAttentionMmaFits): 16 heads and at most 256 channels a block.
std::optional<AttentionMmaShape> attentionMmaShape(int64_t heads, int64_t headDim);

/// Where the form runs: the block's row (grid x) and tile (grid y: head
/// group x channel slices + slice), the thread, the block barrier, the mma
/// and the warp shuffle (GPU intrinsics, or host calls in the emulation
/// tests).
struct AttentionMmaLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> row, tile, thread;
  std::function<void(mlir::OpBuilder &, mlir::Location)> barrier;
  MmaBf16 mma;
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::Value v, int32_t mask)>
      shuffleXor;
  /// Where `rows` lives for its 16-byte loads (1: CUDA global; 0 on a host).
  unsigned rowsAddressSpace = 1;
  /// The split walk (splits > 1; see the file comment): `split` is the
  /// block's slice (grid y = tile x splits + split); with more than
  /// `splitRows` query rows slice 0 walks everything and the others return.
  /// The partials live in module globals (splitRows x tiles x splits
  /// slots); `fence` orders a block's partials before its count (membar.gl;
  /// nothing on a host, whose blocks run one after another).
  int64_t splits = 1, splitRows = 0;
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> split;
  std::function<void(mlir::OpBuilder &, mlir::Location)> fence;
  /// Appended to the kernel's arguments, in shared memory:
  /// memref<chunk x rowWords x i32> (the rows), memref<16 x (chunk + 4) x
  /// f32> (the scores), memref<chunk x i32> (the indices).
  mlir::Type sharedRowsType, sharedScoresType, sharedIndexType;
};

/// Slices of a decode row's indices for the split walk on a GPU of
/// `multiprocessors` SMs: enough blocks for the machine at one row (the
/// form's 255 registers allow two a multiprocessor), at most 16.
int64_t attentionMmaSplits(const AttentionMmaShape &shape, int64_t multiprocessors = 132);

/// Replaces the body of `fn` (from buildSparseAttentionKernel) with the mma
/// form of `shape`.
void buildSparseAttentionMmaBody(mlir::func::FuncOp fn, const AttentionMmaShape &shape,
                                 const AttentionMmaLanes &lanes);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_ATTENTIONMMA_H

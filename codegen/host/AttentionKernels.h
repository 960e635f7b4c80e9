//===- AttentionKernels.h - Attention primitives generated as IR -*- C++ -*-===//
//
// Host kernels for the attention primitives of the reference forward:
// `sparse_attn` (one query head per call of the reference's
// `sparseAttentionHead`), the indexer score (`indexScore`) and the index
// lists and gathers around them. The top-k and HSI selections are in
// SelectionKernels.h.
// Each builder emits one func.func of scf loops over memrefs with the
// reference's order of operations, so the results are bit-identical to it;
// kernels carry `llvm.emit_c_interface` (call `_mlir_ciface_<name>`).
// Row counts, index counts and score widths are dynamic.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_ATTENTIONKERNELS_H
#define CSA_CODEGEN_HOST_ATTENTIONKERNELS_H

#include "codegen/host/GpuFormLanes.h"

#include "codegen/host/AttentionIndexLists.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <functional>
#include <string>

namespace csa::codegen {

/// `name(q: memref<?xHxDxbf16>, rows: memref<?xDxbf16>, idx: memref<?x?xi32>,
///       sink: memref<Hxf32>, scale: f32, out: memref<?xHxDxbf16>)`
/// (H = heads, D = headDim). For each query row i and head h: one softmax
/// over `rows[idx[i, k]]` (K = V; idx < 0 contributes nothing), online over
/// blocks of 64 indices with a running max starting at -1e30, bf16
/// probabilities in the P.V product, fp32 probabilities in the denominator,
/// `exp(sink[h] - max)` added to the denominator only; out = bf16(acc / sum)
/// (`sparseAttentionHead`). exp is math.exp, which lowers to a call of libm's
/// `expf`, the function behind the reference's std::exp(float). Index rows
/// of different lengths may be padded at the end with -1: trailing -1 entries
/// leave every bit of the result unchanged.
mlir::func::FuncOp buildSparseAttentionKernel(mlir::ModuleOp module,
                                              const std::string &name,
                                              int64_t heads, int64_t headDim);

/// The most threads of the head form's block (one (row, head) a block).
inline constexpr int64_t kAttentionHeadMaxThreads = 256;

/// Threads of the head form for `headDim` (0 when it is not a multiple of
/// 32): the most, up to kAttentionHeadMaxThreads, that divide it.
int64_t attentionHeadThreads(int64_t headDim);

/// How the head form of sparse attention is spread over parallel lanes (GPU
/// threads): a block of `threads` lanes per (row, head); `barrier`
/// synchronizes the block (every lane reaches every barrier).
struct AttentionHeadLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> row, head, lane;
  std::function<void(mlir::OpBuilder &, mlir::Location)> barrier;
  int64_t threads = 256;
  /// Indices scored before their blocks are walked (a multiple of 64).
  int64_t chunk = 1024;
  /// Appended to the kernel's arguments, in shared memory:
  /// memref<chunk x f32> (the chunk's scores), memref<chunk x i32> (its
  /// indices), memref<64 x f32> (a block's probabilities) and
  /// memref<headDim x f32> (the query head).
  mlir::Type sharedScoresType, sharedIndexType, sharedProbsType, sharedQueryType;
  /// Where `rows` lives for its 16-byte loads (1: CUDA global; 0 on a host).
  unsigned rowsAddressSpace = 1;
};

/// Replaces the body of `fn` (from buildSparseAttentionKernel; headDim a
/// multiple of lanes.threads) with the head form: a block per (row, head)
/// stages the query head in shared memory; for each chunk of indices its
/// lanes compute all the scores (independent dots, each in D order, the row
/// read 16 bytes at a time when `rows` is 16-byte aligned), then every lane
/// walks the chunk's blocks of 64: the block max and the sum of the
/// probabilities in index order, and P.V in index order for its headDim /
/// threads channels, the rows of several indices loaded before their adds.
/// The same operations in the same order as the host kernel, so the same
/// bits, with a block's critical path of a few dots instead of the whole
/// head's.
void buildSparseAttentionHeadBody(mlir::func::FuncOp fn, int64_t heads,
                                  int64_t headDim, const AttentionHeadLanes &lanes);

/// How the warp form of sparse attention is spread: a block of `threads`
/// lanes (whole warps) per (row, head); `shuffleXor` gives lane l the value
/// lane l ^ mask of its warp holds (shfl.sync.bfly on the GPU).
struct AttentionWarpLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> row, head, lane;
  std::function<void(mlir::OpBuilder &, mlir::Location)> barrier;
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::Value v, int32_t mask)>
      shuffleXor;
  int64_t threads = 256;
  /// Indices scored before their probabilities and P.V.
  int64_t chunk = 1024;
  /// Appended to the kernel's arguments, in shared memory:
  /// memref<chunk x f32> (the chunk's scores, then probabilities),
  /// memref<chunk x i32> (its indices), memref<2 x warps x f32> (the warps'
  /// maxima and sums) and memref<warps x headDim x f32> (the warps' P.V).
  mlir::Type sharedScoresType, sharedIndexType, sharedReduceType, sharedAccType;
  /// Where `rows` lives for its vector loads (1: CUDA global; 0 on a host).
  unsigned rowsAddressSpace = 1;
  /// The split form (splits > 1): `splits` blocks per (row, head), `split`
  /// the block's, each over a slice of the indices when the query has at
  /// most `splitRows` rows (a decode step); their partials meet in global
  /// memory (a module global of splitRows x heads x splits slots) and the
  /// last block of a (row, head) to finish combines them. With more rows,
  /// block 0 of each (row, head) does the whole walk (the warp form) and the
  /// others return. `fence` orders a block's partials before its count
  /// (membar.gl; nothing on a host, whose blocks run one after another).
  int64_t splits = 1, splitRows = 0;
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> split;
  std::function<void(mlir::OpBuilder &, mlir::Location)> fence;
};

/// The blocks per (row, head) of the split form on a GPU of `multiprocessors`
/// SMs: as many as run in one wave at one row (a power of 2, at most 16).
int64_t attentionSplits(int64_t heads, int64_t multiprocessors = 132);
/// Rows of a query the split form splits (more go the warp form's way).
inline constexpr int64_t kAttentionSplitRows = 2;

/// The shared memory of the warp form's block.
inline int64_t attentionWarpSharedBytes(const AttentionWarpLanes &lanes, int64_t headDim) {
  const int64_t warps = lanes.threads / 32;
  return (2 * lanes.chunk + 2 * warps + warps * headDim) * 4;
}

/// Channels of a row each lane of the warp form loads at once: 8 (16
/// bytes) when headDim is a multiple of 256, 2 when of 64, else 1.
int64_t attentionWarpVector(int64_t headDim);

/// Replaces the body of `fn` (from buildSparseAttentionKernel; headDim a
/// multiple of 32) with the warp form, within the tolerance contract
/// (docs/semantics.md) instead of the host's bits: a block per (row, head);
/// lane l of every warp holds headDim / 32 channels of the query in
/// registers (runs of attentionWarpVector(headDim) channels at l x vector,
/// strided by 32 x vector), so a warp reads a whole row coalesced. For each
/// chunk of indices: warp w scores indices w, w + warps, ... (a dot's 32
/// partials added by shuffles), one block-wide max and sum of the chunk's
/// probabilities (the online softmax a chunk at a time, not 64 indices),
/// and each warp adds P.V over its indices for all its channels; the warps'
/// sums meet in shared memory at the end. The fp32 sums run in another
/// order than the reference's (dots, the probabilities' sum, P.V), and a
/// probability's bf16 rounding may then differ by one code: that is the
/// form's whole error.
/// With lanes.splits > 1, the split form of the same walk (see
/// AttentionWarpLanes): the blocks of a (row, head) take consecutive slices
/// of its indices and the last one to finish rescales their partials by
/// exp(max_s - max) and divides once; only the order of the fp32 sums differs.
void buildSparseAttentionWarpBody(mlir::func::FuncOp fn, int64_t heads, int64_t headDim,
                                  const AttentionWarpLanes &lanes);

/// `name(q: memref<?xHxDxbf16>, keys: memref<?xDxbf16>, w: memref<?xHxbf16>,
///       visible: memref<?xi64>, out: memref<?x?xf32>)` (H = heads, D = dim):
/// out[i, t] = indexScore(q[i], keys[t], w[i]) — per head the fp32 dot in
/// D order, bf16, ReLU, times the weight, bf16, summed over heads in fp32,
/// bf16 — for t < min(visible[i], rows of keys), -inf for the other t up to
/// the width of `out` (the reference's `score` row).
mlir::func::FuncOp buildIndexScoreKernel(mlir::ModuleOp module,
                                         const std::string &name,
                                         int64_t heads, int64_t dim);

/// The attribute on every index-score kernel, {heads, dim}: the NVPTX back
/// end rebuilds it as the block form.
inline constexpr const char *kIndexScoreAttr = "csa.index_score";

/// How the index scores' block form is spread: a block per (row, tile of
/// `keys` keys), `heads` x `keys` threads.
struct IndexScoreBlockLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> row, tile, thread;
  /// Set: the blocks of a row take its tiles tile, tile + tileStride(), ...
  /// (grid.y on the GPU, whose 65535 blocks are fewer than the tiles of a
  /// 1M-token row); the row's queries are staged once for all of them.
  /// Empty: a block a tile.
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> tileStride;
  std::function<void(mlir::OpBuilder &, mlir::Location)> barrier;
  int64_t keys = 8;
  /// Appended to the kernel's arguments, in shared memory: memref<H x (D +
  /// pad) x bf16> (the row's queries), memref<keys x (D + pad) x bf16> (the
  /// tile's keys) and memref<keys x H x f32> (the weighted heads).
  mlir::Type sharedQueriesType, sharedKeysType, sharedHeadsType;
};

/// Replaces the body of `fn` (from buildIndexScoreKernel) with the block
/// form, the host kernel's bits: the row's queries and the tile's keys are
/// staged in shared memory, thread (head h, key t) computes h's dot with t in
/// D order, its ReLU and weight as the host does, and one thread per key adds
/// the heads in order. A thread per (row, key) walking 32 x 128 products from
/// global memory took 316 us for 1024 keys on the H200.
void buildIndexScoreBlockBody(mlir::func::FuncOp fn, int64_t heads, int64_t dim,
                              const IndexScoreBlockLanes &lanes);

/// `name(x: memref<?xCxbf16>, y: memref<?xCxbf16>)`: y = bf16(x * scale) in
/// fp32, the indexer's head weights times (heads * dim)^-1/2 (csa.index_score).
mlir::func::FuncOp buildScaleRowsKernel(mlir::ModuleOp module,
                                        const std::string &name,
                                        int64_t columns, float scale);

/// The attribute buildSparseAttentionKernel puts on its function: {heads,
/// dim} (the NVPTX back end's head form).
inline constexpr const char *kSparseAttentionAttr = "csa.sparse_attention";

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_ATTENTIONKERNELS_H

//===- MhcKernels.h - Generated kernels for embedding and mHC ----*- C++ -*-===//
//
// Host kernels for csa.embed, csa.hc_expand, csa.hc_mix (with Sinkhorn),
// csa.hc_collapse and csa.hc_update, bit-exact with the reference forward
// (models/reference/Kernels.h: hcMixes, hcPre, hcUpdate).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_MHCKERNELS_H
#define CSA_CODEGEN_HOST_MHCKERNELS_H

#include "codegen/host/GpuFormLanes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <functional>
#include <string>

namespace csa::codegen {

/// `name(tokens: memref<?xi32>, table: memref<VxDxbf16>, out: memref<?xDxbf16>)`.
mlir::func::FuncOp buildEmbedKernel(mlir::ModuleOp module,
                                    const std::string &name, int64_t vocab,
                                    int64_t dim);

/// `name(h: memref<?xDxbf16>, streams: memref<?xHCxDxbf16>)`: hc copies.
mlir::func::FuncOp buildHcExpandKernel(mlir::ModuleOp module,
                                       const std::string &name, int64_t hc,
                                       int64_t dim);

/// `name(streams: memref<?xHCxDxbf16>, fn: memref<MIXx(HC*D)xf32>,
/// sums: memref<?x(MIX+1)xf32>)`, MIX = (2 + HC) * HC: sums[n, j] = the dot
/// of fn row j with the flattened streams (j < MIX), sums[n, MIX] = their
/// sum of squares; each one fp32 chain in the reference's order, so the
/// MIX + 1 sums of a row are independent (the first half of mHC's mix).
mlir::func::FuncOp buildHcMixSumsKernel(mlir::ModuleOp module,
                                        const std::string &name, int64_t hc,
                                        int64_t dim);

/// The attribute buildHcMixSumsKernel puts on its function: {hc, dim}, so
/// that a backend can build the block form of any mix-sums kernel.
inline constexpr const char *kHcMixSumsAttr = "csa.hc_mix_sums";

/// Where the block form of a mix-sums kernel runs: a block per (tile of
/// `rowsPerTile` rows, group of `chainsPerBlock` of the MIX + 1 sums).
struct HcMixSumsBlockLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> rowTile,
      chainGroup, thread;
  int64_t threads = 256, rowsPerTile = 1, chainsPerBlock = 1;
  int64_t chunk = 256; ///< elements of the flattened streams a stage holds
  std::function<void(mlir::OpBuilder &, mlir::Location)> barrier;
  /// Appended to the kernel's arguments, in shared memory:
  /// memref<chainsPerBlock x (chunk + kHcMixSumsRowPad) x f32> (fn's rows of
  /// the group) and memref<rowsPerTile x (chunk + kHcMixSumsRowPad) x f32>
  /// (the tile's streams).
  mlir::Type sharedWeightType, sharedStreamsType;
};

/// Floats after each row of the mix-sums form's shared buffers: every row
/// starts on 16 bytes (LLVM reads 4 of a chain's floats with one
/// ld.shared.v4), and the 16-byte reads of 8 threads on consecutive rows
/// fall in 32 different banks.
inline constexpr int64_t kHcMixSumsRowPad = 4;

/// The largest chunk (a multiple of 32 dividing HC x D, at most 4096) whose
/// shared buffers fit `maxSharedBytes`, or 0 if none does.
int64_t hcMixSumsChunk(int64_t hc, int64_t dim, int64_t rowsPerTile,
                       int64_t chainsPerBlock, int64_t maxSharedBytes);

/// Replaces the body of `fn` (from buildHcMixSumsKernel) with the block form.
/// One thread walks each sum as the host kernel does (the same chain of fp32
/// operations, so the same bits), but it reads the operands from shared
/// memory: for each chunk of the flattened streams, all threads of the block
/// first load the group's fn rows and the tile's streams (every load issued
/// before any is stored, so the block has them all in flight), meet at a
/// barrier, and the chain threads add the chunk. A thread walking fn from
/// global memory waited for each load in turn (1 ms a call on the H200 for
/// 24 sums of 20480).
void buildHcMixSumsBlockBody(mlir::func::FuncOp fn, int64_t hc, int64_t dim,
                             const HcMixSumsBlockLanes &lanes);

/// Where the split form of a mix-sums kernel runs: a block of `threads` per
/// (row, sum).
struct HcMixSumsSplitLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> row, sum, thread;
  int64_t threads = 512;
  std::function<void(mlir::OpBuilder &, mlir::Location)> barrier;
  /// Appended to the kernel's arguments, in shared memory:
  /// memref<threads x f32> (the threads' partials).
  mlir::Type sharedPartialsType;
  /// The word form (set, and HC x D % 8 == 0): thread t takes the 16-byte
  /// words t, t + threads, ... of the row (8 bf16 of x, 8 f32 of fn, loaded
  /// whole where both lie on 16 bytes), the partials are added by shuffleXor
  /// within each warp and the warps' sums in warp order by thread 0 (the
  /// first threads / 32 floats of the partials). Element loads and the tree
  /// otherwise.
  ShuffleXorFn shuffleXor;
  /// Where x and fn live for the word form's 16-byte loads (1: CUDA
  /// global; 0 on a host).
  unsigned addressSpace = 1;
};

/// Replaces the body of `fn` (from buildHcMixSumsKernel) with the split form,
/// the decode form of the GPU: the threads of a (row, sum) block split the
/// HC x D products (thread t takes elements t, t + threads, ...; every load
/// issued before the first product), and a tree in shared memory adds their
/// partials (or, with HcMixSumsSplitLanes::shuffleXor, the word form). The
/// order of the fp32 sum is not the host kernel's, so the result meets the
/// dot-product tolerance of docs/semantics.md instead of its bits (one
/// sequential chain of 20480 took 61 us on the H200).
void buildHcMixSumsSplitBody(mlir::func::FuncOp fn, int64_t hc, int64_t dim,
                             const HcMixSumsSplitLanes &lanes);

/// `name(sums: memref<?x(MIX+1)xf32>, base: memref<MIXxf32>,
/// scale: memref<3xf32>, pre: memref<?xHCxf32>, post: memref<?xHCxf32>,
/// comb: memref<?xHCxHCxf32>)`: the rest of mHC's mix from the sums of
/// buildHcMixSumsKernel (rsqrt norm, sigmoids, Sinkhorn).
mlir::func::FuncOp buildHcMixKernel(mlir::ModuleOp module,
                                    const std::string &name, int64_t hc,
                                    int64_t dim, int64_t iters, float eps,
                                    float normEps);

/// The attribute buildHcMixKernel puts on its function: {hc, dim, iters, eps,
/// norm_eps}, so that a backend can build its warp form.
inline constexpr const char *kHcMixAttr = "csa.hc_mix";

/// Where the warp form of a mix kernel runs: a warp per row.
struct HcMixWarpLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> row, lane;
  /// The value `v` of lane `src` (an i32) of the warp, for every lane
  /// (gpu.shuffle idx on the GPU).
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::Value v, mlir::Value src)>
      shuffle;
};

/// Replaces the body of `fn` (from buildHcMixKernel) with the warp form: lane
/// (i, j) of the first HC x HC lanes holds entry (i, j) of the Sinkhorn
/// matrix in a register, and every row or column sum is added by each lane
/// of that row or column from the others' values (shuffles) in the host
/// kernel's order, so the result is the host kernel's bits; lanes past
/// HC x HC take entry (HC-1, HC-1)'s role and store nothing. One thread per
/// row walked the HC x HC matrix in local memory (28 us for 20 iterations on
/// the H200). Needs HC x HC <= 32.
void buildHcMixWarpBody(mlir::func::FuncOp fn, int64_t hc, int64_t dim, int64_t iters,
                        float eps, float normEps, const HcMixWarpLanes &lanes);

/// `name(streams: memref<?xHCxDxbf16>, pre: memref<?xHCxf32>,
/// out: memref<?xDxbf16>)`: out = bf16(sum_i pre_i * X_i).
mlir::func::FuncOp buildHcCollapseKernel(mlir::ModuleOp module,
                                         const std::string &name, int64_t hc,
                                         int64_t dim);

/// `name(streams: memref<?xHCxDxbf16>, update: memref<?xDxbf16>,
/// post: memref<?xHCxf32>, comb: memref<?xHCxHCxf32>,
/// out: memref<?xHCxDxbf16>)`: out_j = bf16(post_j * y + sum_i comb_ij X_i).
mlir::func::FuncOp buildHcUpdateKernel(mlir::ModuleOp module,
                                       const std::string &name, int64_t hc,
                                       int64_t dim);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_MHCKERNELS_H

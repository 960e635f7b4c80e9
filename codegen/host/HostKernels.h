//===- HostKernels.h - Host (CPU) kernels generated as IR --------*- C++ -*-===//
//
// Kernel builders for the CPU target: each emits one func.func of scf loops
// over memrefs with the released numerics (fp32 accumulation, bf16 results
// rounded to nearest even). The same builders are the loop-level baseline a
// GPU lowering is compared against. Kernels carry `llvm.emit_c_interface`,
// so the runtime calls `_mlir_ciface_<name>` with memref descriptors.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_HOSTKERNELS_H
#define CSA_CODEGEN_HOST_HOSTKERNELS_H

#include "codegen/host/GpuFormLanes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <functional>
#include <string>
#include <vector>

namespace csa::codegen {

/// Registers the dialects the host kernels are built from.
void loadHostKernelDialects(mlir::MLIRContext &context);

/// `name(x: memref<?xDxbf16>, weight: memref<Dxbf16>, y: memref<?xDxbf16>)`:
/// y = bf16(weight * x * rsqrt(mean(x^2) + eps)), fp32 inside (csa.rms_norm).
mlir::func::FuncOp buildRmsNormKernel(mlir::ModuleOp module,
                                      const std::string &name, int64_t dim,
                                      double eps);

/// The attribute buildRmsNormKernel puts on its function: {dim, eps}, so
/// that a backend can build the block form of any RMS norm kernel.
inline constexpr const char *kRmsNormAttr = "csa.rms_norm";

/// Where the block form of an RMS norm runs: a block per row.
struct RmsNormBlockLanes : BlockRowLanes {
  /// Appended to the kernel's arguments, in shared memory: memref<D x f32>
  /// (the row) and memref<1 x f32> (its 1 / rms).
  mlir::Type sharedRowType, sharedScaleType;
  /// The sum of squares as a tree over the threads' partials (the GPU's
  /// decode form: within the tolerance of docs/semantics.md, "norm") instead
  /// of one thread's walk in the host kernel's order (its bits).
  bool treeSum = false;
  /// The word form (set: `shuffleXor`, D % 8 == 0, threads >= D / 8):
  /// thread t owns the row's t-th 16-byte word (8 bf16) and the weight's,
  /// both loaded before anything else (16-byte loads where the rows lie on
  /// 16 bytes); the squares are added by shuffleXor within each warp, the
  /// warps' sums in warp order from shared memory (sharedRowType then only
  /// needs threads / 32 floats), one barrier in all. Within the tolerance of
  /// treeSum (any order of the sum).
  ShuffleXorFn shuffleXor;
  /// Where x, weight and y live for the word form's 16-byte accesses
  /// (1: CUDA global; 0 on a host).
  unsigned addressSpace = 1;
};

/// Whether the word form of RmsNormBlockLanes applies to rows of `dim`
/// with at most `maxThreads` threads a block.
inline bool rmsNormWordFormFits(int64_t dim, int64_t maxThreads = 1024) {
  return dim % 8 == 0 && (dim / 8 + 31) / 32 * 32 <= maxThreads;
}

/// Replaces the body of `fn` (from buildRmsNormKernel) with the block form
/// (or its word form, see RmsNormBlockLanes::shuffleXor):
/// the block loads its row into shared memory (each thread its elements, all
/// loads issued before any store), one thread walks the sum of squares there
/// in the host kernel's order (the same bits), and every thread scales its
/// elements. One thread walking the row in global memory waited for each
/// load in turn (266 us for 5120 elements on the H200).
void buildRmsNormBlockBody(mlir::func::FuncOp fn, int64_t dim, double eps,
                           const RmsNormBlockLanes &lanes);

/// The 8 f32 values of a row's word that the word form normalizes, computed
/// by a fused kernel instead of loaded (hc_collapse_norm): called with the
/// row and the word's first column (a thread past the words gets the last).
using RmsNormWordFn = std::function<llvm::SmallVector<mlir::Value>(
    mlir::OpBuilder &, mlir::Location, mlir::Value row, mlir::Value firstColumn)>;

/// The word form of RmsNormBlockLanes at `b`'s insertion point: the rows of
/// `rows` (its dim 0 counts them) are normalized by `w` into `y`, the squares'
/// warp sums in `warpSums` (shared memory). The row's words come from `x`, or
/// from `xWord` where it is set (then `x` is unused).
void emitRmsNormWords(mlir::OpBuilder &b, mlir::Location loc, mlir::Value rows, mlir::Value x,
                      mlir::Value w, mlir::Value y, mlir::Value warpSums, int64_t dim,
                      double eps, const RmsNormBlockLanes &lanes, const RmsNormWordFn &xWord);

/// RoPE's rotation of one pair, in two steps so that a kernel may load the
/// pair between them: emitRopeSinCos gives {sin, cos} of the angle
/// position * freq (f32), sin negated for the inverse; emitRopeRotate gives
/// (a + ib)(cos + i sin) as {re, im}, each component one fp32 rounding (the
/// reference's order). The RoPE kernel and the fused rope_quantize_store
/// form both rotate with them, so they give the same bits.
std::pair<mlir::Value, mlir::Value> emitRopeSinCos(mlir::OpBuilder &b, mlir::Location loc,
                                                   mlir::Value position, mlir::Value freq,
                                                   bool inverse);
std::pair<mlir::Value, mlir::Value> emitRopeRotate(mlir::OpBuilder &b, mlir::Location loc,
                                                   mlir::Value a, mlir::Value bv,
                                                   mlir::Value sin, mlir::Value cos);

/// `name(x: memref<?x?xbf16>, position: i64, stride: i64, rowsPerPosition:
/// i64)`, in place: row r is rotated at position + (r / rowsPerPosition) *
/// stride on its last 2 * freqs.size() channels (csa.rope; GPT-J pairs).
/// `freqs` are the table's pair frequencies, embedded as a constant;
/// `inverse` conjugates the rotation.
mlir::func::FuncOp buildRopeKernel(mlir::ModuleOp module,
                                   const std::string &name,
                                   const std::vector<float> &freqs,
                                   bool inverse);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_HOSTKERNELS_H

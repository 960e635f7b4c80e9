//===- NvvmLanes.h - What the GPU forms' lanes are made of ------*- C++ -*-===//
//
// The NVPTX target's lane callbacks for the GPU forms of codegen/host: block
// and thread indices, the block barrier, warp shuffles, the E4M3
// conversions sm_89 on has, and the bf16 mma.sync of the tensor-core form,
// as gpu/NVVM ops. The forms take them as std::function members, so the
// host (test/unit/codegen/SimtEmulation.h) can give its own.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_GPU_NVVMLANES_H
#define CSA_CODEGEN_GPU_NVVMLANES_H

#include "codegen/host/GpuFormLanes.h"

#include "mlir/IR/Builders.h"

#include <cstdint>
#include <functional>
#include <utility>

namespace csa::codegen::nvvm {

/// blockIdx.x, blockIdx.y, threadIdx.x; the block barrier.
mlir::Value blockX(mlir::OpBuilder &b, mlir::Location loc);
mlir::Value blockY(mlir::OpBuilder &b, mlir::Location loc);
mlir::Value threadX(mlir::OpBuilder &b, mlir::Location loc);
/// gridDim.y: the blocks on grid.y.
mlir::Value gridY(mlir::OpBuilder &b, mlir::Location loc);
void blockBarrier(mlir::OpBuilder &b, mlir::Location loc);
/// prefetch.global.L2 of the line holding `ptr` (an LLVM pointer in the
/// global address space).
void prefetchL2(mlir::OpBuilder &b, mlir::Location loc, mlir::Value ptr);
/// Programmatic dependent launch: griddepcontrol.wait (the grids the kernel
/// depends on have finished and their memory is visible), then
/// griddepcontrol.launch_dependents (the next kernel's blocks may be
/// scheduled). Both are no-ops in a launch without a programmatic
/// dependency.
void dependencyWait(mlir::OpBuilder &b, mlir::Location loc);
/// The global thread index (x) as an index value.
mlir::Value globalThreadId(mlir::OpBuilder &b, mlir::Location loc);
/// shfl.sync.bfly over the whole warp.
mlir::Value shuffleXorLane(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v, int32_t mask);
/// Two E4M3 codes (an i16) to f32: cvt.rn.f16x2.e4m3x2, then the exact
/// f16 -> f32.
std::pair<mlir::Value, mlir::Value> e4m3PairToF32(mlir::OpBuilder &b, mlir::Location loc,
                                                  mlir::Value pair);
/// act_quant's rounding of two f32 by cvt.rn.satfinite.e4m3x2.f32 and back:
/// exact, RNE with saturation, as the host's integer rounding.
std::pair<mlir::Value, mlir::Value> e4m3RoundPair(mlir::OpBuilder &b, mlir::Location loc,
                                                  mlir::Value lo, mlir::Value hi);
/// One warp-wide mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 (MmaBf16).
llvm::SmallVector<mlir::Value> mmaBf16(mlir::OpBuilder &b, mlir::Location loc, mlir::ValueRange a,
                                       mlir::ValueRange bw, mlir::ValueRange c);
/// One warp-wide mma.sync.m16n8k32.row.col.f32.e4m3.e4m3.f32 (MmaE4m3).
llvm::SmallVector<mlir::Value> mmaE4m3(mlir::OpBuilder &b, mlir::Location loc, mlir::ValueRange a,
                                       mlir::ValueRange bw, mlir::ValueRange c);
/// Two f32 values' E4M3 codes by cvt.rn.satfinite.e4m3x2.f32 (E4M3CodePair):
/// `lo`'s in bits 0-7 of the i32, `hi`'s in bits 8-15.
mlir::Value e4m3CodePair(mlir::OpBuilder &b, mlir::Location loc, mlir::Value lo, mlir::Value hi);
/// A block of `threads` per row: blockIdx.x, threadIdx.x, the block barrier.
BlockRowLanes blockRowLanes(int64_t threads);

/// The split forms' grid (sparse attention's split and mma walks): blockIdx.y
/// = outer x splits + split, and the fence (membar.gl) that orders a block's
/// partials before it counts itself.
struct SplitGridLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> outer, split;
  std::function<void(mlir::OpBuilder &, mlir::Location)> fence;
};
SplitGridLanes splitGridLanes(int64_t splits);

} // namespace csa::codegen::nvvm

#endif // CSA_CODEGEN_GPU_NVVMLANES_H

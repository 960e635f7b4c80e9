//===- GpuFormLanes.h - Where a block-per-row GPU form runs ------*- C++ -*-===//
//
// The GPU forms are built as ordinary kernel bodies whose thread indices and
// barriers come from callbacks: the NVPTX back end passes GPU intrinsics,
// test/unit/codegen/GpuFormEmulationTest.cpp host calls.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_GPUFORMLANES_H
#define CSA_CODEGEN_HOST_GPUFORMLANES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

#include <cstdint>
#include <functional>

namespace csa::codegen {

/// The static shared memory a GPU form's block may declare without opting
/// in (48 KiB): the forms' shapes and the checks of per-op block shapes.
inline constexpr int64_t kMaxStaticSharedBytes = 48 * 1024;

/// A form with a block of `threads` threads per row: the block's row, the
/// thread's index in the block, and the block's barrier.
struct BlockRowLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> row, thread;
  int64_t threads = 256;
  std::function<void(mlir::OpBuilder &, mlir::Location)> barrier;
};

/// Adds the `threads` f32 partials of `buffer` (a block's shared memory,
/// thread t's at [t]) as a tree: the upper half folded onto the lower half,
/// a barrier after each fold, until [0] holds the sum (read it after the
/// last barrier). Any `threads`; every thread of the block must call it.
inline void emitBlockTreeSum(mlir::OpBuilder &b, mlir::Location loc, mlir::Value buffer,
                             mlir::Value tid, int64_t threads,
                             const std::function<void(mlir::OpBuilder &, mlir::Location)> &barrier) {
  using namespace mlir;
  auto idx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v).getResult(); };
  auto ult = [&](Value a, Value c) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, a, c).getResult();
  };
  int64_t span = 1;
  while (span < threads)
    span *= 2;
  for (int64_t half = span / 2; half >= 1; half /= 2) {
    Value other = arith::AddIOp::create(b, loc, tid, idx(half));
    Value folds = arith::AndIOp::create(b, loc, ult(tid, idx(half)), ult(other, idx(threads)));
    auto fold = scf::IfOp::create(b, loc, folds, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(fold.thenBlock()->getTerminator());
      Value sum = arith::AddFOp::create(b, loc, memref::LoadOp::create(b, loc, buffer, tid),
                                        memref::LoadOp::create(b, loc, buffer, other));
      memref::StoreOp::create(b, loc, sum, buffer, tid);
    }
    barrier(b, loc);
  }
}

/// An XOR shuffle over the whole warp (`gpu.shuffle xor` on the GPU).
using ShuffleXorFn =
    std::function<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::Value, int32_t)>;

/// Each warp's f32 sum of `v` (XOR shuffles) stored by its lane 0 in
/// `buffer`[warp] (a block's shared memory), then the block barrier: read
/// the warps' sums after it (emitWarpSumsInOrder).
inline void emitWarpSumsToShared(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v,
                                 mlir::Value tid, mlir::Value buffer,
                                 const ShuffleXorFn &shuffleXor,
                                 const std::function<void(mlir::OpBuilder &, mlir::Location)> &barrier) {
  using namespace mlir;
  auto idx = [&](int64_t c) { return arith::ConstantIndexOp::create(b, loc, c).getResult(); };
  for (int32_t mask = 16; mask >= 1; mask /= 2)
    v = arith::AddFOp::create(b, loc, v, shuffleXor(b, loc, v, mask));
  Value lane = arith::RemUIOp::create(b, loc, tid, idx(32));
  auto laneZero = scf::IfOp::create(
      b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, idx(0)),
      /*withElse=*/false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(laneZero.thenBlock()->getTerminator());
    memref::StoreOp::create(b, loc, v, buffer,
                            ValueRange{arith::DivUIOp::create(b, loc, tid, idx(32))});
  }
  barrier(b, loc);
}

/// buffer[0] + buffer[1] + ... + buffer[warps - 1], in that order (the same
/// bits on every thread that adds them).
inline mlir::Value emitWarpSumsInOrder(mlir::OpBuilder &b, mlir::Location loc, mlir::Value buffer,
                                       int64_t warps) {
  using namespace mlir;
  Value total = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.f));
  for (int64_t w = 0; w < warps; ++w)
    total = arith::AddFOp::create(
        b, loc, total,
        memref::LoadOp::create(b, loc, buffer,
                               ValueRange{arith::ConstantIndexOp::create(b, loc, w)}));
  return total;
}

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_GPUFORMLANES_H

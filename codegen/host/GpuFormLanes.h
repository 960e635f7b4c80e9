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

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_GPUFORMLANES_H

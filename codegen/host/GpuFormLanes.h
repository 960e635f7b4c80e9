//===- GpuFormLanes.h - Where a block-per-row GPU form runs ------*- C++ -*-===//
//
// The GPU forms are built as ordinary kernel bodies whose thread indices and
// barriers come from callbacks: the NVPTX back end passes GPU intrinsics,
// test/unit/codegen/GpuFormEmulationTest.cpp host calls.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_GPUFORMLANES_H
#define CSA_CODEGEN_HOST_GPUFORMLANES_H

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

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_GPUFORMLANES_H

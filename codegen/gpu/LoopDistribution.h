//===- LoopDistribution.h - Kernels' loops over GPU threads -----*- C++ -*-===//
//
// The NVPTX target's baseline launch rules for kernels without a GPU form
// (NvptxBackend.h's "rows", "row_elements", "channels" and "single"): the
// top-level row loop, the parallel nest under it, or the channel loop
// distributed one thread an iteration, or the whole kernel on thread 0.
// Each rewrites `fn`'s body in place, or leaves it alone and says so.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_GPU_LOOPDISTRIBUTION_H
#define CSA_CODEGEN_GPU_LOOPDISTRIBUTION_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace csa::codegen::nvvm {

/// Distributes the single top-level scf.for of `fn` over threads; returns the
/// argument whose dimension 0 bounds it (-1 if the loop does not have the
/// shape that allows it: the function is then left alone).
int64_t distributeRows(mlir::func::FuncOp fn, int64_t &rowsPerThread);

/// Gives each iteration of the single top-level loop of `fn` (from 0 by 1 to
/// a constant, no results, nothing else in the entry block but constants and
/// the return) a thread. Returns the trip count, or -1 (fn untouched).
int64_t distributeChannels(mlir::func::FuncOp fn);

/// Distributes the whole perfect nest under the top-level row loop of `fn`,
/// one thread per (row, inner iterations), the innermost loop fastest.
/// Returns the argument whose dimension 0 bounds the rows and sets
/// `elementsPerRow` (the constant trip counts' product) and `elementDims`
/// ((argument, dimension) of each dynamic one), or -1 (fn untouched).
int64_t distributeElements(mlir::func::FuncOp fn, int64_t &elementsPerRow,
                           std::vector<std::pair<int64_t, int64_t>> &elementDims);

/// Runs all of `fn` on thread 0 only; results (if any) are 0 elsewhere.
void singleThread(mlir::func::FuncOp fn);

} // namespace csa::codegen::nvvm

#endif // CSA_CODEGEN_GPU_LOOPDISTRIBUTION_H

//===- FusedKernels.h - Host kernels of csa.fusion regions -------*- C++ -*-===//
//
// One kernel per kernel region: a function that runs the region's ops in
// order by calling their kernels (already in the module) on buffers it
// allocates for the values that stay inside the region. The parts are the
// verified single-op kernels, so the region computes exactly what the ops
// compute one by one; the runtime makes one call instead of several and the
// region's inner values never become transients.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_FUSEDKERNELS_H
#define CSA_CODEGEN_HOST_FUSEDKERNELS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace csa::codegen {

/// `name(x: memref<?xDxbf16>, ropePosition: i64, storePosition: i64,
/// cache: <the append kernel's cache view>, rows: memref<?xRxi8>) -> i32`
/// for a `rope_quantize_store` region: rows = quantize(rope(x at
/// ropePosition, `stride`)), stored into `cache` from entry storePosition;
/// returns the store's count of rows not written (0). `rope`, `quantize` and
/// `append` name the kernels of the three ops, which must be in `module`.
mlir::func::FuncOp buildRopeQuantizeStoreKernel(mlir::ModuleOp module,
                                                const std::string &name,
                                                const std::string &rope,
                                                const std::string &quantize,
                                                const std::string &append,
                                                int64_t stride);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_FUSEDKERNELS_H

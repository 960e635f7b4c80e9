//===- CompressKernels.h - Generated kernels for the compressor ---*- C++ -*-===//
//
// The pooling of csa.compress at ratio r > 1, bit-exact with the reference
// (models/reference/Kernels.h poolGroup): the projections come from linear
// kernels, the RMSNorm of the pooled rows from the rms_norm kernel.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_COMPRESSKERNELS_H
#define CSA_CODEGEN_HOST_COMPRESSKERNELS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace csa::codegen {

/// `name(kv: memref<?xDxf32>, score: memref<?xDxf32>, stateKv: memref<RxDxf32>,
/// stateScore: memref<RxDxf32>, position: i64, out: memref<?xDxbf16>)`:
/// token i (at position + i) goes to state slot (position + i) % R; each time
/// a slot R - 1 is written the group is pooled (per-channel softmax of the
/// scores weighting the KV) into the next row of `out`, rounded to bf16
/// (the `kv.to(dtype)` before the compressor's norm). `out` must have one row
/// per group completed, (position + n) / R - position / R.
mlir::func::FuncOp buildCompressPoolKernel(mlir::ModuleOp module,
                                           const std::string &name,
                                           int64_t ratio, int64_t dim);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_COMPRESSKERNELS_H

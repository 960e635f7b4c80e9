//===- MhcKernels.h - Generated kernels for embedding and mHC ----*- C++ -*-===//
//
// Host kernels for csa.embed, csa.hc_expand, csa.hc_mix (with Sinkhorn),
// csa.hc_collapse and csa.hc_update, bit-exact with the reference forward
// (models/reference/Kernels.h: hcMixes, hcPre, hcUpdate).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_MHCKERNELS_H
#define CSA_CODEGEN_HOST_MHCKERNELS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

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

/// `name(sums: memref<?x(MIX+1)xf32>, base: memref<MIXxf32>,
/// scale: memref<3xf32>, pre: memref<?xHCxf32>, post: memref<?xHCxf32>,
/// comb: memref<?xHCxHCxf32>)`: the rest of mHC's mix from the sums of
/// buildHcMixSumsKernel (rsqrt norm, sigmoids, Sinkhorn).
mlir::func::FuncOp buildHcMixKernel(mlir::ModuleOp module,
                                    const std::string &name, int64_t hc,
                                    int64_t dim, int64_t iters, float eps,
                                    float normEps);

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

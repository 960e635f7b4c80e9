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

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

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

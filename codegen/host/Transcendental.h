//===- Transcendental.h - csa's exp, log1p, sin/cos as arith ops -*- C++ -*-===//
//
// Emits the f32 transcendental functions of runtime/numerics/Transcendental.h
// as plain arith ops (f64 add, mul, div, compare, select, bit casts), so the
// host and the NVPTX kernels compute the reference's values bit for bit
// instead of calling libm or libdevice.
//
//===----------------------------------------------------------------------===//

#ifndef CSA_CODEGEN_HOST_TRANSCENDENTAL_H
#define CSA_CODEGEN_HOST_TRANSCENDENTAL_H

#include "mlir/IR/Builders.h"

#include <utility>

namespace csa::codegen {

/// numerics::exp32 of an f32 value.
mlir::Value emitExp32(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x);
/// numerics::log1p32 of an f32 value.
mlir::Value emitLog1p32(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x);
/// numerics::sincos32 of an f32 value: {sin, cos}.
std::pair<mlir::Value, mlir::Value> emitSinCos32(mlir::OpBuilder &b,
                                                 mlir::Location loc,
                                                 mlir::Value x);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_TRANSCENDENTAL_H

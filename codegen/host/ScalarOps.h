//===- ScalarOps.h - Small IR-building helpers of the kernel builders -*- C++ -*-===//
//
// The comparisons, logic, bf16 rounding and loops that the attention and
// selection kernel builders (AttentionKernels.cpp, SelectionKernels.cpp)
// both emit, in the reference's exact form (std::max as `a < c ? c : a`).
// Internal to codegen/host.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_SCALAROPS_H
#define CSA_CODEGEN_HOST_SCALAROPS_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

#include <limits>

namespace csa::codegen::scalar {

using namespace mlir;

inline constexpr float kInf = std::numeric_limits<float>::infinity();

/// std::max(a, c) as libstdc++ computes it: (a < c) ? c : a.
inline Value stdMax(OpBuilder &b, Location loc, Value a, Value c) {
  Value lt = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, a, c);
  return arith::SelectOp::create(b, loc, lt, c, a);
}

/// The reference's bf16(x): round to nearest even, back to fp32.
inline Value roundBf16(OpBuilder &b, Location loc, Value v) {
  Value t = arith::TruncFOp::create(b, loc, b.getBF16Type(), v);
  return arith::ExtFOp::create(b, loc, b.getF32Type(), t);
}

inline Value cmpF(OpBuilder &b, Location loc, arith::CmpFPredicate p, Value x,
           Value y) {
  return arith::CmpFOp::create(b, loc, p, x, y);
}

inline Value cmpI(OpBuilder &b, Location loc, arith::CmpIPredicate p, Value x,
           Value y) {
  return arith::CmpIOp::create(b, loc, p, x, y);
}

inline Value andI(OpBuilder &b, Location loc, Value x, Value y) {
  return arith::AndIOp::create(b, loc, x, y);
}

inline Value orI(OpBuilder &b, Location loc, Value x, Value y) {
  return arith::OrIOp::create(b, loc, x, y);
}

/// Body of a loop: (induction variable, iteration arguments) -> yielded.
using LoopBody = function_ref<SmallVector<Value>(Value, ValueRange)>;

/// scf.for lb..ub by step carrying `init`; the body's values are yielded.
inline scf::ForOp loop(OpBuilder &b, Location loc, Value lb, Value ub, Value step,
                ValueRange init, LoopBody body) {
  return scf::ForOp::create(
      b, loc, lb, ub, step, init,
      [&](OpBuilder &nested, Location l, Value iv, ValueRange args) {
        SmallVector<Value> results = body(iv, args);
        scf::YieldOp::create(nested, l, results);
      });
}

} // namespace csa::codegen::scalar

#endif // CSA_CODEGEN_HOST_SCALAROPS_H

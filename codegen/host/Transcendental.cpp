//===- Transcendental.cpp - csa's exp, log1p, sin/cos as arith ops --------===//
//
// Each emitter mirrors, operation for operation, its C++ twin in
// runtime/numerics/Transcendental.cpp. No fastmath flags: LLVM neither
// contracts nor reassociates these ops on x86-64 or NVPTX.
//
//===----------------------------------------------------------------------===//

#include "codegen/host/Transcendental.h"

#include "runtime/numerics/Transcendental.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <limits>

using namespace mlir;

namespace csa::codegen {
namespace {
namespace tr = numerics::transcendental;

/// f64 arithmetic in the order the C++ twin writes it.
struct F64 {
  OpBuilder &b;
  Location loc;
  Value c(double v) { return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(v)); }
  Value f32(float v) { return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v)); }
  Value i64(int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
  }
  Value add(Value x, Value y) { return arith::AddFOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubFOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return arith::DivFOp::create(b, loc, x, y); }
  Value neg(Value x) { return arith::NegFOp::create(b, loc, x); }
  Value cmp(arith::CmpFPredicate p, Value x, Value y) {
    return arith::CmpFOp::create(b, loc, p, x, y);
  }
  Value select(Value cond, Value x, Value y) {
    return arith::SelectOp::create(b, loc, cond, x, y);
  }
  Value widen(Value x) { return arith::ExtFOp::create(b, loc, b.getF64Type(), x); }
  Value narrow(Value x) { return arith::TruncFOp::create(b, loc, b.getF32Type(), x); }
  Value toI64(Value x) { return arith::FPToSIOp::create(b, loc, b.getI64Type(), x); }
  Value toF64(Value x) { return arith::SIToFPOp::create(b, loc, b.getF64Type(), x); }
  Value bitsOf(Value x) { return arith::BitcastOp::create(b, loc, b.getI64Type(), x); }
  Value fromBits(Value x) { return arith::BitcastOp::create(b, loc, b.getF64Type(), x); }
  /// (x + 1.5 * 2^52) - 1.5 * 2^52: x rounded to the nearest integer.
  Value round(Value x) { return sub(add(x, c(tr::kRoundMagic)), c(tr::kRoundMagic)); }
  template <size_t N> Value horner(const std::array<double, N> &coeffs, Value x) {
    Value p = c(coeffs[0]);
    for (size_t i = 1; i < N; ++i)
      p = add(mul(p, x), c(coeffs[i]));
    return p;
  }
};
} // namespace

Value emitExp32(OpBuilder &b, Location loc, Value x) {
  F64 f{b, loc};
  using P = arith::CmpFPredicate;
  const Value isNan = f.cmp(P::UNO, x, x);
  const Value over = f.cmp(P::OGT, x, f.f32(tr::kExpOverflow));
  const Value under = f.cmp(P::OLT, x, f.f32(tr::kExpUnderflow));
  // The C++ twin returns before computing out of range; here the value is
  // computed from 0 instead, so k's i64 conversion is always defined.
  const Value outside = arith::OrIOp::create(
      b, loc, isNan, arith::OrIOp::create(b, loc, over, under));
  const Value xd = f.widen(f.select(outside, f.f32(0.f), x));
  const Value k = f.round(f.mul(xd, f.c(tr::kLog2E)));
  const Value r = f.sub(f.sub(xd, f.mul(k, f.c(tr::kLn2Hi))), f.mul(k, f.c(tr::kLn2Lo)));
  const Value p = f.horner(tr::kExpPoly, r);
  const Value e = f.toI64(k);
  const Value biased = arith::AddIOp::create(b, loc, e, f.i64(1023));
  const Value scale =
      f.fromBits(arith::ShLIOp::create(b, loc, biased, f.i64(52)));
  Value result = f.narrow(f.mul(p, scale));
  result = f.select(under, f.f32(0.f), result);
  result = f.select(over, f.f32(std::numeric_limits<float>::infinity()), result);
  return f.select(isNan, x, result);
}

Value emitLog1p32(OpBuilder &b, Location loc, Value x) {
  F64 f{b, loc};
  using P = arith::CmpFPredicate;
  const Value isNan = f.cmp(P::UNO, x, x);
  const Value belowDomain = f.cmp(P::OLT, x, f.f32(-1.f));
  const Value atPole = f.cmp(P::OEQ, x, f.f32(-1.f));
  const Value isInf =
      f.cmp(P::OEQ, x, f.f32(std::numeric_limits<float>::infinity()));
  const Value xd = f.widen(x);
  const Value small = f.sub(xd, f.mul(f.mul(xd, xd), f.c(0.5)));
  const Value u = f.add(f.c(1.0), xd);
  const Value bits = f.bitsOf(u);
  Value e = arith::SubIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, bits, f.i64(52)), f.i64(1023));
  Value m = f.fromBits(arith::OrIOp::create(
      b, loc, arith::AndIOp::create(b, loc, bits, f.i64(0x000fffffffffffffll)),
      f.i64(int64_t(1023) << 52)));
  const Value high = f.cmp(P::OGT, m, f.c(tr::kSqrt2));
  m = f.select(high, f.mul(m, f.c(0.5)), m);
  e = f.select(high, arith::AddIOp::create(b, loc, e, f.i64(1)), e);
  const Value s = f.div(f.sub(m, f.c(1.0)), f.add(m, f.c(1.0)));
  const Value large = f.add(f.mul(f.toF64(e), f.c(tr::kLn2)),
                            f.mul(s, f.horner(tr::kAtanhPoly, f.mul(s, s))));
  const Value ad = f.select(f.cmp(P::OLT, xd, f.c(0.0)), f.neg(xd), xd);
  Value result = f.narrow(
      f.select(f.cmp(P::OLT, ad, f.c(tr::kSmallLog1p)), small, large));
  result = f.select(isInf, x, result);
  result = f.select(atPole, f.f32(-std::numeric_limits<float>::infinity()), result);
  result = f.select(belowDomain, f.f32(std::numeric_limits<float>::quiet_NaN()),
                    result);
  return f.select(isNan, x, result);
}

std::pair<Value, Value> emitSinCos32(OpBuilder &b, Location loc, Value x) {
  F64 f{b, loc};
  using P = arith::CmpFPredicate;
  const Value xd = f.widen(x);
  const Value ad = f.select(f.cmp(P::OLT, xd, f.c(0.0)), f.neg(xd), xd);
  const Value finite =
      f.cmp(P::OLE, ad, f.c(double(std::numeric_limits<float>::max())));
  Value k = f.round(f.mul(xd, f.c(tr::kTwoOverPi)));
  k = f.select(f.cmp(P::OGT, k, f.c(tr::kMaxQuadrant)), f.c(tr::kMaxQuadrant), k);
  k = f.select(f.cmp(P::OLT, k, f.c(-tr::kMaxQuadrant)), f.c(-tr::kMaxQuadrant), k);
  k = f.select(f.cmp(P::UNE, k, k), f.c(0.0), k);
  const Value r =
      f.sub(f.sub(xd, f.mul(k, f.c(tr::kPio2Hi))), f.mul(k, f.c(tr::kPio2Lo)));
  const Value r2 = f.mul(r, r);
  const Value s = f.mul(r, f.add(f.c(1.0), f.mul(r2, f.horner(tr::kSinPoly, r2))));
  const Value c = f.add(f.c(1.0), f.mul(r2, f.horner(tr::kCosPoly, r2)));
  const Value q = arith::AndIOp::create(b, loc, f.toI64(k), f.i64(3));
  auto quadrant = [&](int64_t n) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, q, f.i64(n));
  };
  const Value q0 = quadrant(0), q1 = quadrant(1), q2 = quadrant(2);
  const Value sv =
      f.select(q0, s, f.select(q1, c, f.select(q2, f.neg(s), f.neg(c))));
  const Value cv =
      f.select(q0, c, f.select(q1, f.neg(s), f.select(q2, f.neg(c), s)));
  const Value nan = f.c(std::numeric_limits<double>::quiet_NaN());
  return {f.narrow(f.select(finite, sv, nan)), f.narrow(f.select(finite, cv, nan))};
}

} // namespace csa::codegen

//===- Transcendental.cpp - exp, log1p, sin/cos of csa --------------------===//
//
// Each function is written as the exact sequence of f64 operations that
// codegen/host/Transcendental.cpp emits; keep the two in step. Built with
// -ffp-contract=off (no FMA contraction), like the rest of csa_numerics.
//
//===----------------------------------------------------------------------===//

#include "runtime/numerics/Transcendental.h"

#include <cstdint>
#include <cstring>
#include <limits>

namespace csa::numerics {
namespace {
using namespace transcendental;

double bitsToDouble(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}
uint64_t doubleToBits(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return bits;
}
template <size_t N> double horner(const std::array<double, N> &c, double x) {
  double p = c[0];
  for (size_t i = 1; i < N; ++i)
    p = p * x + c[i];
  return p;
}
} // namespace

float exp32(float x) {
  if (x != x)
    return x;
  if (x > kExpOverflow)
    return std::numeric_limits<float>::infinity();
  if (x < kExpUnderflow)
    return 0.f;
  const double xd = x;
  const double k = (xd * kLog2E + kRoundMagic) - kRoundMagic;
  const double r = (xd - k * kLn2Hi) - k * kLn2Lo;
  const double p = horner(kExpPoly, r);
  const int64_t e = int64_t(k);
  const double scale = bitsToDouble(uint64_t(e + 1023) << 52);
  return float(p * scale);
}

float log1p32(float x) {
  if (x != x)
    return x;
  if (x < -1.f)
    return std::numeric_limits<float>::quiet_NaN();
  if (x == -1.f)
    return -std::numeric_limits<float>::infinity();
  if (x == std::numeric_limits<float>::infinity())
    return x;
  const double xd = x;
  const double small = xd - xd * xd * 0.5;
  const double u = 1.0 + xd;
  const uint64_t bits = doubleToBits(u);
  int64_t e = int64_t(bits >> 52) - 1023;
  double m = bitsToDouble((bits & 0x000fffffffffffffull) | (uint64_t(1023) << 52));
  if (m > kSqrt2) {
    m = m * 0.5;
    e = e + 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double large = double(e) * kLn2 + s * horner(kAtanhPoly, s * s);
  const double ad = xd < 0 ? -xd : xd;
  return float(ad < kSmallLog1p ? small : large);
}

void sincos32(float x, float &sin, float &cos) {
  const double xd = x;
  const double ad = xd < 0 ? -xd : xd;
  const bool finite = ad <= double(std::numeric_limits<float>::max());
  double k = (xd * kTwoOverPi + kRoundMagic) - kRoundMagic;
  // Past 2^52 the rounding trick is exact already; clamp keeps i64 defined.
  if (k > kMaxQuadrant)
    k = kMaxQuadrant;
  if (k < -kMaxQuadrant)
    k = -kMaxQuadrant;
  if (k != k) // NaN
    k = 0;
  const double r = (xd - k * kPio2Hi) - k * kPio2Lo;
  const double r2 = r * r;
  const double s = r * (1.0 + r2 * horner(kSinPoly, r2));
  const double c = 1.0 + r2 * horner(kCosPoly, r2);
  const int64_t q = int64_t(k) & 3;
  double sv = q == 0 ? s : q == 1 ? c : q == 2 ? -s : -c;
  double cv = q == 0 ? c : q == 1 ? -s : q == 2 ? -c : s;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  sin = float(finite ? sv : nan);
  cos = float(finite ? cv : nan);
}

} // namespace csa::numerics

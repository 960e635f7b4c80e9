//===- Transcendental.h - exp, log1p, sin/cos of csa -------------*- C++ -*-===//
//
// The f32 transcendental functions every csa target computes identically.
//
// libm's expf and libdevice's __nv_expf both round well but differently
// (about one input in a few thousand), so a GPU run drifted from the CPU
// reference after a few decode steps. csa defines these functions itself:
// each is a fixed sequence of IEEE f64 additions, multiplications and
// divisions (no FMA, no table), evaluated with an error far below f32's
// half-ulp and rounded once to f32. The reference forward calls the
// functions below; the kernel builders emit the same sequence as arith ops
// (codegen/host/Transcendental.cpp), so the CPU and the GPU agree bit for
// bit. Both sides take their constants from this header.
//
//===----------------------------------------------------------------------===//

#ifndef CSA_RUNTIME_NUMERICS_TRANSCENDENTAL_H
#define CSA_RUNTIME_NUMERICS_TRANSCENDENTAL_H

#include <array>

namespace csa::numerics {

/// e^x. NaN for NaN, +inf above 89, +0 below -104 (where f32 exp is 0).
float exp32(float x);

/// log(1 + x). NaN for NaN and x < -1, -inf at -1.
float log1p32(float x);

/// sin(x) and cos(x). Within an f32 rounding of the true values for
/// |x| < 2^20 * pi/2 (RoPE angles are position x frequency, below 2^20);
/// larger arguments give values that are deterministic but not accurate.
/// NaN for NaN and infinities.
void sincos32(float x, float &sin, float &cos);

namespace transcendental {

/// Round to nearest (even) by adding and subtracting 1.5 * 2^52.
inline constexpr double kRoundMagic = 6755399441055744.0;

// exp: k = round(x * log2(e)), r = x - k * ln2 (Cody-Waite, two parts; the
// high part has 32 significant bits so k * kLn2Hi is exact), then
// e^r = sum r^i / i! for i <= 11 (|r| <= ln2 / 2: error below 1e-14).
inline constexpr double kLog2E = 1.4426950408889634074;
inline constexpr double kLn2Hi = 6.93147180369123816490e-01;
inline constexpr double kLn2Lo = 1.90821492927058770002e-10;
inline constexpr float kExpOverflow = 89.f;
inline constexpr float kExpUnderflow = -104.f;
/// 1 / i!, highest degree first (Horner).
inline constexpr std::array<double, 12> kExpPoly = {
    1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320,
    1.0 / 5040,     1.0 / 720,     1.0 / 120,    1.0 / 24,
    1.0 / 6,        1.0 / 2,       1.0,          1.0};

// log1p: for |x| < 2^-29, x - x^2/2; otherwise u = 1 + x (exact in f64),
// u = m * 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s) with
// s = (m - 1) / (m + 1), |s| <= 0.1716: the odd series to s^21.
inline constexpr double kSmallLog1p = 1.862645149230957e-09; // 2^-29
inline constexpr double kLn2 = 0.69314718055994530942;
inline constexpr double kSqrt2 = 1.4142135623730951;
/// 2 / (2i + 1), highest degree first: 2 atanh(s) = s * P(s^2).
inline constexpr std::array<double, 11> kAtanhPoly = {
    2.0 / 21, 2.0 / 19, 2.0 / 17, 2.0 / 15, 2.0 / 13, 2.0 / 11,
    2.0 / 9,  2.0 / 7,  2.0 / 5,  2.0 / 3,  2.0};

// sin/cos: k = round(x * 2/pi), r = x - k * pi/2 (two parts; the high part
// has 33 significant bits so k * kPio2Hi is exact for |k| < 2^20), then the
// Taylor series of sin and cos on |r| <= pi/4 and the quadrant k mod 4.
inline constexpr double kTwoOverPi = 6.36619772367581382433e-01;
inline constexpr double kPio2Hi = 1.57079632673412561417e+00;
inline constexpr double kPio2Lo = 6.07710050650619224932e-11;
/// A bound that keeps k an exact f64 integer (and its i64 conversion defined).
inline constexpr double kMaxQuadrant = 4503599627370496.0; // 2^52
/// sin r = r * (1 + r^2 * S(r^2)) (so sin -0 = -0): (-1)^i / (2i + 1)!, i = 7..1.
inline constexpr std::array<double, 7> kSinPoly = {
    -1.0 / 1307674368000.0, 1.0 / 6227020800.0, -1.0 / 39916800.0,
    1.0 / 362880.0,         -1.0 / 5040.0,      1.0 / 120.0,
    -1.0 / 6.0};
/// cos r = 1 + r^2 * C(r^2): (-1)^i / (2i)!, i = 8..1.
inline constexpr std::array<double, 8> kCosPoly = {
    1.0 / 20922789888000.0, -1.0 / 87178291200.0, 1.0 / 479001600.0,
    -1.0 / 3628800.0,       1.0 / 40320.0,        -1.0 / 720.0,
    1.0 / 24.0,             -1.0 / 2.0};

} // namespace transcendental
} // namespace csa::numerics

#endif // CSA_RUNTIME_NUMERICS_TRANSCENDENTAL_H

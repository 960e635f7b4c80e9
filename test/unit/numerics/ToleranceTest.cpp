//===- ToleranceTest.cpp - The dot-product bound of the tolerance contract ===//
#include "runtime/numerics/Tolerance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

using namespace csa::numerics;

namespace {
float sumInOrder(const std::vector<float> &v) {
  float s = 0;
  for (float x : v)
    s += x;
  return s;
}
float sumPairwise(const std::vector<float> &v, size_t lo, size_t hi) {
  if (hi - lo == 1)
    return v[lo];
  const size_t mid = lo + (hi - lo) / 2;
  return sumPairwise(v, lo, mid) + sumPairwise(v, mid, hi);
}
} // namespace

TEST(Tolerance, GammaIsNuOverOneMinusNu) {
  EXPECT_DOUBLE_EQ(fp32Gamma(1), std::ldexp(1.0, -24) / (1 - std::ldexp(1.0, -24)));
  EXPECT_TRUE(std::isinf(fp32Gamma(int64_t(1) << 24)));
}

TEST(Tolerance, TwoSummationOrdersStayWithinTheBound) {
  // Products of mixed signs summed in order and pairwise, in fp32: their
  // difference is within the f32 bound, and the bound is not vacuous (it is
  // far below S).
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  double worst = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 64 + trial * 37;
    std::vector<float> terms(static_cast<size_t>(n));
    double absSum = 0;
    for (float &t : terms) {
      t = normal(gen) * normal(gen);
      absSum += std::fabs(t);
    }
    const float a = sumInOrder(terms), b = sumPairwise(terms, 0, terms.size());
    const double bound = dotErrorBound(n, absSum, a, /*outputBf16=*/false);
    ASSERT_LE(std::fabs(double(a) - double(b)), bound) << "n " << n;
    EXPECT_LT(bound, 2e-3 * absSum);
    worst = std::max(worst, std::fabs(double(a) - double(b)) / bound);
  }
  EXPECT_GT(worst, 0.0); // the orders did differ
}

TEST(Tolerance, RmsNormsOfTwoSummationOrdersStayWithinTheNormBound) {
  // An RMS norm whose sum of squares is added in order and as a tree: every
  // output (f32, and rounded to bf16) within normErrorBound of the other's,
  // and the f32 bound far below the value (not vacuous).
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.f, 3.f);
  auto toBf16 = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
    float r;
    std::memcpy(&r, &u, 4);
    return r;
  };
  double worst = 0;
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t n = 128 + trial * 101;
    std::vector<float> x(static_cast<size_t>(n)), squares(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = normal(gen);
      squares[i] = x[i] * x[i];
    }
    auto inverse = [&](float sum) { return 1.f / std::sqrt(sum / float(n) + 1e-6f); };
    const float ia = inverse(sumInOrder(squares)), ib = inverse(sumPairwise(squares, 0, squares.size()));
    for (float v : x) {
      const float a = v * ia, b = v * ib;
      ASSERT_LE(std::fabs(double(a) - double(b)), normErrorBound(n, a, false)) << "n " << n;
      EXPECT_LT(normErrorBound(n, a, false), 1e-3 * std::fabs(a) + 1e-40);
      ASSERT_LE(std::fabs(double(toBf16(a)) - double(toBf16(b))),
                normErrorBound(n, toBf16(a), true));
      if (a != b)
        worst = std::max(worst, std::fabs(double(a) - double(b)) / normErrorBound(n, a, false));
    }
  }
  EXPECT_GT(worst, 0.0); // the orders did differ
}

TEST(Tolerance, Bf16OutputsAddOneRoundingEach) {
  // Equal sums: only the two roundings to bf16 (2^-8 of the value each).
  EXPECT_NEAR(dotErrorBound(1, 0, 256, true), 2.0 * (1 + std::ldexp(1.0, -8)), 1e-9);
  // A zero sum of magnitudes allows no more than a subnormal.
  EXPECT_LT(dotErrorBound(100, 0, 0, false), 1e-44);
}

TEST(Tolerance, MagnitudesClearTheSignOfEachEncoding) {
  uint8_t e4m3[3] = {0x80, 0xC5, 0x45};
  takeMagnitudes(e4m3, 3, 1, OperandEncoding::E4M3);
  EXPECT_EQ(e4m3[0], 0x00);
  EXPECT_EQ(e4m3[1], 0x45);
  EXPECT_EQ(e4m3[2], 0x45);
  uint8_t e2m1[2] = {0xF9, 0x8F}; // nibbles: low 9 (-0.5), high F (-6); F, 8
  takeMagnitudes(e2m1, 2, 1, OperandEncoding::E2M1x2);
  EXPECT_EQ(e2m1[0], 0x71);
  EXPECT_EQ(e2m1[1], 0x07);
  uint16_t bf[2] = {0xBF80, 0x3F80}; // -1, 1
  takeMagnitudes(bf, 2, 2, OperandEncoding::Real);
  EXPECT_EQ(bf[0], 0x3F80);
  EXPECT_EQ(bf[1], 0x3F80);
  float f[2] = {-2.5f, 3.f};
  takeMagnitudes(f, 2, 4, OperandEncoding::Real);
  EXPECT_EQ(f[0], 2.5f);
  EXPECT_EQ(f[1], 3.f);
  uint8_t scale = 0xFE;
  takeMagnitudes(&scale, 1, 1, OperandEncoding::UE8M0);
  EXPECT_EQ(scale, 0xFE);
  EXPECT_FALSE(parseOperandEncoding("fp8").has_value());
  EXPECT_EQ(*parseOperandEncoding("e2m1x2"), OperandEncoding::E2M1x2);
}

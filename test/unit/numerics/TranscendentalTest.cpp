//===- TranscendentalTest.cpp - csa's exp32, log1p32, sincos32 ------------===//
//
// Accuracy against libm evaluated in f64 (then rounded once), and the special
// values. Bit identity with the generated kernels is checked in
// test/unit/codegen/TranscendentalKernelTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/numerics/Transcendental.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

namespace nx = csa::numerics;

namespace {
/// Distance in representable floats (same-sign values; 0 for equal bits).
int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if ((ia < 0) != (ib < 0))
    return a == b ? 0 : std::numeric_limits<int64_t>::max();
  return std::llabs(int64_t(ia) - int64_t(ib));
}
float fromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
constexpr float kInf = std::numeric_limits<float>::infinity();
} // namespace

TEST(Transcendental, ExpIsWithinOneUlpOfLibmInDoubleOverItsRange) {
  int64_t exact = 0, total = 0;
  // Every 61st f32 in [-104, 89] (both signs): about 34 million values.
  for (uint32_t bits = 0; bits < 0x80000000u; bits += 61) {
    for (float x : {fromBits(bits), -fromBits(bits)}) {
      if (!(x >= -104.f && x <= 89.f))
        continue;
      const float want = float(std::exp(double(x)));
      const float got = nx::exp32(x);
      ASSERT_LE(ulps(got, want), 1) << "x = " << x;
      exact += got == want;
      ++total;
    }
  }
  // Nearly always the correctly rounded value (f64 evaluation).
  EXPECT_GT(double(exact) / double(total), 0.9999);
}

TEST(Transcendental, ExpSpecialValues) {
  EXPECT_EQ(nx::exp32(0.f), 1.f);
  EXPECT_EQ(nx::exp32(-0.f), 1.f);
  EXPECT_EQ(nx::exp32(kInf), kInf);
  EXPECT_EQ(nx::exp32(89.5f), kInf);
  EXPECT_EQ(nx::exp32(-kInf), 0.f);
  EXPECT_EQ(nx::exp32(-105.f), 0.f);
  EXPECT_TRUE(std::isnan(nx::exp32(std::nanf(""))));
  // Subnormal results round once, like libm in f64.
  for (float x : {-87.5f, -95.f, -100.f, -103.9f})
    EXPECT_LE(ulps(nx::exp32(x), float(std::exp(double(x)))), 1) << x;
}

TEST(Transcendental, Log1pIsWithinOneUlpOfLibmInDouble) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bitsOf(0, 0x7f7fffffu);
  for (int i = 0; i < 2000000; ++i) {
    float x = fromBits(bitsOf(gen));
    if (i % 2 && x < 1.f)
      x = -x; // (-1, 0) as well
    const float want = float(std::log1p(double(x)));
    ASSERT_LE(ulps(nx::log1p32(x), want), 1) << "x = " << x;
  }
  // The softplus range of the MoE router: log1p(exp(z)) for z <= 20.
  for (float z = -30.f; z <= 20.f; z += 1.f / 1024) {
    const float y = nx::exp32(z);
    ASSERT_LE(ulps(nx::log1p32(y), float(std::log1p(double(y)))), 1) << z;
  }
}

TEST(Transcendental, Log1pSpecialValues) {
  EXPECT_EQ(nx::log1p32(0.f), 0.f);
  EXPECT_EQ(nx::log1p32(-1.f), -kInf);
  EXPECT_EQ(nx::log1p32(kInf), kInf);
  EXPECT_TRUE(std::isnan(nx::log1p32(-1.5f)));
  EXPECT_TRUE(std::isnan(nx::log1p32(std::nanf(""))));
  EXPECT_EQ(nx::log1p32(1e-30f), 1e-30f);
}

TEST(Transcendental, SinCosAreWithinOneUlpOfLibmInDoubleForRopeAngles) {
  // RoPE angles: position (< 2^20) times a frequency <= 1.
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> frequency(0.f, 1.f);
  std::uniform_int_distribution<int32_t> position(0, (1 << 20) - 1);
  for (int i = 0; i < 2000000; ++i) {
    const float x = float(position(gen)) * frequency(gen) * (i % 2 ? 1.f : -1.f);
    float s, c;
    nx::sincos32(x, s, c);
    ASSERT_LE(ulps(s, float(std::sin(double(x)))), 1) << "sin " << x;
    ASSERT_LE(ulps(c, float(std::cos(double(x)))), 1) << "cos " << x;
  }
}

TEST(Transcendental, SinCosSpecialValues) {
  float s, c;
  nx::sincos32(0.f, s, c);
  EXPECT_EQ(s, 0.f);
  EXPECT_EQ(c, 1.f);
  nx::sincos32(-0.f, s, c);
  EXPECT_TRUE(std::signbit(s));
  for (float x : {kInf, -kInf, std::nanf("")}) {
    nx::sincos32(x, s, c);
    EXPECT_TRUE(std::isnan(s) && std::isnan(c)) << x;
  }
  // Up to 2^20 * pi/2 (the longest RoPE angle of a 1M context) accurate.
  for (float x : {1647099.f, -1647099.f}) {
    nx::sincos32(x, s, c);
    EXPECT_LE(ulps(s, float(std::sin(double(x)))), 1) << x;
    EXPECT_LE(ulps(c, float(std::cos(double(x)))), 1) << x;
  }
}

//===- NumericsTest.cpp - Scalar codec tests ------------------------------===//
//
// Every code point of E2M1, E4M3 and UE8M0, rounding ties, special inputs,
// and sweeps over fp32 bit patterns against an independent nearest-value
// search (so the bit-twiddling encoders are checked by something simpler).
//
//===----------------------------------------------------------------------===//

#include "runtime/numerics/Numerics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace csa::numerics;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool sameBits(float a, float b) { return floatBits(a) == floatBits(b); }

float negNaN() { return floatFromBits(0xFFC00000u); }

/// Independent RNE with saturation: `mags[c]` is the (ascending) value of
/// magnitude code c. Returns the magnitude code nearest to `a` >= 0, ties to
/// the even code (code lsb = mantissa lsb in all these formats).
unsigned nearestEvenCode(double a, const std::vector<double> &mags) {
  if (a >= mags.back())
    return static_cast<unsigned>(mags.size() - 1);
  std::size_t lo = 0, hi = mags.size() - 1; // mags[lo] <= a < mags[hi]
  while (hi - lo > 1) {
    std::size_t mid = (lo + hi) / 2;
    (mags[mid] <= a ? lo : hi) = mid;
  }
  double dLo = a - mags[lo], dHi = mags[hi] - a;
  if (dLo < dHi)
    return static_cast<unsigned>(lo);
  if (dHi < dLo)
    return static_cast<unsigned>(hi);
  return static_cast<unsigned>(lo % 2 == 0 ? lo : hi);
}

std::vector<double> e4m3Magnitudes() {
  std::vector<double> mags;
  for (unsigned c = 0; c <= 0x7E; ++c)
    mags.push_back(decodeE4M3(static_cast<std::uint8_t>(c)));
  return mags;
}

std::vector<double> e2m1Magnitudes() {
  return {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
}

} // namespace

//===----------------------------------------------------------------------===//
// bf16
//===----------------------------------------------------------------------===//

TEST(Bf16, EveryBf16ValueRoundTrips) {
  for (unsigned b = 0; b < 0x10000; ++b) {
    std::uint16_t bits = static_cast<std::uint16_t>(b);
    float x = bf16ToFloat(bits);
    if (std::isnan(x)) {
      // NaN stays NaN, keeps its sign, comes back quiet.
      std::uint16_t back = floatToBf16(x);
      EXPECT_EQ(back, bits | 0x0040) << std::hex << b;
    } else {
      EXPECT_EQ(floatToBf16(x), bits) << std::hex << b;
    }
  }
}

TEST(Bf16, TiesRoundToEven) {
  const float ulp = std::ldexp(1.0f, -7); // bf16 ulp at 1
  // 1 + ulp/2 lies between 1 (even) and 1 + ulp (odd): down.
  EXPECT_EQ(roundToBf16(1.0f + ulp / 2), 1.0f);
  // 1 + 3ulp/2 lies between 1 + ulp (odd) and 1 + 2ulp (even): up.
  EXPECT_EQ(roundToBf16(1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);
  EXPECT_EQ(roundToBf16(-(1.0f + ulp / 2)), -1.0f);
  EXPECT_EQ(roundToBf16(std::nextafter(1.0f + ulp / 2, 2.0f)), 1.0f + ulp);
  EXPECT_EQ(roundToBf16(std::nextafter(1.0f + 3 * ulp / 2, 0.0f)), 1.0f + ulp);
  // Subnormal ties: bf16's smallest subnormal is 2^-133.
  EXPECT_EQ(roundToBf16(std::ldexp(1.0f, -134)), 0.0f);
  EXPECT_EQ(roundToBf16(std::ldexp(3.0f, -134)), std::ldexp(1.0f, -132));
}

TEST(Bf16, SpecialInputs) {
  EXPECT_EQ(floatToBf16(0.0f), 0x0000);
  EXPECT_EQ(floatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(floatToBf16(kInf), 0x7F80);
  EXPECT_EQ(floatToBf16(-kInf), 0xFF80);
  // FLT_MAX is above the largest bf16 plus half an ulp: rounds to infinity.
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(floatToBf16(-std::numeric_limits<float>::max()), 0xFF80);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(floatToBf16(-std::numeric_limits<float>::denorm_min()), 0x8000);
  EXPECT_EQ(floatToBf16(std::ldexp(1.0f, -133)), 0x0001);
  // NaNs: quiet, sign and top payload kept; a signalling NaN whose payload
  // lies only in the dropped bits does not become infinity.
  EXPECT_EQ(floatToBf16(floatFromBits(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(floatToBf16(floatFromBits(0xFF800001u)), 0xFFC0);
  EXPECT_EQ(floatToBf16(floatFromBits(0x7FC12345u)), 0x7FC1);
  EXPECT_EQ(floatToBf16(kNaN), 0x7FC0);
}

TEST(Bf16, MatchesReferenceRoundingOnSweep) {
  // Every 251st positive fp32 pattern, plus its negative.
  for (std::uint64_t b = 0; b < 0x7F800000u; b += 251) {
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      std::uint32_t bits = static_cast<std::uint32_t>(b) | sign;
      float x = floatFromBits(bits);
      std::uint32_t lo = bits & 0xFFFF0000u;
      double loVal = floatFromBits(lo);
      // The next bf16 away from zero; above the largest finite bf16 it is
      // infinity, which RNE treats as 2^128 when rounding.
      double hiVal = (lo & 0x7FFFFFFFu) == 0x7F7F0000u
                         ? std::copysign(std::ldexp(1.0, 128), x)
                         : static_cast<double>(floatFromBits(lo + 0x10000u));
      double dLo = std::fabs(x - loVal), dHi = std::fabs(hiVal - x);
      std::uint16_t expected = static_cast<std::uint16_t>(lo >> 16);
      if (dHi < dLo || (dHi == dLo && (expected & 1)))
        ++expected;
      ASSERT_EQ(floatToBf16(x), expected) << std::hex << bits;
    }
  }
}

//===----------------------------------------------------------------------===//
// E2M1
//===----------------------------------------------------------------------===//

TEST(E2M1, DecodesEveryCode) {
  const float expected[16] = {0,  0.5f,  1,  1.5f,  2,  3,  4,  6,
                              -0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (unsigned c = 0; c < 16; ++c) {
    EXPECT_EQ(decodeE2M1(static_cast<std::uint8_t>(c)), expected[c]) << c;
    EXPECT_EQ(std::signbit(decodeE2M1(static_cast<std::uint8_t>(c))), c >= 8)
        << c;
    // Only the low nibble is decoded.
    EXPECT_EQ(decodeE2M1(static_cast<std::uint8_t>(0xA0 | c)), expected[c]);
  }
  EXPECT_TRUE(sameBits(decodeE2M1(8), -0.0f));
}

TEST(E2M1, EveryCodeReencodesToItself) {
  // Including code 8: -0 keeps its sign.
  for (unsigned c = 0; c < 16; ++c)
    EXPECT_EQ(encodeE2M1(decodeE2M1(static_cast<std::uint8_t>(c))), c) << c;
}

TEST(E2M1, TiesRoundToEvenMantissa) {
  struct Case {
    float in, lo, hi, out; // tie `in` between neighbours lo and hi
  } cases[] = {{0.25f, 0.0f, 0.5f, 0.0f}, {0.75f, 0.5f, 1.0f, 1.0f},
               {1.25f, 1.0f, 1.5f, 1.0f}, {1.75f, 1.5f, 2.0f, 2.0f},
               {2.5f, 2.0f, 3.0f, 2.0f},  {3.5f, 3.0f, 4.0f, 4.0f},
               {5.0f, 4.0f, 6.0f, 4.0f}};
  for (const Case &c : cases) {
    EXPECT_EQ(roundToE2M1(c.in), c.out) << c.in;
    EXPECT_EQ(roundToE2M1(-c.in), -c.out) << -c.in;
    // Just off the tie the nearest neighbour wins.
    EXPECT_EQ(roundToE2M1(std::nextafter(c.in, 0.0f)), c.lo) << c.in;
    EXPECT_EQ(roundToE2M1(std::nextafter(c.in, 100.0f)), c.hi) << c.in;
  }
  EXPECT_EQ(encodeE2M1(0.25f), 0x0);
  EXPECT_EQ(encodeE2M1(-0.25f), 0x8); // negative zero
}

TEST(E2M1, SpecialInputs) {
  EXPECT_EQ(encodeE2M1(0.0f), 0x0);
  EXPECT_EQ(encodeE2M1(-0.0f), 0x8);
  EXPECT_EQ(encodeE2M1(std::numeric_limits<float>::denorm_min()), 0x0);
  EXPECT_EQ(encodeE2M1(-std::numeric_limits<float>::denorm_min()), 0x8);
  EXPECT_EQ(encodeE2M1(std::numeric_limits<float>::min()), 0x0);
  // Saturation at +-6.
  EXPECT_EQ(encodeE2M1(6.0f), 0x7);
  EXPECT_EQ(encodeE2M1(6.9f), 0x7);
  EXPECT_EQ(encodeE2M1(7.0f), 0x7); // would round to 8 without saturation
  EXPECT_EQ(encodeE2M1(1e30f), 0x7);
  EXPECT_EQ(encodeE2M1(std::numeric_limits<float>::max()), 0x7);
  EXPECT_EQ(encodeE2M1(kInf), 0x7);
  EXPECT_EQ(encodeE2M1(-kInf), 0xF);
  EXPECT_EQ(encodeE2M1(-100.0f), 0xF);
  // NaN -> +0 (documented choice), whatever its sign.
  EXPECT_EQ(encodeE2M1(kNaN), 0x0);
  EXPECT_EQ(encodeE2M1(negNaN()), 0x0);
}

TEST(E2M1, MatchesReferenceOnSweep) {
  std::vector<double> mags = e2m1Magnitudes();
  // Every 257th fp32 pattern in [0, 16], both signs.
  for (std::uint32_t b = 0; b <= 0x41800000u; b += 257) {
    float x = floatFromBits(b);
    unsigned code = nearestEvenCode(x, mags);
    ASSERT_EQ(encodeE2M1(x), code) << x;
    ASSERT_EQ(encodeE2M1(-x), code | 0x8) << -x;
  }
}

TEST(E2M1, PackingPutsEvenElementInLowNibble) {
  EXPECT_EQ(packE2M1(0x3, 0xC), 0xC3);
  EXPECT_EQ(lowE2M1(0xC3), 0x3);
  EXPECT_EQ(highE2M1(0xC3), 0xC);
}

//===----------------------------------------------------------------------===//
// E4M3
//===----------------------------------------------------------------------===//

TEST(E4M3, DecodesEveryCode) {
  for (unsigned c = 0; c < 256; ++c) {
    float v = decodeE4M3(static_cast<std::uint8_t>(c));
    unsigned e = (c >> 3) & 0xF, m = c & 7;
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    double mag = e == 0 ? std::ldexp(static_cast<double>(m), -9)
                        : std::ldexp(1.0 + m / 8.0, static_cast<int>(e) - 7);
    EXPECT_EQ(v, (c & 0x80) ? -mag : mag) << c;
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << c;
  }
  EXPECT_EQ(decodeE4M3(0x7E), 448.0f);
  EXPECT_EQ(decodeE4M3(0xFE), -448.0f);
  EXPECT_EQ(decodeE4M3(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(decodeE4M3(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(decodeE4M3(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(decodeE4M3(0x38), 1.0f);
  EXPECT_TRUE(sameBits(decodeE4M3(0x80), -0.0f));
  EXPECT_EQ(kE4M3Max, 448.0f);
  EXPECT_EQ(kE4M3MinSubnormal, std::ldexp(1.0f, -9));
}

TEST(E4M3, EveryNonNaNCodeReencodesToItself) {
  int checked = 0;
  for (unsigned c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F)
      continue;
    EXPECT_EQ(encodeE4M3(decodeE4M3(static_cast<std::uint8_t>(c))), c) << c;
    ++checked;
  }
  EXPECT_EQ(checked, 254);
}

TEST(E4M3, MidpointsRoundToEven) {
  // Every pair of adjacent codes, subnormals included (0..7 are subnormal,
  // 7 -> 8 crosses into the normals).
  for (unsigned c = 0; c < 0x7E; ++c) {
    float lo = decodeE4M3(static_cast<std::uint8_t>(c));
    float hi = decodeE4M3(static_cast<std::uint8_t>(c + 1));
    float mid = (lo + hi) / 2; // exact: one more bit than either neighbour
    unsigned even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(encodeE4M3(mid), even) << mid;
    EXPECT_EQ(encodeE4M3(-mid), even | 0x80) << -mid;
    EXPECT_EQ(encodeE4M3(std::nextafter(mid, 0.0f)), c) << mid;
    EXPECT_EQ(encodeE4M3(std::nextafter(mid, kInf)), c + 1) << mid;
  }
  // A few by hand.
  EXPECT_EQ(roundToE4M3(std::ldexp(1.0f, -10)), 0.0f); // 0 vs 2^-9: even 0
  EXPECT_EQ(roundToE4M3(std::ldexp(3.0f, -10)), std::ldexp(2.0f, -9));
  EXPECT_EQ(roundToE4M3(1.0625f), 1.0f);  // 1 vs 1.125
  EXPECT_EQ(roundToE4M3(1.1875f), 1.25f); // 1.125 vs 1.25
  EXPECT_EQ(roundToE4M3(232.0f), 224.0f); // 224 (0x76) vs 240 (0x77)
  EXPECT_EQ(roundToE4M3(248.0f), 256.0f); // 240 (0x77) vs 256 (0x78)
  EXPECT_EQ(roundToE4M3(15.0f / 1024), 16.0f / 1024); // 7*2^-9 vs 2^-6
}

TEST(E4M3, SpecialInputsAndSaturation) {
  EXPECT_EQ(encodeE4M3(0.0f), 0x00);
  EXPECT_EQ(encodeE4M3(-0.0f), 0x80);
  EXPECT_EQ(encodeE4M3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(encodeE4M3(-std::numeric_limits<float>::denorm_min()), 0x80);
  EXPECT_EQ(encodeE4M3(std::numeric_limits<float>::min()), 0x00);
  EXPECT_EQ(encodeE4M3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(encodeE4M3(448.0f), 0x7E);
  EXPECT_EQ(encodeE4M3(449.0f), 0x7E);
  EXPECT_EQ(encodeE4M3(464.0f), 0x7E); // tie between 448 and the NaN slot
  EXPECT_EQ(encodeE4M3(480.0f), 0x7E);
  EXPECT_EQ(encodeE4M3(1e6f), 0x7E);
  EXPECT_EQ(encodeE4M3(std::numeric_limits<float>::max()), 0x7E);
  EXPECT_EQ(encodeE4M3(kInf), 0x7E);
  EXPECT_EQ(encodeE4M3(-448.0f), 0xFE);
  EXPECT_EQ(encodeE4M3(-1e6f), 0xFE);
  EXPECT_EQ(encodeE4M3(-kInf), 0xFE);
  EXPECT_EQ(encodeE4M3(kNaN), kE4M3NaN);
  EXPECT_EQ(encodeE4M3(negNaN()), kE4M3NaN);
  EXPECT_EQ(encodeE4M3(floatFromBits(0x7F800001u)), kE4M3NaN);
}

TEST(E4M3, MatchesReferenceOnSweep) {
  std::vector<double> mags = e4m3Magnitudes();
  // Every 127th fp32 pattern in [0, 1024] (subnormal fp32 inputs, the whole
  // E4M3 range and the saturation region), both signs.
  for (std::uint32_t b = 0; b <= 0x44800000u; b += 127) {
    float x = floatFromBits(b);
    unsigned code = nearestEvenCode(x, mags);
    ASSERT_EQ(encodeE4M3(x), code) << x;
    ASSERT_EQ(encodeE4M3(-x), code | 0x80) << -x;
  }
}

//===----------------------------------------------------------------------===//
// UE8M0
//===----------------------------------------------------------------------===//

TEST(Ue8m0, DecodesEveryCode) {
  for (unsigned c = 0; c < 255; ++c)
    EXPECT_TRUE(sameBits(decodeUe8m0(static_cast<std::uint8_t>(c)),
                         std::ldexp(1.0f, static_cast<int>(c) - 127)))
        << c;
  EXPECT_TRUE(std::isnan(decodeUe8m0(0xFF)));
  EXPECT_EQ(decodeUe8m0(127), 1.0f);
  EXPECT_EQ(decodeUe8m0(0), std::ldexp(1.0f, -127)); // an fp32 subnormal
  EXPECT_EQ(decodeUe8m0(254), std::ldexp(1.0f, 127));
}

TEST(Ue8m0, EveryCodeReencodesToItself) {
  for (unsigned c = 0; c < 256; ++c)
    EXPECT_EQ(encodeUe8m0(decodeUe8m0(static_cast<std::uint8_t>(c))), c) << c;
}

TEST(Ue8m0, OtherValuesRoundUpOrSaturate) {
  EXPECT_EQ(encodeUe8m0(3.0f), 129);
  EXPECT_EQ(encodeUe8m0(std::nextafter(1.0f, 2.0f)), 128);
  EXPECT_EQ(encodeUe8m0(std::nextafter(1.0f, 0.0f)), 127);
  EXPECT_EQ(encodeUe8m0(0.75f), 127);
  EXPECT_EQ(encodeUe8m0(-4.0f), 129); // sign ignored
  EXPECT_EQ(encodeUe8m0(0.0f), 0);
  EXPECT_EQ(encodeUe8m0(-0.0f), 0);
  EXPECT_EQ(encodeUe8m0(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(encodeUe8m0(std::ldexp(1.5f, -127)), 1);
  EXPECT_EQ(encodeUe8m0(std::numeric_limits<float>::min()), 1);
  EXPECT_EQ(encodeUe8m0(std::ldexp(1.5f, 126)), 254);
  EXPECT_EQ(encodeUe8m0(std::ldexp(1.5f, 127)), 254); // saturates
  EXPECT_EQ(encodeUe8m0(std::numeric_limits<float>::max()), 254);
  EXPECT_EQ(encodeUe8m0(kInf), 254);
  EXPECT_EQ(encodeUe8m0(-kInf), 254);
  EXPECT_EQ(encodeUe8m0(kNaN), kUe8m0NaN);
}

TEST(Ue8m0, ExponentBitTrickIsCeilLog2) {
  // Every 4093rd positive normal fp32.
  for (std::uint32_t b = 0x00800000u; b < 0x7F000000u; b += 4093) {
    float x = floatFromBits(b);
    int e;
    double m = std::frexp(static_cast<double>(x), &e); // x = m 2^e, m in [.5,1)
    int ceilLog2 = m == 0.5 ? e - 1 : e;
    ASSERT_EQ(ceilPow2Ue8m0(x), ceilLog2 + 127) << x;
    ASSERT_EQ(ceilPow2Ue8m0(x), encodeUe8m0(x)) << x;
  }
}

//===----------------------------------------------------------------------===//
// Products
//===----------------------------------------------------------------------===//

TEST(Products, E2M1TimesE4M3IsExactInBf16) {
  // The dequantized main-KV cache can be formed in bf16 without rounding:
  // 2 significant bits times 4 stay within bf16's 8, and the exponent range
  // is far inside bf16's.
  int checked = 0;
  for (unsigned a = 0; a < 16; ++a) {
    for (unsigned s = 0; s < 256; ++s) {
      if ((s & 0x7F) == 0x7F)
        continue;
      float x = decodeE2M1(static_cast<std::uint8_t>(a));
      float y = decodeE4M3(static_cast<std::uint8_t>(s));
      float p = x * y;
      EXPECT_EQ(static_cast<double>(p), static_cast<double>(x) * y); // fp32
      EXPECT_TRUE(sameBits(roundToBf16(p), p)) << a << " " << s;     // bf16
      ++checked;
    }
  }
  EXPECT_EQ(checked, 16 * 254);
}

//===----------------------------------------------------------------------===//
// Batch encoders: the scalar encoders' bytes for every input
//===----------------------------------------------------------------------===//

/// Inputs covering every rounding boundary of the three formats: each of the
/// 2^16 values of sign, exponent and the top 7 mantissa bits (E4M3 and E2M1
/// round inside those) with low halves at and around the bf16 tie (bit 15),
/// at zero and one (exact ties of the narrow formats and just above) and at
/// the top; NaNs and infinities included.
std::vector<float> boundaryInputs() {
  std::vector<float> out;
  const std::uint32_t lows[] = {0,      1,      2,      0x7FFF, 0x8000,
                                0x8001, 0xFFFE, 0xFFFF, 0x1234, 0xC001};
  for (std::uint32_t high = 0; high < 0x10000; ++high)
    for (std::uint32_t low : lows)
      out.push_back(floatFromBits(high << 16 | low));
  return out;
}

TEST(BatchEncoders, E4M3MatchesTheScalarEncoder) {
  const std::vector<float> in = boundaryInputs();
  std::vector<std::uint8_t> out(in.size());
  for (float m : {1.0f, 0.125f, 32.0f}) {
    encodeE4M3Scaled(in.data(), m, std::int64_t(in.size()), out.data());
    for (size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(out[i], encodeE4M3(in[i] * m))
          << "bits 0x" << std::hex << floatBits(in[i]) << " m " << m;
  }
}

TEST(BatchEncoders, E2M1PairsMatchTheScalarEncoder) {
  const std::vector<float> in = boundaryInputs();
  std::vector<std::uint8_t> out(in.size() / 2);
  for (float m : {1.0f, 0.25f, 8.0f}) {
    encodeE2M1PairsScaled(in.data(), m, std::int64_t(out.size()), out.data());
    for (size_t j = 0; j < out.size(); ++j)
      ASSERT_EQ(out[j], packE2M1(encodeE2M1(in[2 * j] * m),
                                 encodeE2M1(in[2 * j + 1] * m)))
          << "bits 0x" << std::hex << floatBits(in[2 * j]) << ", 0x"
          << floatBits(in[2 * j + 1]) << " m " << m;
  }
}

TEST(BatchEncoders, Bf16BytesMatchTheScalarConversion) {
  const std::vector<float> in = boundaryInputs();
  std::vector<std::uint8_t> out(2 * in.size());
  floatToBf16Bytes(in.data(), std::int64_t(in.size()), out.data());
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(std::uint16_t(out[2 * i] | out[2 * i + 1] << 8),
              floatToBf16(in[i]))
        << "bits 0x" << std::hex << floatBits(in[i]);
}

//===- QuantizeTest.cpp - Block quantizer, cache row and weight tests -----===//
//
// Hand-computed rows for each cache format, byte layout (nibble order, scale
// placement, sizes), amax floors, error bounds on random rows, idempotence of
// quantize(dequantize(.)), and the weight dequantizers.
//
// Random inputs are rounded to bf16 first, as the reference feeds bf16.
//
//===----------------------------------------------------------------------===//

#include "runtime/numerics/Numerics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace csa::numerics;

namespace {

using Bytes = std::vector<std::uint8_t>;
using Floats = std::vector<float>;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kFltMax = std::numeric_limits<float>::max();

bool sameBits(float a, float b) { return floatBits(a) == floatBits(b); }

/// Deterministic inputs from the engine's raw output only (the standard
/// distributions are not specified bit-for-bit across library vendors).
class Rng {
public:
  explicit Rng(std::uint32_t seed) : engine(seed) {}
  std::uint32_t next() { return static_cast<std::uint32_t>(engine()); }
  /// Uniform in [-1, 1), 24 random bits, exact in fp32.
  float symmetric() {
    return std::ldexp(
        static_cast<float>(static_cast<std::int32_t>(next() >> 8) - (1 << 23)),
        -23);
  }
  int between(int lo, int hi) {
    return lo +
           static_cast<int>(next() % static_cast<std::uint32_t>(hi - lo + 1));
  }

private:
  std::mt19937 engine;
};

/// A bf16-valued row whose groups have magnitudes around 2^e, e drawn from
/// [minExp, maxExp] per group: elements in (-2^e, 2^e), one of them replaced
/// by +-2^e * [1, 2) so that amax lies in [2^e, 2^(e+1)) and its position
/// relative to the scale's power of two varies; about one in 16 is zero.
Floats randomRow(Rng &rng, std::size_t dim, std::size_t group, int minExp,
                 int maxExp) {
  Floats x(dim);
  for (std::size_t g = 0; g < dim; g += group) {
    int e = rng.between(minExp, maxExp);
    for (std::size_t i = g; i < g + group; ++i)
      x[i] = (rng.next() & 15) == 0
                 ? 0.0f
                 : roundToBf16(std::ldexp(rng.symmetric(), e));
    float big = roundToBf16(std::ldexp(1.5f + rng.symmetric() / 2, e));
    x[g + rng.next() % group] = (rng.next() & 1) ? big : -big;
  }
  return x;
}

Bytes quantize(RowFormat format, const Floats &x) {
  Bytes row(rowBytes(format, x.size()));
  quantizeRow(format, x.data(), x.size(), row.data());
  return row;
}

Floats dequantize(RowFormat format, const Bytes &row, std::size_t dim) {
  Floats y(dim);
  dequantizeRow(format, row.data(), dim, y.data());
  return y;
}

/// E2M1 code of element i of a packed FP4 row.
std::uint8_t nibble(const Bytes &row, std::size_t i) {
  return i % 2 == 0 ? lowE2M1(row[i / 2]) : highE2M1(row[i / 2]);
}

/// Half the distance between the E2M1 neighbours around |v| <= 6 * 1.07:
/// the largest RNE error of a scaled value; above 6 the clamp error (at most
/// 0.4 for an E4M3-rounded scale) is also below 1.
double e2m1MaxError(double v) {
  v = std::fabs(v);
  return v <= 2 ? 0.25 : v <= 4 ? 0.5 : 1.0;
}

const RowFormat kAllFormats[] = {RowFormat::MainKvFp4, RowFormat::IndexKeyFp4,
                                 RowFormat::SwaKvFp8};

float rowScale(RowFormat format, const Bytes &row, std::size_t dim,
               std::size_t group) {
  std::uint8_t code = row[rowScaleOffset(format, dim) + group];
  return format == RowFormat::MainKvFp4 ? decodeE4M3(code) : decodeUe8m0(code);
}

} // namespace

//===----------------------------------------------------------------------===//
// Sizes and scale rules
//===----------------------------------------------------------------------===//

TEST(RowSizes, ReleasedDims) {
  EXPECT_EQ(mainKvRowBytes(kMainKvDim), 288u);
  EXPECT_EQ(indexKeyRowBytes(kIndexKeyDim), 68u);
  EXPECT_EQ(swaKvRowBytes(kSwaKvDim), 528u);
  EXPECT_EQ(rowBytes(RowFormat::MainKvFp4, 512), 288u);
  EXPECT_EQ(rowBytes(RowFormat::IndexKeyFp4, 128), 68u);
  EXPECT_EQ(rowBytes(RowFormat::SwaKvFp8, 512), 528u);
  EXPECT_EQ(rowScaleOffset(RowFormat::MainKvFp4, 512), 256u);
  EXPECT_EQ(rowScaleOffset(RowFormat::IndexKeyFp4, 128), 64u);
  EXPECT_EQ(rowScaleOffset(RowFormat::SwaKvFp8, 512), 512u);
  // 890 B/token in the spec = 2.5 entries of (main + index key).
  EXPECT_EQ((mainKvRowBytes(512) + indexKeyRowBytes(128)) * 5 / 2, 890u);
}

TEST(RowSizes, SmallerDims) {
  EXPECT_EQ(mainKvRowBytes(64), 36u);   // 32 data + 4 scales
  EXPECT_EQ(indexKeyRowBytes(64), 34u); // 32 data + 2 scales
  EXPECT_EQ(swaKvRowBytes(64), 66u);    // 64 data + 2 scales
  EXPECT_EQ(mainKvRowBytes(16), 9u);
  EXPECT_EQ(rowGroup(RowFormat::MainKvFp4), 16u);
  EXPECT_EQ(rowGroup(RowFormat::IndexKeyFp4), 32u);
  EXPECT_EQ(rowGroup(RowFormat::SwaKvFp8), 32u);
}

TEST(ScaleRules, Fp8Ue8m0) {
  // 448 * fp32(1/448) rounds to within an ulp of 1: scale 1.
  EXPECT_EQ(fp8Ue8m0ScaleCode(448.0f), 127);
  EXPECT_EQ(fp8Ue8m0ScaleCode(449.0f), 128);
  EXPECT_EQ(fp8Ue8m0ScaleCode(224.0f), 126);
  // Floor: 1e-4 / 448 = 2.23e-7 lies in (2^-23, 2^-22].
  EXPECT_EQ(fp8Ue8m0ScaleCode(0.0f), 127 - 22);
  EXPECT_EQ(fp8Ue8m0ScaleCode(1e-6f), 127 - 22);
  EXPECT_EQ(fp8Ue8m0ScaleCode(kFltMax), 247); // 2^ceil(119.2)
}

TEST(ScaleRules, Fp4Ue8m0) {
  // 6 * fp32(1/6) = 1 + 3e-8 rounds to exactly 1 in fp32: scale 1, not 2.
  EXPECT_EQ(fp4Ue8m0ScaleCode(6.0f), 127);
  EXPECT_EQ(fp4Ue8m0ScaleCode(std::nextafter(6.0f, 7.0f)), 128);
  EXPECT_EQ(fp4Ue8m0ScaleCode(3.0f), 126);
  EXPECT_EQ(fp4Ue8m0ScaleCode(12.0f), 128);
  // Floor 6 * 2^-126 gives 2^-126, code 1.
  EXPECT_EQ(fp4Ue8m0ScaleCode(0.0f), 1);
  EXPECT_EQ(fp4Ue8m0ScaleCode(1e-30f),
            127 - 102); // 1e-30/6 in (2^-103, 2^-102]
}

TEST(ScaleRules, Fp4E4M3) {
  EXPECT_EQ(fp4E4M3ScaleCode(0.0f), 0x01); // 6*2^-9 / 6 = 2^-9
  EXPECT_EQ(fp4E4M3ScaleCode(0.01f), 0x01);
  EXPECT_EQ(fp4E4M3ScaleCode(3.0f), 0x30);   // 0.5
  EXPECT_EQ(fp4E4M3ScaleCode(6.0f), 0x38);   // 1.0
  EXPECT_EQ(fp4E4M3ScaleCode(448.0f), 0x69); // 74.67 -> 72
  EXPECT_EQ(fp4E4M3ScaleCode(1e9f), 0x7E);   // saturates to 448
  // amax / 6 is a division: here the quotient lies just below the midpoint
  // of codes 0x29 and 0x2A; amax * fp32(1/6) (= amax / 6 * (1 + 2^-25))
  // would land on the midpoint and round to the even 0x2A.
  EXPECT_EQ(fp4E4M3ScaleCode(0x1.c7fffep+0f), 0x29);
  EXPECT_EQ(fp4E4M3ScaleCode(kFltMax), 0x7E);
}

TEST(ScaleRules, BlockAmaxIgnoresNaNAndCapsInfinity) {
  Floats x = {1.0f, -3.0f, kNaN, 2.0f};
  EXPECT_EQ(blockAmax(x.data(), x.size()), 3.0f);
  x[0] = -kInf;
  EXPECT_EQ(blockAmax(x.data(), x.size()), kFltMax);
  Floats zeros = {0.0f, -0.0f};
  EXPECT_TRUE(sameBits(blockAmax(zeros.data(), 2), 0.0f));
}

//===----------------------------------------------------------------------===//
// Hand-computed rows
//===----------------------------------------------------------------------===//

TEST(MainKvRow, HandComputed) {
  Floats x(512, 0.0f);
  // Group 0: amax 3 -> s = e4m3(0.5) = 0.5; x / s = 6, -2.6, 0.4, 1.2.
  x[0] = 3.0f;
  x[1] = -1.3f;
  x[2] = 0.2f;
  x[3] = 0.6f;
  // Group 31 (channels 496..511): amax 448 -> s = e4m3(74.67) = 72;
  // -100 / 72 = -1.39 -> -1.5; 448 / 72 = 6.2 -> clamp 6.
  x[510] = -100.0f;
  x[511] = 448.0f;
  Bytes row = quantize(RowFormat::MainKvFp4, x);
  ASSERT_EQ(row.size(), 288u);
  EXPECT_EQ(row[0], 0xD7);   // element 0 (6, code 7) low, element 1 (-3) high
  EXPECT_EQ(row[1], 0x21);   // 0.5 (code 1) low, 1.0 (code 2) high
  EXPECT_EQ(row[255], 0x7B); // -1.5 (code 0xB) low, 6 (code 7) high
  EXPECT_EQ(row[256], 0x30); // scale of group 0 right after the 256 data bytes
  EXPECT_EQ(row[287], 0x69); // scale of group 31, last byte
  for (std::size_t g = 1; g < 31; ++g)
    EXPECT_EQ(row[256 + g], 0x01) << g; // all-zero groups: floored scale 2^-9
  Floats y = dequantize(RowFormat::MainKvFp4, row, 512);
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(y[1], -1.5f);
  EXPECT_EQ(y[2], 0.25f);
  EXPECT_EQ(y[3], 0.5f);
  EXPECT_EQ(y[510], -108.0f);
  EXPECT_EQ(y[511], 432.0f);
}

TEST(MainKvRow, DividesByTheScale) {
  // s = e4m3(5.25 / 6) = 0.875 is not a power of two, so x / s and
  // x * fp32(1 / s) differ: this x gives 1.5 by division (the kernel's
  // x / s) and 2.0 by multiplication.
  Floats x(16, 0.0f);
  x[0] = 5.25f;
  x[1] = 0x1.87fffep+0f;
  Bytes row = quantize(RowFormat::MainKvFp4, x);
  EXPECT_EQ(row[8], 0x36);
  EXPECT_EQ(nibble(row, 0), 0x7);
  EXPECT_EQ(nibble(row, 1), 0x3);
}

TEST(IndexKeyRow, HandComputed) {
  Floats x(128, 0.0f);
  x[0] = 3.0f;     // group 0: amax 3 -> s = 2^-1; 3 / s = 6
  x[1] = -0.8f;    // -1.6 -> -1.5
  x[32] = 3.01f;   // group 1: amax 3.01 -> s = 1; 3.01 -> 3
  x[33] = 1.76f;   // 1.76 -> 2
  x[127] = -12.0f; // group 3: s = 2; -6
  Bytes row = quantize(RowFormat::IndexKeyFp4, x);
  ASSERT_EQ(row.size(), 68u);
  EXPECT_EQ(row[0], 0xB7);
  EXPECT_EQ(row[16], 0x45);
  EXPECT_EQ(row[63], 0xF0); // element 127 in the high nibble of byte 63
  EXPECT_EQ(row[64], 126);
  EXPECT_EQ(row[65], 127);
  EXPECT_EQ(row[66], 1); // all-zero group: floored scale 2^-126
  EXPECT_EQ(row[67], 128);
  Floats y = dequantize(RowFormat::IndexKeyFp4, row, 128);
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(y[1], -0.75f);
  EXPECT_EQ(y[32], 3.0f);
  EXPECT_EQ(y[33], 2.0f);
  EXPECT_EQ(y[127], -12.0f);
}

TEST(SwaKvRow, HandComputed) {
  Floats x(512, 0.0f);
  x[0] = 449.0f; // group 0: s = 2; 224.5 -> 224 (0x76)
  x[1] = 1.0f;   // 0.5 (0x30)
  x[2] = -3.3f;  // -1.65 -> -1.625 (0xBD)
  x[511] = 0.5f; // group 15: amax 0.5 -> s = 2^ceil(log2(0.5/448)) = 2^-9
  Bytes row = quantize(RowFormat::SwaKvFp8, x);
  ASSERT_EQ(row.size(), 528u);
  EXPECT_EQ(row[0], 0x76);
  EXPECT_EQ(row[1], 0x30);
  EXPECT_EQ(row[2], 0xBD);
  EXPECT_EQ(row[511], 0x78); // 0.5 / 2^-9 = 256
  EXPECT_EQ(row[512], 128);  // scales follow the 512 data bytes
  EXPECT_EQ(row[527], 127 - 9);
  for (std::size_t g = 1; g < 15; ++g)
    EXPECT_EQ(row[512 + g], 127 - 22) << g;
  Floats y = dequantize(RowFormat::SwaKvFp8, row, 512);
  EXPECT_EQ(y[0], 448.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], -3.25f);
  EXPECT_EQ(y[511], 0.5f);
}

// V4's FP8 main-KV row: 448 E4M3 NoPE bytes, 64 bf16 RoPE values, 7 UE8M0
// scales (group 64) and a zero pad byte.
TEST(MainKvFp8Row, HandComputed) {
  Floats x(512, 0.0f);
  x[0] = 449.0f;        // group 0: s = 2; 224.5 -> 224 (0x76)
  x[1] = -3.3f;         // -1.65 -> -1.625 (0xBD)
  x[447] = 0.5f;        // group 6: s = 2^-9, 256 (0x78)
  x[448] = 1.0f;        // rope: bf16 0x3F80, low byte first
  x[449] = 1.00390625f; // 1 + 2^-8: a tie, bf16 rounds to even (1.0)
  x[511] = -2.5f;       // bf16 0xC020
  Bytes row(mainKvFp8RowBytes(512, 64), 0xAA);
  ASSERT_EQ(row.size(), 584u);
  quantizeMainKvFp8Row(x.data(), 512, 64, row.data());
  EXPECT_EQ(row[0], 0x76);
  EXPECT_EQ(row[1], 0xBD);
  EXPECT_EQ(row[447], 0x78);
  EXPECT_EQ(row[448], 0x80);
  EXPECT_EQ(row[449], 0x3F);
  EXPECT_EQ(row[450], 0x80);
  EXPECT_EQ(row[451], 0x3F);
  EXPECT_EQ(row[574], 0x20);
  EXPECT_EQ(row[575], 0xC0);
  EXPECT_EQ(row[576], 128);     // group 0: 2^1
  for (std::size_t g = 1; g < 6; ++g)
    EXPECT_EQ(row[576 + g], 127 - 22) << g; // the 1e-4 floor
  EXPECT_EQ(row[582], 127 - 9);
  EXPECT_EQ(row[583], 0);       // the pad byte
  Floats y(512, kNaN);
  dequantizeMainKvFp8Row(row.data(), 512, 64, y.data());
  EXPECT_EQ(y[0], 448.0f);
  EXPECT_EQ(y[1], -3.25f);
  EXPECT_EQ(y[447], 0.5f);
  EXPECT_EQ(y[448], 1.0f);
  EXPECT_EQ(y[449], 1.0f);
  EXPECT_EQ(y[511], -2.5f);
  EXPECT_EQ(y[100], 0.0f);
}

// Narrow test widths: NoPE 24 takes group 8 (the largest power of two <= 64
// dividing it), three scales padded to eight bytes.
TEST(MainKvFp8Row, NarrowWidthsAndRoundTrip) {
  EXPECT_EQ(mainKvFp8Group(448), 64u);
  EXPECT_EQ(mainKvFp8Group(24), 8u);
  EXPECT_EQ(mainKvFp8Group(96), 32u);
  EXPECT_EQ(mainKvFp8RowBytes(32, 8), 24u + 16u + 8u);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (auto [dim, rope] : {std::pair<std::size_t, std::size_t>{32, 8}, {512, 64}, {128, 32}}) {
    Floats x(dim);
    for (float &v : x)
      v = roundToBf16(normal(rng));
    Bytes row(mainKvFp8RowBytes(dim, rope));
    quantizeMainKvFp8Row(x.data(), dim, rope, row.data());
    Floats y(dim);
    dequantizeMainKvFp8Row(row.data(), dim, rope, y.data());
    const std::size_t nope = dim - rope, group = mainKvFp8Group(nope);
    for (std::size_t g = 0; g < nope / group; ++g) {
      float amax = 0.0f;
      for (std::size_t i = 0; i < group; ++i)
        amax = std::max(amax, std::fabs(x[g * group + i]));
      // E4M3 keeps 3 mantissa bits: half an ulp of the scaled value, whose
      // scale puts amax at most at 448.
      const float s = decodeUe8m0(row[mainKvFp8ScaleOffset(dim, rope) + g]);
      for (std::size_t i = 0; i < group; ++i) {
        const float v = x[g * group + i];
        EXPECT_LE(std::fabs(y[g * group + i] - v),
                  std::max(std::fabs(v) / 16.0f, s * std::ldexp(1.0f, -10)))
            << dim << " " << g * group + i;
      }
      EXPECT_LE(amax / s, 448.0f);
    }
    for (std::size_t i = nope; i < dim; ++i)
      EXPECT_EQ(y[i], x[i]) << "bf16 rope channels are exact, " << i;
    // Stored values quantize back to themselves (the scale may halve when
    // rounding lowered the amax, the values do not change).
    Bytes again(row.size());
    quantizeMainKvFp8Row(y.data(), dim, rope, again.data());
    Floats z(dim);
    dequantizeMainKvFp8Row(again.data(), dim, rope, z.data());
    EXPECT_EQ(z, y) << dim;
  }
}

// The FP8 index-key row: 128 E4M3 codes and the row's fp32 scale
// (max(amax, 1e-4) * fp32(1/448)), little-endian.
TEST(IndexKeyFp8Row, HandComputed) {
  Floats x(128, 0.0f);
  x[0] = 0.5f;  // 0.5 / (1/448) = 224 (0x76)
  x[1] = -1.0f; // the amax: -448 (0xFE)
  x[127] = 0.25f;
  Bytes row(indexKeyFp8RowBytes(128), 0xAA);
  ASSERT_EQ(row.size(), 132u);
  quantizeIndexKeyFp8Row(x.data(), 128, row.data());
  EXPECT_EQ(row[0], 0x76);
  EXPECT_EQ(row[1], 0xFE);
  EXPECT_EQ(row[2], 0x00);
  EXPECT_EQ(row[127], 0x6E); // 112
  const float s = 1.0f * kFp8MaxInv;
  std::uint32_t bits = 0;
  std::memcpy(&bits, &s, 4);
  EXPECT_EQ(row[128], bits & 0xFF);
  EXPECT_EQ(row[131], bits >> 24);
  Floats y(128, kNaN);
  dequantizeIndexKeyFp8Row(row.data(), 128, y.data());
  EXPECT_EQ(y[0], 224.0f * s);
  EXPECT_EQ(y[1], -448.0f * s);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[127], 112.0f * s);
  // An all-zero row takes the 1e-4 floor.
  Floats z(32, 0.0f);
  Bytes zr(indexKeyFp8RowBytes(32));
  quantizeIndexKeyFp8Row(z.data(), 32, zr.data());
  float zs = 0.0f;
  std::memcpy(&zs, zr.data() + 32, 4);
  EXPECT_EQ(zs, 1e-4f * kFp8MaxInv);
}

//===----------------------------------------------------------------------===//
// Layout, floors
//===----------------------------------------------------------------------===//

TEST(Rows, Fp4PackingOrder) {
  // Every group holds all 16 codes, so amax = 6 and the scale is exactly 1
  // in both FP4 formats: element i must carry code i % 16.
  for (RowFormat format : {RowFormat::MainKvFp4, RowFormat::IndexKeyFp4}) {
    std::size_t dim = format == RowFormat::MainKvFp4 ? 512 : 128;
    Floats x(dim);
    for (std::size_t i = 0; i < dim; ++i)
      x[i] = decodeE2M1(static_cast<std::uint8_t>(i % 16));
    Bytes row = quantize(format, x);
    for (std::size_t i = 0; i < dim; ++i)
      ASSERT_EQ(nibble(row, i), i % 16) << i;
    EXPECT_EQ(row[0], 0x10);
    EXPECT_EQ(row[1], 0x32);
    for (std::size_t g = 0; g < dim / rowGroup(format); ++g)
      EXPECT_EQ(rowScale(format, row, dim, g), 1.0f);
    Floats y = dequantize(format, row, dim);
    for (std::size_t i = 0; i < dim; ++i)
      ASSERT_TRUE(sameBits(y[i], x[i])) << i;
  }
}

TEST(Rows, AllZeroRowsGiveZerosAndTheFlooredScale) {
  struct Case {
    RowFormat format;
    std::size_t dim;
    std::uint8_t scaleCode;
  } cases[] = {{RowFormat::MainKvFp4, 512, 0x01},    // e4m3 2^-9
               {RowFormat::IndexKeyFp4, 128, 1},     // ue8m0 2^-126
               {RowFormat::SwaKvFp8, 512, 127 - 22}, // ue8m0 2^-22
               {RowFormat::MainKvFp4, 64, 0x01}};
  for (const Case &c : cases) {
    Floats x(c.dim, 0.0f);
    Bytes row = quantize(c.format, x);
    std::size_t offset = rowScaleOffset(c.format, c.dim);
    for (std::size_t i = 0; i < offset; ++i)
      ASSERT_EQ(row[i], 0) << i;
    for (std::size_t i = offset; i < row.size(); ++i)
      ASSERT_EQ(row[i], c.scaleCode) << i;
    for (float y : dequantize(c.format, row, c.dim))
      ASSERT_TRUE(sameBits(y, 0.0f));
    // -0 inputs keep their sign, as the reference's sign-bit packing does.
    Floats negZeros(c.dim, -0.0f);
    for (float y : dequantize(c.format, quantize(c.format, negZeros), c.dim))
      ASSERT_TRUE(sameBits(y, -0.0f));
  }
}

TEST(Rows, AmaxBelowTheFloor) {
  // Main KV: amax 0.001 < 6*2^-9, s = 2^-9, 0.001 / s = 0.512 -> 0.5.
  Floats x(16, 0.0f);
  x[0] = 0.001f;
  Floats y =
      dequantize(RowFormat::MainKvFp4, quantize(RowFormat::MainKvFp4, x), 16);
  EXPECT_EQ(y[0], std::ldexp(1.0f, -10));
  // SWA: amax 5e-5 < 1e-4, s = 2^-22; 5e-5 / 2^-22 = 209.7 -> 208.
  Floats z(32, 0.0f);
  z[0] = 5e-5f;
  Floats w =
      dequantize(RowFormat::SwaKvFp8, quantize(RowFormat::SwaKvFp8, z), 32);
  EXPECT_EQ(w[0], std::ldexp(208.0f, -22));
}

//===----------------------------------------------------------------------===//
// Random rows: error bounds, idempotence, agreement with the QDQ functions
//===----------------------------------------------------------------------===//

// Bounds, per element, with s the group's decoded scale and v = x / s:
//  - FP8 (SWA): |y - x| <= max(2^-4 |x|, 2^-10 s): half an E4M3 quantum,
//    relative 2^-4 for normals, 2^-10 absolute in the subnormal range; no
//    clamp error since s >= amax / 448.
//  - FP4: |y - x| <= s * e2m1MaxError(v): half the E2M1 gap around v; for
//    E4M3 scales s can be below amax / 6 by up to 2^-4 relative, so v may
//    reach 6.4 and the clamp adds at most 0.4 s, still within s.
//  Besides, above the amax floors: s < 2 amax / 448 (FP8), s < amax / 3
//  (FP4 UE8M0), up to the rounding of amax * fp32(1 / max), and
//  s <= (1 + 2^-4) amax / 6 (FP4 E4M3).
// The E4M3-scaled format is only tested with normal scales (amax >= 6*2^-6):
// a subnormal E4M3 scale has a coarser relative precision, v can exceed 6
// by more and none of its bounds holds (see SubnormalScaleIsNotIdempotent).
TEST(Rows, RandomRoundTripErrorBounds) {
  Rng rng(1234);
  for (RowFormat format : kAllFormats) {
    std::size_t dim = format == RowFormat::IndexKeyFp4 ? 128 : 512;
    std::size_t group = rowGroup(format);
    bool e4m3Scale = format == RowFormat::MainKvFp4;
    for (int rep = 0; rep < 200; ++rep) {
      // Group magnitudes from 2^-3 to 2^10 for E4M3 scales, 2^-30 to 2^30
      // (both sides of the 1e-4 FP8 floor) for UE8M0 scales.
      Floats x = e4m3Scale ? randomRow(rng, dim, group, -3, 10)
                           : randomRow(rng, dim, group, -30, 30);
      Bytes row = quantize(format, x);
      Floats y = dequantize(format, row, dim);
      for (std::size_t g = 0; g < dim / group; ++g) {
        double s = rowScale(format, row, dim, g);
        double amax = blockAmax(&x[g * group], group);
        // (1 + 1e-6) allows for the rounding of amax * fp32(1 / max).
        if (format == RowFormat::SwaKvFp8) {
          if (amax >= kFp8AmaxFloor)
            ASSERT_LE(s, 2 * amax / 448 * (1 + 1e-6));
          else
            ASSERT_EQ(s, std::ldexp(1.0, -22));
        } else if (format == RowFormat::IndexKeyFp4) {
          ASSERT_LE(s, amax / 3 * (1 + 1e-6));
        } else {
          ASSERT_LE(s, (1 + 1.0 / 16) * amax / 6);
        }
        for (std::size_t i = g * group; i < (g + 1) * group; ++i) {
          double err = std::fabs(static_cast<double>(y[i]) - x[i]);
          double bound =
              format == RowFormat::SwaKvFp8
                  ? std::max(std::fabs(static_cast<double>(x[i])) / 16,
                             s / 1024)
                  : s * e2m1MaxError(x[i] / s);
          ASSERT_LE(err, bound) << "format " << static_cast<int>(format)
                                << " element " << i << " x " << x[i];
        }
      }
    }
  }
}

// quantize(dequantize(q)) reproduces q for E4M3-scaled FP4 rows. For UE8M0
// scales the group keeps its scale and codes, except when its largest code
// is exactly half the format maximum (224 for E4M3, 3 for E2M1): then the
// recomputed scale halves and every code doubles exactly. Either way the
// dequantized values are unchanged.
TEST(Rows, SecondQuantizationIsIdentity) {
  Rng rng(99);
  for (RowFormat format : kAllFormats) {
    std::size_t dim = format == RowFormat::IndexKeyFp4 ? 128 : 512;
    std::size_t group = rowGroup(format);
    std::size_t offset = rowScaleOffset(format, dim);
    int sameScale = 0, halvedScale = 0;
    for (int rep = 0; rep < 200; ++rep) {
      // Group amax >= 2^-3 keeps E4M3 scales out of the subnormal range.
      Floats x = randomRow(rng, dim, group, -3, 10);
      Bytes first = quantize(format, x);
      Floats y = dequantize(format, first, dim);
      Bytes second = quantize(format, y);
      Floats z = dequantize(format, second, dim);
      for (std::size_t i = 0; i < dim; ++i)
        ASSERT_TRUE(sameBits(z[i], y[i])) << i;
      if (format == RowFormat::MainKvFp4) {
        ASSERT_EQ(second, first);
        continue;
      }
      for (std::size_t g = 0; g < dim / group; ++g) {
        std::uint8_t s1 = first[offset + g], s2 = second[offset + g];
        bool fp8 = format == RowFormat::SwaKvFp8;
        auto value = [&](const Bytes &row, std::size_t i) {
          return fp8 ? decodeE4M3(row[i]) : decodeE2M1(nibble(row, i));
        };
        if (s2 == s1) {
          ++sameScale;
          for (std::size_t i = g * group; i < (g + 1) * group; ++i)
            ASSERT_TRUE(sameBits(value(second, i), value(first, i)));
          continue;
        }
        ++halvedScale;
        ASSERT_EQ(s2 + 1, s1);
        float maxCode = 0;
        for (std::size_t i = g * group; i < (g + 1) * group; ++i) {
          ASSERT_EQ(value(second, i), 2 * value(first, i));
          maxCode = std::max(maxCode, std::fabs(value(first, i)));
        }
        ASSERT_EQ(maxCode, fp8 ? 224.0f : 3.0f);
      }
    }
    if (format != RowFormat::MainKvFp4) {
      EXPECT_GT(sameScale, halvedScale);
      EXPECT_GT(halvedScale, 0); // the second branch is exercised
    }
  }
}

// Documents a limit of the E4M3-scaled format: when the scale is an E4M3
// subnormal its relative precision is coarse, and the second pass changes
// the values. amax = 9*2^-9: s = e4m3(1.5*2^-9) = 2^-8 (tie to even),
// 4.5 -> 4, y = 2^-6; then s' = e4m3(2^-6/6) = 2^-9, 8 -> clamp 6.
TEST(MainKvRow, SubnormalScaleIsNotIdempotent) {
  Floats x(16, 0.0f);
  x[0] = std::ldexp(9.0f, -9);
  Floats y =
      dequantize(RowFormat::MainKvFp4, quantize(RowFormat::MainKvFp4, x), 16);
  EXPECT_EQ(y[0], std::ldexp(1.0f, -6));
  Floats z =
      dequantize(RowFormat::MainKvFp4, quantize(RowFormat::MainKvFp4, y), 16);
  EXPECT_EQ(z[0], std::ldexp(6.0f, -9));
}

TEST(Rows, AgreeWithInplaceQuantizers) {
  Rng rng(7);
  for (int rep = 0; rep < 50; ++rep) {
    Floats x = randomRow(rng, 512, 32, -20, 20);
    Floats a = dequantize(RowFormat::MainKvFp4,
                          quantize(RowFormat::MainKvFp4, x), 512);
    Floats b = x;
    fp4ActQuantInplace(b.data(), b.size(), 16, Fp4ScaleFormat::E4M3);
    Floats xi(x.begin(), x.begin() + 128);
    Floats c = dequantize(RowFormat::IndexKeyFp4,
                          quantize(RowFormat::IndexKeyFp4, xi), 128);
    Floats d = xi;
    fp4ActQuantInplace(d.data(), d.size(), 32, Fp4ScaleFormat::Ue8m0);
    Floats e =
        dequantize(RowFormat::SwaKvFp8, quantize(RowFormat::SwaKvFp8, x), 512);
    Floats f = x;
    actQuantInplace(f.data(), f.size(), 32, Fp8ScaleFormat::Ue8m0);
    for (std::size_t i = 0; i < 512; ++i) {
      ASSERT_TRUE(sameBits(a[i], b[i])) << i;
      ASSERT_TRUE(sameBits(e[i], f[i])) << i;
      ASSERT_TRUE(sameBits(roundToBf16(a[i]), a[i])) << i; // exact in bf16
    }
    for (std::size_t i = 0; i < 128; ++i)
      ASSERT_TRUE(sameBits(c[i], d[i])) << i;
  }
}

TEST(Rows, NonFiniteInputs) {
  Rng rng(5);
  Floats x = randomRow(rng, 512, 32, -2, 2);
  Floats clean = x;
  clean[3] = 0.0f;
  x[3] = kNaN;   // group 0 (both formats)
  x[40] = kInf;  // group 1 (SWA), group 2 (main KV)
  x[71] = -kInf; // group 2 (SWA), group 4 (main KV)

  // SWA: the NaN is ignored by amax and stays NaN; infinities saturate to
  // 448 * 2^120, which overflows back to infinity in fp32.
  Bytes swa = quantize(RowFormat::SwaKvFp8, x);
  Bytes swaClean = quantize(RowFormat::SwaKvFp8, clean);
  EXPECT_EQ(swa[3], kE4M3NaN);
  EXPECT_EQ(swa[512], swaClean[512]);
  for (std::size_t i = 0; i < 32; ++i) {
    if (i == 3)
      continue;
    EXPECT_EQ(swa[i], swaClean[i]) << i;
  }
  EXPECT_EQ(swa[512 + 1], 247);
  EXPECT_EQ(swa[40], 0x7E);
  EXPECT_EQ(swa[71], 0xFE);
  Floats y = dequantize(RowFormat::SwaKvFp8, swa, 512);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_EQ(y[40], kInf);
  EXPECT_EQ(y[71], -kInf);

  // Main KV: NaN encodes as +0; infinity saturates the E4M3 scale (448) and
  // the value (6): 2688.
  Bytes kv = quantize(RowFormat::MainKvFp4, x);
  Bytes kvClean = quantize(RowFormat::MainKvFp4, clean);
  EXPECT_EQ(nibble(kv, 3), 0);
  EXPECT_EQ(kv[256], kvClean[256]);
  for (std::size_t i = 0; i < 16; ++i) {
    if (i == 3)
      continue;
    EXPECT_EQ(nibble(kv, i), nibble(kvClean, i)) << i;
  }
  EXPECT_EQ(kv[256 + 2], 0x7E);
  Floats z = dequantize(RowFormat::MainKvFp4, kv, 512);
  EXPECT_TRUE(sameBits(z[3], 0.0f));
  EXPECT_EQ(z[40], 2688.0f);
  EXPECT_EQ(z[71], -2688.0f);
}

//===----------------------------------------------------------------------===//
// act_quant / fp4_act_quant
//===----------------------------------------------------------------------===//

TEST(ActQuant, Ue8m0ScalesMatchTheirCodes) {
  Rng rng(11);
  Floats x = randomRow(rng, 4 * 256, 32, -30, 30);
  Bytes codes(x.size()), codes2(x.size()), scaleCodes(x.size() / 32);
  Floats scales(x.size() / 32);
  actQuant(x.data(), x.size(), 32, Fp8ScaleFormat::Ue8m0, codes.data(),
           scales.data());
  actQuantUe8m0(x.data(), x.size(), 32, codes2.data(), scaleCodes.data());
  EXPECT_EQ(codes, codes2);
  for (std::size_t b = 0; b < scales.size(); ++b) {
    EXPECT_TRUE(sameBits(scales[b], decodeUe8m0(scaleCodes[b]))) << b;
    EXPECT_EQ(encodeUe8m0(scales[b]), scaleCodes[b]) << b;
  }
  Floats y(x.size()), y2(x.size()), yi = x;
  actDequant(codes.data(), scales.data(), x.size(), 32, y.data());
  actDequantUe8m0(codes2.data(), scaleCodes.data(), x.size(), 32, y2.data());
  actQuantInplace(yi.data(), yi.size(), 32, Fp8ScaleFormat::Ue8m0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(sameBits(y[i], yi[i])) << i;
    ASSERT_TRUE(sameBits(y2[i], yi[i])) << i;
  }
}

TEST(ActQuant, Fp32ScalePath) {
  Rng rng(13);
  const std::size_t block = 128;
  Floats x = randomRow(rng, 8 * block, block, -8, 8);
  Bytes codes(x.size());
  Floats scales(x.size() / block);
  actQuant(x.data(), x.size(), block, Fp8ScaleFormat::Fp32, codes.data(),
           scales.data());
  Floats qdq = x;
  actQuantInplace(qdq.data(), qdq.size(), block, Fp8ScaleFormat::Fp32);
  for (std::size_t b = 0; b < scales.size(); ++b) {
    float amax = blockAmax(&x[b * block], block);
    EXPECT_TRUE(sameBits(scales[b], std::max(amax, 1e-4f) * (1.0f / 448.0f)));
    std::uint8_t maxCode = 0;
    for (std::size_t i = b * block; i < (b + 1) * block; ++i) {
      maxCode = std::max<std::uint8_t>(maxCode, codes[i] & 0x7F);
      ASSERT_EQ(codes[i], encodeE4M3(x[i] / scales[b]));
      // Dequantized in fp32, then stored as bf16 like the reference.
      float y = roundToBf16(decodeE4M3(codes[i]) * scales[b]);
      ASSERT_TRUE(sameBits(qdq[i], y)) << i;
      double bound =
          std::max(std::fabs(static_cast<double>(x[i])) / 16,
                   static_cast<double>(scales[b]) / 1024) +
          std::fabs(static_cast<double>(y)) / 256; // + half a bf16 ulp
      ASSERT_LE(std::fabs(static_cast<double>(y) - x[i]), bound) << i;
    }
    EXPECT_EQ(maxCode, 0x7E); // the amax element maps to 448
  }
}

TEST(Fp4ActQuant, PackedOutputAndOtherBlockSizes) {
  Rng rng(17);
  struct Case {
    Fp4ScaleFormat format;
    std::size_t block;
  } cases[] = {{Fp4ScaleFormat::Ue8m0, 32},
               {Fp4ScaleFormat::E4M3, 16},
               {Fp4ScaleFormat::Ue8m0, 16},
               {Fp4ScaleFormat::E4M3, 32},
               {Fp4ScaleFormat::E4M3, 128}};
  for (const Case &c : cases) {
    Floats x = randomRow(rng, 1024, c.block, -3, 8);
    Bytes packed(x.size() / 2), scaleCodes(x.size() / c.block);
    fp4ActQuant(x.data(), x.size(), c.block, c.format, packed.data(),
                scaleCodes.data());
    Floats y(x.size()), yi = x;
    fp4ActDequant(packed.data(), scaleCodes.data(), x.size(), c.block, c.format,
                  y.data());
    fp4ActQuantInplace(yi.data(), yi.size(), c.block, c.format);
    for (std::size_t i = 0; i < x.size(); ++i) {
      float s = c.format == Fp4ScaleFormat::E4M3
                    ? decodeE4M3(scaleCodes[i / c.block])
                    : decodeUe8m0(scaleCodes[i / c.block]);
      ASSERT_EQ(nibble(packed, i), encodeE2M1(x[i] / s)) << i;
      ASSERT_TRUE(sameBits(y[i], yi[i])) << i;
    }
  }
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

TEST(Weights, Fp8BlockScales) {
  Rng rng(23);
  struct Case {
    std::size_t n, k, block;
  } cases[] = {{70, 40, 32}, {64, 64, 32}, {130, 200, 128}};
  for (const Case &c : cases) {
    std::size_t rowsOfScales = (c.n + c.block - 1) / c.block;
    std::size_t colsOfScales = (c.k + c.block - 1) / c.block;
    Bytes w(c.n * c.k), scales(rowsOfScales * colsOfScales);
    for (std::uint8_t &v : w) {
      v = static_cast<std::uint8_t>(rng.next());
      if ((v & 0x7F) == 0x7F)
        v = 0x38;
    }
    for (std::size_t i = 0; i < scales.size(); ++i)
      scales[i] = static_cast<std::uint8_t>(100 + 3 * i);
    Floats out(c.n * c.k);
    dequantizeFp8Weight(w.data(), scales.data(), c.n, c.k, out.data(), c.block);
    for (std::size_t r = 0; r < c.n; ++r)
      for (std::size_t col = 0; col < c.k; ++col) {
        int code = scales[(r / c.block) * colsOfScales + col / c.block];
        double expected = std::ldexp(
            static_cast<double>(decodeE4M3(w[r * c.k + col])), code - 127);
        ASSERT_EQ(out[r * c.k + col], expected) << r << "," << col;
      }
  }
  // The last (partial) block of a 70 x 40 weight uses scale [2][1].
  Bytes w(70 * 40, 0x38); // 1.0
  Bytes scales = {127, 127, 127, 127, 127, 130};
  Floats out(w.size());
  dequantizeFp8Weight(w.data(), scales.data(), 70, 40, out.data());
  EXPECT_EQ(out[69 * 40 + 39], 8.0f);
  EXPECT_EQ(out[64 * 40 + 32], 8.0f);
  EXPECT_EQ(out[63 * 40 + 39], 1.0f);
  EXPECT_EQ(out[64 * 40 + 31], 1.0f);
}

TEST(Weights, Fp4Experts) {
  Rng rng(29);
  const std::size_t n = 3, k = 96;
  Bytes packed(n * k / 2), scales(n * k / 32);
  for (std::uint8_t &v : packed)
    v = static_cast<std::uint8_t>(rng.next());
  for (std::size_t i = 0; i < scales.size(); ++i)
    scales[i] = static_cast<std::uint8_t>(120 + i);
  Floats out(n * k);
  dequantizeFp4Weight(packed.data(), scales.data(), n, k, out.data());
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t col = 0; col < k; ++col) {
      std::uint8_t byte = packed[r * k / 2 + col / 2];
      std::uint8_t code = col % 2 == 0 ? byte & 0xF : byte >> 4;
      double expected = std::ldexp(static_cast<double>(decodeE2M1(code)),
                                   scales[r * (k / 32) + col / 32] - 127);
      ASSERT_EQ(out[r * k + col], expected) << r << "," << col;
    }
  // Byte 0x61 holds k = 0 (code 1: 0.5) and k = 1 (code 6: 4).
  Bytes one(16, 0x00), unit = {127};
  one[0] = 0x61;
  Floats o(32);
  dequantizeFp4Weight(one.data(), unit.data(), 1, 32, o.data());
  EXPECT_EQ(o[0], 0.5f);
  EXPECT_EQ(o[1], 4.0f);
}

//===- RopeTablesTest.cpp - RoPE frequencies against model.py's -----------===//
//
// The expected frequencies are model.py's precompute_freqs_cis evaluated in
// numpy fp32 (ExpectedValues.h, from gen_expected.py). The released YaRN
// figures are the model-architecture spec's: pairs 0..15 unscaled, pairs
// from 25 on divided by 16, a linear ramp between.
//
//===----------------------------------------------------------------------===//

#include "models/tables/RopeTables.h"

#include "test/unit/tables/ExpectedValues.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace csa::tables {
namespace {

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

std::optional<YarnScaling> yarnOf(const expected::RopeCase &c) {
  if (!c.yarn)
    return std::nullopt;
  return YarnScaling{c.factor, c.originalSeqLen, c.betaFast, c.betaSlow};
}

TEST(RopeTables, FrequenciesAreModelPyInFp32) {
  for (const expected::RopeCase &c : expected::kRopeCases) {
    std::vector<float> freqs = ropeFrequencies(c.dim, c.theta, yarnOf(c));
    ASSERT_EQ(freqs.size(), c.freqs.size()) << c.name;
    for (size_t i = 0; i < freqs.size(); ++i)
      EXPECT_EQ(bits(freqs[i]), bits(c.freqs[i]))
          << c.name << " pair " << i << ": " << freqs[i] << " vs "
          << c.freqs[i];
  }
}

TEST(RopeTables, CorrectionRangeIsModelPys) {
  for (const expected::RopeCase &c : expected::kRopeCases) {
    if (!c.yarn)
      continue;
    YarnRamp range = yarnCorrectionRange(c.dim, c.theta, *yarnOf(c));
    EXPECT_EQ(range.low, double(c.rampLow)) << c.name;
    EXPECT_EQ(range.high, double(c.rampHigh)) << c.name;
  }
}

// The released compressed table: theta 160000, YaRN factor 16 over an
// original context of 65536 with beta_fast 32 and beta_slow 1.
TEST(RopeTables, ReleasedYarnFigures) {
  const YarnScaling yarn{16, 65536, 32, 1};
  YarnRamp range = yarnCorrectionRange(64, 160000, yarn);
  EXPECT_EQ(range.low, 15);
  EXPECT_EQ(range.high, 25);
  std::vector<float> plain = ropeFrequencies(64, 160000, std::nullopt);
  std::vector<float> scaled = ropeFrequencies(64, 160000, yarn);
  ASSERT_EQ(scaled.size(), 32u);
  for (size_t i = 0; i < 32; ++i) {
    if (i <= 15)
      EXPECT_EQ(scaled[i], plain[i]) << i; // extrapolated: unchanged
    else if (i >= 25)
      EXPECT_EQ(scaled[i], plain[i] / 16) << i; // interpolated
    else
      EXPECT_TRUE(scaled[i] < plain[i] && scaled[i] > plain[i] / 16) << i;
  }
}

// Without YaRN each frequency is theta^(-2i/dim) rounded to fp32 twice (the
// power, then its reciprocal), each rounding off by at most half an ulp:
// within two ulps of the exact value.
TEST(RopeTables, PlainFrequenciesAreCloseToTheExactPowers) {
  for (double theta : {10000.0, 160000.0}) {
    std::vector<float> freqs = ropeFrequencies(64, theta, std::nullopt);
    for (size_t i = 0; i < freqs.size(); ++i) {
      const double exact = std::pow(theta, -double(2 * i) / 64);
      const float f = float(exact);
      EXPECT_LE(std::fabs(double(freqs[i]) - exact),
                2 * double(std::nextafter(f, 2.0f) - f))
          << theta << " pair " << i;
    }
    EXPECT_EQ(freqs[0], 1.0f);
  }
}

} // namespace
} // namespace csa::tables

//===- SamplingTest.cpp - Greedy, temperature and top-p sampling ----------===//
//
// The generators against their published reference outputs, then the
// sampler: greedy ties, temperature 0 == greedy, seeded reproducibility,
// top-p with exact counts for a fixed seed, and every rejected input. The
// exact counts were computed independently by a Python transcription of
// Sampling.h's algorithm (SplitMix64, xoshiro256**, the nucleus rule) and
// agree with the probabilities within binomial noise.
//
//===----------------------------------------------------------------------===//
#include "runtime/sampling/Sampling.h"

#include "absl/strings/str_cat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace csa::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string errorOf(absl::Span<const float> logits, SamplingParams params) {
  Xoshiro256 rng(0);
  auto token = sampleToken(logits, params, rng);
  EXPECT_FALSE(token.ok());
  EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(token.status().message());
}

// Vigna's splitmix64.c from state 0.
TEST(SamplingGenerators, SplitMix64Reference) {
  SplitMix64 sm(0);
  EXPECT_EQ(sm.next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(sm.next(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(sm.next(), 0x06c45d188009454full);
}

// xoshiro256starstar.c from state {1, 2, 3, 4}.
TEST(SamplingGenerators, Xoshiro256StarStarReference) {
  Xoshiro256 rng = Xoshiro256::fromState({1, 2, 3, 4});
  const uint64_t expected[] = {11520ull,
                               0ull,
                               1509978240ull,
                               1215971899390074240ull,
                               1216172134540287360ull,
                               607988272756665600ull};
  for (uint64_t e : expected)
    EXPECT_EQ(rng.next(), e);
}

// Seeding: the state is SplitMix64(seed)'s first four outputs.
TEST(SamplingGenerators, SeededFromSplitMix64) {
  SplitMix64 sm(42);
  std::array<uint64_t, 4> state;
  for (uint64_t &word : state)
    word = sm.next();
  Xoshiro256 a(42), b = Xoshiro256::fromState(state);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(a.next(), b.next());
  Xoshiro256 c(42);
  EXPECT_EQ(c.next(), 0x15780b2e0c2ec716ull);
}

TEST(SamplingGenerators, NextDoubleInUnitInterval) {
  Xoshiro256 rng(5);
  for (int i = 0; i < 100000; ++i) {
    double u = rng.nextDouble();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

TEST(SamplingGreedy, LargestLogit) {
  std::vector<float> logits = {0.5f, -1.0f, 3.25f, 2.0f};
  EXPECT_EQ(*greedyToken(logits), 2);
}

TEST(SamplingGreedy, TiesGoToLowestId) {
  std::vector<float> logits = {1.0f, 7.0f, 3.0f, 7.0f, 7.0f};
  EXPECT_EQ(*greedyToken(logits), 1);
  Xoshiro256 rng(0);
  EXPECT_EQ(*sampleToken(logits, {0.0f, 1.0f}, rng), 1);
  // -0 and +0 compare equal: a tie too.
  std::vector<float> zeros = {-1.0f, -0.0f, 0.0f};
  EXPECT_EQ(*greedyToken(zeros), 1);
}

/// Rows as long as a vocabulary (the check runs 16 maxima side by side):
/// the first largest wins wherever it and its ties lie, a NaN or +inf
/// anywhere is named, -inf everywhere but one token leaves that token.
TEST(SamplingGreedy, LongRowsAgreeWithALoopOneByOne) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> value(-8.0f, 8.0f);
  for (size_t n : {size_t(16), size_t(17), size_t(37), size_t(129280)}) {
    std::vector<float> logits(n);
    for (float &l : logits)
      l = std::round(value(gen) * 4) / 4; // ties likely
    size_t want = 0;
    for (size_t i = 1; i < n; ++i)
      if (logits[i] > logits[want])
        want = i;
    EXPECT_EQ(*greedyToken(logits), int32_t(want)) << n;
    // A tie of the largest in every lane and in the tail: still the first.
    for (size_t at : {n - 1, n / 2, size_t(1)}) {
      std::vector<float> tied = logits;
      tied[at] = 100.0f;
      tied[n - 1] = 100.0f;
      EXPECT_EQ(*greedyToken(tied), int32_t(std::min(at, n - 1))) << n << " " << at;
    }
    for (size_t at : {size_t(0), n / 3, n - 1}) {
      std::vector<float> bad = logits;
      bad[at] = kNaN;
      EXPECT_EQ(errorOf(bad, {0.0f, 1.0f}), absl::StrCat("sampling: logit ", at, " is NaN"));
      bad[at] = kInf;
      EXPECT_EQ(errorOf(bad, {0.0f, 1.0f}), absl::StrCat("sampling: logit ", at, " is +inf"));
      std::vector<float> masked(n, -kInf);
      masked[at] = -1e30f;
      EXPECT_EQ(*greedyToken(masked), int32_t(at));
    }
  }
}

TEST(SamplingGreedy, MaskedTokensSkipped) {
  std::vector<float> logits = {-kInf, -kInf, -100.0f, -kInf};
  EXPECT_EQ(*greedyToken(logits), 2);
  // -inf masks a token in sampling mode too.
  Xoshiro256 rng(3);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(*sampleToken(logits, {1.0f, 1.0f}, rng), 2);
}

TEST(SamplingTemperature, ZeroIsGreedyAndDrawsNothing) {
  Xoshiro256 rng(99), reference(99);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(257);
    for (size_t i = 0; i < logits.size(); ++i)
      logits[i] = float(std::fmod(0.37 * double(i * (trial + 3)), 5.0));
    for (float topP : {1.0f, 0.5f, 0.01f})
      EXPECT_EQ(*sampleToken(logits, {0.0f, topP}, rng), *greedyToken(logits));
  }
  // Greedy calls left the generator untouched.
  EXPECT_EQ(rng.next(), reference.next());
}

TEST(SamplingTemperature, TinyTemperatureIsGreedy) {
  std::vector<float> logits = {1.0f, 1.5f, 1.4999f, -3.0f};
  Xoshiro256 rng(1);
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(*sampleToken(logits, {1e-6f, 1.0f}, rng), 1);
}

// (2l) / 2 and l / 1 give the same weights exactly, so the same tokens.
TEST(SamplingTemperature, ScalesLogits) {
  std::vector<float> logits(100), doubled(100);
  for (size_t i = 0; i < logits.size(); ++i) {
    logits[i] = float(std::sin(double(i)));
    doubled[i] = 2.0f * logits[i];
  }
  Xoshiro256 a(11), b(11);
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(*sampleToken(logits, {1.0f, 0.9f}, a),
              *sampleToken(doubled, {2.0f, 0.9f}, b));
}

TEST(SamplingSeeded, Reproducible) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = float(std::fmod(0.1 * double(i), 1.3));
  Sampler a({0.8f, 0.9f}, 7), b({0.8f, 0.9f}, 7), c({0.8f, 0.9f}, 8);
  std::vector<int32_t> first, second, other;
  for (int i = 0; i < 1000; ++i) {
    first.push_back(*a.next(logits));
    second.push_back(*b.next(logits));
    other.push_back(*c.next(logits));
  }
  EXPECT_EQ(first, second);
  EXPECT_NE(first, other);
  // The first tokens for seed 7, from the independent transcription: the
  // sequence is fixed across compilers and platforms.
  std::vector<int32_t> expected = {6, 10, 44, 2, 15, 17, 25, 38, 9, 11, 21, 19};
  EXPECT_EQ(std::vector<int32_t>(first.begin(), first.begin() + 12), expected);
}

std::vector<float> logLogits(std::initializer_list<double> probs) {
  std::vector<float> logits;
  for (double p : probs)
    logits.push_back(float(std::log(p)));
  return logits;
}

std::vector<int> counts(const std::vector<float> &logits, float topP,
                        uint64_t seed, int draws) {
  std::vector<int> count(logits.size(), 0);
  Sampler sampler({1.0f, topP}, seed);
  for (int i = 0; i < draws; ++i) {
    auto token = sampler.next(logits);
    EXPECT_TRUE(token.ok()) << token.status();
    ++count[size_t(*token)];
  }
  return count;
}

// p = (0.5, 0.3, 0.15, 0.05), top_p 0.75: the nucleus is {0, 1} (0.5 < 0.75
// <= 0.8), renormalised to (0.625, 0.375); tokens 2 and 3 never appear.
TEST(SamplingTopP, ExcludesTheTail) {
  auto logits = logLogits({0.5, 0.3, 0.15, 0.05});
  std::vector<int> count = counts(logits, 0.75f, 1234, 10000);
  EXPECT_EQ(count, (std::vector<int>{6274, 3726, 0, 0}));
  // Binomial sanity: 6250 +- 3 sigma (sigma = 48.4).
  EXPECT_NEAR(count[0], 6250, 146);
}

// The nucleus follows the logits, not the ids.
TEST(SamplingTopP, FollowsLogitOrderNotIds) {
  auto logits = logLogits({0.05, 0.3, 0.15, 0.5});
  std::vector<int> count = counts(logits, 0.75f, 1234, 10000);
  EXPECT_EQ(count, (std::vector<int>{0, 3726, 0, 6274}));
}

TEST(SamplingTopP, OneKeepsEveryToken) {
  auto logits = logLogits({0.5, 0.3, 0.15, 0.05});
  std::vector<int> count = counts(logits, 1.0f, 1234, 10000);
  EXPECT_EQ(count, (std::vector<int>{5031, 3002, 1504, 463}));
  const double p[] = {0.5, 0.3, 0.15, 0.05};
  for (int i = 0; i < 4; ++i) // within 3 sigma of 10000 p
    EXPECT_NEAR(count[size_t(i)], 10000 * p[i],
                3 * std::sqrt(10000 * p[i] * (1 - p[i])));
}

TEST(SamplingTopP, TinyKeepsOnlyTheTop) {
  std::vector<float> logits = {0.0f, 0.2f, 0.1f, 0.2f};
  Xoshiro256 rng(5);
  for (int i = 0; i < 200; ++i) // top tie: the lower id sorts first
    EXPECT_EQ(*sampleToken(logits, {1.0f, 1e-6f}, rng), 1);
}

TEST(SamplingErrors, NaNLogitNamed) {
  std::vector<float> logits = {0.0f, 1.0f, kNaN, 2.0f};
  EXPECT_EQ(errorOf(logits, {1.0f, 1.0f}), "sampling: logit 2 is NaN");
  EXPECT_EQ(errorOf(logits, {0.0f, 1.0f}), "sampling: logit 2 is NaN");
  EXPECT_FALSE(greedyToken(logits).ok());
}

TEST(SamplingErrors, PositiveInfinity) {
  std::vector<float> logits = {0.0f, kInf};
  EXPECT_EQ(errorOf(logits, {1.0f, 1.0f}), "sampling: logit 1 is +inf");
}

TEST(SamplingErrors, AllMaskedOrEmpty) {
  std::vector<float> masked = {-kInf, -kInf};
  EXPECT_EQ(errorOf(masked, {1.0f, 1.0f}),
            "sampling: all 2 logits are -inf (no token allowed)");
  EXPECT_EQ(errorOf({}, {0.0f, 1.0f}), "sampling: no logits (vocabulary of 0)");
}

TEST(SamplingErrors, Temperature) {
  std::vector<float> logits = {0.0f, 1.0f};
  for (float t : {-0.5f, -kInf, kInf, kNaN})
    EXPECT_NE(errorOf(logits, {t, 1.0f})
                  .find("temperature must be finite "
                        "and >= 0"),
              std::string::npos)
        << t;
  EXPECT_EQ(errorOf(logits, {-1.0f, 1.0f}),
            "sampling: temperature must be finite and >= 0 (0 is greedy), "
            "got -1");
}

TEST(SamplingErrors, TopP) {
  std::vector<float> logits = {0.0f, 1.0f};
  for (float p : {0.0f, -0.1f, 1.01f, 2.0f, kNaN, kInf})
    EXPECT_NE(errorOf(logits, {1.0f, p}).find("top_p must be in (0, 1]"),
              std::string::npos)
        << p;
  // Checked in greedy mode too: a bad request is an error, not ignored.
  EXPECT_EQ(errorOf(logits, {0.0f, 0.0f}),
            "sampling: top_p must be in (0, 1], got 0");
}

} // namespace
} // namespace csa::sampling

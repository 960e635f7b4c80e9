//===- Sampling.h - Choosing the next token from logits ---------*- C++ -*-===//
//
// Greedy, temperature and top-p (nucleus) sampling over fp32 logits,
// deterministic for a seed on every platform: the random numbers come from
// xoshiro256** (Blackman & Vigna, https://prng.di.unimi.it/) seeded with
// SplitMix64, and the arithmetic is spelled out here rather than left to
// <random>'s distributions, whose output the C++ standard does not fix.
//
// sampleToken(logits, params, rng):
//   1. Checks: logits non-empty, no NaN and no +inf (the error names the
//      first bad index), not all -inf (-inf masks a token); temperature
//      finite and >= 0; top_p finite and in (0, 1].
//   2. temperature == 0: greedy, the largest logit; ties go to the lowest
//      id. Draws no random number (top_p does not matter).
//   3. Otherwise p_i = exp((l_i - max) * (1 / temperature)), in double.
//      top_p < 1: tokens sorted by logit, descending, ties by lower id; the
//      nucleus is the shortest prefix whose mass reaches top_p x (total
//      mass) (always at least the top token). top_p == 1: every token, in
//      id order.
//   4. One draw u = (next() >> 11) x 2^-53 in [0, 1); the token is the first
//      of the candidates (in the order of step 3) whose cumulative mass
//      exceeds u x (candidate mass); the last candidate if rounding leaves
//      none.
// So each non-greedy call consumes exactly one 64-bit output of the
// generator, and a seed fixes the whole token sequence.
//
// Plain C++17, no LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_SAMPLING_SAMPLING_H
#define CSA_RUNTIME_SAMPLING_SAMPLING_H

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include <array>
#include <cstdint>

namespace csa {
namespace sampling {

/// SplitMix64 (Steele, Lea & Flood 2014; Vigna's splitmix64.c): adds
/// 0x9e3779b97f4a7c15 to the state and returns its mix. Used to expand a
/// 64-bit seed into xoshiro's 256-bit state.
class SplitMix64 {
public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();

private:
  uint64_t state_;
};

/// xoshiro256** 1.0 (Blackman & Vigna, xoshiro256starstar.c). The state is
/// the first four outputs of SplitMix64(seed), as the authors recommend.
class Xoshiro256 {
public:
  explicit Xoshiro256(uint64_t seed);
  /// A generator in state `state` (not all zero), for reference vectors.
  static Xoshiro256 fromState(const std::array<uint64_t, 4> &state);
  uint64_t next();
  /// (next() >> 11) * 2^-53: uniform in [0, 1) with 53 random bits.
  double nextDouble();

private:
  Xoshiro256() = default;
  uint64_t s_[4];
};

struct SamplingParams {
  /// 0: greedy. Logits are divided by it otherwise.
  float temperature = 0.0f;
  /// Nucleus mass in (0, 1]; 1 keeps every token.
  float topP = 1.0f;
};

/// The next token (see the file comment). Errors are InvalidArgument.
absl::StatusOr<int32_t> sampleToken(absl::Span<const float> logits,
                                    const SamplingParams &params,
                                    Xoshiro256 &rng);

/// Greedy: the lowest id among the largest logits (same checks, no rng).
absl::StatusOr<int32_t> greedyToken(absl::Span<const float> logits);

/// A sampler for one sequence: its parameters and its own generator, so a
/// sequence's tokens depend on its seed only, not on its batch neighbours.
class Sampler {
public:
  Sampler(const SamplingParams &params, uint64_t seed)
      : params_(params), rng_(seed) {}
  absl::StatusOr<int32_t> next(absl::Span<const float> logits) {
    return sampleToken(logits, params_, rng_);
  }
  const SamplingParams &params() const { return params_; }

private:
  SamplingParams params_;
  Xoshiro256 rng_;
};

} // namespace sampling
} // namespace csa

#endif // CSA_RUNTIME_SAMPLING_SAMPLING_H

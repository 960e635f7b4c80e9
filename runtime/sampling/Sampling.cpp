//===- Sampling.cpp - Choosing the next token from logits
//------------------===//
#include "runtime/sampling/Sampling.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace csa {
namespace sampling {

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

namespace {
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
} // namespace

Xoshiro256::Xoshiro256(uint64_t seed) {
  SplitMix64 seeder(seed);
  for (uint64_t &word : s_)
    word = seeder.next();
}

Xoshiro256 Xoshiro256::fromState(const std::array<uint64_t, 4> &state) {
  Xoshiro256 rng;
  for (int i = 0; i < 4; ++i)
    rng.s_[i] = state[i];
  return rng;
}

uint64_t Xoshiro256::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Xoshiro256::nextDouble() { return double(next() >> 11) * 0x1.0p-53; }

namespace {

/// The checks every mode shares; returns the index of the largest logit
/// (lowest id among ties).
absl::StatusOr<int32_t> checkLogits(absl::Span<const float> logits) {
  if (logits.empty())
    return absl::InvalidArgumentError("sampling: no logits (vocabulary of 0)");
  if (logits.size() > size_t(std::numeric_limits<int32_t>::max()))
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling: ", logits.size(), " logits do not fit token ids (int32)"));
  // One branch-free pass for the largest value and whether any is NaN or
  // +inf (kLanes running maxima, which the compiler keeps in vector
  // registers: a batch step checks B x vocab logits; 2.7x the one-by-one
  // loop); the exact message and the first index of the largest from a
  // second look.
  const float inf = std::numeric_limits<float>::infinity();
  constexpr size_t kLanes = 16;
  float most[kLanes];
  int bad[kLanes];
  std::fill(most, most + kLanes, -inf);
  std::fill(bad, bad + kLanes, 0);
  size_t i = 0;
  for (; i + kLanes <= logits.size(); i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) {
      const float l = logits[i + j];
      bad[j] |= !(l < inf); // NaN or +inf
      most[j] = l > most[j] ? l : most[j];
    }
  for (; i < logits.size(); ++i) {
    bad[0] |= !(logits[i] < inf);
    most[0] = logits[i] > most[0] ? logits[i] : most[0];
  }
  float largest = -inf;
  bool anyBad = false;
  for (size_t j = 0; j < kLanes; ++j) {
    largest = most[j] > largest ? most[j] : largest;
    anyBad |= bad[j] != 0;
  }
  if (anyBad)
    for (size_t k = 0; k < logits.size(); ++k) {
      if (std::isnan(logits[k]))
        return absl::InvalidArgumentError(absl::StrCat("sampling: logit ", k, " is NaN"));
      if (logits[k] == inf)
        return absl::InvalidArgumentError(absl::StrCat("sampling: logit ", k, " is +inf"));
    }
  const int32_t best =
      largest == -inf
          ? -1
          : int32_t(std::find(logits.begin(), logits.end(), largest) - logits.begin());
  if (best < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: all ", logits.size(),
                     " logits are -inf (no token allowed)"));
  return best;
}

absl::Status checkParams(const SamplingParams &params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling: temperature must be finite and >= 0 (0 is greedy), got ",
        params.temperature));
  if (!(params.topP > 0 && params.topP <= 1))
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: top_p must be in (0, 1], got ", params.topP));
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<int32_t> greedyToken(absl::Span<const float> logits) {
  return checkLogits(logits);
}

absl::StatusOr<int32_t> sampleToken(absl::Span<const float> logits,
                                    const SamplingParams &params,
                                    Xoshiro256 &rng) {
  if (absl::Status s = checkParams(params); !s.ok())
    return s;
  auto best = checkLogits(logits);
  if (!best.ok() || params.temperature == 0)
    return best;

  const double maxLogit = logits[size_t(*best)];
  const double invT = 1.0 / double(params.temperature);
  std::vector<double> weight(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    weight[i] = std::exp((double(logits[i]) - maxLogit) * invT);
  // The top token has weight exactly 1, so the total is >= 1.

  std::vector<int32_t> order;
  double mass = 0;
  if (params.topP < 1) {
    order.resize(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      float la = logits[size_t(a)], lb = logits[size_t(b)];
      return la != lb ? la > lb : a < b;
    });
    double total = 0;
    for (double w : weight)
      total += w;
    const double target = double(params.topP) * total;
    size_t keep = 0;
    while (keep < order.size()) {
      mass += weight[size_t(order[keep])];
      ++keep;
      if (mass >= target)
        break;
    }
    order.resize(keep);
  } else {
    for (double w : weight)
      mass += w;
  }

  const double u = rng.nextDouble() * mass;
  double cumulative = 0;
  const size_t count = order.empty() ? logits.size() : order.size();
  int32_t last = -1;
  for (size_t k = 0; k < count; ++k) {
    int32_t id = order.empty() ? int32_t(k) : order[k];
    if (weight[size_t(id)] == 0)
      continue;
    last = id;
    cumulative += weight[size_t(id)];
    if (u < cumulative)
      return id;
  }
  return last; // rounding: u reached the total
}

} // namespace sampling
} // namespace csa

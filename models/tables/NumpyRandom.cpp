//===- NumpyRandom.cpp - numpy's random generators for engram.py ----------===//
//
// Each piece names the numpy source it follows; the constants are numpy's.
//
//===----------------------------------------------------------------------===//

#include "models/tables/NumpyRandom.h"

#include <limits>

namespace csa::tables {

namespace {

__extension__ typedef unsigned __int128 Uint128;

//===----------------------------------------------------------------------===//
// SeedSequence (numpy/random/bit_generator.pyx)
//===----------------------------------------------------------------------===//

/// `hashmix`: an avalanching hash whose multiplier steps on every call, so
/// the same word hashes differently at each position.
class HashMix {
public:
  HashMix(uint32_t init, uint32_t step) : constant_(init), step_(step) {}

  uint32_t operator()(uint32_t value) {
    value ^= constant_;
    constant_ *= step_;
    value *= constant_;
    return value ^ (value >> 16);
  }

private:
  uint32_t constant_;
  const uint32_t step_;
};

/// `mix`: folds `y` into `x`.
uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = 0xca01f9ddu * x - 0x4973f715u * y;
  return result ^ (result >> 16);
}

/// `_coerce_to_uint32_array` of a non-negative int: 32-bit words, least
/// significant first; zero is one word.
std::vector<uint32_t> entropyWords(uint64_t entropy) {
  std::vector<uint32_t> words{uint32_t(entropy)};
  for (entropy >>= 32; entropy != 0; entropy >>= 32)
    words.push_back(uint32_t(entropy));
  return words;
}

//===----------------------------------------------------------------------===//
// Bounded integers (numpy/random/src/distributions/distributions.c)
//===----------------------------------------------------------------------===//

/// Lemire's nearly divisionless draw of a value in [0, rangeSize) from
/// full-width draws of type UInt: the high half of draw * rangeSize, with
/// the low half rejected while it is below 2^width mod rangeSize (the
/// draws that would make some results more likely). `bounded_lemire_uint64`
/// and `buffered_bounded_lemire_uint32`.
template <typename UInt, typename Wide, typename Draw>
UInt lemire(UInt rangeSize, Draw draw) {
  constexpr unsigned width = std::numeric_limits<UInt>::digits;
  Wide product = Wide(draw()) * rangeSize;
  if (UInt(product) < rangeSize) {
    const UInt rejectBelow = UInt(UInt(0) - rangeSize) % rangeSize;
    while (UInt(product) < rejectBelow)
      product = Wide(draw()) * rangeSize;
  }
  return UInt(product >> width);
}

} // namespace

SeedSequence::SeedSequence(uint64_t entropy) {
  const std::vector<uint32_t> words = entropyWords(entropy);
  // `mix_entropy`: hash the first words into the pool (zeros past the end),
  // cross-mix every pool word into every other one, then fold in the words
  // that did not fit.
  HashMix hash(0x43b0d7e5u, 0x931e8875u);
  for (size_t i = 0; i < kPoolWords; ++i)
    pool_[i] = hash(i < words.size() ? words[i] : 0u);
  for (size_t from = 0; from < kPoolWords; ++from)
    for (size_t to = 0; to < kPoolWords; ++to)
      if (to != from)
        pool_[to] = mix(pool_[to], hash(pool_[from]));
  for (size_t i = kPoolWords; i < words.size(); ++i)
    for (size_t to = 0; to < kPoolWords; ++to)
      pool_[to] = mix(pool_[to], hash(words[i]));
}

std::vector<uint32_t> SeedSequence::generateState32(size_t words) const {
  // Cycles through the pool with a second hash sequence.
  HashMix hash(0x8b51f9ddu, 0x58f38dedu);
  std::vector<uint32_t> state;
  state.reserve(words);
  for (size_t i = 0; i < words; ++i)
    state.push_back(hash(pool_[i % kPoolWords]));
  return state;
}

std::vector<uint64_t> SeedSequence::generateState64(size_t words) const {
  const std::vector<uint32_t> halves = generateState32(2 * words);
  std::vector<uint64_t> state;
  state.reserve(words);
  for (size_t i = 0; i < words; ++i)
    state.push_back(uint64_t(halves[2 * i + 1]) << 32 | halves[2 * i]);
  return state;
}

//===----------------------------------------------------------------------===//
// PCG64 (numpy/random/src/pcg64/pcg64.h, _pcg64.pyx)
//===----------------------------------------------------------------------===//

Pcg64::Pcg64(const SeedSequence &seed) {
  // `PCG64.__init__`: four 64-bit words; the first two are the initial
  // state, the last two the stream (high word first in each pair).
  const std::vector<uint64_t> words = seed.generateState64(4);
  const Uint128 initialState = Uint128(words[0]) << 64 | words[1];
  const Uint128 stream = Uint128(words[2]) << 64 | words[3];
  // `pcg_setseq_128_srandom_r`: an odd increment from the stream, then the
  // initial state mixed in between two steps.
  increment_ = stream << 1 | 1u;
  state_ = 0;
  advance();
  state_ += initialState;
  advance();
}

void Pcg64::advance() {
  constexpr Uint128 multiplier =
      Uint128(0x2360ed051fc65da4ull) << 64 | 0x4385df649fccf645ull;
  state_ = state_ * multiplier + increment_;
}

uint64_t Pcg64::nextUint64() {
  // Step, then XSL-RR: xor the halves, rotate right by the top 6 bits.
  advance();
  const uint64_t folded = uint64_t(state_ >> 64) ^ uint64_t(state_);
  const unsigned rotation = unsigned(state_ >> 122);
  return rotation == 0 ? folded
                       : (folded >> rotation) | (folded << (64 - rotation));
}

uint32_t Pcg64::nextUint32() {
  if (hasPendingHalf_) {
    hasPendingHalf_ = false;
    return pendingHalf_;
  }
  const uint64_t output = nextUint64();
  pendingHalf_ = uint32_t(output >> 32);
  hasPendingHalf_ = true;
  return uint32_t(output);
}

std::array<uint64_t, 2> Pcg64::state() const {
  return {uint64_t(state_ >> 64), uint64_t(state_)};
}

std::array<uint64_t, 2> Pcg64::increment() const {
  return {uint64_t(increment_ >> 64), uint64_t(increment_)};
}

std::vector<int64_t> integersInt64(Pcg64 &generator, int64_t low, int64_t high,
                                   size_t count) {
  // `_rand_int64` -> `random_bounded_uint64_fill`: the closed range
  // [low, high - 1] as an offset and a span, in wrapping uint64 arithmetic.
  const uint64_t offset = uint64_t(low);
  const uint64_t span = uint64_t(high) - 1 - offset;
  constexpr uint64_t kMax32 = std::numeric_limits<uint32_t>::max();
  constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
  auto draw64 = [&] { return generator.nextUint64(); };
  auto draw32 = [&] { return generator.nextUint32(); };
  std::vector<int64_t> values;
  values.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    uint64_t value;
    if (span == 0)
      value = 0; // one possible value: numpy draws nothing
    else if (span == kMax32)
      value = generator.nextUint32(); // every 32-bit value: a raw draw
    else if (span < kMax32)
      value = lemire<uint32_t, uint64_t>(uint32_t(span + 1), draw32);
    else if (span == kMax64)
      value = generator.nextUint64();
    else
      value = lemire<uint64_t, Uint128>(span + 1, draw64);
    values.push_back(int64_t(offset + value));
  }
  return values;
}

} // namespace csa::tables

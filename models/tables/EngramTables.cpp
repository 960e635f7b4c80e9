//===- EngramTables.cpp - Engram hash constants of DeepSeek-V4.1 ----------===//

#include "models/tables/EngramTables.h"

#include "models/tables/NumpyRandom.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <limits>

namespace csa::tables {

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

/// engram.py seeds layer L's generator with seed + 10007 * L (seed 0).
constexpr int64_t kLayerSeedPrime = 10007;

__extension__ typedef unsigned __int128 Uint128;

uint64_t mulMod(uint64_t a, uint64_t b, uint64_t modulus) {
  return uint64_t(Uint128(a) * b % modulus);
}

uint64_t powMod(uint64_t base, uint64_t exponent, uint64_t modulus) {
  uint64_t result = 1;
  for (base %= modulus; exponent != 0; exponent >>= 1) {
    if (exponent & 1)
      result = mulMod(result, base, modulus);
    base = mulMod(base, base, modulus);
  }
  return result;
}

/// One Miller-Rabin round: false if `witness` proves odd n > 2 composite,
/// where n - 1 = oddPart * 2^twos.
bool passesRound(uint64_t n, uint64_t witness, uint64_t oddPart,
                 unsigned twos) {
  uint64_t x = powMod(witness, oddPart, n);
  if (x == 1 || x == n - 1)
    return true;
  for (unsigned i = 1; i < twos; ++i) {
    x = mulMod(x, x, n);
    if (x == n - 1)
      return true;
  }
  return false;
}

} // namespace

bool isPrime(uint64_t n) {
  if (n < 2)
    return false;
  for (uint64_t p : {2u, 3u, 5u, 7u}) {
    if (n % p == 0)
      return n == p;
  }
  if (n < 121) // no factor up to 7 and below 11^2
    return true;
  uint64_t oddPart = n - 1;
  unsigned twos = 0;
  for (; (oddPart & 1) == 0; oddPart >>= 1)
    ++twos;
  // Jim Sinclair's seven witnesses decide every n < 2^64. A witness that is
  // a multiple of n says nothing and is skipped.
  for (uint64_t witness : {2ull, 325ull, 9375ull, 28178ull, 450775ull,
                           9780504ull, 1795265022ull}) {
    if (witness % n == 0)
      continue;
    if (!passesRound(n, witness % n, oddPart, twos))
      return false;
  }
  return true;
}

int64_t engramMultiplierBound(int64_t compressedVocabSize) {
  return std::max<int64_t>(1, kInt64Max / compressedVocabSize / 2);
}

std::vector<int64_t> engramMultipliers(int64_t layerId, int64_t maxNgramSize,
                                       int64_t compressedVocabSize) {
  Pcg64 generator(uint64_t(kLayerSeedPrime) * uint64_t(layerId));
  std::vector<int64_t> multipliers =
      integersInt64(generator, 0, engramMultiplierBound(compressedVocabSize),
                    size_t(maxNgramSize));
  for (int64_t &m : multipliers)
    m = 2 * m + 1;
  return multipliers;
}

absl::StatusOr<std::vector<EngramLayerTables>>
engramTables(const EngramHashShape &shape) {
  auto invalid = [](auto &&...what) {
    return absl::InvalidArgumentError(absl::StrCat("engram tables: ", what...));
  };
  if (shape.layerIds.empty())
    return invalid("no engram layers");
  for (int64_t layer : shape.layerIds)
    if (layer < 0 || layer > kInt64Max / kLayerSeedPrime)
      return invalid("layer id ", layer, " is out of range");
  if (shape.maxNgramSize < 2 || shape.nHeads < 1 ||
      shape.maxNgramSize - 1 > kInt64Max / shape.nHeads)
    return invalid("needs max_ngram_size >= 2 and n_heads >= 1, got ",
                   shape.maxNgramSize, " and ", shape.nHeads);
  // The primes stay close to vocab_size, so from at most 2^62 the search
  // cannot run past INT64_MAX.
  if (shape.vocabSize < 1 || shape.vocabSize > (int64_t(1) << 62))
    return invalid("vocab_size ", shape.vocabSize, " is out of [1, 2^62]");
  if (shape.compressedVocabSize < 1)
    return invalid("compressed vocab size ", shape.compressedVocabSize,
                   " is not positive");

  const int64_t columns = (shape.maxNgramSize - 1) * shape.nHeads;
  std::vector<EngramLayerTables> layers;
  int64_t candidate = shape.vocabSize; // the smallest number not yet looked at
  for (int64_t layerId : shape.layerIds) {
    EngramLayerTables layer;
    layer.layerId = layerId;
    layer.multipliers = engramMultipliers(layerId, shape.maxNgramSize,
                                          shape.compressedVocabSize);
    for (int64_t column = 0; column < columns; ++column) {
      while (!isPrime(uint64_t(candidate)))
        ++candidate;
      if (layer.tableRows > kInt64Max - candidate)
        return invalid("the table of layer ", layerId, " overflows int64");
      layer.primes.push_back(candidate);
      layer.offsets.push_back(layer.tableRows);
      layer.tableRows += candidate;
      ++candidate;
    }
    layers.push_back(std::move(layer));
  }
  return layers;
}

} // namespace csa::tables

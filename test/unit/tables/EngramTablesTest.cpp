//===- EngramTablesTest.cpp - Engram hash constants vs engram.py's --------===//
//
// The expected multipliers and primes are what engram.py's own algorithm
// gives with numpy (ExpectedValues.h, from gen_expected.py); the released
// table sizes (384006168 and 384016682 rows) and the multiplier bound
// ((INT64_MAX // 99092) // 2) are the release's figures.
//
//===----------------------------------------------------------------------===//

#include "models/tables/EngramTables.h"

#include "test/unit/tables/ExpectedValues.h"

#include <gtest/gtest.h>

#include <limits>

namespace csa::tables {
namespace {

EngramHashShape shapeOf(const expected::EngramCase &c) {
  return {c.layerIds, c.maxNgramSize, c.nHeads, c.vocabSize,
          c.compressedVocabSize};
}

TEST(EngramTables, ConstantsAreEngramPys) {
  for (const expected::EngramCase &c : expected::kEngramCases) {
    auto tables = engramTables(shapeOf(c));
    ASSERT_TRUE(tables.ok()) << c.name << ": " << tables.status();
    ASSERT_EQ(tables->size(), c.layerIds.size()) << c.name;
    for (size_t k = 0; k < tables->size(); ++k) {
      const EngramLayerTables &layer = (*tables)[k];
      EXPECT_EQ(layer.layerId, c.layerIds[k]);
      EXPECT_EQ(layer.multipliers, c.multipliers[k]) << c.name << " " << k;
      EXPECT_EQ(layer.primes, c.primes[k]) << c.name << " " << k;
      EXPECT_EQ(layer.tableRows, c.tableRows[k]) << c.name << " " << k;
      // Each column's buckets follow the previous columns' in one table.
      int64_t start = 0;
      ASSERT_EQ(layer.offsets.size(), layer.primes.size());
      for (size_t col = 0; col < layer.primes.size(); ++col) {
        EXPECT_EQ(layer.offsets[col], start) << c.name << " column " << col;
        start += layer.primes[col];
      }
    }
  }
}

TEST(EngramTables, ReleasedFigures) {
  auto tables = engramTables({{1, 14}, 4, 8, 16000000, 99092});
  ASSERT_TRUE(tables.ok()) << tables.status();
  ASSERT_EQ(tables->size(), 2u);
  EXPECT_EQ((*tables)[0].tableRows, 384006168);
  EXPECT_EQ((*tables)[1].tableRows, 384016682);
  EXPECT_EQ((*tables)[0].primes.size(), 24u); // 3 orders x 8 heads
  EXPECT_EQ(engramMultiplierBound(99092), 46539438283891);
  for (const EngramLayerTables &layer : *tables)
    for (int64_t m : layer.multipliers) {
      EXPECT_EQ(m % 2, 1);
      EXPECT_LT(m, 2 * engramMultiplierBound(99092));
    }
}

TEST(EngramTables, MultiplierBound) {
  EXPECT_EQ(engramMultiplierBound(512), 9007199254740991);
  EXPECT_EQ(engramMultiplierBound(1), 4611686018427387903);
  EXPECT_EQ(engramMultiplierBound(int64_t(1) << 62), 1); // max(1, 0)
}

TEST(EngramTables, IsPrimeAgreesWithASieve) {
  constexpr size_t n = 20000;
  std::vector<bool> composite(n, false);
  composite[0] = composite[1] = true;
  for (size_t p = 2; p * p < n; ++p)
    if (!composite[p])
      for (size_t m = p * p; m < n; m += p)
        composite[m] = true;
  for (size_t i = 0; i < n; ++i)
    EXPECT_EQ(isPrime(i), !composite[i]) << i;
}

TEST(EngramTables, IsPrimeOnLargeNumbers) {
  // 2^31 - 1 and 2^61 - 1 (Mersenne primes), 2^64 - 59 (the largest prime
  // below 2^64).
  for (uint64_t p :
       {2147483647ull, 2305843009213693951ull, 18446744073709551557ull})
    EXPECT_TRUE(isPrime(p)) << p;
  // Carmichael numbers and strong pseudoprimes to the first prime bases
  // (OEIS A014233: 2047, 1373653, 25326001, 3215031751, 2152302898747,
  // 3474749660383, 341550071728321, 3825123056546413051), 2^32 + 1 =
  // 641 * 6700417, 2^64 - 1.
  for (uint64_t n :
       {561ull, 41041ull, 2047ull, 1373653ull, 25326001ull, 3215031751ull,
        2152302898747ull, 3474749660383ull, 341550071728321ull,
        3825123056546413051ull, 4294967297ull, 18446744073709551615ull})
    EXPECT_FALSE(isPrime(n)) << n;
}

TEST(EngramTables, Errors) {
  const EngramHashShape good{{1}, 3, 2, 101, 512};
  ASSERT_TRUE(engramTables(good).ok());
  auto fails = [](EngramHashShape shape) { return !engramTables(shape).ok(); };
  EngramHashShape s = good;
  s.layerIds.clear();
  EXPECT_TRUE(fails(s));
  s = good, s.layerIds = {-1};
  EXPECT_TRUE(fails(s));
  s = good, s.maxNgramSize = 1;
  EXPECT_TRUE(fails(s));
  s = good, s.nHeads = 0;
  EXPECT_TRUE(fails(s));
  s = good, s.vocabSize = 0;
  EXPECT_TRUE(fails(s));
  s = good, s.compressedVocabSize = 0;
  EXPECT_TRUE(fails(s));
  // Four buckets of about 2^62 rows each do not fit in int64.
  s = good, s.vocabSize = int64_t(1) << 62;
  EXPECT_TRUE(fails(s));
}

} // namespace
} // namespace csa::tables

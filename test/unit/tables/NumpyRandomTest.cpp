//===- NumpyRandomTest.cpp - SeedSequence, PCG64, integers vs numpy -------===//
//
// Every expected value is numpy's own output (ExpectedValues.h, from
// gen_expected.py).
//
//===----------------------------------------------------------------------===//

#include "models/tables/NumpyRandom.h"

#include "test/unit/tables/ExpectedValues.h"

#include <gtest/gtest.h>

namespace csa::tables {
namespace {

TEST(NumpyRandomTables, SeedSequencePoolAndState) {
  for (const expected::SeedSequenceCase &c : expected::kSeedSequenceCases) {
    SeedSequence seed(c.entropy);
    EXPECT_EQ(seed.pool(), c.pool) << c.entropy;
    std::vector<uint64_t> state = seed.generateState64(4);
    EXPECT_EQ(state, std::vector<uint64_t>(c.state64.begin(), c.state64.end()))
        << c.entropy;
    // generate_state(8, uint32) is the same words, low half first.
    std::vector<uint32_t> halves = seed.generateState32(8);
    for (size_t i = 0; i < 4; ++i)
      EXPECT_EQ(uint64_t(halves[2 * i + 1]) << 32 | halves[2 * i], state[i]);
  }
}

TEST(NumpyRandomTables, Pcg64StateAndRawOutputs) {
  for (const expected::Pcg64Case &c : expected::kPcg64Cases) {
    Pcg64 generator(c.seed);
    EXPECT_EQ(generator.state(), c.state) << c.seed;
    EXPECT_EQ(generator.increment(), c.increment) << c.seed;
    for (uint64_t want : c.raw)
      EXPECT_EQ(generator.nextUint64(), want) << c.seed;
  }
}

// numpy serves 32-bit draws as the low, then the high half of one 64-bit
// output.
TEST(NumpyRandomTables, Pcg64HalvesOneOutputPerTwo32BitDraws) {
  const expected::Pcg64Case &c = expected::kPcg64Cases.front();
  Pcg64 generator(c.seed);
  for (uint64_t raw : c.raw) {
    EXPECT_EQ(generator.nextUint32(), uint32_t(raw));
    EXPECT_EQ(generator.nextUint32(), uint32_t(raw >> 32));
  }
}

TEST(NumpyRandomTables, IntegersInt64OnEveryPath) {
  for (const expected::IntegersCase &c : expected::kIntegersCases) {
    Pcg64 generator(c.seed);
    EXPECT_EQ(integersInt64(generator, c.low, c.high, c.values.size()),
              c.values)
        << "seed " << c.seed << " [" << c.low << ", " << c.high << ")";
  }
}

} // namespace
} // namespace csa::tables

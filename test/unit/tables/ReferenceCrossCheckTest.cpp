//===- ReferenceCrossCheckTest.cpp - The tables equal the reference's -----===//
//
// csa_model_tables (what the compiler embeds) and the reference forward
// derive the same constants independently; on the tiny and released configs
// they agree bit for bit. The main checks are the independent values of the
// other tests here; this one ties the two implementations together.
//
//===----------------------------------------------------------------------===//

#include "models/reference/EngramHash.h"
#include "models/reference/Kernels.h"
#include "models/tables/EngramTables.h"
#include "models/tables/NumpyRandom.h"
#include "models/tables/RopeTables.h"
#include "models/variants/Variants.h"

#include <gtest/gtest.h>

#include <cstring>

namespace csa {
namespace {

std::vector<uint32_t> bitsOf(const std::vector<float> &values) {
  std::vector<uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

class ReferenceCrossCheck : public ::testing::TestWithParam<const char *> {
protected:
  ModelConfig config() const {
    auto variant = loadVariant(GetParam());
    EXPECT_TRUE(variant.ok()) << variant.status();
    return variant.ok() ? variant->config : ModelConfig();
  }
};

TEST_P(ReferenceCrossCheck, RopeFrequencies) {
  const ModelConfig c = config();
  // The reference's two tables: base for SWA-only layers, YaRN for the rest.
  reference::RopeTable base(c.ropeHeadDim, c.ropeTheta, 0, 1, 0, 0);
  reference::RopeTable compressed(c.ropeHeadDim, c.compressRopeTheta,
                                  c.originalSeqLen, c.ropeFactor, c.betaFast,
                                  c.betaSlow);
  EXPECT_EQ(
      bitsOf(tables::ropeFrequencies(c.ropeHeadDim, c.ropeTheta, std::nullopt)),
      bitsOf(base.freqs));
  const tables::YarnScaling yarn{c.ropeFactor, c.originalSeqLen, c.betaFast,
                                 c.betaSlow};
  EXPECT_EQ(
      bitsOf(tables::ropeFrequencies(c.ropeHeadDim, c.compressRopeTheta, yarn)),
      bitsOf(compressed.freqs));
}

TEST_P(ReferenceCrossCheck, EngramConstants) {
  const ModelConfig c = config();
  auto layout = engramLayout(c);
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto derived = tables::engramTables({c.engramLayerIds, c.engramMaxNgramSize,
                                       c.engramNHeads, c.engramVocabSize,
                                       c.engramCompressedVocabSize});
  ASSERT_TRUE(derived.ok()) << derived.status();
  ASSERT_EQ(derived->size(), layout->layerIds.size());
  for (size_t k = 0; k < derived->size(); ++k) {
    const tables::EngramLayerTables &mine = (*derived)[k];
    EXPECT_EQ(mine.layerId, layout->layerIds[k]);
    EXPECT_EQ(mine.primes, layout->primes[k]);
    EXPECT_EQ(mine.offsets, layout->offsets[k]);
    EXPECT_EQ(mine.tableRows, layout->tableRows[k]);
    EXPECT_EQ(mine.multipliers,
              engramMultipliers(mine.layerId, c.engramMaxNgramSize,
                                c.engramCompressedVocabSize));
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, ReferenceCrossCheck,
                         ::testing::Values("tiny", "released"));

TEST(NumpyCrossCheck, GeneratorsEqualTheReferences) {
  for (uint64_t seed : {0ull, 10007ull, 140098ull, 18446744073709551615ull}) {
    tables::Pcg64 mine(seed);
    NumpyPcg64 theirs(seed);
    for (int i = 0; i < 64; ++i)
      EXPECT_EQ(mine.nextUint64(), theirs.next64()) << seed;
    for (int i = 0; i < 64; ++i)
      EXPECT_EQ(mine.nextUint32(), theirs.next32()) << seed;
    for (int64_t high : {int64_t(1000), int64_t(1) << 40})
      EXPECT_EQ(tables::integersInt64(mine, -3, high, 32),
                numpyIntegersInt64(theirs, -3, high, 32))
          << seed;
  }
}

} // namespace
} // namespace csa

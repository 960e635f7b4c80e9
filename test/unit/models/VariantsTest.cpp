//===- VariantsTest.cpp - Named variant tests -----------------------------===//
//
// Every named variant loads, unknown names are reported with the list of
// known ones, the ablations change the schedule as described, and the config
// of a variant describes its schedule.
//
//===----------------------------------------------------------------------===//

#include "ModelsTestSupport.h"

#include <vector>

using namespace csa;
using namespace csa::test;

namespace {

using Ints = std::vector<int64_t>;

ModelVariant variant(const std::string &name) {
  auto v = loadVariant(name);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : ModelVariant{};
}

bool hasMode(const Schedule &s, LayerMode mode) {
  for (const LayerRole &role : s.layers)
    if (role.mode == mode)
      return true;
  return false;
}

bool hasPool(const Schedule &s) {
  for (const LayerRole &role : s.layers)
    if (role.candidatePool)
      return true;
  return false;
}

TEST(Variants, NamesInListingOrder) {
  std::vector<std::string> names;
  for (const VariantInfo &info : namedVariants()) {
    names.push_back(info.name);
    EXPECT_FALSE(info.description.empty()) << info.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"released", "all-full", "no-reindex",
                                             "tiny", "reduced", "h200-full",
                                             "tiny-all-full", "tiny-no-reindex"}));
}

TEST(Variants, EveryNamedVariantLoads) {
  for (const VariantInfo &info : namedVariants()) {
    SCOPED_TRACE(info.name);
    auto v = loadVariant(info.name);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->name, info.name);
    EXPECT_EQ(int64_t(v->schedule.layers.size()), v->config.nLayers);
    EXPECT_TRUE(validateSchedule(v->config, v->schedule, info.name).ok());
  }
}

TEST(Variants, UnknownNameListsTheKnownOnes) {
  auto v = loadVariant("released-v2");
  EXPECT_TRUE(failsWith(v,
                        {"unknown variant 'released-v2'; known variants: "
                         "released, all-full, no-reindex, tiny, reduced, h200-full, "
                         "tiny-all-full, tiny-no-reindex"},
                        absl::StatusCode::kNotFound));
}

TEST(Variants, EmbeddedConfigNames) {
  for (const char *name : {"deepseek-v4.1-flash", "deepseek-v4.1-flash-hf", "tiny"})
    EXPECT_TRUE(embeddedConfig(name).ok()) << name;
}

TEST(Variants, UnknownEmbeddedConfig) {
  EXPECT_TRUE(failsWith(embeddedConfig("released"),
                        {"no embedded config named 'released'"},
                        absl::StatusCode::kNotFound));
}

TEST(Variants, ConfigSourceNamesTheVariant) {
  EXPECT_EQ(variant("tiny").config.source, "variant 'tiny' config");
}

TEST(Variants, ReleasedIsTheConfigSchedule) {
  const ModelVariant v = variant("released");
  EXPECT_EQ(v.schedule.letters(), "WWF.....F.....F.....C...R...R...R...R...");
  EXPECT_TRUE(sameSchedule(v.schedule, scheduleOf(releasedConfig())));
  EXPECT_EQ(v.config.kvSourceLayers, releasedConfig().kvSourceLayers);
  EXPECT_EQ(v.config.indexSourceLayers, releasedConfig().indexSourceLayers);
}

TEST(Variants, TinyHasEveryStructure) {
  const ModelVariant v = variant("tiny");
  EXPECT_EQ(v.schedule.letters(), "WWF.C.R.");
  EXPECT_EQ(v.config.engramLayerIds, (Ints{1}));
}

TEST(Variants, AllFullHasNoReuseOrReindex) {
  const ModelVariant v = variant("all-full");
  EXPECT_FALSE(hasMode(v.schedule, LayerMode::Reuse));
  EXPECT_FALSE(hasMode(v.schedule, LayerMode::Reindex));
  EXPECT_FALSE(hasPool(v.schedule));
  EXPECT_EQ(v.schedule.letters(), "WW" + std::string(38, 'F'));
}

TEST(Variants, AllFullLayersAreTheirOwnSources) {
  for (const LayerRole &role : variant("all-full").schedule.layers) {
    if (role.mode == LayerMode::SwaOnly)
      continue;
    EXPECT_EQ(role.kvSource, role.layer);
    EXPECT_EQ(role.indexSource, role.layer);
    EXPECT_EQ(role.candidateSource, -1);
  }
}

TEST(Variants, AllFullKeepsTheRatios) {
  EXPECT_EQ(variant("all-full").config.compressRatios,
            releasedConfig().compressRatios);
}

TEST(Variants, TinyAllFull) {
  EXPECT_EQ(variant("tiny-all-full").schedule.letters(), "WWFFFFFF");
}

TEST(Variants, NoReindexHasNoReindexAndNoPool) {
  const ModelVariant v = variant("no-reindex");
  EXPECT_FALSE(hasMode(v.schedule, LayerMode::Reindex));
  EXPECT_FALSE(hasPool(v.schedule));
  EXPECT_EQ(v.schedule.letters(), "WWF.....F.....F.....F...................");
}

TEST(Variants, NoReindexReusesLayer20TopK) {
  const ModelVariant v = variant("no-reindex");
  for (int l = 21; l < 40; ++l) {
    EXPECT_EQ(v.schedule.layers[l].kvSource, 20) << l;
    EXPECT_EQ(v.schedule.layers[l].indexSource, 20) << l;
    EXPECT_EQ(v.schedule.layers[l].candidateSource, -1) << l;
  }
}

TEST(Variants, TinyNoReindex) {
  const ModelVariant v = variant("tiny-no-reindex");
  EXPECT_EQ(v.schedule.letters(), "WWF.F...");
  EXPECT_EQ(v.schedule.layers[6].indexSource, 4);
  EXPECT_EQ(v.schedule.layers[7].indexSource, 4);
}

TEST(Variants, AllFullConfigListsEveryCompressedLayer) {
  const ModelConfig c = variant("all-full").config;
  Ints layers;
  for (int64_t l = 2; l < 40; ++l)
    layers.push_back(l);
  EXPECT_EQ(c.kvSourceLayers, layers);
  EXPECT_EQ(c.indexSourceLayers, layers);
  EXPECT_EQ(c.candidateSourceLayer, -1);
}

TEST(Variants, NoReindexConfigHasOnlyFullSources) {
  const ModelConfig c = variant("no-reindex").config;
  EXPECT_EQ(c.kvSourceLayers, (Ints{2, 8, 14, 20}));
  EXPECT_EQ(c.indexSourceLayers, (Ints{2, 8, 14, 20}));
  EXPECT_EQ(c.candidateSourceLayer, -1);
}

// applyScheduleToConfig: the config a variant carries describes its schedule.
TEST(Variants, ConfigOfEveryVariantDescribesItsSchedule) {
  for (const VariantInfo &info : namedVariants()) {
    SCOPED_TRACE(info.name);
    const ModelVariant v = variant(info.name);
    auto fromConfig = scheduleFromConfig(v.config);
    ASSERT_TRUE(fromConfig.ok()) << fromConfig.status();
    EXPECT_TRUE(sameSchedule(*fromConfig, v.schedule));
  }
}

TEST(Variants, AblationsLeaveTheirInputAlone) {
  const Schedule released = scheduleOf(releasedConfig());
  Schedule copy = released;
  (void)makeAllFull(copy);
  (void)makeNoReindex(copy);
  EXPECT_TRUE(sameSchedule(copy, released));
}

} // namespace

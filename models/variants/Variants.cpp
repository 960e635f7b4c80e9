//===- Variants.cpp - Named model variants --------------------------------===//
#include "models/variants/Variants.h"

#include "models/variants/EmbeddedConfigs.inc"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <functional>

namespace csa {
namespace {

struct VariantRecipe {
  VariantInfo info;
  const char *config;
  std::function<Schedule(const Schedule &)> ablation; ///< may be empty
};

const std::vector<VariantRecipe> &recipes() {
  static const std::vector<VariantRecipe> all = {
      {{"released", "DeepSeek-V4.1-Flash as released: 40 layers, Full "
                    "{2,8,14,20}, Reindex {24,28,32,36}, HSI pool at 20"},
       "deepseek-v4.1-flash",
       {}},
      {{"all-full", "released dimensions, every compressed layer Full (no "
                    "cross-layer sharing, no HSI)"},
       "deepseek-v4.1-flash",
       makeAllFull},
      {{"no-reindex", "released, with the Reindex layers reusing layer 20's "
                      "top-k (no HSI candidate pool)"},
       "deepseek-v4.1-flash",
       makeNoReindex},
      {{"tiny", "8 small layers with every structure (SWA-only, Full r2/r1, "
                "Reuse, Reindex, HSI, MoE, mHC, Engram): WWF.C.R."},
       "tiny",
       {}},
      {{"reduced", "released widths (hidden 5120, 64 heads x 512, indexer "
                   "32 x 128, top-512, HSI 2048 x 8) in 6 layers WWF.CR, 8 "
                   "experts top-2, small Engram table"},
       "reduced",
       {}},
      {{"h200-full", "released dimensions and schedule (40 layers, hidden "
                     "5120, 64 heads x 512, indexer 32 x 128) sized for one "
                     "H200: 64 routed experts of 384 (top-6 kept), Engram "
                     "tables of 12.0 M rows per layer instead of 384 M"},
       "h200-full",
       {}},
      {{"tiny-all-full", "tiny, every compressed layer Full"},
       "tiny",
       makeAllFull},
      {{"tiny-no-reindex", "tiny, Reindex layer reusing layer 4's top-k"},
       "tiny",
       makeNoReindex},
  };
  return all;
}

/// Sources are re-derived after an ablation changes modes.
Schedule withDerivedSources(Schedule schedule) {
  for (LayerRole &role : schedule.layers)
    role.kvSource = role.indexSource = role.candidateSource = -1;
  deriveSources(schedule);
  return schedule;
}

} // namespace

const std::vector<VariantInfo> &namedVariants() {
  static const std::vector<VariantInfo> infos = [] {
    std::vector<VariantInfo> out;
    for (const VariantRecipe &r : recipes())
      out.push_back(r.info);
    return out;
  }();
  return infos;
}

absl::StatusOr<std::string> embeddedConfig(const std::string &name) {
  for (const EmbeddedConfig &c : kEmbeddedConfigs)
    if (name == c.name)
      return std::string(c.text);
  return absl::NotFoundError("no embedded config named '" + name + "'");
}

Schedule makeAllFull(const Schedule &schedule) {
  Schedule out = schedule;
  for (LayerRole &role : out.layers) {
    if (role.mode != LayerMode::SwaOnly)
      role.mode = LayerMode::Full;
    role.candidatePool = false;
  }
  return out;
}

Schedule makeNoReindex(const Schedule &schedule) {
  Schedule out = schedule;
  for (LayerRole &role : out.layers) {
    if (role.mode == LayerMode::Reindex)
      role.mode = LayerMode::Reuse;
    role.candidatePool = false;
  }
  return out;
}

Schedule makeNoCed(const Schedule &schedule) {
  Schedule out = schedule;
  auto isCedSource = [&](int64_t layer) {
    if (layer < 0 || layer >= int64_t(schedule.layers.size()))
      return false;
    const LayerRole &source = schedule.layers[size_t(layer)];
    return source.mode == LayerMode::Full && source.ratio == 1;
  };
  for (LayerRole &role : out.layers) {
    if ((role.mode == LayerMode::Reuse || role.mode == LayerMode::Reindex) &&
        isCedSource(role.kvSource)) {
      role.mode = LayerMode::Full;
      role.ratio = schedule.layers[size_t(role.kvSource)].ratio;
    }
  }
  bool reindexLeft = false;
  for (const LayerRole &role : out.layers)
    reindexLeft |= role.mode == LayerMode::Reindex;
  for (LayerRole &role : out.layers) {
    if (!reindexLeft)
      role.candidatePool = false;
    role.kvSource = role.indexSource = role.candidateSource = -1;
  }
  deriveSources(out);
  return out;
}

absl::StatusOr<ModelVariant> loadVariant(const std::string &name) {
  for (const VariantRecipe &recipe : recipes()) {
    if (recipe.info.name != name)
      continue;
    auto text = embeddedConfig(recipe.config);
    if (!text.ok())
      return text.status();
    auto config = parseModelConfig(*text, "variant '" + name + "' config");
    if (!config.ok())
      return config.status();
    auto schedule = scheduleFromConfig(*config);
    if (!schedule.ok())
      return schedule.status();
    ModelVariant variant{name, *config, *schedule};
    if (recipe.ablation) {
      variant.schedule =
          withDerivedSources(recipe.ablation(variant.schedule));
      if (absl::Status s = validateSchedule(*config, variant.schedule,
                                            "variant '" + name + "'");
          !s.ok())
        return s;
      applyScheduleToConfig(variant.schedule, variant.config);
    }
    return variant;
  }
  std::vector<std::string> names;
  for (const VariantRecipe &r : recipes())
    names.push_back(r.info.name);
  return absl::NotFoundError(absl::StrCat("unknown variant '", name,
                                          "'; known variants: ",
                                          absl::StrJoin(names, ", ")));
}

} // namespace csa

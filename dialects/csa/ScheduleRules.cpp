//===- ScheduleRules.cpp - Legality rules of a CSA2 layer schedule --------===//
//
// Every message starts with the layer ("layer 24 (reindex): ") and names the
// attribute or config field involved, so a user can find the mistake in a
// schedule string, a JSON override or hand-edited IR alike.
//
//===----------------------------------------------------------------------===//
#include "dialects/csa/ScheduleRules.h"

namespace csa {

std::string_view layerModeName(LayerMode mode) {
  switch (mode) {
  case LayerMode::Full:
    return "full";
  case LayerMode::Reindex:
    return "reindex";
  case LayerMode::Reuse:
    return "reuse";
  case LayerMode::SwaOnly:
    return "swa_only";
  }
  return "unknown";
}

std::optional<LayerMode> parseLayerMode(std::string_view name) {
  for (LayerMode mode : {LayerMode::Full, LayerMode::Reindex, LayerMode::Reuse,
                         LayerMode::SwaOnly})
    if (layerModeName(mode) == name)
      return mode;
  return std::nullopt;
}

std::string describeLayer(const LayerRole &role) {
  return "layer " + std::to_string(role.layer) + " (" +
         std::string(layerModeName(role.mode)) + ")";
}

static std::string fail(const LayerRole &role, const std::string &rule) {
  return describeLayer(role) + ": " + rule;
}

std::optional<std::string> checkLayerLocal(const LayerRole &role) {
  const bool hasKv = role.kvSource >= 0;
  const bool hasIndex = role.indexSource >= 0;
  const bool hasCandidates = role.candidateSource >= 0;
  if (role.layer < 0)
    return fail(role, "layer index must be non-negative");
  if (role.candidatePool && role.mode != LayerMode::Full)
    return fail(role, "only a Full layer can build the HSI candidate pool");

  switch (role.mode) {
  case LayerMode::SwaOnly:
    if (role.ratio != 0)
      return fail(role, "a SWA-only layer has compression ratio 0, got " +
                            std::to_string(role.ratio));
    if (hasKv || hasIndex || hasCandidates)
      return fail(role, "a SWA-only layer reads no kv_source, index_source "
                        "or candidate_source");
    return std::nullopt;
  case LayerMode::Full:
  case LayerMode::Reindex:
  case LayerMode::Reuse:
    if (role.ratio < 1)
      return fail(role, "a compressed mode needs a compression ratio >= 1, "
                        "got " +
                            std::to_string(role.ratio));
    break;
  }

  switch (role.mode) {
  case LayerMode::Full:
    if (hasKv && role.kvSource != role.layer)
      return fail(role, "a Full layer owns its KV cache; kv_source " +
                            std::to_string(role.kvSource) +
                            " must be absent or the layer itself");
    if (hasIndex && role.indexSource != role.layer)
      return fail(role, "a Full layer owns its indexer; index_source " +
                            std::to_string(role.indexSource) +
                            " must be absent or the layer itself");
    if (hasCandidates)
      return fail(role, "a Full layer scores every position; it takes no "
                        "candidate_source");
    return std::nullopt;
  case LayerMode::Reindex:
    if (!hasKv || role.kvSource == role.layer)
      return fail(role, "a Reindex layer needs an earlier Full layer as "
                        "kv_source (it stores no KV of its own)");
    if (hasIndex && role.indexSource != role.layer)
      return fail(role, "a Reindex layer selects its own top-k; index_source " +
                            std::to_string(role.indexSource) +
                            " must be absent or the layer itself");
    if (!hasCandidates)
      return fail(role, "a Reindex layer needs a candidate_source (a Full "
                        "layer that builds the HSI candidate pool)");
    return std::nullopt;
  case LayerMode::Reuse:
    if (!hasKv || role.kvSource == role.layer)
      return fail(role, "a Reuse layer needs an earlier Full layer as "
                        "kv_source");
    if (!hasIndex || role.indexSource == role.layer)
      return fail(role, "a Reuse layer needs an earlier Full or Reindex layer "
                        "as index_source");
    if (hasCandidates)
      return fail(role, "a Reuse layer reuses top-k indices; it takes no "
                        "candidate_source");
    return std::nullopt;
  case LayerMode::SwaOnly:
    break;
  }
  return std::nullopt;
}

/// The rules every source reference obeys: it names an existing, earlier layer.
static std::optional<std::string>
checkReference(const LayerRole &role, const char *field, int64_t source,
               const LayerLookup &lookup, const LayerRole *&out) {
  out = nullptr;
  if (source < 0 || source == role.layer)
    return std::nullopt;
  if (source > role.layer)
    return fail(role, std::string(field) + " " + std::to_string(source) +
                          " points forward; a layer can only read from an "
                          "earlier layer");
  out = lookup(source);
  if (!out)
    return fail(role, std::string(field) + " " + std::to_string(source) +
                          " does not name an attention layer of this model");
  return std::nullopt;
}

/// The cache whose positions a layer's top-k indices address.
static int64_t selectionCache(const LayerRole &role) {
  return role.mode == LayerMode::Full ? role.layer : role.kvSource;
}

std::optional<std::string> checkLayerSources(const LayerRole &role,
                                             const LayerLookup &lookup) {
  const LayerRole *kv = nullptr, *index = nullptr, *candidates = nullptr;
  if (auto err = checkReference(role, "kv_source", role.kvSource, lookup, kv))
    return err;
  if (auto err =
          checkReference(role, "index_source", role.indexSource, lookup, index))
    return err;
  if (auto err = checkReference(role, "candidate_source", role.candidateSource,
                                lookup, candidates))
    return err;

  if (kv) {
    if (kv->mode != LayerMode::Full)
      return fail(role, "kv_source " + describeLayer(*kv) +
                            " is not a Full layer; only Full layers own a "
                            "compressed KV cache");
    if (kv->ratio != role.ratio)
      return fail(role, "compression ratio " + std::to_string(role.ratio) +
                            " differs from its kv_source layer " +
                            std::to_string(kv->layer) + "'s ratio " +
                            std::to_string(kv->ratio) +
                            "; a cache is read at its own ratio");
  }
  if (index) {
    if (index->mode != LayerMode::Full && index->mode != LayerMode::Reindex)
      return fail(role, "index_source " + describeLayer(*index) +
                            " selects no top-k; only Full and Reindex layers "
                            "are index sources");
    if (selectionCache(*index) != role.kvSource)
      return fail(role, "index_source " + std::to_string(index->layer) +
                            " selects positions of layer " +
                            std::to_string(selectionCache(*index)) +
                            "'s cache, but this layer reads layer " +
                            std::to_string(role.kvSource) + "'s cache");
  }
  if (candidates) {
    if (candidates->mode != LayerMode::Full || !candidates->candidatePool)
      return fail(role, "candidate_source " + describeLayer(*candidates) +
                            " does not build an HSI candidate pool");
    if (candidates->layer != role.kvSource)
      return fail(role, "candidate_source " +
                            std::to_string(candidates->layer) +
                            " builds its pool over its own cache, but this "
                            "layer reads layer " +
                            std::to_string(role.kvSource) + "'s cache");
  }
  return std::nullopt;
}

} // namespace csa

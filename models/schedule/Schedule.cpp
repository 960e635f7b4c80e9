//===- Schedule.cpp - CSA2 layer schedules of a model variant -------------===//
#include "models/schedule/Schedule.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include <nlohmann/json.hpp>
#include "runtime/support/JsonLimits.h"

#include <algorithm>
#include <cctype>

namespace csa {
namespace {

using nlohmann::json;

bool contains(const std::vector<int64_t> &list, int64_t value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

} // namespace

void deriveSources(Schedule &schedule) {
  int64_t lastFull = -1, lastIndex = -1, lastPool = -1;
  for (LayerRole &role : schedule.layers) {
    switch (role.mode) {
    case LayerMode::Full:
      // Explicit values are kept so that the rules can reject them.
      if (role.kvSource < 0)
        role.kvSource = role.layer;
      if (role.indexSource < 0)
        role.indexSource = role.layer;
      break;
    case LayerMode::Reindex:
      if (role.kvSource < 0)
        role.kvSource = lastFull;
      if (role.candidateSource < 0)
        role.candidateSource = lastPool;
      if (role.indexSource < 0)
        role.indexSource = role.layer;
      break;
    case LayerMode::Reuse:
      if (role.kvSource < 0)
        role.kvSource = lastFull;
      if (role.indexSource < 0)
        role.indexSource = lastIndex;
      break;
    case LayerMode::SwaOnly:
      break;
    }
    if (role.mode == LayerMode::Full)
      lastFull = role.layer;
    if (role.mode == LayerMode::Full || role.mode == LayerMode::Reindex)
      lastIndex = role.layer;
    if (role.candidatePool)
      lastPool = role.layer;
  }
}

namespace {

/// A blank schedule: the config's ratios, modes still to be set.
Schedule blankSchedule(const ModelConfig &config) {
  Schedule schedule;
  for (int64_t l = 0; l < config.nLayers; ++l) {
    LayerRole role;
    role.layer = l;
    role.ratio = config.ratio(l);
    schedule.layers.push_back(role);
  }
  return schedule;
}

} // namespace

std::string Schedule::letters() const {
  std::string out;
  for (const LayerRole &role : layers) {
    switch (role.mode) {
    case LayerMode::Full:
      out += role.candidatePool ? 'C' : 'F';
      break;
    case LayerMode::Reindex:
      out += 'R';
      break;
    case LayerMode::Reuse:
      out += '.';
      break;
    case LayerMode::SwaOnly:
      out += 'W';
      break;
    }
  }
  return out;
}

absl::Status validateSchedule(const ModelConfig &config,
                              const Schedule &schedule,
                              const std::string &origin) {
  auto fail = [&](const std::string &message) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", message));
  };
  LayerLookup lookup = [&](int64_t layer) -> const LayerRole * {
    if (layer < 0 || layer >= int64_t(schedule.layers.size()))
      return nullptr;
    return &schedule.layers[layer];
  };
  for (const LayerRole &role : schedule.layers)
    if (auto error = checkLayerLocal(role))
      return fail(*error);
  for (const LayerRole &role : schedule.layers) {
    if (auto error = checkLayerSources(role, lookup))
      return fail(*error);
    if (role.candidatePool &&
        (config.candidateTopkBlocks <= 0 || config.candidateBlockSize <= 0))
      return fail(absl::StrCat(describeLayer(role),
                               ": builds an HSI candidate pool but the config "
                               "sets no candidate_topk_blocks / "
                               "candidate_block_size"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Schedule> scheduleFromConfig(const ModelConfig &config) {
  Schedule schedule = blankSchedule(config);
  const bool hf = config.layout == ConfigLayout::HuggingFace;
  for (LayerRole &role : schedule.layers) {
    const int64_t l = role.layer;
    const bool kv = contains(config.kvSourceLayers, l);
    const bool index = contains(config.indexSourceLayers, l);
    if (kv && !index)
      return absl::InvalidArgumentError(absl::StrCat(
          config.source, ": field '",
          hf ? "text_config.index_source_layer_ids" : "index_source_layers",
          "': layer ", l,
          " is a KV source but not an index source; a Full layer is its own "
          "index source"));
    if (role.ratio == 0)
      role.mode = LayerMode::SwaOnly;
    else if (kv)
      role.mode = LayerMode::Full;
    else if (index)
      role.mode = LayerMode::Reindex;
    else
      role.mode = LayerMode::Reuse;
    if ((kv || index) && role.ratio == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          config.source, ": field '",
          hf ? "text_config.compress_ratios" : "compress_ratios", "': layer ",
          l, kv ? " is a KV" : " is an index",
          " source but has compression ratio 0"));
    role.candidatePool = l == config.candidateSourceLayer;
    if (role.candidatePool && !kv)
      return absl::InvalidArgumentError(absl::StrCat(
          config.source, ": field '",
          hf ? "text_config.candidate_source_layer_id"
             : "candidate_source_layer",
          "': layer ", l,
          " must be a KV source (a Full layer) to build the candidate pool"));
  }
  deriveSources(schedule);
  if (absl::Status status =
          validateSchedule(config, schedule, config.source + ": schedule");
      !status.ok())
    return status;
  return schedule;
}

absl::StatusOr<Schedule> scheduleFromString(const ModelConfig &config,
                                            const std::string &spec) {
  Schedule schedule = blankSchedule(config);
  const std::string origin = "schedule '" + spec + "'";
  auto fail = [&](size_t pos, const std::string &message) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": at character ", pos + 1, ": ", message));
  };
  size_t layer = 0;
  for (size_t i = 0; i < spec.size();) {
    char c = spec[i];
    if (c == ' ' || c == '|' || c == '_') {
      ++i;
      continue;
    }
    size_t start = i++;
    std::string digits;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])))
      digits += spec[i++];
    if (layer >= schedule.layers.size())
      return fail(start, absl::StrCat("more than the model's ", config.nLayers,
                                      " layers"));
    LayerRole &role = schedule.layers[layer];
    switch (c) {
    case 'W':
      role.mode = LayerMode::SwaOnly;
      role.ratio = 0;
      break;
    case 'F':
      role.mode = LayerMode::Full;
      break;
    case 'C':
      role.mode = LayerMode::Full;
      role.candidatePool = true;
      break;
    case 'R':
      role.mode = LayerMode::Reindex;
      break;
    case '.':
      role.mode = LayerMode::Reuse;
      break;
    default:
      return fail(start, absl::StrCat("'", std::string(1, c),
                                      "' is not a layer letter (W = SWA-only, "
                                      "F = Full, C = Full + candidate pool, "
                                      "R = Reindex, . = Reuse)"));
    }
    if (!digits.empty()) {
      int64_t ratio = 0;
      if (!absl::SimpleAtoi(digits, &ratio))
        return fail(start, "bad ratio '" + digits + "'");
      if (c == 'W' && ratio != 0)
        return fail(start, "a SWA-only layer has ratio 0");
      role.ratio = ratio;
    }
    if (c != 'W' && role.ratio == 0)
      return fail(start,
                  digits.empty()
                      ? absl::StrCat("layer ", layer, " ('", std::string(1, c),
                                     "') has ratio 0 in the config; give it "
                                     "one, e.g. '",
                                     std::string(1, c), "2'")
                      : absl::StrCat("layer ", layer, " ('", std::string(1, c),
                                     "') needs a ratio >= 1, got 0"));
    ++layer;
  }
  if (layer != schedule.layers.size())
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": names ", layer, " layers; the model has ",
                     config.nLayers));
  deriveSources(schedule);
  if (absl::Status status = validateSchedule(config, schedule, origin);
      !status.ok())
    return status;
  return schedule;
}

absl::Status applyScheduleOverrides(const ModelConfig &config,
                                    Schedule &schedule,
                                    const std::string &jsonText,
                                    const std::string &source) {
  auto fail = [&](const std::string &where, const std::string &message) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", where.empty() ? "" : where + ": ", message));
  };
  json root = json::parse(jsonText, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded())
    return fail("", "not valid JSON");
  if (support::jsonDepth(root) > support::kMaxJsonDepth)
    return fail("", absl::StrCat("nested deeper than ", support::kMaxJsonDepth, " levels"));
  // Work on a copy: a rejected override leaves the caller's schedule as it was.
  Schedule result = schedule;
  if (!root.is_object())
    return fail("", "a schedule override is a JSON object");
  for (auto &[key, value] : root.items())
    if (key != "schedule" && key != "layers")
      return fail(key, "unknown key (expected 'schedule' and/or 'layers')");

  if (root.contains("schedule")) {
    if (!root["schedule"].is_string())
      return fail("schedule", "expected a schedule string");
    auto fromString =
        scheduleFromString(config, root["schedule"].get<std::string>());
    if (!fromString.ok())
      return fail("schedule", std::string(fromString.status().message()));
    result = *fromString;
  }
  if (!root.contains("layers")) {
    schedule = result;
    return absl::OkStatus();
  }
  const json &layers = root["layers"];
  if (!layers.is_object())
    return fail("layers", "expected an object keyed by layer number");

  // Every source not named in this override is derived again, so that
  // changing one layer's mode re-wires the layers that read from it.
  for (LayerRole &role : result.layers) {
    role.kvSource = -1;
    role.indexSource = -1;
    role.candidateSource = -1;
  }
  for (auto &[key, entry] : layers.items()) {
    const std::string where = "layers." + key;
    int64_t l = -1;
    const bool digits =
        !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) {
          return std::isdigit(static_cast<unsigned char>(ch));
        });
    if (!digits || !absl::SimpleAtoi(key, &l) || l >= config.nLayers)
      return fail(where, absl::StrCat("'", key, "' is not a layer of the ",
                                      config.nLayers, "-layer backbone"));
    if (!entry.is_object())
      return fail(where, "expected an object");
    LayerRole &role = result.layers[l];
    bool modeGiven = false, ratioGiven = false;
    for (auto &[field, value] : entry.items()) {
      const std::string at = where + "." + field;
      if (field == "mode") {
        if (!value.is_string())
          return fail(at, "expected a mode name");
        auto mode = parseLayerMode(value.get<std::string>());
        if (!mode)
          return fail(at, "'" + value.get<std::string>() +
                              "' is not a mode (full, reindex, reuse, "
                              "swa_only)");
        role.mode = *mode;
        modeGiven = true;
      } else if (field == "ratio" || field == "kv_source" ||
                 field == "index_source" || field == "candidate_source") {
        if (!value.is_number_integer())
          return fail(at, "expected an integer");
        if (!value.is_number_unsigned())
          return fail(at, "must be >= 0");
        int64_t v = value.get<int64_t>();
        if (v < 0)
          return fail(at, "out of range");
        if (field == "ratio") {
          role.ratio = v;
          ratioGiven = true;
        } else if (field == "kv_source") {
          role.kvSource = v;
        } else if (field == "index_source") {
          role.indexSource = v;
        } else {
          role.candidateSource = v;
        }
      } else if (field == "candidate_pool") {
        if (!value.is_boolean())
          return fail(at, "expected true or false");
        role.candidatePool = value.get<bool>();
      } else {
        return fail(at, "unknown field (mode, ratio, kv_source, "
                        "index_source, candidate_source, candidate_pool)");
      }
    }
    if (modeGiven && role.mode == LayerMode::SwaOnly && !ratioGiven)
      role.ratio = 0;
    if (modeGiven && role.mode != LayerMode::Full && !entry.contains("candidate_pool"))
      role.candidatePool = false;
  }
  deriveSources(result);
  if (absl::Status status = validateSchedule(config, result, source);
      !status.ok())
    return status;
  schedule = result;
  return absl::OkStatus();
}

void applyScheduleToConfig(const Schedule &schedule, ModelConfig &config) {
  config.kvSourceLayers.clear();
  config.indexSourceLayers.clear();
  config.candidateSourceLayer = -1;
  for (const LayerRole &role : schedule.layers) {
    config.compressRatios[role.layer] = role.ratio;
    if (role.mode == LayerMode::Full)
      config.kvSourceLayers.push_back(role.layer);
    if (role.mode == LayerMode::Full || role.mode == LayerMode::Reindex)
      config.indexSourceLayers.push_back(role.layer);
    if (role.candidatePool)
      config.candidateSourceLayer = role.layer;
  }
}

} // namespace csa

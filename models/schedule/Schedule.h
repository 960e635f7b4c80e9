//===- Schedule.h - CSA2 layer schedules of a model variant ------*- C++ -*-===//
//
// A schedule assigns each backbone layer its CSA2 mode, compression ratio and
// source layers. It comes from the config (kv_source_layers,
// index_source_layers, candidate_source_layer, compress_ratios), from a
// compact schedule string, or from a JSON override; see docs/schedules.md.
//
// Sources not given explicitly follow the released model's runtime: a layer
// reads the compressed KV of the nearest earlier Full layer, the top-k of the
// nearest earlier index source (Full or Reindex) and the candidate pool of the
// nearest earlier candidate source.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_MODELS_SCHEDULE_SCHEDULE_H
#define CSA_MODELS_SCHEDULE_SCHEDULE_H

#include "dialects/csa/ScheduleRules.h"
#include "models/config/ModelConfig.h"

#include "absl/status/statusor.h"

#include <string>
#include <vector>

namespace csa {

struct Schedule {
  std::vector<LayerRole> layers; ///< one per backbone layer, in order

  /// The compact string of this schedule ("WWF.....C...R..."): one letter
  /// per layer, W = SWA-only, F = Full, C = Full + HSI candidate pool,
  /// R = Reindex, . = Reuse.
  std::string letters() const;
};

/// The schedule the config describes.
absl::StatusOr<Schedule> scheduleFromConfig(const ModelConfig &config);

/// A schedule from a compact string: one letter per backbone layer
/// (W F C R .), each optionally followed by a ratio ("F1"); spaces, '|' and
/// '_' are ignored. Ratios default to the config's compress_ratios.
absl::StatusOr<Schedule> scheduleFromString(const ModelConfig &config,
                                            const std::string &spec);

/// Applies a JSON override file to `schedule` (left unchanged on error):
/// `{"schedule": "<string>", "layers": {"24": {"mode": "reuse",
///   "ratio": 1, "kv_source": 20, "index_source": 20,
///   "candidate_source": 20, "candidate_pool": true}}}`.
absl::Status applyScheduleOverrides(const ModelConfig &config,
                                    Schedule &schedule,
                                    const std::string &jsonText,
                                    const std::string &source);

/// Checks every layer against the rules of ScheduleRules.h. `origin` starts
/// each message (e.g. "schedule 'WWF...'").
absl::Status validateSchedule(const ModelConfig &config,
                              const Schedule &schedule,
                              const std::string &origin);

/// Fills every source left at -1 by the nearest-earlier rule (see above).
void deriveSources(Schedule &schedule);

/// Writes the schedule back into the config's source lists and ratios, so the
/// config describes the variant (e.g. for a generated checkpoint). The config
/// lists cannot express explicit sources that differ from the nearest-earlier
/// rule; the Schedule, not the config, is authoritative for those.
void applyScheduleToConfig(const Schedule &schedule, ModelConfig &config);

} // namespace csa

#endif // CSA_MODELS_SCHEDULE_SCHEDULE_H

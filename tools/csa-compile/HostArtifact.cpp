//===- HostArtifact.cpp - Writing a host artifact (plain C++) -------------===//
#include "tools/csa-compile/HostArtifact.h"

#include "models/schedule/Schedule.h"
#include "models/weights/RandomCheckpoint.h"
#include "models/weights/WeightManifest.h"
#include "runtime/artifact/ArtifactWriter.h"
#include "runtime/artifact/Sha256.h"
#include "tools/support/Version.h"

#include "absl/strings/str_cat.h"

namespace csa {

namespace {

/// The description whose hash is the artifact's schedule_hash: every
/// layer's role, and the hash of the graph the plan and kernels came from
/// (two artifacts of one schedule differ there when a stage was edited).
nlohmann::json scheduleDetail(const Schedule &schedule, const std::string &graphText,
                              const std::string &indexPublication) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerRole &r : schedule.layers)
    layers.push_back({{"layer", r.layer},
                      {"mode", std::string(layerModeName(r.mode))},
                      {"ratio", r.ratio},
                      {"kv_source", r.kvSource},
                      {"index_source", r.indexSource},
                      {"candidate_source", r.candidateSource},
                      {"candidate_pool", r.candidatePool}});
  nlohmann::json detail = {{"layers", std::move(layers)}};
  if (indexPublication != "owner")
    detail["index_publication"] = indexPublication;
  if (!graphText.empty())
    detail["graph_sha256"] = artifact::sha256Hex(graphText);
  return detail;
}

} // namespace

std::string artifactConfigText(const ModelConfig &config) {
  return flatConfigJson(config).dump();
}

absl::StatusOr<std::string> artifactScheduleLetters(const std::string &configText) {
  auto config = parseModelConfig(configText, "csa.config");
  if (!config.ok())
    return config.status();
  auto schedule = scheduleFromConfig(*config);
  if (!schedule.ok())
    return schedule.status();
  return schedule->letters();
}

absl::Status writeHostArtifact(const HostArtifactParts &parts,
                               const std::string &directory) {
  auto config = parseModelConfig(parts.configText, "csa.config");
  if (!config.ok())
    return config.status();
  auto schedule = scheduleFromConfig(*config);
  if (!schedule.ok())
    return schedule.status();
  if (!parts.schedule.empty() && parts.schedule != schedule->letters())
    return absl::InvalidArgumentError(
        absl::StrCat("csa.schedule '", parts.schedule,
                     "' is not the schedule of csa.config ('",
                     schedule->letters(), "')"));
  auto specs = weightManifest(*config, *schedule);
  if (!specs.ok())
    return specs.status();
  nlohmann::json configJson;
  try {
    configJson = nlohmann::json::parse(parts.configText);
  } catch (const nlohmann::json::exception &e) {
    return absl::InvalidArgumentError(
        absl::StrCat("csa.config: not valid JSON: ", e.what()));
  }

  artifact::ArtifactWriter writer;
  writer.setModel(parts.model.empty() ? "model" : parts.model, configJson);
  writer.setSchedule(schedule->letters(), scheduleDetail(*schedule, parts.graphText, parts.indexPublication));
  writer.setTarget(artifact::Target::HostX86_64);
  writer.setCreatedBy(csa::tools::versionLine("csa-compile"));
  writer.setCommand(parts.command);
  writer.setPlan(parts.plan);
  artifact::WeightsManifest weights;
  for (const TensorSpec &spec : *specs)
    weights.tensors.push_back({spec.name, spec.dtype, spec.shape});
  weights.ignoredPrefixes = {"mtp.", "vision.", "aligner.", "image_"};
  writer.setWeights(std::move(weights));
  if (absl::Status st = writer.addFile("kernels/host.so", parts.library); !st.ok())
    return st;
  if (absl::Status st = writer.addFile("kernels/host.json", parts.listing);
      !st.ok())
    return st;
  if (!parts.ptx.empty()) {
    if (absl::Status st = writer.addFile("kernels/kernels.ptx", parts.ptx); !st.ok())
      return st;
    if (absl::Status st = writer.addFile("kernels/kernels.json", parts.ptxListing);
        !st.ok())
      return st;
  }
  if (absl::Status st = writer.addFile("config.json", configJson.dump(2) + "\n");
      !st.ok())
    return st;
  auto written = writer.write(directory);
  if (!written.ok())
    return written.status();
  return absl::OkStatus();
}

} // namespace csa

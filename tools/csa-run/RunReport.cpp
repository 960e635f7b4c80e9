//===- RunReport.cpp - What csa-run measured, as text and JSON ------------===//
//
// See RunReport.h.
//
//===----------------------------------------------------------------------===//
#include "tools/csa-run/RunReport.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

namespace csa::tools {

using Json = nlohmann::ordered_json;

namespace {
/// Seconds as a list of milliseconds.
Json msList(const std::vector<double> &seconds) {
  Json out = Json::array();
  for (double s : seconds)
    out.push_back(s * 1e3);
  return out;
}
} // namespace

std::vector<double> GenerationRun::sortedSteps() const {
  std::vector<double> all = stepSequences > 1 ? std::vector<double>{} : promptSteps;
  all.insert(all.end(), decodeSteps.begin(), decodeSteps.end());
  std::sort(all.begin(), all.end());
  return all;
}

double tokensPerSecond(double tokens, double seconds) {
  return seconds > 0 ? tokens / seconds : 0.0;
}

Json prefillJson(const GenerationRun &r, int64_t promptTokens) {
  return Json{{"tokens", promptTokens},
              {"ms", r.prefillSeconds * 1e3},
              {"tokens_per_s", tokensPerSecond(double(promptTokens), r.prefillSeconds)},
              {"per_sequence_ms", msList(r.prefillEach)},
              {"step_ms", msList(r.promptSteps)}};
}

Json decodeJson(const GenerationRun &r) {
  const std::vector<double> sorted = r.sortedSteps();
  Json out{{"steps", r.decodeSteps.size()},
           {"ms", r.decodeSeconds * 1e3},
           {"tokens", r.decodeTokens},
           {"tokens_per_s", tokensPerSecond(double(r.decodeTokens), r.decodeSeconds)},
           {"step_ms", msList(r.decodeSteps)},
           {"timed_steps", sorted.size()},
           {"median_ms", nullptr},
           {"min_ms", nullptr},
           {"max_ms", nullptr}};
  if (!sorted.empty()) {
    out["median_ms"] = sorted[sorted.size() / 2] * 1e3;
    out["min_ms"] = sorted.front() * 1e3;
    out["max_ms"] = sorted.back() * 1e3;
  }
  return out;
}

void reportRepeat(const std::vector<GenerationRun> &runs, int64_t promptTokens, bool warmup,
                  bool json, Json &doc) {
  // Over the runs: the prefill's time and rate, and each run's median
  // single-token step and decode rate.
  std::vector<double> prefillMs, prefillRate, stepMs, decodeRate;
  for (const GenerationRun &r : runs) {
    prefillMs.push_back(r.prefillSeconds * 1e3);
    prefillRate.push_back(tokensPerSecond(double(promptTokens), r.prefillSeconds));
    if (const std::vector<double> sorted = r.sortedSteps(); !sorted.empty())
      stepMs.push_back(sorted[sorted.size() / 2] * 1e3);
    if (!r.decodeSteps.empty())
      decodeRate.push_back(tokensPerSecond(double(r.decodeTokens), r.decodeSeconds));
  }
  struct Spread {
    std::vector<double> values;
    double median = 0, min = 0, max = 0, stdev = 0;
  };
  auto spread = [](std::vector<double> values) {
    Spread s;
    s.values = values;
    if (values.empty())
      return s;
    std::sort(values.begin(), values.end());
    s.median = values[values.size() / 2];
    s.min = values.front();
    s.max = values.back();
    double mean = 0;
    for (double v : values)
      mean += v / double(values.size());
    double squares = 0;
    for (double v : values)
      squares += (v - mean) * (v - mean);
    s.stdev = values.size() > 1 ? std::sqrt(squares / double(values.size() - 1)) : 0;
    return s;
  };
  const std::pair<const char *, Spread> rows[] = {{"prefill_ms", spread(prefillMs)},
                                                  {"prefill_tokens_per_s", spread(prefillRate)},
                                                  {"decode_step_ms", spread(stepMs)},
                                                  {"decode_tokens_per_s", spread(decodeRate)}};
  Json rep{{"runs", runs.size()}, {"warmup", warmup}};
  for (const auto &[name, s] : rows)
    rep[name] = s.values.empty() ? Json(nullptr)
                                 : Json{{"values", s.values},
                                        {"median", s.median},
                                        {"min", s.min},
                                        {"max", s.max},
                                        {"stdev", s.stdev}};
  Json each = Json::array();
  for (const GenerationRun &r : runs)
    each.push_back({{"prefill", prefillJson(r, promptTokens)}, {"decode", decodeJson(r)}});
  rep["each"] = each;
  doc["repeat"] = rep;
  if (json)
    return;
  std::printf("repeat: %lld runs%s (%lld prompt tokens, %zu decode steps each)\n",
              (long long)runs.size(), warmup ? " after a warm-up" : "", (long long)promptTokens,
              runs.empty() ? size_t(0) : runs.front().decodeSteps.size());
  std::printf("| %-20s | %12s | %12s | %12s | %12s |\n", "measure", "median", "min", "max",
              "stdev");
  std::printf("|%s|%s|%s|%s|%s|\n", std::string(22, '-').c_str(), std::string(14, '-').c_str(),
              std::string(14, '-').c_str(), std::string(14, '-').c_str(),
              std::string(14, '-').c_str());
  const char *labels[] = {"prefill ms", "prefill tokens/s", "decode step ms", "decode tokens/s"};
  for (size_t i = 0; i < 4; ++i)
    if (!rows[i].second.values.empty()) {
      const Spread &s = rows[i].second;
      std::printf("| %-20s | %12.3f | %12.3f | %12.3f | %12.3f |\n", labels[i], s.median, s.min,
                  s.max, s.stdev);
    }
}

void reportGpu(const runtime::GpuActivity &g, bool json, Json &doc) {
  doc["gpu"] = {{"launches", g.launches},
                {"graph_launches", g.graphLaunches},
                {"graphs_built", g.graphsBuilt},
                {"graph_nodes_updated", g.graphNodesUpdated},
                {"branch_launches", g.branchLaunches},
                {"uploads", g.uploads},
                {"downloads", g.downloads},
                {"device_allocations", g.deviceAllocations},
                {"wait_ms", g.waitSeconds * 1e3},
                {"upload_ms", g.uploadSeconds * 1e3},
                {"launch_ms", g.launchSeconds * 1e3}};
  if (!json)
    std::printf("gpu, last run: %lld kernel launches in %lld graphs (%lld built, "
                "%lld launches updated), %lld uploads, %lld downloads, %lld "
                "device allocations; host %.3f ms waiting for the GPU, %.3f ms "
                "in uploads, %.3f ms in launch calls; %lld launches on graph branches\n",
                (long long)g.launches, (long long)g.graphLaunches, (long long)g.graphsBuilt,
                (long long)g.graphNodesUpdated, (long long)g.uploads, (long long)g.downloads,
                (long long)g.deviceAllocations, g.waitSeconds * 1e3, g.uploadSeconds * 1e3,
                g.launchSeconds * 1e3, (long long)g.branchLaunches);
}

} // namespace csa::tools

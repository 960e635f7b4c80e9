//===- RunReport.h - What csa-run measured, as text and JSON -----*- C++ -*-===//
//
// A generation run's numbers (the prefill's and each decode step's times,
// the tokens made, the caches held) and how csa-run reports them: the
// --json object's "prefill", "decode", "repeat" and "gpu" members
// (docs/run-json.md) and the matching text lines. Plain C++ (no LLVM).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_CSA_RUN_RUNREPORT_H
#define CSA_TOOLS_CSA_RUN_RUNREPORT_H

#include "runtime/executor/Executor.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

namespace csa::tools {

/// One generation: every sequence's prefill, then the decode steps.
struct GenerationRun {
  std::vector<runtime::Sequence> sequences;
  std::vector<std::vector<int32_t>> generated;
  std::vector<char> stopped;
  double prefillSeconds = 0, decodeSeconds = 0;
  std::vector<double> prefillEach; ///< each sequence's prefill (not --context)
  std::vector<double> promptSteps; ///< --context: the prompt, a token a step
  std::vector<double> decodeSteps; ///< each decode step, step by step, then sequence
  int64_t decodeTokens = 0;        ///< the tokens the decode steps made
  uint64_t cacheHeld = 0, cacheUsed = 0;
  int64_t position = 0; ///< the first sequence's at the end
  /// The sequences a decode step runs (a batch decoded together: all).
  int64_t stepSequences = 1;
  /// Every decode step, sorted; one sequence a step: every single-token
  /// step (--context: the prompt's too).
  std::vector<double> sortedSteps() const;
};

/// `tokens` over `seconds` (0 when no time passed).
double tokensPerSecond(double tokens, double seconds);

/// The "prefill" member: `promptTokens` (all sequences') over the run's time.
nlohmann::ordered_json prefillJson(const GenerationRun &run, int64_t promptTokens);
/// The "decode" member: steps, tokens, rate, each step's time and the
/// median, min and max of sortedSteps().
nlohmann::ordered_json decodeJson(const GenerationRun &run);

/// --repeat: the median, min, max and standard deviation over `runs` of the
/// prefill's time and rate and of each run's median step and decode rate,
/// into doc["repeat"], and as a table unless `json`.
void reportRepeat(const std::vector<GenerationRun> &runs, int64_t promptTokens, bool warmup,
                  bool json, nlohmann::ordered_json &doc);

/// The GPU's counters of the last run into doc["gpu"], and the `gpu, last
/// run:` line unless `json`.
void reportGpu(const runtime::GpuActivity &gpu, bool json, nlohmann::ordered_json &doc);

} // namespace csa::tools

#endif // CSA_TOOLS_CSA_RUN_RUNREPORT_H

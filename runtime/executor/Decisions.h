//===- Decisions.h - A run's discrete decisions, dumped or forced -*- C++ -*-===//
//
// The choices a forward makes that a small numeric difference can flip: each
// top-k set (csa.topk's result), each HSI candidate pool (csa.hsi_select's)
// and each layer's MoE routing (expert ids and their weights). With
// ExecutorOptions::dumpDecisions a run writes them to a directory; with
// forceDecisions a run reads them back in place of its own, so that two runs
// (CPU and GPU, two schedules' shared layers) compare with every decision
// held equal (docs/semantics.md, "Whole-model tolerance checks").
//
// One .npy per decision: <dir>/r<run>_<entry>-<step>_<what>.npy, where run
// counts the executor's prefill and decode calls from 0 (a --warmup counts
// too), entry-step is the plan step ("decode-12"), and what is topk (int32
// [rows, k]), hsi_pool (uint8 [rows, width]), moe_ids (int32 [rows, top_k])
// or moe_weights (float32 [rows, top_k]).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_EXECUTOR_DECISIONS_H
#define CSA_RUNTIME_EXECUTOR_DECISIONS_H

#include "absl/status/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace csa::runtime::detail {

/// The file of decision `what` made by plan step `where` ("decode[12]") in
/// the executor's call `run`.
std::string decisionPath(const std::string &dir, int64_t run, const std::string &where,
                         const std::string &what);

/// Reads the .npy at `path` into `data`: its dtype must be `descr` and its
/// shape `shape` exactly; errors name the file and what differs.
absl::Status readDecision(const std::string &path, const std::string &descr,
                          const std::vector<int64_t> &shape, void *data, size_t bytes);

} // namespace csa::runtime::detail

#endif // CSA_RUNTIME_EXECUTOR_DECISIONS_H

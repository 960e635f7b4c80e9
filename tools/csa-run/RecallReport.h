//===- RecallReport.h - csa-run --analyze=recall's table and JSON -*- C++ -*-===//
//
// The executor's RecallEntry rows (one per sparse attention step with a
// global cache and run) as csa-run prints them: a table per layer and entry
// point, and the rows themselves in the --json object (docs/run-json.md).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_CSA_RUN_RECALLREPORT_H
#define CSA_TOOLS_CSA_RUN_RECALLREPORT_H

#include "runtime/executor/Executor.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace csa::tools {

/// Each layer's CSA2 mode ("full", "reindex", "reuse", "swa") from a
/// manifest's schedule string (one letter a layer, W F C R ., each maybe
/// followed by a ratio); a layer past the string's is "".
std::string layerMode(const std::string &schedule, int64_t layer);

/// The rows, one JSON object each, with the layer's mode.
nlohmann::ordered_json recallJson(const std::vector<runtime::RecallEntry> &rows,
                                  const std::string &schedule);

/// The table: a line per layer and entry point, the rows' means weighted
/// by their counted query rows.
void printRecall(const std::vector<runtime::RecallEntry> &rows, const std::string &schedule);

} // namespace csa::tools

#endif // CSA_TOOLS_CSA_RUN_RECALLREPORT_H

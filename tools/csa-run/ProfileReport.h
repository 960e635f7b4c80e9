//===- ProfileReport.h - csa-run --profile's table and JSON ------*- C++ -*-===//
//
// The executor's profile (ExecutorOptions::profile) as csa-run prints it:
// a table by op and kernels with the GPU path's copies, or, with --json,
// the profile by op and kernels, by op, by entry point and layer, and by
// layer (docs/run-json.md).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_CSA_RUN_PROFILEREPORT_H
#define CSA_TOOLS_CSA_RUN_PROFILEREPORT_H

#include "runtime/executor/Executor.h"

#include <nlohmann/json.hpp>

#include <vector>

namespace csa::tools {

/// --profile with --json: `kinds` is Executor::profile(), `layerRows`
/// Executor::layerProfile().
nlohmann::ordered_json profileJson(const std::vector<runtime::ProfileEntry> &kinds,
                                   const std::vector<runtime::ProfileEntry> &layerRows);

/// --profile's text: the rows slowest first, then the largest copies.
void printProfile(const std::vector<runtime::ProfileEntry> &rows);

} // namespace csa::tools

#endif // CSA_TOOLS_CSA_RUN_PROFILEREPORT_H

//===- Sweep.h - csa-compile --sweep: one cost row per variant ---*- C++ -*-===//
//
// A sweep file lists model variants (a named variant or a config, a schedule
// string, schedule overrides, the CED switches); csa-compile builds each
// one's graph, costs it (passes/CostAnalysis.h) and prints one row per
// variant: global KV bytes per token, persistent bytes per sequence,
// parameters, decode FLOPs and cache bytes read per token at each context,
// and the prefill FLOPs of a prompt as the variant is compiled. As a table,
// CSV or JSON; bench/plot.py draws the JSON. docs/cost-model.md describes the
// file.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_CSA_COMPILE_SWEEP_H
#define CSA_TOOLS_CSA_COMPILE_SWEEP_H

#include "passes/CostAnalysis.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace csa::sweep {

/// One variant of the file, as written.
struct Row {
  std::string name;
  std::string variant;      ///< a named variant (default "released")
  std::string config;       ///< or a config file
  std::string schedule;     ///< a schedule string
  std::string scheduleJson; ///< a file of schedule overrides
  std::string mainKvFormat;  ///< fp4 (default) or fp8
  std::string indexKeyFormat; ///< fp4 (default) or fp8
  bool noCed = false, noBoundedReplay = false;
  int64_t replayStartLayer = -1, replayTail = -1;
};

struct File {
  std::vector<int64_t> contexts; ///< decode contexts (default the report's)
  int64_t prefillTokens = 4096;  ///< the prompt whose prefill is costed
  std::vector<Row> rows;
};

/// Parses a sweep file: {"contexts": [...], "prefill_tokens": N, "variants":
/// [row, ...]} or a bare list of rows; relative config and override paths are
/// read from the file's folder. Errors name the file and the row.
llvm::Expected<File> parseFile(const std::string &path);

enum class Format { Text, Csv, Json };

/// Costs every row with `cost` (which builds and analyses it) and prints the
/// sweep. A row that fails stops the sweep with an error naming it.
llvm::Error run(const File &file,
                const std::function<llvm::Expected<ModelCost>(const Row &)> &cost,
                Format format, llvm::raw_ostream &os);

} // namespace csa::sweep

#endif // CSA_TOOLS_CSA_COMPILE_SWEEP_H

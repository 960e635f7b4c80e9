//===- ExecutorFlags.h - csa-run's flags for the executor ------*- C++ -*-===//
//
// The flags that set runtime::ExecutorOptions: the device and its CUDA knobs
// (--device, --cuda-*), the GPU path's checking and bisecting switches
// (--gpu-*), the CPU path's threads, the decision and hidden-state dumps and
// injection, --analyze and --allow-unused-weights. The CSA_CUDA_* environment
// variables are their aliases (ExecutorOptions::fromEnvironment); a flag given
// wins. Plain C++ (no LLVM).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_CSA_RUN_EXECUTORFLAGS_H
#define CSA_TOOLS_CSA_RUN_EXECUTORFLAGS_H

#include "runtime/executor/Executor.h"
#include "tools/support/Flags.h"

#include "absl/flags/declare.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

ABSL_DECLARE_FLAG(int64_t, threads);
ABSL_DECLARE_FLAG(int64_t, cuda_heap_mib);
ABSL_DECLARE_FLAG(std::string, analyze);
ABSL_DECLARE_FLAG(std::string, dump_decisions);
ABSL_DECLARE_FLAG(std::string, dump_hidden);
ABSL_DECLARE_FLAG(std::string, force_decisions);

namespace csa::tools {

/// "N" or "FIRST-LAST" (0 <= FIRST <= LAST): the inclusive range, or none
/// when the text is neither (--dump-layers' items, --gpu-profile-steps).
std::optional<std::pair<int64_t, int64_t>> parseIndexRange(absl::string_view text);

/// Sets `options` from the flags above (`profile`: whether --profile is on).
/// Returns 0, or the exit status after printing what is wrong with a flag.
int executorOptionsFromFlags(const CommandLine &flags, bool profile,
                             runtime::ExecutorOptions &options);

} // namespace csa::tools

#endif // CSA_TOOLS_CSA_RUN_EXECUTORFLAGS_H

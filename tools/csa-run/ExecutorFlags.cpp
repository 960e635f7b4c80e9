//===- ExecutorFlags.cpp - csa-run's flags for the executor ---------------===//
#include "tools/csa-run/ExecutorFlags.h"

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#include <iostream>
#include <optional>

ABSL_FLAG(bool, allow_unused_weights, false,
          "run a checkpoint with tensors the artifact does not use");
ABSL_FLAG(std::string, analyze, "",
          "recall: each sparse attention layer's share of the dense attention mass its "
          "selected entries hold");
ABSL_FLAG(std::string, dump_decisions, "",
          "write every top-k set, HSI pool and MoE routing to this folder");
ABSL_FLAG(std::string, dump_hidden, "",
          "write every block's output to this folder");
ABSL_FLAG(std::string, dump_layers, "",
          "dump only these layers' steps: numbers and ranges, e.g. 0,3-5");
ABSL_FLAG(std::string, dump_rows, "",
          "dump only rows BEGIN:END of each step (a numpy slice, e.g. -1: the last)");
ABSL_FLAG(std::string, force_decisions, "",
          "read the decisions from a --dump-decisions folder");
ABSL_FLAG(bool, gpu_emulate, false,
          "the GPU path on host memory with the host kernels (alias: CSA_CUDA_EMULATE=1)");
ABSL_FLAG(bool, gpu_sync, false, "synchronize after every launch (alias: CSA_CUDA_SYNC)");
ABSL_FLAG(bool, gpu_trace, false,
          "print every copy, allocation and changed graph launch (alias: CSA_CUDA_TRACE)");
ABSL_FLAG(bool, gpu_check_hazards, false,
          "with --gpu-emulate: fail when two launches of a CUDA graph touch the same "
          "bytes, one writing, with no dependency between them (alias: "
          "CSA_CUDA_CHECK_HAZARDS)");
ABSL_FLAG(bool, gpu_no_row_tiles, false,
          "always the per-output linears (alias: CSA_CUDA_NO_TILES)");
ABSL_FLAG(bool, gpu_per_expert_moe, false,
          "prefill's routed experts one launch an expert");
ABSL_FLAG(bool, gpu_no_overlap, false,
          "every step after the one before, also those the plan lets overlap");
ABSL_FLAG(bool, gpu_sequence_lanes, true,
          "a batch step's per-sequence steps each sequence on a graph lane of its "
          "own, beside the others (the same logits bit for bit on an H100); "
          "=false: one sequence after another");
ABSL_FLAG(std::string, gpu_host_kernels, "",
          "kernels kept on the CPU, by name prefix, comma-separated "
          "(alias: CSA_CUDA_HOST_KERNELS)");
ABSL_FLAG(int64_t, threads, 0,
          "the CPU path's worker threads (0: every core; the bits do not change)");
ABSL_FLAG(int64_t, cuda_heap_mib, 1024,
          "the kernels' device heap in MiB (alias: CSA_CUDA_MALLOC_HEAP_MB)");
ABSL_FLAG(std::string, cuda_library, "",
          "the CUDA driver library to open (alias: CSA_CUDA_LIBRARY)");
ABSL_FLAG(std::string, device, "cpu", "cpu, cuda or auto");
ABSL_FLAG(std::string, cuda_graphs, "on",
          "CUDA graphs: on, off, N (launches per graph), step or step:P");
ABSL_FLAG(std::string, cuda_pdl, "on", "programmatic dependent launch: on or off");

namespace csa::tools {

std::optional<std::pair<int64_t, int64_t>> parseIndexRange(absl::string_view text) {
  const size_t dash = text.find('-');
  const absl::string_view a = text.substr(0, dash),
                         z = dash == absl::string_view::npos ? a : text.substr(dash + 1);
  int64_t first = 0, last = 0;
  if (!absl::SimpleAtoi(a, &first) || !absl::SimpleAtoi(z, &last) || first < 0 || last < first)
    return std::nullopt;
  return std::make_pair(first, last);
}

namespace {
int failWith(const std::string &message) {
  std::cerr << "csa-run: error: " << message << "\n";
  return 1;
}
} // namespace

int executorOptionsFromFlags(const CommandLine &flags, bool profile,
                             runtime::ExecutorOptions &options) {
  // The CSA_CUDA_* variables are aliases of the --gpu-* and --cuda-* flags;
  // a flag given wins.
  options = runtime::ExecutorOptions::fromEnvironment();
  options.allowUnusedWeights = absl::GetFlag(FLAGS_allow_unused_weights);
  options.profile = profile;
  if (const std::string v = absl::GetFlag(FLAGS_analyze); v == "recall")
    options.analyzeRecall = true;
  else if (!v.empty())
    return flags.error("--analyze needs recall, got '" + v + "'");
  options.dumpDecisions = absl::GetFlag(FLAGS_dump_decisions);
  options.dumpHidden = absl::GetFlag(FLAGS_dump_hidden);
  if ((flags.given(FLAGS_dump_layers) || flags.given(FLAGS_dump_rows)) &&
      options.dumpHidden.empty() && options.dumpDecisions.empty())
    return flags.error("--dump-layers and --dump-rows limit --dump-hidden and --dump-decisions; "
                       "give one of them");
  if (flags.given(FLAGS_dump_layers)) {
    const std::string v = absl::GetFlag(FLAGS_dump_layers);
    for (absl::string_view part : absl::StrSplit(v, ',')) {
      // A layer number, or a range FIRST-LAST of them.
      const auto range = parseIndexRange(part);
      if (!range || range->second - range->first > 100000)
        return flags.error(absl::StrCat(
            "--dump-layers needs layer numbers and ranges such as 0,3-5, got '", v, "'"));
      for (int64_t l = range->first; l <= range->second; ++l)
        options.dumpLayers.push_back(l);
    }
  }
  if (flags.given(FLAGS_dump_rows)) {
    const std::string v = absl::GetFlag(FLAGS_dump_rows);
    const size_t colon = v.find(':');
    int64_t begin = 0, end = 0;
    const std::string b = v.substr(0, colon), e = colon == std::string::npos ? "" : v.substr(colon + 1);
    if (colon == std::string::npos || (!b.empty() && !absl::SimpleAtoi(b, &begin)) ||
        (!e.empty() && !absl::SimpleAtoi(e, &end)))
      return flags.error(absl::StrCat(
          "--dump-rows needs a slice BEGIN:END of a step's rows (numpy's; e.g. -1: or 0:8), got '",
          v, "'"));
    options.dumpRowsBegin = begin;
    if (!e.empty())
      options.dumpRowsEnd = end;
  }
  options.forceDecisions = absl::GetFlag(FLAGS_force_decisions);
  if (flags.given(FLAGS_gpu_emulate))
    options.emulateGpu = absl::GetFlag(FLAGS_gpu_emulate);
  if (flags.given(FLAGS_gpu_sync))
    options.syncEachLaunch = absl::GetFlag(FLAGS_gpu_sync);
  if (flags.given(FLAGS_gpu_trace))
    options.traceGpu = absl::GetFlag(FLAGS_gpu_trace);
  if (flags.given(FLAGS_gpu_check_hazards))
    options.checkGraphHazards = absl::GetFlag(FLAGS_gpu_check_hazards);
  if (flags.given(FLAGS_gpu_no_row_tiles))
    options.rowTiles = !absl::GetFlag(FLAGS_gpu_no_row_tiles);
  options.groupedPrefillMoe = !absl::GetFlag(FLAGS_gpu_per_expert_moe);
  options.overlapSteps = !absl::GetFlag(FLAGS_gpu_no_overlap);
  options.sequenceLanes = absl::GetFlag(FLAGS_gpu_sequence_lanes);
  if (flags.given(FLAGS_gpu_host_kernels))
    options.hostKernelPrefixes =
        absl::StrSplit(absl::GetFlag(FLAGS_gpu_host_kernels), ',', absl::SkipEmpty());
  options.threads = absl::GetFlag(FLAGS_threads);
  if (flags.given(FLAGS_cuda_heap_mib))
    options.deviceHeapMiB = absl::GetFlag(FLAGS_cuda_heap_mib);
  if (flags.given(FLAGS_cuda_library)) {
    options.cudaLibrary = absl::GetFlag(FLAGS_cuda_library);
    if (options.cudaLibrary.empty())
      return failWith("--cuda-library needs a path");
  }
  if (const std::string v = absl::GetFlag(FLAGS_device); v == "cpu") {
    options.device = runtime::ExecutorOptions::Device::Cpu;
  } else if (v == "cuda" || v == "auto") {
    options.device = v == "cuda" ? runtime::ExecutorOptions::Device::Cuda
                                         : runtime::ExecutorOptions::Device::Auto;
    // Each sequence's caches stay on the GPU between its steps.
    options.keepCachesOnDevice = true;
  } else {
    return failWith("--device is cpu, cuda or auto, got '" + v + "'");
  }
  if (flags.given(FLAGS_cuda_graphs)) {
    const std::string v = absl::GetFlag(FLAGS_cuda_graphs);
    int64_t most = 0;
    if (v == "off") {
      options.cudaGraphs = false;
    } else if (v == "on") {
      options.cudaGraphs = true;
    } else if (absl::SimpleAtoi(v, &most) && most >= 2) {
      options.cudaGraphs = true;
      options.graphMaxLaunches = most;
      options.graphPartsPerRun = 0;
    } else if (absl::string_view parts = v;
               absl::ConsumePrefix(&parts, "step") &&
               (parts.empty() || (absl::ConsumePrefix(&parts, ":") &&
                                  absl::SimpleAtoi(parts, &most) && most >= 1 &&
                                  most <= 64))) {
      options.cudaGraphs = true;
      options.graphPartsPerRun = parts.empty() ? 1 : most;
    } else {
      return failWith("--cuda-graphs is on, off, a launch count >= 2, step or step:P "
                  "(P graphs a step, 1 to 64), got '" + v + "'");
    }
  }
  if (flags.given(FLAGS_cuda_pdl)) {
    const std::string v = absl::GetFlag(FLAGS_cuda_pdl);
    if (v != "on" && v != "off")
      return failWith("--cuda-pdl is on or off, got '" + v + "'");
    options.programmaticLaunch = v == "on";
  }
  return 0;
}

} // namespace csa::tools

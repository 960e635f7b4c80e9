//===- Loading.cpp - An executor's plan, kernels, weights and device --------===//
//
// Executor::Impl::load: the host kernels' library, the checkpoint's tensors
// against the plan, the entry points' steps (prepare, in Executor.cpp);
// loadGpu: the PTX and its launch rules, the device the GPU path runs on
// (CUDA or emulated, runtime/device) and the GPU runner over it; the
// weights' upload before the first run; the GPU's counters.
//
//===----------------------------------------------------------------------===//
#include "runtime/executor/Executor.h"
#include "runtime/executor/ExecutorImpl.h"
#include "runtime/support/Dumps.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/emulated/EmulatedDevice.h"

#include <algorithm>
#include <optional>
#include <set>

namespace csa::runtime {

absl::Status Executor::Impl::load() {
  const artifact::Plan &plan = artifact->plan();
  if (options.threads < 0 || options.threads > ExecutorOptions::kMaxThreads)
    return absl::InvalidArgumentError(
        absl::StrCat("threads must be 0 (every core) to ", ExecutorOptions::kMaxThreads,
                     ", got ", options.threads));
  hostThreads = std::make_unique<HostThreads>(options.threads);
  for (const std::string *dir : {&options.dumpDecisions, &options.dumpHidden})
    if (!dir->empty())
      if (absl::Status st = npy::startDumpIndex(*dir); !st.ok())
        return st;
  // Every layer a dump is limited to must be one the plan's steps name
  // (plans before the steps carried their layer name none: recompile).
  for (int64_t layer : options.dumpLayers) {
    bool named = false;
    for (const std::vector<artifact::KernelCall> *calls : {&plan.prefill, &plan.decode})
      for (const artifact::KernelCall &call : *calls) {
        auto at = call.attrs.find("layer");
        named = named || (at != call.attrs.end() && at->is_number_integer() &&
                          at->get<int64_t>() == layer);
      }
    if (!named)
      return absl::InvalidArgumentError(absl::StrCat(
          "the dumps are limited to layer ", layer, ", which no step of artifact ",
          artifact->directory(),
          "'s plan belongs to (an artifact compiled before the plan named its steps' layers "
          "names none: recompile it)"));
  }
  if (absl::Status st = artifact::checkWeights(*artifact, *checkpoint,
                                               options.allowUnusedWeights, &unusedWeights);
      !st.ok())
    return st;
  for (const artifact::WeightEntry &entry : artifact->weights().tensors) {
    auto view = checkpoint->tensor(entry.name);
    if (!view.ok())
      return view.status();
    weights.emplace(entry.name, *view);
  }
  if (auto embed = weights.find("embed.weight"); embed != weights.end())
    vocab = embed->second.shape[0];
  if (!options.engramTokenMap.empty()) {
    if (int64_t(options.engramTokenMap.size()) != vocab)
      return absl::InvalidArgumentError(absl::StrCat(
          "the Engram token map has ", options.engramTokenMap.size(),
          " entries; the model's vocabulary has ", vocab));
    engramMap = options.engramTokenMap;
  }
  for (auto &[name, view] : weights)
    bounds.add(view.data, view.bytes);
  {
    // Each kernel's signature, to check every call against.
    const std::string path = artifact->pathOf("kernels/host.json");
    std::ifstream in(path);
    if (!in)
      return absl::InvalidArgumentError(absl::StrCat(
          "artifact ", artifact->directory(),
          ": no kernels/host.json (the kernels' signatures); recompile"));
    json listing;
    try {
      listing = json::parse(in);
      for (const json &k : listing.at("kernels")) {
        std::vector<ArgSignature> sig;
        for (const json &a : k.at("arguments")) {
          ArgSignature arg;
          if (!parseSignature(a.get<std::string>(), arg))
            return absl::InvalidArgumentError(absl::StrCat(
                "artifact ", artifact->directory(), ": kernels/host.json: ",
                "unsupported argument type '", a.get<std::string>(), "'"));
          sig.push_back(arg);
        }
        signatures[k.at("symbol").get<std::string>()] = std::move(sig);
      }
    } catch (const json::exception &e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "artifact ", artifact->directory(), ": kernels/host.json: ", e.what()));
    }
  }
  for (const CacheBuffer &b : plan.caches)
    if (b.kind == CacheKind::GlobalCache &&
        (b.mainRowBytes < 1 || b.indexRowBytes < 1))
      return absl::InvalidArgumentError(absl::StrCat(
          "artifact ", artifact->directory(), ": plan.json: cache '", b.id,
          "': the CPU executor needs main_row_bytes and index_row_bytes (the "
          "layout of an entry)"));
  for (const artifact::TransientBuffer &t : plan.transients) {
    if (t.dtype.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          "artifact ", artifact->directory(), ": plan.json: transient '", t.id,
          "' has no dtype/shape; the CPU executor needs them (recompile)"));
    transients[t.id].elementBytes = t.elementBytes();
  }
  if (options.device != ExecutorOptions::Device::Cpu) {
    absl::Status st = loadGpu();
    if (!st.ok() && options.device == ExecutorOptions::Device::Auto &&
        absl::IsFailedPrecondition(st)) {
      // No driver, or no PTX in the artifact: the CPU runs the plan.
      runner.reset();
      device.reset();
      driver.reset();
      gpuKernels.clear();
      deviceNote = std::string(st.message());
      options.device = ExecutorOptions::Device::Cpu;
    } else if (!st.ok()) {
      return st;
    } else {
      options.device = ExecutorOptions::Device::Cuda;
    }
  }
  if (absl::Status st = prepare(plan.prefill, "prefill", prefillSteps); !st.ok())
    return st;
  return prepare(plan.decode, "decode", decodeSteps);
}


namespace {
/// How the GPU path batches its launches into CUDA graphs.
cuda::LaunchGraphOptions graphOptions(const ExecutorOptions &options) {
  cuda::LaunchGraphOptions graphs;
  graphs.maxLaunches = options.graphMaxLaunches;
  graphs.partsPerRun = options.graphPartsPerRun;
  graphs.programmatic = options.programmaticLaunch;
  graphs.checkHazards = options.checkGraphHazards;
  return graphs;
}
} // namespace

absl::Status Executor::Impl::loadGpu() {
  const std::string where = absl::StrCat("artifact ", artifact->directory(), ": ");
  // The PTX and its launch rules as the manifest hashed them (read once,
  // checked, then used), where the artifact has them.
  const bool hasGpuKernels = artifact->manifest().findFile("kernels/kernels.ptx") &&
                             artifact->manifest().findFile("kernels/kernels.json");
  std::string ptxText, jsonText;
  if (hasGpuKernels) {
    for (auto [file, text] : {std::pair<const char *, std::string *>{"kernels/kernels.ptx", &ptxText},
                              {"kernels/kernels.json", &jsonText}}) {
      auto bytes = artifact->readVerified(file);
      if (!bytes.ok())
        return bytes.status();
      *text = std::move(*bytes);
    }
  }
  std::optional<cuda::Module> module;
  if (options.emulateGpu) {
    const cuda::LaunchGraphOptions graphs = graphOptions(options);
    device = std::make_unique<device::EmulatedDevice>(options.cudaGraphs ? &graphs : nullptr,
                                                      options.traceGpu);
    runner = std::make_unique<GpuRunner>(*device, bounds, options);
    for (auto &[name, view] : weights)
      runner->markConstant(view.data);
    // The launch rules, where the artifact has them, so that the drivers
    // choose the forms a GPU would run (the grouped experts' form, say);
    // the kernels that run are the host's.
    if (!hasGpuKernels)
      return absl::OkStatus();
  } else {
    auto opened = cuda::Driver::open(
        0, options.cudaLibrary.empty() ? "libcuda.so.1" : options.cudaLibrary,
        size_t(options.deviceHeapMiB) << 20);
    if (!opened.ok())
      return opened.status();
    driver = std::move(*opened);
    if (!hasGpuKernels)
      return absl::FailedPreconditionError(absl::StrCat(
          where, "has no kernels/kernels.ptx (compile with csa-compile "
                 "--emit=artifact --with-ptx)"));
    auto loaded = driver->loadPtx(ptxText);
    if (!loaded.ok())
      return loaded.status();
    module = *loaded;
  }
  try {
    json meta = json::parse(jsonText);
    std::map<std::string, json> argumentsOf; ///< by kernel name
    for (const json &k : meta.at("kernels")) {
      GpuKernel g;
      const std::string name = k.at("name").get<std::string>();
      argumentsOf[name] = k.at("arguments");
      if (module) {
        auto fn = driver->function(*module, name);
        if (!fn.ok())
          return fn.status();
        g.fn = *fn;
      }
      auto launch = cuda::parseLaunchRule(k.at("launch"), name,
                                          k.at("arguments").size());
      if (!launch.ok())
        return absl::InvalidArgumentError(
            absl::StrCat(where, "kernels/kernels.json: ", launch.status().message()));
      g.launch = *launch;
      g.status = k.at("status_parameter").get<bool>();
      if (auto state = k.find("module_state"); state != k.end()) {
        if (!state->is_boolean())
          return absl::InvalidArgumentError(absl::StrCat(
              where, "kernels/kernels.json: kernel ", name, ": module_state must be true or false"));
        g.moduleState = state->get<bool>();
      }
      auto state = cuda::parseKernelState(k, name);
      if (!state.ok())
        return absl::InvalidArgumentError(
            absl::StrCat(where, "kernels/kernels.json: ", state.status().message()));
      g.state = std::move(*state);
      if (!k.at("params").is_array())
        return absl::InvalidArgumentError(absl::StrCat(
            where, "kernels/kernels.json: kernel ", name, ": params is not a list"));
      g.paramSlots = k.at("params").size();
      gpuKernels["_mlir_ciface_" + name] = g;
    }
    // Row-tiled forms: their kernel runs them from min_rows rows on, unless
    // options.rowTiles is off (to time both forms in one run).
    const bool noTiles = !options.rowTiles;
    for (const json &k : meta.at("kernels")) {
      if (!k.contains("replaces"))
        continue;
      const std::string name = k.at("name").get<std::string>();
      const std::string of = k.at("replaces").get<std::string>();
      const int64_t minRows = k.at("min_rows").get<int64_t>();
      auto it = gpuKernels.find("_mlir_ciface_" + of);
      if (it == gpuKernels.end() || minRows < 1 || k.at("arguments") != argumentsOf[of])
        return absl::InvalidArgumentError(absl::StrCat(
            where, "kernels/kernels.json: kernel '", name, "' replaces '", of,
            "', which is not a kernel with the same arguments (or min_rows < 1)"));
      if (!noTiles) {
        auto &forms = it->second.forms;
        forms.emplace_back(minRows, &gpuKernels.at("_mlir_ciface_" + name));
        std::sort(forms.begin(), forms.end(),
                  [](const auto &a, const auto &b) { return a.first < b.first; });
      }
    }
  } catch (const json::exception &e) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "kernels/kernels.json: ", e.what()));
  }
  if (options.emulateGpu)
    return absl::OkStatus();
  if (options.cudaGraphs) {
    if (absl::Status st = driver->batchLaunchesInGraphs(graphOptions(options)); !st.ok())
      return st;
  }
  auto cudaDevice = device::CudaDevice::create(*driver);
  if (!cudaDevice.ok())
    return cudaDevice.status();
  device = std::move(*cudaDevice);
  runner = std::make_unique<GpuRunner>(*device, bounds, options);
  for (auto &[name, view] : weights)
    runner->markConstant(view.data);
  return absl::OkStatus();
}

GpuActivity Executor::Impl::gpuActivity(const GpuActivity *since) const {
  GpuActivity a;
  if (!runner)
    return a;
  const cuda::LaunchGraphCounters g = runner->graphCounters();
  const GpuActivity zero;
  const GpuActivity &b = since ? *since : zero;
  a.launches = runner->launches - b.launches;
  a.uploads = runner->uploads - b.uploads;
  a.downloads = runner->downloads - b.downloads;
  a.deviceAllocations = runner->deviceAllocations - b.deviceAllocations;
  a.waitSeconds = runner->waitSeconds - b.waitSeconds;
  a.uploadSeconds = runner->uploadSeconds - b.uploadSeconds;
  a.launchSeconds = runner->launchSeconds - b.launchSeconds;
  a.graphLaunches = g.graphLaunches - b.graphLaunches;
  a.graphsBuilt = g.graphsBuilt - b.graphsBuilt;
  a.graphNodesUpdated = g.nodesUpdated - b.graphNodesUpdated;
  a.branchLaunches = g.branchLaunches - b.branchLaunches;
  return a;
}

absl::Status Executor::Impl::uploadWeights() {
  if (!runner || weightsResident)
    return absl::OkStatus();
  try {
    placeGroupedExperts();
    uint64_t total = 0, done = 0;
    if (options.onProgress)
      for (auto &[name, view] : weights)
        total += view.bytes;
    for (auto &[name, view] : weights) {
      runner->preload(view.data);
      if (options.onProgress)
        options.onProgress("weights", done += view.bytes, total);
    }
    runner->synchronize(); // the copies are asynchronous: time them whole
  } catch (const std::exception &e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("uploading the weights to the GPU: ", e.what()));
  }
  weightsResident = true;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Executor::uploadWeights() {
  if (!impl->runner || impl->weightsResident)
    return uint64_t(0);
  const uint64_t before = impl->runner->bytesToDevice;
  GpuRunner *previous = currentRunner;
  currentRunner = impl->runner.get();
  absl::Status st = impl->uploadWeights();
  currentRunner = previous;
  if (!st.ok())
    return st;
  return impl->runner->bytesToDevice - before;
}

} // namespace csa::runtime

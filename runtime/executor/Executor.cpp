//===- Executor.cpp - Prepares an artifact's steps and runs them ----------===//
//
// Executor::Impl::prepare (the plan's steps, their drivers, kernels and
// argument layouts) and the run of an entry point: values, the step loop,
// the caches and logits at the end; the public entry points (prefill,
// extend, decode). Loading the kernels, weights, PTX and device is in
// Loading.cpp, the decision and hidden-state dumps in Inspection.cpp,
// greedy steps in Greedy.cpp, batch steps in Batch.cpp. The steps'
// liveness and graph lanes are in StepPlan.cpp. The op drivers are in OpDrivers.cpp and MoeDrivers.cpp, how a kernel is called in
// KernelCall.h and GpuRunner.h (buffer mirrors and statuses over the device
// layer), the host kernels' library in KernelLibrary.cpp, new and synthetic
// sequences in Sequences.cpp, the profile in Profile.cpp; Executor.h is the
// interface.
//
//===----------------------------------------------------------------------===//
#include "runtime/executor/Executor.h"
#include "runtime/executor/ExecutorImpl.h"

#include "absl/strings/numbers.h"

#include <algorithm>
#include <optional>
#include <set>

namespace csa::runtime {

ExecutorOptions ExecutorOptions::fromEnvironment() {
  ExecutorOptions options;
  if (const char *e = std::getenv("CSA_CUDA_EMULATE"))
    options.emulateGpu = std::string(e) == "1";
  options.syncEachLaunch = std::getenv("CSA_CUDA_SYNC") != nullptr;
  options.traceGpu = std::getenv("CSA_CUDA_TRACE") != nullptr;
  options.checkGraphHazards = std::getenv("CSA_CUDA_CHECK_HAZARDS") != nullptr;
  options.rowTiles = std::getenv("CSA_CUDA_NO_TILES") == nullptr;
  if (const char *list = std::getenv("CSA_CUDA_HOST_KERNELS"))
    options.hostKernelPrefixes = absl::StrSplit(list, ',', absl::SkipEmpty());
  if (const char *library = std::getenv("CSA_CUDA_LIBRARY"))
    options.cudaLibrary = library;
  int64_t mib = 0;
  if (const char *heap = std::getenv("CSA_CUDA_MALLOC_HEAP_MB");
      heap && absl::SimpleAtoi(heap, &mib) && mib >= 1 && mib <= kMaxDeviceHeapMiB)
    options.deviceHeapMiB = mib;
  return options;
}

//===----------------------------------------------------------------------===//
// Executor
//===----------------------------------------------------------------------===//

absl::Status Executor::Impl::prepare(const std::vector<KernelCall> &calls,
                                     const char *entry,
                                     std::vector<Step> &steps) {
  static const std::map<std::string, absl::Status (Impl::*)(Step &)> drivers = {
      {"csa.embed", &Impl::embed},
      {"csa.hc_expand", &Impl::hcExpand},
      {"csa.hc_mix", &Impl::hcMix},
      {"csa.hc_collapse", &Impl::hcCollapse},
      {"csa.hc_update", &Impl::hcUpdate},
      {"csa.rms_norm", &Impl::rmsNorm},
      {"csa.linear", &Impl::linearOp},
      {"csa.rope", &Impl::rope},
      {"csa.quantize", &Impl::quantize},
      {"csa.cache_append", &Impl::cacheAppend},
      {"csa.compress", &Impl::compress},
      {"csa.index_score", &Impl::indexScore},
      {"csa.hsi_select", &Impl::hsiSelect},
      {"csa.topk", &Impl::topk},
      {"csa.sparse_attention", &Impl::sparseAttention},
      {"csa.moe", &Impl::moe},
      {"csa.engram", &Impl::engram},
      {"csa.lm_head", &Impl::lmHead},
      {"tensor.extract_slice", &Impl::sliceRows},
      {"csa.fusion", &Impl::fusion},
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    const KernelCall &call = calls[i];
    Step step;
    step.call = &call;
    step.where = absl::StrCat(entry, "[", i, "]");
    auto fail = [&](const std::string &what) {
      return absl::InvalidArgumentError(
          absl::StrCat("artifact ", artifact->directory(),
                       ": plan.json: entry_points.", step.where, ": ", what));
    };
    if (!call.attrs.contains("op") || !call.attrs["op"].is_string())
      return fail("attrs.op is missing (which op the step carries out)");
    step.op = call.attrs["op"].get<std::string>();
    auto driver = drivers.find(step.op);
    if (driver == drivers.end())
      return fail(absl::StrCat("the CPU executor has no driver for '", step.op, "'"));
    step.driver = [fn = driver->second](Impl &impl, Step &s) { return (impl.*fn)(s); };
    auto layout = artifact::argLayout(step.op, call.attrs);
    if (!layout.ok())
      return fail(std::string(layout.status().message()));
    if (absl::Status st = artifact::checkArgs(*layout, call.args); !st.ok())
      return fail(std::string(st.message()));
    step.layout = std::move(*layout);
    for (const KernelArg &a : call.args)
      if (a.kind == ArgKind::Input && a.name != "tokens")
        return fail(absl::StrCat("the CPU executor supplies no input '", a.name, "'"));
    // The compressor state: kv then score, [ratio x dim] fp32 each.
    if (step.op == "csa.compress" && step.layout.has("state")) {
      const CacheBuffer *b =
          artifact->plan().findCache(call.args[step.layout.at("state")].name);
      const int64_t ratio = call.attrs.value("ratio", 0),
                    dim = call.attrs.value("dim", 0);
      if (!b || b->kind != CacheKind::CompressorState ||
          b->fixedBytes != 2 * ratio * dim * 4)
        return fail(absl::StrCat("the compressor state must be a ",
                                 "compressor_state of 2 x ", ratio, " x ", dim,
                                 " x 4 bytes"));
    }
    if (!artifact::isBuiltinKernel(call.kernel)) {
      auto &lib = libraries[call.object];
      if (!lib) {
        auto opened = KernelLibrary::openVerified(*artifact, call.object);
        if (!opened.ok())
          return opened.status();
        lib = std::move(*opened);
      }
      if (!call.attrs.contains("kernels") || !call.attrs["kernels"].is_object())
        return fail("attrs.kernels is missing (the kernels of the step by role)");
      for (auto &[role, symbol] : call.attrs["kernels"].items()) {
        if (!symbol.is_string())
          return fail(absl::StrCat("attrs.kernels.", role, " is not a symbol name"));
        const std::string name = symbol.get<std::string>();
        void *fn = lib->symbol(name);
        if (!fn)
          return fail(absl::StrCat("kernel '", name, "' is not in ", call.object));
        auto sig = signatures.find(name);
        if (sig == signatures.end())
          return fail(absl::StrCat("kernel '", name,
                                   "' has no signature in kernels/host.json"));
        KernelRef ref{fn, &sig->second, name};
        if (runner && runner->emulated() && !hostOnly(name)) {
          // Its launch rule for the drivers' choices, where there is one.
          if (auto gk = gpuKernels.find(name); gk != gpuKernels.end())
            ref.gpu = &gk->second;
          ref.runner = runner.get();
        } else if (runner && !hostOnly(name)) {
          auto gk = gpuKernels.find(name);
          if (gk == gpuKernels.end())
            return fail(absl::StrCat("kernel '", name,
                                     "' is not in kernels/kernels.ptx"));
          ref.gpu = &gk->second;
          ref.runner = runner.get();
        }
        step.kernels[role] = ref;
      }
    }
    // Sequence state: a cache, a position (index expressions and scalars),
    // the token history (csa.engram: its hashes read the tokens before),
    // the positions of the rows (the selections: which entries each row
    // may see).
    step.perSequence =
        step.op == "csa.engram" || step.op == "csa.topk" || step.op == "csa.hsi_select";
    for (const KernelArg &a : call.args) {
      step.perSequence |= a.kind == ArgKind::Cache || a.kind == ArgKind::Scalar ||
                          a.kind == ArgKind::Index;
      Tensor *value = a.kind == ArgKind::Transient ? &transients[a.name]
                      : a.kind == ArgKind::Input   ? &tokens
                                                   : nullptr;
      if (value && std::find(step.values.begin(), step.values.end(), value) == step.values.end())
        step.values.push_back(value);
      if (a.kind == ArgKind::Index)
        for (const std::string &id : artifact::rowsReferences(a.expr))
          if (Tensor *t = &transients[id];
              std::find(step.values.begin(), step.values.end(), t) == step.values.end())
            step.values.push_back(t);
    }
    // RoPE's driver takes a batch's rows, each at its sequence's position.
    step.perSequence &= step.op != "csa.rope";
    steps.push_back(std::move(step));
  }
  if (absl::Status st = artifact::checkOverlaps(calls, entry); !st.ok())
    return absl::InvalidArgumentError(absl::StrCat("artifact ", artifact->directory(),
                                                   ": plan.json: entry_points.", st.message()));
  planMemoryAndLanes(calls, steps);
  // Executor::stepLayer: a step's own layer, else the one before it's;
  // weights of no layer are before the layers until a layer's step ran.
  int64_t layer = ProfileEntry::kBeforeLayers;
  bool afterFirstLayer = false;
  for (Step &step : steps) {
    if (std::optional<int64_t> named = namedLayer(*step.call, artifact->plan())) {
      if (*named >= 0) {
        layer = *named;
        afterFirstLayer = true;
      } else {
        layer = afterFirstLayer ? ProfileEntry::kAfterLayers : ProfileEntry::kBeforeLayers;
      }
    }
    step.layer = layer;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>>
Executor::Impl::run(std::vector<Step> &steps) {
  auto start = std::chrono::steady_clock::now();
  const std::vector<Sequence *> sequences = runSequences();
  for (Sequence *s : sequences)
    if (absl::Status st = checkHeld(*s); !st.ok())
      return st;
  ++calls;
  // Every run hands out the free buffers in the same order (by address), for
  // the values that have no buffer of their own yet (Tensor::lastBuffer).
  std::sort(pool.begin(), pool.end(),
            [](const Bytes &a, const Bytes &b) {
              return std::less<const uint8_t *>()(a.data(), b.data());
            });
  const GpuActivity activityBefore = gpuActivity();
  if (runner) {
    try {
      runner->beginGraphRun(&steps == &decodeSteps ? "decode" : "prefill");
    } catch (const std::exception &e) {
      return absl::InternalError(e.what());
    }
  }
  // Caches left on the device by the last run of a sequence stay there.
  for (Sequence *s : sequences)
    for (auto &[id, cache] : s->caches)
      bounds.add(cache.bytes.data(), cache.bytes.size());
  if (!engramMap.empty())
    bounds.add(engramMap.data(), engramMap.size() * sizeof(int64_t));
  // GPU: this sequence's caches (unless held on the device since its last
  // run) and the tokens are current on the host (a mirror at the same
  // address may hold another sequence's bytes); at the end the caches come
  // back, so a Sequence holds its own state, or they stay on the device
  // (keepCachesOnDevice) and the Sequence records it.
  GpuRunner *previousRunner = currentRunner;
  currentRunner = runner.get();
  for (Sequence *s : sequences)
    if (s->cachesHeldBy == 0)
      for (auto &[id, cache] : s->caches)
        hostRefilled(cache.bytes.data());
  hostRefilled(tokens.ptr());
  // Every weight goes to the device before the first run's steps (or at
  // Executor::uploadWeights), not when a step first uses it.
  if (absl::Status st = uploadWeights(); !st.ok()) {
    currentRunner = previousRunner;
    return st;
  }
  auto finish = [&](bool ok) -> absl::Status {
    absl::Status st;
    try {
      // The caches stay on the device for the sequence's next run, or come
      // back and their device copies go (a Sequence may be destroyed before
      // the next run; the next run uploads them again). After a failed step
      // they come back.
      for (Sequence *seq : sequences) {
        seq->cachesHeldAt.clear();
        seq->cachesHeldBy = 0;
        if (runner && ok && options.keepCachesOnDevice) {
          seq->cachesHeldBy = id;
          for (auto &[name, cache] : seq->caches)
            seq->cachesHeldAt[name] = cache.bytes.data();
        } else {
          for (auto &[id, cache] : seq->caches) {
            onHost(cache.bytes.data());
            if (runner)
              runner->forget(cache.bytes.data());
          }
        }
      }
      if (runner) {
        if (ok) // a decode step's are read every few dozen steps
          st = runner->takeStatuses(/*now=*/batch.empty() && numTokens != 1);
        else
          runner->dropStatuses();
      }
      if (ok && greedyOut)
        st.Update(pickGreedy(steps));
      else
        onHost(logits.ptr());
    } catch (const std::exception &e) {
      st = absl::InternalError(absl::StrCat("reading GPU results: ", e.what()));
    }
    currentRunner = previousRunner;
    return st;
  };
  // Prefill's steps each report (ExecutorOptions::onProgress).
  const bool reportSteps = options.onProgress && &steps == &prefillSteps;
  uint64_t stepsDone = 0;
  for (Step &step : steps) {
    absl::Status st;
    const auto stepStart = std::chrono::steady_clock::now();
    auto driverDone = stepStart;
    const uint64_t toDeviceBefore = runner ? runner->bytesToDevice : 0,
                   toHostBefore = runner ? runner->bytesToHost : 0;
    try {
      // (Lanes are set only where branches run: planMemoryAndLanes.)
      const bool branches = step.lane != 0;
      if (runner) {
        runner->setCurrentStep(&step.where, &step.op);
        runner->graphBoundary();
        for (int lane = 1; lane <= cuda::kMaxBranches; ++lane)
          if ((step.joinLanes >> (lane - 1)) & 1u)
            runner->markBranch(cuda::BranchMark::Join, lane);
      }
      // A batch step gathers the sequences' rows of its inputs into batch
      // values on the chain, before its own branch begins: later steps on
      // the chain read those values too (the first reader gathers), and
      // nothing joins a branch for them (found by --gpu-check-hazards).
      absl::StatusOr<bool> gathered =
          batch.empty() || step.perSequence ? absl::StatusOr<bool>(false) : gatherRows(step);
      if (runner && branches)
        runner->markBranch(cuda::BranchMark::Begin, step.lane);
      if (!gathered.ok())
        st = gathered.status();
      else if (batch.empty() || *gathered)
        st = step.driver(*this, step);
      else
        st = runPerSequence(step);
      if (branches)
        runner->markBranch(cuda::BranchMark::End, 0);
      driverDone = std::chrono::steady_clock::now();
      if (options.profile && runner)
        runner->synchronize();
    } catch (const std::bad_alloc &) {
      st = absl::ResourceExhaustedError("out of host memory");
    } catch (const std::exception &e) {
      st = absl::InvalidArgumentError(
          absl::StrCat("malformed step: ", e.what()));
    }
    if (!st.ok()) {
      (void)finish(false);
      for (Sequence *s : sequences)
        for (auto &[id, cache] : s->caches)
          bounds.remove(cache.bytes.data());
      return absl::Status(st.code(), absl::StrCat(step.where, " (", step.op,
                                                  "): ", st.message()));
    }
    if (options.profile) {
      // Summed per step (layerProfile) and per op and kernels (profile).
      ProfileEntry &p = step.profiled;
      if (p.step.empty()) {
        p.step = step.op;
        for (const auto &[role, kernel] : step.kernels) {
          absl::string_view name = kernel.name;
          absl::ConsumePrefix(&name, "_mlir_ciface_");
          absl::StrAppend(&p.step, p.step.size() == step.op.size() ? " " : "+", name);
        }
        p.op = step.op;
        p.entry = &steps == &decodeSteps ? "decode" : "prefill";
        p.layer = step.layer;
      }
      const double seconds = std::chrono::duration<double>(
                                 std::chrono::steady_clock::now() - stepStart)
                                 .count(),
                   hostSeconds =
                       std::chrono::duration<double>(driverDone - stepStart).count();
      const uint64_t toDevice = runner ? runner->bytesToDevice - toDeviceBefore : 0,
                     toHost = runner ? runner->bytesToHost - toHostBefore : 0;
      ProfileEntry &e = profileTotals[p.step];
      e.step = p.step;
      e.op = p.op;
      for (ProfileEntry *total : {&p, &e}) {
        ++total->calls;
        total->seconds += seconds;
        total->hostSeconds += hostSeconds;
        total->bytesToDevice += toDevice;
        total->bytesToHost += toHost;
      }
    }
    for (Tensor *t : step.release) {
      releaseValue(*t);
      for (size_t i = 0; i < batch.size(); ++i)
        if (auto own = sequenceValues[i].find(t); own != sequenceValues[i].end())
          releaseValue(own->second);
    }
    if (reportSteps)
      options.onProgress("prefill", ++stepsDone, steps.size());
  }
  timing.peakTransientBytes = peakBytes;
  absl::Status finished = finish(true);
  // The sequences' caches may be freed before the next run: only live memory
  // stays in the bounds.
  for (Sequence *s : sequences)
    for (auto &[id, cache] : s->caches)
      bounds.remove(cache.bytes.data());
  if (!finished.ok())
    return finished;
  timing.steps = int64_t(steps.size());
  timing.gpu = gpuActivity(&activityBefore);
  timing.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (logits.elementBytes != 4 || logits.data.size() < size_t(logits.numel()) * 4)
    return absl::InvalidArgumentError(
        "the plan's logits output is not an f32 value");
  if (greedyOut)
    return std::vector<float>(); // the tokens are the result (pickGreedy)
  std::vector<float> out(size_t(logits.numel()));
  std::memcpy(out.data(), logits.ptr(), out.size() * sizeof(float));
  return out;
}

//===----------------------------------------------------------------------===//
// Public interface
//===----------------------------------------------------------------------===//

Executor::Executor(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}
Executor::~Executor() = default;

absl::StatusOr<std::unique_ptr<Executor>>
Executor::create(const artifact::Artifact &artifact,
                 const checkpoint::Checkpoint &checkpoint,
                 const ExecutorOptions &options) {
  if (artifact.manifest().target != artifact::Target::HostX86_64)
    return absl::FailedPreconditionError(absl::StrCat(
        "artifact ", artifact.directory(), " was compiled for ",
        artifact::targetName(artifact.manifest().target),
        "; the CPU executor runs host-x86_64 artifacts"));
  if (options.graphMaxLaunches < 2)
    return absl::InvalidArgumentError(absl::StrCat(
        "ExecutorOptions::graphMaxLaunches must be >= 2 (a graph of one launch "
        "is a launch), got ",
        options.graphMaxLaunches));
  if (options.deviceHeapMiB < 1 || options.deviceHeapMiB > ExecutorOptions::kMaxDeviceHeapMiB)
    return absl::InvalidArgumentError(absl::StrCat("ExecutorOptions::deviceHeapMiB must be from 1 to ",
                                                   ExecutorOptions::kMaxDeviceHeapMiB, ", got ",
                                                   options.deviceHeapMiB));
  auto impl = std::make_unique<Impl>();
  impl->artifact = &artifact;
  impl->checkpoint = &checkpoint;
  impl->options = options;
  if (absl::Status st = impl->load(); !st.ok())
    return st;
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

absl::Status Executor::Impl::checkTokens(const char *what, const std::vector<int32_t> &tokens,
                                         int64_t position) const {
  if (tokens.empty())
    return absl::InvalidArgumentError(absl::StrCat(what, " needs at least one token"));
  for (int32_t t : tokens)
    if (t < 0 || t >= vocab)
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", t, " is outside the vocabulary of ", vocab));
  return artifact::checkContext(artifact->plan(), position + int64_t(tokens.size()));
}

absl::StatusOr<std::vector<float>> Executor::Impl::runTokens(Sequence &sequence,
                                                             const std::vector<int32_t> &tokens) {
  seq = &sequence;
  position = sequence.position;
  numTokens = int64_t(tokens.size());
  const size_t historyBefore = sequence.history.size();
  sequence.history.insert(sequence.history.end(), tokens.begin(), tokens.end());
  this->tokens.elementBytes = 4;
  this->tokens.resize({numTokens});
  this->tokens.base = sequence.position;
  std::memcpy(this->tokens.ptr(), tokens.data(), tokens.size() * 4);
  auto logits = run(prefillSteps);
  if (logits.ok())
    sequence.position += numTokens;
  else
    sequence.history.resize(historyBefore);
  return logits;
}

absl::StatusOr<std::vector<float>>
Executor::prefill(Sequence &sequence, const std::vector<int32_t> &tokens) {
  if (sequence.position != 0)
    return absl::FailedPreconditionError(
        "prefill runs once, at position 0; use extend or decode afterwards");
  if (absl::Status st = impl->checkTokens("prefill", tokens, 0); !st.ok())
    return st;
  BoundsScope scope(&impl->bounds);
  // A prefill starts from fresh caches, also after a failed one (the old
  // ones' device copies, if this executor holds them, go).
  if (sequence.cachesHeldBy == impl->id)
    impl->releaseHeld(sequence, /*download=*/false);
  const int64_t reserved = sequence.reservedPositions;
  sequence = newSequence();
  if (reserved > 0)
    (void)reserve(sequence, reserved); // a fresh sequence: held by no device
  return impl->runTokens(sequence, tokens);
}

absl::StatusOr<std::vector<float>>
Executor::extend(Sequence &sequence, const std::vector<int32_t> &tokens) {
  if (sequence.position == 0)
    return absl::FailedPreconditionError("extend needs a prefill first");
  if (absl::Status st = impl->checkTokens("extend", tokens, sequence.position); !st.ok())
    return st;
  BoundsScope scope(&impl->bounds);
  return impl->runTokens(sequence, tokens);
}

absl::StatusOr<std::vector<float>> Executor::decode(Sequence &sequence,
                                                    int32_t token) {
  if (sequence.position == 0)
    return absl::FailedPreconditionError("decode needs a prefill first");
  if (token < 0 || token >= impl->vocab)
    return absl::InvalidArgumentError(absl::StrCat(
        "token id ", token, " is outside the vocabulary of ", impl->vocab));
  if (absl::Status st =
          artifact::checkContext(impl->artifact->plan(), sequence.position + 1);
      !st.ok())
    return st;
  BoundsScope scope(&impl->bounds);
  impl->seq = &sequence;
  impl->position = sequence.position;
  impl->numTokens = 1;
  sequence.history.push_back(token);
  impl->tokens.elementBytes = 4;
  impl->tokens.resize({1});
  impl->tokens.base = sequence.position;
  impl->tokens.as<int32_t>()[0] = token;
  auto logits = impl->run(impl->decodeSteps);
  if (logits.ok())
    sequence.position += 1;
  else
    sequence.history.pop_back();
  return logits;
}

absl::Status Executor::syncToHost(Sequence &sequence) {
  if (absl::Status st = impl->checkHeld(sequence); !st.ok())
    return st;
  try {
    BoundsScope scope(&impl->bounds);
    impl->releaseHeld(sequence, /*download=*/true);
  } catch (const std::exception &e) {
    return absl::InternalError(absl::StrCat("reading the caches back from the GPU: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status Executor::checkDeviceStatuses() {
  if (!impl->runner)
    return absl::OkStatus();
  try {
    return impl->runner->takeStatuses(/*now=*/true);
  } catch (const std::exception &e) {
    return absl::InternalError(absl::StrCat("reading GPU results: ", e.what()));
  }
}

absl::Status Executor::profilerRange(bool start) {
  if (!impl->runner)
    return absl::FailedPreconditionError("a profiler range needs the GPU (--device=cuda)");
  try {
    impl->runner->profilerRange(start);
    return absl::OkStatus();
  } catch (const std::exception &e) {
    return absl::FailedPreconditionError(e.what());
  }
}

ExecutorOptions::Device Executor::device() const { return impl->options.device; }

const std::string &Executor::deviceNote() const { return impl->deviceNote; }

const std::vector<RecallEntry> &Executor::recall() const { return impl->recallEntries; }

int64_t Executor::threads() const {
  return impl->hostThreads ? impl->hostThreads->count() : 1;
}

const artifact::Plan &Executor::plan() const { return impl->artifact->plan(); }
int64_t Executor::vocabSize() const { return impl->vocab; }
const std::vector<std::string> &Executor::unusedWeights() const {
  return impl->unusedWeights;
}
const StepTiming &Executor::lastTiming() const { return impl->timing; }

} // namespace csa::runtime

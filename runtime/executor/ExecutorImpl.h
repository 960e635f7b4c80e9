//===- ExecutorImpl.h - The plan interpreter's state -------------*- C++ -*-===//
//
// Internal to the executor: Executor::Impl, the plan interpreter. Its
// state (loaded kernels, weights, values and their liveness, the GPU
// runner) and the argument accessors the op drivers use; Executor.cpp
// loads and runs plans, OpDrivers.cpp holds one driver per op kind.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_EXECUTOR_EXECUTORIMPL_H
#define CSA_RUNTIME_EXECUTOR_EXECUTORIMPL_H

#include "runtime/executor/Executor.h"
#include "runtime/executor/GpuRunner.h"
#include "runtime/executor/KernelInvoke.h"
#include "runtime/executor/HostThreads.h"

#include "absl/strings/str_cat.h"

#include <map>
#include <optional>

namespace csa::runtime {

// The executor's own files (this header's includers) use the internal
// helpers unqualified.
using namespace detail;

struct Executor::Impl {
  const artifact::Artifact *artifact = nullptr;
  const checkpoint::Checkpoint *checkpoint = nullptr;
  std::map<std::string, std::unique_ptr<KernelLibrary>> libraries;
  std::unordered_map<std::string, checkpoint::TensorView> weights;
  std::unordered_map<std::string, Tensor> transients;
  std::vector<int64_t> engramMap; ///< raw token id -> compressed id
  bool engramMapChecked = false;  ///< against the plan's compressed_vocab
  std::vector<std::string> unusedWeights; ///< options.allowUnusedWeights
  /// kernels/host.json: each kernel's argument types, by symbol.
  std::map<std::string, std::vector<ArgSignature>> signatures;
  Bounds bounds; ///< what kernels may be given (see Bounds)
  ExecutorOptions options; ///< device: Cpu or Cuda once loaded (Auto resolved)
  std::string deviceNote;  ///< Auto on the CPU: why
  std::unique_ptr<cuda::Driver> driver;  ///< Device::Cuda
  /// The device layer the runner works on: CUDA over `driver`, or emulated.
  std::unique_ptr<device::Device> device;
  std::unique_ptr<GpuRunner> runner;
  std::map<std::string, GpuKernel> gpuKernels; ///< by symbol (_mlir_ciface_)
  /// The CPU path's workers (options.threads; made by load()).
  std::unique_ptr<HostThreads> hostThreads;
  /// Whether independent host kernel calls of a step may run on several
  /// threads: the CPU path with more than one.
  bool splitsHostCalls() const {
    return !runner && hostThreads && hostThreads->count() > 1;
  }
  absl::Status loadGpu();
  /// Device::Cuda: kernels named by options.hostKernelPrefixes (name
  /// prefixes, without _mlir_ciface_) stay on the CPU: a knob to find which
  /// GPU kernels a divergence comes from.
  bool hostOnly(const std::string &symbol) const {
    const std::string name = symbol.substr(std::string("_mlir_ciface_").size());
    for (const std::string &prefix : options.hostKernelPrefixes)
      if (!prefix.empty() && name.rfind(prefix, 0) == 0)
        return true;
    return false;
  }
  /// GPU runs: before the host reads or changes a buffer's bytes (see
  /// GpuRunner), and after it refills one. No-ops on the CPU.
  void onHost(const void *p) {
    if (runner)
      runner->toHost(p);
  }
  void hostRefilled(const void *p) {
    if (runner)
      runner->hostWrote(p);
  }
  /// GPU runs: the host has filled the buffer holding `p`; its bytes go to
  /// the device now instead of before the first kernel given it (an upload
  /// ends the run of launches recorded before it).
  void uploadNow(const void *p) {
    if (runner)
      runner->preload(p);
  }
  int64_t vocab = 0;
  StepTiming timing;
  /// The executor's prefill and decode calls so far, less one (the index of
  /// the current one: Decisions.h's run).
  int64_t calls = -1;

  struct Step;
  using Driver = std::function<absl::Status(Impl &, Step &)>;
  struct Step {
    const KernelCall *call = nullptr;
    std::string op;
    artifact::ArgLayout layout; ///< where each slot of `op` is in call->args
    std::map<std::string, KernelRef> kernels; ///< role -> kernel
    Driver driver;
    std::string where; ///< "prefill[12]" for messages
    /// Executor::stepLayer.
    int64_t layer = ProfileEntry::kBeforeLayers;
    /// options.profile: this step's time over the runs so far (its `step`
    /// set at its first profiled run).
    ProfileEntry profiled;
    /// Transients whose last use is this step: their memory goes back to
    /// the pool afterwards (the memory plan: liveness within the entry). A
    /// step that overlaps later ones (overlaps_until) keeps its operands
    /// until its join.
    std::vector<Tensor *> release;
    /// Transients used for the last time here that no other branch still
    /// holds: one may give its buffer to the step's result (resultCopyOf).
    std::vector<Tensor *> mayGiveBuffer;
    /// The graph branch the step runs on (overlaps_until; 0: the chain) and
    /// the branches it joins before it starts (bit L - 1 for lane L).
    int lane = 0;
    uint8_t joinLanes = 0;
    /// A graph lane no branch of the plan holds during the step (0: none):
    /// the step's own launches may branch there (csa.moe's shared expert).
    int spareLane = 0;
    /// The graph lanes no branch of the plan holds during the step (bit
    /// L - 1 for lane L; 0 where branches do not run): a batch step's
    /// per-sequence step puts its sequences there (sequenceLanes).
    uint8_t freeLanes = 0;
    /// The step reads a sequence's state (a cache, its position, its token
    /// history): in a batch step (decodeBatch) it runs once a sequence on
    /// that sequence's row; every other step runs once on all the rows.
    bool perSequence = false;
    /// The values the step names (transient arguments, the input tokens,
    /// transients an index expression counts the rows of), once each.
    std::vector<Tensor *> values;
    /// The slots the driver asked for so far, resolved (a decode step's
    /// drivers ask the same ones every step: a lookup by name in the layout
    /// and the transients each time was a fifth of the host's work).
    struct Resolved {
      std::string slot;
      int64_t instance;
      size_t index;             ///< in call->args
      Tensor *value = nullptr;  ///< tensor(): its transient, once asked
      int64_t rowBytes = -1;    ///< rowBytesOf(), once asked
    };
    std::vector<Resolved> resolved;
  };
  std::vector<Bytes> pool; ///< free transient buffers
  /// Every value's Tensor::lastBuffer (counted once per value).
  std::multiset<const uint8_t *> claimedBuffers;
  uint64_t liveBytes = 0, peakBytes = 0;
  std::vector<Step> prefillSteps, decodeSteps;
  /// A discrete decision of step `s` held in `t` (numpy dtype `descr`):
  /// replaced by the forced one and/or written out, as the options say.
  absl::Status decision(Step &s, const char *what, Tensor &t, const char *descr);
  /// Writes rows of `t` (its first dimension) as the dump `what` of step `s`
  /// to `dir`, as ExecutorOptions::dumpLayers and dumpRows allow.
  absl::Status dump(Step &s, const std::string &dir, const char *what, const char *descr,
                    const std::vector<int64_t> &dims, const void *data, size_t elementBytes);
  std::map<std::string, ProfileEntry> profileTotals; ///< options.profile
  bool weightsResident = false; ///< GPU: every weight uploaded
  /// GPU: every weight to the device (once), the grouped experts' placed
  /// together; waits for the copies.
  absl::Status uploadWeights();
  /// Sequence::cachesHeldBy of the sequences whose caches this executor
  /// keeps on its device (never reused by another executor).
  const uint64_t id = nextExecutorId();
  static uint64_t nextExecutorId() {
    static std::atomic<uint64_t> next{1};
    return next++;
  }
  /// Whether `s`'s caches may run here: held on no device, or on this one
  /// at the addresses they have now.
  absl::Status checkHeld(const Sequence &s) const {
    if (s.cachesHeldBy == 0)
      return absl::OkStatus();
    if (s.cachesHeldBy != id || !runner)
      return absl::FailedPreconditionError(
          "the sequence's caches are on the GPU of another executor (or of one "
          "that no longer exists): its host bytes are stale; call syncToHost "
          "on that executor first");
    for (const auto &[name, cache] : s.caches) {
      auto it = s.cachesHeldAt.find(name);
      if (it == s.cachesHeldAt.end() || it->second != cache.bytes.data())
        return absl::FailedPreconditionError(absl::StrCat(
            "cache '", name, "' is not the buffer whose bytes are on the GPU: a "
            "copy of a Sequence made while its caches were on the device holds "
            "stale bytes; copy after syncToHost"));
    }
    return absl::OkStatus();
  }
  /// The device copies of `s`'s caches come back (`download`) or are
  /// dropped, and `s` is held on no device.
  void releaseHeld(Sequence &s, bool download) {
    if (s.cachesHeldBy == id && runner) {
      GpuRunner *previous = currentRunner;
      currentRunner = runner.get();
      for (auto &[name, cache] : s.caches) {
        bounds.add(cache.bytes.data(), cache.bytes.size());
        if (download)
          runner->toHost(cache.bytes.data());
        runner->forget(cache.bytes.data());
        bounds.remove(cache.bytes.data());
      }
      currentRunner = previous;
    }
    s.cachesHeldBy = 0;
    s.cachesHeldAt.clear();
  }

  // The state of the entry point being run.
  Sequence *seq = nullptr;
  int64_t position = 0, numTokens = 0;
  /// A batch step (Executor::decodeBatch, more than one sequence): the
  /// sequences, row i of every value being sequence i's; empty otherwise.
  /// `seq` and `position` are then those of the sequence a per-sequence
  /// step is running for.
  std::vector<Sequence *> batch;
  /// A batch step's values that per-sequence steps made, by sequence: a
  /// sequence's own (their shapes may differ from one sequence to the next,
  /// the index scores' widths), until a step that runs on all the rows reads
  /// them (gatherRows) or their last use. Kept between steps, so that each
  /// value finds its buffer of the last step again (Tensor::lastBuffer).
  std::vector<std::unordered_map<Tensor *, Tensor>> sequenceValues;
  /// While a per-sequence step runs a sequence on a graph lane of its own
  /// (runPerSequence): ".lane<L>", which every scratch name takes, so that
  /// sequences side by side on the GPU never share a scratch buffer.
  std::string scratchLane;
  /// Executor::decodeGreedy's run: each row's greedy token goes here, picked
  /// on the device where the head has its kernel (only the ids come back).
  std::vector<int32_t> *greedyOut = nullptr;
  /// The rows' greedy tokens into *greedyOut: on the GPU by the head's
  /// `greedy` kernel when `steps` has it (reading back the ids, and a
  /// row's logits only where the host must name a bad logit), else from the
  /// host's logits.
  absl::Status pickGreedy(std::vector<Step> &steps);
  /// The sequences a run holds: the batch, or `seq`.
  std::vector<Sequence *> runSequences() const {
    return batch.empty() ? std::vector<Sequence *>{seq} : batch;
  }
  /// Runs a per-sequence step once a sequence of the batch (Batch.cpp).
  absl::Status runPerSequence(Step &s);
  /// Before a step on all the rows of a batch: each value it names that
  /// per-sequence steps made becomes one value of a row a sequence. False
  /// (nothing done) where those values are not one row each: the step then
  /// runs once a sequence as well.
  absl::StatusOr<bool> gatherRows(Step &s);
  /// Every value of `steps` (and every sequence's own value) that a failed
  /// run left holding a shape goes back to the pool.
  void releaseStaleValues(std::vector<Step> &steps) {
    for (Step &step : steps)
      for (Tensor *t : step.values)
        if (t != &tokens && !t->dims.empty())
          releaseValue(*t);
    for (auto &own : sequenceValues)
      for (auto &[value, t] : own)
        if (!t.dims.empty())
          releaseValue(t);
  }
  /// A value's memory back to the pool (its last use).
  void releaseValue(Tensor &t) {
    liveBytes -= std::min<uint64_t>(liveBytes, t.data.capacity());
    if (t.data.capacity()) // (not a buffer a result took, resultCopyOf)
      pool.push_back(std::move(t.data));
    t.data = {};
    t.dims.clear();
  }
  Tensor tokens, logits;
  /// A chunk's store into a ring that holds rows overwrites rows its own
  /// attention still reads: appendView keeps the ring as it was, per ring,
  /// with the run (`calls`) that kept it.
  struct KeptRing {
    int64_t run = -1;
    Tensor *rows = nullptr;
  };
  std::map<std::string, KeptRing, std::less<>> keptRings;

  absl::Status load();
  /// A multi-token call's tokens (`what`: "prefill" or "extend"): at least
  /// one, each in the vocabulary, all inside the plan's context from
  /// `position`.
  absl::Status checkTokens(const char *what, const std::vector<int32_t> &tokens,
                           int64_t position) const;
  /// Runs the prefill's steps on `tokens` after the sequence's rows; the
  /// position and history advance only when it succeeds.
  absl::StatusOr<std::vector<float>> runTokens(Sequence &sequence,
                                               const std::vector<int32_t> &tokens);
  /// The GPU path's counts so far, or since `since` (GpuActivity; zeros on
  /// the CPU).
  GpuActivity gpuActivity(const GpuActivity *since = nullptr) const;
  /// Each step's release list and mayGiveBuffer (liveness, a branch holding its
  /// transients until its join), and the graph lanes of the plan's branches
  /// (lane, joinLanes, spareLane). StepPlan.cpp.
  void planMemoryAndLanes(const std::vector<KernelCall> &calls, std::vector<Step> &steps);
  absl::Status prepare(const std::vector<KernelCall> &calls, const char *entry,
                       std::vector<Step> &steps);
  absl::StatusOr<std::vector<float>> run(std::vector<Step> &steps);

  // --- argument access ----------------------------------------------------
  // By slot name (and repeat, for csa.moe's experts) in the step's layout,
  // which prepare() checked against the step's arguments.
  Step::Resolved &resolve(Step &s, std::string_view slot, int64_t instance) {
    for (Step::Resolved &r : s.resolved)
      if (r.instance == instance && r.slot == slot)
        return r;
    const size_t index = s.layout.at(slot, instance);
    (void)s.call->args.at(index);
    s.resolved.push_back({std::string(slot), instance, index});
    return s.resolved.back();
  }
  const KernelArg &arg(Step &s, std::string_view slot, int64_t instance = -1) {
    return s.call->args[resolve(s, slot, instance).index];
  }
  Tensor &tensor(Step &s, std::string_view slot) {
    Step::Resolved &r = resolve(s, slot, -1);
    if (r.value)
      return *r.value;
    const KernelArg &a = s.call->args[r.index];
    // (An unordered_map's elements stay where they are.)
    r.value = a.kind == ArgKind::Input    ? &tokens
              : a.kind == ArgKind::Output ? &logits
                                          : &transients[a.name];
    return *r.value;
  }
  /// row_bytes of the i8 [rows, row_bytes] transient in `slot`, or -1.
  int64_t rowBytesOf(Step &s, std::string_view slot) {
    Step::Resolved &r = resolve(s, slot, -1);
    if (r.rowBytes < 0) {
      const artifact::TransientBuffer *t =
          artifact->plan().findTransient(s.call->args[r.index].name);
      if (t && t->shape.size() == 2 && t->shape.back() >= 1)
        r.rowBytes = t->shape.back();
    }
    return r.rowBytes;
  }
  const checkpoint::TensorView &weight(Step &s, std::string_view slot,
                                       int64_t instance = -1) {
    return weights.at(arg(s, slot, instance).name);
  }
  CacheState &cache(Step &s, std::string_view slot, int64_t instance = -1) {
    return seq->caches[arg(s, slot, instance).name];
  }
  const CacheBuffer &cacheBuffer(Step &s, std::string_view slot, int64_t instance = -1) {
    return *artifact->plan().findCache(arg(s, slot, instance).name);
  }
  /// An integer argument: positions, row counts and offsets, all >= 0.
  absl::StatusOr<int64_t> index(Step &s, std::string_view slot) {
    auto v = indexValue(s, slot);
    if (v.ok() && *v < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "args[", s.layout.at(slot), "] (", std::string(slot),
          ") evaluates to ", *v, " (positions and row counts are >= 0)"));
    return v;
  }
  absl::StatusOr<int64_t> indexValue(Step &s, std::string_view slot) {
    const KernelArg &a = arg(s, slot);
    if (a.kind == ArgKind::Constant)
      return a.value;
    if (a.kind == ArgKind::Scalar) {
      if (a.name == "position")
        return position;
      if (a.name == "num_tokens")
        return numTokens;
      return int64_t(1); // batch_size: one sequence per call
    }
    return evaluate(a.expr);
  }
  absl::StatusOr<int64_t> evaluate(const json &e) {
    if (e.is_number_integer())
      return e.get<int64_t>();
    if (e.is_string())
      return e == "position" ? position : numTokens;
    std::string op = e[0].get<std::string>();
    if (op == "rows")
      return transients[e[1].get<std::string>()].rows();
    auto lhs = evaluate(e[1]);
    if (!lhs.ok())
      return lhs;
    auto rhs = evaluate(e[2]);
    if (!rhs.ok())
      return rhs;
    int64_t a = *lhs, b = *rhs, r = 0;
    bool overflow = false;
    if (op == "add")
      overflow = __builtin_add_overflow(a, b, &r);
    else if (op == "sub")
      overflow = __builtin_sub_overflow(a, b, &r);
    else if (op == "mul")
      overflow = __builtin_mul_overflow(a, b, &r);
    else if (op == "min")
      r = std::min(a, b);
    else if (op == "max")
      r = std::max(a, b);
    else if (a < 0 || b <= 0)
      return absl::InvalidArgumentError(
          "index expression: div needs a >= 0 dividend and a >= 1 divisor");
    else
      r = a / b;
    if (overflow)
      return absl::InvalidArgumentError("index expression overflows int64");
    return r;
  }
  /// `t`'s buffer becomes the one it claims (Tensor::lastBuffer), so that the
  /// pool hands it back to `t` in the next run.
  void claimBuffer(Tensor &t) {
    if (t.lastBuffer == t.data.data())
      return;
    if (auto c = claimedBuffers.find(t.lastBuffer); c != claimedBuffers.end())
      claimedBuffers.erase(c);
    t.lastBuffer = t.data.data();
    claimedBuffers.insert(t.lastBuffer);
  }
  /// A result of `elementBytes`-sized elements with base `base`.
  Tensor &result(Step &s, std::string_view slot, int64_t elementBytes,
                 std::vector<int64_t> dims, int64_t base) {
    return allocate(tensor(s, slot), elementBytes, std::move(dims), base);
  }
  /// result() for the value `t`.
  Tensor &allocate(Tensor &t, int64_t elementBytes, std::vector<int64_t> dims, int64_t base) {
    const uint64_t before = t.data.capacity();
    if (before == 0 && !pool.empty()) {
      // The buffer this value had in the last run when it is free (it is,
      // from the second step of a decode on); else a free one no value had
      // last (a value of every 4th step would otherwise move another one
      // each time it comes); else the last free one.
      auto it = std::find_if(pool.begin(), pool.end(), [&](const Bytes &b) {
        return b.data() == t.lastBuffer;
      });
      for (auto i = pool.end(); it == pool.end() && i != pool.begin();) {
        --i;
        if (!claimedBuffers.count(i->data()))
          it = i;
      }
      if (it == pool.end())
        it = pool.end() - 1;
      t.data = std::move(*it);
      pool.erase(it);
    }
    t.elementBytes = elementBytes;
    t.resize(std::move(dims));
    claimBuffer(t);
    hostRefilled(t.ptr());
    t.base = base;
    liveBytes += t.data.capacity() - std::min<uint64_t>(before, t.data.capacity());
    peakBytes = std::max(peakBytes, liveBytes);
    return t;
  }
  /// Result `slot` of `dims`, starting as a copy of `src`'s bytes from byte
  /// `from` (RoPE and the Engram gate work in place; a slice is a copy).
  /// An error when `src` holds fewer bytes than the result needs.
  absl::StatusOr<Tensor *> resultCopyOf(Step &s, std::string_view slot,
                                        Tensor &src,
                                        size_t from, int64_t elementBytes,
                                        std::vector<int64_t> dims,
                                        int64_t base) {
    size_t bytes = size_t(elementBytes);
    for (int64_t d : dims)
      bytes *= size_t(d);
    if (from + bytes > src.byteSize())
      return absl::InvalidArgumentError(
          "a value holds fewer bytes than its shape says (another dtype?)");
    Tensor &dst = tensor(s, slot);
    // An operand whose last use is this step gives the result its buffer
    // (RoPE and the Engram gate work in place): no copy, on the device no
    // copy launch. Only a whole buffer of the same size moves, so that its
    // bounds and its device copy stay what they are.
    if (&dst != &src && !src.view && from == 0 && bytes == src.data.size() &&
        dst.data.capacity() == 0 &&
        std::find(s.mayGiveBuffer.begin(), s.mayGiveBuffer.end(), &src) !=
            s.mayGiveBuffer.end()) {
      dst.data = std::move(src.data);
      src.data = {};
      dst.elementBytes = elementBytes;
      dst.resize(std::move(dims));
      dst.base = base;
      claimBuffer(dst);
      return &dst;
    }
    const uint8_t *srcBytes = src.as<uint8_t>() + from;
    if (&dst != &src && runner) {
      result(s, slot, elementBytes, dims, base);
      if (runner->copyOnDevice(dst.ptr(), srcBytes, bytes))
        return &dst;
    }
    onHost(srcBytes);
    if (&dst == &src) { // one transient for operand and result
      std::vector<uint8_t> bytesOf(srcBytes, srcBytes + bytes);
      result(s, slot, elementBytes, std::move(dims), base);
      std::memcpy(dst.ptr(), bytesOf.data(), bytes);
      return &dst;
    }
    result(s, slot, elementBytes, std::move(dims), base);
    std::memcpy(dst.ptr(), srcBytes, bytes);
    return &dst;
  }
  /// Per query row at positions base.., the compressed entries it may see:
  /// the groups complete at its position, (position + 1) / ratio.
  /// One buffer per ratio, refilled (and on the GPU path uploaded) only
  /// when its values change: in decode once every `ratio` steps, not in
  /// every index layer of every step (an upload ends a run of launches).
  Tensor &visibleEntries(int64_t base, int64_t n, int64_t ratio) {
    Tensor &visible = transients[absl::StrCat("$scratch.visible.", ratio, scratchLane)];
    bool same = visible.elementBytes == 8 && visible.dims == std::vector<int64_t>{n};
    for (int64_t i = 0; same && i < n; ++i)
      same = visible.as<int64_t>()[i] == (base + i + 1) / ratio;
    if (same)
      return visible;
    visible.elementBytes = 8;
    visible.resize({n});
    for (int64_t i = 0; i < n; ++i)
      visible.as<int64_t>()[i] = (base + i + 1) / ratio;
    hostRefilled(visible.ptr());
    return visible;
  }
  /// Scratch buffers of a step (kept between calls to reuse their memory).
  Tensor &scratch(const std::string &name, int64_t elementBytes,
                  std::vector<int64_t> dims) {
    Tensor &t = transients["$scratch." + name + scratchLane];
    t.elementBytes = elementBytes;
    t.resize(std::move(dims));
    hostRefilled(t.ptr());
    return t;
  }
  /// Scratch that keeps the bytes `fill` wrote while its shape stays (a
  /// constant operand, such as the shared expert's unit routing weights):
  /// filled, and on the GPU path uploaded, only when the shape changes, not
  /// every step (an upload ends a step's run of graph launches).
  Tensor &constantScratch(const std::string &name, int64_t elementBytes,
                          std::vector<int64_t> dims, const std::function<void(Tensor &)> &fill) {
    Tensor &t = transients["$scratch." + name + scratchLane];
    if (t.elementBytes == elementBytes && t.dims == dims && !t.data.empty())
      return t;
    t.elementBytes = elementBytes;
    t.resize(std::move(dims));
    fill(t);
    hostRefilled(t.ptr());
    return t;
  }
  /// Scratch whose every element that is read was first written by a kernel
  /// of the step (so its bytes are not uploaded on the GPU path). Only for
  /// buffers the host never writes and never reads without onHost.
  Tensor &kernelScratch(const std::string &name, int64_t elementBytes,
                        std::vector<int64_t> dims) {
    Tensor &t = scratch(name, elementBytes, std::move(dims));
    if (runner)
      runner->deviceWillWrite(t.ptr());
    return t;
  }
  /// Scratch of zeros that kernels accumulate into: zeroed on the device
  /// on the GPU path (no upload), on the host otherwise.
  Tensor &kernelZeros(const std::string &name, int64_t elementBytes,
                      std::vector<int64_t> dims) {
    Tensor &t = scratch(name, elementBytes, std::move(dims));
    if (runner)
      runner->zeroOnDevice(t.ptr());
    else
      std::fill(t.data.begin(), t.data.end(), 0);
    return t;
  }
  /// result() for a value the step's kernels write whole: no upload.
  Tensor &kernelResult(Step &s, std::string_view slot, int64_t elementBytes,
                       std::vector<int64_t> dims, int64_t base) {
    Tensor &t = result(s, slot, elementBytes, std::move(dims), base);
    if (runner)
      runner->deviceWillWrite(t.ptr());
    return t;
  }
  /// The `rowBytes`-byte parts at `offset` of entries [0, count) of a global
  /// cache, made contiguous (the dequantize kernels take dense rows).
  /// With `which`, row r is entry which[r] (count = which->size()).
  Tensor &gatherParts(const std::string &name, const CacheState &c,
                      const CacheBuffer &b, int64_t offset, int64_t rowBytes,
                      int64_t count, const std::vector<int32_t> *which = nullptr) {
    Tensor &t = scratch(name, 1, {count, rowBytes});
    // On the GPU path the cache stays on the device (a decode step at 128K
    // context would otherwise download and re-upload it whole).
    if (count == 0 ||
        (runner && runner->gatherOnDevice(t.ptr(), c.bytes.data(), size_t(b.entryBytes),
                                          size_t(offset), size_t(rowBytes), count, which)))
      return t;
    onHost(c.bytes.data());
    for (int64_t r = 0; r < count; ++r) {
      const int64_t e = which ? (*which)[size_t(r)] : r;
      std::memcpy(t.as<uint8_t>() + r * rowBytes,
                  c.bytes.data() + e * b.entryBytes + offset, size_t(rowBytes));
    }
    return t;
  }
  /// A size or count from the step's attrs: every one the drivers read is
  /// >= 1 (widths, heads, ratio, window, k, ...).
  int64_t attr(Step &s, const char *name) {
    const int64_t v = s.call->attrs.at(name).get<int64_t>();
    if (v < 1)
      throw std::invalid_argument(std::string("attrs.") + name +
                                  " must be >= 1, got " + std::to_string(v));
    return v;
  }
  const KernelRef &kernel(Step &s, const char *role) {
    auto it = s.kernels.find(role);
    if (it == s.kernels.end())
      throw std::invalid_argument(std::string("attrs.kernels has no '") + role +
                                  "' kernel");
    return it->second;
  }
  template <typename... A> void invoke(Step &s, const char *role, A... args) {
    invokeAs<void>(kernel(s, role), args...);
  }

  /// A linear's kernel and weight (and scale, where its format has one),
  /// resolved: what linear() needs besides its rows, so that calls of it can
  /// run on other threads (resolving changes the step's caches).
  struct LinearWeights {
    const KernelRef *kernel = nullptr;
    Desc<2> weight{}, scale{};
    bool scaled = false;
  };
  /// The linear kernel `role` with the weight of slot `<layer>weight` and,
  /// when the step has one, the scale of slot `<layer>scale`.
  LinearWeights linearWeights(Step &s, const char *role, std::string_view layer,
                              int64_t instance) {
    const std::string slot(layer);
    LinearWeights lw;
    lw.kernel = &kernel(s, role);
    const checkpoint::TensorView &w = weight(s, slot + "weight", instance);
    lw.weight = desc<2>(w.data, {w.shape.size() > 0 ? w.shape[0] : 1,
                                 w.shape.size() > 1 ? w.shape[1] : 1});
    if (s.layout.has(slot + "scale", instance)) {
      const checkpoint::TensorView &sc = weight(s, slot + "scale", instance);
      lw.scale = desc<2>(sc.data, {sc.shape[0], sc.shape.size() > 1 ? sc.shape[1] : 1});
      lw.scaled = true;
    }
    return lw;
  }
  /// Calls a linear kernel on `rows` rows: x [rows, in] -> y [rows, out].
  /// On the CPU with several threads the rows are split among them: every
  /// output's sum runs over its own row, so the bits are the same.
  void linear(const LinearWeights &lw, const void *x, int64_t rows, int64_t in,
              void *y, int64_t out) {
    const KernelRef &k = *lw.kernel;
    auto rowsOf = [&](int64_t begin, int64_t end) {
      const int64_t xBytes = k.signature->front().elementBytes,
                    yBytes = k.signature->back().elementBytes;
      auto dx = desc<2>(static_cast<const char *>(x) + begin * in * xBytes,
                        {end - begin, in});
      auto dy = desc<2>(static_cast<char *>(y) + begin * out * yBytes,
                        {end - begin, out});
      Desc<2> dw = lw.weight, ds = lw.scale;
      if (lw.scaled)
        invokeAs<void>(k, &dx, &dw, &ds, &dy);
      else
        invokeAs<void>(k, &dx, &dw, &dy);
    };
    if (!splitsHostCalls()) {
      rowsOf(0, rows);
      return;
    }
    // In the row tiles the kernels run (#csa.row_tile is at most this).
    constexpr int64_t kRowGranule = 8;
    Bounds *caller = currentBounds;
    hostThreads->forRowRanges(rows, kRowGranule, [&](int64_t begin, int64_t end) {
      BoundsScope scope(caller); // the worker checks against the caller's
      rowsOf(begin, end);
    });
  }
  void linear(Step &s, const char *role, const void *x, int64_t rows,
              int64_t in, std::string_view layer, int64_t instance, void *y,
              int64_t out) {
    linear(linearWeights(s, role, layer, instance), x, rows, in, y, out);
  }

  // --- drivers --------------------------------------------------------------
  absl::Status embed(Step &s);
  absl::Status hcExpand(Step &s);
  absl::Status hcMix(Step &s);
  absl::Status hcCollapse(Step &s);
  absl::Status hcUpdate(Step &s);
  absl::Status rmsNorm(Step &s);
  absl::Status linearOp(Step &s);
  absl::Status rope(Step &s);
  absl::Status quantize(Step &s);
  absl::Status cacheAppend(Step &s);
  absl::Status fusion(Step &s);
  absl::Status hcCollapseNorm(Step &s);
  /// How a kernel region's step runs: its fused kernel's block form (the
  /// GPU, where the back end gave it one: launch rule row_tiles), its parts
  /// (the GPU otherwise, when the plan names every one of `parts`: the fused
  /// kernel would be one thread), or the fused host kernel (the CPU).
  enum class RegionRun { FusedKernel, BlockForm, Parts };
  RegionRun regionRun(Step &s, std::initializer_list<const char *> parts);
  /// The view of a cache a store of `n` rows from `start` writes (the ring;
  /// or one part of a global cache, grown to hold the entries).
  absl::StatusOr<Desc<2>> appendView(Step &s, std::string_view cacheSlot,
                                     int64_t start, int64_t n,
                                     int64_t rowBytes);
  absl::Status compress(Step &s);
  absl::Status indexScore(Step &s);
  absl::Status hsiSelect(Step &s);
  absl::Status topk(Step &s);
  absl::Status sparseAttention(Step &s);
  /// options.analyzeRecall: the RecallEntry of a sparse attention step
  /// (Recall.cpp), from its queries `q` and the top-k sets `selected` of
  /// its rows.
  absl::Status analyzeRecall(Step &s, Tensor &q, Tensor &selected);
  std::vector<RecallEntry> recallEntries;
  absl::Status moe(Step &s);
  /// Decode MoE (at most kGroupedMoeMaxRows rows) in one launch a
  /// projection for the routed experts, from the routing on the device:
  /// the per-expert launches' bits (each slot's products in the same
  /// split-K order; the outputs combined in ascending expert id) without
  /// reading the routing back. From 5 rows on, the per-expert lists read
  /// each routed expert's weights once for all its rows instead, unless
  /// the grouped linears have their tensor-core form ("expert_tiles": a
  /// block per expert gathers its slots on the device): then every row count
  /// runs grouped, the split-K form below its min_rows slots
  /// (kGroupedMmaMinSlots) and that form from them on.
  static constexpr int64_t kGroupedMoeMaxRows = 4;
  /// The shared expert's routing weights: 1 for each of `rows` rows.
  Tensor &unitWeights(int64_t rows) {
    return constantScratch("moe.ones", 4, {rows}, [](Tensor &t) {
      std::fill(t.as<float>(), t.as<float>() + t.numel(), 1.f);
    });
  }
  bool groupedMoe(Step &s, int64_t rows);
  /// The shared expert on every row of x (routing weight 1): its output.
  Tensor &sharedExpert(Step &s, Tensor &x);
  /// The grouped routed experts and the combine; `shared` is the shared
  /// expert's output, computed on graph lane `sharedLane` (0: the chain),
  /// which the combine joins.
  absl::Status moeGrouped(Step &s, Tensor &x, Tensor &ids, Tensor &wts, Tensor &shared,
                          int sharedLane);
  /// GPU: every MoE step's routed-expert weights placed one after another
  /// on the device (GpuRunner::placeTogether), before the weights' upload.
  void placeGroupedExperts();
  /// Places each group of `arrays` (weight slots) as one device array:
  /// for each of `instances` in turn, its slots in the group's order. False,
  /// stopping there, where a slot is missing or placeTogether cannot.
  bool placeArrays(Step &s, const std::vector<std::vector<const char *>> &arrays,
                   const std::vector<int64_t> &instances);
  /// The first expert's w1 weight of each MoE whose experts are placed.
  std::set<const void *> expertsPlaced;
  /// The w1 weights (a MoE's expert 0's, a shared expert's) whose w1 and w3
  /// lie as one array of [w1; w3] rows an expert (the plan has
  /// experts_gate_up / shared_gate_up): gate and up run as that one linear.
  std::set<const void *> gateUpPlaced;
  absl::Status engram(Step &s);
  absl::Status lmHead(Step &s);
  absl::Status sliceRows(Step &s);
};

/// The layer a plan step names: that of its first weight of a layer
/// ("layers.N. ...") or cache (the plan's `layer`); ProfileEntry::
/// kBeforeLayers when it reads only weights of no layer ("embed.weight",
/// "head.weight"); nothing when it names neither (Profile.cpp).
std::optional<int64_t> namedLayer(const KernelCall &call, const artifact::Plan &plan);

} // namespace csa::runtime

#endif // CSA_RUNTIME_EXECUTOR_EXECUTORIMPL_H

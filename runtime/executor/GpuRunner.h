//===- GpuRunner.h - The device side of a run ------------------*- C++ -*-===//
//
// Internal to the executor: the device side of a run. GpuRunner keeps a
// device mirror of every buffer a kernel touches (which side holds the
// current bytes), uploads and downloads only what changed, launches the
// PTX kernels (or, emulated, the host kernels on separate host memory),
// collects the kernels' statuses; the memory, copies, dispatches and graphs
// are the device layer's (runtime/device). KernelInvoke.h's invokeAs calls a
// kernel on whichever side the run is on.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_EXECUTOR_GPURUNNER_H
#define CSA_RUNTIME_EXECUTOR_GPURUNNER_H

#include "runtime/device/Device.h"
#include "runtime/executor/KernelCall.h"

#include <chrono>
#include <optional>

namespace csa::runtime::detail {

/// The GPU path (ExecutorOptions::Device::Cuda). Every buffer the plan hands
/// to a kernel (weights, caches, transients) gets a device mirror, and the
/// runner tracks which side holds its current bytes: a launch uploads only
/// the buffers the host changed since (weights once), and leaves every
/// buffer it was given current on the device; the host side downloads a
/// buffer only when the executor reads or changes it there (toHost: a top-k
/// set, a row count, the logits, a cache that grows) and marks buffers it
/// refills (hostWrote). Launches and copies are asynchronous and ordered on
/// the driver's stream (launches may wait in a CUDA graph being recorded,
/// LaunchGraphs.h); a download waits for them. CSA_CUDA_SYNC=1 synchronizes
/// after every launch, so a fault names its kernel.
///
/// On the emulated device (CSA_CUDA_EMULATE=1) the "device" is separate host
/// memory and a launch calls the host kernel on the mirrors: the same
/// bookkeeping, checkable on a machine without a GPU (a missed download
/// leaves the host with stale bytes and changes the output); the device
/// records the launches for its graph bookkeeping (counted, not replayed),
/// split where the driver's would be.
class GpuRunner {
public:
  /// `device` outlives the runner.
  GpuRunner(device::Device &device, const Bounds &bounds, const ExecutorOptions &options)
      : device(device), bounds(bounds), syncEach(options.syncEachLaunch),
        trace(options.traceGpu),
        footprints(options.checkGraphHazards && options.cudaGraphs && device.runsHostKernels()) {}
  ~GpuRunner() {
    for (auto &[start, m] : mirrors)
      releaseDevice(m.device);
    for (cuda::DevicePtr block : statusBlocks)
      releaseDevice(block);
    for (auto &[key, buffers] : stateOfLane)
      for (cuda::DevicePtr buffer : buffers)
        releaseDevice(buffer);
    holdReleasedBlocks(false);
    releaseFreeBlocks();
  }
  /// Whether the kernels are the host's, run here on the device's memory.
  bool emulated() const { return device.runsHostKernels(); }
  /// Waits for every launch so far (profiling).
  /// Reads back the statuses of the launches since the last read (one
  /// download per kStatusSlots) and fails naming the first nonzero one.
  /// Unless `now`, only once kStatusBlocksUnread blocks are pending: a
  /// decode step then downloads nothing but its logits, and a failed store
  /// (a runtime bug) is reported a few dozen steps late, naming its step.
  absl::Status takeStatuses(bool now);
  /// Drops the statuses of a run that failed.
  void dropStatuses() {
    pendingStatuses.clear();
    zeroedSlots = 0;
  }
  /// Zeroes now the status slots of the next `count` launches that return
  /// one: launches about to go on graph lanes side by side must not find
  /// their block zeroed by another lane's fill after they wrote to it.
  void zeroStatusSlotsAhead(size_t count) {
    for (size_t end = pendingStatuses.size() + count; zeroedSlots < end;)
      zeroStatusBlock(zeroedSlots / kStatusSlots);
  }
  /// The step being run, named in a status's message.
  /// (`where` and `op` outlive the statuses: the executor's plan steps.)
  void setCurrentStep(const std::string *where, const std::string *op) {
    currentWhere = where;
    currentOp = op;
  }
  void synchronize() {
    const WaitTimer t(waitSeconds);
    check(device.synchronize());
  }
  /// The profilers' capture range starts or stops here, once every launch
  /// issued so far has finished (a range then holds whole steps).
  void profilerRange(bool start) {
    synchronize();
    check(device.profilerRange(start));
  }
  /// Emulation: the mirror of the buffer holding `p` (uploaded if the host
  /// changed it), at p's offset; the call about to run may write it.
  const void *emulatedArg(const void *p, bool empty) {
    uintptr_t start = 0, end = 0;
    if (!bounds.range(p, start, end)) {
      if (empty)
        return p; // nothing is read or written through it
      throw std::out_of_range("a kernel argument is in no known buffer");
    }
    Mirror &m = mirror(start, end);
    if (m.current == Current::Host) {
      upload(m.device, reinterpret_cast<const void *>(start), end - start);
      m.current = Current::Both;
    }
    if (!constants.count(start))
      pendingWrites.push_back(&m);
    return reinterpret_cast<const void *>(m.device + (uintptr_t(p) - start));
  }
  /// Emulation with graphs: the launch of host kernel `fn` (named `name`)
  /// with `params` (its arguments' mirror descriptors and scalars), recorded
  /// for the graph bookkeeping.
  void recordEmulated(void *fn, const std::string &name, std::vector<uint64_t> params,
                      std::shared_ptr<const cuda::LaunchFootprint> footprint = nullptr) {
    cuda::KernelLaunch k;
    k.fn = fn;
    k.params = std::move(params);
    k.footprint = std::move(footprint);
    device.nameKernel(fn, name);
    check(device.dispatch(k));
  }
  /// The start of a run of `entry` (Device::beginGraphRun).
  void beginGraphRun(const std::string &entry) { check(device.beginGraphRun(entry)); }
  /// The start of a plan step (Device::graphBoundary).
  void graphBoundary() { check(device.graphBoundary()); }
  /// A step's launches begin or end branch `lane` of the graph, or the
  /// next joins it (Device::markBranch).
  void markBranch(cuda::BranchMark m, int lane) {
    if (m == cuda::BranchMark::Begin)
      branchLane = lane;
    else if (m == cuda::BranchMark::End)
      branchLane = 0;
    device.markBranch(m, lane);
  }
  /// The graph lane the next launch goes on (0: the chain).
  int currentLane() const { return branchLane; }
  /// Kernel `g`'s state buffers (GpuKernel::state) for its launches on
  /// graph lane `lane`, allocated and zeroed on their first use: launches
  /// on one lane run one after another, so a lane's set is never used by
  /// two at once.
  const std::vector<cuda::DevicePtr> &stateBuffers(const GpuKernel &g, int lane) {
    std::vector<cuda::DevicePtr> &buffers = stateOfLane[{&g, lane}];
    if (buffers.empty())
      for (const cuda::KernelStateBuffer &b : g.state) {
        buffers.push_back(allocateDevice(b.bytes()));
        check(device.fill(buffers.back(), 0, b.bytes()));
      }
    return buffers;
  }
  /// The device's graph counts.
  cuda::LaunchGraphCounters graphCounters() const { return device.graphCounters(); }
  /// Emulation: the call ran; what it was given is current on the "device".
  void emulatedCallDone() {
    for (Mirror *m : pendingWrites)
      m->current = Current::Device;
    pendingWrites.clear();
  }
  /// Emulated launches carry what they read and wrote, for the graphs'
  /// hazard check (ExecutorOptions::checkGraphHazards).
  bool recordsFootprints() const { return footprints; }
  /// While on, a released device block is not handed out again until it
  /// goes off: a batch step's sequences run on graph lanes side by side, and
  /// a block one lane let go (a growing cache's old one, which that lane
  /// still copies from) would otherwise become another lane's new one, and
  /// be written while it is read (found by ExecutorOptions::checkGraphHazards).
  /// Off once the lanes have joined.
  void holdReleasedBlocks(bool hold) {
    holdingBlocks = hold;
    if (hold)
      return;
    for (auto [bytes, ptr] : heldBlocks)
      freeBlocks.emplace(bytes, ptr);
    heldBlocks.clear();
  }
  void markConstant(const void *p) { constants.insert(uintptr_t(p)); }
  /// Whether the buffer holding `p` is a constant (a weight: never written).
  bool isConstant(const void *p) const {
    uintptr_t start = 0, end = 0;
    return bounds.range(p, start, end) && constants.count(start);
  }
  /// Uploads the buffer holding `p` now (a weight, before the first run
  /// needs it: a decode step that routes to an expert for the first time
  /// would otherwise copy its weights inside the step).
  void preload(const void *p) {
    uintptr_t start = 0, end = 0;
    if (!p || !bounds.range(p, start, end))
      return;
    Mirror &m = mirror(start, end);
    if (m.current == Current::Host) {
      upload(m.device, reinterpret_cast<const void *>(start), end - start);
      m.current = Current::Both;
    }
  }
  /// Gives the registered buffers starting at `parts` (of equal sizes)
  /// device mirrors that lie one after another in one device block, in
  /// order, so that a kernel can read them as one array (the routed
  /// experts' weights of a grouped MoE launch); their bytes are uploaded
  /// when first needed, as any mirror's. True when they lie so (now or
  /// already); false, changing nothing, when they cannot: sizes differ, a
  /// buffer is not registered from its start, or one has a mirror already.
  bool placeTogether(const std::vector<const void *> &parts) {
    if (parts.empty())
      return false;
    std::vector<uintptr_t> starts;
    size_t bytes = 0;
    for (const void *p : parts) {
      uintptr_t start = 0, end = 0;
      if (!p || !bounds.range(p, start, end) || uintptr_t(p) != start ||
          (bytes && end - start != bytes))
        return false;
      bytes = end - start;
      starts.push_back(start);
    }
    bool placed = true, anyMirror = false;
    for (size_t i = 0; i < starts.size(); ++i) {
      auto it = mirrors.find(starts[i]);
      anyMirror |= it != mirrors.end();
      placed &= it != mirrors.end() &&
                it->second.device == mirrors[starts[0]].device + i * bytes;
    }
    if (placed || anyMirror)
      return placed;
    size_t capacity = 0;
    const cuda::DevicePtr block = allocateDevice(bytes * starts.size(), &capacity);
    for (size_t i = 0; i < starts.size(); ++i) {
      Mirror &m = mirrors[starts[i]];
      // Only the first owns the block (releaseDevice ignores the others:
      // they are no block's start).
      m.device = block + i * bytes;
      m.bytes = bytes;
      m.capacity = i == 0 ? capacity : bytes;
      m.current = Current::Host;
    }
    return true;
  }
  int32_t launch(const KernelRef &k, std::vector<GpuArg> &args);
  /// Before the host reads or writes the buffer holding `p`: its device
  /// bytes come back if they are newer; the host's are current afterwards.
  void toHost(const void *p) {
    uintptr_t start = 0, end = 0;
    if (!p || !bounds.range(p, start, end))
      return;
    auto it = mirrors.find(start);
    if (it == mirrors.end() || it->second.bytes != end - start)
      return;
    Mirror &m = it->second;
    if (m.current == Current::Device)
      download(reinterpret_cast<void *>(start), m.device, m.bytes);
    m.current = Current::Host;
  }
  /// The next kernel given the buffer holding `p` writes all of it before
  /// anything reads it (a fresh result or scratch): nothing is uploaded, and
  /// the host's bytes are stale until a toHost. Emulated, the mirror is
  /// filled with 0xFF bytes (NaN, -1) first, so an element a kernel leaves
  /// unwritten changes the output instead of passing on stale bytes.
  void deviceWillWrite(const void *p) {
    uintptr_t start = 0, end = 0;
    if (!p || !bounds.range(p, start, end))
      return;
    Mirror &m = mirror(start, end);
    m.current = Current::Device;
    if (emulated()) // (the host addresses the emulated device's memory)
      std::memset(reinterpret_cast<void *>(uintptr_t(m.device)), 0xFF, m.bytes);
  }
  /// The buffer holding `p` becomes zeros on the device (an accumulator a
  /// kernel adds to), without copying the host's bytes.
  void zeroOnDevice(const void *p) {
    uintptr_t start = 0, end = 0;
    if (!p || !bounds.range(p, start, end))
      return;
    Mirror &m = mirror(start, end);
    check(device.fill(m.device, 0, m.bytes));
    m.current = Current::Device;
  }
  /// Copies `bytes` from `src` to the whole buffer starting at `dst` on the
  /// device, when src's buffer is current there (a RoPE or slice of a value
  /// a kernel produced); false when the host should copy instead.
  bool copyOnDevice(void *dst, const void *src, size_t bytes) {
    uintptr_t ds = 0, de = 0;
    return bounds.range(dst, ds, de) && bytes == de - ds && copyRowOnDevice(dst, 0, src, bytes);
  }
  /// Copies `bytes` from `src` to bytes [offset, offset + bytes) of the
  /// buffer starting at `dst` on the device, when src's buffer is current
  /// there; false (nothing done) when the host should copy instead. The
  /// caller writes every byte of dst's buffer so (the whole buffer at once,
  /// or the rows of a batch value, Batch.cpp): its host bytes are not
  /// uploaded first.
  bool copyRowOnDevice(void *dst, size_t offset, const void *src, size_t bytes) {
    uintptr_t ss = 0, se = 0, ds = 0, de = 0;
    if (!bounds.range(src, ss, se) || !bounds.range(dst, ds, de) || ss == ds ||
        uintptr_t(dst) != ds || offset + bytes > de - ds || uintptr_t(src) + bytes > se)
      return false;
    auto it = mirrors.find(ss);
    if (it == mirrors.end() || it->second.bytes != se - ss ||
        it->second.current == Current::Host)
      return false;
    Mirror &d = mirror(ds, de); // (std::map: `it` stays valid)
    const cuda::DevicePtr from = it->second.device + (uintptr_t(src) - ss);
    check(device.copyOnDevice(d.device + offset, from, bytes));
    d.current = Current::Device;
    return true;
  }
  /// Parts of a cache's entries gathered into the whole buffer at `dst`, on
  /// the device: part [offset, offset + rowBytes) of entry which[r] (or r)
  /// of the cache at `cache` (entries `entryBytes` apart) to row r, a 2D copy
  /// per run of consecutive entries. False (nothing done) when the cache's
  /// bytes are not current on the device: the host gathers.
  bool gatherOnDevice(void *dst, const void *cache, size_t entryBytes, size_t offset,
                      size_t rowBytes, int64_t count, const std::vector<int32_t> *which) {
    uintptr_t ss = 0, se = 0, ds = 0, de = 0;
    if (count < 1 || !bounds.range(cache, ss, se) || !bounds.range(dst, ds, de) ||
        uintptr_t(cache) != ss || uintptr_t(dst) != ds ||
        de - ds < size_t(count) * rowBytes)
      return false;
    auto it = mirrors.find(ss);
    if (it == mirrors.end() || it->second.bytes != se - ss ||
        it->second.current == Current::Host)
      return false;
    const cuda::DevicePtr from = it->second.device;
    Mirror &d = mirror(ds, de); // (std::map: `it` stays valid)
    for (int64_t r = 0; r < count;) {
      const int64_t first = which ? (*which)[size_t(r)] : r;
      int64_t run = 1;
      while (r + run < count && (which ? (*which)[size_t(r + run)] : r + run) == first + run)
        ++run;
      const cuda::DevicePtr src = from + size_t(first) * entryBytes + offset;
      const cuda::DevicePtr out = d.device + size_t(r) * rowBytes;
      if (size_t(first + run) * entryBytes > it->second.bytes)
        throw std::out_of_range("a cache gather reads past the cache");
      check(device.copyRowsOnDevice(out, rowBytes, src, entryBytes, rowBytes, size_t(run)));
      r += run;
    }
    d.current = Current::Device;
    return true;
  }
  /// The host rewrote (or reallocated) the buffer holding `p`.
  void hostWrote(const void *p) {
    uintptr_t start = 0, end = 0;
    if (!p || !bounds.range(p, start, end))
      return;
    auto it = mirrors.find(start);
    if (it != mirrors.end())
      it->second.current = Current::Host;
  }
  /// A device copy taken out of its mirror (detachDeviceCurrent).
  struct Detached {
    cuda::DevicePtr device = 0;
    size_t bytes = 0;
  };
  /// The host buffer at `from` is about to be replaced by a larger one (a
  /// cache that grows): when the device holds its current bytes, its mirror
  /// is taken out and returned for adoptOnDevice; otherwise nothing (bytes
  /// 0), and the host's bytes are the ones to keep.
  Detached detachDeviceCurrent(const void *from) {
    auto it = mirrors.find(uintptr_t(from));
    if (it == mirrors.end() || it->second.current != Current::Device)
      return {};
    Detached d{it->second.device, it->second.bytes};
    mirrors.erase(it);
    return d;
  }
  /// The buffer [to, to + toBytes) that replaced a detached one holds its
  /// bytes first and zeros after, on the device only (its host bytes are
  /// stale until a toHost): a growing cache is not downloaded and uploaded.
  void adoptOnDevice(void *to, size_t toBytes, Detached d) {
    const uintptr_t start = uintptr_t(to);
    if (auto it = mirrors.find(start); it != mirrors.end()) {
      releaseDevice(it->second.device);
      mirrors.erase(it);
    }
    const size_t keep = std::min(d.bytes, toBytes);
    Mirror &m = mirrors[start];
    m.device = allocateDevice(toBytes, &m.capacity);
    m.bytes = toBytes;
    if (keep)
      check(device.copyOnDevice(m.device, d.device, keep));
    if (toBytes > keep)
      check(device.fill(m.device + keep, 0, toBytes - keep));
    releaseDevice(d.device);
    m.current = Current::Device;
  }
  /// The host buffer starting at `p` goes away (a cache about to grow).
  void forget(const void *p) {
    auto it = mirrors.find(uintptr_t(p));
    if (it == mirrors.end())
      return;
    releaseDevice(it->second.device);
    mirrors.erase(it);
  }

private:
  enum class Current { Host, Device, Both };
  struct Mirror {
    cuda::DevicePtr device = 0;
    size_t bytes = 0;    ///< the host buffer's
    size_t capacity = 0; ///< the device block's
    Current current = Current::Host;
  };
  static void check(absl::Status st) {
    if (!st.ok())
      throw std::runtime_error(std::string(st.message()));
  }
  // Device memory, the device layer's. Blocks are
  // rounded up to a multiple of the smallest power of two (at least 512 B)
  // that is at least 1/8 of the request (at most 1/4 added), and a released
  // block is kept for the next request of its size: the pooled transients of
  // one step come back at the next with the same sizes, and cuMemFree would
  // wait for the GPU in the middle of a step. The kept blocks (a growing
  // cache leaves its smaller ones) go back to the driver when an allocation
  // fails, and when the runner goes.
  static size_t blockBytes(size_t bytes) {
    size_t step = 512;
    while (step * 8 < bytes)
      step *= 2;
    return (std::max<size_t>(bytes, 1) + step - 1) / step * step;
  }
  cuda::DevicePtr allocateDevice(size_t bytes, size_t *granted = nullptr) {
    const size_t block = blockBytes(bytes);
    if (granted)
      *granted = block;
    if (auto it = freeBlocks.find(block); it != freeBlocks.end()) {
      const cuda::DevicePtr ptr = it->second;
      freeBlocks.erase(it);
      freeSet.erase(ptr);
      return ptr;
    }
    ++deviceAllocations;
    if (trace)
      std::fprintf(stderr, "csa-cuda: allocate %zu bytes (%s)\n", block,
                   placing ? placing->c_str() : "outside a kernel");
    auto allocated = device.allocate(block);
    if (!allocated.ok() && !freeBlocks.empty()) {
      releaseFreeBlocks(); // what is kept for reuse, before giving up
      allocated = device.allocate(block);
    }
    if (!allocated.ok())
      throw std::runtime_error(std::string(allocated.status().message()));
    const cuda::DevicePtr ptr = *allocated;
    sizeOfBlock[ptr] = block;
    return ptr;
  }
  void releaseDevice(cuda::DevicePtr ptr) {
    auto it = sizeOfBlock.find(ptr);
    // (A block released twice would be handed to two owners.)
    if (it != sizeOfBlock.end() && freeSet.insert(ptr).second) {
      if (holdingBlocks)
        heldBlocks.emplace_back(it->second, ptr);
      else
        freeBlocks.emplace(it->second, ptr);
    }
  }
  void releaseFreeBlocks() {
    // Launches already issued may still read them (cuMemFree would wait
    // too, but says nothing about graphs recorded and not issued).
    if (!freeBlocks.empty())
      (void)device.synchronize();
    for (auto &[bytes, ptr] : freeBlocks) {
      freeSet.erase(ptr);
      sizeOfBlock.erase(ptr);
      (void)device.release(ptr);
    }
    freeBlocks.clear();
  }
public:
  /// Bytes copied each way so far (the profile's transfers).
  uint64_t bytesToDevice = 0, bytesToHost = 0;
  /// Counts so far: kernel launches, copies each way, device allocations.
  int64_t launches = 0, uploads = 0, downloads = 0, deviceAllocations = 0;
  /// Seconds the host spent blocked on the GPU (downloads, synchronize) and
  /// in copies to it: a step whose wall time is mostly not waiting is
  /// bound by the host's work of recording launches, not by the GPU.
  double waitSeconds = 0, uploadSeconds = 0;
  /// Seconds in the driver's launch calls (recording, graph updates and
  /// graph launches), a part of the host's work.
  double launchSeconds = 0;
  /// The kernel whose arguments are being placed (CSA_CUDA_TRACE=1 names it
  /// with each copy; null: a preload or a download the host asked for).
  const std::string *placing = nullptr;

private:
  /// Adds the time of its scope to `into`.
  struct WaitTimer {
    explicit WaitTimer(double &into) : into(into), start(std::chrono::steady_clock::now()) {}
    ~WaitTimer() {
      into += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    double &into;
    std::chrono::steady_clock::time_point start;
  };
  void traceCopy(const char *direction, size_t bytes) {
    if (trace)
      std::fprintf(stderr, "csa-cuda: %s %zu bytes (%s)\n", direction, bytes,
                   placing ? placing->c_str() : "outside a kernel");
  }
  void upload(cuda::DevicePtr dst, const void *src, size_t bytes) {
    traceCopy("upload", bytes);
    bytesToDevice += bytes;
    ++uploads;
    const WaitTimer t(uploadSeconds);
    check(device.copyToDevice(dst, src, bytes));
  }
  void download(void *dst, cuda::DevicePtr src, size_t bytes) {
    traceCopy("download", bytes);
    bytesToHost += bytes;
    ++downloads;
    const WaitTimer t(waitSeconds);
    check(device.copyToHost(dst, src, bytes));
  }
  Mirror &mirror(uintptr_t start, uintptr_t end) {
    Mirror &m = mirrors[start];
    if (m.bytes != end - start) {
      // A new buffer, or one resized in place: the host's bytes are current.
      // A block that holds the new size is kept (a pooled transient at
      // another shape).
      if (!m.device || end - start > m.capacity) {
        if (m.device)
          releaseDevice(m.device);
        m.device = 0;
        m.device = allocateDevice(end - start, &m.capacity);
      }
      m.bytes = end - start;
      m.current = Current::Host;
    }
    return m;
  }
  device::Device &device;
  const Bounds &bounds;
  const bool syncEach;
  const bool trace; ///< CSA_CUDA_TRACE: every copy on stderr
  const bool footprints; ///< see recordsFootprints()
  std::map<uintptr_t, Mirror> mirrors;
  absl::flat_hash_set<uintptr_t> constants;
  /// Kernels' returned values (a store's count of rows not written): one
  /// int32 slot per launch in blocks of kStatusSlots, zeroed (a fill inside
  /// the run) when a block is first used after a read, and read back by
  /// takeStatuses: when a prefill ends, once kStatusBlocksUnread blocks are
  /// pending, or when asked; never after every such launch (each download
  /// would end the run of launches a CUDA graph holds).
  static constexpr size_t kStatusSlots = 256;
  static constexpr size_t kStatusBlocksUnread = 8;
  struct PendingStatus {
    std::string kernel;
    const std::string *where, *op; ///< the plan step's (null: none)
  };
  std::vector<cuda::DevicePtr> statusBlocks;
  std::vector<PendingStatus> pendingStatuses;
  /// Slots [0, zeroedSlots) are zeroed since the last read.
  size_t zeroedSlots = 0;
  /// Zeroes block `b` of the status slots (allocating it where it is new).
  void zeroStatusBlock(size_t b) {
    if (b == statusBlocks.size()) {
      // kStatusBlocksUnread blocks in one allocation (the runs before a
      // read fill them; the first block owns it, releaseDevice ignores the
      // rest).
      const cuda::DevicePtr blocks = allocateDevice(kStatusSlots * 4 * kStatusBlocksUnread);
      for (size_t i = 0; i < kStatusBlocksUnread; ++i)
        statusBlocks.push_back(blocks + i * kStatusSlots * 4);
    }
    check(device.fill(statusBlocks[b], 0, kStatusSlots * 4));
    zeroedSlots = (b + 1) * kStatusSlots;
  }
  /// The step being run (Executor::Impl::run), for a status's message.
  const std::string *currentWhere = nullptr, *currentOp = nullptr;
  std::map<cuda::DevicePtr, size_t> sizeOfBlock; ///< every block allocated
  std::multimap<size_t, cuda::DevicePtr> freeBlocks; ///< released, by size
  std::set<cuda::DevicePtr> freeSet;                 ///< the same blocks, and the held
  bool holdingBlocks = false;
  std::vector<std::pair<size_t, cuda::DevicePtr>> heldBlocks; ///< (bytes, block)
  std::vector<Mirror *> pendingWrites; ///< emulation: the running call's
  std::vector<Mirror *> writtenByLaunch; ///< launch(): the buffers it may write
  int branchLane = 0; ///< markBranch: the lane launches go on now
  /// stateBuffers: a kernel's state buffers on a lane.
  std::map<std::pair<const GpuKernel *, int>, std::vector<cuda::DevicePtr>> stateOfLane;
};

inline int32_t GpuRunner::launch(const KernelRef &k, std::vector<GpuArg> &args) {
  const GpuKernel *chosen = k.gpu;
  // Another form by the rows (each form's rows argument: the expert ids'
  // slots for the grouped ones).
  for (const auto &[minRows, form] : k.gpu->forms) {
    const int64_t r = form->launch.rowsArgument;
    if (r >= 0 && size_t(r) < args.size() && args[size_t(r)].kind == GpuArg::Memref &&
        !args[size_t(r)].sizes.empty() && args[size_t(r)].sizes[0] >= minRows)
      chosen = form;
  }
  const GpuKernel &g = *chosen;
  cuda::KernelLaunch launch;
  launch.fn = g.fn;
  std::vector<uint64_t> &slots = launch.params;
  slots.reserve(args.size() * 12 + 8);
  std::vector<Mirror *> &written = writtenByLaunch; // (kept: no allocation)
  written.clear();
  for (size_t i = 0; i < args.size(); ++i) {
    GpuArg &a = args[i];
    uint64_t device = 0;
    if (a.kind == GpuArg::Memref) {
      uintptr_t start = 0, end = 0;
      const bool empty = std::any_of(a.sizes.begin(), a.sizes.end(),
                                     [](int64_t d) { return d == 0; });
      if (!empty || bounds.range(a.aligned, start, end)) {
        if (!bounds.range(a.aligned, start, end))
          throw std::out_of_range("argument " + std::to_string(i) + " of " +
                                  k.name + " is in no known buffer");
        Mirror &m = mirror(start, end);
        if (m.current == Current::Host) {
          upload(m.device, reinterpret_cast<const void *>(start), end - start);
          m.current = Current::Both;
        }
        if (!constants.count(start))
          written.push_back(&m); // the kernel may write any buffer it gets
        device = uint64_t(m.device + (uintptr_t(a.aligned) - start));
      }
    }
    appendSlots(slots, a, device);
  }
  if (g.status) {
    const size_t slot = pendingStatuses.size();
    if (slot >= zeroedSlots)
      zeroStatusBlock(slot / kStatusSlots);
    const cuda::DevicePtr at = statusBlocks[slot / kStatusSlots] + (slot % kStatusSlots) * 4;
    pendingStatuses.push_back({k.name, currentWhere, currentOp});
    for (uint64_t v : {uint64_t(at), uint64_t(at), uint64_t(0), uint64_t(1), uint64_t(1)})
      slots.push_back(v);
  }
  if (!g.state.empty()) {
    const std::vector<cuda::DevicePtr> &buffers = stateBuffers(g, branchLane);
    for (size_t i = 0; i < g.state.size(); ++i)
      g.state[i].appendSlots(slots, buffers[i]);
  }
  if (slots.size() != g.paramSlots)
    throw std::runtime_error(k.name + ": the launch passes " + std::to_string(slots.size()) +
                             " parameter slots, the kernel takes " +
                             std::to_string(g.paramSlots) + " (kernels.json params)");
  auto shape = cuda::launchShapeFor(g.launch, [&](int64_t i) {
    const GpuArg &a = args.at(size_t(i));
    return a.kind == GpuArg::Memref ? &a.sizes : nullptr;
  });
  if (!shape.ok())
    throw std::runtime_error(k.name + ": " + std::string(shape.status().message()));
  launch.shape = *shape;
  ++launches;
  {
    const WaitTimer t(launchSeconds);
    check(device.dispatch(launch));
  }
  if (syncEach)
    check(device.synchronize());
  for (Mirror *m : written)
    m->current = Current::Device;
  return 0; // a status is checked when the run ends (takeStatuses)
}

inline absl::Status GpuRunner::takeStatuses(bool now) {
  const size_t count = pendingStatuses.size();
  if (count == 0 || (!now && count < kStatusSlots * kStatusBlocksUnread))
    return absl::OkStatus();
  std::vector<int32_t> values(count);
  for (size_t first = 0; first < count; first += kStatusSlots)
    download(values.data() + first, statusBlocks[first / kStatusSlots],
             std::min(kStatusSlots, count - first) * 4);
  std::vector<PendingStatus> pending = std::move(pendingStatuses);
  pendingStatuses.clear();
  zeroedSlots = 0;
  for (size_t i = 0; i < count; ++i)
    if (values[i] != 0)
      return absl::InternalError(absl::StrCat(
          pending[i].where ? *pending[i].where : "?", " (", pending[i].op ? *pending[i].op : "?",
          "): kernel ", absl::StripPrefix(pending[i].kernel, "_mlir_ciface_"),
          " did not store ", values[i], " rows (past its cache's end)"));
  return absl::OkStatus();
}

inline void forgetDeviceCopy(const void *p) {
  if (currentRunner)
    currentRunner->forget(p);
}

} // namespace csa::runtime::detail

#endif // CSA_RUNTIME_EXECUTOR_GPURUNNER_H

//===- Executor.cpp - Runs an artifact's plan on the CPU ------------------===//
//
// One driver per csa op kind. A driver reads the step's bindings, sizes the
// results, builds memref descriptors and calls the op's generated kernels
// (attrs.kernels, by role) in the order the op's semantics need. It finds
// the step's arguments by slot name in the op's layout (runtime/artifact/
// OpAbi.h, the table codegen/host/HostPlan.cpp writes them by).
//
//===----------------------------------------------------------------------===//
#include "runtime/executor/Executor.h"

#include "runtime/artifact/OpAbi.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/LaunchGraphs.h"
#include "runtime/cuda/LaunchRuleJson.h"
#include "runtime/numerics/Quantize.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

#include <algorithm>
#include <atomic>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <functional>
#include <random>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <unordered_map>

namespace csa::runtime {

using artifact::ArgKind;
using artifact::CacheBuffer;
using artifact::CacheKind;
using artifact::KernelArg;
using artifact::KernelCall;
using nlohmann::json;

namespace {

/// A ranked memref descriptor as `_mlir_ciface_` functions take it.
template <int N> struct Desc {
  const void *allocated;
  const void *aligned;
  int64_t offset;
  int64_t sizes[N];
  int64_t strides[N];
};

/// A row-major descriptor of `p` (element offsets and strides).
template <int N>
Desc<N> desc(const void *p, std::array<int64_t, N> sizes) {
  Desc<N> d{p, p, 0, {}, {}};
  int64_t stride = 1;
  for (int i = N - 1; i >= 0; --i) {
    d.sizes[i] = sizes[size_t(i)];
    d.strides[i] = stride;
    stride *= sizes[size_t(i)];
  }
  return d;
}

/// The memory the executor hands to kernels (transients, weights, caches):
/// every descriptor a kernel receives must lie inside one of these ranges,
/// so a damaged or edited plan is an error, not an out-of-bounds access.
class Bounds {
public:
  void add(const void *p, size_t bytes) {
    if (p && bytes)
      ranges[uintptr_t(p)] = uintptr_t(p) + bytes;
  }
  void remove(const void *p) { ranges.erase(uintptr_t(p)); }
  /// The registered range that holds p.
  bool range(const void *p, uintptr_t &start, uintptr_t &end) const {
    auto it = ranges.upper_bound(uintptr_t(p));
    if (it == ranges.begin())
      return false;
    --it;
    if (uintptr_t(p) >= it->second)
      return false;
    start = it->first;
    end = it->second;
    return true;
  }
  /// Whether [p, p + bytes) lies inside one registered range.
  bool contains(const void *p, size_t bytes) const {
    auto it = ranges.upper_bound(uintptr_t(p));
    if (it == ranges.begin())
      return false;
    --it;
    return uintptr_t(p) + bytes <= it->second;
  }

private:
  std::map<uintptr_t, uintptr_t> ranges;
};
thread_local Bounds *currentBounds = nullptr;

/// Makes `bounds` the current registry for the scope of an entry point.
class BoundsScope {
public:
  explicit BoundsScope(Bounds *bounds) : previous(currentBounds) {
    currentBounds = bounds;
  }
  ~BoundsScope() { currentBounds = previous; }

private:
  Bounds *previous;
};

/// A value a step produces: its bytes, its dimensions as last written and the
/// absolute position of row 0 (how top-k sets and pools answer by position).
class GpuRunner;
/// The runner of the entry point being run (null on the CPU); see GpuRunner.
thread_local GpuRunner *currentRunner = nullptr;
/// Frees the device copy of the host buffer at `p` (defined after GpuRunner).
void forgetDeviceCopy(const void *p);

struct Tensor {
  std::vector<uint8_t> data;
  std::vector<int64_t> dims;
  int64_t base = 0;
  int64_t elementBytes = 1;
  /// The pooled buffer this value held last (compared, never read): a value
  /// gets it again when it is free, so that from step to step every value
  /// keeps its address, and on the GPU its device copy and the launches of
  /// a kept graph stay as they were (one value that outgrows its buffer
  /// moves alone instead of shifting the others).
  const uint8_t *lastBuffer = nullptr;

  int64_t rows() const { return dims.empty() ? 0 : dims[0]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims)
      n *= d;
    return n;
  }
  void resize(std::vector<int64_t> d) {
    dims = std::move(d);
    if (currentBounds)
      currentBounds->remove(data.data());
    // Keep at least one byte so that a 0-row value still has an address.
    const void *before = data.data();
    const size_t bytes = size_t(std::max<int64_t>(numel() * elementBytes, 1));
    // A buffer that must grow gets 1/8 more than asked (std::vector's
    // resize grows to twice the bytes in use, which is exactly the request
    // when a small value held the buffer last): a value that grows a little
    // every few steps (a long context's index scores) does not move its
    // buffer, and with it the device copy, each time.
    if (bytes > data.capacity())
      data.reserve(bytes + bytes / 8);
    data.resize(bytes);
    if (before && before != data.data())
      forgetDeviceCopy(before); // the old bytes are freed: so is their copy
    if (currentBounds)
      currentBounds->add(data.data(), data.size());
  }
  template <typename T> T *as() { return reinterpret_cast<T *>(data.data()); }
  void *ptr() { return data.data(); }
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// The shared object of the kernels.
class KernelLibrary {
public:
  static absl::StatusOr<std::unique_ptr<KernelLibrary>>
  open(const std::string &path) {
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle)
      return absl::FailedPreconditionError(
          absl::StrCat("cannot load kernels ", path, ": ", dlerror()));
    auto lib = std::make_unique<KernelLibrary>();
    lib->handle = handle;
    return lib;
  }
  ~KernelLibrary() {
    if (handle)
      dlclose(handle);
  }
  void *symbol(const std::string &name) const { return dlsym(handle, name.c_str()); }

private:
  void *handle = nullptr;
};

/// A kernel's argument as kernels/host.json declares it: a memref (rank,
/// static sizes with -1 for dynamic, element bytes) or a scalar.
struct ArgSignature {
  bool memref = false;
  std::vector<int64_t> sizes;
  int64_t elementBytes = 0;
};

/// Parses "memref<?x64xbf16>", "memref<?x33xi8, strided<[?, 1], offset: ?>>",
/// "i64", "f32"; false for anything else.
bool parseSignature(const std::string &type, ArgSignature &sig) {
  if (type.rfind("memref<", 0) != 0) {
    sig.memref = false;
    return type == "i64" || type == "i32" || type == "f32" || type == "index";
  }
  sig.memref = true;
  std::string body = type.substr(7);
  size_t end = body.find_first_of(",>");
  if (end == std::string::npos)
    return false;
  body = body.substr(0, end);
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    size_t x = body.find('x', start);
    if (x == std::string::npos) {
      items.push_back(body.substr(start));
      break;
    }
    items.push_back(body.substr(start, x - start));
    start = x + 1;
  }
  const std::string element = items.back();
  items.pop_back();
  static const std::map<std::string, int64_t> bytes = {
      {"bf16", 2}, {"f32", 4}, {"i8", 1}, {"i32", 4}, {"i64", 8}};
  auto it = bytes.find(element);
  if (it == bytes.end())
    return false;
  sig.elementBytes = it->second;
  for (const std::string &d : items) {
    if (d == "?") {
      sig.sizes.push_back(-1);
      continue;
    }
    char *endp = nullptr;
    long long v = std::strtoll(d.c_str(), &endp, 10);
    if (!endp || *endp != '\0' || v < 0)
      return false;
    sig.sizes.push_back(v);
  }
  return true;
}

/// One argument of a kernel launched on the GPU.
struct GpuArg {
  enum Kind { Memref, I64, I32, F32 } kind = I64;
  const void *aligned = nullptr;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
  int64_t i = 0;
  float f = 0;
};
template <int N> GpuArg gpuArg(Desc<N> *d) {
  GpuArg a;
  a.kind = GpuArg::Memref;
  a.aligned = d->aligned;
  a.offset = d->offset;
  a.sizes.assign(d->sizes, d->sizes + N);
  a.strides.assign(d->strides, d->strides + N);
  return a;
}
inline GpuArg gpuArg(int64_t v) {
  GpuArg a;
  a.kind = GpuArg::I64;
  a.i = v;
  return a;
}
inline GpuArg gpuArg(int32_t v) {
  GpuArg a;
  a.kind = GpuArg::I32;
  a.i = v;
  return a;
}
inline GpuArg gpuArg(float v) {
  GpuArg a;
  a.kind = GpuArg::F32;
  a.f = v;
  return a;
}

/// `a` as a launch's parameter slots (cuda::KernelLaunch): a memref as
/// (allocated, aligned, offset, sizes..., strides...) with both pointers
/// `pointer` (its device address); an i32 or f32 in its slot's first 4
/// bytes.
inline void appendSlots(std::vector<uint64_t> &slots, const GpuArg &a, uint64_t pointer) {
  switch (a.kind) {
  case GpuArg::Memref:
    slots.push_back(pointer);
    slots.push_back(pointer);
    slots.push_back(uint64_t(a.offset));
    for (int64_t v : a.sizes)
      slots.push_back(uint64_t(v));
    for (int64_t v : a.strides)
      slots.push_back(uint64_t(v));
    return;
  case GpuArg::F32: {
    uint32_t bits = 0;
    std::memcpy(&bits, &a.f, 4);
    slots.push_back(bits);
    return;
  }
  case GpuArg::I32:
    slots.push_back(uint64_t(uint32_t(int32_t(a.i))));
    return;
  case GpuArg::I64:
    slots.push_back(uint64_t(a.i));
    return;
  }
}

/// How kernels.json says to launch a kernel.
struct GpuKernel {
  cuda::Function fn = nullptr;
  cuda::LaunchRule launch;
  bool status = false;
  std::vector<int64_t> elementBytes; ///< per argument (0 for scalars)
  /// The kernel's row-tiled form (kernels.json "replaces"), run instead from
  /// `tiledMinRows` rows on: same arguments, same bits.
  const GpuKernel *tiled = nullptr;
  int64_t tiledMinRows = 0;
};

struct KernelRef {
  void *fn = nullptr;
  const std::vector<ArgSignature> *signature = nullptr;
  std::string name;
  const GpuKernel *gpu = nullptr; ///< set when the kernels run on the GPU
  GpuRunner *runner = nullptr;
};

/// Emulation's graphs: LaunchGraphs' bookkeeping on the emulated launches
/// (which have run by then), so that which runs become graphs, which graphs
/// are kept and which launches change between steps is visible without a
/// GPU. CSA_CUDA_TRACE=1 names every launch changed in a kept graph.
class CountingGraphLauncher final : public cuda::GraphLauncher {
public:
  explicit CountingGraphLauncher(bool trace) : trace(trace) {}
  std::map<cuda::Function, std::string> names; ///< host kernel -> its name
  absl::Status launchNow(const cuda::KernelLaunch &) override {
    return absl::OkStatus();
  }
  absl::StatusOr<Graph> createGraph(const std::vector<cuda::KernelLaunch> &) override {
    return static_cast<Graph>(new int(0));
  }
  absl::Status updateGraphNode(Graph, size_t node, const cuda::KernelLaunch &k) override {
    if (trace)
      std::fprintf(stderr, "csa-cuda: graph node %zu updated (%s)\n", node,
                   names.count(k.fn) ? names[k.fn].c_str() : "?");
    return absl::OkStatus();
  }
  absl::Status launchGraph(Graph) override { return absl::OkStatus(); }
  void destroyGraph(Graph graph) override { delete static_cast<int *>(graph); }

private:
  const bool trace;
};

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
/// Without a driver (CSA_CUDA_EMULATE=1) the "device" is separate host
/// memory and a launch calls the host kernel on the mirrors: the same
/// bookkeeping, checkable on a machine without a GPU (a missed download
/// leaves the host with stale bytes and changes the output). With
/// `emulatedGraphs`, the launches also go through LaunchGraphs (counted,
/// not replayed), split where the driver's would be.
class GpuRunner {
public:
  GpuRunner(cuda::Driver *driver, const Bounds &bounds, const ExecutorOptions &options,
            const cuda::LaunchGraphOptions *emulatedGraphs = nullptr)
      : driver(driver), bounds(bounds), syncEach(options.syncEachLaunch),
        trace(options.traceGpu) {
    if (emulated() && emulatedGraphs) {
      countingLauncher = std::make_unique<CountingGraphLauncher>(trace);
      graphs = std::make_unique<cuda::LaunchGraphs>(*countingLauncher, *emulatedGraphs);
    }
  }
  ~GpuRunner() {
    for (auto &[start, m] : mirrors)
      releaseDevice(m.device);
    for (cuda::DevicePtr block : statusBlocks)
      releaseDevice(block);
    releaseFreeBlocks();
  }
  bool emulated() const { return driver == nullptr; }
  /// Waits for every launch so far (profiling).
  /// Reads back the statuses of the launches since the last call (one
  /// download per kStatusSlots) and fails naming the first nonzero one.
  absl::Status takeStatuses();
  /// Drops the statuses of a run that failed.
  void dropStatuses() { pendingStatuses.clear(); }
  /// The step being run, named in a status's message.
  void setCurrentStep(std::string where) { currentStep = std::move(where); }
  void synchronize() {
    if (!emulated())
      check(driver->synchronize());
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
  void recordEmulated(void *fn, const std::string &name, std::vector<uint64_t> params) {
    if (!graphs)
      return;
    cuda::KernelLaunch k;
    k.fn = fn;
    k.params = std::move(params);
    countingLauncher->names.emplace(fn, name);
    check(graphs->add(std::move(k)));
  }
  /// Emulation with graphs: a copy, fill or read ends the run of launches.
  void endEmulatedRun() {
    if (graphs)
      check(graphs->flush());
  }
  /// The start of a run of `entry` (Driver::beginGraphRun).
  void beginGraphRun(const std::string &entry) {
    if (graphs)
      check(graphs->begin(entry));
    else if (driver)
      check(driver->beginGraphRun(entry));
  }
  /// LaunchGraphs' counts: the driver's, or emulation's.
  cuda::LaunchGraphCounters graphCounters() const {
    if (graphs)
      return graphs->counters();
    return driver ? driver->graphCounters() : cuda::LaunchGraphCounters();
  }
  /// Emulation: the call ran; what it was given is current on the "device".
  void emulatedCallDone() {
    for (Mirror *m : pendingWrites)
      m->current = Current::Device;
    pendingWrites.clear();
  }
  void markConstant(const void *p) { constants.insert(uintptr_t(p)); }
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
    if (emulated())
      std::memset(reinterpret_cast<void *>(uintptr_t(m.device)), 0xFF, m.bytes);
  }
  /// The buffer holding `p` becomes zeros on the device (an accumulator a
  /// kernel adds to), without copying the host's bytes.
  void zeroOnDevice(const void *p) {
    uintptr_t start = 0, end = 0;
    if (!p || !bounds.range(p, start, end))
      return;
    Mirror &m = mirror(start, end);
    endEmulatedRun();
    if (emulated())
      std::memset(reinterpret_cast<void *>(uintptr_t(m.device)), 0, m.bytes);
    else
      check(driver->fill(m.device, 0, m.bytes));
    m.current = Current::Device;
  }
  /// Copies `bytes` from `src` to the whole buffer starting at `dst` on the
  /// device, when src's buffer is current there (a RoPE or slice of a value
  /// a kernel produced); false when the host should copy instead.
  bool copyOnDevice(void *dst, const void *src, size_t bytes) {
    uintptr_t ss = 0, se = 0, ds = 0, de = 0;
    if (!bounds.range(src, ss, se) || !bounds.range(dst, ds, de) || ss == ds ||
        uintptr_t(dst) != ds || bytes != de - ds)
      return false;
    auto it = mirrors.find(ss);
    if (it == mirrors.end() || it->second.bytes != se - ss ||
        it->second.current == Current::Host)
      return false;
    Mirror &d = mirror(ds, de); // (std::map: `it` stays valid)
    const cuda::DevicePtr from = it->second.device + (uintptr_t(src) - ss);
    endEmulatedRun();
    if (emulated())
      std::memcpy(reinterpret_cast<void *>(uintptr_t(d.device)),
                  reinterpret_cast<const void *>(uintptr_t(from)), bytes);
    else
      check(driver->copyOnDevice(d.device, from, bytes));
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
    endEmulatedRun();
    for (int64_t r = 0; r < count;) {
      const int64_t first = which ? (*which)[size_t(r)] : r;
      int64_t run = 1;
      while (r + run < count && (which ? (*which)[size_t(r + run)] : r + run) == first + run)
        ++run;
      const cuda::DevicePtr src = from + size_t(first) * entryBytes + offset;
      const cuda::DevicePtr out = d.device + size_t(r) * rowBytes;
      if (size_t(first + run) * entryBytes > it->second.bytes)
        throw std::out_of_range("a cache gather reads past the cache");
      if (emulated()) {
        for (int64_t k = 0; k < run; ++k)
          std::memcpy(reinterpret_cast<void *>(uintptr_t(out + size_t(k) * rowBytes)),
                      reinterpret_cast<const void *>(uintptr_t(src + size_t(k) * entryBytes)),
                      rowBytes);
      } else {
        check(driver->copyRowsOnDevice(out, rowBytes, src, entryBytes, rowBytes, size_t(run)));
      }
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
    endEmulatedRun();
    Mirror &m = mirrors[start];
    m.device = allocateDevice(toBytes, &m.capacity);
    m.bytes = toBytes;
    if (emulated()) {
      std::memcpy(reinterpret_cast<void *>(uintptr_t(m.device)),
                  reinterpret_cast<const void *>(uintptr_t(d.device)), keep);
      std::memset(reinterpret_cast<void *>(uintptr_t(m.device + keep)), 0, toBytes - keep);
    } else {
      if (keep)
        check(driver->copyOnDevice(m.device, d.device, keep));
      if (toBytes > keep)
        check(driver->fill(m.device + keep, 0, toBytes - keep));
    }
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
  // Device memory: the driver's, or host memory when emulated. Blocks are
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
    cuda::DevicePtr ptr = 0;
    if (emulated()) {
      auto memory = std::make_unique<uint8_t[]>(block);
      ptr = cuda::DevicePtr(uintptr_t(memory.get()));
      emulatedMemory[ptr] = std::move(memory);
    } else {
      auto allocated = driver->allocate(block);
      if (!allocated.ok() && !freeBlocks.empty()) {
        releaseFreeBlocks(); // what is kept for reuse, before giving up
        allocated = driver->allocate(block);
      }
      if (!allocated.ok())
        throw std::runtime_error(std::string(allocated.status().message()));
      ptr = *allocated;
    }
    sizeOfBlock[ptr] = block;
    return ptr;
  }
  void releaseDevice(cuda::DevicePtr ptr) {
    auto it = sizeOfBlock.find(ptr);
    // (A block released twice would be handed to two owners.)
    if (it != sizeOfBlock.end() && freeSet.insert(ptr).second)
      freeBlocks.emplace(it->second, ptr);
  }
  void releaseFreeBlocks() {
    // Launches already issued may still read them (cuMemFree would wait
    // too, but says nothing about graphs recorded and not issued).
    if (!emulated() && !freeBlocks.empty())
      (void)driver->synchronize();
    for (auto &[bytes, ptr] : freeBlocks) {
      freeSet.erase(ptr);
      sizeOfBlock.erase(ptr);
      if (emulated())
        emulatedMemory.erase(ptr);
      else
        (void)driver->release(ptr);
    }
    freeBlocks.clear();
  }
public:
  /// Bytes copied each way so far (the profile's transfers).
  uint64_t bytesToDevice = 0, bytesToHost = 0;
  /// Counts so far: kernel launches, copies each way, device allocations.
  int64_t launches = 0, uploads = 0, downloads = 0, deviceAllocations = 0;
  /// The kernel whose arguments are being placed (CSA_CUDA_TRACE=1 names it
  /// with each copy; null: a preload or a download the host asked for).
  const std::string *placing = nullptr;

private:
  void traceCopy(const char *direction, size_t bytes) {
    if (trace)
      std::fprintf(stderr, "csa-cuda: %s %zu bytes (%s)\n", direction, bytes,
                   placing ? placing->c_str() : "outside a kernel");
  }
  void upload(cuda::DevicePtr dst, const void *src, size_t bytes) {
    endEmulatedRun();
    traceCopy("upload", bytes);
    bytesToDevice += bytes;
    ++uploads;
    if (emulated())
      std::memcpy(reinterpret_cast<void *>(uintptr_t(dst)), src, bytes);
    else
      check(driver->copyToDevice(dst, src, bytes));
  }
  void download(void *dst, cuda::DevicePtr src, size_t bytes) {
    endEmulatedRun();
    traceCopy("download", bytes);
    bytesToHost += bytes;
    ++downloads;
    if (emulated())
      std::memcpy(dst, reinterpret_cast<const void *>(uintptr_t(src)), bytes);
    else
      check(driver->copyToHost(dst, src, bytes));
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
  cuda::Driver *driver; ///< null: emulated
  const Bounds &bounds;
  const bool syncEach;
  const bool trace; ///< CSA_CUDA_TRACE: every copy on stderr
  std::map<uintptr_t, Mirror> mirrors;
  std::set<uintptr_t> constants;
  /// Kernels' returned values (a store's count of rows not written): one
  /// int32 slot per launch in blocks of kStatusSlots, zeroed when a block is
  /// first used in a run and read back once, when the run ends
  /// (takeStatuses), instead of a download after every such launch (each of
  /// which would end the run of launches a CUDA graph holds).
  static constexpr size_t kStatusSlots = 256;
  struct PendingStatus {
    std::string kernel, where;
  };
  std::vector<cuda::DevicePtr> statusBlocks;
  std::vector<PendingStatus> pendingStatuses;
  /// The step being run (Executor::Impl::run), for a status's message.
  std::string currentStep;
  std::map<cuda::DevicePtr, std::unique_ptr<uint8_t[]>> emulatedMemory;
  std::map<cuda::DevicePtr, size_t> sizeOfBlock; ///< every block allocated
  std::multimap<size_t, cuda::DevicePtr> freeBlocks; ///< released, by size
  std::set<cuda::DevicePtr> freeSet;                 ///< the same blocks
  std::vector<Mirror *> pendingWrites; ///< emulation: the running call's
  std::unique_ptr<CountingGraphLauncher> countingLauncher; ///< emulation
  std::unique_ptr<cuda::LaunchGraphs> graphs;              ///< emulation
};

inline int32_t GpuRunner::launch(const KernelRef &k, std::vector<GpuArg> &args) {
  const GpuKernel *chosen = k.gpu;
  if (const GpuKernel *t = chosen->tiled) {
    const int64_t r = t->launch.rowsArgument;
    if (r >= 0 && size_t(r) < args.size() && args[size_t(r)].kind == GpuArg::Memref &&
        !args[size_t(r)].sizes.empty() && args[size_t(r)].sizes[0] >= chosen->tiledMinRows)
      chosen = t;
  }
  const GpuKernel &g = *chosen;
  cuda::KernelLaunch launch;
  launch.fn = g.fn;
  std::vector<uint64_t> &slots = launch.params;
  slots.reserve(args.size() * 12 + 8);
  std::vector<Mirror *> written;
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
    if (slot % kStatusSlots == 0) {
      if (slot / kStatusSlots == statusBlocks.size())
        statusBlocks.push_back(allocateDevice(kStatusSlots * 4));
      check(driver->fill(statusBlocks[slot / kStatusSlots], 0, kStatusSlots * 4));
    }
    const cuda::DevicePtr at = statusBlocks[slot / kStatusSlots] + (slot % kStatusSlots) * 4;
    pendingStatuses.push_back({k.name, currentStep});
    for (uint64_t v : {uint64_t(at), uint64_t(at), uint64_t(0), uint64_t(1), uint64_t(1)})
      slots.push_back(v);
  }
  auto shape = cuda::launchShapeFor(g.launch, [&](int64_t i) {
    const GpuArg &a = args.at(size_t(i));
    return a.kind == GpuArg::Memref ? &a.sizes : nullptr;
  });
  if (!shape.ok())
    throw std::runtime_error(k.name + ": " + std::string(shape.status().message()));
  launch.shape = *shape;
  ++launches;
  check(driver->launch(launch));
  if (syncEach)
    check(driver->synchronize());
  for (Mirror *m : written)
    m->current = Current::Device;
  return 0; // a status is checked when the run ends (takeStatuses)
}

absl::Status GpuRunner::takeStatuses() {
  const size_t count = pendingStatuses.size();
  if (count == 0)
    return absl::OkStatus();
  std::vector<int32_t> values(count);
  for (size_t first = 0; first < count; first += kStatusSlots)
    download(values.data() + first, statusBlocks[first / kStatusSlots],
             std::min(kStatusSlots, count - first) * 4);
  std::vector<PendingStatus> pending = std::move(pendingStatuses);
  pendingStatuses.clear();
  for (size_t i = 0; i < count; ++i)
    if (values[i] != 0)
      return absl::InternalError(absl::StrCat(
          pending[i].where, ": kernel ", absl::StripPrefix(pending[i].kernel, "_mlir_ciface_"),
          " did not store ", values[i], " rows (past its cache's end)"));
  return absl::OkStatus();
}

void forgetDeviceCopy(const void *p) {
  if (currentRunner)
    currentRunner->forget(p);
}

/// Checks one call argument against the kernel's signature.
template <int N>
void checkArg(const KernelRef &k, size_t i, Desc<N> *d) {
  if (i >= k.signature->size() || !(*k.signature)[i].memref)
    throw std::invalid_argument("argument " + std::to_string(i) + " of " +
                                k.name + " is not a memref in its signature");
  const ArgSignature &sig = (*k.signature)[i];
  if (sig.sizes.size() != size_t(N))
    throw std::invalid_argument("argument " + std::to_string(i) + " of " +
                                k.name + " has rank " +
                                std::to_string(sig.sizes.size()) +
                                "; the step passes rank " + std::to_string(N));
  int64_t span = 1; // elements from the first to one past the last
  for (int r = 0; r < N; ++r) {
    if (sig.sizes[size_t(r)] >= 0 && sig.sizes[size_t(r)] != d->sizes[r])
      throw std::invalid_argument(
          "argument " + std::to_string(i) + " of " + k.name + ": dimension " +
          std::to_string(r) + " is " + std::to_string(sig.sizes[size_t(r)]) +
          " in the kernel, " + std::to_string(d->sizes[r]) +
          " in the step (a kernel of another shape?)");
    if (d->sizes[r] == 0)
      span = 0;
  }
  if (span != 0) {
    span = 1;
    for (int r = 0; r < N; ++r)
      span += (d->sizes[r] - 1) * d->strides[r];
  }
  const char *base = static_cast<const char *>(d->aligned) +
                     d->offset * sig.elementBytes;
  if (span > 0 && currentBounds &&
      !currentBounds->contains(base, size_t(span * sig.elementBytes)))
    throw std::out_of_range("argument " + std::to_string(i) + " of " + k.name +
                            " reaches past its buffer");
}
inline void checkArg(const KernelRef &k, size_t i, int64_t) {
  if (i >= k.signature->size() || (*k.signature)[i].memref)
    throw std::invalid_argument("argument " + std::to_string(i) + " of " +
                                k.name + " is not an integer in its signature");
}
inline void checkArg(const KernelRef &k, size_t i, int32_t v) {
  checkArg(k, i, int64_t(v));
}
inline void checkArg(const KernelRef &k, size_t i, float) {
  if (i >= k.signature->size() || (*k.signature)[i].memref)
    throw std::invalid_argument("argument " + std::to_string(i) + " of " +
                                k.name + " is not a float in its signature");
}

template <int N> void hostSide(Desc<N> *d) { currentRunner->toHost(d->aligned); }
template <typename T> void hostSide(T) {}

/// Emulation: a descriptor over the argument's mirror (kept alive by
/// `keep` for the call); scalars as they are.
template <int N>
Desc<N> *onMirror(GpuRunner &runner, Desc<N> *d,
                  std::vector<std::shared_ptr<void>> &keep) {
  auto copy = std::make_shared<Desc<N>>(*d);
  bool empty = false;
  for (int i = 0; i < N; ++i)
    empty |= d->sizes[i] == 0;
  copy->aligned = runner.emulatedArg(d->aligned, empty);
  copy->allocated = copy->aligned;
  keep.push_back(copy);
  return copy.get();
}
template <typename T>
T onMirror(GpuRunner &, T v, std::vector<std::shared_ptr<void>> &) {
  return v;
}

template <typename R, typename... A> R invokeAs(const KernelRef &k, A... args) {
  if (sizeof...(A) != k.signature->size())
    throw std::invalid_argument(k.name + " takes " +
                                std::to_string(k.signature->size()) +
                                " arguments; the step passes " +
                                std::to_string(sizeof...(A)));
  size_t i = 0;
  (checkArg(k, i++, args), ...);
  struct Placing { // names the kernel in CSA_CUDA_TRACE lines
    GpuRunner *runner;
    Placing(GpuRunner *r, const std::string &name) : runner(r) {
      if (runner)
        runner->placing = &name;
    }
    ~Placing() {
      if (runner)
        runner->placing = nullptr;
    }
  } placing(k.runner, k.name);
  if (k.runner && k.runner->emulated()) {
    std::vector<std::shared_ptr<void>> keep;
    auto fn = reinterpret_cast<R (*)(A...)>(k.fn);
    auto mirrored = std::make_tuple(onMirror(*k.runner, args, keep)...);
    std::vector<uint64_t> params;
    std::apply(
        [&](auto... m) {
          for (const GpuArg &a : {gpuArg(m)...})
            appendSlots(params, a, uint64_t(uintptr_t(a.aligned)));
        },
        mirrored);
    if constexpr (!std::is_void_v<R>)
      k.runner->endEmulatedRun(); // the device path zeroes the result first
    k.runner->recordEmulated(k.fn, k.name, std::move(params));
    ++k.runner->launches;
    if constexpr (std::is_void_v<R>) {
      std::apply(fn, mirrored);
      k.runner->emulatedCallDone();
      return;
    } else {
      R r = std::apply(fn, mirrored);
      k.runner->emulatedCallDone();
      k.runner->endEmulatedRun(); // the device path downloads the result
      return r;
    }
  }
  if (k.runner) {
    std::vector<GpuArg> gpuArgs{gpuArg(args)...};
    int32_t r = k.runner->launch(k, gpuArgs);
    if constexpr (std::is_void_v<R>)
      return;
    else
      return R(r);
  }
  if (currentRunner) // a host kernel in a GPU run: its buffers, current here
    (hostSide(args), ...);
  return reinterpret_cast<R (*)(A...)>(k.fn)(args...);
}

} // namespace

//===----------------------------------------------------------------------===//
// Sequence
//===----------------------------------------------------------------------===//

ExecutorOptions ExecutorOptions::fromEnvironment() {
  ExecutorOptions options;
  if (const char *e = std::getenv("CSA_CUDA_EMULATE"))
    options.emulateGpu = std::string(e) == "1";
  options.syncEachLaunch = std::getenv("CSA_CUDA_SYNC") != nullptr;
  options.traceGpu = std::getenv("CSA_CUDA_TRACE") != nullptr;
  options.rowTiles = std::getenv("CSA_CUDA_NO_TILES") == nullptr;
  if (const char *list = std::getenv("CSA_CUDA_HOST_KERNELS")) {
    std::stringstream items(list);
    std::string prefix;
    while (std::getline(items, prefix, ','))
      if (!prefix.empty())
        options.hostKernelPrefixes.push_back(prefix);
  }
  return options;
}

uint64_t Sequence::cacheBytes() const {
  uint64_t total = 0;
  for (const auto &[id, cache] : caches)
    total += cache.bytes.size();
  return total;
}

uint64_t Sequence::cacheBytesInUse(const artifact::Plan &plan) const {
  uint64_t total = 0;
  for (const CacheBuffer &b : plan.caches) {
    auto it = caches.find(b.id);
    if (it == caches.end())
      continue;
    if (b.kind == CacheKind::GlobalCache)
      total += uint64_t(std::max(it->second.mainEntries, it->second.indexEntries) *
                        b.entryBytes);
    else
      total += it->second.bytes.size();
  }
  return total;
}

//===----------------------------------------------------------------------===//
// Executor
//===----------------------------------------------------------------------===//

struct Executor::Impl {
  const artifact::Artifact *artifact = nullptr;
  const checkpoint::Checkpoint *checkpoint = nullptr;
  std::map<std::string, std::unique_ptr<KernelLibrary>> libraries;
  std::unordered_map<std::string, checkpoint::TensorView> weights;
  std::unordered_map<std::string, Tensor> transients;
  std::vector<int64_t> engramMap; ///< raw token id -> compressed id
  /// kernels/host.json: each kernel's argument types, by symbol.
  std::map<std::string, std::vector<ArgSignature>> signatures;
  Bounds bounds; ///< what kernels may be given (see Bounds)
  ExecutorOptions options; ///< device: Cpu or Cuda once loaded (Auto resolved)
  std::string deviceNote;  ///< Auto on the CPU: why
  std::unique_ptr<cuda::Driver> driver;  ///< Device::Cuda
  std::unique_ptr<GpuRunner> runner;
  std::map<std::string, GpuKernel> gpuKernels; ///< by symbol (_mlir_ciface_)
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

  struct Step;
  using Driver = std::function<absl::Status(Impl &, Step &)>;
  struct Step {
    const KernelCall *call = nullptr;
    std::string op;
    artifact::ArgLayout layout; ///< where each slot of `op` is in call->args
    std::map<std::string, KernelRef> kernels; ///< role -> kernel
    Driver driver;
    std::string where; ///< "prefill[12]" for messages
    /// Transients whose last use is this step: their memory goes back to
    /// the pool afterwards (the memory plan: liveness within the entry).
    std::vector<Tensor *> release;
  };
  std::vector<std::vector<uint8_t>> pool; ///< free transient buffers
  /// Every value's Tensor::lastBuffer (counted once per value).
  std::multiset<const uint8_t *> claimedBuffers;
  uint64_t liveBytes = 0, peakBytes = 0;
  std::vector<Step> prefillSteps, decodeSteps;
  std::map<std::string, ProfileEntry> profileTotals; ///< options.profile
  bool weightsResident = false; ///< GPU: every weight uploaded
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
  Tensor tokens, logits;

  absl::Status load();
  /// The GPU path's counts so far, or since `since` (GpuActivity; zeros on
  /// the CPU).
  GpuActivity gpuActivity(const GpuActivity *since = nullptr) const;
  absl::Status prepare(const std::vector<KernelCall> &calls, const char *entry,
                       std::vector<Step> &steps);
  absl::StatusOr<std::vector<float>> run(std::vector<Step> &steps);

  // --- argument access ----------------------------------------------------
  // By slot name (and repeat, for csa.moe's experts) in the step's layout,
  // which prepare() checked against the step's arguments.
  const KernelArg &arg(Step &s, std::string_view slot, int64_t instance = -1) {
    return s.call->args.at(s.layout.at(slot, instance));
  }
  Tensor &tensor(Step &s, std::string_view slot) {
    const KernelArg &a = arg(s, slot);
    if (a.kind == ArgKind::Input)
      return tokens;
    if (a.kind == ArgKind::Output)
      return logits;
    return transients[a.name];
  }
  const checkpoint::TensorView &weight(Step &s, std::string_view slot,
                                       int64_t instance = -1) {
    return weights.at(arg(s, slot, instance).name);
  }
  CacheState &cache(Step &s, std::string_view slot) {
    return seq->caches[arg(s, slot).name];
  }
  const CacheBuffer &cacheBuffer(Step &s, std::string_view slot) {
    return *artifact->plan().findCache(arg(s, slot).name);
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
  /// A result of `elementBytes`-sized elements with base `base`.
  Tensor &result(Step &s, std::string_view slot, int64_t elementBytes,
                 std::vector<int64_t> dims, int64_t base) {
    Tensor &t = tensor(s, slot);
    const uint64_t before = t.data.capacity();
    if (before == 0 && !pool.empty()) {
      // The buffer this value had in the last run when it is free (it is,
      // from the second step of a decode on); else a free one no value had
      // last (a value of every 4th step would otherwise move another one
      // each time it comes); else the last free one.
      auto it = std::find_if(pool.begin(), pool.end(), [&](const std::vector<uint8_t> &b) {
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
    if (t.lastBuffer != t.data.data()) {
      if (auto c = claimedBuffers.find(t.lastBuffer); c != claimedBuffers.end())
        claimedBuffers.erase(c);
      t.lastBuffer = t.data.data();
      claimedBuffers.insert(t.lastBuffer);
    }
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
                                        const Tensor &src,
                                        size_t from, int64_t elementBytes,
                                        std::vector<int64_t> dims,
                                        int64_t base) {
    size_t bytes = size_t(elementBytes);
    for (int64_t d : dims)
      bytes *= size_t(d);
    if (from + bytes > src.data.size())
      return absl::InvalidArgumentError(
          "a value holds fewer bytes than its shape says (another dtype?)");
    Tensor &dst = tensor(s, slot);
    if (&dst != &src && runner) {
      result(s, slot, elementBytes, dims, base);
      if (runner->copyOnDevice(dst.ptr(), src.data.data() + from, bytes))
        return &dst;
    }
    onHost(src.data.data());
    if (&dst == &src) { // one transient for operand and result
      std::vector<uint8_t> bytesOf(src.data.begin() + from,
                                   src.data.begin() + from + bytes);
      result(s, slot, elementBytes, std::move(dims), base);
      std::memcpy(dst.ptr(), bytesOf.data(), bytes);
      return &dst;
    }
    result(s, slot, elementBytes, std::move(dims), base);
    std::memcpy(dst.ptr(), src.data.data() + from, bytes);
    return &dst;
  }
  /// Per query row at positions base.., the compressed entries it may see:
  /// the groups complete at its position, (position + 1) / ratio.
  Tensor &visibleEntries(int64_t base, int64_t n, int64_t ratio) {
    Tensor &visible = scratch("visible", 8, {n});
    for (int64_t i = 0; i < n; ++i)
      visible.as<int64_t>()[i] = (base + i + 1) / ratio;
    return visible;
  }
  /// Scratch buffers of a step (kept between calls to reuse their memory).
  Tensor &scratch(const std::string &name, int64_t elementBytes,
                  std::vector<int64_t> dims) {
    Tensor &t = transients["$scratch." + name];
    t.elementBytes = elementBytes;
    t.resize(std::move(dims));
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

  /// Calls a linear kernel `role` on `rows` rows: x [rows, in] -> y, with
  /// the weight of slot `<layer>weight` and, when the step has one (the
  /// weight's format has scales), the scale of slot `<layer>scale`.
  void linear(Step &s, const char *role, const void *x, int64_t rows,
              int64_t in, std::string_view layer, int64_t instance, void *y,
              int64_t out) {
    const std::string slot(layer);
    const checkpoint::TensorView &w = weight(s, slot + "weight", instance);
    auto dx = desc<2>(x, {rows, in});
    auto dy = desc<2>(y, {rows, out});
    std::array<int64_t, 2> wShape{w.shape.size() > 0 ? w.shape[0] : 1,
                                  w.shape.size() > 1 ? w.shape[1] : 1};
    auto dw = desc<2>(w.data, wShape);
    if (!s.layout.has(slot + "scale", instance)) {
      invoke(s, role, &dx, &dw, &dy);
      return;
    }
    const checkpoint::TensorView &sc = weight(s, slot + "scale", instance);
    auto ds = desc<2>(sc.data, {sc.shape[0], sc.shape.size() > 1 ? sc.shape[1] : 1});
    invoke(s, role, &dx, &dw, &ds, &dy);
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
  absl::Status moe(Step &s);
  absl::Status engram(Step &s);
  absl::Status lmHead(Step &s);
  absl::Status sliceRows(Step &s);
};

absl::Status Executor::Impl::load() {
  const artifact::Plan &plan = artifact->plan();
  if (absl::Status st = artifact::checkWeights(*artifact, *checkpoint); !st.ok())
    return st;
  for (const artifact::WeightEntry &entry : artifact->weights().tensors) {
    auto view = checkpoint->tensor(entry.name);
    if (!view.ok())
      return view.status();
    weights.emplace(entry.name, *view);
  }
  if (auto embed = weights.find("embed.weight"); embed != weights.end())
    vocab = embed->second.shape[0];
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

absl::Status Executor::Impl::loadGpu() {
  if (options.emulateGpu) {
    cuda::LaunchGraphOptions graphs;
    graphs.maxLaunches = options.graphMaxLaunches;
    runner = std::make_unique<GpuRunner>(nullptr, bounds, options,
                                         options.cudaGraphs ? &graphs : nullptr);
    for (auto &[name, view] : weights)
      runner->markConstant(view.data);
    return absl::OkStatus();
  }
  auto opened = cuda::Driver::open();
  if (!opened.ok())
    return opened.status();
  driver = std::move(*opened);
  const std::string where = absl::StrCat("artifact ", artifact->directory(), ": ");
  std::ifstream ptxFile(artifact->pathOf("kernels/kernels.ptx"));
  std::ifstream jsonFile(artifact->pathOf("kernels/kernels.json"));
  if (!ptxFile || !jsonFile)
    return absl::FailedPreconditionError(absl::StrCat(
        where, "has no kernels/kernels.ptx (compile with csa-compile "
               "--emit=artifact --with-ptx)"));
  std::stringstream ptx;
  ptx << ptxFile.rdbuf();
  auto module = driver->loadPtx(ptx.str());
  if (!module.ok())
    return module.status();
  try {
    json meta = json::parse(jsonFile);
    std::map<std::string, json> argumentsOf; ///< by kernel name
    for (const json &k : meta.at("kernels")) {
      GpuKernel g;
      const std::string name = k.at("name").get<std::string>();
      argumentsOf[name] = k.at("arguments");
      auto fn = driver->function(*module, name);
      if (!fn.ok())
        return fn.status();
      g.fn = *fn;
      auto launch = cuda::parseLaunchRule(k.at("launch"), name,
                                          k.at("arguments").size());
      if (!launch.ok())
        return absl::InvalidArgumentError(
            absl::StrCat(where, "kernels/kernels.json: ", launch.status().message()));
      g.launch = *launch;
      g.status = k.at("status_parameter").get<bool>();
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
        it->second.tiled = &gpuKernels.at("_mlir_ciface_" + name);
        it->second.tiledMinRows = minRows;
      }
    }
  } catch (const json::exception &e) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "kernels/kernels.json: ", e.what()));
  }
  if (options.cudaGraphs) {
    cuda::LaunchGraphOptions graphs;
    graphs.maxLaunches = options.graphMaxLaunches;
    if (absl::Status st = driver->batchLaunchesInGraphs(graphs); !st.ok())
      return st;
  }
  runner = std::make_unique<GpuRunner>(driver.get(), bounds, options);
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
  a.graphLaunches = g.graphLaunches - b.graphLaunches;
  a.graphsBuilt = g.graphsBuilt - b.graphsBuilt;
  a.graphNodesUpdated = g.nodesUpdated - b.graphNodesUpdated;
  return a;
}

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
        auto opened = KernelLibrary::open(artifact->pathOf(call.object));
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
    steps.push_back(std::move(step));
  }
  // Liveness: the last step that names each transient (as an argument or in
  // an index expression's ["rows", id]).
  std::map<std::string, size_t> lastUse;
  for (size_t i = 0; i < steps.size(); ++i) {
    for (const KernelArg &a : steps[i].call->args) {
      if (a.kind == ArgKind::Transient)
        lastUse[a.name] = i;
      if (a.kind == ArgKind::Index)
        for (const std::string &id : artifact::rowsReferences(a.expr))
          lastUse[id] = i;
    }
  }
  for (auto &[id, step] : lastUse)
    steps[step].release.push_back(&transients[id]);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>>
Executor::Impl::run(std::vector<Step> &steps) {
  auto start = std::chrono::steady_clock::now();
  if (absl::Status st = checkHeld(*seq); !st.ok())
    return st;
  // Every run hands out the free buffers in the same order (by address), for
  // the values that have no buffer of their own yet (Tensor::lastBuffer).
  std::sort(pool.begin(), pool.end(),
            [](const std::vector<uint8_t> &a, const std::vector<uint8_t> &b) {
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
  // Caches left on the device by the last run of this sequence stay there.
  const bool held = seq->cachesHeldBy != 0;
  for (auto &[id, cache] : seq->caches)
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
  if (!held)
    for (auto &[id, cache] : seq->caches)
      hostRefilled(cache.bytes.data());
  hostRefilled(tokens.ptr());
  if (runner && !weightsResident) {
    // Every weight goes to the device in the first run (csa-run --warmup
    // takes it out of the timings), not when a step first uses it.
    try {
      for (auto &[name, view] : weights)
        runner->preload(view.data);
    } catch (const std::exception &e) {
      currentRunner = previousRunner;
      return absl::ResourceExhaustedError(
          absl::StrCat("uploading the weights to the GPU: ", e.what()));
    }
    weightsResident = true;
  }
  auto finish = [&](bool ok) -> absl::Status {
    absl::Status st;
    try {
      // The caches stay on the device for the sequence's next run, or come
      // back and their device copies go (a Sequence may be destroyed before
      // the next run; the next run uploads them again). After a failed step
      // they come back.
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
      if (runner) {
        if (ok)
          st = runner->takeStatuses();
        else
          runner->dropStatuses();
      }
      onHost(logits.ptr());
    } catch (const std::exception &e) {
      st = absl::InternalError(absl::StrCat("reading GPU results: ", e.what()));
    }
    currentRunner = previousRunner;
    return st;
  };
  for (Step &step : steps) {
    absl::Status st;
    const auto stepStart = std::chrono::steady_clock::now();
    const uint64_t toDeviceBefore = runner ? runner->bytesToDevice : 0,
                   toHostBefore = runner ? runner->bytesToHost : 0;
    try {
      if (runner)
        runner->setCurrentStep(absl::StrCat(step.where, " (", step.op, ")"));
      st = step.driver(*this, step);
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
      for (auto &[id, cache] : seq->caches)
        bounds.remove(cache.bytes.data());
      return absl::Status(st.code(), absl::StrCat(step.where, " (", step.op,
                                                  "): ", st.message()));
    }
    if (options.profile) {
      std::string key = step.op;
      for (const auto &[role, kernel] : step.kernels) {
        absl::string_view name = kernel.name;
        absl::ConsumePrefix(&name, "_mlir_ciface_");
        absl::StrAppend(&key, key.size() == step.op.size() ? " " : "+", name);
      }
      ProfileEntry &e = profileTotals[key];
      e.step = key;
      ++e.calls;
      e.seconds += std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - stepStart)
                       .count();
      if (runner) {
        e.bytesToDevice += runner->bytesToDevice - toDeviceBefore;
        e.bytesToHost += runner->bytesToHost - toHostBefore;
      }
    }
    for (Tensor *t : step.release) {
      liveBytes -= std::min<uint64_t>(liveBytes, t->data.capacity());
      pool.push_back(std::move(t->data));
      t->data = {};
      t->dims.clear();
    }
  }
  timing.peakTransientBytes = peakBytes;
  absl::Status finished = finish(true);
  // The sequence's caches may be freed before the next run: only live memory
  // stays in the bounds.
  for (auto &[id, cache] : seq->caches)
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
  std::vector<float> out(size_t(logits.numel()));
  std::memcpy(out.data(), logits.ptr(), out.size() * sizeof(float));
  return out;
}

//===----------------------------------------------------------------------===//
// Drivers
//===----------------------------------------------------------------------===//

absl::Status Executor::Impl::embed(Step &s) {
  Tensor &tok = tensor(s, "tokens");
  const checkpoint::TensorView &table = weight(s, "weight");
  const int64_t n = tok.rows(), dim = attr(s, "dim");
  Tensor &out = kernelResult(s, "result", 2, {n, dim}, tok.base);
  auto dt = desc<1>(tok.ptr(), {n});
  auto dw = desc<2>(table.data, {table.shape[0], dim});
  auto dout = desc<2>(out.ptr(), {n, dim});
  invoke(s, "main", &dt, &dw, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::hcExpand(Step &s) {
  Tensor &h = tensor(s, "input");
  const int64_t n = h.rows(), hc = attr(s, "hc"), dim = attr(s, "dim");
  Tensor &out = kernelResult(s, "result", 2, {n, hc, dim}, h.base);
  auto dh = desc<2>(h.ptr(), {n, dim});
  auto dout = desc<3>(out.ptr(), {n, hc, dim});
  invoke(s, "main", &dh, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::hcMix(Step &s) {
  Tensor &x = tensor(s, "streams");
  const int64_t n = x.rows(), hc = attr(s, "hc"), dim = attr(s, "dim");
  const int64_t mix = (2 + hc) * hc;
  Tensor &pre = kernelResult(s, "pre", 4, {n, hc}, x.base);
  Tensor &post = kernelResult(s, "post", 4, {n, hc}, x.base);
  Tensor &comb = kernelResult(s, "comb", 4, {n, hc, hc}, x.base);
  // The mix+1 long sums (dots and sum of squares), then the rest per row.
  Tensor &sums = kernelScratch("hc_mix.sums", 4, {n, mix + 1});
  auto dx = desc<3>(x.ptr(), {n, hc, dim});
  auto dfn = desc<2>(weight(s, "fn").data, {mix, hc * dim});
  auto dsums = desc<2>(sums.ptr(), {n, mix + 1});
  invoke(s, "sums", &dx, &dfn, &dsums);
  auto dbase = desc<1>(weight(s, "base").data, {mix});
  auto dscale = desc<1>(weight(s, "scale").data, {3});
  auto dpre = desc<2>(pre.ptr(), {n, hc});
  auto dpost = desc<2>(post.ptr(), {n, hc});
  auto dcomb = desc<3>(comb.ptr(), {n, hc, hc});
  invoke(s, "main", &dsums, &dbase, &dscale, &dpre, &dpost, &dcomb);
  return absl::OkStatus();
}

absl::Status Executor::Impl::hcCollapse(Step &s) {
  Tensor &x = tensor(s, "streams"), &pre = tensor(s, "pre");
  const int64_t n = x.rows(), hc = attr(s, "hc"), dim = attr(s, "dim");
  Tensor &out = kernelResult(s, "result", 2, {n, dim}, x.base);
  auto dx = desc<3>(x.ptr(), {n, hc, dim});
  auto dpre = desc<2>(pre.ptr(), {n, hc});
  auto dout = desc<2>(out.ptr(), {n, dim});
  invoke(s, "main", &dx, &dpre, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::hcUpdate(Step &s) {
  Tensor &x = tensor(s, "streams"), &y = tensor(s, "update"),
         &post = tensor(s, "post"), &comb = tensor(s, "comb");
  const int64_t n = x.rows(), hc = attr(s, "hc"), dim = attr(s, "dim");
  Tensor &out = kernelResult(s, "result", 2, {n, hc, dim}, x.base);
  auto dx = desc<3>(x.ptr(), {n, hc, dim});
  auto dy = desc<2>(y.ptr(), {n, dim});
  auto dpost = desc<2>(post.ptr(), {n, hc});
  auto dcomb = desc<3>(comb.ptr(), {n, hc, hc});
  auto dout = desc<3>(out.ptr(), {n, hc, dim});
  invoke(s, "main", &dx, &dy, &dpost,
         &dcomb, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::rmsNorm(Step &s) {
  Tensor &x = tensor(s, "input");
  const int64_t dim = attr(s, "dim"), rows = x.numel() / dim;
  std::vector<int64_t> dims = x.dims;
  Tensor &out = kernelResult(s, "result", 2, dims, x.base);
  auto dx = desc<2>(x.ptr(), {rows, dim});
  auto dw = desc<1>(weight(s, "weight").data, {dim});
  auto dout = desc<2>(out.ptr(), {rows, dim});
  invoke(s, "main", &dx, &dw, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::linearOp(Step &s) {
  Tensor &x = tensor(s, "input");
  const int64_t in = attr(s, "in"), out = attr(s, "out");
  const int64_t rows = x.numel() / in;
  const std::string format = s.call->attrs.at("format").get<std::string>();
  Tensor &y = kernelResult(s, "result", format == "f32" ? 4 : 2, {rows, out}, x.base);
  linear(s, "main", x.ptr(), rows, in, "", -1, y.ptr(), out);
  return absl::OkStatus();
}

absl::Status Executor::Impl::rope(Step &s) {
  Tensor &x = tensor(s, "input");
  auto pos = index(s, "position");
  if (!pos.ok())
    return pos.status();
  const int64_t dim = attr(s, "dim"), perPosition = attr(s, "rows_per_position");
  auto copied = resultCopyOf(s, "result", x, 0, 2, x.dims, x.base);
  if (!copied.ok())
    return copied.status();
  Tensor &out = **copied;
  auto d = desc<2>(out.ptr(), {out.numel() / dim, dim});
  invoke(s, "main", &d, int64_t(*pos), attr(s, "stride"),
         perPosition);
  return absl::OkStatus();
}

absl::Status Executor::Impl::quantize(Step &s) {
  Tensor &x = tensor(s, "input");
  const int64_t dim = attr(s, "dim"), rows = x.numel() / dim;
  const artifact::TransientBuffer *t =
      artifact->plan().findTransient(arg(s, "result").name);
  if (!t || t->shape.size() != 2 || t->shape.back() < 1)
    return absl::InvalidArgumentError("the quantized rows must be an i8 [rows, row_bytes] transient");
  const int64_t rowBytes = t->shape.back();
  Tensor &out = kernelResult(s, "result", 1, {rows, rowBytes}, x.base);
  auto dx = desc<2>(x.ptr(), {rows, dim});
  auto dout = desc<2>(out.ptr(), {rows, rowBytes});
  invoke(s, "main", &dx, &dout);
  return absl::OkStatus();
}

absl::StatusOr<Desc<2>> Executor::Impl::appendView(Step &s,
                                                   std::string_view cacheSlot,
                                                   int64_t start, int64_t n,
                                                   int64_t rowBytes) {
  CacheState &c = cache(s, cacheSlot);
  const CacheBuffer &b = cacheBuffer(s, cacheSlot);
  const std::string part = s.call->attrs.at("part").get<std::string>();
  if (part != "ring" && part != "main" && part != "index")
    return absl::InvalidArgumentError("attrs.part must be ring, main or index");
  if ((part == "ring") != (b.kind == CacheKind::SwaRing) ||
      (part != "ring" && b.kind != CacheKind::GlobalCache))
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", part, " store into '", b.id, "', a ", artifact::cacheKindName(b.kind)));
  if (part == "ring") {
    if (c.ringStart < 0)
      c.ringStart = start;
    c.ringEnd = start + n;
    return desc<2>(c.bytes.data(), {b.window, b.rowBytes});
  }
  const int64_t capacity = artifact->plan().maxContext / b.ratio;
  const int64_t end = start + n;
  if (end > capacity)
    return absl::OutOfRangeError(absl::StrCat(
        "cache '", b.id, "' would need ", end, " entries; the plan allows ",
        capacity, " (max_context ", artifact->plan().maxContext, ")"));
  if (int64_t(c.bytes.size()) < end * b.entryBytes) {
    // The entries written so far move with the buffer: on the device when it
    // holds them (a long context's cache is not downloaded and uploaded
    // whole), else on the host.
    GpuRunner::Detached moved;
    if (runner)
      moved = runner->detachDeviceCurrent(c.bytes.data());
    if (moved.bytes == 0) {
      onHost(c.bytes.data());
      if (runner)
        runner->forget(c.bytes.data());
    }
    bounds.remove(c.bytes.data());
    c.bytes.resize(size_t(std::min(capacity, std::max<int64_t>(
                                                 end, 2 * int64_t(c.bytes.size()) /
                                                          b.entryBytes)) *
                          b.entryBytes),
                   0);
    bounds.add(c.bytes.data(), c.bytes.size());
    if (moved.bytes != 0)
      runner->adoptOnDevice(c.bytes.data(), c.bytes.size(), moved);
    else
      hostRefilled(c.bytes.data());
  }
  const int64_t entries = int64_t(c.bytes.size()) / b.entryBytes;
  const int64_t offset = part == "main" ? 0 : b.mainRowBytes;
  int64_t &written = part == "main" ? c.mainEntries : c.indexEntries;
  written = std::max(written, end);
  // Entry e's main-KV row, then its index-key row: a strided view of one part.
  return Desc<2>{c.bytes.data(), c.bytes.data(), offset, {entries, rowBytes},
                 {b.entryBytes, 1}};
}

absl::Status Executor::Impl::cacheAppend(Step &s) {
  Tensor &rows = tensor(s, "rows");
  auto start = index(s, "position");
  if (!start.ok())
    return start.status();
  const int64_t n = rows.rows(), rowBytes = rows.dims.at(1);
  auto dc = appendView(s, "cache", *start, n, rowBytes);
  if (!dc.ok())
    return dc.status();
  auto dr = desc<2>(rows.ptr(), {n, rowBytes});
  int32_t missed = invokeAs<int32_t>(kernel(s, "main"), &dr, &*dc, int64_t(*start));
  if (missed != 0)
    return absl::InternalError(absl::StrCat(missed, " rows were not stored in '",
                                            arg(s, "cache").name, "' (a runtime bug)"));
  return absl::OkStatus();
}

absl::Status Executor::Impl::fusion(Step &s) {
  const std::string name = s.call->attrs.at("name").get<std::string>();
  if (name != "rope_quantize_store")
    return absl::UnimplementedError(absl::StrCat(
        "the CPU executor runs no kernel region '", name, "'"));
  Tensor &x = tensor(s, "input");
  auto ropePosition = index(s, "rope_position");
  if (!ropePosition.ok())
    return ropePosition.status();
  auto storePosition = index(s, "store_position");
  if (!storePosition.ok())
    return storePosition.status();
  const int64_t n = x.rows(), dim = attr(s, "dim");
  const artifact::TransientBuffer *t =
      artifact->plan().findTransient(arg(s, "rows").name);
  if (!t || t->shape.size() != 2 || t->shape.back() < 1)
    return absl::InvalidArgumentError("the rows of a region must be an i8 [rows, row_bytes] transient");
  const int64_t rowBytes = t->shape.back();
  // On the GPU the region runs as its parts when the plan names them (RoPE
  // and the quantizer a thread per element; the fused kernel is one thread,
  // since its store is ordered): the same operations on the same bytes.
  const bool parts = runner && s.kernels.count("rope") && s.kernels.count("quantize") &&
                     s.kernels.count("append") && s.call->attrs.contains("rope_stride");
  Tensor &rows = parts ? kernelResult(s, "rows", 1, {n, rowBytes}, x.base)
                       : result(s, "rows", 1, {n, rowBytes}, x.base);
  auto dc = appendView(s, "cache", *storePosition, n, rowBytes);
  if (!dc.ok())
    return dc.status();
  auto dx = desc<2>(x.ptr(), {n, dim});
  auto dr = desc<2>(rows.ptr(), {n, rowBytes});
  int32_t missed = 0;
  if (parts && n > 0) {
    const size_t bytes = size_t(n * dim * 2);
    if (x.data.size() < bytes)
      return absl::InvalidArgumentError("the region's input holds fewer bytes than [rows, dim] bf16");
    Tensor &rotated = scratch("fusion.rotated", 2, {n, dim});
    if (!runner->copyOnDevice(rotated.ptr(), x.ptr(), bytes)) {
      onHost(x.ptr());
      std::memcpy(rotated.ptr(), x.ptr(), bytes);
    }
    auto drot = desc<2>(rotated.ptr(), {n, dim});
    invoke(s, "rope", &drot, int64_t(*ropePosition),
           s.call->attrs.at("rope_stride").get<int64_t>(), int64_t(1));
    invoke(s, "quantize", &drot, &dr);
    missed = invokeAs<int32_t>(kernel(s, "append"), &dr, &*dc, int64_t(*storePosition));
  } else {
    missed = invokeAs<int32_t>(kernel(s, "main"), &dx, int64_t(*ropePosition),
                               int64_t(*storePosition), &*dc, &dr);
  }
  if (missed != 0)
    return absl::InternalError(absl::StrCat(missed, " rows were not stored in '",
                                            arg(s, "cache").name, "' (a runtime bug)"));
  return absl::OkStatus();
}

absl::Status Executor::Impl::compress(Step &s) {
  Tensor &x = tensor(s, "input");
  auto pos = index(s, "position");
  if (!pos.ok())
    return pos.status();
  const int64_t ratio = attr(s, "ratio"), in = attr(s, "in"), dim = attr(s, "dim");
  const int64_t n = x.rows();
  if (ratio == 1) {
    Tensor &latent = kernelScratch("compress.latent", 2, {n, dim});
    linear(s, "linear", x.ptr(), n, in, "wkv.", -1, latent.ptr(), dim);
    Tensor &out = kernelResult(s, "result", 2, {n, dim}, *pos);
    auto dl = desc<2>(latent.ptr(), {n, dim});
    auto dw = desc<1>(weight(s, "norm.weight").data, {dim});
    auto dout = desc<2>(out.ptr(), {n, dim});
    invoke(s, "norm", &dl, &dw, &dout);
    return absl::OkStatus();
  }
  CacheState &state = cache(s, "state");
  Tensor &kv = kernelScratch("compress.kv", 4, {n, dim});
  Tensor &score = kernelScratch("compress.score", 4, {n, dim});
  linear(s, "linear", x.ptr(), n, in, "wkv.", -1, kv.ptr(), dim);
  linear(s, "linear", x.ptr(), n, in, "wgate.", -1, score.ptr(), dim);
  const int64_t groups = (*pos + n) / ratio - *pos / ratio;
  Tensor &pooled = kernelScratch("compress.pooled", 2, {groups, dim});
  float *stateKv = reinterpret_cast<float *>(state.bytes.data());
  float *stateScore = stateKv + ratio * dim;
  auto dkv = desc<2>(kv.ptr(), {n, dim});
  auto dscore = desc<2>(score.ptr(), {n, dim});
  auto dsk = desc<2>(stateKv, {ratio, dim});
  auto dss = desc<2>(stateScore, {ratio, dim});
  auto dp = desc<2>(pooled.ptr(), {groups, dim});
  invoke(s, "pool", &dkv, &dscore, &dsk,
         &dss, int64_t(*pos), &dp);
  Tensor &out = kernelResult(s, "result", 2, {groups, dim}, *pos / ratio);
  auto dw = desc<1>(weight(s, "norm.weight").data, {dim});
  auto dout = desc<2>(out.ptr(), {groups, dim});
  invoke(s, "norm", &dp, &dw, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::indexScore(Step &s) {
  Tensor &q = tensor(s, "query"), &w = tensor(s, "head_weights");
  CacheState &c = cache(s, "cache");
  const CacheBuffer &b = cacheBuffer(s, "cache");
  const int64_t n = q.rows(), heads = attr(s, "heads"), dim = attr(s, "dim"),
                ratio = attr(s, "ratio");
  const int64_t keyBytes = b.indexRowBytes;
  // Queries through FP4 (E2M1, UE8M0 per 32), as the released indexer.
  Tensor &qRows = kernelScratch("index.qrows", 1, {n * heads, keyBytes});
  Tensor &qDeq = kernelScratch("index.q", 2, {n, heads, dim});
  auto dq = desc<2>(q.ptr(), {n * heads, dim});
  auto dqr = desc<2>(qRows.ptr(), {n * heads, keyBytes});
  auto dqd = desc<2>(qDeq.ptr(), {n * heads, dim});
  invoke(s, "quantize", &dq, &dqr);
  invoke(s, "dequantize", &dqr, &dqd);
  // Head weights times (heads * dim)^-1/2.
  Tensor &ws = kernelScratch("index.w", 2, {n, heads});
  auto dw = desc<2>(w.ptr(), {n, heads});
  auto dws = desc<2>(ws.ptr(), {n, heads});
  invoke(s, "scale", &dw, &dws);
  // The keys written so far.
  const int64_t width = (q.base + n) / ratio;
  const int64_t numKeys = std::min(width, c.indexEntries);
  Tensor &keys = kernelScratch("index.keys", 2, {numKeys, dim});
  Tensor &keyRows =
      gatherParts("index.key_rows", c, b, b.mainRowBytes, keyBytes, numKeys);
  auto dkr = desc<2>(keyRows.ptr(), {numKeys, keyBytes});
  auto dk = desc<2>(keys.ptr(), {numKeys, dim});
  if (numKeys > 0)
    invoke(s, "dequantize", &dkr, &dk);
  Tensor &visible = visibleEntries(q.base, n, ratio);
  Tensor &out = kernelResult(s, "scores", 4, {n, width}, q.base);
  auto dqq = desc<3>(qDeq.ptr(), {n, heads, dim});
  auto dv = desc<1>(visible.ptr(), {n});
  auto dout = desc<2>(out.ptr(), {n, width});
  invoke(s, "main", &dqq, &dk, &dws,
         &dv, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::hsiSelect(Step &s) {
  Tensor &scores = tensor(s, "scores");
  const int64_t n = scores.rows(), width = scores.dims.at(1),
                ratio = attr(s, "ratio"), blockSize = attr(s, "block_size");
  Tensor &visible = visibleEntries(scores.base, n, ratio);
  Tensor &mask = kernelResult(s, "pool", 1, {n, width}, scores.base);
  // Each block's score, then each block ranks itself.
  const int64_t numBlocks = (width + blockSize - 1) / blockSize;
  Tensor &blocks = kernelScratch("hsi.blocks", 4, {n, numBlocks});
  auto ds = desc<2>(scores.ptr(), {n, width});
  auto dv = desc<1>(visible.ptr(), {n});
  auto db = desc<2>(blocks.ptr(), {n, numBlocks});
  auto dm = desc<2>(mask.ptr(), {n, width});
  invoke(s, "blocks", &ds, &dv, &db);
  invoke(s, "main", &db, &dm);
  return absl::OkStatus();
}

absl::Status Executor::Impl::topk(Step &s) {
  Tensor &scores = tensor(s, "scores");
  const bool masked = s.layout.has("pool");
  const int64_t n = scores.rows(), width = scores.dims.at(1),
                ratio = attr(s, "ratio"), k = attr(s, "k");
  Tensor &visible = visibleEntries(scores.base, n, ratio);
  Tensor &out = kernelResult(s, "result", 4, {n, k}, scores.base);
  auto ds = desc<2>(scores.ptr(), {n, width});
  auto dv = desc<1>(visible.ptr(), {n});
  auto dout = desc<2>(out.ptr(), {n, k});
  // Which positions are in the top k (each position ranks itself), then
  // the picks in position order.
  Tensor &picked = kernelScratch("topk.picked", 1, {n, width});
  auto dp = desc<2>(picked.ptr(), {n, width});
  if (!masked) {
    invoke(s, "rank", &ds, &dp);
    invoke(s, "main", &dp, &dv, &dout);
    return absl::OkStatus();
  }
  // The pool answers by position: row i of the scores is the pool's row
  // (scores.base + i - pool.base); positions past its width are not in it.
  Tensor &pool = tensor(s, "pool");
  Tensor &mask = scratch("topk.mask", 1, {n, width});
  const int64_t poolWidth = pool.dims.at(1);
  const int64_t firstRow = scores.base - pool.base;
  if (firstRow < 0 || firstRow + n > pool.rows())
    return absl::InternalError(absl::StrCat(
        "the candidate pool has no rows for positions ", scores.base, "..",
        scores.base + n - 1, " (it covers ", pool.base, "..",
        pool.base + pool.rows() - 1, ")"));
  // The pool's rows are the mask's when they are as wide (a decode step's one
  // row): a copy where the pool is, not a read-back.
  const bool copied = runner && width == poolWidth &&
                      runner->copyOnDevice(mask.ptr(),
                                           pool.as<uint8_t>() + firstRow * poolWidth,
                                           size_t(n * width));
  if (!copied) {
    onHost(pool.ptr());
    std::fill(mask.data.begin(), mask.data.end(), 0);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(mask.as<uint8_t>() + i * width,
                  pool.as<uint8_t>() + (firstRow + i) * poolWidth,
                  size_t(std::min(width, poolWidth)));
  }
  auto dm = desc<2>(mask.ptr(), {n, width});
  invoke(s, "rank", &ds, &dm, &dp);
  invoke(s, "main", &dp, &dv, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::sparseAttention(Step &s) {
  Tensor &q = tensor(s, "query");
  CacheState &ring = cache(s, "window");
  const CacheBuffer &ringBuffer = cacheBuffer(s, "window");
  Tensor &fresh = tensor(s, "fresh");
  auto pos = index(s, "position");
  if (!pos.ok())
    return pos.status();
  const bool global = s.layout.has("cache");
  const int64_t n = q.rows(), heads = attr(s, "heads"), dim = attr(s, "dim"),
                window = attr(s, "window");
  const float scale = float(s.call->attrs.at("scale").get<double>());
  const int64_t rowBytes = ringBuffer.rowBytes;

  // Window rows. Before this call the ring held positions [ringStart, pos)
  // (the call's rows were appended already): either none (a fresh ring, the
  // layers bounded replay starts late) or, for one decode token, the ring.
  const bool ringEmptyBefore = ring.ringStart >= *pos;
  if (!ringEmptyBefore && n != 1)
    return absl::UnimplementedError(
        "a multi-token step on a sequence whose ring already holds rows "
        "(chunked prefill) is not supported by the CPU executor");
  const int64_t windowRows = ringEmptyBefore ? n : window;
  const int64_t windowWidth = ringEmptyBefore ? std::min(n, window) : window;

  // Selected rows: the global cache's main-KV entries the top-k sets name.
  Tensor *selected = global ? &tensor(s, "selected") : nullptr;
  if (selected && (selected->elementBytes != 4 || selected->dims.size() != 2))
    return absl::InvalidArgumentError("the selected positions are not an i32 [rows, k] top-k set");
  const int64_t k = global ? selected->dims.at(1) : 0;
  // One query row (a decode step): its top-k set is gathered as it is, row
  // windowRows + j holding entry set[j], and the index list's selected part
  // is built where the set is (selected_index), so nothing is read back. The
  // attention walks the same entries in the same order either way.
  const bool inSetOrder = global && n == 1 && s.kernels.count("gather_selected") &&
                          s.kernels.count("selected_index");
  const int32_t *setRow = nullptr;
  if (global) {
    const int64_t selRow = q.base - selected->base;
    if (selRow < 0 || selRow + n > selected->rows())
      return absl::InternalError(absl::StrCat(
          "the top-k set has no rows for positions ", q.base, "..", q.base + n - 1));
    setRow = selected->as<int32_t>() + selRow * k;
  }
  // Otherwise only the entries some top-k set names are gathered and
  // dequantized (a prefill's sets overlap), in ascending order; row
  // windowRows + slot[e] holds entry e.
  std::vector<int32_t> used, slot;
  if (global && !inSetOrder) {
    onHost(selected->ptr());
    const int32_t *sel = selected->as<int32_t>();
    const int64_t held = cache(s, "cache").mainEntries;
    slot.assign(size_t(held), -1);
    for (int64_t i = 0; i < selected->numel(); ++i) {
      if (sel[i] < 0)
        continue;
      if (sel[i] >= held)
        return absl::InternalError(absl::StrCat(
            "a top-k set names entry ", sel[i], " of '", arg(s, "cache").name,
            "', which holds ", held));
      slot[size_t(sel[i])] = 0;
    }
    for (int64_t e = 0; e < held; ++e)
      if (slot[size_t(e)] == 0) {
        slot[size_t(e)] = int32_t(used.size());
        used.push_back(int32_t(e));
      }
  }
  const int64_t entries = inSetOrder ? k : int64_t(used.size());
  // Indices per query: the window (in position order, -1 where nothing
  // is held), then the selected entries after the window rows.
  const int64_t width = windowWidth + k;
  Tensor &idx = scratch("attention.idx", 4, {n, width});
  int32_t *ix = idx.as<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    int32_t *row = ix + i * width;
    if (ringEmptyBefore) {
      const int64_t first = std::max<int64_t>(0, i - window + 1);
      for (int64_t j = 0; j < windowWidth; ++j)
        row[j] = first + j > i ? -1 : int32_t(first + j);
    } else {
      // The ring's slots oldest to newest; slots of positions before the
      // ring's first row hold nothing.
      const int64_t oldest = *pos % window + 1;
      for (int64_t j = 0; j < window; ++j) {
        const int64_t slot = (oldest + j) % window;
        const int64_t p = *pos - window + 1 + j; // the position in that slot
        row[j] = (slot > *pos || p < ring.ringStart) ? -1 : int32_t(slot);
      }
    }
    if (global && !inSetOrder) {
      const int32_t *sel = setRow + i * k;
      for (int64_t j = 0; j < k; ++j)
        row[windowWidth + j] =
            sel[j] < 0 ? -1 : int32_t(windowRows + slot[size_t(sel[j])]);
    }
  }
  // The host's index lists go to the GPU now, before this step's launches,
  // so that those are one run (one graph; LaunchGraphs).
  Tensor *which = nullptr;
  if (global && entries > 0 && s.kernels.count("gather_selected") && !inSetOrder) {
    which = &scratch("attention.which", 4, {entries});
    std::memcpy(which->ptr(), used.data(), used.size() * sizeof(int32_t));
    uploadNow(which->ptr());
  }
  uploadNow(idx.ptr());
  if (inSetOrder && k > 0) {
    auto dsel = desc<2>(setRow, {n, k});
    auto didx = desc<2>(idx.ptr(), {n, width});
    invoke(s, "selected_index", &dsel, &didx, int64_t(windowWidth), int64_t(windowRows));
  }
  Tensor &rows = kernelScratch("attention.rows", 2, {windowRows + entries, dim});
  {
    const uint8_t *src = ringEmptyBefore ? fresh.as<uint8_t>() : ring.bytes.data();
    auto dr = desc<2>(src, {windowRows, rowBytes});
    auto dv = desc<2>(rows.ptr(), {windowRows, dim});
    if (windowRows > 0)
      invoke(s, "dequantize_window", &dr, &dv);
  }
  // A set of an empty cache names nothing (all -1): no rows to gather.
  if (global && entries > 0 && (!inSetOrder || cache(s, "cache").mainEntries > 0)) {
    CacheState &c = cache(s, "cache");
    const CacheBuffer &b = cacheBuffer(s, "cache");
    Tensor *gathered = nullptr;
    if (s.kernels.count("gather_selected")) {
      // A kernel gathers them where the cache is (on the GPU path one launch
      // instead of a copy per run of consecutive entries).
      Tensor &rowsOut = kernelScratch("attention.main_rows", 1, {entries, b.mainRowBytes});
      auto dc = desc<1>(c.bytes.data(), {int64_t(c.bytes.size())});
      auto dw = desc<1>(inSetOrder ? setRow : which->ptr(), {entries});
      auto dr = desc<2>(rowsOut.ptr(), {entries, b.mainRowBytes});
      invoke(s, "gather_selected", &dc, &dw, &dr, int64_t(b.entryBytes), int64_t(0));
      gathered = &rowsOut;
    } else {
      gathered = &gatherParts("attention.main_rows", c, b, 0, b.mainRowBytes, entries, &used);
    }
    Tensor &mainRows = *gathered;
    auto dm = desc<2>(mainRows.ptr(), {entries, b.mainRowBytes});
    auto dv = desc<2>(rows.as<uint16_t>() + windowRows * dim, {entries, dim});
    invoke(s, "dequantize_selected", &dm, &dv);
  }

  Tensor &out = kernelResult(s, "result", 2, {n, heads, dim}, q.base);
  auto dq = desc<3>(q.ptr(), {n, heads, dim});
  auto drows = desc<2>(rows.ptr(), {windowRows + entries, dim});
  auto didx = desc<2>(idx.ptr(), {n, width});
  auto dsink = desc<1>(weight(s, "sink").data, {heads});
  auto dout = desc<3>(out.ptr(), {n, heads, dim});
  invoke(s, "main", &dq, &drows, &didx,
         &dsink, scale, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::moe(Step &s) {
  Tensor &x = tensor(s, "input");
  const int64_t n = x.rows(), dim = attr(s, "dim"), experts = attr(s, "experts"),
                topK = attr(s, "top_k"), inter = attr(s, "inter");

  Tensor &logitsBuf = kernelScratch("moe.logits", 4, {n, experts});
  linear(s, "gate", x.ptr(), n, dim, "gate.", -1, logitsBuf.ptr(), experts);
  Tensor &ids = kernelScratch("moe.ids", 4, {n, topK});
  Tensor &wts = kernelScratch("moe.weights", 4, {n, topK});
  {
    auto dl = desc<2>(logitsBuf.ptr(), {n, experts});
    auto db = desc<1>(weight(s, "gate.bias").data, {experts});
    auto di = desc<2>(ids.ptr(), {n, topK});
    auto dw = desc<2>(wts.ptr(), {n, topK});
    invoke(s, "route", &dl, &db, &di, &dw);
  }
  Tensor &y = kernelZeros("moe.y", 4, {n, dim});
  // Each expert's tokens in token order, with their routing weights: one
  // list per expert, ascending expert (a counting sort of the routing, once
  // per layer; the gather kernel copies the rows).
  onHost(ids.ptr());
  onHost(wts.ptr());
  std::vector<int64_t> first(size_t(experts) + 1, 0);
  const int32_t *idAt = ids.as<int32_t>();
  for (int64_t i = 0; i < n * topK; ++i)
    if (idAt[i] >= 0 && idAt[i] < experts)
      ++first[size_t(idAt[i]) + 1];
  for (int64_t e = 0; e < experts; ++e)
    first[size_t(e) + 1] += first[size_t(e)];
  Tensor &rowIndex = scratch("moe.row_index", 4, {std::max<int64_t>(first.back(), 1)});
  Tensor &rowWeight = scratch("moe.row_weight", 4, {std::max<int64_t>(first.back(), 1)});
  {
    std::vector<int64_t> next(first.begin(), first.end() - 1);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t slot = 0; slot < topK; ++slot) {
        const int32_t e = idAt[r * topK + slot];
        if (e < 0 || e >= experts)
          continue;
        const int64_t at = next[size_t(e)]++;
        rowIndex.as<int32_t>()[at] = int32_t(r);
        rowWeight.as<float>()[at] = wts.as<float>()[r * topK + slot];
      }
  }
  Tensor &ones = scratch("moe.ones", 4, {n});
  std::fill(ones.as<float>(), ones.as<float>() + n, 1.f);
  // Right after the routing came back nothing waits to launch: the lists go
  // to the GPU now, so the experts' launches below are one run.
  uploadNow(rowIndex.ptr());
  uploadNow(rowWeight.ptr());
  uploadNow(ones.ptr());
  // An expert has at most n rows unless the routing repeats it in a row.
  int64_t capacity = n;
  for (int64_t e = 0; e < experts; ++e)
    capacity = std::max(capacity, first[size_t(e) + 1] - first[size_t(e)]);
  Tensor &rows = kernelScratch("moe.rows", 2, {capacity, dim});
  Tensor &g = kernelScratch("moe.g", 2, {capacity, inter});
  Tensor &up = kernelScratch("moe.up", 2, {capacity, inter});
  Tensor &h = kernelScratch("moe.h", 2, {capacity, inter});
  Tensor &o = kernelScratch("moe.o", 2, {capacity, dim});
  auto dx = desc<2>(x.ptr(), {n, dim});
  auto dy = desc<2>(y.ptr(), {n, dim});
  // Routed experts in ascending id, as model.py accumulates them.
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t c = first[size_t(e) + 1] - first[size_t(e)];
    if (c == 0)
      continue;
    int32_t *index = rowIndex.as<int32_t>() + first[size_t(e)];
    float *weightOf = rowWeight.as<float>() + first[size_t(e)];
    auto drows = desc<2>(rows.ptr(), {c, dim});
    auto dri = desc<1>(index, {c});
    invoke(s, "gather", &dx, &dri, &drows);
    linear(s, "expert_in", rows.ptr(), c, dim, "w1.", e, g.ptr(), inter);
    linear(s, "expert_in", rows.ptr(), c, dim, "w3.", e, up.ptr(), inter);
    auto dg = desc<2>(g.ptr(), {c, inter});
    auto du = desc<2>(up.ptr(), {c, inter});
    auto dcw = desc<1>(weightOf, {c});
    auto dh = desc<2>(h.ptr(), {c, inter});
    invoke(s, "swiglu", &dg, &du, &dcw, &dh);
    linear(s, "expert_out", h.ptr(), c, inter, "w2.", e, o.ptr(), dim);
    auto dout = desc<2>(o.ptr(), {c, dim});
    auto dci = desc<1>(index, {c});
    invoke(s, "accumulate", &dy, &dout, &dci);
  }
  // The shared expert on every row, weight 1.
  linear(s, "shared_in", x.ptr(), n, dim, "shared.w1.", -1, g.ptr(), inter);
  linear(s, "shared_in", x.ptr(), n, dim, "shared.w3.", -1, up.ptr(), inter);
  {
    auto dg = desc<2>(g.ptr(), {n, inter});
    auto du = desc<2>(up.ptr(), {n, inter});
    auto d1 = desc<1>(ones.ptr(), {n});
    auto dh = desc<2>(h.ptr(), {n, inter});
    invoke(s, "swiglu", &dg, &du, &d1, &dh);
  }
  linear(s, "shared_out", h.ptr(), n, inter, "shared.w2.", -1, o.ptr(), dim);
  Tensor &out = kernelResult(s, "result", 2, {n, dim}, x.base);
  auto dsh = desc<2>(o.ptr(), {n, dim});
  auto dout = desc<2>(out.ptr(), {n, dim});
  invoke(s, "finish", &dy, &dsh, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::engram(Step &s) {
  Tensor &streams = tensor(s, "streams");
  auto pos = index(s, "position");
  if (!pos.ok())
    return pos.status();
  const int64_t n = streams.rows(), hc = attr(s, "hc"), dim = attr(s, "dim"),
                maxNgram = attr(s, "max_ngram"), cols = attr(s, "columns"),
                headDim = attr(s, "head_dim"),
                compressedVocab = attr(s, "compressed_vocab");
  if (int64_t(engramMap.size()) != vocab) {
    // The tokenizer's compressed-token map; without a tokenizer, t mod the
    // compressed vocabulary (models/reference/EngramHash.h).
    engramMap.resize(size_t(vocab));
    for (int64_t t = 0; t < vocab; ++t)
      engramMap[size_t(t)] = t % compressedVocab;
    bounds.add(engramMap.data(), engramMap.size() * sizeof(int64_t));
    hostRefilled(engramMap.data());
  }
  // The history from max(0, start - (maxNgram - 1)) to the step's last token.
  const int64_t first = std::max<int64_t>(0, *pos - (maxNgram - 1));
  if (*pos > int64_t(seq->history.size()) ||
      n > int64_t(seq->history.size()) - *pos)
    return absl::InternalError("the token history is shorter than the step");
  const int64_t last = *pos + n;
  Tensor &hist = scratch("engram.history", 4, {last - first});
  std::memcpy(hist.ptr(), seq->history.data() + first,
              size_t(last - first) * sizeof(int32_t));
  Tensor &ids = kernelScratch("engram.ids", 8, {n, cols});
  auto dt = desc<1>(hist.ptr(), {last - first});
  auto dmap = desc<1>(engramMap.data(), {vocab});
  auto dids = desc<2>(ids.ptr(), {n, cols});
  invoke(s, "hash", &dt, &dmap, int64_t(first),
         int64_t(*pos), &dids);
  const checkpoint::TensorView &table = weight(s, "embed.weight"),
                               &tableScale = weight(s, "embed.scale");
  Tensor &rows = kernelScratch("engram.rows", 2, {n, cols * headDim});
  auto dtab = desc<2>(table.data, {table.shape[0], headDim});
  auto dts = desc<2>(tableScale.data, {tableScale.shape[0], headDim / 32});
  auto drows = desc<2>(rows.ptr(), {n, cols * headDim});
  invoke(s, "gather", &dids, &dtab, &dts,
         &drows);
  Tensor &kv = kernelScratch("engram.kv", 2, {n, (hc + 1) * dim});
  linear(s, "linear", rows.ptr(), n, cols * headDim, "wkv.", -1, kv.ptr(),
         (hc + 1) * dim);
  auto copied = resultCopyOf(s, "result", streams, 0, 2, {n, hc, dim}, streams.base);
  if (!copied.ok())
    return copied.status();
  Tensor &out = **copied;
  auto dout = desc<3>(out.ptr(), {n, hc, dim});
  auto dkv = desc<2>(kv.ptr(), {n, (hc + 1) * dim});
  auto dq = desc<2>(weight(s, "q_weight").data, {hc, dim});
  auto dk = desc<2>(weight(s, "k_weight").data, {hc, dim});
  invoke(s, "gate", &dout, &dkv, &dq, &dk);
  return absl::OkStatus();
}

absl::Status Executor::Impl::lmHead(Step &s) {
  Tensor &x = tensor(s, "input");
  const int64_t dim = attr(s, "dim"), vocabOut = attr(s, "vocab");
  const bool lastOnly = s.call->attrs.at("last_only").get<bool>();
  const int64_t rows = lastOnly ? 1 : x.rows();
  if (x.rows() < 1 || x.numel() != x.rows() * dim)
    return absl::InvalidArgumentError(absl::StrCat(
        "the head's input is not [rows >= 1, ", dim, "]"));
  const uint16_t *in = x.as<uint16_t>() + (lastOnly ? (x.rows() - 1) * dim : 0);
  Tensor &out = kernelResult(s, "result", 4, {rows, vocabOut}, x.base);
  linear(s, "main", in, rows, dim, "", -1, out.ptr(), vocabOut);
  return absl::OkStatus();
}

absl::Status Executor::Impl::sliceRows(Step &s) {
  Tensor &src = tensor(s, "source");
  auto offset = index(s, "offset");
  if (!offset.ok())
    return offset.status();
  auto count = index(s, "size");
  if (!count.ok())
    return count.status();
  if (src.dims.empty())
    return absl::InvalidArgumentError("slices a value no step has written");
  if (*offset > src.rows() || *count > src.rows() - *offset)
    return absl::InternalError(absl::StrCat("rows [", *offset, ", ",
                                            *offset + *count, ") of a value with ",
                                            src.rows(), " rows"));
  std::vector<int64_t> dims = src.dims;
  dims[0] = *count;
  const int64_t rowBytes = src.numel() / std::max<int64_t>(src.rows(), 1) * src.elementBytes;
  auto copied = resultCopyOf(s, "result", src, size_t(*offset * rowBytes),
                             src.elementBytes, dims, src.base + *offset);
  return copied.ok() ? absl::OkStatus() : copied.status();
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
  auto impl = std::make_unique<Impl>();
  impl->artifact = &artifact;
  impl->checkpoint = &checkpoint;
  impl->options = options;
  if (absl::Status st = impl->load(); !st.ok())
    return st;
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

Sequence Executor::newSequence() const {
  Sequence seq;
  for (const CacheBuffer &b : impl->artifact->plan().caches) {
    CacheState &c = seq.caches[b.id];
    if (b.kind == CacheKind::SwaRing) {
      c.bytes.assign(size_t(b.fixedBytes), 0);
    } else if (b.kind == CacheKind::CompressorState) {
      // kv then score, [ratio x dim] fp32 each; an empty slot scores -inf.
      c.bytes.assign(size_t(b.fixedBytes), 0);
      float *f = reinterpret_cast<float *>(c.bytes.data());
      const size_t half = size_t(b.fixedBytes) / 8;
      std::fill(f + half, f + 2 * half, kNegInf);
    }
  }
  return seq;
}

namespace {
/// The dimension whose `format` row is `bytes` long (a multiple of 32 up to
/// 16384), or 0.
size_t rowDim(numerics::RowFormat format, int64_t bytes) {
  for (size_t dim = 32; dim <= 16384; dim += 32)
    if (int64_t(numerics::rowBytes(format, dim)) == bytes)
      return dim;
  return 0;
}
} // namespace

absl::StatusOr<Sequence> Executor::syntheticSequence(int64_t position,
                                                     uint64_t seed) const {
  const artifact::Plan &plan = impl->artifact->plan();
  if (position < 1)
    return absl::InvalidArgumentError("a synthetic context needs position >= 1");
  if (absl::Status st = artifact::checkContext(plan, position + 1); !st.ok())
    return st;
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int32_t> token(0, int32_t(impl->vocab - 1));
  Sequence seq = newSequence();
  seq.position = position;
  seq.history.resize(size_t(position));
  for (int32_t &t : seq.history)
    t = token(gen);
  std::vector<float> values;
  // Encodes `count` rows of random values in `format` at `stride` apart.
  auto fill = [&](const CacheBuffer &b, numerics::RowFormat format,
                  int64_t rowBytes, uint8_t *first, int64_t count,
                  int64_t stride) -> absl::Status {
    const size_t dim = rowDim(format, rowBytes);
    if (dim == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "cache '", b.id, "': a row of ", rowBytes, " bytes is no known format"));
    values.resize(dim);
    for (int64_t e = 0; e < count; ++e) {
      for (float &v : values)
        v = normal(gen);
      numerics::quantizeRow(format, values.data(), dim, first + e * stride);
    }
    return absl::OkStatus();
  };
  for (const CacheBuffer &b : plan.caches) {
    CacheState &c = seq.caches[b.id];
    absl::Status st;
    if (b.kind == CacheKind::SwaRing) {
      st = fill(b, numerics::RowFormat::SwaKvFp8, b.rowBytes, c.bytes.data(),
                b.window, b.rowBytes);
      c.ringStart = std::max<int64_t>(0, position - b.window);
      c.ringEnd = position;
    } else if (b.kind == CacheKind::GlobalCache) {
      const int64_t entries = b.entriesAt(position);
      c.bytes.assign(size_t(entries * b.entryBytes), 0);
      const int64_t mainBytes = b.mainRowBytes ? b.mainRowBytes : b.entryBytes;
      st = fill(b, numerics::RowFormat::MainKvFp4, mainBytes, c.bytes.data(),
                entries, b.entryBytes);
      if (st.ok() && b.indexRowBytes)
        st = fill(b, numerics::RowFormat::IndexKeyFp4, b.indexRowBytes,
                  c.bytes.data() + mainBytes, entries, b.entryBytes);
      c.mainEntries = entries;
      c.indexEntries = b.indexRowBytes ? entries : 0;
    } else if (b.kind == CacheKind::CompressorState && b.ratio > 1) {
      // kv then score, [ratio x dim] fp32 each: the partial group's rows.
      float *f = reinterpret_cast<float *>(c.bytes.data());
      const int64_t dim = b.fixedBytes / (8 * b.ratio);
      const int64_t rows = position % b.ratio;
      for (int64_t i = 0; i < rows * dim; ++i) {
        f[i] = normal(gen);
        f[b.ratio * dim + i] = normal(gen);
      }
    }
    if (!st.ok())
      return st;
  }
  return seq;
}

absl::StatusOr<std::vector<float>>
Executor::prefill(Sequence &sequence, const std::vector<int32_t> &tokens) {
  if (sequence.position != 0)
    return absl::FailedPreconditionError(
        "prefill runs once, at position 0; use decode afterwards");
  if (tokens.empty())
    return absl::InvalidArgumentError("prefill needs at least one token");
  for (int32_t t : tokens)
    if (t < 0 || t >= impl->vocab)
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", t, " is outside the vocabulary of ", impl->vocab));
  if (absl::Status st = artifact::checkContext(impl->artifact->plan(),
                                               int64_t(tokens.size()));
      !st.ok())
    return st;
  BoundsScope scope(&impl->bounds);
  // A prefill starts from fresh caches, also after a failed one (the old
  // ones' device copies, if this executor holds them, go).
  if (sequence.cachesHeldBy == impl->id)
    impl->releaseHeld(sequence, /*download=*/false);
  sequence = newSequence();
  impl->seq = &sequence;
  impl->position = 0;
  impl->numTokens = int64_t(tokens.size());
  sequence.history = tokens;
  impl->tokens.elementBytes = 4;
  impl->tokens.resize({impl->numTokens});
  impl->tokens.base = 0;
  std::memcpy(impl->tokens.ptr(), tokens.data(), tokens.size() * 4);
  auto logits = impl->run(impl->prefillSteps);
  if (logits.ok())
    sequence.position = impl->numTokens;
  return logits;
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

ExecutorOptions::Device Executor::device() const { return impl->options.device; }

const std::string &Executor::deviceNote() const { return impl->deviceNote; }

const artifact::Plan &Executor::plan() const { return impl->artifact->plan(); }
int64_t Executor::vocabSize() const { return impl->vocab; }
const StepTiming &Executor::lastTiming() const { return impl->timing; }

void Executor::resetProfile() { impl->profileTotals.clear(); }

std::vector<ProfileEntry> Executor::profile() const {
  std::vector<ProfileEntry> out;
  for (const auto &[key, e] : impl->profileTotals)
    out.push_back(e);
  std::sort(out.begin(), out.end(), [](const ProfileEntry &a, const ProfileEntry &b) {
    return a.seconds > b.seconds || (a.seconds == b.seconds && a.step < b.step);
  });
  return out;
}

} // namespace csa::runtime

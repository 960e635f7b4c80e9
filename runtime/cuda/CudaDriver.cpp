//===- CudaDriver.cpp - The CUDA driver API through dlopen ----------------===//
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/LaunchGraphs.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <cstdlib>
#include <dlfcn.h>

namespace csa::cuda {

namespace {
using CUresult = int;
using CUdevice = int;
constexpr CUresult kSuccess = 0;
// cuModuleLoadDataEx options (cuda.h CUjit_option).
constexpr int kJitErrorLogBuffer = 5;
constexpr int kJitErrorLogBufferSizeBytes = 6;
constexpr unsigned kStreamNonBlocking = 1; // CU_STREAM_NON_BLOCKING
using Stream = void *;                     // CUstream
using Graph = void *;                      // CUgraph
using GraphExec = void *;                  // CUgraphExec
using GraphNode = void *;                  // CUgraphNode
/// CUgraphEdgeData: a programmatic edge (from port 1,
/// CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC; type 1,
/// CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC) lets the downstream kernel launch
/// once every block of the upstream one has run griddepcontrol.launch_dependents.
struct GraphEdgeData {
  unsigned char fromPort = 0, toPort = 0, type = 0, reserved[5] = {};
};

/// cuda.h's CUDA_KERNEL_NODE_PARAMS (_v2).
struct KernelNodeParams {
  Function func = nullptr;
  unsigned gridDimX = 1, gridDimY = 1, gridDimZ = 1;
  unsigned blockDimX = 1, blockDimY = 1, blockDimZ = 1;
  unsigned sharedMemBytes = 0;
  void **kernelParams = nullptr;
  void **extra = nullptr;
  void *kern = nullptr; ///< CUkernel (unused: func is set)
  void *ctx = nullptr;  ///< CUcontext (ignored when func is set)
};
} // namespace

/// The driver entry points csa uses, resolved by name (the _v2 ABI where
/// cuda.h maps to it).
struct Driver::Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(void **, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(void *);
  CUresult (*cuModuleLoadDataEx)(Module *, const void *, unsigned, int *, void **);
  CUresult (*cuModuleGetFunction)(Function *, Module, const char *);
  CUresult (*cuMemAlloc)(DevicePtr *, size_t);
  CUresult (*cuMemFree)(DevicePtr);
  CUresult (*cuLaunchKernel)(Function, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, void *, void **,
                             void **);
  CUresult (*cuStreamCreate)(Stream *, unsigned);
  CUresult (*cuStreamDestroy)(Stream);
  CUresult (*cuStreamSynchronize)(Stream);
  CUresult (*cuMemcpyHtoDAsync)(DevicePtr, const void *, size_t, Stream);
  CUresult (*cuMemcpyDtoHAsync)(void *, DevicePtr, size_t, Stream);
  CUresult (*cuMemcpyDtoDAsync)(DevicePtr, DevicePtr, size_t, Stream);
  CUresult (*cuMemsetD8Async)(DevicePtr, unsigned char, size_t, Stream);
  CUresult (*cuMemcpy2DAsync)(const void *, Stream); ///< a Memcpy2D (below)
  CUresult (*cuGraphCreate)(Graph *, unsigned);
  CUresult (*cuGraphAddKernelNode)(GraphNode *, Graph, const GraphNode *, size_t,
                                   const KernelNodeParams *);
  CUresult (*cuGraphAddDependencies)(Graph, const GraphNode *, const GraphNode *,
                                     const GraphEdgeData *, size_t);
  CUresult (*cuGraphInstantiateWithFlags)(GraphExec *, Graph, unsigned long long);
  CUresult (*cuGraphExecKernelNodeSetParams)(GraphExec, GraphNode,
                                             const KernelNodeParams *);
  CUresult (*cuGraphLaunch)(GraphExec, Stream);
  CUresult (*cuGraphExecDestroy)(GraphExec);
  CUresult (*cuGraphDestroy)(Graph);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  CUresult (*cuCtxSetLimit)(int, size_t);
  CUresult (*cuEventCreate)(Event *, unsigned);
  CUresult (*cuEventRecord)(Event, void *);
  CUresult (*cuEventSynchronize)(Event);
  CUresult (*cuEventElapsedTime)(float *, Event, Event);
  CUresult (*cuEventDestroy)(Event);
  CUresult (*cuMemAllocHost)(void **, size_t);
  CUresult (*cuMemFreeHost)(void *);
  /// Optional (null where the library lacks them): the profilers' capture
  /// range (ncu --profile-from-start off).
  CUresult (*cuProfilerStart)();
  CUresult (*cuProfilerStop)();
};

namespace {

absl::Status check(const Driver::Api &api, CUresult rc, const char *what) {
  if (rc == kSuccess)
    return absl::OkStatus();
  const char *text = nullptr;
  if (api.cuGetErrorString)
    api.cuGetErrorString(rc, &text);
  return absl::InternalError(absl::StrCat(what, " failed: CUDA error ", rc,
                                          text ? std::string(" (") + text + ")"
                                               : std::string()));
}

} // namespace

absl::StatusOr<std::unique_ptr<Driver>> Driver::open(int ordinal,
                                                     const std::string &library,
                                                     size_t mallocHeapBytes) {
  void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return absl::FailedPreconditionError(absl::StrCat(
        "no NVIDIA driver: cannot load ", library, " (", dlerror(), ")"));
  std::unique_ptr<Driver> driver(new Driver());
  driver->handle_ = handle;
  driver->api_ = std::make_unique<Api>();
  Api &api = *driver->api_;
  struct Entry {
    const char *name;
    void **slot;
  };
  const Entry entries[] = {
      {"cuInit", reinterpret_cast<void **>(&api.cuInit)},
      {"cuDeviceGet", reinterpret_cast<void **>(&api.cuDeviceGet)},
      {"cuDeviceGetName", reinterpret_cast<void **>(&api.cuDeviceGetName)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void **>(&api.cuDevicePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease_v2", reinterpret_cast<void **>(&api.cuDevicePrimaryCtxRelease)},
      {"cuCtxSetCurrent", reinterpret_cast<void **>(&api.cuCtxSetCurrent)},
      {"cuModuleLoadDataEx", reinterpret_cast<void **>(&api.cuModuleLoadDataEx)},
      {"cuModuleGetFunction", reinterpret_cast<void **>(&api.cuModuleGetFunction)},
      {"cuMemAlloc_v2", reinterpret_cast<void **>(&api.cuMemAlloc)},
      {"cuMemFree_v2", reinterpret_cast<void **>(&api.cuMemFree)},
      {"cuLaunchKernel", reinterpret_cast<void **>(&api.cuLaunchKernel)},
      {"cuGetErrorString", reinterpret_cast<void **>(&api.cuGetErrorString)},
      {"cuCtxSetLimit", reinterpret_cast<void **>(&api.cuCtxSetLimit)},
      {"cuEventCreate", reinterpret_cast<void **>(&api.cuEventCreate)},
      {"cuMemAllocHost_v2", reinterpret_cast<void **>(&api.cuMemAllocHost)},
      {"cuMemFreeHost", reinterpret_cast<void **>(&api.cuMemFreeHost)},
      {"cuEventRecord", reinterpret_cast<void **>(&api.cuEventRecord)},
      {"cuEventSynchronize", reinterpret_cast<void **>(&api.cuEventSynchronize)},
      {"cuEventElapsedTime", reinterpret_cast<void **>(&api.cuEventElapsedTime)},
      {"cuEventDestroy_v2", reinterpret_cast<void **>(&api.cuEventDestroy)},
      {"cuStreamCreate", reinterpret_cast<void **>(&api.cuStreamCreate)},
      {"cuStreamDestroy_v2", reinterpret_cast<void **>(&api.cuStreamDestroy)},
      {"cuStreamSynchronize", reinterpret_cast<void **>(&api.cuStreamSynchronize)},
      {"cuMemcpyHtoDAsync_v2", reinterpret_cast<void **>(&api.cuMemcpyHtoDAsync)},
      {"cuMemcpyDtoHAsync_v2", reinterpret_cast<void **>(&api.cuMemcpyDtoHAsync)},
      {"cuMemcpyDtoDAsync_v2", reinterpret_cast<void **>(&api.cuMemcpyDtoDAsync)},
      {"cuMemsetD8Async", reinterpret_cast<void **>(&api.cuMemsetD8Async)},
      {"cuMemcpy2DAsync_v2", reinterpret_cast<void **>(&api.cuMemcpy2DAsync)},
      {"cuGraphCreate", reinterpret_cast<void **>(&api.cuGraphCreate)},
      {"cuGraphAddKernelNode_v2", reinterpret_cast<void **>(&api.cuGraphAddKernelNode)},
      {"cuGraphAddDependencies_v2", reinterpret_cast<void **>(&api.cuGraphAddDependencies)},
      {"cuGraphInstantiateWithFlags",
       reinterpret_cast<void **>(&api.cuGraphInstantiateWithFlags)},
      {"cuGraphExecKernelNodeSetParams_v2",
       reinterpret_cast<void **>(&api.cuGraphExecKernelNodeSetParams)},
      {"cuGraphLaunch", reinterpret_cast<void **>(&api.cuGraphLaunch)},
      {"cuGraphExecDestroy", reinterpret_cast<void **>(&api.cuGraphExecDestroy)},
      {"cuGraphDestroy", reinterpret_cast<void **>(&api.cuGraphDestroy)},
  };
  for (const Entry &e : entries) {
    *e.slot = dlsym(handle, e.name);
    if (!*e.slot)
      return absl::FailedPreconditionError(absl::StrCat(
          library, " has no ", e.name, " (a driver older than CUDA 12?)"));
  }
  api.cuProfilerStart = reinterpret_cast<CUresult (*)()>(dlsym(handle, "cuProfilerStart"));
  api.cuProfilerStop = reinterpret_cast<CUresult (*)()>(dlsym(handle, "cuProfilerStop"));
  if (absl::Status st = check(api, api.cuInit(0), "cuInit"); !st.ok())
    return st;
  CUdevice device = 0;
  if (absl::Status st = check(api, api.cuDeviceGet(&device, ordinal), "cuDeviceGet");
      !st.ok())
    return st;
  driver->device_ = device;
  if (absl::Status st = check(api, api.cuDevicePrimaryCtxRetain(&driver->context_, device),
                              "cuDevicePrimaryCtxRetain");
      !st.ok())
    return st;
  if (absl::Status st = check(api, api.cuCtxSetCurrent(driver->context_),
                              "cuCtxSetCurrent");
      !st.ok())
    return st;
  // A stream of its own: work on the legacy default stream would wait for
  // (and hold up) every other stream of the context.
  if (absl::Status st = check(api, api.cuStreamCreate(&driver->stream_, kStreamNonBlocking),
                              "cuStreamCreate");
      !st.ok())
    return st;
  // The generated kernels allocate per-thread scratch with device-side
  // malloc (a linear's quantized activation tile: tile x K fp32); the default
  // 8 MB heap runs out at a few hundred threads of K = 7168 (the caller's
  // default is 1 GiB: ExecutorOptions::deviceHeapMiB).
  constexpr int kLimitMallocHeapSize = 2; // CU_LIMIT_MALLOC_HEAP_SIZE
  if (absl::Status st = check(api, api.cuCtxSetLimit(kLimitMallocHeapSize, mallocHeapBytes),
                              "cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE)");
      !st.ok())
    return st;
  return driver;
}

/// The Driver's graph calls, for LaunchGraphs.
class Driver::GraphApi final : public GraphLauncher {
public:
  GraphApi(Driver &driver, bool programmatic) : driver_(driver), programmatic_(programmatic) {}
  absl::Status launchNow(const KernelLaunch &k) override {
    return driver_.launchNow(k);
  }
  absl::StatusOr<GraphLauncher::Graph>
  createGraph(const std::vector<KernelLaunch> &launches) override {
    const Api &api = *driver_.api_;
    auto entry = std::make_unique<Entry>();
    if (absl::Status st = check(api, api.cuGraphCreate(&entry->graph, 0), "cuGraphCreate");
        !st.ok())
      return st;
    for (const KernelLaunch &k : launches) {
      std::vector<void *> params = paramPointers(k);
      KernelNodeParams p = nodeParams(k, params);
      GraphNode node = nullptr;
      if (absl::Status st = check(api, api.cuGraphAddKernelNode(&node, entry->graph, nullptr, 0, &p),
                                  "cuGraphAddKernelNode");
          !st.ok()) {
        destroy(*entry);
        return st;
      }
      entry->nodes.push_back(node);
    }
    // The chain's (and a branch's) edges are full dependencies, or
    // programmatic ones (the kernels wait for the one before themselves);
    // where a branch leaves or joins the chain, always full.
    const std::vector<GraphEdge> edges = LaunchGraphs::graphEdges(launches);
    std::vector<GraphNode> from(edges.size()), to(edges.size());
    std::vector<GraphEdgeData> data(edges.size());
    for (size_t e = 0; e < edges.size(); ++e) {
      from[e] = entry->nodes[edges[e].from];
      to[e] = entry->nodes[edges[e].to];
      if (programmatic_ && edges[e].withinLane) {
        data[e].fromPort = 1;
        data[e].type = 1;
      }
    }
    if (!edges.empty())
      if (absl::Status st = check(api,
                                  api.cuGraphAddDependencies(entry->graph, from.data(), to.data(),
                                                             data.data(), edges.size()),
                                  "cuGraphAddDependencies");
          !st.ok()) {
        destroy(*entry);
        return st;
      }
    if (absl::Status st = check(api, api.cuGraphInstantiateWithFlags(&entry->exec,
                                                                     entry->graph, 0),
                                "cuGraphInstantiate");
        !st.ok()) {
      destroy(*entry);
      return st;
    }
    return static_cast<GraphLauncher::Graph>(entry.release());
  }
  absl::Status updateGraphNode(GraphLauncher::Graph graph, size_t node,
                               const KernelLaunch &k) override {
    const Api &api = *driver_.api_;
    Entry &entry = *static_cast<Entry *>(graph);
    std::vector<void *> params = paramPointers(k);
    KernelNodeParams p = nodeParams(k, params);
    return check(api,
                 api.cuGraphExecKernelNodeSetParams(entry.exec, entry.nodes.at(node), &p),
                 "cuGraphExecKernelNodeSetParams");
  }
  absl::Status launchGraph(GraphLauncher::Graph graph) override {
    const Api &api = *driver_.api_;
    return check(api,
                 api.cuGraphLaunch(static_cast<Entry *>(graph)->exec, driver_.stream_),
                 "cuGraphLaunch");
  }
  void destroyGraph(GraphLauncher::Graph graph) override {
    std::unique_ptr<Entry> entry(static_cast<Entry *>(graph));
    destroy(*entry);
  }

  /// Pointers to each parameter's slot, as cuLaunchKernel takes them.
  static std::vector<void *> paramPointers(const KernelLaunch &k) {
    std::vector<void *> params(k.params.size());
    for (size_t i = 0; i < params.size(); ++i)
      params[i] = const_cast<uint64_t *>(&k.params[i]);
    return params;
  }

private:
  struct Entry {
    Graph graph = nullptr;
    GraphExec exec = nullptr;
    std::vector<GraphNode> nodes;
  };
  static KernelNodeParams nodeParams(const KernelLaunch &k, std::vector<void *> &params) {
    KernelNodeParams p;
    p.func = k.fn;
    p.gridDimX = k.shape.gridX;
    p.gridDimY = k.shape.gridY;
    p.blockDimX = k.shape.blockX;
    p.sharedMemBytes = k.shape.sharedBytes;
    p.kernelParams = params.data();
    return p;
  }
  void destroy(Entry &entry) {
    const Api &api = *driver_.api_;
    if (entry.exec)
      api.cuGraphExecDestroy(entry.exec);
    if (entry.graph)
      api.cuGraphDestroy(entry.graph);
    entry = Entry();
  }
  Driver &driver_;
  const bool programmatic_;
};

Driver::Driver() = default;

Driver::~Driver() {
  if (api_ && stream_)
    (void)synchronize(); // what is recorded runs, and finishes, first
  for (Staging &s : staging_) {
    if (s.done)
      api_->cuEventDestroy(s.done);
    if (s.host)
      api_->cuMemFreeHost(s.host);
  }
  graphs_.reset();       // its graphs first, while the context lives
  graphApi_.reset();
  if (api_ && stream_)
    api_->cuStreamDestroy(stream_);
  if (api_ && context_)
    api_->cuDevicePrimaryCtxRelease(device_);
  if (handle_)
    dlclose(handle_);
}

std::string Driver::deviceName() const {
  char name[256] = {0};
  api_->cuDeviceGetName(name, sizeof name, device_);
  return name;
}

absl::StatusOr<Module> Driver::loadPtx(const std::string &ptx) {
  std::vector<char> log(16384, 0);
  int options[] = {kJitErrorLogBuffer, kJitErrorLogBufferSizeBytes};
  void *values[] = {log.data(),
                    reinterpret_cast<void *>(static_cast<uintptr_t>(log.size()))};
  Module module = nullptr;
  CUresult rc = api_->cuModuleLoadDataEx(&module, ptx.c_str(), 2, options, values);
  if (rc != kSuccess) {
    absl::Status st = check(*api_, rc, "cuModuleLoadDataEx");
    return absl::Status(st.code(),
                        absl::StrCat(st.message(), "; JIT log: ", log.data()));
  }
  return module;
}

absl::StatusOr<Function> Driver::function(Module module, const std::string &name) {
  Function fn = nullptr;
  if (absl::Status st = check(*api_, api_->cuModuleGetFunction(&fn, module, name.c_str()),
                              ("cuModuleGetFunction(" + name + ")").c_str());
      !st.ok())
    return st;
  return fn;
}

absl::StatusOr<DevicePtr> Driver::allocate(size_t bytes) {
  DevicePtr ptr = 0;
  if (absl::Status st = check(*api_, api_->cuMemAlloc(&ptr, bytes ? bytes : 1), "cuMemAlloc");
      !st.ok())
    return st;
  return ptr;
}

absl::Status Driver::release(DevicePtr ptr) {
  // Launches still recorded may use the memory.
  if (absl::Status st = flushLaunches(); !st.ok())
    return st;
  return check(*api_, api_->cuMemFree(ptr), "cuMemFree");
}

absl::Status Driver::copyToDevice(DevicePtr dst, const void *src, size_t bytes) {
  if (absl::Status st = flushLaunches(); !st.ok())
    return st;
  if (bytes >= kStagedCopyMinBytes && stagingReady())
    return stagedCopyToDevice(dst, static_cast<const char *>(src), bytes);
  // From pageable memory the driver copies `src` to a staging buffer before
  // returning (CUDA's "API synchronization behavior", memcpy, asynchronous):
  // the caller may change or free it afterwards.
  return check(*api_, api_->cuMemcpyHtoDAsync(dst, src, bytes, stream_),
               "cuMemcpyHtoDAsync");
}

bool Driver::stagingReady() {
  if (stagingTried_)
    return !staging_.empty();
  stagingTried_ = true;
  std::vector<Staging> buffers(kStagingBuffers);
  bool ok = true;
  for (Staging &s : buffers) {
    ok = ok && api_->cuMemAllocHost(&s.host, kStagingBytes) == 0 &&
         api_->cuEventCreate(&s.done, 0) == 0;
  }
  if (!ok) {
    // No page-locked memory to spare: the driver's own pageable path.
    for (Staging &s : buffers) {
      if (s.done)
        api_->cuEventDestroy(s.done);
      if (s.host)
        api_->cuMemFreeHost(s.host);
    }
    return false;
  }
  staging_ = std::move(buffers);
  return true;
}

absl::Status Driver::stagedCopyToDevice(DevicePtr dst, const char *src, size_t bytes) {
  // Several threads fill a chunk (and so fault in the pages of a mapped
  // checkpoint side by side) while the copy engine reads the chunks before.
  const size_t threads =
      std::clamp<size_t>(std::thread::hardware_concurrency(), 1, kStagingThreads);
  for (size_t offset = 0; offset < bytes; offset += kStagingBytes) {
    Staging &s = staging_[nextStaging_];
    nextStaging_ = (nextStaging_ + 1) % staging_.size();
    if (s.inUse) {
      if (absl::Status st = check(*api_, api_->cuEventSynchronize(s.done), "cuEventSynchronize");
          !st.ok())
        return st;
    }
    const size_t n = std::min(kStagingBytes, bytes - offset);
    const size_t part = (n / threads + 63) / 64 * 64;
    std::vector<std::thread> helpers;
    for (size_t t = 1; t < threads && t * part < n; ++t)
      helpers.emplace_back([&, t] {
        std::memcpy(static_cast<char *>(s.host) + t * part, src + offset + t * part,
                    std::min(part, n - t * part));
      });
    std::memcpy(s.host, src + offset, std::min(part, n));
    for (std::thread &h : helpers)
      h.join();
    if (absl::Status st = check(*api_,
                                api_->cuMemcpyHtoDAsync(dst + offset, s.host, n, stream_),
                                "cuMemcpyHtoDAsync");
        !st.ok())
      return st;
    if (absl::Status st = check(*api_, api_->cuEventRecord(s.done, stream_), "cuEventRecord");
        !st.ok())
      return st;
    s.inUse = true;
  }
  return absl::OkStatus();
}

absl::Status Driver::copyToHost(void *dst, DevicePtr src, size_t bytes) {
  if (absl::Status st = flushLaunches(); !st.ok())
    return st;
  if (absl::Status st = check(*api_, api_->cuMemcpyDtoHAsync(dst, src, bytes, stream_),
                              "cuMemcpyDtoHAsync");
      !st.ok())
    return st;
  return check(*api_, api_->cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

absl::Status Driver::copyOnDevice(DevicePtr dst, DevicePtr src, size_t bytes) {
  if (absl::Status st = flushLaunches(); !st.ok())
    return st;
  return check(*api_, api_->cuMemcpyDtoDAsync(dst, src, bytes, stream_),
               "cuMemcpyDtoDAsync");
}

namespace {
/// cuda.h's CUDA_MEMCPY2D (the _v2 layout), for device-to-device copies.
struct Memcpy2D {
  size_t srcXInBytes = 0, srcY = 0;
  int srcMemoryType = 0;
  const void *srcHost = nullptr;
  DevicePtr srcDevice = 0;
  void *srcArray = nullptr;
  size_t srcPitch = 0;
  size_t dstXInBytes = 0, dstY = 0;
  int dstMemoryType = 0;
  void *dstHost = nullptr;
  DevicePtr dstDevice = 0;
  void *dstArray = nullptr;
  size_t dstPitch = 0;
  size_t widthInBytes = 0, height = 0;
};
constexpr int kMemoryTypeDevice = 2; ///< CU_MEMORYTYPE_DEVICE
} // namespace

absl::Status Driver::copyRowsOnDevice(DevicePtr dst, size_t dstPitch, DevicePtr src,
                                      size_t srcPitch, size_t width, size_t rows) {
  Memcpy2D m;
  m.srcMemoryType = m.dstMemoryType = kMemoryTypeDevice;
  m.srcDevice = src;
  m.srcPitch = srcPitch;
  m.dstDevice = dst;
  m.dstPitch = dstPitch;
  m.widthInBytes = width;
  m.height = rows;
  if (absl::Status st = flushLaunches(); !st.ok())
    return st;
  return check(*api_, api_->cuMemcpy2DAsync(&m, stream_), "cuMemcpy2DAsync");
}

absl::Status Driver::fill(DevicePtr dst, uint8_t byte, size_t bytes) {
  if (absl::Status st = flushLaunches(); !st.ok())
    return st;
  return check(*api_, api_->cuMemsetD8Async(dst, byte, bytes, stream_),
               "cuMemsetD8Async");
}

absl::StatusOr<LaunchShape> launchShape(const LaunchRule &rule, int64_t rows,
                                        int64_t dynamicElements) {
  auto ceilDiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  if (rule.block < 1 || rule.rowsPerThread < 1 || rule.outputsPerBlock < 1 ||
      rule.elementsPerRow < 1 || rule.rowsPerBlock < 1 || rule.experts < 1)
    return absl::InvalidArgumentError("launch rule with a zero block or divisor");
  rows = std::max<int64_t>(rows, 0);
  int64_t gridX = 1, gridY = 1;
  if (rule.rule == "rows") {
    gridX = ceilDiv(ceilDiv(rows, rule.rowsPerThread), rule.block);
  } else if (rule.rule == "row_elements") {
    int64_t threads = 0;
    if (__builtin_mul_overflow(rows, rule.elementsPerRow, &threads) ||
        __builtin_mul_overflow(threads, std::max<int64_t>(dynamicElements, 0),
                               &threads))
      return absl::InvalidArgumentError(
          "launch: rows x elements_per_row x element_dims overflows");
    gridX = ceilDiv(threads, rule.block);
  } else if (rule.rule == "row_outputs") {
    gridX = rows;
    gridY = ceilDiv(rule.outputs, rule.outputsPerBlock);
  } else if (rule.rule == "channels") {
    gridX = ceilDiv(rule.outputs, rule.block);
  } else if (rule.rule == "expert_tiles") {
    // A block per (expert, output tile), whatever the rows.
    gridX = rule.experts;
    gridY = ceilDiv(rule.outputs, rule.outputsPerBlock);
  } else if (rule.rule == "row_tiles") {
    int64_t outputs = 0;
    if (__builtin_mul_overflow(rule.outputs, std::max<int64_t>(dynamicElements, 0), &outputs))
      return absl::InvalidArgumentError("launch: outputs x element_dims overflows");
    gridX = ceilDiv(rows, rule.rowsPerBlock);
    gridY = ceilDiv(outputs, rule.outputsPerBlock);
    if (rule.maxTileBlocks > 0)
      gridY = std::min(gridY, rule.maxTileBlocks); // the kernel strides over the rest
  }
  gridX = std::max<int64_t>(gridX, 1);
  gridY = std::max<int64_t>(gridY, 1);
  if (gridX > (int64_t(1) << 31) - 1 || gridY > 65535)
    return absl::InvalidArgumentError(absl::StrCat(
        "launch: grid ", gridX, " x ", gridY, " exceeds CUDA's 2^31-1 x 65535"));
  LaunchShape shape;
  shape.gridX = unsigned(gridX);
  shape.gridY = unsigned(gridY);
  shape.blockX = unsigned(rule.rule == "single" ? 1 : rule.block);
  return shape;
}

absl::StatusOr<LaunchShape>
launchShapeFor(const LaunchRule &rule,
               absl::FunctionRef<const std::vector<int64_t> *(int64_t)> sizesOf) {
  auto dimension = [&](int64_t argument, int64_t dim,
                       const char *field) -> absl::StatusOr<int64_t> {
    const std::vector<int64_t> *sizes = sizesOf(argument);
    if (!sizes || dim >= int64_t(sizes->size()))
      return absl::InvalidArgumentError(absl::StrCat(
          "launch.", field, " names dimension ", dim, " of argument ", argument,
          ", which has ", sizes ? sizes->size() : 0, " dimensions"));
    return (*sizes)[size_t(dim)];
  };
  int64_t rows = 0;
  if (rule.rule != "single" && rule.rule != "channels") {
    auto r = dimension(rule.rowsArgument, 0, "rows_argument");
    if (!r.ok())
      return r.status();
    rows = *r;
  }
  int64_t dynamicElements = 1;
  for (auto [argument, dim] : rule.elementDims) {
    auto size = dimension(argument, dim, "element_dims");
    if (!size.ok())
      return size.status();
    if (__builtin_mul_overflow(dynamicElements, *size, &dynamicElements))
      return absl::InvalidArgumentError(
          "launch: the sizes launch.element_dims names overflow");
  }
  return launchShape(rule, rows, dynamicElements);
}

absl::Status Driver::launch(Function fn, const LaunchShape &shape, void **params) {
  if (absl::Status st = flushLaunches(); !st.ok())
    return st;
  return check(*api_,
               api_->cuLaunchKernel(fn, shape.gridX, shape.gridY, 1, shape.blockX, 1, 1,
                                    shape.sharedBytes, stream_, params, nullptr),
               "cuLaunchKernel");
}

absl::Status Driver::launchNow(const KernelLaunch &k) {
  std::vector<void *> params = GraphApi::paramPointers(k);
  return check(*api_,
               api_->cuLaunchKernel(k.fn, k.shape.gridX, k.shape.gridY, 1, k.shape.blockX,
                                    1, 1, k.shape.sharedBytes, stream_, params.data(),
                                    nullptr),
               "cuLaunchKernel");
}

absl::Status Driver::launch(const KernelLaunch &k) {
  if (graphs_)
    return graphs_->add(k);
  return launchNow(k);
}

absl::Status Driver::profilerRange(bool start) {
  CUresult (*call)() = start ? api_->cuProfilerStart : api_->cuProfilerStop;
  if (!call)
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA driver has no ", start ? "cuProfilerStart" : "cuProfilerStop"));
  return check(*api_, call(), start ? "cuProfilerStart" : "cuProfilerStop");
}

absl::Status Driver::synchronize() {
  if (absl::Status st = flushLaunches(); !st.ok())
    return st;
  return check(*api_, api_->cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

absl::Status Driver::batchLaunchesInGraphs(const LaunchGraphOptions &options) {
  if (absl::Status st = flushLaunches(); !st.ok())
    return st;
  if (!graphApi_)
    graphApi_ = std::make_unique<GraphApi>(*this, options.programmatic);
  graphs_ = std::make_unique<LaunchGraphs>(*graphApi_, options);
  return absl::OkStatus();
}

absl::Status Driver::beginGraphRun(const std::string &entry) {
  return graphs_ ? graphs_->begin(entry) : absl::OkStatus();
}

void Driver::markBranch(BranchMark m, int lane) {
  if (graphs_)
    graphs_->mark(m, lane);
}

absl::Status Driver::graphBoundary() {
  return graphs_ ? graphs_->boundary() : absl::OkStatus();
}

absl::Status Driver::flushLaunches() {
  return graphs_ ? graphs_->flush() : absl::OkStatus();
}

LaunchGraphCounters Driver::graphCounters() const {
  return graphs_ ? graphs_->counters() : LaunchGraphCounters();
}

absl::StatusOr<Event> Driver::createEvent() {
  Event event = nullptr;
  if (absl::Status st = check(*api_, api_->cuEventCreate(&event, 0), "cuEventCreate");
      !st.ok())
    return st;
  return event;
}

absl::Status Driver::record(Event event) {
  if (absl::Status st = flushLaunches(); !st.ok())
    return st;
  return check(*api_, api_->cuEventRecord(event, stream_), "cuEventRecord");
}

absl::StatusOr<float> Driver::elapsedMs(Event start, Event end) {
  if (absl::Status st = check(*api_, api_->cuEventSynchronize(end), "cuEventSynchronize");
      !st.ok())
    return st;
  float ms = 0;
  if (absl::Status st = check(*api_, api_->cuEventElapsedTime(&ms, start, end),
                              "cuEventElapsedTime");
      !st.ok())
    return st;
  return ms;
}

void Driver::destroy(Event event) {
  if (event)
    api_->cuEventDestroy(event);
}

} // namespace csa::cuda

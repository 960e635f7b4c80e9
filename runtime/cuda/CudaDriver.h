//===- CudaDriver.h - The CUDA driver API through dlopen ---------*- C++ -*-===//
//
// The runtime's access to an NVIDIA GPU: `libcuda.so.1` is opened at run time
// (IREE's way), so the same binary starts on machines without a driver and
// says so; no CUDA header or toolkit is needed to build it. Modules are
// loaded from PTX with the JIT's error log returned in the message.
//
// Plain C++17, no LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_CUDA_CUDADRIVER_H
#define CSA_RUNTIME_CUDA_CUDADRIVER_H

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace csa::cuda {

using DevicePtr = unsigned long long; ///< CUdeviceptr
using Module = void *;                ///< CUmodule
using Function = void *;              ///< CUfunction
using Event = void *;                 ///< CUevent

/// A launch's grid (x, y), block (x) and dynamic shared memory.
struct LaunchShape {
  unsigned gridX = 1, gridY = 1, blockX = 1, sharedBytes = 0;
  bool operator==(const LaunchShape &o) const {
    return gridX == o.gridX && gridY == o.gridY && blockX == o.blockX &&
           sharedBytes == o.sharedBytes;
  }
};

/// The bytes a launch reads and writes, where launches are checked for
/// hazards (LaunchGraphs::hazards; the emulated device fills them in when
/// LaunchGraphOptions::checkHazards is on): sorted, disjoint [begin, end)
/// ranges of device addresses.
struct LaunchFootprint {
  std::string kernel;
  std::vector<std::pair<DevicePtr, DevicePtr>> read, written;
};

/// One kernel launch with its parameters' values: each parameter in its own
/// 8-byte slot (an i32 or f32 in the slot's first 4 bytes, little-endian),
/// so that a launch can be kept, compared and replayed.
struct KernelLaunch {
  Function fn = nullptr;
  LaunchShape shape;
  std::vector<uint64_t> params;
  /// Where the launch sits in its graph (LaunchGraphs::graphEdges): lane 0
  /// is the chain, each launch after the one before; lane L >= 1 a branch
  /// beside it, whose first launch is after the chain's launch before it.
  /// Bit L - 1 of `joins`: the launch also waits for branch L's last
  /// launch. Launched one by one on the stream, every launch is after the
  /// one before.
  uint8_t lane = 0, joins = 0;
  /// What it touches, where launches are checked (not compared: a kept
  /// graph's node is the same launch whatever it wrote).
  std::shared_ptr<const LaunchFootprint> footprint;
  bool operator==(const KernelLaunch &o) const {
    return fn == o.fn && shape == o.shape && params == o.params && lane == o.lane &&
           joins == o.joins;
  }
  bool operator!=(const KernelLaunch &o) const { return !(*this == o); }
};

/// A kernel's launch rule as kernels.json states it (codegen/gpu/
/// NvptxBackend.h): "rows", "row_elements", "row_outputs", "row_tiles", "expert_tiles" or
/// "single".
struct LaunchRule {
  std::string rule = "single";
  int64_t block = 1;
  int64_t rowsArgument = -1; ///< rows, row_outputs: dim 0 of this argument
  int64_t rowsPerThread = 1; ///< rows
  int64_t outputs = 0;       ///< row_outputs, row_tiles; channels: the count
  int64_t outputsPerBlock = 1; ///< row_outputs, row_tiles
  int64_t rowsPerBlock = 1;    ///< row_tiles
  /// row_tiles: grid.y at most this (the kernel walks tiles y, y + grid.y,
  /// ...); 0: a block a tile.
  int64_t maxTileBlocks = 0;
  int64_t experts = 1;         ///< expert_tiles: grid.x
  int64_t elementsPerRow = 1;  ///< row_elements: constant trip counts
  /// row_elements: (argument, dimension) of each dynamic trip count;
  /// row_tiles: of each size that multiplies `outputs`.
  std::vector<std::pair<int64_t, int64_t>> elementDims;
};

/// Appends the memref descriptor of a dense row-major buffer of `dims` at
/// `at` as a launch's 8-byte parameter slots (MLIR's calling convention:
/// allocated, aligned, offset 0, sizes, strides).
inline void appendDenseMemrefSlots(std::vector<uint64_t> &slots, DevicePtr at,
                                   const std::vector<int64_t> &dims) {
  slots.push_back(uint64_t(at));
  slots.push_back(uint64_t(at));
  slots.push_back(0);
  for (int64_t d : dims)
    slots.push_back(uint64_t(d));
  const size_t strides = slots.size();
  slots.resize(strides + dims.size());
  uint64_t stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    slots[strides + i] = stride;
    stride *= uint64_t(dims[i]);
  }
}

/// A buffer a kernel keeps between its launches (kernels.json "state": the
/// split attention forms' partials and counters): its last parameters,
/// after the status, each a memref of `dims` (row-major) of
/// `elementBytes`-byte elements, zeros before its first launch and then as
/// its launches leave it. Launches that may run side by side (on two graph
/// lanes) each need their own.
struct KernelStateBuffer {
  std::vector<int64_t> dims;
  int64_t elementBytes = 4;
  size_t bytes() const {
    size_t n = size_t(elementBytes);
    for (int64_t d : dims)
      n *= size_t(d);
    return n;
  }
  /// Appends the memref descriptor of this buffer at `at`.
  void appendSlots(std::vector<uint64_t> &slots, DevicePtr at) const {
    appendDenseMemrefSlots(slots, at, dims);
  }
};

/// The launch of `rule` for `rows` rows (dimension 0 of its rows argument)
/// and, for row_elements, `dynamicElements` (the product of the sizes its
/// elementDims name); never an empty grid (the kernels skip rows past the
/// end). An error when the grid exceeds the CUDA limits (x < 2^31, y < 2^16).
absl::StatusOr<LaunchShape> launchShape(const LaunchRule &rule, int64_t rows,
                                        int64_t dynamicElements = 1);

/// launchShape with its rows and dynamic elements read from the arguments:
/// `sizesOf(i)` is argument i's sizes (null for a scalar). An error names
/// the argument a rule points at that has no such dimension, or sizes whose
/// product overflows.
absl::StatusOr<LaunchShape>
launchShapeFor(const LaunchRule &rule,
               absl::FunctionRef<const std::vector<int64_t> *(int64_t)> sizesOf);

class LaunchGraphs;
enum class BranchMark : uint8_t;
struct LaunchGraphOptions;
struct LaunchGraphCounters;

/// The GPU work of a process: one device, its primary context, and one
/// stream (non-blocking) that every copy, fill and launch below is ordered
/// on; a download returns once its bytes are on the host.
class Driver {
public:
  /// Opens `library` (default libcuda.so.1), initializes device `ordinal`
  /// and makes its primary context current. Without a driver:
  /// FailedPrecondition "no NVIDIA driver: cannot load libcuda.so.1 (...)";
  /// callers fall back to the CPU backend or say so.
  /// `mallocHeapBytes`: the device heap the generated kernels' per-thread
  /// scratch comes from (CU_LIMIT_MALLOC_HEAP_SIZE).
  static absl::StatusOr<std::unique_ptr<Driver>>
  open(int ordinal = 0, const std::string &library = "libcuda.so.1",
       size_t mallocHeapBytes = size_t(1) << 30);
  ~Driver();

  std::string deviceName() const;

  /// Loads PTX text; a JIT failure returns its error log.
  absl::StatusOr<Module> loadPtx(const std::string &ptx);
  absl::StatusOr<Function> function(Module module, const std::string &name);

  absl::StatusOr<DevicePtr> allocate(size_t bytes);
  absl::Status release(DevicePtr ptr);
  /// Copies of kStagedCopyMinBytes and more (the weights) go through
  /// page-locked staging buffers, filled by several threads while the copy
  /// engine reads the ones before (the driver's pageable path copies at a
  /// few GB/s, faulting a mapped checkpoint's pages in on one thread);
  /// smaller ones, or all when page-locked memory cannot be had, take the
  /// driver's pageable path. Either way `src` may change once it returns.
  absl::Status copyToDevice(DevicePtr dst, const void *src, size_t bytes);
  static constexpr size_t kStagedCopyMinBytes = size_t(4) << 20;
  static constexpr size_t kStagingBytes = size_t(64) << 20, kStagingBuffers = 4,
                          kStagingThreads = 8;
  absl::Status copyToHost(void *dst, DevicePtr src, size_t bytes);
  absl::Status copyOnDevice(DevicePtr dst, DevicePtr src, size_t bytes);
  /// `rows` rows of `width` bytes from `src` (rows `srcPitch` bytes apart)
  /// to `dst` (rows `dstPitch` apart), both on the device.
  absl::Status copyRowsOnDevice(DevicePtr dst, size_t dstPitch, DevicePtr src,
                                size_t srcPitch, size_t width, size_t rows);
  /// Sets `bytes` bytes from `dst` to `byte` (ordered like the copies).
  absl::Status fill(DevicePtr dst, uint8_t byte, size_t bytes);
  /// Launches `fn`; `params` as cuLaunchKernel takes them.
  absl::Status launch(Function fn, const LaunchShape &shape, void **params);
  /// Launches `k`, or, while launches are batched into graphs
  /// (batchLaunchesInGraphs), records it for the next graph: it runs before
  /// any later copy, fill, event or synchronization, which flush first.
  absl::Status launch(const KernelLaunch &k);
  absl::Status synchronize();
  /// Starts (or stops) the profilers' capture range: cuProfilerStart /
  /// cuProfilerStop, which `ncu --profile-from-start off` waits for.
  absl::Status profilerRange(bool start);

  /// From now on, consecutive launches with no other work between them run
  /// as CUDA graphs (LaunchGraphs.h): a graph per run of launches, replayed
  /// with only its changed nodes updated when the same run comes again.
  absl::Status batchLaunchesInGraphs(const LaunchGraphOptions &options);
  /// The start of a run of `entry` (a plan entry point): its runs of
  /// launches are matched, in order, with those of its last run.
  absl::Status beginGraphRun(const std::string &entry);
  /// A place where a run of launches may be cut (LaunchGraphs::boundary).
  absl::Status graphBoundary();
  /// Branch `lane` of the run's graph begins, ends or is joined
  /// (LaunchGraphs::mark).
  void markBranch(BranchMark m, int lane);
  /// Issues the launches recorded so far (nothing when not batching).
  absl::Status flushLaunches();
  /// What the graphs did so far (zeros when not batching).
  LaunchGraphCounters graphCounters() const;

  /// Timing on the driver's stream: record two events around launches, then
  /// elapsedMs waits for the second and returns the milliseconds between.
  absl::StatusOr<Event> createEvent();
  absl::Status record(Event event);
  absl::StatusOr<float> elapsedMs(Event start, Event end);
  void destroy(Event event);

  struct Api;
  class GraphApi;

private:
  Driver();
  absl::Status launchNow(const KernelLaunch &k);
  void *handle_ = nullptr;
  std::unique_ptr<Api> api_;
  int device_ = 0;
  void *context_ = nullptr;
  void *stream_ = nullptr; ///< CUstream
  std::unique_ptr<GraphApi> graphApi_;
  std::unique_ptr<LaunchGraphs> graphs_; ///< null: launches go out at once
  /// A page-locked staging buffer and the event of its last copy.
  struct Staging {
    void *host = nullptr;
    Event done = nullptr;
    bool inUse = false;
  };
  std::vector<Staging> staging_; ///< allocated at the first large copy
  size_t nextStaging_ = 0;
  bool stagingTried_ = false;
  bool stagingReady();
  absl::Status stagedCopyToDevice(DevicePtr dst, const char *src, size_t bytes);
};

} // namespace csa::cuda

#endif // CSA_RUNTIME_CUDA_CUDADRIVER_H

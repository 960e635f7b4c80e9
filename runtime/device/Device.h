//===- Device.h - What the executor's GPU path needs of a device -*- C++ -*-===//
//
// The device layer, in the manner of IREE's HAL drivers: memory (allocate,
// release), copies each way and on the device, fills, the dispatch of a
// kernel with its parameter slots and launch shape, synchronization, and
// the batching of dispatches into graphs. The executor's GpuRunner keeps
// the mirrors of the plan's buffers and the statuses above it and holds no
// CUDA or emulation details; each implementation lives in its own folder:
//
//   cuda/      the CUDA driver API (runtime/cuda: one stream, CUDA graphs);
//   emulated/  host memory as the "device" (ExecutorOptions::emulateGpu):
//              the caller runs the host kernels on that memory, dispatch
//              only records them, so the bookkeeping above is checked
//              without a GPU.
//
// (The CPU executor calls the host kernels on the plan's own buffers and
// needs no device.) Plain C++17, no LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_DEVICE_DEVICE_H
#define CSA_RUNTIME_DEVICE_DEVICE_H

#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/LaunchGraphs.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace csa::device {

using DevicePtr = cuda::DevicePtr;

class Device {
public:
  virtual ~Device() = default;
  /// A short name for messages ("cuda: NVIDIA H200", "emulated").
  virtual std::string name() const = 0;

  virtual absl::StatusOr<DevicePtr> allocate(size_t bytes) = 0;
  virtual absl::Status release(DevicePtr ptr) = 0;
  // Copies and fills run in order with the dispatches. A small upload (at
  // most 128 bytes, cuda/BuiltinKernels.h; its bytes are taken at the call),
  // a fill and the copies on the device stay inside the current run of
  // dispatches (one graph); a download and a larger upload end it.
  virtual absl::Status copyToDevice(DevicePtr dst, const void *src, size_t bytes) = 0;
  /// Returns once the bytes are on the host (after the work before it).
  virtual absl::Status copyToHost(void *dst, DevicePtr src, size_t bytes) = 0;
  virtual absl::Status copyOnDevice(DevicePtr dst, DevicePtr src, size_t bytes) = 0;
  /// `rows` rows of `width` bytes from `src` (rows `srcPitch` apart) to `dst`
  /// (rows `dstPitch` apart).
  virtual absl::Status copyRowsOnDevice(DevicePtr dst, size_t dstPitch, DevicePtr src,
                                        size_t srcPitch, size_t width, size_t rows) = 0;
  virtual absl::Status fill(DevicePtr dst, uint8_t byte, size_t bytes) = 0;

  /// Dispatches `k` (its function, parameter slots and launch shape), in
  /// order with the copies; while batching, into the current graph.
  virtual absl::Status dispatch(const cuda::KernelLaunch &k) = 0;
  /// Ends the current run of dispatches (the next copy would anyway).
  virtual absl::Status endRun() = 0;
  virtual absl::Status synchronize() = 0;
  /// Starts or stops the profilers' capture range (what `ncu
  /// --profile-from-start off` records); a device with no profiler says so.
  virtual absl::Status profilerRange(bool start) {
    (void)start;
    return absl::FailedPreconditionError("device '" + name() + "' has no profiler range");
  }
  /// The start of a run of plan entry `entry`: its runs of dispatches are
  /// matched with those of its last run (kept graphs, LaunchGraphs.h).
  virtual absl::Status beginGraphRun(const std::string &entry) = 0;
  /// A place where the current run may be cut into graphs (the start of a
  /// plan step; LaunchGraphs::boundary).
  virtual absl::Status graphBoundary() = 0;
  /// The dispatches from BranchMark::Begin to End go on branch `lane` (1 ..
  /// cuda::kMaxBranches) and may run beside those after them, until the
  /// dispatch after Join of that lane (LaunchGraphs::mark): plan steps
  /// whose results are used some steps later leave the critical path. A
  /// device that runs dispatches in order ignores it.
  virtual void markBranch(cuda::BranchMark m, int lane) {
    (void)m;
    (void)lane;
  }
  virtual cuda::LaunchGraphCounters graphCounters() const = 0;

  /// Whether the kernels are the host's, run by the caller on this
  /// device's memory (which the host addresses): emulation.
  virtual bool runsHostKernels() const = 0;
  /// Names kernel `fn` in traces (emulation's graph updates).
  virtual void nameKernel(cuda::Function fn, const std::string &name) {
    (void)fn;
    (void)name;
  }
};

} // namespace csa::device

#endif // CSA_RUNTIME_DEVICE_DEVICE_H

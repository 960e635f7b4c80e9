//===- EmulatedDevice.h - Host memory as the device ------------*- C++ -*-===//
//
// The device of ExecutorOptions::emulateGpu (CSA_CUDA_EMULATE=1): its memory
// is separate host memory, its copies and fills are memcpy and memset, and
// its kernels are the host's, run by the caller on that memory; dispatch
// records them for LaunchGraphs' bookkeeping (counted, not replayed), so
// that which runs become graphs, which graphs are kept and which launches
// change between steps is visible without a GPU. A download the executor
// forgets leaves the host stale bytes and changes its output.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_DEVICE_EMULATED_EMULATEDDEVICE_H
#define CSA_RUNTIME_DEVICE_EMULATED_EMULATEDDEVICE_H

#include "runtime/device/Device.h"

#include <map>
#include <memory>

namespace csa::device {

class EmulatedDevice final : public Device {
public:
  /// With `graphs`, dispatches go through LaunchGraphs' bookkeeping;
  /// `trace` names every launch changed in a kept graph on stderr.
  EmulatedDevice(const cuda::LaunchGraphOptions *graphs, bool trace);
  ~EmulatedDevice() override;
  std::string name() const override { return "emulated"; }
  absl::StatusOr<DevicePtr> allocate(size_t bytes) override;
  absl::Status release(DevicePtr ptr) override;
  absl::Status copyToDevice(DevicePtr dst, const void *src, size_t bytes) override;
  absl::Status copyToHost(void *dst, DevicePtr src, size_t bytes) override;
  absl::Status copyOnDevice(DevicePtr dst, DevicePtr src, size_t bytes) override;
  absl::Status copyRowsOnDevice(DevicePtr dst, size_t dstPitch, DevicePtr src, size_t srcPitch,
                                size_t width, size_t rows) override;
  absl::Status fill(DevicePtr dst, uint8_t byte, size_t bytes) override;
  /// Records `k` (its fn a host kernel, already run by the caller).
  absl::Status dispatch(const cuda::KernelLaunch &k) override;
  absl::Status endRun() override;
  absl::Status synchronize() override { return absl::OkStatus(); }
  absl::Status beginGraphRun(const std::string &entry) override;
  absl::Status graphBoundary() override;
  void markBranch(cuda::BranchMark m, int lane) override;
  cuda::LaunchGraphCounters graphCounters() const override;
  bool runsHostKernels() const override { return true; }
  /// The name CSA_CUDA_TRACE gives host kernel `fn`.
  void nameKernel(cuda::Function fn, const std::string &name) override;

private:
  class CountingLauncher;
  /// Records the launch of builtin kernel `id` the CUDA device would make.
  /// With footprints on, it read and wrote the (address, bytes) pieces
  /// `read` and `written`.
  absl::Status builtin(const void *id, const char *name, DevicePtr dst, size_t bytes,
                       const std::vector<std::pair<DevicePtr, size_t>> &read,
                       const std::vector<std::pair<DevicePtr, size_t>> &written);
  /// Builtins' launches carry their footprints (LaunchGraphOptions::checkHazards).
  bool footprints = false;
  std::map<DevicePtr, std::unique_ptr<uint8_t[]>> memory;
  std::unique_ptr<CountingLauncher> launcher;
  std::unique_ptr<cuda::LaunchGraphs> graphs;
};

} // namespace csa::device

#endif // CSA_RUNTIME_DEVICE_EMULATED_EMULATEDDEVICE_H

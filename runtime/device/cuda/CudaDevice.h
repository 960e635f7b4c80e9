//===- CudaDevice.h - The device layer over the CUDA driver ----*- C++ -*-===//
//
// Device on runtime/cuda's Driver (the driver API through dlopen, one
// non-blocking stream; graphs when the driver batches launches). Small
// uploads, fills and device-to-device copies are launches of the device's
// builtin kernels (BuiltinKernels.h), so they stay inside the run of
// launches a CUDA graph holds: a decode step is one run. Downloads and
// larger uploads end the run (the driver flushes first).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_DEVICE_CUDA_CUDADEVICE_H
#define CSA_RUNTIME_DEVICE_CUDA_CUDADEVICE_H

#include "runtime/device/Device.h"

#include <memory>

namespace csa::device {

class CudaDevice final : public Device {
public:
  /// `driver` outlives the device; the builtin kernels are loaded here.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> create(cuda::Driver &driver);
  std::string name() const override { return "cuda: " + driver.deviceName(); }
  absl::StatusOr<DevicePtr> allocate(size_t bytes) override { return driver.allocate(bytes); }
  absl::Status release(DevicePtr ptr) override { return driver.release(ptr); }
  /// Up to kInlineBytes: a csa_write_inline launch carrying the bytes.
  absl::Status copyToDevice(DevicePtr dst, const void *src, size_t bytes) override;
  absl::Status copyToHost(void *dst, DevicePtr src, size_t bytes) override {
    return driver.copyToHost(dst, src, bytes);
  }
  /// A csa_copy launch.
  absl::Status copyOnDevice(DevicePtr dst, DevicePtr src, size_t bytes) override;
  /// A csa_copy_rows launch.
  absl::Status copyRowsOnDevice(DevicePtr dst, size_t dstPitch, DevicePtr src, size_t srcPitch,
                                size_t width, size_t rows) override;
  /// A csa_fill launch.
  absl::Status fill(DevicePtr dst, uint8_t byte, size_t bytes) override;
  absl::Status dispatch(const cuda::KernelLaunch &k) override { return driver.launch(k); }
  /// The driver ends a run of launches itself at its next download, larger
  /// upload or synchronization.
  absl::Status endRun() override { return absl::OkStatus(); }
  absl::Status synchronize() override { return driver.synchronize(); }
  absl::Status profilerRange(bool start) override { return driver.profilerRange(start); }
  absl::Status beginGraphRun(const std::string &entry) override {
    return driver.beginGraphRun(entry);
  }
  absl::Status graphBoundary() override { return driver.graphBoundary(); }
  void markBranch(cuda::BranchMark m, int lane) override { driver.markBranch(m, lane); }
  cuda::LaunchGraphCounters graphCounters() const override { return driver.graphCounters(); }
  bool runsHostKernels() const override { return false; }

private:
  explicit CudaDevice(cuda::Driver &driver) : driver(driver) {}
  cuda::Driver &driver;
  cuda::Function writeInline = nullptr, fillU8 = nullptr, fillV4 = nullptr,
                 copyU8 = nullptr, copyV4 = nullptr, copyRows = nullptr;
};

} // namespace csa::device

#endif // CSA_RUNTIME_DEVICE_CUDA_CUDADEVICE_H

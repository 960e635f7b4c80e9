//===- CudaDevice.h - The device layer over the CUDA driver ----*- C++ -*-===//
//
// Device on runtime/cuda's Driver (the driver API through dlopen, one
// non-blocking stream; graphs when the driver batches launches).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_DEVICE_CUDA_CUDADEVICE_H
#define CSA_RUNTIME_DEVICE_CUDA_CUDADEVICE_H

#include "runtime/device/Device.h"

namespace csa::device {

class CudaDevice final : public Device {
public:
  /// `driver` outlives the device.
  explicit CudaDevice(cuda::Driver &driver) : driver(driver) {}
  std::string name() const override { return "cuda: " + driver.deviceName(); }
  absl::StatusOr<DevicePtr> allocate(size_t bytes) override { return driver.allocate(bytes); }
  absl::Status release(DevicePtr ptr) override { return driver.release(ptr); }
  absl::Status copyToDevice(DevicePtr dst, const void *src, size_t bytes) override {
    return driver.copyToDevice(dst, src, bytes);
  }
  absl::Status copyToHost(void *dst, DevicePtr src, size_t bytes) override {
    return driver.copyToHost(dst, src, bytes);
  }
  absl::Status copyOnDevice(DevicePtr dst, DevicePtr src, size_t bytes) override {
    return driver.copyOnDevice(dst, src, bytes);
  }
  absl::Status copyRowsOnDevice(DevicePtr dst, size_t dstPitch, DevicePtr src, size_t srcPitch,
                                size_t width, size_t rows) override {
    return driver.copyRowsOnDevice(dst, dstPitch, src, srcPitch, width, rows);
  }
  absl::Status fill(DevicePtr dst, uint8_t byte, size_t bytes) override {
    return driver.fill(dst, byte, bytes);
  }
  absl::Status dispatch(const cuda::KernelLaunch &k) override { return driver.launch(k); }
  /// The driver ends a run of launches itself at its next copy, fill or
  /// synchronization.
  absl::Status endRun() override { return absl::OkStatus(); }
  absl::Status synchronize() override { return driver.synchronize(); }
  absl::Status beginGraphRun(const std::string &entry) override {
    return driver.beginGraphRun(entry);
  }
  cuda::LaunchGraphCounters graphCounters() const override { return driver.graphCounters(); }
  bool runsHostKernels() const override { return false; }

private:
  cuda::Driver &driver;
};

} // namespace csa::device

#endif // CSA_RUNTIME_DEVICE_CUDA_CUDADEVICE_H

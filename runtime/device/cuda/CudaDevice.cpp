//===- CudaDevice.cpp - The device layer over the CUDA driver -------------===//
#include "runtime/device/cuda/CudaDevice.h"

#include "runtime/device/cuda/BuiltinKernels.h"

#include "absl/strings/str_cat.h"

namespace csa::device {

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::create(cuda::Driver &driver) {
  std::unique_ptr<CudaDevice> device(new CudaDevice(driver));
  auto module = driver.loadPtx(builtinKernelsPtx());
  if (!module.ok())
    return absl::Status(module.status().code(),
                        absl::StrCat("the device's builtin kernels: ", module.status().message()));
  for (auto [name, fn] : {std::pair{"csa_write_inline", &device->writeInline},
                          std::pair{"csa_fill_u8", &device->fillU8},
                          std::pair{"csa_fill_v4", &device->fillV4},
                          std::pair{"csa_copy_u8", &device->copyU8},
                          std::pair{"csa_copy_v4", &device->copyV4},
                          std::pair{"csa_copy_rows", &device->copyRows}}) {
    auto loaded = driver.function(*module, name);
    if (!loaded.ok())
      return loaded.status();
    *fn = *loaded;
  }
  return device;
}

absl::Status CudaDevice::copyToDevice(DevicePtr dst, const void *src, size_t bytes) {
  if (bytes > kInlineBytes)
    return driver.copyToDevice(dst, src, bytes);
  if (bytes == 0)
    return absl::OkStatus();
  return driver.launch(writeInlineLaunch(writeInline, dst, src, bytes));
}

absl::Status CudaDevice::copyOnDevice(DevicePtr dst, DevicePtr src, size_t bytes) {
  if (bytes == 0)
    return absl::OkStatus();
  return driver.launch(copyLaunch(copyU8, copyV4, dst, src, bytes));
}

absl::Status CudaDevice::copyRowsOnDevice(DevicePtr dst, size_t dstPitch, DevicePtr src,
                                          size_t srcPitch, size_t width, size_t rows) {
  if (width == 0 || rows == 0)
    return absl::OkStatus();
  return driver.launch(copyRowsLaunch(copyRows, dst, dstPitch, src, srcPitch, width, rows));
}

absl::Status CudaDevice::fill(DevicePtr dst, uint8_t byte, size_t bytes) {
  if (bytes == 0)
    return absl::OkStatus();
  return driver.launch(fillLaunch(fillU8, fillV4, dst, byte, bytes));
}

} // namespace csa::device

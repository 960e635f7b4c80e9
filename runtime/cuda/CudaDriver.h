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

#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace csa::cuda {

using DevicePtr = unsigned long long; ///< CUdeviceptr
using Module = void *;                ///< CUmodule
using Function = void *;              ///< CUfunction

class Driver {
public:
  /// Opens `library` (default libcuda.so.1), initializes device `ordinal`
  /// and makes its primary context current. Without a driver:
  /// FailedPrecondition "no NVIDIA driver: cannot load libcuda.so.1 (...)";
  /// callers fall back to the CPU backend or say so.
  static absl::StatusOr<std::unique_ptr<Driver>>
  open(int ordinal = 0, const std::string &library = "libcuda.so.1");
  ~Driver();

  std::string deviceName() const;

  /// Loads PTX text; a JIT failure returns its error log.
  absl::StatusOr<Module> loadPtx(const std::string &ptx);
  absl::StatusOr<Function> function(Module module, const std::string &name);

  absl::StatusOr<DevicePtr> allocate(size_t bytes);
  absl::Status release(DevicePtr ptr);
  absl::Status copyToDevice(DevicePtr dst, const void *src, size_t bytes);
  absl::Status copyToHost(void *dst, DevicePtr src, size_t bytes);
  /// Launches on the default stream; `params` as cuLaunchKernel takes them.
  absl::Status launch(Function fn, unsigned gridX, unsigned blockX,
                      unsigned sharedBytes, void **params);
  absl::Status synchronize();

  struct Api;

private:
  Driver() = default;
  void *handle_ = nullptr;
  std::unique_ptr<Api> api_;
  int device_ = 0;
  void *context_ = nullptr;
};

} // namespace csa::cuda

#endif // CSA_RUNTIME_CUDA_CUDADRIVER_H

//===- NullCuda.cpp - A CUDA driver without a GPU -------------------------===//
//
// libcsa-null-cuda.so answers the driver API calls csa::cuda::Driver makes
// (CudaDriver.cpp) without a GPU: every call succeeds, an allocation is an
// address range and nothing more, kernels do not run, copies to the host
// read zeros, events time zero. csa-run --device=cuda with
// CSA_CUDA_LIBRARY=<this library> then runs the GPU path's whole host side
// (plan steps, argument checks, device mirrors, launch rules, CUDA graph
// bookkeeping) as on an H200, so that it is tested and profiled where there
// is no GPU; its numbers are not a model's. Plain C, no CUDA headers.
//
//===----------------------------------------------------------------------===//
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
using CUresult = int;
using DevicePtr = unsigned long long;
/// Device addresses: bump-allocated from a high base, 256-byte aligned,
/// never reused (nothing reads them).
DevicePtr nextAddress = 0x7f0000000000ull;
/// Handles (modules, functions, streams, graphs, events): distinct
/// non-null values.
uintptr_t nextHandle = 0x1000;
bool checksumOn = false;
uint64_t checksum = 0;
void *handle() { return reinterpret_cast<void *>(nextHandle += 16); }

/// CUDA_MEMCPY2D's fields that say where the host side is and how much to
/// write (the layout of cuda.h's struct).
struct Memcpy2D {
  size_t srcXInBytes, srcY;
  int srcMemoryType;
  const void *srcHost;
  DevicePtr srcDevice;
  void *srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void *dstHost;
  DevicePtr dstDevice;
  void *dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
};
constexpr int kMemoryTypeHost = 1;
} // namespace

extern "C" {
/// Tests: from enable(1) on, copies to the device add their bytes, each
/// weighted by its device address, to a sum that csa_null_cuda_checksum
/// returns (0 stops and clears it). Off by default (it reads every byte).
uint64_t csa_null_cuda_checksum(int enable) {
  const uint64_t sum = checksum;
  checksumOn = enable != 0;
  if (!checksumOn)
    checksum = 0;
  return sum;
}
CUresult cuInit(unsigned) { return 0; }
CUresult cuDeviceGet(int *device, int ordinal) {
  *device = ordinal;
  return ordinal == 0 ? 0 : 101; // CUDA_ERROR_INVALID_DEVICE
}
CUresult cuDeviceGetName(char *name, int length, int) {
  std::strncpy(name, "csa null CUDA driver (no GPU)", size_t(length));
  if (length > 0)
    name[length - 1] = '\0';
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void **context, int) {
  *context = handle();
  return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(int) { return 0; }
CUresult cuCtxSetCurrent(void *) { return 0; }
CUresult cuCtxSetLimit(int, size_t) { return 0; }
CUresult cuModuleLoadDataEx(void **module, const void *, unsigned, int *, void **) {
  *module = handle();
  return 0;
}
CUresult cuModuleGetFunction(void **fn, void *, const char *) {
  *fn = handle();
  return 0;
}
CUresult cuMemAlloc_v2(DevicePtr *ptr, size_t bytes) {
  *ptr = nextAddress;
  nextAddress += (bytes + 255) / 256 * 256 + 256;
  return 0;
}
CUresult cuMemFree_v2(DevicePtr) { return 0; }
/// Page-locked host memory is host memory here (the staged uploads fill it).
CUresult cuMemAllocHost_v2(void **ptr, size_t bytes) {
  *ptr = std::malloc(bytes ? bytes : 1);
  return *ptr ? 0 : 2; // CUDA_ERROR_OUT_OF_MEMORY
}
CUresult cuMemFreeHost(void *ptr) {
  std::free(ptr);
  return 0;
}
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **) {
  return 0;
}
CUresult cuGetErrorString(CUresult, const char **text) {
  *text = "null CUDA driver";
  return 0;
}
CUresult cuEventCreate(void **event, unsigned) {
  *event = handle();
  return 0;
}
CUresult cuEventRecord(void *, void *) { return 0; }
CUresult cuEventSynchronize(void *) { return 0; }
CUresult cuEventElapsedTime(float *ms, void *, void *) {
  *ms = 0.f;
  return 0;
}
CUresult cuEventDestroy_v2(void *) { return 0; }
CUresult cuStreamCreate(void **stream, unsigned) {
  *stream = handle();
  return 0;
}
CUresult cuStreamDestroy_v2(void *) { return 0; }
CUresult cuStreamSynchronize(void *) { return 0; }
CUresult cuMemcpyHtoDAsync_v2(DevicePtr dst, const void *src, size_t bytes, void *) {
  if (checksumOn) {
    // Each byte weighted by where it lands: the same sum however the bytes
    // are split into copies, another one if a byte lands elsewhere.
    const auto *b = static_cast<const unsigned char *>(src);
    for (size_t i = 0; i < bytes; ++i)
      checksum += (uint64_t(b[i]) + 1) * ((dst + i) * 0x9E3779B97F4A7C15ull | 1);
  }
  return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, DevicePtr, size_t bytes, void *) {
  std::memset(dst, 0, bytes);
  return 0;
}
CUresult cuMemcpyDtoDAsync_v2(DevicePtr, DevicePtr, size_t, void *) { return 0; }
CUresult cuMemsetD8Async(DevicePtr, unsigned char, size_t, void *) { return 0; }
CUresult cuMemcpy2DAsync_v2(const void *copy, void *) {
  const auto *c = static_cast<const Memcpy2D *>(copy);
  if (c->dstMemoryType == kMemoryTypeHost && c->dstHost)
    for (size_t r = 0; r < c->Height; ++r)
      std::memset(static_cast<char *>(c->dstHost) + (c->dstY + r) * c->dstPitch + c->dstXInBytes,
                  0, c->WidthInBytes);
  return 0;
}
CUresult cuGraphCreate(void **graph, unsigned) {
  *graph = handle();
  return 0;
}
CUresult cuGraphAddKernelNode_v2(void **node, void *, const void *, size_t, const void *) {
  *node = handle();
  return 0;
}
CUresult cuGraphAddDependencies_v2(void *, const void *, const void *, const void *, size_t) {
  return 0;
}
CUresult cuGraphInstantiateWithFlags(void **exec, void *, unsigned long long) {
  *exec = handle();
  return 0;
}
CUresult cuGraphExecKernelNodeSetParams_v2(void *, void *, const void *) { return 0; }
CUresult cuGraphLaunch(void *, void *) { return 0; }
CUresult cuGraphExecDestroy(void *) { return 0; }
CUresult cuGraphDestroy(void *) { return 0; }
/// The profilers' capture range: said on stderr (nothing records here), so
/// that tests see where csa-run --gpu-profile-steps starts and stops it.
CUresult cuProfilerStart() {
  std::fputs("csa-null-cuda: cuProfilerStart\n", stderr);
  return 0;
}
CUresult cuProfilerStop() {
  std::fputs("csa-null-cuda: cuProfilerStop\n", stderr);
  return 0;
}
}

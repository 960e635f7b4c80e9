//===- BuiltinKernels.h - The CUDA device's own small kernels ----*- C++ -*-===//
//
// A copy or fill issued with cuMemcpy/cuMemset ends the run of launches a
// CUDA graph holds (runtime/cuda/LaunchGraphs.h), so a decode step that
// uploads its token id, zeroes an accumulator or copies a slice in the
// middle would be several graphs. The CUDA device issues those as kernel
// launches instead, from the PTX below, so they sit in the same graph as the
// model's kernels and are updated in it like any launch:
//
//   csa_write_inline(dst, bytes, w0 .. w15)  up to kInlineBytes bytes carried
//                                            in the launch's own parameters
//                                            (taken when recorded: the host
//                                            may change its buffer at once);
//   csa_fill_u8 / csa_fill_v4(dst, count, value)   bytes / 16-byte vectors;
//   csa_copy_u8 / csa_copy_v4(dst, src, count)     the same, device to device;
//   csa_copy_rows(dst, dst_pitch, src, src_pitch, width, count)  a 2D copy
//                                            (count = rows x width bytes).
//
// Hand-written PTX (not the compiler's): these belong to the device layer,
// as IREE's HAL drivers keep their own fill and copy kernels. Plain C++17.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_DEVICE_CUDA_BUILTINKERNELS_H
#define CSA_RUNTIME_DEVICE_CUDA_BUILTINKERNELS_H

#include "runtime/cuda/CudaDriver.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace csa::device {

/// The most bytes csa_write_inline carries (16 parameter words).
constexpr size_t kInlineBytes = 128;
/// Threads a block of the fill and copy kernels.
constexpr unsigned kBuiltinBlock = 256;

/// The PTX module (sm_90a) of the builtin kernels.
const std::string &builtinKernelsPtx();

/// The launches, given the functions loaded from builtinKernelsPtx (the
/// vector forms when dst, src and bytes are multiples of 16, else bytes).
/// `dst` of writeInline must be 8-byte aligned, bytes <= kInlineBytes.
cuda::KernelLaunch writeInlineLaunch(cuda::Function fn, cuda::DevicePtr dst, const void *src,
                                     size_t bytes);
cuda::KernelLaunch fillLaunch(cuda::Function u8, cuda::Function v4, cuda::DevicePtr dst,
                              uint8_t byte, size_t bytes);
cuda::KernelLaunch copyRowsLaunch(cuda::Function fn, cuda::DevicePtr dst, size_t dstPitch,
                                  cuda::DevicePtr src, size_t srcPitch, size_t width,
                                  size_t rows);
cuda::KernelLaunch copyLaunch(cuda::Function u8, cuda::Function v4, cuda::DevicePtr dst,
                              cuda::DevicePtr src, size_t bytes);

} // namespace csa::device

#endif // CSA_RUNTIME_DEVICE_CUDA_BUILTINKERNELS_H

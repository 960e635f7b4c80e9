//===- CudaDriverTest.cpp - The driver loader without a GPU ---------------===//
//
// CI has no NVIDIA driver: what must hold there is that opening the driver
// fails with a message that says so, without crashing.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaDriver.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

TEST(CudaDriver, AMissingDriverIsAClearError) {
  auto driver = csa::cuda::Driver::open(0, "libcuda-not-installed.so.1");
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(driver.status().message().find(
                "no NVIDIA driver: cannot load libcuda-not-installed.so.1"),
            std::string::npos)
      << driver.status();
}

TEST(CudaDriver, ALibraryWithoutTheDriverApiIsNamed) {
  // libm exists everywhere and exports no cuInit.
  auto driver = csa::cuda::Driver::open(0, "libm.so.6");
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().message(),
            "libm.so.6 has no cuInit (a driver older than CUDA 12?)");
}

/// What libcsa-null-cuda.so's copies to the device received, as its
/// address-weighted sum (NullCuda.cpp's csa_null_cuda_checksum).
uint64_t expectedChecksum(uint64_t dst, const std::vector<uint8_t> &bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes.size(); ++i)
    sum += (uint64_t(bytes[i]) + 1) * ((dst + i) * 0x9E3779B97F4A7C15ull | 1);
  return sum;
}

TEST(CudaDriver, LargeCopiesGoThroughStagingWithEveryByteInPlace) {
  // The null driver: a real dlopen'ed driver API without a GPU.
  auto driver = csa::cuda::Driver::open(0, CSA_NULL_CUDA_LIBRARY);
  ASSERT_TRUE(driver.ok()) << driver.status();
  void *lib = dlopen(CSA_NULL_CUDA_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto checksum = reinterpret_cast<uint64_t (*)(int)>(dlsym(lib, "csa_null_cuda_checksum"));
  ASSERT_NE(checksum, nullptr);
  // Three staging buffers' worth and an odd tail: chunks, a reused buffer
  // (its event waited on) and a short last chunk; then a small copy on the
  // pageable path.
  const size_t bytes = 3 * csa::cuda::Driver::kStagingBytes + 12345 +
                       csa::cuda::Driver::kStagingBytes * (csa::cuda::Driver::kStagingBuffers - 2);
  std::vector<uint8_t> data(bytes);
  std::mt19937_64 gen(7);
  for (uint8_t &b : data)
    b = uint8_t(gen());
  std::vector<uint8_t> small(1000, 0x5A);
  auto dst = (*driver)->allocate(bytes);
  auto dstSmall = (*driver)->allocate(small.size());
  ASSERT_TRUE(dst.ok() && dstSmall.ok());
  checksum(1);
  ASSERT_TRUE((*driver)->copyToDevice(*dst, data.data(), bytes).ok());
  ASSERT_TRUE((*driver)->copyToDevice(*dstSmall, small.data(), small.size()).ok());
  ASSERT_TRUE((*driver)->synchronize().ok());
  EXPECT_EQ(checksum(0), expectedChecksum(*dst, data) + expectedChecksum(*dstSmall, small));
  dlclose(lib);
}

} // namespace

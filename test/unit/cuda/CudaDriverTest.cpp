//===- CudaDriverTest.cpp - The driver loader without a GPU ---------------===//
//
// CI has no NVIDIA driver: what must hold there is that opening the driver
// fails with a message that says so, without crashing.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaDriver.h"

#include <gtest/gtest.h>

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

} // namespace

//===- EmulatedDeviceTest.cpp - The emulated device of the device layer ---===//
#include "runtime/device/emulated/EmulatedDevice.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace csa::device {
namespace {

TEST(EmulatedDevice, CopiesAndFillsMoveTheBytes) {
  EmulatedDevice device(/*graphs=*/nullptr, /*trace=*/false);
  EXPECT_TRUE(device.runsHostKernels());
  auto a = device.allocate(64), b = device.allocate(64);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<uint8_t> in(64), out(64, 0xAA);
  std::iota(in.begin(), in.end(), uint8_t(0));
  ASSERT_TRUE(device.copyToDevice(*a, in.data(), 64).ok());
  ASSERT_TRUE(device.copyOnDevice(*b, *a, 64).ok());
  ASSERT_TRUE(device.fill(*b + 60, 0xFF, 4).ok());
  ASSERT_TRUE(device.copyToHost(out.data(), *b, 64).ok());
  for (size_t i = 0; i < 60; ++i)
    ASSERT_EQ(out[i], in[i]) << i;
  for (size_t i = 60; i < 64; ++i)
    ASSERT_EQ(out[i], 0xFF) << i;
  // Rows 4 bytes wide from every 16th byte, packed 4 apart.
  ASSERT_TRUE(device.copyRowsOnDevice(*b, 4, *a + 2, 16, 4, 3).ok());
  ASSERT_TRUE(device.copyToHost(out.data(), *b, 12).ok());
  for (size_t r = 0; r < 3; ++r)
    for (size_t i = 0; i < 4; ++i)
      ASSERT_EQ(out[r * 4 + i], in[r * 16 + 2 + i]) << r << " " << i;
  EXPECT_TRUE(device.release(*a).ok());
  EXPECT_TRUE(device.release(*b).ok());
  // Memory it did not hand out (or handed back) is refused, not freed.
  EXPECT_FALSE(device.release(*a).ok());
}

TEST(EmulatedDevice, NewMemoryIsZeros) {
  EmulatedDevice device(nullptr, false);
  auto a = device.allocate(256);
  ASSERT_TRUE(a.ok());
  std::vector<uint8_t> out(256, 0x5A);
  ASSERT_TRUE(device.copyToHost(out.data(), *a, 256).ok());
  for (uint8_t v : out)
    ASSERT_EQ(v, 0);
}

TEST(EmulatedDevice, DispatchesGoThroughTheGraphBookkeeping) {
  cuda::LaunchGraphOptions options;
  options.minLaunches = 2;
  options.maxLaunches = 8;
  EmulatedDevice device(&options, false);
  int kernelA = 0, kernelB = 0; // stand-ins for host kernels
  auto launch = [&](int *fn, uint64_t param) {
    cuda::KernelLaunch k;
    k.fn = fn;
    k.params = {param};
    return device.dispatch(k);
  };
  // Two steps of the same entry: the first builds a graph for its run of
  // three launches, the second reuses it with one launch changed.
  for (uint64_t step = 0; step < 2; ++step) {
    ASSERT_TRUE(device.beginGraphRun("decode").ok());
    ASSERT_TRUE(launch(&kernelA, 1).ok());
    ASSERT_TRUE(launch(&kernelB, 10 + step).ok());
    ASSERT_TRUE(launch(&kernelA, 2).ok());
    ASSERT_TRUE(device.endRun().ok());
  }
  const cuda::LaunchGraphCounters c = device.graphCounters();
  EXPECT_EQ(c.launches, 6);
  EXPECT_EQ(c.graphsBuilt, 1);
  EXPECT_EQ(c.graphLaunches, 2);
  EXPECT_EQ(c.nodesUpdated, 1);
  // Without graphs, dispatches are only counted by the caller.
  EmulatedDevice plain(nullptr, false);
  ASSERT_TRUE(plain.beginGraphRun("decode").ok());
  cuda::KernelLaunch k;
  k.fn = &kernelA;
  EXPECT_TRUE(plain.dispatch(k).ok());
  EXPECT_EQ(plain.graphCounters().launches, 0);
}

TEST(EmulatedDevice, SmallUploadsFillsAndDeviceCopiesStayInTheRun) {
  // As on the CUDA device (its builtin kernels): a decode step's token id,
  // an accumulator's zeroing or a gather of rows is a launch in the step's
  // graph, while a download or a large upload ends the run.
  cuda::LaunchGraphOptions options;
  options.maxLaunches = 1000;
  EmulatedDevice device(&options, false);
  auto a = device.allocate(4096);
  auto b = device.allocate(4096);
  ASSERT_TRUE(a.ok() && b.ok());
  int kernel = 0;
  cuda::KernelLaunch k;
  k.fn = &kernel;
  const int32_t token = 1234;
  ASSERT_TRUE(device.beginGraphRun("decode").ok());
  ASSERT_TRUE(device.dispatch(k).ok());
  ASSERT_TRUE(device.copyToDevice(*a, &token, sizeof token).ok());
  ASSERT_TRUE(device.fill(*b, 0x11, 64).ok());
  ASSERT_TRUE(device.copyOnDevice(*b + 64, *a, 4).ok());
  ASSERT_TRUE(device.copyRowsOnDevice(*b + 128, 8, *a, 16, 4, 2).ok());
  ASSERT_TRUE(device.dispatch(k).ok());
  EXPECT_EQ(device.graphCounters().graphLaunches, 0); // one run so far
  std::vector<uint8_t> big(4096, 7);
  ASSERT_TRUE(device.copyToDevice(*a, big.data(), big.size()).ok()); // ends it
  cuda::LaunchGraphCounters c = device.graphCounters();
  EXPECT_EQ(c.graphLaunches, 1);
  EXPECT_EQ(c.launches, 6); // two kernels and four builtins
  ASSERT_TRUE(device.dispatch(k).ok());
  ASSERT_TRUE(device.dispatch(k).ok());
  int32_t back = 0;
  ASSERT_TRUE(device.copyToHost(&back, *b + 64, sizeof back).ok()); // ends it
  EXPECT_EQ(back, token);
  EXPECT_EQ(device.graphCounters().graphLaunches, 2);
}

} // namespace
} // namespace csa::device

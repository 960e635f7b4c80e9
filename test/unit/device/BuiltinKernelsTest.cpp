//===- BuiltinKernelsTest.cpp - The CUDA device's own kernels, no GPU -----===//
//
// What the builtin kernels' launches carry and that their PTX assembles
// (ptxas from the CUDA toolkit, when there is one: the GPU run of
// gpu-run/run-quick.sh executes them).
//
//===----------------------------------------------------------------------===//
#include "runtime/device/cuda/BuiltinKernels.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>

namespace csa::device {
namespace {

cuda::Function fn(uintptr_t id) { return reinterpret_cast<cuda::Function>(id); }

TEST(BuiltinKernels, AnInlineWriteCarriesItsBytesTakenAtTheCall) {
  uint8_t bytes[20];
  for (int i = 0; i < 20; ++i)
    bytes[i] = uint8_t(i + 1);
  cuda::KernelLaunch k = writeInlineLaunch(fn(1), 0x1000, bytes, sizeof bytes);
  std::memset(bytes, 0, sizeof bytes); // the launch keeps its copy
  ASSERT_EQ(k.params.size(), 2 + kInlineBytes / 8);
  EXPECT_EQ(k.params[0], 0x1000u);
  EXPECT_EQ(k.params[1], 20u);
  uint8_t carried[20];
  std::memcpy(carried, &k.params[2], 20);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(carried[i], i + 1);
  EXPECT_EQ(k.shape.gridX * k.shape.blockX, 1u); // one thread stores them
}

TEST(BuiltinKernels, FillsAndCopiesUseVectorsWhereAligned) {
  cuda::KernelLaunch f = fillLaunch(fn(1), fn(2), 0x1000, 0xAB, 4096);
  EXPECT_EQ(f.fn, fn(2));
  EXPECT_EQ(f.params[1], 256u);               // 16-byte vectors
  EXPECT_EQ(f.params[2], 0xABABABABu);        // the byte in every lane
  cuda::KernelLaunch u = fillLaunch(fn(1), fn(2), 0x1001, 0, 4096);
  EXPECT_EQ(u.fn, fn(1));
  EXPECT_EQ(u.params[1], 4096u);
  cuda::KernelLaunch c = copyLaunch(fn(3), fn(4), 0x2000, 0x3008, 64);
  EXPECT_EQ(c.fn, fn(3)); // the source is not on 16 bytes
  EXPECT_EQ(c.params, (std::vector<uint64_t>{0x2000, 0x3008, 64}));
  cuda::KernelLaunch r = copyRowsLaunch(fn(5), 0x4000, 8, 0x5000, 16, 4, 3);
  EXPECT_EQ(r.params, (std::vector<uint64_t>{0x4000, 8, 0x5000, 16, 4, 12}));
  EXPECT_GE(r.shape.gridX * r.shape.blockX, 12u);
}

TEST(BuiltinKernels, EveryKernelWaitsForTheOneBeforeFirst) {
  const std::string &ptx = builtinKernelsPtx();
  for (const char *name : {"csa_write_inline", "csa_fill_u8", "csa_fill_v4", "csa_copy_u8",
                           "csa_copy_v4", "csa_copy_rows"}) {
    const size_t at = ptx.find(std::string(".visible .entry ") + name + "(");
    ASSERT_NE(at, std::string::npos) << name;
    const size_t wait = ptx.find("griddepcontrol.wait;", at);
    const size_t firstLoad = ptx.find("ld.", at);
    EXPECT_LT(wait, firstLoad) << name;
  }
}

TEST(BuiltinKernels, ThePtxAssembles) {
  const char *ptxas = "/usr/local/cuda/bin/ptxas";
  if (access(ptxas, X_OK) != 0)
    GTEST_SKIP() << "no " << ptxas << " (the CUDA toolkit)";
  char dir[] = "/tmp/csa-builtins-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/builtins.ptx";
  std::ofstream(file) << builtinKernelsPtx();
  const std::string command = std::string(ptxas) + " -arch=sm_90a " + file + " -o " + dir +
                              "/builtins.cubin 2>" + dir + "/log.txt";
  const int rc = std::system(command.c_str());
  std::ifstream log(std::string(dir) + "/log.txt");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << text;
  std::system((std::string("rm -rf ") + dir).c_str());
}

} // namespace
} // namespace csa::device

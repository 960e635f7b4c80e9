//===- HostKernelTest.cpp - Generated host kernels vs the reference --------===//
//
// Each kernel is built as IR, lowered through LLVM to an object, linked into
// a shared object, loaded with dlopen, and run on fresh random inputs; its
// output must equal the reference forward's kernel bit for bit.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/HostKernels.h"
#include "test/unit/codegen/KernelTestSupport.h"
#include "models/reference/Kernels.h"
#include "runtime/numerics/Numerics.h"

#include "codegen/host/HostBackend.h"

#include <gtest/gtest.h>

namespace csa::codegen {
namespace {

using namespace csa::codegen::testing;
namespace nx = csa::numerics;

TEST(HostKernels, RmsNormMatchesTheReferenceBitForBit) {
  constexpr int64_t dim = 64;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildRmsNormKernel(m, "rms_norm_64", dim, 1e-20);
  });
  auto *kernel = reinterpret_cast<void (*)(Descriptor<2> *, Descriptor<1> *,
                                           Descriptor<2> *)>(
      lib.symbol("rms_norm_64"));
  ASSERT_NE(kernel, nullptr);
  for (uint32_t seed : {1u, 2u, 3u}) {
    const int64_t rows = 5 + seed * 7;
    auto x = randomBf16(size_t(rows * dim), seed);
    auto w = randomBf16(dim, seed + 100, 0.5f);
    std::vector<uint16_t> y(x.size(), 0xFFFF);
    auto dx = describe<2>(x, {rows, dim}), dy = describe<2>(y, {rows, dim});
    auto dw = describe<1>(w, {dim});
    kernel(&dx, &dw, &dy);
    std::vector<float> weight(dim);
    for (int64_t c = 0; c < dim; ++c)
      weight[size_t(c)] = nx::bf16ToFloat(w[size_t(c)]);
    reference::Mat expected = reference::rmsNorm(toMat(x, rows, dim), weight, 1e-20);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(nx::bf16ToFloat(y[i]), expected.v[i]) << "element " << i;
  }
}

TEST(HostKernels, RopeMatchesTheReferenceBitForBit) {
  // The tiny model's compressed-layer table (YaRN) and its inverse.
  reference::RopeTable table(8, 160000.0, 32, 4.0, 32.0, 1.0);
  KernelLibrary lib([&](mlir::ModuleOp m) {
    buildRopeKernel(m, "rope", table.freqs, false);
    buildRopeKernel(m, "rope_inverse", table.freqs, true);
  });
  using Kernel = void (*)(Descriptor<2> *, int64_t, int64_t, int64_t);
  for (bool inverse : {false, true}) {
    auto *kernel = reinterpret_cast<Kernel>(
        lib.symbol(inverse ? "rope_inverse" : "rope"));
    ASSERT_NE(kernel, nullptr);
    // [tokens = 6, heads = 4, 32] flattened to rows, starting at position
    // 1000 with stride 2 (compressed entries).
    const int64_t tokens = 6, heads = 4, width = 32, start = 1000, stride = 2;
    auto x = randomBf16(size_t(tokens * heads * width), inverse ? 7 : 8);
    reference::Mat expected = toMat(x, tokens * heads, width);
    auto dx = describe<2>(x, {tokens * heads, width});
    kernel(&dx, start, stride, heads);
    for (int64_t r = 0; r < tokens * heads; ++r)
      table.apply(expected.row(r), width, start + (r / heads) * stride, inverse);
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(nx::bf16ToFloat(x[i]), expected.v[i]) << "element " << i;
    // The first width - 8 channels are untouched.
    EXPECT_EQ(nx::bf16ToFloat(x[0]), expected.v[0]);
  }
}

TEST(HostKernels, KernelsCarryTheCInterfaceInLLVMIR) {
  mlir::MLIRContext context;
  loadHostKernelDialects(context);
  auto module = mlir::ModuleOp::create(mlir::UnknownLoc::get(&context));
  buildRmsNormKernel(module, "rms_norm_32", 32, 1e-6);
  ASSERT_TRUE(mlir::succeeded(lowerHostKernelsToLLVM(module)));
  auto ir = translateToLLVMIR(module);
  ASSERT_TRUE(bool(ir)) << llvm::toString(ir.takeError());
  EXPECT_NE(ir->find("define void @_mlir_ciface_rms_norm_32"), std::string::npos);
  // bf16 rounding is integer arithmetic, not a libgcc builtin call.
  EXPECT_EQ(ir->find("fptrunc"), std::string::npos);
  EXPECT_NE(ir->find("lshr i32"), std::string::npos);
  // Transcendentals are libm calls, as in the reference.
  EXPECT_NE(ir->find("@sqrtf"), std::string::npos);
  module->erase();
}

} // namespace
} // namespace csa::codegen

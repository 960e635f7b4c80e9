//===- LinearKernelTest.cpp - Generated csa.linear kernels vs the reference ===//
//
// Every weight format's kernel runs on fresh random activations and weights
// (random E4M3 / E2M1 codes and UE8M0 scales) for several row counts; every
// output element must equal `reference::linear` on a `reference::Weight`
// viewing the same bytes, bit for bit. The grouped kernel is checked against
// the reference model's wo_a einsum written out here; the in-IR activation
// quantization against numerics (act_quant and the E4M3 round trip).
//
//===----------------------------------------------------------------------===//
#include "codegen/host/LinearKernels.h"
#include "test/unit/codegen/KernelTestSupport.h"
#include "models/reference/Kernels.h"
#include "runtime/numerics/Numerics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

namespace csa::codegen {
namespace {

using namespace csa::codegen::testing;
namespace nx = csa::numerics;

constexpr int64_t kRowCounts[] = {1, 3, 17};

std::vector<uint8_t> randomE4M3Codes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t &v : out) {
    do
      v = uint8_t(gen());
    while ((v & 0x7F) == 0x7F); // no NaN codes in a checkpoint
  }
  return out;
}

std::vector<uint8_t> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t &v : out)
    v = uint8_t(gen());
  return out;
}

/// UE8M0 codes in [127 - spread, 127 + spread / 2].
std::vector<uint8_t> randomUe8m0(size_t n, uint32_t seed, int spread = 8) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(127 - spread, 127 + spread / 2);
  std::vector<uint8_t> out(n);
  for (uint8_t &v : out)
    v = uint8_t(dist(gen));
  return out;
}

/// Activations whose 32-blocks span very different magnitudes, so that the
/// act_quant scales differ per block; a few exact zeros and a zero block.
std::vector<uint16_t> randomActivations(int64_t rows, int64_t k, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::uniform_int_distribution<int> magnitude(-12, 12);
  std::vector<uint16_t> out(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kb = 0; kb < k; kb += 32) {
      const float scale = std::ldexp(1.f, magnitude(gen));
      const bool zeroBlock = (r + kb / 32) % 7 == 3;
      for (int64_t c = kb; c < std::min(k, kb + 32); ++c) {
        float v = zeroBlock || gen() % 23 == 0 ? 0.f : dist(gen) * scale;
        out[size_t(r * k + c)] = nx::floatToBf16(v);
      }
    }
  return out;
}

uint32_t bitsOf(float v) { return nx::floatBits(v); }

template <typename Kernel>
Kernel kernelOf(KernelLibrary &lib, const std::string &name) {
  return reinterpret_cast<Kernel>(lib.symbol(name));
}

//===----------------------------------------------------------------------===//
// Activation quantization
//===----------------------------------------------------------------------===//

/// Runs the E4M3 round-trip kernel on `in` and compares every result's bits
/// with roundToE4M3 (decodeE4M3(encodeE4M3(x))).
void expectE4M3RoundTrip(void (*kernel)(Descriptor<1, float> *,
                                        Descriptor<1, float> *),
                         std::vector<float> &in, uint64_t &checked) {
  std::vector<float> out(in.size(), 0.f);
  auto din = describe<1>(in, {int64_t(in.size())});
  auto dout = describe<1>(out, {int64_t(out.size())});
  kernel(&din, &dout);
  for (size_t i = 0; i < in.size(); ++i) {
    const uint32_t want = bitsOf(nx::roundToE4M3(in[i]));
    if (bitsOf(out[i]) != want) {
      ADD_FAILURE() << std::hex << "x = 0x" << bitsOf(in[i]) << ": got 0x"
                    << bitsOf(out[i]) << ", want 0x" << want;
      return;
    }
  }
  checked += in.size();
}

TEST(LinearKernels, E4M3RoundingMatchesNumerics) {
  KernelLibrary lib([](mlir::ModuleOp m) { buildE4M3RoundKernel(m, "e4m3"); });
  auto *kernel = kernelOf<void (*)(Descriptor<1, float> *, Descriptor<1, float> *)>(
      lib, "e4m3");
  ASSERT_NE(kernel, nullptr);
  uint64_t checked = 0;
  std::vector<float> in;
  in.reserve(1 << 22);
  auto flush = [&] {
    expectE4M3RoundTrip(kernel, in, checked);
    in.clear();
  };
  // Every sign, every fp32 exponent and every setting of the top 11 mantissa
  // bits (so every tie and near-tie for every shift from 12 up: the E4M3
  // quantum is at bit 20 for normals and higher for subnormals), with the
  // low 12 bits from a set of edge patterns.
  const uint32_t lows[] = {0x000, 0x001, 0x7FF, 0x800, 0x801, 0xFFF, 0x555};
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t exponent = 0; exponent < 256; ++exponent) {
      for (uint32_t top = 0; top < (1u << 11); ++top)
        for (uint32_t low : lows)
          in.push_back(nx::floatFromBits((sign << 31) | (exponent << 23) |
                                         (top << 12) | low));
      if (in.size() >= (1u << 22))
        flush();
    }
  flush();
  // Every E4M3 grid point and midpoint, +-3 ulps (ties, the saturation
  // threshold 448 + 16 and the subnormal grid included).
  for (uint32_t code = 0; code < 0x7F; ++code) {
    const float lo = nx::decodeE4M3(uint8_t(code));
    const float hi = code == 0x7E ? 480.f : nx::decodeE4M3(uint8_t(code + 1));
    for (float center : {lo, (lo + hi) / 2})
      for (int d = -3; d <= 3; ++d)
        for (uint32_t sign : {0u, 0x80000000u}) {
          int64_t b = int64_t(bitsOf(center)) + d;
          if (b < 0)
            continue;
          in.push_back(nx::floatFromBits(uint32_t(b) | sign));
        }
  }
  // A strided sweep of all 2^32 patterns.
  for (uint64_t b = 0; b < (1ull << 32); b += 1021)
    in.push_back(nx::floatFromBits(uint32_t(b)));
  flush();
  EXPECT_GT(checked, 10'000'000u);
  std::printf("[ info ] %llu fp32 values rounded to E4M3 bit-exactly\n",
              static_cast<unsigned long long>(checked));
}

TEST(LinearKernels, ArithmeticCodeDecodeMatchesTheTables) {
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildCodeDecodeKernel(m, "e4m3", /*fp4=*/false);
    buildCodeDecodeKernel(m, "e2m1", /*fp4=*/true);
  });
  using Fn = void (*)(Descriptor<1, int8_t> *, Descriptor<1, float> *);
  for (bool fp4 : {false, true}) {
    auto *kernel = kernelOf<Fn>(lib, fp4 ? "e2m1" : "e4m3");
    ASSERT_NE(kernel, nullptr);
    std::vector<int8_t> codes(256);
    for (int c = 0; c < 256; ++c)
      codes[size_t(c)] = int8_t(uint8_t(c));
    std::vector<float> out(256, 0.f);
    auto dc = describe<1>(codes, {256});
    auto dout = describe<1>(out, {256});
    kernel(&dc, &dout);
    for (int c = 0; c < 256; ++c) {
      const float want = fp4 ? nx::decodeE2M1(uint8_t(c)) : nx::decodeE4M3(uint8_t(c));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(out[size_t(c)])) << "code " << c;
        EXPECT_EQ(std::signbit(out[size_t(c)]), std::signbit(want)) << "code " << c;
      } else {
        EXPECT_EQ(bitsOf(out[size_t(c)]), bitsOf(want))
            << (fp4 ? "E2M1" : "E4M3") << " code " << c;
      }
    }
  }
}

/// All 2^32 fp32 bit patterns (about a minute; run with
/// --gtest_also_run_disabled_tests).
TEST(LinearKernels, DISABLED_E4M3RoundingMatchesNumericsOnEveryFloat) {
  KernelLibrary lib([](mlir::ModuleOp m) { buildE4M3RoundKernel(m, "e4m3"); });
  auto *kernel = kernelOf<void (*)(Descriptor<1, float> *, Descriptor<1, float> *)>(
      lib, "e4m3");
  ASSERT_NE(kernel, nullptr);
  uint64_t checked = 0;
  std::vector<float> in(1u << 24);
  for (uint64_t base = 0; base < (1ull << 32); base += in.size()) {
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = nx::floatFromBits(uint32_t(base + i));
    expectE4M3RoundTrip(kernel, in, checked);
    if (::testing::Test::HasFailure())
      return;
  }
  EXPECT_EQ(checked, 1ull << 32);
}

TEST(LinearKernels, ActQuantMatchesNumericsBitForBit) {
  constexpr int64_t k = 256;
  KernelLibrary lib([](mlir::ModuleOp m) { buildFp8ActQuantKernel(m, "aq", k); });
  auto *kernel = kernelOf<void (*)(Descriptor<2> *, Descriptor<2> *)>(lib, "aq");
  ASSERT_NE(kernel, nullptr);
  const int64_t rows = 40;
  auto x = randomActivations(rows, k, 11);
  // Edge blocks: amax below the 1e-4 floor, bf16 subnormals, -0, huge
  // values, +-inf (amax = FLT_MAX), NaN (ignored by amax), 448 * 2^n exactly.
  std::mt19937 gen(5);
  auto setBlock = [&](int64_t r, int64_t b, const std::function<float(int)> &f) {
    for (int c = 0; c < 32; ++c)
      x[size_t(r * k + b * 32 + c)] = nx::floatToBf16(f(c));
  };
  setBlock(0, 0, [](int c) { return (c - 16) * 1e-7f; });
  setBlock(0, 1, [](int c) { return std::ldexp(float(c - 16), -140); });
  setBlock(0, 2, [](int c) { return c % 2 ? -0.f : 0.f; });
  setBlock(0, 3, [](int c) { return std::ldexp(float(c - 16) * 1.37f, 100); });
  setBlock(0, 4, [](int c) {
    return c == 5 ? std::numeric_limits<float>::infinity() : float(c);
  });
  setBlock(0, 5, [](int c) {
    return c == 7 ? -std::numeric_limits<float>::infinity() : -float(c) * 1e30f;
  });
  setBlock(0, 6, [](int c) {
    return c == 9 ? std::numeric_limits<float>::quiet_NaN() : float(c) * 0.1f;
  });
  setBlock(0, 7, [](int c) { return c == 0 ? 448.f * 1024.f : float(c) * 3.3f; });
  setBlock(1, 0, [](int c) { return std::ldexp(1.f + c / 32.f, 126); });
  setBlock(1, 1, [](int c) { return c == 0 ? 3.3895314e38f : float(c); }); // bf16 max
  setBlock(1, 2, [&](int) { return float(int(gen() % 2000) - 1000) * 1e-4f; });
  // amax below the floor with E4M3 subnormals at the floored scale.
  setBlock(1, 3, [](int c) { return c == 0 ? 2e-6f : float(c - 16) * 3e-9f; });
  std::vector<uint16_t> y(x.size(), 0xFFFF);
  auto dx = describe<2>(x, {rows, k}), dy = describe<2>(y, {rows, k});
  kernel(&dx, &dy);
  reference::Mat expected = toMat(x, rows, k);
  for (int64_t r = 0; r < rows; ++r)
    reference::fp8QuantDequant(expected.row(r), k);
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_EQ(y[i], nx::floatToBf16(expected.v[i]))
        << "element " << i << " (x = " << nx::bf16ToFloat(x[i]) << ")";
}

//===----------------------------------------------------------------------===//
// Linear kernels
//===----------------------------------------------------------------------===//

using QuantKernel = void (*)(Descriptor<2> *, Descriptor<2, uint8_t> *,
                             Descriptor<2, uint8_t> *, Descriptor<2> *);

void expectBitExact(const std::vector<uint16_t> &y, const reference::Mat &want,
                    const std::string &what) {
  ASSERT_EQ(int64_t(y.size()), want.rows * want.cols);
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_EQ(y[i], nx::floatToBf16(want.v[i]))
        << what << ": element " << i << " (row " << int64_t(i) / want.cols
        << "), got " << nx::bf16ToFloat(y[i]) << ", want " << want.v[i];
}

TEST(LinearKernels, Fp8MatchesTheReferenceBitForBit) {
  // N = 80 is not a multiple of 32: the last scale row covers 16 outputs.
  constexpr int64_t n = 80, k = 160;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildLinearKernel(m, "fp8", {LinearFormat::FP8Block32, k, n});
  });
  auto *kernel = kernelOf<QuantKernel>(lib, "fp8");
  ASSERT_NE(kernel, nullptr);
  const int64_t scaleRows = (n + 31) / 32, scaleCols = k / 32;
  uint32_t seed = 100;
  for (int64_t rows : kRowCounts)
    for (int spread : {8, 120}) { // sane scales, then extreme ones
      auto x = randomActivations(rows, k, ++seed);
      auto w = randomE4M3Codes(size_t(n * k), ++seed);
      auto s = randomUe8m0(size_t(scaleRows * scaleCols), ++seed, spread);
      if (spread > 100)
        s[0] = 0; // 2^-127: subnormal weights
      std::vector<uint16_t> y(size_t(rows * n), 0xFFFF);
      auto dx = describe<2>(x, {rows, k}), dy = describe<2>(y, {rows, n});
      auto dw = describe<2>(w, {n, k});
      auto ds = describe<2>(s, {scaleRows, scaleCols});
      kernel(&dx, &dw, &ds, &dy);
      reference::Weight weight{reference::WeightKind::FP8, n, k, w.data(),
                               s.data()};
      expectBitExact(y, reference::linear(toMat(x, rows, k), weight),
                     "fp8 rows " + std::to_string(rows) + " spread " +
                         std::to_string(spread));
    }
}

TEST(LinearKernels, Fp4MatchesTheReferenceBitForBit) {
  constexpr int64_t n = 48, k = 128;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildLinearKernel(m, "fp4", {LinearFormat::FP4E2M1, k, n});
  });
  auto *kernel = kernelOf<QuantKernel>(lib, "fp4");
  ASSERT_NE(kernel, nullptr);
  uint32_t seed = 200;
  for (int64_t rows : kRowCounts)
    for (int spread : {8, 120}) {
      auto x = randomActivations(rows, k, ++seed);
      auto w = randomBytes(size_t(n * k / 2), ++seed); // every E2M1 pair
      auto s = randomUe8m0(size_t(n * k / 32), ++seed, spread);
      if (spread > 100)
        s[1] = 0;
      std::vector<uint16_t> y(size_t(rows * n), 0xFFFF);
      auto dx = describe<2>(x, {rows, k}), dy = describe<2>(y, {rows, n});
      auto dw = describe<2>(w, {n, k / 2});
      auto ds = describe<2>(s, {n, k / 32});
      kernel(&dx, &dw, &ds, &dy);
      reference::Weight weight{reference::WeightKind::FP4, n, k, w.data(),
                               s.data()};
      expectBitExact(y, reference::linear(toMat(x, rows, k), weight),
                     "fp4 rows " + std::to_string(rows) + " spread " +
                         std::to_string(spread));
    }
}

TEST(LinearKernels, QuantizedAtModelWidthsMatchTheReference) {
  // The model's K (hidden 4096 into FP8 projections, 2048 into FP4 experts'
  // down projection), a slice of N.
  constexpr int64_t k8 = 4096, n8 = 72, k4 = 2048, n4 = 40;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildLinearKernel(m, "fp8", {LinearFormat::FP8Block32, k8, n8});
    buildLinearKernel(m, "fp4", {LinearFormat::FP4E2M1, k4, n4});
  });
  auto *fp8 = kernelOf<QuantKernel>(lib, "fp8");
  auto *fp4 = kernelOf<QuantKernel>(lib, "fp4");
  ASSERT_NE(fp8, nullptr);
  ASSERT_NE(fp4, nullptr);
  uint32_t seed = 600;
  for (int64_t rows : {int64_t(1), int64_t(9)}) {
    {
      auto x = randomActivations(rows, k8, ++seed);
      auto w = randomE4M3Codes(size_t(n8 * k8), ++seed);
      auto s = randomUe8m0(size_t(((n8 + 31) / 32) * (k8 / 32)), ++seed);
      std::vector<uint16_t> y(size_t(rows * n8), 0xFFFF);
      auto dx = describe<2>(x, {rows, k8}), dy = describe<2>(y, {rows, n8});
      auto dw = describe<2>(w, {n8, k8});
      auto ds = describe<2>(s, {(n8 + 31) / 32, k8 / 32});
      fp8(&dx, &dw, &ds, &dy);
      reference::Weight weight{reference::WeightKind::FP8, n8, k8, w.data(),
                               s.data()};
      expectBitExact(y, reference::linear(toMat(x, rows, k8), weight),
                     "fp8 K=4096 rows " + std::to_string(rows));
    }
    {
      auto x = randomActivations(rows, k4, ++seed);
      auto w = randomBytes(size_t(n4 * k4 / 2), ++seed);
      auto s = randomUe8m0(size_t(n4 * k4 / 32), ++seed);
      std::vector<uint16_t> y(size_t(rows * n4), 0xFFFF);
      auto dx = describe<2>(x, {rows, k4}), dy = describe<2>(y, {rows, n4});
      auto dw = describe<2>(w, {n4, k4 / 2});
      auto ds = describe<2>(s, {n4, k4 / 32});
      fp4(&dx, &dw, &ds, &dy);
      reference::Weight weight{reference::WeightKind::FP4, n4, k4, w.data(),
                               s.data()};
      expectBitExact(y, reference::linear(toMat(x, rows, k4), weight),
                     "fp4 K=2048 rows " + std::to_string(rows));
    }
  }
}

TEST(LinearKernels, Bf16MatchesTheReferenceBitForBit) {
  // K need not be a multiple of 32 for the plain formats.
  constexpr int64_t n = 40, k = 72;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildLinearKernel(m, "bf16", {LinearFormat::BF16, k, n});
  });
  using Kernel = void (*)(Descriptor<2> *, Descriptor<2> *, Descriptor<2> *);
  auto *kernel = kernelOf<Kernel>(lib, "bf16");
  ASSERT_NE(kernel, nullptr);
  uint32_t seed = 300;
  for (int64_t rows : kRowCounts) {
    auto x = randomBf16(size_t(rows * k), ++seed);
    auto w = randomBf16(size_t(n * k), ++seed, 0.1f);
    std::vector<uint16_t> y(size_t(rows * n), 0xFFFF);
    auto dx = describe<2>(x, {rows, k}), dy = describe<2>(y, {rows, n});
    auto dw = describe<2>(w, {n, k});
    kernel(&dx, &dw, &dy);
    reference::Weight weight{reference::WeightKind::BF16, n, k,
                             reinterpret_cast<const uint8_t *>(w.data())};
    expectBitExact(y, reference::linear(toMat(x, rows, k), weight),
                   "bf16 rows " + std::to_string(rows));
  }
}

TEST(LinearKernels, F32MatchesTheReferenceBitForBit) {
  // The gate / compressor / head form: bf16-stored weight, fp32 output.
  constexpr int64_t n = 24, k = 56;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildLinearKernel(m, "f32", {LinearFormat::F32, k, n});
    LinearKernelSpec f32In{LinearFormat::F32, k, n};
    f32In.inputF32 = true;
    f32In.weightF32 = true;
    buildLinearKernel(m, "f32_f32", f32In);
  });
  using Kernel = void (*)(Descriptor<2> *, Descriptor<2> *,
                          Descriptor<2, float> *);
  using KernelF = void (*)(Descriptor<2, float> *, Descriptor<2, float> *,
                           Descriptor<2, float> *);
  auto *kernel = kernelOf<Kernel>(lib, "f32");
  auto *kernelF = kernelOf<KernelF>(lib, "f32_f32");
  ASSERT_NE(kernel, nullptr);
  ASSERT_NE(kernelF, nullptr);
  uint32_t seed = 400;
  for (int64_t rows : kRowCounts) {
    auto x = randomBf16(size_t(rows * k), ++seed);
    auto w = randomBf16(size_t(n * k), ++seed, 0.1f);
    std::vector<float> y(size_t(rows * n), -1.f);
    auto dx = describe<2>(x, {rows, k}), dw = describe<2>(w, {n, k});
    auto dy = describe<2>(y, {rows, n});
    kernel(&dx, &dw, &dy);
    reference::Weight weight{reference::WeightKind::F32, n, k,
                             reinterpret_cast<const uint8_t *>(w.data())};
    reference::Mat want = reference::linear(toMat(x, rows, k), weight);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(bitsOf(y[i]), bitsOf(want.v[i])) << "f32 element " << i;

    // fp32 activations (not bf16-rounded) and fp32-stored weights.
    std::mt19937 gen(++seed);
    std::normal_distribution<float> dist(0.f, 1.f);
    std::vector<float> xf(size_t(rows * k)), wf(size_t(n * k));
    for (float &v : xf)
      v = dist(gen);
    for (float &v : wf)
      v = dist(gen) * 0.1f;
    auto dxf = describe<2>(xf, {rows, k}), dwf = describe<2>(wf, {n, k});
    kernelF(&dxf, &dwf, &dy);
    reference::Mat xm(rows, k);
    xm.v = xf;
    reference::Weight weightF{reference::WeightKind::F32, n, k,
                              reinterpret_cast<const uint8_t *>(wf.data())};
    weightF.storedF32 = true;
    want = reference::linear(xm, weightF);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(bitsOf(y[i]), bitsOf(want.v[i])) << "f32/f32 element " << i;
  }
}

TEST(LinearKernels, GroupedBf16MatchesTheWoAEinsumBitForBit) {
  // wo_a: groups G, rank R per group, input width K/G per group.
  constexpr int64_t groups = 4, rank = 12, groupWidth = 48;
  constexpr int64_t n = groups * rank, k = groups * groupWidth;
  KernelLibrary lib([](mlir::ModuleOp m) {
    LinearKernelSpec spec{LinearFormat::BF16, k, n};
    spec.groups = groups;
    buildLinearKernel(m, "wo_a", spec);
    // The fp32-output form shows the summation order that bf16 rounding
    // would mostly hide.
    spec.format = LinearFormat::F32;
    buildLinearKernel(m, "wo_a_f32", spec);
  });
  using Kernel = void (*)(Descriptor<2> *, Descriptor<2> *, Descriptor<2> *);
  using KernelF = void (*)(Descriptor<2> *, Descriptor<2> *,
                           Descriptor<2, float> *);
  auto *kernel = kernelOf<Kernel>(lib, "wo_a");
  auto *kernelF = kernelOf<KernelF>(lib, "wo_a_f32");
  ASSERT_NE(kernel, nullptr);
  ASSERT_NE(kernelF, nullptr);
  uint32_t seed = 500;
  for (int64_t rows : kRowCounts) {
    auto x = randomBf16(size_t(rows * k), ++seed);
    auto w = randomBf16(size_t(n * groupWidth), ++seed, 0.1f);
    std::vector<uint16_t> y(size_t(rows * n), 0xFFFF);
    auto dx = describe<2>(x, {rows, k}), dy = describe<2>(y, {rows, n});
    auto dw = describe<2>(w, {n, groupWidth});
    kernel(&dx, &dw, &dy);
    // ReferenceModel "Grouped low-rank output": u[i, gr] = bf16(sum_e
    // o[i, g * groupWidth + e] * wo_a[gr, e]) with g = gr / rank, an fp32
    // partial per 32-block of e added in order (reference::kLinearBlock).
    reference::Weight woA{reference::WeightKind::BF16, n, groupWidth,
                          reinterpret_cast<const uint8_t *>(w.data())};
    reference::Mat o = toMat(x, rows, k), u(rows, n), uf(rows, n);
    std::vector<float> wrow(static_cast<size_t>(groupWidth));
    for (int64_t gr = 0; gr < n; ++gr) {
      const int64_t g = gr / rank;
      woA.dequantizeRow(gr, wrow.data());
      for (int64_t i = 0; i < rows; ++i) {
        const float *og = o.row(i) + g * groupWidth;
        float acc = 0.f;
        for (int64_t kb = 0; kb < groupWidth; kb += reference::kLinearBlock) {
          float partial = 0.f;
          for (int64_t e = kb; e < std::min(groupWidth, kb + reference::kLinearBlock); ++e)
            partial += og[e] * wrow[size_t(e)];
          acc += partial;
        }
        u.at(i, gr) = reference::bf16(acc);
        uf.at(i, gr) = acc;
      }
    }
    expectBitExact(y, u, "wo_a rows " + std::to_string(rows));
    std::vector<float> yf(size_t(rows * n), -1.f);
    auto dyf = describe<2>(yf, {rows, n});
    kernelF(&dx, &dw, &dyf);
    for (size_t i = 0; i < yf.size(); ++i)
      ASSERT_EQ(bitsOf(yf[i]), bitsOf(uf.v[i])) << "wo_a f32 element " << i;
  }
}

TEST(LinearKernels, GroupedFp8AsBf16MatchesTheConvertedWoABitForBit) {
  // The released wo_a: FP8 blocks in the checkpoint, which convert.py
  // dequantizes to bf16 (the reference does so at load); the kernel decodes
  // them in place. N = 40 leaves a partial scale row.
  constexpr int64_t groups = 2, rank = 20, groupWidth = 96;
  constexpr int64_t n = groups * rank, k = groups * groupWidth;
  constexpr int64_t scaleRows = (n + 31) / 32, scaleCols = (groupWidth + 31) / 32;
  KernelLibrary lib([](mlir::ModuleOp m) {
    LinearKernelSpec spec{LinearFormat::FP8AsBF16, k, n};
    spec.groups = groups;
    buildLinearKernel(m, "wo_a_fp8", spec);
  });
  auto *kernel = kernelOf<QuantKernel>(lib, "wo_a_fp8");
  ASSERT_NE(kernel, nullptr);
  uint32_t seed = 900;
  for (int64_t rows : kRowCounts) {
    auto x = randomBf16(size_t(rows * k), ++seed);
    auto w = randomE4M3Codes(size_t(n * groupWidth), ++seed);
    auto s = randomUe8m0(size_t(scaleRows * scaleCols), ++seed);
    std::vector<uint16_t> y(size_t(rows * n), 0xFFFF);
    auto dx = describe<2>(x, {rows, k}), dy = describe<2>(y, {rows, n});
    auto dw = describe<2>(w, {n, groupWidth});
    auto ds = describe<2>(s, {scaleRows, scaleCols});
    kernel(&dx, &dw, &ds, &dy);
    // ReferenceModel::load: each row dequantized and rounded to bf16, then
    // the grouped einsum in fp32.
    reference::Weight woA{reference::WeightKind::FP8, n, groupWidth, w.data(),
                          s.data()};
    reference::Mat o = toMat(x, rows, k), u(rows, n);
    std::vector<float> wrow(static_cast<size_t>(groupWidth));
    for (int64_t gr = 0; gr < n; ++gr) {
      woA.dequantizeRow(gr, wrow.data());
      for (float &v : wrow)
        v = nx::bf16ToFloat(nx::floatToBf16(v));
      const float *base = nullptr;
      for (int64_t i = 0; i < rows; ++i) {
        base = o.row(i) + (gr / rank) * groupWidth;
        float acc = 0.f;
        for (int64_t e = 0; e < groupWidth; ++e)
          acc += base[e] * wrow[size_t(e)];
        u.at(i, gr) = reference::bf16(acc);
      }
    }
    expectBitExact(y, u, "wo_a fp8 rows " + std::to_string(rows));
  }
}

TEST(LinearKernels, RowTilesDoNotChangeABit) {
  // Every format, untiled (verified against the reference above) and tiled
  // by 4 and 8 rows: 1, 3 and 17 rows cover partial tiles.
  constexpr int64_t n = 40, k = 96;
  struct Form {
    const char *name;
    LinearFormat format;
    int64_t groups;
  };
  const Form forms[] = {{"fp8", LinearFormat::FP8Block32, 1},
                        {"fp4", LinearFormat::FP4E2M1, 1},
                        {"bf16", LinearFormat::BF16, 1},
                        {"fp8_as_bf16", LinearFormat::FP8AsBF16, 2}};
  KernelLibrary lib([&](mlir::ModuleOp m) {
    for (const Form &f : forms)
      for (int64_t tile : {1, 4, 8}) {
        LinearKernelSpec spec{f.format, k, n};
        spec.groups = f.groups;
        spec.rowTile = tile;
        buildLinearKernel(m, std::string(f.name) + "_t" + std::to_string(tile), spec);
      }
  });
  uint32_t seed = 1300;
  for (const Form &f : forms) {
    const bool fp4 = f.format == LinearFormat::FP4E2M1;
    const bool bf16 = f.format == LinearFormat::BF16;
    const int64_t width = k / f.groups;
    std::vector<int64_t> scaleShape =
        fp4 ? std::vector<int64_t>{n, k / 32}
            : std::vector<int64_t>{(n + 31) / 32, (width + 31) / 32};
    for (int64_t rows : kRowCounts) {
      auto x = randomActivations(rows, k, ++seed);
      auto codes = fp4 ? randomBytes(size_t(n * k / 2), ++seed)
                       : randomE4M3Codes(size_t(n * width), ++seed);
      auto wbf = randomBf16(size_t(n * k), ++seed, 0.1f);
      auto scales = randomUe8m0(size_t(scaleShape[0] * scaleShape[1]), ++seed);
      std::vector<std::vector<uint16_t>> outputs;
      for (int64_t tile : {1, 4, 8}) {
        std::string name = std::string(f.name) + "_t" + std::to_string(tile);
        std::vector<uint16_t> y(size_t(rows * n), 0xFFFF);
        auto dx = describe<2>(x, {rows, k}), dy = describe<2>(y, {rows, n});
        if (bf16) {
          auto dw = describe<2>(wbf, {n, k});
          kernelOf<void (*)(Descriptor<2> *, Descriptor<2> *, Descriptor<2> *)>(
              lib, name)(&dx, &dw, &dy);
        } else {
          auto dw = describe<2>(codes, {n, fp4 ? k / 2 : width});
          auto ds = describe<2>(scales, {scaleShape[0], scaleShape[1]});
          kernelOf<QuantKernel>(lib, name)(&dx, &dw, &ds, &dy);
        }
        outputs.push_back(std::move(y));
      }
      EXPECT_EQ(outputs[0], outputs[1]) << f.name << " rows " << rows << " tile 4";
      EXPECT_EQ(outputs[0], outputs[2]) << f.name << " rows " << rows << " tile 8";
    }
  }
}

TEST(LinearKernels, InvalidSpecsAreRejected) {
  mlir::MLIRContext context;
  loadHostKernelDialects(context);
  context.getDiagEngine().registerHandler([](mlir::Diagnostic &) {
    return mlir::success(); // silence the expected errors
  });
  auto module = mlir::ModuleOp::create(mlir::UnknownLoc::get(&context));
  EXPECT_FALSE(bool(buildLinearKernel(module, "a", {LinearFormat::FP8Block32, 40, 8})));
  LinearKernelSpec grouped{LinearFormat::FP4E2M1, 64, 8};
  grouped.groups = 2;
  EXPECT_FALSE(bool(buildLinearKernel(module, "b", grouped)));
  LinearKernelSpec uneven{LinearFormat::BF16, 64, 9};
  uneven.groups = 2;
  EXPECT_FALSE(bool(buildLinearKernel(module, "c", uneven)));
  EXPECT_TRUE(bool(buildLinearKernel(module, "d", {LinearFormat::FP8Block32, 64, 8})));
  module->erase();
}

} // namespace
} // namespace csa::codegen

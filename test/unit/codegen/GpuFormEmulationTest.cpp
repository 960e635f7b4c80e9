//===- GpuFormEmulationTest.cpp - The block forms, run by host threads ----===//
//
// The block forms of the other kernels (top-k, mHC mix sums, RMS norm,
// Engram gate, index scores, MoE routing, cache appends, row quantizers, the
// rope_quantize_store region)
// run on host threads (SimtEmulation.h): each gives the host kernel's bits
// or meets its bound on fresh random inputs. The linears' forms are in
// GpuFormLinearEmulationTest.cpp, sparse attention's in
// GpuFormAttentionEmulationTest.cpp.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/AttentionKernels.h"
#include "codegen/host/SelectionKernels.h"
#include "codegen/host/EngramKernels.h"
#include "codegen/host/FusedKernels.h"
#include "codegen/host/HostKernels.h"
#include "codegen/host/MhcKernels.h"
#include "codegen/host/MoeKernels.h"
#include "codegen/host/QuantizeKernels.h"
#include "test/unit/codegen/KernelTestSupport.h"
#include "test/unit/codegen/SimtEmulation.h"
#include "runtime/numerics/Tolerance.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace csa::codegen;
using namespace csa::codegen::testing;
using namespace mlir;

namespace {
/// The block form of a top-k rank against the host kernel on `scores`
/// (n x width), with `threads` threads a block.
void expectTopKBlockFormMatchesHost(int64_t k, bool masked, int64_t threads, int64_t n,
                                    int64_t width, std::vector<float> scores,
                                    std::vector<int8_t> mask) {
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildTopKRankKernel(m, "host", k, masked);
    func::FuncOp form = buildTopKRankKernel(m, "form", k, masked);
    TopKBlockLanes lanes;
    static_cast<BlockRowLanes &>(lanes) = simt.blockRow(threads);
    lanes.histType = MemRefType::get({256}, IntegerType::get(m.getContext(), 32));
    lanes.stateType = MemRefType::get({2}, IntegerType::get(m.getContext(), 64));
    buildTopKRankBlockBody(form, k, masked, lanes);
  });
  std::vector<int8_t> pickedHost(size_t(n * width), 7), pickedForm(size_t(n * width), 7);
  auto ds = describe<2>(scores, {n, width});
  auto dm = describe<2>(mask, {n, width});
  auto dh = describe<2>(pickedHost, {n, width});
  auto df = describe<2>(pickedForm, {n, width});
  void *host = lib.symbol("host"), *form = lib.symbol("form");
  ASSERT_TRUE(host && form);
  using Host2 = void (*)(void *, void *);
  using Host3 = void (*)(void *, void *, void *);
  using Form4 = void (*)(void *, void *, void *, void *);
  using Form5 = void (*)(void *, void *, void *, void *, void *);
  if (masked)
    reinterpret_cast<Host3>(host)(&ds, &dm, &dh);
  else
    reinterpret_cast<Host2>(host)(&ds, &dh);
  launch(n, 1, threads, 256 * 4 + 64, [&](void *shared) {
    int32_t *h = static_cast<int32_t *>(shared);
    int64_t *st = reinterpret_cast<int64_t *>(static_cast<uint8_t *>(shared) + 1024);
    Descriptor<1, int32_t> dHist{h, h, 0, {256}, {1}};
    Descriptor<1, int64_t> dState{st, st, 0, {2}, {1}};
    if (masked)
      reinterpret_cast<Form5>(form)(&ds, &dm, &df, &dHist, &dState);
    else
      reinterpret_cast<Form4>(form)(&ds, &df, &dHist, &dState);
  });
  int64_t pickedCount = 0;
  for (size_t i = 0; i < pickedHost.size(); ++i) {
    ASSERT_EQ(int(pickedHost[i]), int(pickedForm[i]))
        << "row " << i / size_t(width) << " position " << i % size_t(width);
    pickedCount += pickedHost[i];
  }
  EXPECT_GT(pickedCount, 0);
}
} // namespace

/// The greedy token's host kernel and block form against the host's
/// sampling rule on rows with ties (-0 among +0 too), -inf, a row of -inf
/// only, a NaN and a +inf, with blocks of 32 to 1024 threads.
TEST(GpuFormEmulation, GreedyTokenBlockFormMatchesTheHostKernel) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> level(-20, 20);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t width : {int64_t(37), int64_t(1000), int64_t(4099)}) {
    const int64_t n = 7;
    std::vector<float> logits(size_t(n * width));
    for (float &l : logits)
      l = 0.25f * float(level(gen));
    auto at = [&](int64_t row, int64_t t) -> float & { return logits[size_t(row * width + t)]; };
    for (int64_t t = 0; t < width; t += 3)
      at(1, t) = t % 2 ? -0.0f : 0.0f; // row 1: only +-0 and the rest
    for (int64_t t = 0; t < width; ++t)
      at(2, t) = 100.0f; // row 2: one value everywhere: id 0
    for (int64_t t = 0; t < width; ++t)
      at(3, t) = -inf; // row 3: nothing allowed: -1
    at(4, width / 2) = std::numeric_limits<float>::quiet_NaN(); // -1
    at(5, width - 1) = inf;                                      // -1
    for (int64_t t = 0; t < width; t += 2)
      at(6, t) = -inf;
    std::vector<int32_t> want(static_cast<size_t>(n));
    for (int64_t row = 0; row < n; ++row) {
      int32_t best = -1;
      bool bad = false;
      for (int64_t t = 0; t < width; ++t) {
        const float l = at(row, t);
        bad |= std::isnan(l) || l == inf;
        if (l != -inf && (best < 0 || l > at(row, best)))
          best = int32_t(t);
      }
      want[size_t(row)] = bad ? -1 : best;
    }
    EXPECT_EQ(want[3], -1);
    EXPECT_EQ(want[2], 0);
    for (int64_t threads : {int64_t(32), int64_t(96), int64_t(1024)}) {
      KernelLibrary lib([&](ModuleOp m) {
        Simt simt(m);
        buildGreedyTokenKernel(m, "host");
        func::FuncOp form = buildGreedyTokenKernel(m, "form");
        GreedyTokenLanes lanes;
        static_cast<BlockRowLanes &>(lanes) = simt.blockRow(threads);
        lanes.valuesType = MemRefType::get({threads}, Float32Type::get(m.getContext()));
        lanes.idsType = MemRefType::get({2 * threads}, IntegerType::get(m.getContext(), 32));
        buildGreedyTokenBlockBody(form, lanes);
      });
      std::vector<int32_t> host(static_cast<size_t>(n), 7), form(static_cast<size_t>(n), 7);
      auto dl = describe<2>(logits, {n, width});
      auto dh = describe<1>(host, {n});
      auto df = describe<1>(form, {n});
      void *hostFn = lib.symbol("host"), *formFn = lib.symbol("form");
      ASSERT_TRUE(hostFn && formFn);
      reinterpret_cast<void (*)(void *, void *)>(hostFn)(&dl, &dh);
      launch(n, 1, threads, size_t(threads) * 12, [&](void *shared) {
        float *v = static_cast<float *>(shared);
        int32_t *ids = reinterpret_cast<int32_t *>(v + threads);
        Descriptor<1, float> dv{v, v, 0, {threads}, {1}};
        Descriptor<1, int32_t> di{ids, ids, 0, {2 * threads}, {1}};
        reinterpret_cast<void (*)(void *, void *, void *, void *)>(formFn)(&dl, &df, &dv, &di);
      });
      EXPECT_EQ(host, want) << width;
      EXPECT_EQ(form, want) << width << " x " << threads << " threads";
    }
  }
}

TEST(GpuFormEmulation, TopKRankBlockFormMatchesTheHostKernel) {
  std::mt19937 gen(11);
  // Scores with ties (a few distinct values), -0 and +0, -inf, a NaN.
  const int64_t n = 4, width = 300;
  std::vector<float> scores(size_t(n * width));
  std::uniform_int_distribution<int> level(-6, 6);
  for (float &s : scores)
    s = 0.5f * float(level(gen));
  for (int64_t t = 0; t < width; t += 7)
    scores[size_t(t)] = -0.0f; // row 0: -0 among +0
  for (int64_t t = 0; t < width; t += 5)
    scores[size_t(width + t)] = -std::numeric_limits<float>::infinity();
  scores[size_t(2 * width + 17)] = std::numeric_limits<float>::quiet_NaN();
  std::vector<int8_t> mask(scores.size());
  std::uniform_int_distribution<int> coin(0, 3);
  for (int8_t &m : mask)
    m = int8_t(coin(gen) != 0);
  for (bool masked : {false, true}) {
    expectTopKBlockFormMatchesHost(16, masked, 32, n, width, scores, mask);
    expectTopKBlockFormMatchesHost(100, masked, 64, n, width, scores, mask);
    expectTopKBlockFormMatchesHost(100, masked, 256, n, width, scores, mask); // a bin a thread
  }
  // More threads than the scan's 256 bins give the same picks. (This does
  // not see a read past the bins: the emulated kernel's loads are not
  // bounds-checked; the GPU reported one as an illegal address.)
  expectTopKBlockFormMatchesHost(100, false, 512, n, width, scores, mask);
  for (bool masked : {false, true})
    expectTopKBlockFormMatchesHost(100, masked, 1024, n, width, scores, mask); // the GPU's
  // Fewer positions than k: every position is picked.
  std::vector<float> few(scores.begin(), scores.begin() + 3 * 10);
  std::vector<int8_t> fewMask(mask.begin(), mask.begin() + 3 * 10);
  expectTopKBlockFormMatchesHost(16, false, 32, 3, 10, few, fewMask);
  // Distinct random scores, the released k.
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> wide(size_t(2 * 2000));
  for (float &s : wide)
    s = normal(gen);
  std::vector<int8_t> wideMask(wide.size(), 1);
  expectTopKBlockFormMatchesHost(512, false, 64, 2, 2000, wide, wideMask);
  // Index scores as the GPU sees them: bf16 values (many ties, most keys in
  // one bin of a pass), and a masked row that is mostly -inf.
  std::vector<float> bf16(size_t(2 * 3000));
  for (float &s : bf16) {
    uint32_t bits;
    float v = 4.f + normal(gen);
    std::memcpy(&bits, &v, 4);
    bits &= 0xFFFF0000u;
    std::memcpy(&s, &bits, 4);
  }
  std::vector<int8_t> sparseMask(bf16.size(), 0);
  for (size_t t = 0; t < sparseMask.size(); t += 11)
    sparseMask[t] = 1;
  for (bool masked : {false, true}) {
    expectTopKBlockFormMatchesHost(512, masked, 256, 2, 3000, bf16, sparseMask);
    expectTopKBlockFormMatchesHost(512, masked, 1024, 2, 3000, bf16, sparseMask);
  }
}

namespace {
/// mHC's fn weights for the mix-sums tests: N(0, 0.05), as trained ones.
std::vector<float> randomHcMixSumsWeights(int64_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.f, 0.05f);
  std::vector<float> fnW(static_cast<size_t>(count));
  for (float &v : fnW)
    v = normal(gen);
  return fnW;
}

/// The block form of an mHC mix-sums kernel (a block per tile of `tileRows`
/// rows and group of `chains` sums, `threads` threads, shared chunks of
/// `chunk`) against the host kernel on fresh random streams and fn.
void expectHcMixSumsBlockFormMatchesHost(int64_t hc, int64_t dim, int64_t n,
                                         int64_t tileRows, int64_t chains,
                                         int64_t chunk, int64_t threads, uint32_t seed) {
  const int64_t mix = (2 + hc) * hc, width = hc * dim;
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildHcMixSumsKernel(m, "host", hc, dim);
    func::FuncOp form = buildHcMixSumsKernel(m, "form", hc, dim);
    HcMixSumsBlockLanes lanes;
    lanes.rowTile = simt.value(simt.blockX);
    lanes.chainGroup = simt.value(simt.blockY);
    lanes.thread = simt.value(simt.thread);
    lanes.threads = threads;
    lanes.rowsPerTile = tileRows;
    lanes.chainsPerBlock = chains;
    lanes.chunk = chunk;
    lanes.barrier = simt.sync();
    Type f32 = Float32Type::get(m.getContext());
    lanes.sharedWeightType = MemRefType::get({chains, chunk + kHcMixSumsRowPad}, f32);
    lanes.sharedStreamsType = MemRefType::get({tileRows, chunk + kHcMixSumsRowPad}, f32);
    buildHcMixSumsBlockBody(form, hc, dim, lanes);
  });
  std::vector<uint16_t> x = randomBf16(size_t(n * width), seed);
  std::vector<float> fnW = randomHcMixSumsWeights(mix * width, seed + 1);
  std::vector<float> sumsHost(size_t(n * (mix + 1)), -1.f),
      sumsForm(size_t(n * (mix + 1)), -1.f);
  auto dx = describe<3>(x, {n, hc, dim});
  auto dw = describe<2>(fnW, {mix, width});
  auto dh = describe<2>(sumsHost, {n, mix + 1});
  auto df = describe<2>(sumsForm, {n, mix + 1});
  using Host = void (*)(void *, void *, void *);
  using Form = void (*)(void *, void *, void *, void *, void *);
  auto *host = reinterpret_cast<Host>(lib.symbol("host"));
  auto *form = reinterpret_cast<Form>(lib.symbol("form"));
  ASSERT_TRUE(host && form);
  host(&dx, &dw, &dh);
  const size_t wBytes = size_t(chains * (chunk + kHcMixSumsRowPad) * 4);
  launch((n + tileRows - 1) / tileRows, (mix + 1 + chains - 1) / chains, threads,
         wBytes + size_t(tileRows * (chunk + kHcMixSumsRowPad) * 4), [&](void *shared) {
    float *sw = static_cast<float *>(shared), *sx = sw + chains * (chunk + kHcMixSumsRowPad);
    Descriptor<2, float> dW{sw, sw, 0, {chains, chunk + kHcMixSumsRowPad}, {chunk + kHcMixSumsRowPad, 1}};
    Descriptor<2, float> dX{sx, sx, 0, {tileRows, chunk + kHcMixSumsRowPad}, {chunk + kHcMixSumsRowPad, 1}};
    form(&dx, &dw, &df, &dW, &dX);
  });
  for (size_t i = 0; i < sumsHost.size(); ++i) {
    uint32_t h, f;
    std::memcpy(&h, &sumsHost[i], 4);
    std::memcpy(&f, &sumsForm[i], 4);
    ASSERT_EQ(h, f) << "row " << i / size_t(mix + 1) << " sum " << i % size_t(mix + 1);
  }
}
} // namespace

namespace {
/// The split form (the decode form: a block per (row, sum), the products
/// split over its threads) within the dot bound of the host kernel, with
/// the element loads and tree (`words` false) or the word form (16-byte
/// loads, shuffles); the worst error as a fraction of its bound.
double expectHcMixSumsSplitFormWithinBound(int64_t hc, int64_t dim, int64_t n, int64_t threads,
                                           bool words, uint32_t seed) {
  const int64_t mix = (2 + hc) * hc, width = hc * dim;
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildHcMixSumsKernel(m, "host", hc, dim);
    func::FuncOp form = buildHcMixSumsKernel(m, "form", hc, dim);
    HcMixSumsSplitLanes lanes;
    lanes.row = simt.value(simt.blockX);
    lanes.sum = simt.value(simt.blockY);
    lanes.thread = simt.value(simt.thread);
    lanes.threads = threads;
    lanes.barrier = simt.sync();
    if (words) {
      lanes.shuffleXor = simt.shuffleXor();
      lanes.addressSpace = 0;
    }
    lanes.sharedPartialsType = MemRefType::get({threads}, Float32Type::get(m.getContext()));
    buildHcMixSumsSplitBody(form, hc, dim, lanes);
  });
  std::vector<uint16_t> x = randomBf16(size_t(n * width), seed);
  std::vector<float> fnW = randomHcMixSumsWeights(mix * width, seed + 1);
  std::vector<float> sumsHost(size_t(n * (mix + 1)), -1.f),
      sumsForm(size_t(n * (mix + 1)), std::numeric_limits<float>::quiet_NaN()), // poisoned
      sumsAbs(size_t(n * (mix + 1)));
  auto dx = describe<3>(x, {n, hc, dim});
  auto dw = describe<2>(fnW, {mix, width});
  auto dh = describe<2>(sumsHost, {n, mix + 1});
  auto df = describe<2>(sumsForm, {n, mix + 1});
  using Host = void (*)(void *, void *, void *);
  using Form = void (*)(void *, void *, void *, void *);
  auto *host = reinterpret_cast<Host>(lib.symbol("host"));
  auto *form = reinterpret_cast<Form>(lib.symbol("form"));
  EXPECT_TRUE(host && form);
  if (!host || !form)
    return 1e9;
  host(&dx, &dw, &dh);
  // The sums of the products' magnitudes, by the host kernel.
  std::vector<uint16_t> xAbs(x);
  std::vector<float> fnAbs(fnW);
  nx::takeMagnitudes(xAbs.data(), xAbs.size(), 2, nx::OperandEncoding::Real);
  nx::takeMagnitudes(fnAbs.data(), fnAbs.size(), 4, nx::OperandEncoding::Real);
  auto dxa = describe<3>(xAbs, {n, hc, dim});
  auto dwa = describe<2>(fnAbs, {mix, width});
  auto dsa = describe<2>(sumsAbs, {n, mix + 1});
  host(&dxa, &dwa, &dsa);
  launch(n, mix + 1, threads, size_t(threads * 4), [&](void *shared) {
    float *p = static_cast<float *>(shared);
    Descriptor<1, float> dP{p, p, 0, {threads}, {1}};
    form(&dx, &dw, &df, &dP);
  });
  double worst = 0;
  for (size_t i = 0; i < sumsHost.size(); ++i) {
    const double u = sumsHost[i], v = sumsForm[i];
    const double bound = nx::dotErrorBound(width, sumsAbs[i], u, /*outputBf16=*/false);
    EXPECT_LE(std::fabs(u - v), bound) << "row " << i / size_t(mix + 1) << " sum "
                                       << i % size_t(mix + 1) << ": host " << u << ", form " << v;
    if (!(std::fabs(u - v) <= bound))
      return 1e9;
    worst = std::max(worst, std::fabs(u - v) / bound);
  }
  return worst;
}
} // namespace

TEST(GpuFormEmulation, HcMixSumsSplitFormMeetsItsBound) {
  // 96 channels a stream: 48 words a row, more than the 32 threads (a
  // second, partial pass) and fewer than the 64 (idle threads).
  double worst = 0;
  for (bool words : {false, true}) {
    worst = std::max(worst, expectHcMixSumsSplitFormWithinBound(4, 96, 2, 32, words, 51));
    worst = std::max(worst, expectHcMixSumsSplitFormWithinBound(4, 96, 2, 64, words, 52));
  }
  EXPECT_LT(worst, 1.0);
  std::printf("  worst %.3g of the bound\n", worst);
}

TEST(GpuFormEmulation, HcMixSumsBlockFormMatchesTheHostKernel) {
  // hc 4 (24 dot products and a sum of squares a row), 96 channels a
  // stream: chunks of 64 cross the streams' boundaries.
  // The decode form: a block per (row, sum).
  expectHcMixSumsBlockFormMatchesHost(4, 96, 3, 1, 1, 64, 32, 21);
  // The row-tiled form: 4 rows x all 25 sums a block of 128 threads (28
  // idle), the last tile partial; 2 x 13 sums (one group partial).
  expectHcMixSumsBlockFormMatchesHost(4, 96, 7, 4, 25, 128, 128, 22);
  expectHcMixSumsBlockFormMatchesHost(4, 96, 5, 2, 13, 64, 32, 23);
  EXPECT_EQ(hcMixSumsChunk(4, 5120, 1, 1, 48 * 1024), 4096);
  EXPECT_EQ(hcMixSumsChunk(4, 5120, 8, 25, 48 * 1024), 256);
  EXPECT_EQ(hcMixSumsChunk(4, 24, 1, 1, 48 * 1024), 32);
  EXPECT_EQ(hcMixSumsChunk(3, 7, 1, 1, 48 * 1024), 0);
}

namespace {
/// The block form of an RMS norm (a block of `threads` per row) against the
/// host kernel on fresh random rows.
void expectRmsNormBlockFormMatchesHost(int64_t dim, int64_t n, int64_t threads,
                                       uint32_t seed) {
  const double eps = 1e-6;
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildRmsNormKernel(m, "host", dim, eps);
    func::FuncOp form = buildRmsNormKernel(m, "form", dim, eps);
    RmsNormBlockLanes lanes;
    static_cast<BlockRowLanes &>(lanes) = simt.blockRow(threads);
    Type f32 = Float32Type::get(m.getContext());
    lanes.sharedRowType = MemRefType::get({dim}, f32);
    lanes.sharedScaleType = MemRefType::get({1}, f32);
    buildRmsNormBlockBody(form, dim, eps, lanes);
  });
  std::vector<uint16_t> x = randomBf16(size_t(n * dim), seed),
                        w = randomBf16(size_t(dim), seed + 1);
  std::vector<uint16_t> yHost(x.size(), 0), yForm(x.size(), 0);
  auto dx = describe<2>(x, {n, dim});
  auto dw = describe<1>(w, {dim});
  auto dh = describe<2>(yHost, {n, dim});
  auto df = describe<2>(yForm, {n, dim});
  using Host = void (*)(void *, void *, void *);
  using Form = void (*)(void *, void *, void *, void *, void *);
  auto *host = reinterpret_cast<Host>(lib.symbol("host"));
  auto *form = reinterpret_cast<Form>(lib.symbol("form"));
  ASSERT_TRUE(host && form);
  host(&dx, &dw, &dh);
  launch(n, 1, threads, size_t(dim * 4 + 4), [&](void *shared) {
    float *row = static_cast<float *>(shared), *scale = row + dim;
    Descriptor<1, float> dRow{row, row, 0, {dim}, {1}};
    Descriptor<1, float> dScale{scale, scale, 0, {1}, {1}};
    form(&dx, &dw, &df, &dRow, &dScale);
  });
  for (size_t i = 0; i < yHost.size(); ++i)
    ASSERT_EQ(bits(yHost[i]), bits(yForm[i])) << "row " << i / size_t(dim) << " element "
                                              << i % size_t(dim);
}

/// The word form (a 16-byte word a thread, the squares added by shuffles)
/// within numerics::normErrorBound of the host kernel; the worst error as
/// a fraction of its bound.
double expectRmsNormWordFormWithinBound(int64_t dim, int64_t n, uint32_t seed) {
  const double eps = 1e-6;
  const int64_t threads = (dim / 8 + 31) / 32 * 32, warps = threads / 32;
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildRmsNormKernel(m, "host", dim, eps);
    func::FuncOp form = buildRmsNormKernel(m, "form", dim, eps);
    RmsNormBlockLanes lanes;
    static_cast<BlockRowLanes &>(lanes) = simt.blockRow(threads);
    lanes.shuffleXor = simt.shuffleXor();
    lanes.addressSpace = 0;
    Type f32 = Float32Type::get(m.getContext());
    lanes.sharedRowType = MemRefType::get({warps}, f32);
    lanes.sharedScaleType = MemRefType::get({1}, f32);
    buildRmsNormBlockBody(form, dim, eps, lanes);
  });
  std::vector<uint16_t> x = randomBf16(size_t(n * dim), seed),
                        w = randomBf16(size_t(dim), seed + 1);
  std::vector<uint16_t> yHost(x.size(), 0), yForm(x.size(), 0x7FC1); // poisoned: NaN
  auto dx = describe<2>(x, {n, dim});
  auto dw = describe<1>(w, {dim});
  auto dh = describe<2>(yHost, {n, dim});
  auto df = describe<2>(yForm, {n, dim});
  using Host = void (*)(void *, void *, void *);
  using Form = void (*)(void *, void *, void *, void *, void *);
  auto *host = reinterpret_cast<Host>(lib.symbol("host"));
  auto *form = reinterpret_cast<Form>(lib.symbol("form"));
  EXPECT_TRUE(host && form);
  if (!host || !form)
    return 0;
  host(&dx, &dw, &dh);
  launch(n, 1, threads, size_t(warps * 4 + 4), [&](void *shared) {
    float *sums = static_cast<float *>(shared), *scale = sums + warps;
    Descriptor<1, float> dSums{sums, sums, 0, {warps}, {1}};
    Descriptor<1, float> dScale{scale, scale, 0, {1}, {1}};
    form(&dx, &dw, &df, &dSums, &dScale);
  });
  double worst = 0;
  for (size_t i = 0; i < yHost.size(); ++i) {
    const double h = nx::bf16ToFloat(yHost[i]), g = nx::bf16ToFloat(yForm[i]);
    const double bound = nx::normErrorBound(dim, h, /*outputBf16=*/true);
    EXPECT_LE(std::fabs(g - h), bound) << "row " << i / size_t(dim) << " element "
                                       << i % size_t(dim);
    if (!(std::fabs(g - h) <= bound))
      return 1e9;
    worst = std::max(worst, std::fabs(g - h) / bound);
  }
  return worst;
}
} // namespace

TEST(GpuFormEmulation, RmsNormWordFormMeetsItsBound) {
  double worst = expectRmsNormWordFormWithinBound(5120, 2, 41); // 640 threads, 20 warps
  worst = std::max(worst, expectRmsNormWordFormWithinBound(512, 3, 42)); // 2 warps
  worst = std::max(worst, expectRmsNormWordFormWithinBound(136, 2, 43)); // 17 words: idle lanes
  EXPECT_LT(worst, 1.0);
  std::printf("  worst %.3g of the bound\n", worst);
}

namespace {
/// The hc_collapse_norm word form against its parts as the GPU runs them:
/// the collapse kernel, then the RMS norm's word form on its rows; the same
/// bits are expected (the fused form computes each word of the collapse
/// with the collapse kernel's arithmetic). Also within the norm's bound of
/// the fused host kernel.
void expectHcCollapseNormWordFormMatchesItsParts(int64_t hc, int64_t dim, int64_t n,
                                                 uint32_t seed) {
  const double eps = 1e-6;
  const int64_t threads = (dim / 8 + 31) / 32 * 32, warps = threads / 32;
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    Type f32 = Float32Type::get(m.getContext());
    buildHcCollapseKernel(m, "collapse", hc, dim);
    buildRmsNormKernel(m, "norm", dim, eps);
    buildHcCollapseNormKernel(m, "host", "collapse", "norm", hc, dim, eps);
    func::FuncOp wordNorm = buildRmsNormKernel(m, "word_norm", dim, eps);
    func::FuncOp form = buildHcCollapseNormKernel(m, "form", "collapse", "norm", hc, dim, eps);
    RmsNormBlockLanes lanes;
    static_cast<BlockRowLanes &>(lanes) = simt.blockRow(threads);
    lanes.shuffleXor = simt.shuffleXor();
    lanes.addressSpace = 0;
    lanes.sharedRowType = MemRefType::get({warps}, f32);
    lanes.sharedScaleType = MemRefType::get({1}, f32);
    buildRmsNormBlockBody(wordNorm, dim, eps, lanes);
    buildHcCollapseNormWordBody(form, hc, dim, eps, lanes);
  });
  std::vector<uint16_t> x = randomBf16(size_t(n * hc * dim), seed),
                        w = randomBf16(size_t(dim), seed + 1);
  std::vector<float> pre(size_t(n * hc));
  std::vector<uint16_t> preBits = randomBf16(pre.size(), seed + 2, 1.f);
  for (size_t i = 0; i < pre.size(); ++i)
    pre[i] = nx::bf16ToFloat(preBits[i]) * 1.2345679f + 0.25f * float(i % 3); // full fp32 mantissas
  std::vector<uint16_t> collapsed(size_t(n * dim), 0x7FC1), yParts(collapsed.size(), 0x7FC1),
      yForm(collapsed.size(), 0x7FC1), yHost(collapsed.size(), 0x7FC1); // poisoned: NaN
  auto dx = describe<3>(x, {n, hc, dim});
  auto dpre = describe<2>(pre, {n, hc});
  auto dw = describe<1>(w, {dim});
  auto dc = describe<2>(collapsed, {n, dim});
  auto dp = describe<2>(yParts, {n, dim});
  auto df = describe<2>(yForm, {n, dim});
  auto dh = describe<2>(yHost, {n, dim});
  using Three = void (*)(void *, void *, void *);
  using Four = void (*)(void *, void *, void *, void *);
  using WordNorm = void (*)(void *, void *, void *, void *, void *);
  using Form = void (*)(void *, void *, void *, void *, void *, void *);
  auto *collapse = reinterpret_cast<Three>(lib.symbol("collapse"));
  auto *host = reinterpret_cast<Four>(lib.symbol("host"));
  auto *wordNorm = reinterpret_cast<WordNorm>(lib.symbol("word_norm"));
  auto *form = reinterpret_cast<Form>(lib.symbol("form"));
  ASSERT_TRUE(collapse && host && wordNorm && form);
  collapse(&dx, &dpre, &dc);
  host(&dx, &dpre, &dw, &dh);
  auto blocks = [&](const std::function<void(void *, void *)> &run) {
    // The rows last first: no row may depend on another's block.
    launch(
        n, 1, threads, size_t(warps * 4 + 4),
        [&](void *shared) {
          float *sums = static_cast<float *>(shared);
          Descriptor<1, float> dSums{sums, sums, 0, {warps}, {1}};
          Descriptor<1, float> dScale{sums + warps, sums + warps, 0, {1}, {1}};
          run(&dSums, &dScale);
        },
        /*lastFirst=*/true);
  };
  blocks([&](void *sums, void *scale) { wordNorm(&dc, &dw, &dp, sums, scale); });
  blocks([&](void *sums, void *scale) { form(&dx, &dpre, &dw, &df, sums, scale); });
  for (size_t i = 0; i < yParts.size(); ++i) {
    ASSERT_EQ(bits(yParts[i]), bits(yForm[i])) << "row " << i / size_t(dim) << " element "
                                               << i % size_t(dim);
    const double h = nx::bf16ToFloat(yHost[i]), g = nx::bf16ToFloat(yForm[i]);
    ASSERT_LE(std::fabs(g - h), nx::normErrorBound(dim, h, /*outputBf16=*/true))
        << "row " << i / size_t(dim) << " element " << i % size_t(dim);
  }
}
} // namespace

TEST(GpuFormEmulation, HcCollapseNormWordFormMatchesItsParts) {
  expectHcCollapseNormWordFormMatchesItsParts(4, 5120, 3, 51); // the released widths
  expectHcCollapseNormWordFormMatchesItsParts(4, 64, 5, 52);   // tiny: 8 words, idle lanes
  expectHcCollapseNormWordFormMatchesItsParts(2, 136, 1, 53);  // 17 words
}

TEST(GpuFormEmulation, RmsNormBlockFormMatchesTheHostKernel) {
  expectRmsNormBlockFormMatchesHost(512, 3, 64, 31);  // 8 elements a thread
  expectRmsNormBlockFormMatchesHost(100, 2, 32, 32);  // a last partial slot
  expectRmsNormBlockFormMatchesHost(7, 2, 32, 33);    // fewer elements than threads
  expectRmsNormBlockFormMatchesHost(5120, 2, 256, 34); // the released hidden size
}

namespace {
/// The block form of Engram's gate against the host kernel: the streams
/// updated in place, bit for bit, over passes of `chunk` elements.
void expectEngramGateBlockFormMatchesHost(int64_t hc, int64_t dim, int64_t n, int64_t threads,
                                          int64_t chunk, uint32_t seed) {
  const float eps = 1e-6f;
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildEngramGateKernel(m, "host", hc, dim, eps);
    func::FuncOp form = buildEngramGateKernel(m, "form", hc, dim, eps);
    EngramGateBlockLanes lanes;
    lanes.row = simt.value(simt.blockX);
    lanes.stream = simt.value(simt.blockY);
    lanes.thread = simt.value(simt.thread);
    lanes.barrier = simt.sync();
    lanes.threads = threads;
    lanes.chunk = chunk;
    Type f32 = Float32Type::get(m.getContext());
    lanes.sharedProductsType = MemRefType::get({3, chunk}, f32);
    lanes.sharedGateType = MemRefType::get({1}, f32);
    buildEngramGateBlockBody(form, hc, dim, eps, lanes);
  });
  std::vector<uint16_t> streams = randomBf16(size_t(n * hc * dim), seed),
                        kv = randomBf16(size_t(n * (hc + 1) * dim), seed + 1),
                        q = randomBf16(size_t(hc * dim), seed + 2),
                        kw = randomBf16(size_t(hc * dim), seed + 3);
  std::vector<uint16_t> hostStreams = streams, formStreams = streams;
  auto dkv = describe<2>(kv, {n, (hc + 1) * dim});
  auto dq = describe<2>(q, {hc, dim});
  auto dk = describe<2>(kw, {hc, dim});
  auto dh = describe<3>(hostStreams, {n, hc, dim});
  auto df = describe<3>(formStreams, {n, hc, dim});
  using Host = void (*)(void *, void *, void *, void *);
  using Form = void (*)(void *, void *, void *, void *, void *, void *);
  auto *host = reinterpret_cast<Host>(lib.symbol("host"));
  auto *form = reinterpret_cast<Form>(lib.symbol("form"));
  ASSERT_TRUE(host && form);
  host(&dh, &dkv, &dq, &dk);
  launch(n, hc, threads, size_t(3 * chunk * 4 + 16), [&](void *shared) {
    float *p = static_cast<float *>(shared), *gate = p + 3 * chunk;
    Descriptor<2, float> dProducts{p, p, 0, {3, chunk}, {chunk, 1}};
    Descriptor<1, float> dGate{gate, gate, 0, {1}, {1}};
    form(&df, &dkv, &dq, &dk, &dProducts, &dGate);
  });
  // The gate did update the streams (most elements move by gate * value).
  size_t changed = 0;
  for (size_t i = 0; i < streams.size(); ++i)
    changed += hostStreams[i] != streams[i];
  EXPECT_GT(changed, streams.size() / 2);
  for (size_t i = 0; i < hostStreams.size(); ++i) {
    ASSERT_EQ(bits(hostStreams[i]), bits(formStreams[i]))
        << "row " << i / size_t(hc * dim) << " stream " << i / size_t(dim) % size_t(hc)
        << " element " << i % size_t(dim);
  }
}
} // namespace

TEST(GpuFormEmulation, EngramGateBlockFormMatchesTheHostKernel) {
  expectEngramGateBlockFormMatchesHost(4, 64, 2, 32, 64, 41);     // one pass, 2 elements a thread
  expectEngramGateBlockFormMatchesHost(2, 200, 3, 32, 64, 42);    // passes, a last partial one
  expectEngramGateBlockFormMatchesHost(4, 5120, 1, 256, 1024, 43); // the released widths
}

namespace {
/// The block form of the index scores against the host kernel, bit for bit:
/// partial key tiles, rows whose visible count is below the keys (and keys
/// fewer than the width: -inf past them), negative dots (ReLU). With
/// `tileBlocks`, that many blocks a row take every tileBlocks-th tile (the
/// GPU's grid.y cap), the queries staged once.
void expectIndexScoreBlockFormMatchesHost(int64_t heads, int64_t dim, int64_t n,
                                          int64_t numKeys, int64_t width,
                                          std::vector<int64_t> visible, uint32_t seed,
                                          int64_t tileBlocks = 0) {
  const int64_t tileKeys = std::max<int64_t>(1, 256 / heads), padded = dim + 2;
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildIndexScoreKernel(m, "host", heads, dim);
    func::FuncOp form = buildIndexScoreKernel(m, "form", heads, dim);
    IndexScoreBlockLanes lanes;
    lanes.row = simt.value(simt.blockX);
    lanes.tile = simt.value(simt.blockY);
    if (tileBlocks > 0)
      lanes.tileStride = [tileBlocks](OpBuilder &b, Location loc) -> Value {
        return arith::ConstantIndexOp::create(b, loc, tileBlocks);
      };
    lanes.thread = simt.value(simt.thread);
    lanes.barrier = simt.sync();
    lanes.keys = tileKeys;
    MLIRContext *ctx = m.getContext();
    lanes.sharedQueriesType = MemRefType::get({heads, padded}, BFloat16Type::get(ctx));
    lanes.sharedKeysType = MemRefType::get({tileKeys, padded}, BFloat16Type::get(ctx));
    lanes.sharedHeadsType = MemRefType::get({tileKeys, heads}, Float32Type::get(ctx));
    buildIndexScoreBlockBody(form, heads, dim, lanes);
  });
  std::vector<uint16_t> q = randomBf16(size_t(n * heads * dim), seed),
                        keys = randomBf16(size_t(numKeys * dim), seed + 1),
                        w = randomBf16(size_t(n * heads), seed + 2);
  std::vector<float> outHost(size_t(n * width), 7.f), outForm(size_t(n * width), 7.f);
  auto dq = describe<3>(q, {n, heads, dim});
  auto dk = describe<2>(keys, {numKeys, dim});
  auto dw = describe<2>(w, {n, heads});
  auto dv = describe<1>(visible, {n});
  auto dh = describe<2>(outHost, {n, width});
  auto df = describe<2>(outForm, {n, width});
  using Host = void (*)(void *, void *, void *, void *, void *);
  using Form = void (*)(void *, void *, void *, void *, void *, void *, void *, void *);
  auto *host = reinterpret_cast<Host>(lib.symbol("host"));
  auto *form = reinterpret_cast<Form>(lib.symbol("form"));
  ASSERT_TRUE(host && form);
  host(&dq, &dk, &dw, &dv, &dh);
  const size_t queryBytes = size_t(heads * padded * 2), keyBytes = size_t(tileKeys * padded * 2);
  const int64_t tiles = (width + tileKeys - 1) / tileKeys;
  launch(n, tileBlocks > 0 ? tileBlocks : tiles, heads * tileKeys,
         queryBytes + keyBytes + size_t(tileKeys * heads * 4), [&](void *shared) {
           char *p = static_cast<char *>(shared);
           auto *sq = reinterpret_cast<uint16_t *>(p);
           auto *sk = reinterpret_cast<uint16_t *>(p + queryBytes);
           auto *sh = reinterpret_cast<float *>(p + queryBytes + keyBytes);
           Descriptor<2, uint16_t> dsq{sq, sq, 0, {heads, padded}, {padded, 1}};
           Descriptor<2, uint16_t> dsk{sk, sk, 0, {tileKeys, padded}, {padded, 1}};
           Descriptor<2, float> dsh{sh, sh, 0, {tileKeys, heads}, {heads, 1}};
           form(&dq, &dk, &dw, &dv, &df, &dsq, &dsk, &dsh);
         });
  int64_t scored = 0;
  for (size_t e = 0; e < outHost.size(); ++e) {
    ASSERT_EQ(bits(outHost[e]), bits(outForm[e]))
        << "row " << e / size_t(width) << " key " << e % size_t(width);
    scored += std::isfinite(outHost[e]) && outHost[e] != 0.f;
  }
  EXPECT_GT(scored, 0);
}
} // namespace

TEST(GpuFormEmulation, IndexScoreBlockFormMatchesTheHostKernel) {
  // tiny's widths: 128 keys a tile, a partial one; visible below the keys.
  expectIndexScoreBlockFormMatchesHost(2, 32, 3, 150, 170, {170, 37, 0}, 71);
  // the released widths: 8 keys a tile of 256 threads.
  expectIndexScoreBlockFormMatchesHost(32, 128, 1, 21, 21, {21}, 72);
}

TEST(GpuFormEmulation, IndexScoreBlockFormStridesOverTilesPastItsBlocks) {
  // 12 tiles of 8 keys taken by 5 blocks a row (3 take three tiles, the
  // last one partial), rows with fewer visible keys; and more blocks than
  // tiles (the extra ones do nothing).
  expectIndexScoreBlockFormMatchesHost(32, 128, 2, 90, 93, {93, 40}, 73, 5);
  expectIndexScoreBlockFormMatchesHost(2, 32, 3, 150, 170, {170, 37, 0}, 74, 4);
}

namespace {
/// The block form of the MoE routing against the host kernel: the same
/// expert ids and weights, bit for bit, with ties (both picking orders),
/// -inf logits and, in one row, a NaN (thread 0's fallback).
void expectMoeRouteBlockFormMatchesHost(int64_t experts, int64_t topK, int64_t n,
                                        uint32_t seed) {
  const float routeScale = 1.5f;
  const int64_t threads = (experts + 31) / 32 * 32;
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildMoeRouteKernel(m, "host", experts, topK, routeScale);
    func::FuncOp form = buildMoeRouteKernel(m, "form", experts, topK, routeScale);
    MoeRouteLanes lanes;
    static_cast<BlockRowLanes &>(lanes) = simt.blockRow(threads);
    lanes.sharedScoresType = MemRefType::get({2, experts}, Float32Type::get(m.getContext()));
    lanes.sharedIdsType = MemRefType::get({experts + topK + 1}, IntegerType::get(m.getContext(), 32));
    buildMoeRouteBlockBody(form, experts, topK, routeScale, lanes);
  });
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-6.f, 25.f);
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<float> logits(static_cast<size_t>(n * experts)), bias(static_cast<size_t>(experts));
  // The first half of the experts without bias: their equal logits tie.
  for (int64_t e = experts / 2; e < experts; ++e)
    bias[size_t(e)] = u(gen) * 0.05f;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t e = 0; e < experts; ++e) {
      float &v = logits[size_t(r * experts + e)];
      const int p = pick(gen);
      // Ties among the best: a repeated logit above the others (equal
      // scores where the bias is zero).
      v = p <= 1 ? 30.f : p == 2 ? -INFINITY : u(gen);
      if (r == 1 && e == experts / 2)
        v = NAN;
    }
  std::vector<int32_t> idsHost(size_t(n * topK), 7), idsForm(size_t(n * topK), 7);
  std::vector<float> wHost(size_t(n * topK), 7.f), wForm(size_t(n * topK), 7.f);
  auto dl = describe<2>(logits, {n, experts});
  auto db = describe<1>(bias, {experts});
  auto dih = describe<2>(idsHost, {n, topK});
  auto dif = describe<2>(idsForm, {n, topK});
  auto dwh = describe<2>(wHost, {n, topK});
  auto dwf = describe<2>(wForm, {n, topK});
  using Host = void (*)(void *, void *, void *, void *);
  using Form = void (*)(void *, void *, void *, void *, void *, void *);
  auto *host = reinterpret_cast<Host>(lib.symbol("host"));
  auto *form = reinterpret_cast<Form>(lib.symbol("form"));
  ASSERT_TRUE(host && form);
  host(&dl, &db, &dih, &dwh);
  const size_t scoreBytes = size_t(2 * experts) * 4;
  launch(n, 1, threads, scoreBytes + size_t(experts + topK + 1) * 4, [&](void *shared) {
    float *sc = static_cast<float *>(shared);
    int32_t *marks = reinterpret_cast<int32_t *>(static_cast<char *>(shared) + scoreBytes);
    Descriptor<2, float> dScores{sc, sc, 0, {2, experts}, {experts, 1}};
    Descriptor<1, int32_t> dMarks{marks, marks, 0, {experts + topK + 1}, {1}};
    form(&dl, &db, &dif, &dwf, &dScores, &dMarks);
  });
  for (size_t i = 0; i < idsHost.size(); ++i) {
    ASSERT_EQ(idsHost[i], idsForm[i]) << "row " << i / size_t(topK) << " slot " << i % size_t(topK);
    ASSERT_EQ(bits(wHost[i]), bits(wForm[i])) << "row " << i / size_t(topK) << " slot " << i % size_t(topK);
    ASSERT_GE(idsHost[i], 0);
  }
}
} // namespace

TEST(GpuFormEmulation, MoeRouteBlockFormMatchesTheHostKernel) {
  expectMoeRouteBlockFormMatchesHost(8, 2, 3, 61);    // tiny's routing
  expectMoeRouteBlockFormMatchesHost(64, 6, 4, 62);   // h200-full's
  expectMoeRouteBlockFormMatchesHost(40, 6, 3, 63);   // idle threads past the experts
}

namespace {
/// The block form of a cache append against the host kernel: the same
/// cache bytes (entries the host leaves alone included) and count of rows
/// not written, from every thread.
void expectCacheAppendBlockFormMatchesHost(int64_t window, int64_t n, int64_t start,
                                           int64_t entries, uint32_t seed) {
  const auto format = nx::RowFormat::SwaKvFp8;
  const int64_t dim = 64, rowBytes = int64_t(nx::rowBytes(format, dim)), threads = 32;
  const int64_t stride = rowBytes + 8; // records wider than the row
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildCacheAppendKernel(m, "host", format, dim, window);
    func::FuncOp form = buildCacheAppendKernel(m, "form", format, dim, window);
    buildCacheAppendBlockBody(form, rowBytes, window, simt.value(simt.blockX),
                              simt.value(simt.thread), threads);
  });
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> rows(size_t(n * rowBytes)), hostCache(size_t(entries * stride));
  for (uint8_t &v : rows)
    v = uint8_t(byte(gen));
  for (uint8_t &v : hostCache)
    v = uint8_t(byte(gen));
  std::vector<uint8_t> formCache = hostCache;
  auto dr = describe<2, uint8_t>(rows, {n, rowBytes});
  Descriptor<2, uint8_t> dh{hostCache.data(), hostCache.data(), 0, {entries, rowBytes}, {stride, 1}};
  Descriptor<2, uint8_t> df{formCache.data(), formCache.data(), 0, {entries, rowBytes}, {stride, 1}};
  using Fn = int32_t (*)(void *, void *, int64_t);
  auto *host = reinterpret_cast<Fn>(lib.symbol("host"));
  auto *form = reinterpret_cast<Fn>(lib.symbol("form"));
  ASSERT_TRUE(host && form);
  const int32_t hostMissed = host(&dr, &dh, start);
  std::vector<int32_t> formMissed(size_t(std::max<int64_t>(n, 1) * threads), -7);
  // The last rows first: where rows share a ring slot, the form must still
  // leave the last one's bytes.
  launch(std::max<int64_t>(n, 1), 1, threads, 0, [&](void *) {
    formMissed[size_t(csa_simt_block_x() * threads + csa_simt_thread())] = form(&dr, &df, start);
  }, /*lastFirst=*/true);
  for (int32_t m : formMissed)
    ASSERT_EQ(m, hostMissed);
  for (size_t i = 0; i < hostCache.size(); ++i)
    ASSERT_EQ(hostCache[i], formCache[i]) << "entry " << i / size_t(stride) << " byte "
                                          << i % size_t(stride);
}
} // namespace

TEST(GpuFormEmulation, CacheAppendBlockFormMatchesTheHostKernel) {
  expectCacheAppendBlockFormMatchesHost(0, 3, 2, 10, 51);   // a global cache
  expectCacheAppendBlockFormMatchesHost(0, 4, 8, 10, 52);   // two rows past its end
  expectCacheAppendBlockFormMatchesHost(0, 3, -1, 10, 53);  // a row before position 0
  expectCacheAppendBlockFormMatchesHost(8, 1, 13, 8, 54);   // the ring, a decode step
  expectCacheAppendBlockFormMatchesHost(8, 21, 3, 8, 55);   // more rows than slots: the last win
  expectCacheAppendBlockFormMatchesHost(8, 3, 5, 6, 56);    // slots past a short ring
}

namespace {
/// The block form of a quantizer (a thread per output byte, the groups'
/// amax by shuffles) against the host kernel, byte for byte, on fresh random
/// rows with a NaN, infinities, an all-zero group and a group below the
/// amax floor; the form's rows poisoned first.
void expectQuantizeRowsBlockFormMatchesHost(nx::RowFormat format, int64_t dim, int64_t n,
                                            uint32_t seed) {
  const int64_t threads = quantizeRowsBlockThreads(format, dim);
  ASSERT_GT(threads, 0);
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildQuantizeRowsKernel(m, "host", format, dim);
    func::FuncOp form = buildQuantizeRowsKernel(m, "form", format, dim);
    QuantizeRowsBlockLanes lanes;
    static_cast<BlockRowLanes &>(lanes) = simt.blockRow(threads);
    lanes.shuffleXor = simt.shuffleXor();
    buildQuantizeRowsBlockBody(form, format, dim, lanes);
  });
  const int64_t rowBytes = int64_t(nx::rowBytes(format, dim));
  const int64_t group = int64_t(nx::rowGroup(format));
  std::vector<uint16_t> x = randomBf16(size_t(n * dim), seed, 8.f);
  x[3] = 0x7FC0;                      // NaN
  x[size_t(dim + 1)] = 0x7F80;         // +inf
  x[size_t(n * dim - 2)] = 0xFF80;     // -inf
  for (int64_t i = 0; i < group; ++i) {
    x[size_t(dim - group + i)] = 0;    // row 0's last group all zero
    x[size_t(group + i)] = 0x2000;     // a group of 2^-63: below every floor
  }
  std::vector<uint8_t> host(size_t(n * rowBytes), 0), form(size_t(n * rowBytes), 0xAB);
  auto dx = describe<2>(x, {n, dim});
  auto dh = describe<2, uint8_t>(host, {n, rowBytes});
  auto df = describe<2, uint8_t>(form, {n, rowBytes});
  using Fn = void (*)(void *, void *);
  auto *hostFn = reinterpret_cast<Fn>(lib.symbol("host"));
  auto *formFn = reinterpret_cast<Fn>(lib.symbol("form"));
  ASSERT_TRUE(hostFn && formFn);
  hostFn(&dx, &dh);
  launch(n, 1, threads, 0, [&](void *) { formFn(&dx, &df); });
  for (size_t i = 0; i < host.size(); ++i)
    ASSERT_EQ(host[i], form[i]) << "row " << i / size_t(rowBytes) << " byte "
                                << i % size_t(rowBytes);
}
} // namespace

TEST(GpuFormEmulation, QuantizeRowsBlockFormMatchesTheHostKernel) {
  // The released rows: SWA 512 (512 threads), main KV 512 (256), index
  // keys 128 (64); then rows whose bytes leave part of the last warp idle.
  expectQuantizeRowsBlockFormMatchesHost(nx::RowFormat::SwaKvFp8, 512, 2, 61);
  expectQuantizeRowsBlockFormMatchesHost(nx::RowFormat::MainKvFp4, 512, 2, 62);
  expectQuantizeRowsBlockFormMatchesHost(nx::RowFormat::IndexKeyFp4, 128, 3, 63);
  expectQuantizeRowsBlockFormMatchesHost(nx::RowFormat::SwaKvFp8, 96, 2, 64);
  expectQuantizeRowsBlockFormMatchesHost(nx::RowFormat::MainKvFp4, 48, 2, 65);
  EXPECT_EQ(quantizeRowsBlockThreads(nx::RowFormat::SwaKvFp8, 4096), 0); // over 1024 bytes
  EXPECT_EQ(quantizeRowsBlockThreads(nx::RowFormat::SwaKvFp8, 100), 0);  // not whole groups
}

namespace {
/// The block form of a rope_quantize_store region (RoPE, quantizer and cache
/// store in one kernel) against the host kernel that calls the three parts:
/// the same rows, cache bytes (entries the host leaves alone included) and
/// count of rows not stored, on fresh random rows (a NaN and an infinity
/// among them), the form's rows poisoned first and the blocks run last first.
void expectRopeQuantizeStoreBlockFormMatchesHost(nx::RowFormat format, int64_t dim,
                                                 int64_t pairs, bool inverse, int64_t window,
                                                 int64_t n, int64_t ropePosition,
                                                 int64_t stride, int64_t start, int64_t entries,
                                                 uint32_t seed) {
  const int64_t threads = quantizeRowsBlockThreads(format, dim);
  ASSERT_GT(threads, 0);
  std::vector<float> freqs(static_cast<size_t>(pairs));
  for (int64_t i = 0; i < pairs; ++i)
    freqs[size_t(i)] = std::pow(10000.f, -2.f * float(i) / float(2 * pairs));
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildRopeKernel(m, "rope", freqs, inverse);
    buildQuantizeRowsKernel(m, "quantize", format, dim);
    buildCacheAppendKernel(m, "append", format, dim, window);
    buildRopeQuantizeStoreKernel(m, "host", "rope", "quantize", "append", stride, inverse);
    func::FuncOp form =
        buildRopeQuantizeStoreKernel(m, "form", "rope", "quantize", "append", stride, inverse);
    std::optional<RopeQuantizeStoreSpec> spec = ropeQuantizeStoreSpecOf(form);
    ASSERT_TRUE(spec.has_value());
    EXPECT_EQ(spec->pairs, pairs);
    EXPECT_EQ(spec->window, window);
    QuantizeRowsBlockLanes lanes;
    static_cast<BlockRowLanes &>(lanes) = simt.blockRow(threads);
    lanes.shuffleXor = simt.shuffleXor();
    buildRopeQuantizeStoreBlockBody(form, *spec, lanes);
  });
  const int64_t rowBytes = int64_t(nx::rowBytes(format, dim));
  const int64_t stride8 = rowBytes + 8; // cache records wider than the row
  std::vector<uint16_t> x = randomBf16(size_t(std::max<int64_t>(n, 1) * dim), seed, 8.f);
  if (n > 1) {
    x[size_t(dim - 1)] = 0x7FC0;  // NaN in row 0's rotated tail
    x[size_t(dim + 2)] = 0x7F80;  // +inf in row 1
  }
  const std::vector<uint16_t> before = x;
  std::mt19937 gen(seed + 1);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> hostCache(size_t(entries * stride8));
  for (uint8_t &v : hostCache)
    v = uint8_t(byte(gen));
  std::vector<uint8_t> formCache = hostCache;
  std::vector<uint8_t> hostRows(size_t(std::max<int64_t>(n, 1) * rowBytes), 0),
      formRows(hostRows.size(), 0xAB);
  auto dx = describe<2>(x, {n, dim});
  auto dhr = describe<2, uint8_t>(hostRows, {n, rowBytes});
  auto dfr = describe<2, uint8_t>(formRows, {n, rowBytes});
  Descriptor<2, uint8_t> dh{hostCache.data(), hostCache.data(), 0, {entries, rowBytes}, {stride8, 1}};
  Descriptor<2, uint8_t> df{formCache.data(), formCache.data(), 0, {entries, rowBytes}, {stride8, 1}};
  using Fn = int32_t (*)(void *, int64_t, int64_t, void *, void *);
  auto *host = reinterpret_cast<Fn>(lib.symbol("host"));
  auto *form = reinterpret_cast<Fn>(lib.symbol("form"));
  ASSERT_TRUE(host && form);
  const int32_t hostMissed = host(&dx, ropePosition, start, &dh, &dhr);
  std::vector<int32_t> formMissed(size_t(std::max<int64_t>(n, 1) * threads), -7);
  launch(std::max<int64_t>(n, 1), 1, threads, 0, [&](void *) {
    formMissed[size_t(csa_simt_block_x() * threads + csa_simt_thread())] =
        form(&dx, ropePosition, start, &df, &dfr);
  }, /*lastFirst=*/true);
  for (int32_t m : formMissed)
    ASSERT_EQ(m, hostMissed);
  ASSERT_EQ(x, before) << "the region's input is left as it was";
  for (int64_t i = 0; i < n * rowBytes; ++i)
    ASSERT_EQ(hostRows[size_t(i)], formRows[size_t(i)])
        << "row " << i / rowBytes << " byte " << i % rowBytes;
  for (size_t i = 0; i < hostCache.size(); ++i)
    ASSERT_EQ(hostCache[i], formCache[i]) << "entry " << i / size_t(stride8) << " byte "
                                          << i % size_t(stride8);
  // The rotation did something: the rows differ from those of x unrotated.
  if (n > 0) {
    std::vector<uint8_t> plain(size_t(n * rowBytes));
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> row(static_cast<size_t>(dim));
      for (int64_t c = 0; c < dim; ++c)
        row[size_t(c)] = nx::bf16ToFloat(before[size_t(r * dim + c)]);
      nx::quantizeRow(format, row.data(), dim, plain.data() + r * rowBytes);
    }
    EXPECT_NE(std::vector<uint8_t>(hostRows.begin(), hostRows.begin() + long(plain.size())), plain);
  }
}
} // namespace

TEST(GpuFormEmulation, RopeQuantizeStoreBlockFormMatchesTheHostKernel) {
  // The SWA ring (h200-full's store: 512 channels, 64 rotated): a decode
  // step, a prefill of more rows than slots (the last win), no rows.
  expectRopeQuantizeStoreBlockFormMatchesHost(nx::RowFormat::SwaKvFp8, 512, 32, false, 8, 1,
                                              4099, 1, 4099, 8, 71);
  expectRopeQuantizeStoreBlockFormMatchesHost(nx::RowFormat::SwaKvFp8, 512, 32, false, 8, 21,
                                              3, 1, 3, 8, 72);
  expectRopeQuantizeStoreBlockFormMatchesHost(nx::RowFormat::SwaKvFp8, 512, 32, false, 8, 0,
                                              5, 1, 5, 8, 73);
  // Compressed main-KV rows into a global cache (one a ratio of positions),
  // two past its end; index keys, the inverse rotation.
  expectRopeQuantizeStoreBlockFormMatchesHost(nx::RowFormat::MainKvFp4, 512, 32, false, 0, 4,
                                              7, 4, 8, 10, 74);
  expectRopeQuantizeStoreBlockFormMatchesHost(nx::RowFormat::IndexKeyFp4, 128, 32, true, 0, 3,
                                              1, 2, 2, 10, 75);
  // Narrow rows whose bytes leave part of the last warp idle.
  expectRopeQuantizeStoreBlockFormMatchesHost(nx::RowFormat::SwaKvFp8, 96, 8, false, 4, 3,
                                              11, 1, 11, 4, 76);
}

namespace {
/// The block form of a top-k compaction against the host kernel.
void expectTopKCompactBlockFormMatchesHost(int64_t k, int64_t threads, int64_t n,
                                           int64_t width, const std::vector<int8_t> &picks,
                                           std::vector<int64_t> visible) {
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildTopKCompactKernel(m, "host", k);
    func::FuncOp form = buildTopKCompactKernel(m, "form", k);
    TopKCompactLanes lanes;
    static_cast<BlockRowLanes &>(lanes) = simt.blockRow(threads);
    lanes.offsetsType = MemRefType::get({threads + 1}, IntegerType::get(m.getContext(), 32));
    buildTopKCompactBlockBody(form, k, lanes);
  });
  std::vector<int8_t> picked(picks);
  std::vector<int32_t> outHost(size_t(n * k), 7), outForm(size_t(n * k), 7);
  auto dp = describe<2>(picked, {n, width});
  auto dv = describe<1>(visible, {n});
  auto dh = describe<2>(outHost, {n, k});
  auto df = describe<2>(outForm, {n, k});
  using Host = void (*)(void *, void *, void *);
  using Form = void (*)(void *, void *, void *, void *);
  auto *host = reinterpret_cast<Host>(lib.symbol("host"));
  auto *form = reinterpret_cast<Form>(lib.symbol("form"));
  ASSERT_TRUE(host && form);
  host(&dp, &dv, &dh);
  launch(n, 1, threads, size_t(threads + 1) * 4, [&](void *shared) {
    int32_t *o = static_cast<int32_t *>(shared);
    Descriptor<1, int32_t> dOffsets{o, o, 0, {threads + 1}, {1}};
    form(&dp, &dv, &df, &dOffsets);
  });
  int64_t written = 0;
  for (size_t e = 0; e < outHost.size(); ++e) {
    ASSERT_EQ(outHost[e], outForm[e]) << "row " << e / size_t(k) << " column " << e % size_t(k);
    written += outHost[e] >= 0;
  }
  EXPECT_GT(written, 0);
}
} // namespace

TEST(GpuFormEmulation, TopKCompactBlockFormMatchesTheHostKernel) {
  std::mt19937 gen(41);
  std::uniform_int_distribution<int> coin(0, 9);
  const int64_t n = 3, width = 1000;
  std::vector<int8_t> picks(size_t(n * width));
  for (int8_t &p : picks)
    p = int8_t(coin(gen) == 0); // about 100 a row
  // Row 1: more picks than k (NaN scores); row 2: positions past visible.
  for (int64_t t = 0; t < width; t += 3)
    picks[size_t(width + t)] = 1;
  expectTopKCompactBlockFormMatchesHost(128, 64, n, width, picks, {1000, 1000, 600});
  // Segments shorter than the threads (width 50 over 64 threads), fewer
  // picks than k.
  std::vector<int8_t> few(picks.begin(), picks.begin() + 2 * 50);
  expectTopKCompactBlockFormMatchesHost(16, 64, 2, 50, few, {50, 20});
}

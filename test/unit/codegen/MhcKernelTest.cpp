//===- MhcKernelTest.cpp - Generated embedding and mHC kernels ------------===//
#include "codegen/host/MhcKernels.h"
#include "test/unit/codegen/KernelTestSupport.h"

namespace csa::codegen {
namespace {

using namespace csa::codegen::testing;

std::vector<float> randomF32(size_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> out(n);
  for (float &v : out)
    v = dist(gen);
  return out;
}

constexpr int64_t kHc = 4, kDim = 64, kIters = 20;

TEST(MhcKernels, HcMixMatchesTheReferenceBitForBit) {
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildHcMixSumsKernel(m, "hc_mix_sums", kHc, kDim);
    buildHcMixKernel(m, "hc_mix", kHc, kDim, kIters, 1e-6f, 1e-20f);
  });
  using Sums = void (*)(Descriptor<3> *, Descriptor<2, float> *,
                        Descriptor<2, float> *);
  using Kernel = void (*)(Descriptor<2, float> *, Descriptor<1, float> *,
                          Descriptor<1, float> *, Descriptor<2, float> *,
                          Descriptor<2, float> *, Descriptor<3, float> *);
  auto *sumsKernel = reinterpret_cast<Sums>(lib.symbol("hc_mix_sums"));
  auto *kernel = reinterpret_cast<Kernel>(lib.symbol("hc_mix"));
  ASSERT_NE(sumsKernel, nullptr);
  ASSERT_NE(kernel, nullptr);
  const int64_t mix = (2 + kHc) * kHc, rows = 9;
  auto x = randomBf16(size_t(rows * kHc * kDim), 11);
  auto fn = randomF32(size_t(mix * kHc * kDim), 12, 0.05f);
  auto base = randomF32(size_t(mix), 13, 0.5f);
  std::vector<float> scale = {0.7f, 1.3f, 0.9f};
  std::vector<float> pre(size_t(rows * kHc), -1), post(pre.size(), -1),
      comb(size_t(rows * kHc * kHc), -1);
  auto dx = describe<3>(x, {rows, kHc, kDim});
  auto dfn = describe<2>(fn, {mix, kHc * kDim});
  auto dbase = describe<1>(base, {mix});
  auto dscale = describe<1>(scale, {3});
  auto dpre = describe<2>(pre, {rows, kHc}), dpost = describe<2>(post, {rows, kHc});
  auto dcomb = describe<3>(comb, {rows, kHc, kHc});
  std::vector<float> sums(size_t(rows * (mix + 1)), -1);
  auto dsums = describe<2>(sums, {rows, mix + 1});
  sumsKernel(&dx, &dfn, &dsums);
  kernel(&dsums, &dbase, &dscale, &dpre, &dpost, &dcomb);

  reference::Mat xs = toMat(x, rows * kHc, kDim);
  for (int64_t n = 0; n < rows; ++n) {
    std::vector<const float *> streams;
    for (int64_t i = 0; i < kHc; ++i)
      streams.push_back(xs.row(n * kHc + i));
    reference::Mixes want =
        reference::hcMixes(streams, kDim, fn, base, scale, kIters, 1e-6f, 1e-20f);
    for (int64_t i = 0; i < kHc; ++i) {
      EXPECT_EQ(pre[size_t(n * kHc + i)], want.pre[size_t(i)]) << n << " " << i;
      EXPECT_EQ(post[size_t(n * kHc + i)], want.post[size_t(i)]) << n << " " << i;
    }
    for (int64_t k = 0; k < kHc * kHc; ++k)
      EXPECT_EQ(comb[size_t(n * kHc * kHc + k)], want.comb[size_t(k)]) << n << " " << k;
  }
}

TEST(MhcKernels, CollapseAndUpdateMatchTheReferenceBitForBit) {
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildHcCollapseKernel(m, "hc_collapse", kHc, kDim);
    buildHcUpdateKernel(m, "hc_update", kHc, kDim);
  });
  auto *collapse = reinterpret_cast<void (*)(
      Descriptor<3> *, Descriptor<2, float> *, Descriptor<2> *)>(
      lib.symbol("hc_collapse"));
  auto *update = reinterpret_cast<void (*)(
      Descriptor<3> *, Descriptor<2> *, Descriptor<2, float> *,
      Descriptor<3, float> *, Descriptor<3> *)>(lib.symbol("hc_update"));
  ASSERT_TRUE(collapse && update);
  const int64_t rows = 6;
  auto x = randomBf16(size_t(rows * kHc * kDim), 21);
  auto y = randomBf16(size_t(rows * kDim), 22);
  auto pre = randomF32(size_t(rows * kHc), 23, 0.6f);
  auto post = randomF32(size_t(rows * kHc), 24, 1.f);
  auto comb = randomF32(size_t(rows * kHc * kHc), 25, 0.3f);
  std::vector<uint16_t> collapsed(size_t(rows * kDim)),
      updated(size_t(rows * kHc * kDim));
  auto dx = describe<3>(x, {rows, kHc, kDim});
  auto dy = describe<2>(y, {rows, kDim});
  auto dpre = describe<2>(pre, {rows, kHc});
  auto dpost = describe<2>(post, {rows, kHc});
  auto dcomb = describe<3>(comb, {rows, kHc, kHc});
  auto dcol = describe<2>(collapsed, {rows, kDim});
  auto dupd = describe<3>(updated, {rows, kHc, kDim});
  collapse(&dx, &dpre, &dcol);
  update(&dx, &dy, &dpost, &dcomb, &dupd);

  reference::Mat xs = toMat(x, rows * kHc, kDim), ys = toMat(y, rows, kDim);
  for (int64_t n = 0; n < rows; ++n) {
    std::vector<const float *> streams;
    for (int64_t i = 0; i < kHc; ++i)
      streams.push_back(xs.row(n * kHc + i));
    std::vector<float> want(static_cast<size_t>(kDim));
    reference::hcPre(streams, &pre[size_t(n * kHc)], kDim, want.data());
    for (int64_t e = 0; e < kDim; ++e)
      ASSERT_EQ(nx::bf16ToFloat(collapsed[size_t(n * kDim + e)]), want[size_t(e)]);
    reference::Mixes mixes;
    mixes.post.assign(post.begin() + n * kHc, post.begin() + (n + 1) * kHc);
    mixes.comb.assign(comb.begin() + n * kHc * kHc,
                      comb.begin() + (n + 1) * kHc * kHc);
    std::vector<std::vector<float>> outs(static_cast<size_t>(kHc),
                                         std::vector<float>(static_cast<size_t>(kDim)));
    std::vector<float *> outPtrs;
    for (auto &o : outs)
      outPtrs.push_back(o.data());
    reference::hcUpdate(streams, ys.row(n), mixes, kDim, outPtrs);
    for (int64_t j = 0; j < kHc; ++j)
      for (int64_t e = 0; e < kDim; ++e)
        ASSERT_EQ(nx::bf16ToFloat(updated[size_t((n * kHc + j) * kDim + e)]),
                  outs[size_t(j)][size_t(e)]);
  }
}

TEST(MhcKernels, EmbedAndExpandCopyRows) {
  constexpr int64_t vocab = 37;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildEmbedKernel(m, "embed", vocab, kDim);
    buildHcExpandKernel(m, "hc_expand", kHc, kDim);
  });
  auto *embed = reinterpret_cast<void (*)(Descriptor<1, int32_t> *,
                                          Descriptor<2> *, Descriptor<2> *)>(
      lib.symbol("embed"));
  auto *expand = reinterpret_cast<void (*)(Descriptor<2> *, Descriptor<3> *)>(
      lib.symbol("hc_expand"));
  ASSERT_TRUE(embed && expand);
  std::vector<int32_t> tokens = {5, 0, 36, 5, 17};
  const int64_t rows = int64_t(tokens.size());
  auto table = randomBf16(size_t(vocab * kDim), 31);
  std::vector<uint16_t> h(size_t(rows * kDim)), streams(size_t(rows * kHc * kDim));
  auto dt = describe<1>(tokens, {rows});
  auto dtab = describe<2>(table, {vocab, kDim});
  auto dh = describe<2>(h, {rows, kDim});
  auto ds = describe<3>(streams, {rows, kHc, kDim});
  embed(&dt, &dtab, &dh);
  expand(&dh, &ds);
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t e = 0; e < kDim; ++e) {
      uint16_t want = table[size_t(tokens[size_t(n)] * kDim + e)];
      ASSERT_EQ(h[size_t(n * kDim + e)], want);
      for (int64_t j = 0; j < kHc; ++j)
        ASSERT_EQ(streams[size_t((n * kHc + j) * kDim + e)], want);
    }
}

} // namespace
} // namespace csa::codegen

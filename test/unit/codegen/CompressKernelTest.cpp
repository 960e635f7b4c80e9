//===- CompressKernelTest.cpp - Generated compressor pooling --------------===//
#include "codegen/host/CompressKernels.h"
#include "test/unit/codegen/KernelTestSupport.h"

#include <limits>

namespace csa::codegen {
namespace {

using namespace csa::codegen::testing;

// A prefill of an odd length leaves a partial group in the state; decode
// steps complete it. The kernel's rows must equal the reference's pooling of
// each group, rounded to bf16, and the state must carry across calls.
TEST(CompressKernels, PoolingMatchesTheReferenceAcrossCalls) {
  constexpr int64_t ratio = 2, dim = 32;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildCompressPoolKernel(m, "compress_pool", ratio, dim);
  });
  using Kernel = void (*)(Descriptor<2, float> *, Descriptor<2, float> *,
                          Descriptor<2, float> *, Descriptor<2, float> *,
                          int64_t, Descriptor<2> *);
  auto *kernel = reinterpret_cast<Kernel>(lib.symbol("compress_pool"));
  ASSERT_NE(kernel, nullptr);

  std::mt19937 gen(3);
  std::normal_distribution<float> dist(0.f, 2.f);
  const int64_t total = 13;
  std::vector<float> kv(size_t(total * dim)), score(kv.size());
  for (float &v : kv)
    v = dist(gen);
  for (float &v : score)
    v = dist(gen);
  std::vector<float> stateKv(size_t(ratio * dim), 0.f),
      stateScore(stateKv.size(), -std::numeric_limits<float>::infinity());
  auto dsk = describe<2>(stateKv, {ratio, dim});
  auto dss = describe<2>(stateScore, {ratio, dim});

  std::vector<float> expected; // every group of the whole sequence, bf16
  for (int64_t g = 0; g < total / ratio; ++g) {
    std::vector<float> out(static_cast<size_t>(dim));
    reference::poolGroup(&kv[size_t(g * ratio * dim)], &score[size_t(g * ratio * dim)],
                         ratio, dim, out.data());
    for (float v : out)
      expected.push_back(reference::bf16(v));
  }
  // Calls: a prefill of 7 tokens, then 6 single-token steps.
  std::vector<float> got;
  int64_t pos = 0;
  for (int64_t n : {7, 1, 1, 1, 1, 1, 1}) {
    std::vector<float> kvChunk(kv.begin() + pos * dim, kv.begin() + (pos + n) * dim);
    std::vector<float> scoreChunk(score.begin() + pos * dim,
                                  score.begin() + (pos + n) * dim);
    const int64_t groups = (pos + n) / ratio - pos / ratio;
    std::vector<uint16_t> out(size_t(std::max<int64_t>(groups, 0) * dim));
    auto dkv = describe<2>(kvChunk, {n, dim});
    auto dsc = describe<2>(scoreChunk, {n, dim});
    auto dout = describe<2>(out, {groups, dim});
    kernel(&dkv, &dsc, &dsk, &dss, pos, &dout);
    for (uint16_t v : out)
      got.push_back(nx::bf16ToFloat(v));
    pos += n;
  }
  EXPECT_EQ(got, expected);
}

} // namespace
} // namespace csa::codegen

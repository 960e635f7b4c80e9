//===- MoeKernelTest.cpp - Generated MoE routing, gather and SwiGLU -------===//
#include "codegen/host/MoeKernels.h"
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

TEST(MoeKernels, RouteMatchesTheReference) {
  constexpr int64_t experts = 16, topK = 6;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildMoeRouteKernel(m, "route", experts, topK, 1.5f);
  });
  using Kernel = void (*)(Descriptor<2, float> *, Descriptor<1, float> *,
                          Descriptor<2, int32_t> *, Descriptor<2, float> *);
  auto *kernel = reinterpret_cast<Kernel>(lib.symbol("route"));
  ASSERT_NE(kernel, nullptr);
  const int64_t rows = 25;
  auto logits = randomF32(size_t(rows * experts), 1, 3.f);
  // Ties and the softplus threshold: equal logits, values above 20.
  for (int64_t e = 0; e < experts; ++e)
    logits[size_t(e)] = 0.5f;
  logits[size_t(experts + 3)] = 25.f;
  logits[size_t(experts + 4)] = 21.f;
  auto bias = randomF32(size_t(experts), 2, 0.1f);
  std::fill(bias.begin(), bias.begin() + 4, 0.f); // tie the first experts
  std::vector<int32_t> ids(size_t(rows * topK), -1);
  std::vector<float> weights(ids.size(), -1);
  auto dl = describe<2>(logits, {rows, experts});
  auto db = describe<1>(bias, {experts});
  auto di = describe<2>(ids, {rows, topK});
  auto dw = describe<2>(weights, {rows, topK});
  kernel(&dl, &db, &di, &dw);
  for (int64_t n = 0; n < rows; ++n) {
    std::vector<int64_t> wantIds;
    std::vector<float> wantWeights;
    reference::routeToken(&logits[size_t(n * experts)], bias, topK, 1.5f,
                          wantIds, wantWeights);
    for (int64_t t = 0; t < topK; ++t) {
      EXPECT_EQ(ids[size_t(n * topK + t)], wantIds[size_t(t)]) << n << " " << t;
      EXPECT_EQ(weights[size_t(n * topK + t)], wantWeights[size_t(t)]) << n << " " << t;
    }
  }
}

TEST(MoeKernels, SwigluMatchesTheReference) {
  constexpr int64_t inter = 64;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildSwigluKernel(m, "swiglu", inter, 10.f);
    buildSwigluKernel(m, "swiglu_nolimit", inter, 0.f);
  });
  using Kernel = void (*)(Descriptor<2> *, Descriptor<2> *,
                          Descriptor<1, float> *, Descriptor<2> *);
  for (float limit : {10.f, 0.f}) {
    auto *kernel = reinterpret_cast<Kernel>(
        lib.symbol(limit > 0 ? "swiglu" : "swiglu_nolimit"));
    ASSERT_NE(kernel, nullptr);
    const int64_t rows = 7;
    auto gate = randomBf16(size_t(rows * inter), 3, 8.f); // crosses the clamp
    auto up = randomBf16(size_t(rows * inter), 4, 8.f);
    auto w = randomF32(size_t(rows), 5, 1.f);
    std::vector<uint16_t> h(gate.size());
    auto dg = describe<2>(gate, {rows, inter});
    auto du = describe<2>(up, {rows, inter});
    auto dw = describe<1>(w, {rows});
    auto dh = describe<2>(h, {rows, inter});
    kernel(&dg, &du, &dw, &dh);
    for (int64_t n = 0; n < rows; ++n)
      for (int64_t j = 0; j < inter; ++j) {
        size_t i = size_t(n * inter + j);
        ASSERT_EQ(nx::bf16ToFloat(h[i]),
                  reference::swiglu(nx::bf16ToFloat(gate[i]),
                                    nx::bf16ToFloat(up[i]), limit, w[size_t(n)]))
            << "limit " << limit << " element " << i;
      }
  }
}

TEST(MoeKernels, GatherAccumulateFinish) {
  constexpr int64_t dim = 32;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildMoeGatherKernel(m, "gather", dim);
    buildMoeAccumulateKernel(m, "accumulate", dim);
    buildMoeFinishKernel(m, "finish", dim);
  });
  auto *gather = reinterpret_cast<void (*)(Descriptor<2> *, Descriptor<1, int32_t> *,
                                           Descriptor<2> *)>(lib.symbol("gather"));
  auto *accumulate = reinterpret_cast<void (*)(
      Descriptor<2, float> *, Descriptor<2> *, Descriptor<1, int32_t> *)>(
      lib.symbol("accumulate"));
  auto *finish = reinterpret_cast<void (*)(Descriptor<2, float> *,
                                           Descriptor<2> *, Descriptor<2> *)>(
      lib.symbol("finish"));
  ASSERT_TRUE(gather && accumulate && finish);
  const int64_t rows = 5;
  auto x = randomBf16(size_t(rows * dim), 6);
  // The tokens routed to one expert (the executor lists them from the
  // routing); index 7 is past the tokens: its row is left as it was.
  std::vector<int32_t> rowIndex = {0, 2, 3, 7};
  std::vector<uint16_t> rowsOut(size_t(4 * dim), 0x1234);
  auto dx = describe<2>(x, {rows, dim});
  auto dri = describe<1>(rowIndex, {4});
  auto dr = describe<2>(rowsOut, {4, dim});
  gather(&dx, &dri, &dr);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t e = 0; e < dim; ++e)
      ASSERT_EQ(rowsOut[size_t(r * dim + e)], x[size_t(rowIndex[size_t(r)] * dim + e)]);
  for (int64_t e = 0; e < dim; ++e)
    ASSERT_EQ(rowsOut[size_t(3 * dim + e)], 0x1234);

  std::vector<float> y(size_t(rows * dim), 0.25f);
  auto dy = describe<2>(y, {rows, dim});
  auto dout = describe<2>(rowsOut, {3, dim});
  auto didx = describe<1>(rowIndex, {3});
  accumulate(&dy, &dout, &didx);
  std::vector<uint16_t> result(size_t(rows * dim));
  auto dres = describe<2>(result, {rows, dim});
  auto dshared = describe<2>(x, {rows, dim});
  finish(&dy, &dshared, &dres);
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t e = 0; e < dim; ++e) {
      float acc = 0.25f;
      for (int64_t r = 0; r < 3; ++r)
        if (rowIndex[size_t(r)] == n)
          acc += nx::bf16ToFloat(rowsOut[size_t(r * dim + e)]);
      ASSERT_EQ(nx::bf16ToFloat(result[size_t(n * dim + e)]),
                reference::bf16(acc + nx::bf16ToFloat(x[size_t(n * dim + e)])));
    }
}

} // namespace
} // namespace csa::codegen

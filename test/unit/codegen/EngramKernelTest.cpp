//===- EngramKernelTest.cpp - Generated Engram hash vs engram.py's ---------===//
#include "codegen/host/EngramKernels.h"
#include "codegen/host/KernelSelection.h"
#include "models/graph/GraphBuilder.h"
#include "models/reference/EngramHash.h"
#include "models/variants/Variants.h"
#include "test/unit/codegen/KernelTestSupport.h"

namespace csa::codegen {
namespace {

using namespace csa::codegen::testing;

/// The layout the compiler embeds, from the reference hasher of a layer.
EngramHashLayout layoutOf(const EngramHasher &h, int64_t maxNgram, int64_t heads,
                          int64_t padId) {
  return {maxNgram, heads, h.multipliers(), h.primes(), h.offsets(), padId};
}

void checkLayer(const std::string &variant, int64_t layer, uint32_t seed) {
  auto v = loadVariant(variant);
  ASSERT_TRUE(v.ok()) << v.status();
  const ModelConfig &c = v->config;
  auto hasher = EngramHasher::create(c, layer);
  ASSERT_TRUE(hasher.ok()) << hasher.status();
  EngramHashLayout layout =
      layoutOf(*hasher, c.engramMaxNgramSize, c.engramNHeads, c.engramPadId);
  KernelLibrary lib([&](mlir::ModuleOp m) {
    buildEngramHashKernel(m, "engram_hash", layout);
  });
  using Kernel = void (*)(Descriptor<1, int32_t> *, Descriptor<1, int64_t> *,
                          int64_t, int64_t, Descriptor<2, int64_t> *);
  auto *kernel = reinterpret_cast<Kernel>(lib.symbol("engram_hash"));
  ASSERT_NE(kernel, nullptr);
  std::vector<int64_t> map(size_t(hasher->mapSize()));
  for (int64_t t = 0; t < hasher->mapSize(); ++t)
    map[size_t(t)] = hasher->compress(t);

  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> token(0, int32_t(c.vocabSize - 1));
  std::vector<int32_t> prompt(40);
  for (int32_t &t : prompt)
    t = token(gen);
  const int64_t cols = hasher->columns();
  // Prefill (start 0, all positions) and a decode step at the end.
  for (auto [start, count] : {std::pair<int64_t, int64_t>{0, 40}, {39, 1}, {17, 5}}) {
    std::vector<int64_t> history(prompt.begin(), prompt.begin() + start + count);
    auto want = hasher->hash(history, start, count);
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<int32_t> tokens(prompt.begin(), prompt.begin() + start + count);
    std::vector<int64_t> ids(size_t(count * cols), -1);
    auto dt = describe<1>(tokens, {int64_t(tokens.size())});
    auto dm = describe<1>(map, {int64_t(map.size())});
    auto di = describe<2>(ids, {count, cols});
    kernel(&dt, &dm, /*base=*/0, start, &di);
    EXPECT_EQ(ids, *want) << variant << " layer " << layer << " start " << start;
  }
}

TEST(EngramKernels, TinyHashMatchesEngramPy) { checkLayer("tiny", 1, 5); }
TEST(EngramKernels, ReleasedLayer1HashMatchesEngramPy) { checkLayer("released", 1, 6); }
TEST(EngramKernels, ReleasedLayer14HashMatchesEngramPy) { checkLayer("released", 14, 7); }

// The layout the compiler derives from the graph's csa.engram ops is the one
// engram.py derives from the config.
TEST(EngramKernels, LayoutFromTheGraphMatchesEngramPy) {
  auto v = loadVariant("released");
  ASSERT_TRUE(v.ok()) << v.status();
  mlir::MLIRContext context;
  auto graph = buildModelGraph(context, *v);
  auto layouts = engramHashLayoutsOf(*graph);
  ASSERT_EQ(layouts.size(), 2u);
  for (int64_t layer : {1, 14}) {
    auto hasher = EngramHasher::create(v->config, layer);
    ASSERT_TRUE(hasher.ok()) << hasher.status();
    const EngramHashLayout &l = layouts.at(layer);
    EXPECT_EQ(l.primes, hasher->primes()) << layer;
    EXPECT_EQ(l.offsets, hasher->offsets()) << layer;
    EXPECT_EQ(l.multipliers, hasher->multipliers()) << layer;
    EXPECT_EQ(l.padId, v->config.engramPadId);
  }
}

TEST(EngramKernels, TableGatherDequantizesRows) {
  constexpr int64_t cols = 3, hd = 64, tableRows = 50;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildEngramGatherKernel(m, "engram_gather", cols, hd);
  });
  using Kernel = void (*)(Descriptor<2, int64_t> *, Descriptor<2, uint8_t> *,
                          Descriptor<2, uint8_t> *, Descriptor<2> *);
  auto *kernel = reinterpret_cast<Kernel>(lib.symbol("engram_gather"));
  ASSERT_NE(kernel, nullptr);
  std::mt19937 gen(9);
  std::vector<uint8_t> table(size_t(tableRows * hd)), scale(size_t(tableRows * hd / 32));
  for (uint8_t &v : table)
    v = uint8_t(gen() & 0xFF);
  for (size_t i = 0; i < scale.size(); ++i)
    scale[i] = uint8_t(i == 0 ? 0 : 120 + gen() % 12); // includes code 0
  std::vector<int64_t> ids = {0, 49, 7, 3, 3, 12};
  const int64_t rows = 2;
  std::vector<uint16_t> out(size_t(rows * cols * hd));
  auto di = describe<2>(ids, {rows, cols});
  auto dt = describe<2>(table, {tableRows, hd});
  auto ds = describe<2>(scale, {tableRows, hd / 32});
  auto dout = describe<2>(out, {rows, cols * hd});
  kernel(&di, &dt, &ds, &dout);
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t e = 0; e < hd; ++e) {
        int64_t id = ids[size_t(n * cols + c)];
        float want = reference::bf16(nx::decodeE4M3(table[size_t(id * hd + e)]) *
                                     nx::decodeUe8m0(scale[size_t(id * (hd / 32) + e / 32)]));
        float got = nx::bf16ToFloat(out[size_t((n * cols + c) * hd + e)]);
        if (std::isnan(want))
          ASSERT_TRUE(std::isnan(got));
        else
          ASSERT_EQ(got, want) << n << " " << c << " " << e;
      }
}

TEST(EngramKernels, GateMatchesTheReference) {
  constexpr int64_t hc = 4, dim = 64;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildEngramGateKernel(m, "engram_gate", hc, dim, 1e-20f);
  });
  using Kernel = void (*)(Descriptor<3> *, Descriptor<2> *, Descriptor<2> *,
                          Descriptor<2> *);
  auto *kernel = reinterpret_cast<Kernel>(lib.symbol("engram_gate"));
  ASSERT_NE(kernel, nullptr);
  const int64_t rows = 6;
  auto streams = randomBf16(size_t(rows * hc * dim), 41);
  auto kv = randomBf16(size_t(rows * (hc + 1) * dim), 42);
  auto qw = randomBf16(size_t(hc * dim), 43, 0.7f);
  auto kw = randomBf16(size_t(hc * dim), 44, 0.7f);
  reference::Mat expected = toMat(streams, rows * hc, dim);
  reference::Mat kvMat = toMat(kv, rows, (hc + 1) * dim);
  reference::Mat q = toMat(qw, hc, dim), kk = toMat(kw, hc, dim);
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t j = 0; j < hc; ++j)
      reference::engramGate(expected.row(n * hc + j), kvMat.row(n) + j * dim,
                            kvMat.row(n) + hc * dim, q.row(j), kk.row(j), dim,
                            1e-20f);
  auto ds = describe<3>(streams, {rows, hc, dim});
  auto dkv = describe<2>(kv, {rows, (hc + 1) * dim});
  auto dq = describe<2>(qw, {hc, dim});
  auto dk = describe<2>(kw, {hc, dim});
  kernel(&ds, &dkv, &dq, &dk);
  for (size_t i = 0; i < streams.size(); ++i)
    ASSERT_EQ(nx::bf16ToFloat(streams[i]), expected.v[i]) << "element " << i;
}

} // namespace
} // namespace csa::codegen

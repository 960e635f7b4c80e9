//===- AttentionKernelTest.cpp - Generated attention kernels vs reference --===//
//
// The attention primitives (sparse attention, indexer score, top-k, HSI
// block selection) are built as IR, lowered through LLVM into a shared
// object, loaded, and run on fresh random inputs (ties, -inf, -1 holes, rows
// without any valid index, several shapes); every output must equal the
// reference kernel's bit for bit.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/AttentionKernels.h"
#include "codegen/host/SelectionKernels.h"
#include "test/unit/codegen/KernelTestSupport.h"
#include "models/reference/Kernels.h"
#include "runtime/numerics/Numerics.h"

#include "codegen/host/HostBackend.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace csa::codegen {
namespace {

using namespace csa::codegen::testing;
namespace nx = csa::numerics;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint32_t bitsOf(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float fromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// Scores with many ties (a few bf16 values, both zeros), -inf entries and
/// a few +inf entries (which tie with HSI's pinned block).
std::vector<float> tieScores(size_t n, std::mt19937 &gen) {
  static const float values[] = {kNegInf, -3.f, -1.5f, -0.0f, 0.f,
                                 0.5f,    1.f,  1.5f,  2.f,   7.25f};
  std::uniform_int_distribution<int> pick(0, 12);
  std::uniform_real_distribution<float> wide(-8.f, 8.f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> s(n);
  for (float &v : s) {
    int p = pick(gen);
    // A quarter of the entries are arbitrary bf16 values (rarely tied).
    v = p >= 10 ? nx::roundToBf16(wide(gen)) : values[p];
    if (u(gen) < 0.02f)
      v = -kNegInf;
  }
  return s;
}

//===----------------------------------------------------------------------===//
// exp
//===----------------------------------------------------------------------===//

/// math.exp of the generated code must be libm's expf, the function the
/// reference's std::exp(float) calls: compare over a sweep of all floats.
TEST(AttentionKernels, GeneratedExpIsLibmExpf) {
  KernelLibrary lib([](mlir::ModuleOp m) {
    using namespace mlir;
    OpBuilder b(m.getContext());
    Location loc = m.getLoc();
    auto type = MemRefType::get({ShapedType::kDynamic}, b.getF32Type());
    b.setInsertionPointToEnd(m.getBody());
    auto fn = func::FuncOp::create(b, loc, "exp_f32",
                                   b.getFunctionType({type, type}, {}));
    fn->setAttr("llvm.emit_c_interface", b.getUnitAttr());
    b.setInsertionPointToStart(fn.addEntryBlock());
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    Value n = memref::DimOp::create(b, loc, fn.getArgument(0), zero);
    auto loop = scf::ForOp::create(b, loc, zero, n, one);
    b.setInsertionPointToStart(loop.getBody());
    Value x = memref::LoadOp::create(b, loc, fn.getArgument(0),
                                     loop.getInductionVar());
    memref::StoreOp::create(b, loc, math::ExpOp::create(b, loc, x),
                            fn.getArgument(1), loop.getInductionVar());
    b.setInsertionPointAfter(loop);
    func::ReturnOp::create(b, loc);
  });
  auto *kernel = reinterpret_cast<void (*)(Descriptor<1, float> *,
                                           Descriptor<1, float> *)>(
      lib.symbol("exp_f32"));
  ASSERT_NE(kernel, nullptr);
  // Every 251st bit pattern (all signs, exponents, NaN and infinities), plus
  // every float in [-2, -1) and [-2^-10, -2^-11) (softmax arguments).
  std::vector<float> x;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 251)
    x.push_back(fromBits(uint32_t(u)));
  for (float lo : {-1.f, -0x1p-11f})
    for (uint32_t u = bitsOf(lo); u < bitsOf(2.f * lo); ++u)
      x.push_back(fromBits(u));
  for (float v : {0.f, -0.f, kNegInf, -kNegInf, -1e30f, 88.7f, -103.9f})
    x.push_back(v);
  std::vector<float> y(x.size());
  auto dx = describe<1>(x, {int64_t(x.size())});
  auto dy = describe<1>(y, {int64_t(y.size())});
  kernel(&dx, &dy);
  size_t mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    float expected = std::exp(x[i]);
    if (bitsOf(y[i]) != bitsOf(expected) &&
        !(std::isnan(y[i]) && std::isnan(expected)))
      if (++mismatches <= 5)
        ADD_FAILURE() << "exp(" << x[i] << ") = " << y[i] << ", std::exp "
                      << expected;
  }
  EXPECT_EQ(mismatches, 0u) << "of " << x.size();
}

TEST(AttentionKernels, ExpIsCsasOwnSequenceNotLibm) {
  mlir::MLIRContext context;
  loadHostKernelDialects(context);
  auto module = mlir::ModuleOp::create(mlir::UnknownLoc::get(&context));
  buildSparseAttentionKernel(module, "sparse_attn", 2, 16);
  ASSERT_TRUE(mlir::succeeded(mlir::verify(module)));
  ASSERT_TRUE(mlir::succeeded(lowerHostKernelsToLLVM(module)));
  auto ir = translateToLLVMIR(module);
  ASSERT_TRUE(bool(ir)) << llvm::toString(ir.takeError());
  EXPECT_NE(ir->find("define void @_mlir_ciface_sparse_attn"), std::string::npos);
  // exp is numerics::exp32 spelled as f64 arithmetic, not libm's expf
  // (which libdevice's __nv_expf does not match bit for bit).
  EXPECT_EQ(ir->find("@expf("), std::string::npos);
  EXPECT_EQ(ir->find("@llvm.exp."), std::string::npos);
  EXPECT_NE(ir->find("fptrunc double"), std::string::npos);
  // No fast-math flags: no reassociation, no contraction to FMA.
  EXPECT_EQ(ir->find("fast"), std::string::npos);
  EXPECT_EQ(ir->find("contract"), std::string::npos);
  EXPECT_EQ(ir->find("fmuladd"), std::string::npos);
  module->erase();
}

//===----------------------------------------------------------------------===//
// sparse attention
//===----------------------------------------------------------------------===//

using SparseKernel = void (*)(Descriptor<3> *, Descriptor<2> *,
                              Descriptor<2, int32_t> *, Descriptor<1, float> *,
                              float, Descriptor<3> *);

/// Index rows of one query batch: `kinds` of rows cycle through all -1,
/// sparse holes, a first block of -1, window-like (ascending, -1 tail, then
/// compressed picks), no holes, almost all -1.
std::vector<int32_t> randomIndices(int64_t n, int64_t k, int64_t rows,
                                   std::mt19937 &gen) {
  std::vector<int32_t> idx(size_t(n * k), -1);
  std::uniform_int_distribution<int32_t> row(0, int32_t(rows - 1));
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (int64_t i = 0; i < n; ++i) {
    int32_t *r = idx.data() + i * k;
    switch (i % 6) {
    case 0: // nothing valid
      break;
    case 1:
      for (int64_t j = 0; j < k; ++j)
        r[j] = u(gen) < 0.3f ? -1 : row(gen);
      break;
    case 2: // a whole first block of -1
      for (int64_t j = 64; j < k; ++j)
        r[j] = u(gen) < 0.2f ? -1 : row(gen);
      break;
    case 3: { // window (ascending, future slots -1) + compressed picks
      const int64_t win = std::min<int64_t>(k, 40), seen = win / 2;
      for (int64_t j = 0; j < k; ++j)
        r[j] = j < win ? (j < seen ? int32_t(j) : -1)
                       : (u(gen) < 0.25f ? -1 : row(gen));
      break;
    }
    case 4: // all valid, duplicates allowed
      for (int64_t j = 0; j < k; ++j)
        r[j] = row(gen);
      break;
    default: // one valid index among many holes
      if (k > 0)
        r[std::uniform_int_distribution<int64_t>(0, k - 1)(gen)] = row(gen);
      for (int64_t j = 0; j < k; ++j)
        if (u(gen) < 0.05f)
          r[j] = row(gen);
      break;
    }
  }
  return idx;
}

TEST(AttentionKernels, SparseAttentionMatchesTheReferenceBitForBit) {
  struct Shape {
    int64_t heads, headDim;
  };
  const Shape shapes[] = {{2, 16}, {3, 40}, {4, 64}, {1, 512}};
  auto kernelName = [](const Shape &s) {
    return "sparse_attn_" + std::to_string(s.heads) + "x" +
           std::to_string(s.headDim);
  };
  KernelLibrary lib([&](mlir::ModuleOp m) {
    for (const Shape &s : shapes)
      buildSparseAttentionKernel(m, kernelName(s), s.heads, s.headDim);
  });
  size_t checked = 0, cases = 0;
  uint32_t seed = 1000;
  for (const Shape &shape : shapes) {
    auto *kernel = reinterpret_cast<SparseKernel>(lib.symbol(kernelName(shape)));
    ASSERT_NE(kernel, nullptr);
    const int64_t heads = shape.heads, hd = shape.headDim;
    for (int64_t k : {0, 1, 37, 64, 65, 128, 200}) {
      ++seed;
      ++cases;
      std::mt19937 gen(seed);
      const int64_t n = 12, numRows = 90;
      // Larger q spreads the scores (rescaling by many orders).
      auto q = randomBf16(size_t(n * heads * hd), seed, seed % 2 ? 1.f : 6.f);
      auto rows = randomBf16(size_t(numRows * hd), seed + 7, 1.f);
      std::vector<int32_t> idx = randomIndices(n, k, numRows, gen);
      std::vector<float> sink(static_cast<size_t>(heads));
      std::normal_distribution<float> sinkDist(0.f, 2.f);
      for (float &s : sink)
        s = sinkDist(gen);
      if (heads > 2)
        sink[1] = 60.f; // dominates the denominator
      // The model's scale, and a huge one that puts scores around the
      // running max's start (-1e30).
      const float scale = k == 65 || k == 128 ? 3e28f
                                              : float(std::pow(double(hd), -0.5));
      std::vector<uint16_t> out(q.size(), 0xFFFF);

      auto dq = describe<3>(q, {n, heads, hd});
      auto dr = describe<2>(rows, {numRows, hd});
      auto di = describe<2>(idx, {n, k});
      auto ds = describe<1>(sink, {heads});
      auto dout = describe<3>(out, {n, heads, hd});
      kernel(&dq, &dr, &di, &ds, scale, &dout);

      reference::Mat qm = toMat(q, n, heads * hd);
      reference::Mat rm = toMat(rows, numRows, hd);
      std::vector<float> expected(static_cast<size_t>(hd));
      for (int64_t i = 0; i < n; ++i) {
        std::vector<int32_t> row(idx.begin() + i * k, idx.begin() + (i + 1) * k);
        for (int64_t h = 0; h < heads; ++h) {
          reference::sparseAttentionHead(qm.row(i) + h * hd, rm, row,
                                         sink[size_t(h)], scale,
                                         expected.data());
          for (int64_t e = 0; e < hd; ++e) {
            const size_t at = size_t((i * heads + h) * hd + e);
            ASSERT_EQ(out[at], nx::floatToBf16(expected[size_t(e)]))
                << "heads " << heads << " dim " << hd << " K " << k << " row "
                << i << " head " << h << " channel " << e << ": "
                << nx::bf16ToFloat(out[at]) << " vs " << expected[size_t(e)];
            ++checked;
          }
        }
      }
      // Rows without a valid index give 0.
      for (int64_t e = 0; e < heads * hd; ++e)
        ASSERT_EQ(nx::bf16ToFloat(out[size_t(e)]), 0.f);
    }
  }
  EXPECT_EQ(cases, 28u);
  EXPECT_GT(checked, 0u);
}

/// Trailing -1 entries (padding rows of different lengths to one K) leave
/// every bit of the output unchanged.
TEST(AttentionKernels, SparseAttentionIgnoresTrailingPadding) {
  const int64_t heads = 2, hd = 32, n = 6, numRows = 50;
  KernelLibrary lib([&](mlir::ModuleOp m) {
    buildSparseAttentionKernel(m, "sparse_attn", heads, hd);
  });
  auto *kernel = reinterpret_cast<SparseKernel>(lib.symbol("sparse_attn"));
  ASSERT_NE(kernel, nullptr);
  std::mt19937 gen(77);
  auto q = randomBf16(size_t(n * heads * hd), 78, 4.f);
  auto rows = randomBf16(size_t(numRows * hd), 79, 1.f);
  std::vector<float> sink = {0.5f, -1.f};
  const float scale = float(std::pow(double(hd), -0.5));
  const int64_t k = 70;
  std::vector<int32_t> idx = randomIndices(n, k, numRows, gen);
  std::vector<uint16_t> base(q.size());
  auto dq = describe<3>(q, {n, heads, hd});
  auto dr = describe<2>(rows, {numRows, hd});
  auto ds = describe<1>(sink, {heads});
  auto di = describe<2>(idx, {n, k});
  auto db = describe<3>(base, {n, heads, hd});
  kernel(&dq, &dr, &di, &ds, scale, &db);
  for (int64_t pad : {1, 58, 64, 130}) {
    const int64_t kp = k + pad;
    std::vector<int32_t> padded(size_t(n * kp), -1);
    for (int64_t i = 0; i < n; ++i)
      std::copy(idx.begin() + i * k, idx.begin() + (i + 1) * k,
                padded.begin() + i * kp);
    std::vector<uint16_t> out(q.size());
    auto dp = describe<2>(padded, {n, kp});
    auto dout = describe<3>(out, {n, heads, hd});
    kernel(&dq, &dr, &dp, &ds, scale, &dout);
    EXPECT_EQ(out, base) << "padding " << pad;
  }
}

//===----------------------------------------------------------------------===//
// indexer score
//===----------------------------------------------------------------------===//

TEST(AttentionKernels, IndexScoreMatchesTheReferenceBitForBit) {
  struct Shape {
    int64_t heads, dim;
  };
  const Shape shapes[] = {{4, 32}, {8, 64}, {32, 128}};
  auto kernelName = [](const Shape &s) {
    return "index_score_" + std::to_string(s.heads) + "x" +
           std::to_string(s.dim);
  };
  KernelLibrary lib([&](mlir::ModuleOp m) {
    for (const Shape &s : shapes)
      buildIndexScoreKernel(m, kernelName(s), s.heads, s.dim);
  });
  using Kernel = void (*)(Descriptor<3> *, Descriptor<2> *, Descriptor<2> *,
                          Descriptor<1, int64_t> *, Descriptor<2, float> *);
  size_t checked = 0, scored = 0;
  uint32_t seed = 2000;
  for (const Shape &shape : shapes) {
    auto *kernel = reinterpret_cast<Kernel>(lib.symbol(kernelName(shape)));
    ASSERT_NE(kernel, nullptr);
    const int64_t heads = shape.heads, dim = shape.dim;
    // (score width T, index keys available): all of them, or fewer.
    for (auto [width, numKeys] : {std::pair<int64_t, int64_t>{40, 40},
                                  {37, 30}, {1, 1}, {0, 0}, {65, 65}}) {
      ++seed;
      std::mt19937 gen(seed);
      const int64_t n = 7;
      // Queries: FP4 quantize-dequantize per head (as the indexer does).
      std::vector<float> qf(static_cast<size_t>(n * heads * dim));
      std::normal_distribution<float> dist(0.f, 1.5f);
      for (float &v : qf)
        v = dist(gen);
      for (int64_t r = 0; r < n * heads; ++r)
        reference::fp4QuantDequantUe8m0(qf.data() + r * dim, dim);
      std::vector<uint16_t> q(qf.size());
      for (size_t j = 0; j < qf.size(); ++j) {
        q[j] = nx::floatToBf16(qf[j]);
        ASSERT_EQ(nx::bf16ToFloat(q[j]), qf[j]); // exact in bf16
      }
      auto keys = randomBf16(size_t(numKeys * dim), seed + 1, 1.f);
      auto w = randomBf16(size_t(n * heads), seed + 2, 0.05f);
      std::vector<int64_t> visible(static_cast<size_t>(n));
      std::uniform_int_distribution<int64_t> vis(0, width);
      for (int64_t i = 0; i < n; ++i)
        visible[size_t(i)] = i == 0 ? 0 : i == 1 ? width : vis(gen);
      std::vector<float> out(size_t(n * width), 12345.f);
      auto dq = describe<3>(q, {n, heads, dim});
      auto dk = describe<2>(keys, {numKeys, dim});
      auto dw = describe<2>(w, {n, heads});
      auto dv = describe<1>(visible, {n});
      auto dout = describe<2>(out, {n, width});
      kernel(&dq, &dk, &dw, &dv, &dout);

      reference::Mat keyMat = toMat(keys, numKeys, dim);
      reference::Mat wMat = toMat(w, n, heads);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t t = 0; t < width; ++t) {
          // As ReferenceModel's indexer fills `score`.
          const float expected =
              t < numKeys && t < visible[size_t(i)]
                  ? reference::indexScore(qf.data() + i * heads * dim,
                                          keyMat.row(t), wMat.row(i), heads, dim)
                  : kNegInf;
          const float got = out[size_t(i * width + t)];
          ASSERT_EQ(bitsOf(got), bitsOf(expected))
              << "heads " << heads << " dim " << dim << " row " << i << " t "
              << t << ": " << got << " vs " << expected;
          ++checked;
          scored += expected != kNegInf;
        }
    }
  }
  EXPECT_GT(scored, 500u);
  EXPECT_GT(checked, scored);
}

//===----------------------------------------------------------------------===//
// top-k
//===----------------------------------------------------------------------===//

/// ReferenceModel's indexer: top min(k, T) (mask 0 -> -inf), sorted
/// ascending, t >= visible -> -1; padded with -1 to k columns.
std::vector<int32_t> referenceTopK(std::vector<float> score,
                                   const int8_t *mask, int64_t visible,
                                   int64_t k) {
  if (mask)
    for (size_t t = 0; t < score.size(); ++t)
      if (!mask[t])
        score[t] = kNegInf;
  const int64_t topk = std::min<int64_t>(k, int64_t(score.size()));
  std::vector<int64_t> picked = reference::topkIndices(score, topk);
  std::sort(picked.begin(), picked.end());
  std::vector<int32_t> result;
  for (int64_t t : picked)
    result.push_back(t < visible ? int32_t(t) : -1);
  result.resize(size_t(k), -1);
  return result;
}

TEST(AttentionKernels, IndexWeightScaleMatchesTheReferenceIndexer) {
  // The released sizes, whose scale (64 * 128)^-1/2 is not a power of two,
  // so the product really rounds.
  constexpr int64_t heads = 64, dim = 128;
  const float scale =
      float(std::pow(double(dim), -0.5) * std::pow(double(heads), -0.5));
  KernelLibrary lib([&](mlir::ModuleOp m) {
    buildScaleRowsKernel(m, "scale", heads, scale);
  });
  auto *kernel = reinterpret_cast<void (*)(Descriptor<2> *, Descriptor<2> *)>(
      lib.symbol("scale"));
  ASSERT_NE(kernel, nullptr);
  for (int64_t rows : {1, 7}) {
    auto w = randomBf16(size_t(rows * heads), uint32_t(70 + rows), 3.f);
    std::vector<uint16_t> y(w.size(), 0xFFFF);
    auto dw = describe<2>(w, {rows, heads}), dy = describe<2>(y, {rows, heads});
    kernel(&dw, &dy);
    // ReferenceModel indexer: `v = bf16(v * scale)` on the bf16 weights.
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_EQ(y[i], nx::floatToBf16(nx::bf16ToFloat(w[i]) * scale)) << i;
  }
}

TEST(AttentionKernels, TopKMatchesTheReferenceIndexer) {
  const int64_t ks[] = {1, 7, 16, 64};
  KernelLibrary lib([&](mlir::ModuleOp m) {
    for (int64_t k : ks) {
      buildTopKRankKernel(m, "rank_" + std::to_string(k), k);
      buildTopKRankKernel(m, "rank_masked_" + std::to_string(k), k, /*masked=*/true);
      buildTopKCompactKernel(m, "compact_" + std::to_string(k), k);
    }
  });
  using Rank = void (*)(Descriptor<2, float> *, Descriptor<2, int8_t> *);
  using MaskedRank = void (*)(Descriptor<2, float> *, Descriptor<2, int8_t> *,
                              Descriptor<2, int8_t> *);
  using Compact = void (*)(Descriptor<2, int8_t> *, Descriptor<1, int64_t> *,
                           Descriptor<2, int32_t> *);
  size_t rowsChecked = 0;
  uint32_t seed = 3000;
  for (int64_t k : ks) {
    auto *rank = reinterpret_cast<Rank>(lib.symbol("rank_" + std::to_string(k)));
    auto *maskedRank = reinterpret_cast<MaskedRank>(
        lib.symbol("rank_masked_" + std::to_string(k)));
    auto *compact =
        reinterpret_cast<Compact>(lib.symbol("compact_" + std::to_string(k)));
    ASSERT_NE(rank, nullptr);
    ASSERT_NE(maskedRank, nullptr);
    ASSERT_NE(compact, nullptr);
    for (int64_t width : {0, 1, 5, 16, 40, 130}) {
      for (bool withMask : {false, true}) {
        std::mt19937 gen(++seed);
        const int64_t n = 9;
        std::vector<float> scores = tieScores(size_t(n * width), gen);
        std::vector<int64_t> visible(static_cast<size_t>(n));
        std::uniform_int_distribution<int64_t> vis(0, width);
        for (int64_t i = 0; i < n; ++i)
          visible[size_t(i)] = i == 0 ? width : vis(gen);
        for (int64_t t = 0; t < width; ++t) {
          scores[size_t(1 * width + t)] = kNegInf; // a row of -inf only
          // Row 2 as the indexer fills it: -inf at t >= visible.
          if (t >= visible[2])
            scores[size_t(2 * width + t)] = kNegInf;
        }
        std::vector<int8_t> mask(scores.size());
        std::uniform_int_distribution<int> bit(0, 3);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t t = 0; t < width; ++t)
            // Row 3 is outside the pool entirely; others in blocks of 8.
            mask[size_t(i * width + t)] =
                i == 3 ? 0 : int8_t(((t / 8 + i) % 3 != 0) || bit(gen) == 0);
        std::vector<int32_t> out(size_t(n * k), 777);
        auto ds = describe<2>(scores, {n, width});
        auto dm = describe<2>(mask, {n, width});
        auto dv = describe<1>(visible, {n});
        auto dout = describe<2>(out, {n, k});
        std::vector<int8_t> picked(scores.size(), 7);
        auto dp = describe<2>(picked, {n, width});
        if (withMask)
          maskedRank(&ds, &dm, &dp);
        else
          rank(&ds, &dp);
        compact(&dp, &dv, &dout);
        for (int64_t i = 0; i < n; ++i) {
          std::vector<float> row(scores.begin() + i * width,
                                 scores.begin() + (i + 1) * width);
          std::vector<int32_t> expected = referenceTopK(
              row, withMask ? mask.data() + i * width : nullptr,
              visible[size_t(i)], k);
          std::vector<int32_t> got(out.begin() + i * k, out.begin() + (i + 1) * k);
          ASSERT_EQ(got, expected) << "k " << k << " T " << width << " mask "
                                   << withMask << " row " << i;
          ++rowsChecked;
        }
      }
    }
  }
  EXPECT_EQ(rowsChecked, 4u * 6u * 2u * 9u);
}

TEST(AttentionKernels, TopKNeverWritesPastKOnNaNScores) {
  // NaN ranks ahead of nothing, so a row with NaN picks more than k
  // positions; the compaction must still stop at column k.
  constexpr int64_t k = 4, width = 10, n = 2;
  KernelLibrary lib([&](mlir::ModuleOp m) {
    buildTopKRankKernel(m, "rank", k);
    buildTopKCompactKernel(m, "compact", k);
  });
  auto *rank = reinterpret_cast<void (*)(Descriptor<2, float> *, Descriptor<2, int8_t> *)>(
      lib.symbol("rank"));
  auto *compact = reinterpret_cast<void (*)(Descriptor<2, int8_t> *, Descriptor<1, int64_t> *,
                                            Descriptor<2, int32_t> *)>(lib.symbol("compact"));
  ASSERT_NE(rank, nullptr);
  ASSERT_NE(compact, nullptr);
  std::vector<float> scores(size_t(n * width));
  for (int64_t t = 0; t < n * width; ++t)
    scores[size_t(t)] = t % 3 == 0 ? std::nanf("") : float(t);
  std::vector<int8_t> picked(scores.size());
  std::vector<int64_t> visible(size_t(n), width);
  // Two rows of k columns, then a guard row that must stay untouched.
  std::vector<int32_t> out(size_t((n + 1) * k), 777);
  auto ds = describe<2>(scores, {n, width});
  auto dp = describe<2>(picked, {n, width});
  auto dv = describe<1>(visible, {n});
  auto dout = describe<2>(out, {n, k});
  rank(&ds, &dp);
  int picks = 0;
  for (int8_t p : picked)
    picks += p;
  EXPECT_GT(picks, int(n * k)); // more than k picks a row: the case guarded
  compact(&dp, &dv, &dout);
  for (int64_t j = n * k; j < (n + 1) * k; ++j)
    EXPECT_EQ(out[size_t(j)], 777) << j;
}

//===----------------------------------------------------------------------===//
// HSI level 1
//===----------------------------------------------------------------------===//

// The selection is the top-k's rank over the block scores, then the kept
// blocks' positions (HsiSelectPattern).
TEST(AttentionKernels, HsiSelectMatchesSelectCandidateBlocks) {
  struct Config {
    int64_t topBlocks, blockSize;
  };
  const Config configs[] = {{2, 8}, {3, 4}, {1, 8}, {2048, 8}, {5, 3}, {0, 8}};
  auto kernelName = [](const Config &c) {
    return "hsi_" + std::to_string(c.topBlocks) + "_" +
           std::to_string(c.blockSize);
  };
  KernelLibrary lib([&](mlir::ModuleOp m) {
    for (const Config &c : configs) {
      buildTopKRankKernel(m, "rank_" + kernelName(c), c.topBlocks);
      buildHsiExpandKernel(m, "expand_" + kernelName(c), c.blockSize);
      buildHsiBlockScoresKernel(m, "blocks_" + kernelName(c), c.blockSize);
    }
  });
  using Blocks = void (*)(Descriptor<2, float> *, Descriptor<1, int64_t> *,
                          Descriptor<2, float> *);
  using Rank = void (*)(Descriptor<2, float> *, Descriptor<2, int8_t> *);
  using Expand = void (*)(Descriptor<2, float> *, Descriptor<2, int8_t> *,
                          Descriptor<2, int8_t> *);
  size_t rowsChecked = 0, kept = 0;
  uint32_t seed = 4000;
  for (const Config &config : configs) {
    auto *rank = reinterpret_cast<Rank>(lib.symbol("rank_" + kernelName(config)));
    auto *expand = reinterpret_cast<Expand>(lib.symbol("expand_" + kernelName(config)));
    auto *blocksKernel =
        reinterpret_cast<Blocks>(lib.symbol("blocks_" + kernelName(config)));
    ASSERT_NE(rank, nullptr);
    ASSERT_NE(expand, nullptr);
    ASSERT_NE(blocksKernel, nullptr);
    for (int64_t width : {0, 1, 7, 8, 37, 64, 100}) {
      std::mt19937 gen(++seed);
      const int64_t n = 10;
      std::vector<float> scores = tieScores(size_t(n * width), gen);
      std::vector<int64_t> visible(static_cast<size_t>(n));
      std::uniform_int_distribution<int64_t> vis(0, width);
      for (int64_t i = 0; i < n; ++i)
        visible[size_t(i)] = i == 0 ? 0 : i == 1 ? width : vis(gen);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t t = 0; t < width; ++t) {
          float &s = scores[size_t(i * width + t)];
          if (i == 2 || (i >= 4 && t >= visible[size_t(i)]))
            s = kNegInf; // row 2 all -inf; rows 4.. as the indexer fills them
          if (i == 3 && (t / 8) % 2 == 0)
            s = kNegInf; // every other block -inf
        }
      std::vector<int8_t> mask(scores.size(), 99);
      auto ds = describe<2>(scores, {n, width});
      auto dv = describe<1>(visible, {n});
      auto dm = describe<2>(mask, {n, width});
      const int64_t numBlocks = (width + config.blockSize - 1) / config.blockSize;
      std::vector<float> blocks(size_t(n * numBlocks), 42.f);
      auto db = describe<2>(blocks, {n, numBlocks});
      blocksKernel(&ds, &dv, &db);
      std::vector<int8_t> picked(size_t(n * numBlocks), 99);
      auto dp = describe<2>(picked, {n, numBlocks});
      rank(&db, &dp);
      expand(&db, &dp, &dm);
      for (int64_t i = 0; i < n; ++i) {
        std::vector<float> row(scores.begin() + i * width,
                               scores.begin() + (i + 1) * width);
        std::vector<char> expected = reference::selectCandidateBlocks(
            row, visible[size_t(i)], config.topBlocks, config.blockSize);
        for (int64_t t = 0; t < width; ++t) {
          ASSERT_EQ(int(mask[size_t(i * width + t)]), int(expected[size_t(t)]))
              << "top " << config.topBlocks << " block " << config.blockSize
              << " T " << width << " row " << i << " t " << t;
          kept += expected[size_t(t)] != 0;
        }
        ++rowsChecked;
      }
    }
  }
  EXPECT_EQ(rowsChecked, 6u * 7u * 10u);
  EXPECT_GT(kept, 100u);
}

/// The window part of a decode step's index list, against a ring filled as
/// the cache append fills it (position p into slot p % W, later positions
/// overwriting earlier ones): column j must name the slot holding position
/// position - W + 1 + j, or -1 where the ring holds no such position (before
/// position 0, or before the first position the ring received); columns past
/// the window stay untouched.
TEST(AttentionKernels, WindowIndexNamesTheRingSlotsOldestFirst) {
  KernelLibrary lib([](mlir::ModuleOp m) { buildWindowIndexKernel(m, "window_index"); });
  using Kernel = void (*)(Descriptor<2, int32_t> *, int64_t, int64_t);
  auto *kernel = reinterpret_cast<Kernel>(lib.symbol("window_index"));
  ASSERT_NE(kernel, nullptr);
  int64_t checked = 0;
  for (int64_t window : {1, 4, 7, 128})
    for (int64_t ringStart : {int64_t(0), int64_t(3), int64_t(200)})
      for (int64_t position = ringStart; position < ringStart + 3 * window + 2; ++position) {
        // The ring after positions ringStart..position were appended.
        std::vector<int64_t> held(size_t(window), -1);
        for (int64_t p = ringStart; p <= position; ++p)
          held[size_t(p % window)] = p;
        // The list's first `window` columns of two rows of `width`.
        const int64_t rows = 2, width = window + 5;
        std::vector<int32_t> idx(size_t(rows * width), 77);
        auto d = describe<2>(idx, {rows, window});
        d.strides[0] = width;
        kernel(&d, position, ringStart);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < width; ++j) {
            const int32_t got = idx[size_t(i * width + j)];
            int32_t want = 77;
            if (j < window) {
              const int64_t p = position - window + 1 + j;
              want = -1;
              for (int64_t slot = 0; slot < window; ++slot)
                if (p >= 0 && held[size_t(slot)] == p)
                  want = int32_t(slot);
            }
            ASSERT_EQ(got, want) << "window " << window << " ring start " << ringStart
                                 << " position " << position << " row " << i
                                 << " column " << j;
            ++checked;
          }
      }
  EXPECT_GT(checked, 1000);
}

/// The window part of a prefill's or a chunk's index list. A prefill (the
/// ring held nothing before the call): row i lists positions max(0, i - W +
/// 1)..i oldest first, then -1 up to the list's `columns`. A chunk after held
/// rows: the rows are the ring as it was (position p in slot p % W, for p in
/// [ringStart, position)) and then the call's (row W + r for position
/// position + r); row i's column j names the row holding position position +
/// i - W + 1 + j, or -1 where no row holds it. Columns past the window's stay
/// untouched (the kernel gets the list's first columns with the list's row
/// stride).
TEST(AttentionKernels, RowsWindowIndexListsEachRowsWindowOldestFirst) {
  KernelLibrary lib(
      [](mlir::ModuleOp m) { buildRowsWindowIndexKernel(m, "window_index_rows"); });
  using Kernel = void (*)(Descriptor<2, int32_t> *, int64_t, int64_t, int64_t, int64_t);
  auto *kernel = reinterpret_cast<Kernel>(lib.symbol("window_index_rows"));
  ASSERT_NE(kernel, nullptr);
  int64_t checked = 0;
  for (int64_t window : {1, 4, 7, 128})
    for (int64_t n : {1, 3, 9, 200}) {
      // A prefill: the call's rows only.
      {
        const int64_t columns = std::min(n, window), width = columns + 3;
        std::vector<int32_t> idx(size_t(n * width), 77);
        auto d = describe<2>(idx, {n, columns});
        d.strides[0] = width;
        kernel(&d, /*position=*/0, /*ringStart=*/0, window, /*chunk=*/0);
        for (int64_t i = 0; i < n; ++i) {
          const int64_t first = std::max<int64_t>(0, i - window + 1);
          for (int64_t j = 0; j < width; ++j) {
            const int32_t want = j >= columns ? 77 : first + j <= i ? int32_t(first + j) : -1;
            ASSERT_EQ(idx[size_t(i * width + j)], want)
                << "prefill window " << window << " rows " << n << " row " << i
                << " column " << j;
            ++checked;
          }
        }
      }
      // Chunks after held rows.
      for (int64_t ringStart : {int64_t(0), int64_t(5)})
        for (int64_t position : {ringStart + 1, ringStart + window, ringStart + 3 * window + 2}) {
          std::vector<int64_t> holds(size_t(window + n), -1);
          for (int64_t p = ringStart; p < position; ++p)
            holds[size_t(p % window)] = p;
          for (int64_t r = 0; r < n; ++r)
            holds[size_t(window + r)] = position + r;
          const int64_t width = window + 2;
          std::vector<int32_t> idx(size_t(n * width), 77);
          auto d = describe<2>(idx, {n, window});
          d.strides[0] = width;
          kernel(&d, position, ringStart, window, /*chunk=*/1);
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < width; ++j) {
              int32_t want = 77;
              if (j < window) {
                const int64_t p = position + i - window + 1 + j;
                want = -1;
                for (size_t row = 0; row < holds.size(); ++row)
                  if (p >= 0 && holds[row] == p)
                    want = int32_t(row);
              }
              ASSERT_EQ(idx[size_t(i * width + j)], want)
                  << "chunk window " << window << " rows " << n << " ring start "
                  << ringStart << " position " << position << " row " << i << " column " << j;
              ++checked;
            }
        }
    }
  EXPECT_GT(checked, 100000);
}

/// The selected part of a prefill's index list in entry order: column
/// `column` + j names row firstRow + e for entry e = selected[i, j], -1 for
/// "nothing selected" and for an entry the cache does not hold; the window
/// columns before it stay untouched.
TEST(AttentionKernels, EntryIndexNamesEachSelectedEntrysRow) {
  KernelLibrary lib([](mlir::ModuleOp m) { buildEntryIndexKernel(m, "entry_index"); });
  using Kernel = void (*)(Descriptor<2, int32_t> *, Descriptor<2, int32_t> *, int64_t,
                          int64_t, int64_t);
  auto *kernel = reinterpret_cast<Kernel>(lib.symbol("entry_index"));
  ASSERT_NE(kernel, nullptr);
  std::mt19937 rng(11);
  const int64_t n = 37, k = 16, column = 5, firstRow = 300, held = 40;
  std::vector<int32_t> selected(size_t(n * k));
  std::uniform_int_distribution<int32_t> pick(-3, int32_t(held + 4));
  for (int32_t &e : selected)
    e = pick(rng);
  std::vector<int32_t> idx(size_t(n * (column + k)), 77);
  auto ds = describe<2>(selected, {n, k});
  auto di = describe<2>(idx, {n, column + k});
  kernel(&ds, &di, column, firstRow, held);
  int64_t named = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < column + k; ++j) {
      int32_t want = 77;
      if (j >= column) {
        const int32_t e = selected[size_t(i * k + j - column)];
        want = e < 0 || e >= held ? -1 : int32_t(firstRow + e);
        named += want >= 0;
      }
      ASSERT_EQ(idx[size_t(i * (column + k) + j)], want) << "row " << i << " column " << j;
    }
  EXPECT_GT(named, n * k / 2);
}

/// The selected part of a decode step's index list in set order (its set's
/// rows gathered as they are): column `column` + j names row firstRow + i x
/// k + j, -1 for "nothing selected".
TEST(AttentionKernels, SelectedIndexNamesTheSetsOwnRows) {
  KernelLibrary lib([](mlir::ModuleOp m) { buildSelectedIndexKernel(m, "selected_index"); });
  using Kernel = void (*)(Descriptor<2, int32_t> *, Descriptor<2, int32_t> *, int64_t, int64_t);
  auto *kernel = reinterpret_cast<Kernel>(lib.symbol("selected_index"));
  ASSERT_NE(kernel, nullptr);
  std::mt19937 rng(5);
  const int64_t n = 3, k = 24, column = 7, firstRow = 128;
  std::vector<int32_t> selected(size_t(n * k));
  std::uniform_int_distribution<int32_t> pick(-2, 500);
  for (int32_t &e : selected)
    e = pick(rng);
  std::vector<int32_t> idx(size_t(n * (column + k)), 77);
  auto ds = describe<2>(selected, {n, k});
  auto di = describe<2>(idx, {n, column + k});
  kernel(&ds, &di, column, firstRow);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < column + k; ++j) {
      const int32_t want = j < column                                   ? 77
                           : selected[size_t(i * k + j - column)] < 0 ? -1
                                                                      : int32_t(firstRow + i * k + j - column);
      ASSERT_EQ(idx[size_t(i * (column + k) + j)], want) << "row " << i << " column " << j;
    }
}

} // namespace
} // namespace csa::codegen

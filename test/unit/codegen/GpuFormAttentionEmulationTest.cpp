//===- GpuFormAttentionEmulationTest.cpp - Sparse attention's GPU forms -----===//
//
// The head, warp and split forms of sparse attention, run on host threads
// (SimtEmulation.h): the head form gives the host kernel's bits, the warp
// and split forms meet their bound (docs/semantics.md).
//
//===----------------------------------------------------------------------===//
#include "codegen/host/AttentionKernels.h"
#include "codegen/host/AttentionMma.h"
#include "test/unit/codegen/KernelTestSupport.h"
#include "test/unit/codegen/SimtEmulation.h"
#include "runtime/numerics/Tolerance.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <tuple>

using namespace csa::codegen;
using namespace csa::codegen::testing;
using namespace mlir;

namespace {
void expectAttentionHeadFormMatchesHost(int64_t heads, int64_t dim, int64_t threads,
                                        int64_t chunk, int64_t n, int64_t numIdx,
                                        int64_t table, bool misalignedRows = false) {
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildSparseAttentionKernel(m, "host", heads, dim);
    func::FuncOp form = buildSparseAttentionKernel(m, "form", heads, dim);
    AttentionHeadLanes lanes;
    lanes.row = simt.value(simt.blockX);
    lanes.head = simt.value(simt.blockY);
    lanes.lane = simt.value(simt.thread);
    lanes.barrier = simt.sync();
    lanes.threads = threads;
    lanes.chunk = chunk;
    Type f32 = Float32Type::get(m.getContext());
    lanes.sharedScoresType = MemRefType::get({chunk}, f32);
    lanes.sharedIndexType = MemRefType::get({chunk}, IntegerType::get(m.getContext(), 32));
    lanes.sharedProbsType = MemRefType::get({64}, f32);
    lanes.sharedQueryType = MemRefType::get({dim}, f32);
    lanes.rowsAddressSpace = 0;
    buildSparseAttentionHeadBody(form, heads, dim, lanes);
  });
  std::vector<uint16_t> q = randomBf16(size_t(n * heads * dim), 3, 0.5f);
  std::vector<uint16_t> rowValues = randomBf16(size_t(table * dim), 4, 0.5f);
  // The rows on 16 bytes (the form's 16-byte loads) or 2 bytes past them
  // (its scalar loads).
  std::vector<uint16_t> rowStore(rowValues.size() + 16);
  uint16_t *rowsAt = rowStore.data();
  while (reinterpret_cast<uintptr_t>(rowsAt) % 16 != 0)
    ++rowsAt;
  rowsAt += misalignedRows ? 1 : 0;
  std::copy(rowValues.begin(), rowValues.end(), rowsAt);
  std::vector<int32_t> idx(size_t(n * numIdx));
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> pick(-1, int(table) - 1);
  for (int32_t &v : idx)
    v = pick(gen);
  std::vector<float> sinks(static_cast<size_t>(heads), 0.f);
  for (int64_t h = 0; h < heads; ++h)
    sinks[size_t(h)] = 0.25f * float(h % 5) - 0.5f;
  const float scale = 0.125f;
  std::vector<uint16_t> outHost(q.size(), 0), outForm(q.size(), 0);
  auto dq = describe<3>(q, {n, heads, dim});
  Descriptor<2> dr{rowsAt, rowsAt, 0, {table, dim}, {dim, 1}};
  auto di = describe<2>(idx, {n, numIdx});
  auto dsink = describe<1>(sinks, {heads});
  auto doutHost = describe<3>(outHost, {n, heads, dim});
  auto doutForm = describe<3>(outForm, {n, heads, dim});
  using Host = void (*)(void *, void *, void *, void *, float, void *);
  using Form = void (*)(void *, void *, void *, void *, float, void *, void *, void *,
                        void *, void *);
  auto *host = reinterpret_cast<Host>(lib.symbol("host"));
  auto *form = reinterpret_cast<Form>(lib.symbol("form"));
  ASSERT_TRUE(host && form);
  host(&dq, &dr, &di, &dsink, scale, &doutHost);
  launch(n, heads, threads, size_t((2 * chunk + 64 + dim) * 4), [&](void *shared) {
    float *s = static_cast<float *>(shared);
    int32_t *j = reinterpret_cast<int32_t *>(s + chunk);
    float *p = s + 2 * chunk, *sq = p + 64;
    Descriptor<1, float> dScores{s, s, 0, {chunk}, {1}};
    Descriptor<1, int32_t> dIndex{j, j, 0, {chunk}, {1}};
    Descriptor<1, float> dProbs{p, p, 0, {64}, {1}};
    Descriptor<1, float> dQuery{sq, sq, 0, {dim}, {1}};
    form(&dq, &dr, &di, &dsink, scale, &doutForm, &dScores, &dIndex, &dProbs, &dQuery);
  });
  for (size_t i = 0; i < outHost.size(); ++i)
    ASSERT_EQ(bits(outHost[i]), bits(outForm[i])) << "element " << i;
}
} // namespace

TEST(GpuFormEmulation, SparseAttentionHeadFormMatchesTheHostKernel) {
  // 64 channels on 32 lanes (2 a lane), chunks of 128: 150 indices are two
  // chunks and blocks of 64, 64, 22 (a block cut by the chunk's end), with
  // -1 among them.
  expectAttentionHeadFormMatchesHost(3, 64, 32, 128, 5, 150, 40);
  // 64 channels on 64 lanes, one chunk of 1024.
  expectAttentionHeadFormMatchesHost(2, 64, 64, 1024, 3, 150, 40);
  // The released widths: 64 heads x 512 on 256 lanes (2 channels a lane).
  expectAttentionHeadFormMatchesHost(64, 512, attentionHeadThreads(512), 1024, 2, 130, 300);
  // Rows 2 bytes past 16: the scalar loads.
  expectAttentionHeadFormMatchesHost(3, 64, 32, 128, 5, 150, 40, /*misalignedRows=*/true);
  // No rows, every index -1: nothing is read, the sink alone.
  expectAttentionHeadFormMatchesHost(2, 64, 32, 128, 2, 70, 0);
}

namespace {
using IndexLane = std::function<Value(OpBuilder &, Location)>;
/// The split forms' blockY = outer x splits + split on host threads: (outer,
/// split), as NvvmLanes' splitGridLanes gives them on the GPU.
std::pair<IndexLane, IndexLane> splitGrid(Simt &simt, int64_t splits) {
  auto blockY = simt.value(simt.blockY);
  auto part = [blockY, splits](bool outer) -> IndexLane {
    return [blockY, splits, outer](OpBuilder &b, Location loc) -> Value {
      Value n = arith::ConstantIndexOp::create(b, loc, splits);
      return outer ? arith::DivUIOp::create(b, loc, blockY(b, loc), n).getResult()
                   : arith::RemUIOp::create(b, loc, blockY(b, loc), n).getResult();
    };
  };
  return {part(true), part(false)};
}

/// Every output of a GPU form within the bound its arithmetic allows against
/// the host kernel's (bf16 probabilities one code apart, the fp32 sums in
/// another order, the scores' dot error through exp, and the output's own
/// bf16 rounding); returns the worst error as a fraction of its bound.
double expectWithinAttentionBound(const std::vector<uint16_t> &q,
                                  const std::vector<uint16_t> &rowValues,
                                  const std::vector<int32_t> &idx, const std::vector<float> &sinks,
                                  float scale, const std::vector<uint16_t> &outHost,
                                  const std::vector<uint16_t> &outForm, int64_t n, int64_t heads,
                                  int64_t dim, int64_t numIdx) {
  // The bound, from the inputs in double.
  const double u = std::ldexp(1.0, -24);
  double worst = 0;
  int64_t exact = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> score(size_t(numIdx), -INFINITY), dotError(size_t(numIdx), 0);
      double maxScore = -1e30;
      for (int64_t k = 0; k < numIdx; ++k) {
        const int32_t jk = idx[size_t(i * numIdx + k)];
        if (jk < 0)
          continue;
        double dot = 0, absDot = 0;
        for (int64_t e = 0; e < dim; ++e) {
          const double prod = double(nx::bf16ToFloat(q[size_t((i * heads + h) * dim + e)])) *
                              nx::bf16ToFloat(rowValues[size_t(jk * dim + e)]);
          dot += prod;
          absDot += std::fabs(prod);
        }
        score[size_t(k)] = dot * scale;
        dotError[size_t(k)] = 2 * double(dim) * u * absDot * scale;
        maxScore = std::max(maxScore, score[size_t(k)]);
      }
      double total = std::exp(double(sinks[size_t(h)]) - maxScore);
      for (int64_t k = 0; k < numIdx; ++k)
        total += std::exp(score[size_t(k)] - maxScore);
      for (int64_t e = 0; e < dim; ++e) {
        // Sum of |p v| over the indices, each p's relative error: one bf16
        // code (2^-8), its score's dot error through exp, the sums' order.
        double spread = 0;
        for (int64_t k = 0; k < numIdx; ++k) {
          const int32_t jk = idx[size_t(i * numIdx + k)];
          if (jk < 0)
            continue;
          const double p = std::exp(score[size_t(k)] - maxScore);
          const double v = std::fabs(nx::bf16ToFloat(rowValues[size_t(jk * dim + e)]));
          spread += p * v * (std::ldexp(1.0, -8) + 2 * dotError[size_t(k)] +
                             4 * double(numIdx + dim) * u);
        }
        const size_t at = size_t((i * heads + h) * dim + e);
        const double hostValue = nx::bf16ToFloat(outHost[at]),
                     formValue = nx::bf16ToFloat(outForm[at]);
        // Over the denominator (its own relative error is in the same
        // terms), plus one bf16 code of the output.
        const double bound = 2 * spread / total + std::ldexp(std::fabs(hostValue), -7) + 1e-30;
        EXPECT_FALSE(std::isnan(formValue)) << "element " << at << " not stored";
        const double err = std::fabs(hostValue - formValue);
        EXPECT_LE(err, bound) << "row " << i << " head " << h << " channel " << e << ": host "
                              << hostValue << ", warp form " << formValue;
        worst = std::max(worst, err / bound);
        exact += outHost[at] == outForm[at];
      }
    }
  // Nearly every output is within a code of the host's: a form that mixed
  // up channels or indices would not be.
  EXPECT_GT(double(exact), 0.5 * double(outHost.size()));
  if (std::getenv("CSA_TEST_VERBOSE"))
    std::printf("  %lld of %zu outputs equal the host's, worst %.3g of the bound\n",
                (long long)exact, outHost.size(), worst);
  return worst;
}

/// A sparse attention's random inputs (seeds `seed` .. `seed + 2`), its
/// outputs poisoned (NaN: an element a form does not store shows) and the
/// descriptors the kernels take; runHost runs the library's "host" kernel.
struct AttentionCase {
  int64_t heads, dim, n, numIdx;
  std::vector<uint16_t> q, rowValues, rowStore, outHost, outForm;
  std::vector<int32_t> idx;
  std::vector<float> sinks;
  const float scale = 0.125f;
  Descriptor<3> dq, doutHost, doutForm;
  Descriptor<2> dr;
  Descriptor<2, int32_t> di;
  Descriptor<1, float> dsink;

  /// Rows on 16 bytes (the forms' 16-byte loads), or 2 bytes past them with
  /// `misalignedRows` (their element loads).
  AttentionCase(int64_t heads, int64_t dim, int64_t n, int64_t numIdx, int64_t table,
                bool misalignedRows, uint32_t seed)
      : heads(heads), dim(dim), n(n), numIdx(numIdx),
        q(randomBf16(size_t(n * heads * dim), seed, 0.5f)),
        rowValues(randomBf16(size_t(table * dim), seed + 1, 0.5f)),
        rowStore(rowValues.size() + 16), outHost(q.size(), 0xFFFF), outForm(q.size(), 0xFFFF),
        idx(size_t(n * numIdx)), sinks(size_t(heads)) {
    uint16_t *rowsAt = rowStore.data();
    while (reinterpret_cast<uintptr_t>(rowsAt) % 16 != 0)
      ++rowsAt;
    rowsAt += misalignedRows ? 1 : 0;
    std::copy(rowValues.begin(), rowValues.end(), rowsAt);
    std::mt19937 gen(seed + 2);
    std::uniform_int_distribution<int> pick(-1, int(table) - 1);
    for (int32_t &v : idx)
      v = pick(gen);
    for (int64_t h = 0; h < heads; ++h)
      sinks[size_t(h)] = 0.25f * float(h % 5) - 0.5f;
    dq = describe<3>(q, {n, heads, dim});
    dr = Descriptor<2>{rowsAt, rowsAt, 0, {table, dim}, {dim, 1}};
    di = describe<2>(idx, {n, numIdx});
    dsink = describe<1>(sinks, {heads});
    doutHost = describe<3>(outHost, {n, heads, dim});
    doutForm = describe<3>(outForm, {n, heads, dim});
  }
  AttentionCase(const AttentionCase &) = delete; // the descriptors point into it

  bool runHost(KernelLibrary &lib) {
    using Host = void (*)(void *, void *, void *, void *, float, void *);
    auto *host = reinterpret_cast<Host>(lib.symbol("host"));
    if (host)
      host(&dq, &dr, &di, &dsink, scale, &doutHost);
    return host != nullptr;
  }
  /// Runs a form's launch; with `splits` > 1 runs it again on poisoned
  /// outputs and expects the same bytes (the last block of each group put
  /// its count back to zero).
  void runSplitForm(const std::function<void()> &launchForm, int64_t splits) {
    launchForm();
    if (splits <= 1)
      return;
    std::vector<uint16_t> first = outForm;
    std::fill(outForm.begin(), outForm.end(), 0xFFFF);
    launchForm();
    EXPECT_EQ(first, outForm) << "the split form's second launch differs";
  }
  double expectWithinBound() const {
    return expectWithinAttentionBound(q, rowValues, idx, sinks, scale, outHost, outForm, n,
                                      heads, dim, numIdx);
  }
};

/// The warp form of sparse attention against the host kernel on the same
/// inputs: each output within the bound its arithmetic allows (bf16
/// probabilities one code apart, the fp32 sums in another order, the scores'
/// dot error through exp, and the output's own bf16 rounding); returns the
/// worst error as a fraction of its bound.
double expectAttentionWarpFormWithinBound(int64_t heads, int64_t dim, int64_t threads,
                                          int64_t chunk, int64_t n, int64_t numIdx,
                                          int64_t table, bool misalignedRows = false,
                                          int64_t splits = 1) {
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildSparseAttentionKernel(m, "host", heads, dim);
    func::FuncOp form = buildSparseAttentionKernel(m, "form", heads, dim);
    AttentionWarpLanes lanes;
    lanes.row = simt.value(simt.blockX);
    lanes.head = simt.value(simt.blockY);
    if (splits > 1) {
      // The split form: blockY = head x splits + split, as on the GPU.
      lanes.splits = splits;
      lanes.splitRows = kAttentionSplitRows;
      std::tie(lanes.head, lanes.split) = splitGrid(simt, splits);
    }
    lanes.lane = simt.value(simt.thread);
    lanes.barrier = simt.sync();
    lanes.shuffleXor = simt.shuffleXor();
    lanes.threads = threads;
    lanes.chunk = chunk;
    Type f32 = Float32Type::get(m.getContext());
    lanes.sharedScoresType = MemRefType::get({chunk}, f32);
    lanes.sharedIndexType = MemRefType::get({chunk}, IntegerType::get(m.getContext(), 32));
    lanes.sharedReduceType = MemRefType::get({2 * (threads / 32)}, f32);
    lanes.sharedAccType = MemRefType::get({threads / 32, dim}, f32);
    lanes.rowsAddressSpace = 0;
    buildSparseAttentionWarpBody(form, heads, dim, lanes);
  });
  AttentionCase c(heads, dim, n, numIdx, table, misalignedRows, 13);
  using Form = void (*)(void *, void *, void *, void *, float, void *, void *, void *,
                        void *, void *);
  auto *form = reinterpret_cast<Form>(lib.symbol("form"));
  EXPECT_TRUE(form && c.runHost(lib));
  if (!form)
    return 0;
  const int64_t warps = threads / 32;
  auto run = [&] {
    launch(n, heads * splits, threads, size_t((2 * chunk + 2 * warps + warps * dim) * 4),
           [&](void *shared) {
      float *s = static_cast<float *>(shared);
      int32_t *j = reinterpret_cast<int32_t *>(s + chunk);
      float *r = s + 2 * chunk, *a = r + 2 * warps;
      Descriptor<1, float> dScores{s, s, 0, {chunk}, {1}};
      Descriptor<1, int32_t> dIndex{j, j, 0, {chunk}, {1}};
      Descriptor<1, float> dReduce{r, r, 0, {2 * warps}, {1}};
      Descriptor<2, float> dAcc{a, a, 0, {warps, dim}, {dim, 1}};
      form(&c.dq, &c.dr, &c.di, &c.dsink, c.scale, &c.doutForm, &dScores, &dIndex, &dReduce,
           &dAcc);
    }, /*lastFirst=*/true);
  };
  c.runSplitForm(run, splits);
  return c.expectWithinBound();
}
} // namespace

TEST(GpuFormEmulation, SparseAttentionWarpFormMeetsItsBound) {
  // 64 channels on 2 warps (a run of 2 a lane), chunks of 128: 150 indices
  // are two chunks, with -1 among them.
  double worst = expectAttentionWarpFormWithinBound(3, 64, 64, 128, 3, 150, 40);
  // 32 channels (tiny's): a channel a lane, element loads.
  worst = std::max(worst, expectAttentionWarpFormWithinBound(4, 32, 64, 64, 2, 70, 20));
  // The released widths: 512 channels, 16-byte loads, 8 warps, one chunk.
  worst = std::max(worst, expectAttentionWarpFormWithinBound(4, 512, 256, 1024, 1, 640, 300));
  // Rows 2 bytes past 16: element loads.
  worst = std::max(worst, expectAttentionWarpFormWithinBound(3, 64, 64, 128, 2, 150, 40,
                                                             /*misalignedRows=*/true));
  // No rows, every index -1: the sink alone (zeros).
  worst = std::max(worst, expectAttentionWarpFormWithinBound(2, 64, 64, 128, 2, 70, 0));
  std::printf("sparse attention warp form: worst error %.3g of its bound\n", worst);
}

TEST(GpuFormEmulation, SparseAttentionSplitFormMeetsItsBound) {
  // One row in 4 slices of 38 indices (two chunks of 32 each, -1 among
  // them): the last block to finish combines.
  double worst = expectAttentionWarpFormWithinBound(3, 64, 64, 32, 1, 150, 40, false, 4);
  // Two rows (the most the form splits), more slices than some rows' sets.
  worst = std::max(worst, expectAttentionWarpFormWithinBound(2, 32, 64, 64, 2, 5, 20, false, 8));
  // Three rows: more than kAttentionSplitRows, so block 0 of each (row,
  // head) walks it whole and the others store nothing.
  worst = std::max(worst, expectAttentionWarpFormWithinBound(2, 64, 64, 128, 3, 150, 40, false, 4));
  // The released widths at a decode step: 512 channels, 16-byte loads.
  worst = std::max(worst, expectAttentionWarpFormWithinBound(2, 512, 256, 1024, 1, 640, 300,
                                                             false, 8));
  // tiny's shapes at a decode step: 4 heads x 32 on 256 lanes, 16 slices
  // of a window of 8 and a top-4 set (12 indices: most slices hold one,
  // four none).
  worst = std::max(worst, expectAttentionWarpFormWithinBound(4, 32, 256, 1024, 1, 12, 20, false, 16));
  // No rows, every index -1: the sink alone (zeros), combined.
  worst = std::max(worst, expectAttentionWarpFormWithinBound(2, 64, 64, 128, 1, 70, 0, false, 4));
  std::printf("sparse attention split form: worst error %.3g of its bound\n", worst);
}

namespace {
/// The mma form (tensor cores, 16 heads a block) against the host kernel,
/// under the same bound as the warp form.
double expectAttentionMmaFormWithinBound(int64_t heads, int64_t dim, int64_t n, int64_t numIdx,
                                         int64_t table, bool misalignedRows = false,
                                         int64_t splits = 1) {
  std::optional<AttentionMmaShape> shape = attentionMmaShape(heads, dim);
  EXPECT_TRUE(shape.has_value()) << heads << " x " << dim;
  if (!shape)
    return 0;
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildSparseAttentionKernel(m, "host", heads, dim);
    func::FuncOp form = buildSparseAttentionKernel(m, "form", heads, dim);
    AttentionMmaLanes lanes;
    lanes.row = simt.value(simt.blockX);
    lanes.tile = simt.value(simt.blockY);
    if (splits > 1) {
      // The split walk: blockY = tile x splits + split, as on the GPU.
      lanes.splits = splits;
      lanes.splitRows = kAttentionSplitRows;
      std::tie(lanes.tile, lanes.split) = splitGrid(simt, splits);
    }
    lanes.thread = simt.value(simt.thread);
    lanes.barrier = simt.sync();
    lanes.mma = simt.mmaBf16();
    lanes.shuffleXor = simt.shuffleXor();
    lanes.rowsAddressSpace = 0;
    MLIRContext *ctx = m.getContext();
    Type f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32);
    lanes.sharedRowsType = MemRefType::get({kAttentionMmaChunk, shape->rowWords()}, i32);
    lanes.sharedScoresType =
        MemRefType::get({kAttentionMmaHeads, kAttentionMmaChunk + 4}, f32);
    lanes.sharedIndexType = MemRefType::get({kAttentionMmaChunk}, i32);
    buildSparseAttentionMmaBody(form, *shape, lanes);
  });
  AttentionCase c(heads, dim, n, numIdx, table, misalignedRows, 23);
  using Form = void (*)(void *, void *, void *, void *, float, void *, void *, void *, void *);
  auto *form = reinterpret_cast<Form>(lib.symbol("form"));
  EXPECT_TRUE(form && c.runHost(lib));
  if (!form)
    return 0;
  const int64_t words = shape->rowWords(), scoreStride = kAttentionMmaChunk + 4;
  const size_t rowsBytes = size_t(kAttentionMmaChunk * words * 4),
               scoresBytes = size_t(kAttentionMmaHeads * scoreStride * 4);
  auto run = [&] {
    launch(n, shape->blocksPerRow() * splits, kAttentionMmaThreads, size_t(shape->sharedBytes()),
           [&](void *shared) {
      auto *base = static_cast<char *>(shared);
      auto *sr = reinterpret_cast<int32_t *>(base);
      auto *ss = reinterpret_cast<float *>(base + rowsBytes);
      auto *si = reinterpret_cast<int32_t *>(base + rowsBytes + scoresBytes);
      Descriptor<2, int32_t> dRows{sr, sr, 0, {kAttentionMmaChunk, words}, {words, 1}};
      Descriptor<2, float> dScores{ss, ss, 0, {kAttentionMmaHeads, scoreStride}, {scoreStride, 1}};
      Descriptor<1, int32_t> dIndex{si, si, 0, {kAttentionMmaChunk}, {1}};
      form(&c.dq, &c.dr, &c.di, &c.dsink, c.scale, &c.doutForm, &dRows, &dScores, &dIndex);
    }, /*lastFirst=*/true);
  };
  c.runSplitForm(run, splits);
  return c.expectWithinBound();
}
} // namespace

TEST(GpuFormEmulation, SparseAttentionMmaFormMeetsItsBound) {
  // 16 heads x 64 channels (one slice, a fragment a warp), 150 indices:
  // four chunks of 32 and one of 22, -1 among them; three rows.
  double worst = expectAttentionMmaFormWithinBound(16, 64, 3, 150, 40);
  // 32 heads (two head groups), 32 channels, rows 2 bytes past 16: element
  // loads.
  worst = std::max(worst, expectAttentionMmaFormWithinBound(32, 32, 2, 70, 20,
                                                            /*misalignedRows=*/true));
  // The released widths at a decode step: 64 heads x 512 (two slices of
  // 256), 640 indices.
  worst = std::max(worst, expectAttentionMmaFormWithinBound(64, 512, 1, 640, 300));
  // No rows, every index -1: the sink alone (zeros).
  worst = std::max(worst, expectAttentionMmaFormWithinBound(16, 64, 2, 70, 0));
  std::printf("sparse attention mma form: worst error %.3g of its bound\n", worst);
}

TEST(GpuFormEmulation, SparseAttentionMmaSplitWalkMeetsItsBound) {
  // One row, 150 indices (5 chunks, -1 among them) in 4 slices of 2 chunks:
  // the last slice holds one chunk cut short; the last block to finish
  // combines.
  double worst = expectAttentionMmaFormWithinBound(16, 64, 1, 150, 40, false, 4);
  // Two rows (the most the walk splits), more slices than chunks: most
  // slices hold nothing and still count.
  worst = std::max(worst, expectAttentionMmaFormWithinBound(32, 32, 2, 70, 20, true, 16));
  // Three rows: more than kAttentionSplitRows, so slice 0 of each (row,
  // tile) walks it whole and the others store nothing.
  worst = std::max(worst, expectAttentionMmaFormWithinBound(16, 64, 3, 150, 40, false, 4));
  // The released widths at a decode step: 64 heads x 512, 640 indices (20
  // chunks) in the default 16 slices.
  worst = std::max(worst, expectAttentionMmaFormWithinBound(
                              64, 512, 1, 640, 300, false,
                              attentionMmaSplits(*attentionMmaShape(64, 512))));
  // No rows, every index -1: the sink alone (zeros), combined.
  worst = std::max(worst, expectAttentionMmaFormWithinBound(16, 64, 1, 70, 0, false, 4));
  std::printf("sparse attention mma form, split walk: worst error %.3g of its bound\n", worst);
}

TEST(GpuFormEmulation, SparseAttentionMmaFormAppliesToWholeHeadGroups) {
  EXPECT_EQ(attentionMmaSplits(*attentionMmaShape(64, 512)), 16);
  EXPECT_EQ(attentionMmaSplits(*attentionMmaShape(64, 512), 16), 4);
  EXPECT_TRUE(attentionMmaShape(64, 512).has_value());
  EXPECT_EQ(attentionMmaShape(64, 512)->blocksPerRow(), 8);
  EXPECT_EQ(attentionMmaShape(16, 64)->blocksPerRow(), 1);
  EXPECT_FALSE(attentionMmaShape(4, 32).has_value());   // tiny: fewer heads than an mma's M
  EXPECT_FALSE(attentionMmaShape(16, 48).has_value());  // channels not whole fragments a warp
  EXPECT_FALSE(attentionMmaShape(16, 768).has_value()); // rows past 48 KiB of shared memory
  for (int64_t dim : {32, 64, 256, 512})
    EXPECT_LE(attentionMmaShape(16, dim)->sharedBytes(), 48 * 1024) << dim;
}

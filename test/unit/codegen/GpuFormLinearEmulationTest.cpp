//===- GpuFormLinearEmulationTest.cpp - The linears' GPU forms on host threads ===//
//
// The per-output, row-tiled, split-K and tensor-core forms of the linear
// kernels and the grouped (MoE) linears, run on host threads
// (SimtEmulation.h) on fresh random inputs: the row-tiled and per-output
// forms give the host kernel's bits, the split-K and tensor-core forms meet
// the dot-product bound (and the host's bits on exact operands).
//
//===----------------------------------------------------------------------===//
#include "codegen/host/LinearKernels.h"
#include "codegen/host/LinearMma.h"
#include "codegen/host/LinearSplitK.h"
#include "test/unit/codegen/KernelTestSupport.h"
#include "test/unit/codegen/SimtEmulation.h"
#include "runtime/numerics/Tolerance.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

using namespace csa::codegen;
using namespace csa::codegen::testing;
using namespace mlir;

namespace {


/// The split-K form's lanes on host threads: a block per (row, output tile),
/// its shared partials and sums appended to the kernel's arguments.
LinearSplitKLanes splitKLanes(const Simt &simt, MLIRContext *ctx, const LinearSplitKShape &split) {
  LinearSplitKLanes lanes;
  lanes.row = simt.value(simt.blockX);
  lanes.outputTile = simt.value(simt.blockY);
  lanes.thread = simt.value(simt.thread);
  lanes.barrier = simt.sync();
  lanes.weightAddressSpace = 0;
  const int64_t slots = split.rowsPerBlock * split.outputsPerBlock;
  lanes.sharedPartialsType = MemRefType::get({slots, split.threads}, Float32Type::get(ctx));
  lanes.sharedSumsType = MemRefType::get({slots, kSplitKParts}, Float32Type::get(ctx));
  return lanes;
}

/// The tensor-core form's lanes on host threads: a block per (row tile or
/// expert, output tile), the mma emulated a warp at a time.
LinearMmaLanes mmaLanes(const Simt &simt, MLIRContext *ctx, const LinearMmaShape &shape) {
  LinearMmaLanes lanes;
  lanes.rowTile = simt.value(simt.blockX);
  lanes.outputTile = simt.value(simt.blockY);
  lanes.thread = simt.value(simt.thread);
  lanes.barrier = simt.sync();
  lanes.mma = simt.mmaBf16();
  lanes.mmaE4m3 = simt.mmaE4m3();
  lanes.shuffleXor = simt.shuffleXor();
  lanes.weightAddressSpace = 0;
  lanes.sharedType = MemRefType::get({shape.sharedBytes()}, IntegerType::get(ctx, 8));
  return lanes;
}

/// Weight bytes of `spec` (codes in [100, 140]: every E4M3 exponent near 1,
/// NaN 0x7F among them; any byte for FP4) and its scales.
struct LinearCase {
  LinearKernelSpec spec;
  int64_t rows = 11;
  bool misaligned = false; ///< the weight at an odd address: the scalar loads
  /// Operands whose every partial sum is exact in fp32 (integer activations
  /// in [-3, 3], weights of one binade, unit scales): then any summation
  /// order gives the host kernel's bits, and a split-K form must too.
  bool exact = false;
  int64_t multiprocessors = 4; ///< the split-K shape's GPU (132: an H200)
  /// Split-K with LinearSplitKLanes::prefetchL2 and dependencyWait set.
  bool prefetch = false;
  /// Split-K: its batch variant, up to this many rows a block (1: none).
  int64_t maxRowsPerBlock = 1;
};

/// The 128-byte lines of [begin, begin + bytes).
std::set<uintptr_t> linesOf(const void *begin, size_t bytes) {
  std::set<uintptr_t> lines;
  const auto first = reinterpret_cast<uintptr_t>(begin);
  for (uintptr_t a = first / 128 * 128; a < first + bytes; a += 128)
    lines.insert(a);
  return lines;
}

/// Checks the events of a split-K run with prefetchL2 and dependencyWait:
/// every thread waits once; the prefetched lines are exactly `expected`
/// (the weight rows and scale rows the blocks read); a thread prefetches
/// only before its wait (`prefetchBeforeWait`: an ungrouped linear's rows
/// are known before the kernel upstream ends) or only after it (a grouped
/// one's expert ids come from upstream).
void expectPrefetched(const std::vector<SimtMemoryEvent> &events, int64_t blocks, int64_t threads,
                      const std::set<uintptr_t> &expected, bool prefetchBeforeWait) {
  std::map<std::tuple<int64_t, int64_t, int64_t>, int> waits;
  std::set<uintptr_t> lines;
  for (const SimtMemoryEvent &e : events) {
    auto key = std::make_tuple(e.blockX, e.blockY, e.thread);
    if (!e.address) {
      ++waits[key];
      continue;
    }
    lines.insert(reinterpret_cast<uintptr_t>(e.address) / 128 * 128);
    EXPECT_EQ(waits[key], prefetchBeforeWait ? 0 : 1)
        << "block (" << e.blockX << ", " << e.blockY << ") thread " << e.thread
        << " prefetched " << (prefetchBeforeWait ? "after" : "before") << " its wait";
  }
  int64_t waited = 0;
  for (const auto &[key, count] : waits) {
    EXPECT_LE(count, 1);
    waited += count;
  }
  EXPECT_EQ(waited, blocks * threads) << "every thread waits once";
  EXPECT_EQ(lines, expected);
}

/// The GPU forms of a linear: the row-tiled and per-output forms give the
/// host kernel's bits; the split-K form meets the dot-product tolerance.
enum class LinearForm { Tiled, PerOutput, SplitK, Mma, MmaE4m3 };

void expectTiledMatchesHost(const LinearCase &c, LinearForm which) {
  const bool perOutput = which == LinearForm::PerOutput;
  const bool mma = which == LinearForm::Mma || which == LinearForm::MmaE4m3;
  const bool e4m3 = which == LinearForm::MmaE4m3;
  // Forms within the dot-product tolerance instead of the host's bits.
  const bool bounded = which == LinearForm::SplitK || mma;
  const bool splitK = which == LinearForm::SplitK;
  const LinearKernelSpec &spec = c.spec;
  const bool quantized = linearNeedsSharedRow(spec);
  const bool fp8Dense = spec.format == LinearFormat::FP8AsBF16;
  const int64_t k = spec.inFeatures, n = spec.outFeatures, g = spec.groups;
  const int64_t tile = linearTileOutputs(spec, 64), chunk = 64, rowsPerTile = 8;
  const int64_t outputsPerBlock = 2; // per-output form: 2 warps
  LinearSplitKShape split;
  LinearMmaShape mmaShape;
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildLinearKernel(m, "host", spec);
    func::FuncOp form = buildLinearKernel(m, "form", spec);
    MLIRContext *ctx = m.getContext();
    if (mma) {
      std::optional<LinearMmaShape> shape = linearMmaShape(spec, 1, e4m3);
      ASSERT_TRUE(shape.has_value());
      ASSERT_EQ(shape->fp8, e4m3);
      mmaShape = *shape;
      buildLinearMmaBody(form, spec, mmaShape, mmaLanes(simt, ctx, mmaShape));
    } else if (splitK) {
      std::optional<LinearSplitKShape> shape =
          linearSplitKShape(spec, c.multiprocessors, c.maxRowsPerBlock);
      ASSERT_TRUE(shape.has_value());
      ASSERT_EQ(shape->rowsPerBlock > 1, c.maxRowsPerBlock > 1);
      split = *shape;
      LinearSplitKLanes lanes = splitKLanes(simt, ctx, split);
      if (c.prefetch) {
        lanes.prefetchL2 = simt.prefetchL2();
        lanes.dependencyWait = simt.dependencyWait();
      }
      buildLinearSplitKBody(form, spec, split, lanes);
    } else if (perOutput) {
      LinearLanes lanes;
      lanes.row = simt.value(simt.blockX);
      lanes.firstOutput = [&, by = simt.value(simt.blockY)](OpBuilder &b, Location loc) -> Value {
        return arith::MulIOp::create(b, loc, by(b, loc),
                                     arith::ConstantIndexOp::create(b, loc, outputsPerBlock));
      };
      lanes.lane = simt.value(simt.thread);
      lanes.lanes = [&](OpBuilder &b, Location loc) -> Value {
        return arith::ConstantIndexOp::create(b, loc, 32 * outputsPerBlock);
      };
      lanes.barrier = simt.sync();
      lanes.weightAddressSpace = 0;
      if (quantized)
        lanes.sharedRowType =
            MemRefType::get({k / 32 * (32 + kLinearRowPad)}, BFloat16Type::get(ctx));
      lanes.sharedPartialsType = MemRefType::get({outputsPerBlock, linearPartials(spec)},
                                                 Float32Type::get(ctx));
      buildLinearPerOutputBody(form, spec, lanes);
    } else {
      LinearTileLanes lanes;
      lanes.rowTile = simt.value(simt.blockX);
      lanes.outputTile = simt.value(simt.blockY);
      lanes.lane = simt.value(simt.thread);
      lanes.barrier = simt.sync();
      lanes.rowsPerTile = rowsPerTile;
      lanes.outputsPerTile = tile;
      lanes.chunk = chunk;
      lanes.weightAddressSpace = 0;
      lanes.sharedActType = MemRefType::get({chunk, rowsPerTile}, Float32Type::get(ctx));
      buildLinearTiledBody(form, spec, lanes);
    }
  });
  ASSERT_TRUE(perOutput || bounded || tile > 0) << "no tile for this spec";
  // Inputs.
  std::mt19937 gen(uint32_t(k * 31 + n + c.rows));
  const int64_t rows = c.rows;
  std::vector<uint16_t> x = randomBf16(size_t(rows * k), uint32_t(k + n));
  std::uniform_int_distribution<int> small(-3, 3), eighths(-15, 15), mantissa(0, 15);
  if (c.exact)
    for (uint16_t &v : x)
      v = nx::floatToBf16(float(small(gen)));
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    xf[i] = nx::bf16ToFloat(x[i]);
  const bool fp4 = spec.format == LinearFormat::FP4E2M1;
  const int64_t kg = k / g;
  const int64_t wCols = quantized ? (fp4 ? k / 2 : k) : kg;
  const int64_t wBytes = spec.format == LinearFormat::BF16 || spec.format == LinearFormat::F32
                             ? (spec.weightF32 ? 4 : 2)
                             : 1;
  std::vector<uint8_t> wStore(size_t(n * wCols * wBytes) + 32);
  uint8_t *wData = wStore.data() + (16 - reinterpret_cast<uintptr_t>(wStore.data()) % 16) % 16 +
                   (c.misaligned ? 1 : 0);
  std::uniform_int_distribution<int> code(100, 140), any(0, 255);
  std::vector<uint16_t> wBf16 = randomBf16(size_t(n * wCols), uint32_t(n), 0.5f);
  for (int64_t i = 0; i < n * wCols; ++i) {
    if (wBytes == 2)
      std::memcpy(wData + i * 2, &wBf16[size_t(i)], 2);
    else if (wBytes == 4) {
      float v = nx::bf16ToFloat(wBf16[size_t(i)]);
      std::memcpy(wData + i * 4, &v, 4);
    } else
      wData[i] = uint8_t(fp4 ? any(gen) : code(gen));
    if (c.exact) {
      // E4M3 codes of exponent field 7 (+-1 to +-1.875), eighths for bf16
      // and f32 weights; FP4's eight values are multiples of 1/2 anyway.
      const float v = float(eighths(gen)) / 8.f;
      const uint16_t vb = nx::floatToBf16(v);
      if (wBytes == 2)
        std::memcpy(wData + i * 2, &vb, 2);
      else if (wBytes == 4)
        std::memcpy(wData + i * 4, &v, 4);
      else if (!fp4) {
        const int m = mantissa(gen);
        wData[i] = uint8_t(((m & 8) << 4) | (7 << 3) | (m & 7));
      }
    }
  // The split-K check needs finite outputs: no E4M3 NaN code (S.1111.111).
  if (bounded && !fp4 && wBytes == 1)
    for (int64_t i = 0; i < n * wCols; ++i)
      if ((wData[i] & 0x7F) == 0x7F)
        wData[i] ^= 1;
  }
  const int64_t scaleRows = spec.format == LinearFormat::FP4E2M1 ? n : (n + 31) / 32;
  const int64_t scaleCols = (quantized ? k : kg + 31) / 32;
  std::vector<int8_t> scale(size_t(scaleRows * scaleCols));
  std::uniform_int_distribution<int> exponent(120, 130);
  for (int8_t &s : scale)
    s = int8_t(c.exact ? 127 : exponent(gen));
  const bool f32Out = spec.format == LinearFormat::F32;
  std::vector<uint16_t> yHost(size_t(rows * n), 0x7FC1), yForm(size_t(rows * n), 0x7FC1);
  std::vector<float> yHostF(size_t(rows * n), -1.f), yFormF(size_t(rows * n), -1.f);
  // Descriptors (the same bytes for both kernels).
  auto dx = describe<2>(x, {rows, k});
  auto dxf = describe<2>(xf, {rows, k});
  void *xDesc = spec.inputF32 ? static_cast<void *>(&dxf) : static_cast<void *>(&dx);
  Descriptor<2, uint8_t> dw{wData, wData, 0, {n, wCols}, {wCols, 1}};
  auto ds = describe<2>(scale, {scaleRows, scaleCols});
  auto y = [&](bool host) -> void * {
    static thread_local Descriptor<2, uint16_t> d;
    static thread_local Descriptor<2, float> df;
    if (f32Out) {
      df = describe<2>(host ? yHostF : yFormF, {rows, n});
      return &df;
    }
    d = describe<2>(host ? yHost : yForm, {rows, n});
    return &d;
  };
  const bool scaled = quantized || fp8Dense;
  using Fn3 = void (*)(void *, void *, void *);
  using Fn4 = void (*)(void *, void *, void *, void *);
  using Fn5 = void (*)(void *, void *, void *, void *, void *);
  using Fn6 = void (*)(void *, void *, void *, void *, void *, void *);
  void *host = lib.symbol("host"), *form = lib.symbol("form");
  ASSERT_TRUE(host && form);
  if (scaled)
    reinterpret_cast<Fn4>(host)(xDesc, &dw, &ds, y(true));
  else
    reinterpret_cast<Fn3>(host)(xDesc, &dw, y(true));
  if (mma) {
    const int64_t tm = mmaShape.rowsPerTile, tn = mmaShape.outputsPerTile;
    launch((rows + tm - 1) / tm, n / tn, mmaShape.threads(), size_t(mmaShape.sharedBytes()),
           [&](void *shared) {
      uint8_t *p = static_cast<uint8_t *>(shared);
      Descriptor<1, uint8_t> dShared{p, p, 0, {mmaShape.sharedBytes()}, {1}};
      void *out = y(false);
      if (scaled)
        reinterpret_cast<Fn5>(form)(xDesc, &dw, &ds, out, &dShared);
      else
        reinterpret_cast<Fn4>(form)(xDesc, &dw, out, &dShared);
    }, /*lastFirst=*/true);
  } else if (splitK) {
    const int64_t o = split.outputsPerBlock, t = split.threads, rb = split.rowsPerBlock;
    takeSimtMemoryEvents();
    launch((rows + rb - 1) / rb, (n + o - 1) / o, t, size_t(split.sharedBytes()), [&](void *shared) {
      float *p = static_cast<float *>(shared);
      Descriptor<2, float> dPart{p, p, 0, {rb * o, t}, {t, 1}};
      float *q = p + rb * o * t;
      Descriptor<2, float> dSums{q, q, 0, {rb * o, kSplitKParts}, {kSplitKParts, 1}};
      void *out = y(false);
      if (scaled)
        reinterpret_cast<Fn6>(form)(xDesc, &dw, &ds, out, &dPart, &dSums);
      else
        reinterpret_cast<Fn5>(form)(xDesc, &dw, out, &dPart, &dSums);
    });
    if (c.prefetch) {
      // One row of blocks asks for every weight row (where the weight lies
      // on 16 bytes: the vector loads' condition) and every scale row.
      std::set<uintptr_t> expected;
      if (!c.misaligned)
        expected = linesOf(wData, size_t(n * wCols * wBytes));
      if (scaled)
        expected.merge(linesOf(scale.data(), scale.size()));
      expectPrefetched(takeSimtMemoryEvents(), (rows + rb - 1) / rb * ((n + o - 1) / o), t, expected,
                       /*prefetchBeforeWait=*/true);
    }
  } else if (perOutput) {
    const int64_t partials = linearPartials(spec);
    const size_t rowBytes = size_t(k / 32 * (32 + kLinearRowPad) * 2);
    const size_t partialBytes = size_t(outputsPerBlock * partials * 4);
    launch(rows, (n + outputsPerBlock - 1) / outputsPerBlock, 32 * outputsPerBlock,
           (quantized ? rowBytes : 0) + partialBytes, [&](void *shared) {
      uint8_t *base = static_cast<uint8_t *>(shared);
      Descriptor<1, uint16_t> dRow{reinterpret_cast<uint16_t *>(base),
                                   reinterpret_cast<uint16_t *>(base), 0,
                                   {int64_t(rowBytes / 2)}, {1}};
      float *p = reinterpret_cast<float *>(base + (quantized ? (rowBytes + 15) / 16 * 16 : 0));
      Descriptor<2, float> dPart{p, p, 0, {outputsPerBlock, partials}, {partials, 1}};
      void *out = y(false);
      if (quantized)
        reinterpret_cast<Fn6>(form)(xDesc, &dw, &ds, out, &dRow, &dPart);
      else if (scaled)
        reinterpret_cast<Fn5>(form)(xDesc, &dw, &ds, out, &dPart);
      else
        reinterpret_cast<Fn4>(form)(xDesc, &dw, out, &dPart);
    });
  } else {
    launch((rows + rowsPerTile - 1) / rowsPerTile, (n + tile - 1) / tile, tile,
           size_t(chunk * rowsPerTile * 4), [&](void *shared) {
      float *a = static_cast<float *>(shared);
      Descriptor<2, float> dAct{a, a, 0, {chunk, rowsPerTile}, {rowsPerTile, 1}};
      void *out = y(false);
      if (scaled)
        reinterpret_cast<Fn5>(form)(xDesc, &dw, &ds, out, &dAct);
      else
        reinterpret_cast<Fn4>(form)(xDesc, &dw, out, &dAct);
    });
  }
  if (bounded && !c.exact) {
    // The bound needs the host kernel on the operands' magnitudes.
    std::vector<uint16_t> xAbs = x;
    std::vector<float> xfAbs = xf;
    nx::takeMagnitudes(xAbs.data(), xAbs.size(), 2, nx::OperandEncoding::Real);
    nx::takeMagnitudes(xfAbs.data(), xfAbs.size(), 4, nx::OperandEncoding::Real);
    std::vector<uint8_t> wAbsStore(wStore.size());
    uint8_t *wAbs = wAbsStore.data() + (wData - wStore.data());
    std::memcpy(wAbs, wData, size_t(n * wCols * wBytes));
    nx::takeMagnitudes(wAbs, size_t(n * wCols), size_t(wBytes),
                       fp4 ? nx::OperandEncoding::E2M1x2
                       : wBytes == 1 ? nx::OperandEncoding::E4M3
                                     : nx::OperandEncoding::Real);
    auto dxa = describe<2>(xAbs, {rows, k});
    auto dxfa = describe<2>(xfAbs, {rows, k});
    void *xaDesc = spec.inputF32 ? static_cast<void *>(&dxfa) : static_cast<void *>(&dxa);
    Descriptor<2, uint8_t> dwa{wAbs, wAbs, 0, {n, wCols}, {wCols, 1}};
    std::vector<uint16_t> sBf(size_t(rows * n));
    std::vector<float> sF(size_t(rows * n));
    auto dsb = describe<2>(sBf, {rows, n});
    auto dsf = describe<2>(sF, {rows, n});
    void *sDesc = f32Out ? static_cast<void *>(&dsf) : static_cast<void *>(&dsb);
    if (scaled)
      reinterpret_cast<Fn4>(host)(xaDesc, &dwa, &ds, sDesc);
    else
      reinterpret_cast<Fn3>(host)(xaDesc, &dwa, sDesc);
    for (size_t i = 0; i < yHost.size(); ++i) {
      const double u = f32Out ? yHostF[i] : nx::bf16ToFloat(yHost[i]);
      const double v = f32Out ? yFormF[i] : nx::bf16ToFloat(yForm[i]);
      const double sum = f32Out ? sF[i] : nx::bf16ToFloat(sBf[i]);
      ASSERT_TRUE(std::isfinite(u) && std::isfinite(v)) << "element " << i << ": " << u << " " << v;
      const double bound = nx::dotErrorBound(kg, sum, u, !f32Out);
      ASSERT_LE(std::fabs(u - v), bound) << "element " << i << ": host " << u << ", form " << v;
    }
    return;
  }
  for (size_t i = 0; i < yHost.size(); ++i) {
    if (f32Out) {
      const float u = yHostF[i], v = yFormF[i];
      if (std::isnan(u) && std::isnan(v))
        continue;
      ASSERT_EQ(nx::floatBits(u), nx::floatBits(v)) << "element " << i;
    } else {
      const uint16_t u = yHost[i], v = yForm[i];
      if (std::isnan(nx::bf16ToFloat(u)) && std::isnan(nx::bf16ToFloat(v)))
        continue;
      ASSERT_EQ(bits(u), bits(v)) << "element " << i;
    }
  }
}

LinearKernelSpec specOf(LinearFormat f, int64_t k, int64_t n, int64_t groups = 1,
                        bool inputF32 = false) {
  LinearKernelSpec s;
  s.format = f;
  s.inFeatures = k;
  s.outFeatures = n;
  s.groups = groups;
  s.inputF32 = inputF32;
  return s;
}

} // namespace

TEST(GpuFormEmulation, TiledLinearMatchesTheHostKernel) {
  // K over three 64-channel chunks, a last row tile of 3 and a last output
  // tile of 8; FP8/FP4 by 16-byte loads, then at an odd address (scalar).
  for (bool misaligned : {false, true}) {
    SCOPED_TRACE(misaligned ? "misaligned weight" : "aligned weight");
    expectTiledMatchesHost({specOf(LinearFormat::FP8Block32, 192, 72), 11, misaligned}, LinearForm::Tiled);
    expectTiledMatchesHost({specOf(LinearFormat::FP4E2M1, 128, 40), 11, misaligned}, LinearForm::Tiled);
  }
  expectTiledMatchesHost({specOf(LinearFormat::FP8Block32, 96, 32, 1, true), 5}, LinearForm::Tiled);
  expectTiledMatchesHost({specOf(LinearFormat::BF16, 100, 48), 9}, LinearForm::Tiled);
  expectTiledMatchesHost({specOf(LinearFormat::BF16, 128, 64, 2), 9}, LinearForm::Tiled);
  expectTiledMatchesHost({specOf(LinearFormat::F32, 64, 40, 1, true), 3}, LinearForm::Tiled);
  expectTiledMatchesHost({specOf(LinearFormat::FP8AsBF16, 128, 64, 2), 10}, LinearForm::Tiled);
}

TEST(GpuFormEmulation, MmaLinearMeetsTheDotBound) {
  // Two row tiles (the last of 6 rows), K over several 32-blocks, FP8 and
  // FP4 by 16-byte loads and at an odd address; grouped FP8-as-bf16 (the
  // wo_a form, 32 outputs a tile) and bf16 (two output tiles of 128).
  for (bool misaligned : {false, true}) {
    SCOPED_TRACE(misaligned ? "misaligned weight" : "aligned weight");
    expectTiledMatchesHost({specOf(LinearFormat::FP8Block32, 96, 64), 70, misaligned}, LinearForm::Mma);
    expectTiledMatchesHost({specOf(LinearFormat::FP4E2M1, 128, 32), 9, misaligned}, LinearForm::Mma);
  }
  // 128 outputs a tile: act_quant split over 4 lanes a (row, block).
  expectTiledMatchesHost({specOf(LinearFormat::FP8Block32, 64, 128), 40}, LinearForm::Mma);
  expectTiledMatchesHost({specOf(LinearFormat::FP8AsBF16, 128, 64, 2), 10}, LinearForm::Mma);
  expectTiledMatchesHost({specOf(LinearFormat::BF16, 64, 256), 5}, LinearForm::Mma);
}

TEST(GpuFormEmulation, MmaLinearIsExactWhenEverySumIs) {
  // Exact partial sums: any order of the fp32 adds gives the host's bits.
  LinearCase fp8{specOf(LinearFormat::FP8Block32, 64, 64), 17};
  fp8.exact = true;
  expectTiledMatchesHost(fp8, LinearForm::Mma);
  LinearCase bf16{specOf(LinearFormat::BF16, 96, 32), 3};
  bf16.exact = true;
  expectTiledMatchesHost(bf16, LinearForm::Mma);
}

TEST(GpuFormEmulation, MmaFormTakesOnlyWhatItCan) {
  EXPECT_TRUE(linearMmaShape(specOf(LinearFormat::FP8AsBF16, 32768, 8192, 8)).has_value());
  EXPECT_EQ(linearMmaShape(specOf(LinearFormat::FP8AsBF16, 32768, 8192, 8))->outputsPerTile, 128);
  EXPECT_EQ(linearMmaShape(specOf(LinearFormat::FP8Block32, 64, 96))->outputsPerTile, 32);
  EXPECT_FALSE(linearMmaShape(specOf(LinearFormat::F32, 64, 64)).has_value());
  EXPECT_FALSE(linearMmaShape(specOf(LinearFormat::FP8Block32, 64, 64, 1, true)).has_value());
  EXPECT_FALSE(linearMmaShape(specOf(LinearFormat::BF16, 100, 64)).has_value());
  EXPECT_FALSE(linearMmaShape(specOf(LinearFormat::BF16, 64, 40)).has_value());
}

TEST(GpuFormEmulation, PerOutputLinearMatchesTheHostKernel) {
  for (bool misaligned : {false, true}) {
    SCOPED_TRACE(misaligned ? "misaligned weight" : "aligned weight");
    expectTiledMatchesHost({specOf(LinearFormat::FP8Block32, 192, 7), 3, misaligned}, LinearForm::PerOutput);
    expectTiledMatchesHost({specOf(LinearFormat::FP4E2M1, 128, 5), 2, misaligned}, LinearForm::PerOutput);
    // Lanes with several blocks, loaded kPrefetchBlocks at a time: 66
    // blocks (3 a lane, the third only for lanes 0 and 1) and 160 (5 a
    // lane: a group of 4, then one more).
    expectTiledMatchesHost({specOf(LinearFormat::FP8Block32, 2112, 3), 2, misaligned}, LinearForm::PerOutput);
    expectTiledMatchesHost({specOf(LinearFormat::FP4E2M1, 5120, 2), 1, misaligned}, LinearForm::PerOutput);
  }
  // An f32 input (act_quant-ed from global memory, not copied first).
  expectTiledMatchesHost({specOf(LinearFormat::FP8Block32, 96, 5, 1, true), 2}, LinearForm::PerOutput);
  expectTiledMatchesHost({specOf(LinearFormat::BF16, 100, 6), 2}, LinearForm::PerOutput);
  expectTiledMatchesHost({specOf(LinearFormat::FP8AsBF16, 128, 8, 2), 2}, LinearForm::PerOutput);
}

TEST(GpuFormEmulation, SplitKLinearPrefetchesItsRowsBeforeItWaits) {
  // The sums are unchanged (the dot bound), the prefetched lines are the
  // weight's and the scales' (a last output tile cut short, FP8 scale rows
  // of 32 outputs, FP4 ones of one), all before the wait; a misaligned
  // weight is not prefetched (its loads are element loads).
  for (bool misaligned : {false, true}) {
    SCOPED_TRACE(misaligned ? "misaligned weight" : "aligned weight");
    LinearCase fp8{specOf(LinearFormat::FP8Block32, 192, 70), 3, misaligned};
    fp8.prefetch = true;
    expectTiledMatchesHost(fp8, LinearForm::SplitK);
    LinearCase fp4{specOf(LinearFormat::FP4E2M1, 5120, 6), 2, misaligned};
    fp4.prefetch = true;
    expectTiledMatchesHost(fp4, LinearForm::SplitK);
  }
  LinearCase bf16{specOf(LinearFormat::BF16, 96, 6), 2};
  bf16.prefetch = true;
  expectTiledMatchesHost(bf16, LinearForm::SplitK);
}

TEST(GpuFormEmulation, SplitKLinearMeetsTheDotBound) {
  // One and several words a thread, idle threads in the last warp (FP8 K
  // 192: 12 words, 2 a thread, 6 threads of 32), a last output tile cut
  // short, groups, an f32 input; 16-byte loads, then element loads.
  for (bool misaligned : {false, true}) {
    SCOPED_TRACE(misaligned ? "misaligned weight" : "aligned weight");
    expectTiledMatchesHost({specOf(LinearFormat::FP8Block32, 192, 7), 3, misaligned}, LinearForm::SplitK);
    expectTiledMatchesHost({specOf(LinearFormat::FP4E2M1, 128, 5), 2, misaligned}, LinearForm::SplitK);
    expectTiledMatchesHost({specOf(LinearFormat::FP8Block32, 2112, 9), 2, misaligned}, LinearForm::SplitK);
    expectTiledMatchesHost({specOf(LinearFormat::FP4E2M1, 5120, 6), 1, misaligned}, LinearForm::SplitK);
  }
  expectTiledMatchesHost({specOf(LinearFormat::FP8Block32, 96, 5, 1, true), 2}, LinearForm::SplitK);
  expectTiledMatchesHost({specOf(LinearFormat::BF16, 96, 6), 2}, LinearForm::SplitK);
  expectTiledMatchesHost({specOf(LinearFormat::BF16, 128, 64, 2), 2}, LinearForm::SplitK);
  expectTiledMatchesHost({specOf(LinearFormat::F32, 64, 40, 1, true), 3}, LinearForm::SplitK);
  expectTiledMatchesHost({specOf(LinearFormat::FP8AsBF16, 128, 8, 2), 2}, LinearForm::SplitK);
}

TEST(GpuFormEmulation, SplitKBatchVariantMeetsTheDotBound) {
  // Blocks of 2 and 4 rows with the last block short (5 rows) or alone (1
  // row); each format, groups, 16-byte and element loads.
  for (int64_t maxRows : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << "up to " << maxRows << " rows a block");
    for (int64_t rows : {1, 5}) {
      SCOPED_TRACE(::testing::Message() << rows << " rows");
      const bool misaligned = rows == 5 && maxRows == 4;
      LinearCase fp8{specOf(LinearFormat::FP8Block32, 192, 7), rows, misaligned};
      fp8.maxRowsPerBlock = maxRows;
      expectTiledMatchesHost(fp8, LinearForm::SplitK);
      LinearCase fp4{specOf(LinearFormat::FP4E2M1, 128, 5), rows, misaligned};
      fp4.maxRowsPerBlock = maxRows;
      expectTiledMatchesHost(fp4, LinearForm::SplitK);
    }
  }
  for (LinearCase c : {LinearCase{specOf(LinearFormat::BF16, 128, 64, 2), 6},
                       LinearCase{specOf(LinearFormat::F32, 64, 40, 1, true), 7},
                       LinearCase{specOf(LinearFormat::FP8AsBF16, 128, 8, 2), 5},
                       LinearCase{specOf(LinearFormat::FP8Block32, 96, 5, 1, true), 9}}) {
    c.maxRowsPerBlock = 4;
    expectTiledMatchesHost(c, LinearForm::SplitK);
  }
  // Operands whose every partial sum is exact: the host kernel's bits.
  LinearCase exact{specOf(LinearFormat::FP8Block32, 2112, 9), 6};
  exact.exact = true;
  exact.maxRowsPerBlock = 4;
  expectTiledMatchesHost(exact, LinearForm::SplitK);
}

TEST(GpuFormEmulation, SplitKBatchVariantFitsItsRegistersAndSharedMemory) {
  // FP8 K 2048: 2 words (32 activations) a thread, so 4 rows; K 8192 at 4
  // words: 64 a row, so 2; a grouped linear has no batch variant.
  LinearKernelSpec fp8 = specOf(LinearFormat::FP8Block32, 2048, 64);
  std::optional<LinearSplitKShape> shape = linearSplitKShape(fp8, 132, 8);
  ASSERT_TRUE(shape.has_value());
  EXPECT_EQ(shape->rowsPerBlock * shape->wordsPerThread * shape->elementsPerWord,
            kSplitKMaxRowValues);
  EXPECT_EQ(linearSplitKOutputsInFlight(*shape), 4);
  EXPECT_LE(shape->sharedBytes(), 48 * 1024);
  EXPECT_FALSE(linearSplitKShape(fp8, 132, 1).value().rowsPerBlock > 1);
  // Partials of 1024 threads x 16 outputs x 4 rows would take 256 KB: fewer rows, or none.
  LinearKernelSpec wide = specOf(LinearFormat::FP8Block32, 32768, 4096);
  std::optional<LinearSplitKShape> wideShape = linearSplitKShape(wide, 132, 4, 48 * 1024);
  if (wideShape)
    EXPECT_LE(wideShape->sharedBytes(), 48 * 1024);
  // Grouped over experts: gathered, its list (threads + 1 i32) counted.
  LinearKernelSpec grouped = specOf(LinearFormat::FP4E2M1, 128, 64);
  grouped.experts = 8;
  grouped.slotsPerRow = 2;
  std::optional<LinearSplitKShape> gathered = linearSplitKShape(grouped, 132, 4);
  ASSERT_TRUE(gathered.has_value());
  EXPECT_TRUE(gathered->gathered);
  EXPECT_EQ(gathered->sharedBytes(),
            gathered->rowsPerBlock * gathered->outputsPerBlock * (gathered->threads + kSplitKParts) * 4 +
                (gathered->threads + 1) * 4);
  EXPECT_FALSE(linearSplitKShape(grouped, 132, 1)->gathered);
}

namespace {

/// Random operands of a grouped linear: `rows` x K bf16 activations, E
/// experts' weights stacked (16-byte aligned, for the forms' vector loads;
/// FP8 codes of moderate size, no NaN) and their UE8M0 scales.
struct GroupedOperands {
  std::vector<uint16_t> x;
  std::vector<uint8_t> wStore;
  uint8_t *w = nullptr;
  std::vector<int8_t> scale;
  int64_t wCols = 0, scaleRows = 0, scaleCols = 0;
};

GroupedOperands groupedOperands(LinearFormat format, int64_t k, int64_t n, int64_t experts,
                                int64_t rows, uint32_t seed, uint32_t xSeed) {
  const bool fp4 = format == LinearFormat::FP4E2M1;
  GroupedOperands o;
  o.wCols = fp4 ? k / 2 : k;
  o.scaleRows = fp4 ? n : (n + 31) / 32;
  o.scaleCols = k / 32;
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> code(100, 140), any(0, 255), exponent(120, 130);
  o.x = randomBf16(size_t(rows * k), xSeed);
  o.wStore.resize(size_t(experts * n * o.wCols) + 16);
  o.w = o.wStore.data() + (16 - reinterpret_cast<uintptr_t>(o.wStore.data()) % 16) % 16;
  for (int64_t i = 0; i < experts * n * o.wCols; ++i) {
    o.w[i] = uint8_t(fp4 ? any(gen) : code(gen));
    if (!fp4 && (o.w[i] & 0x7F) == 0x7F)
      o.w[i] ^= 1;
  }
  o.scale.resize(size_t(experts * o.scaleRows * o.scaleCols));
  for (int8_t &v : o.scale)
    v = int8_t(exponent(gen));
  return o;
}

/// A grouped linear (LinearKernelSpec::experts) against its experts' own
/// kernels: host and split-K form, each slot's row must be the bits of the
/// ungrouped kernel of the same form on the slot's expert and activation
/// row (zeros for an id outside [0, E)): grouping changes which weights a
/// block reads, never its sums. With `maxRowsPerBlock` > 1 the grouped form
/// is the gathered batch variant (a block per (expert, tile) running its
/// slots that many at a time): gathering does not change a sum either.
void expectGroupedEqualsPerExpert(LinearFormat format, int64_t k, int64_t n, int64_t experts,
                                  int64_t slotsPerRow, const std::vector<int32_t> &ids,
                                  int64_t maxRowsPerBlock = 1) {
  LinearKernelSpec single = specOf(format, k, n);
  LinearKernelSpec grouped = single;
  grouped.experts = experts;
  grouped.slotsPerRow = slotsPerRow;
  // Each kernel in its own shape (the grouped one has more outputs a block:
  // which block computes an output must not change its sum).
  const int64_t mps = 4;
  LinearSplitKShape splitSingle = *linearSplitKShape(single, mps),
                    splitGrouped = *linearSplitKShape(grouped, mps, maxRowsPerBlock);
  const bool gathered = maxRowsPerBlock > 1;
  ASSERT_EQ(splitGrouped.gathered, gathered);
  ASSERT_EQ(splitGrouped.rowsPerBlock > 1, gathered);
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    MLIRContext *ctx = m.getContext();
    buildLinearKernel(m, "host_single", single);
    buildLinearKernel(m, "host_grouped", grouped);
    for (auto [name, spec] : {std::pair<const char *, LinearKernelSpec *>{"form_single", &single},
                              {"form_grouped", &grouped}}) {
      func::FuncOp form = buildLinearKernel(m, name, *spec);
      const LinearSplitKShape &split = spec == &single ? splitSingle : splitGrouped;
      LinearSplitKLanes lanes = splitKLanes(simt, ctx, split);
      if (split.gathered)
        lanes.sharedListType = MemRefType::get({split.threads + 1}, IntegerType::get(ctx, 32));
      if (spec == &grouped && !gathered) {
        lanes.prefetchL2 = simt.prefetchL2();
        lanes.dependencyWait = simt.dependencyWait();
      }
      buildLinearSplitKBody(form, *spec, split, lanes);
    }
  });
  const int64_t slots = int64_t(ids.size()), rows = (slots + slotsPerRow - 1) / slotsPerRow;
  GroupedOperands ops =
      groupedOperands(format, k, n, experts, rows, uint32_t(k + n + experts), uint32_t(k));
  std::vector<uint16_t> &x = ops.x;
  uint8_t *w = ops.w;
  std::vector<int8_t> &scale = ops.scale;
  const int64_t wCols = ops.wCols, scaleRows = ops.scaleRows, scaleCols = ops.scaleCols;
  using Fn4 = void (*)(void *, void *, void *, void *);
  using Fn5 = void (*)(void *, void *, void *, void *, void *);
  using Fn6 = void (*)(void *, void *, void *, void *, void *, void *);
  using Fn7 = void (*)(void *, void *, void *, void *, void *, void *, void *);
  using Fn8 = void (*)(void *, void *, void *, void *, void *, void *, void *, void *);
  void *hostSingle = lib.symbol("host_single"), *hostGrouped = lib.symbol("host_grouped"),
       *formSingle = lib.symbol("form_single"), *formGrouped = lib.symbol("form_grouped");
  ASSERT_TRUE(hostSingle && hostGrouped && formSingle && formGrouped);
  auto dx = describe<2>(x, {rows, k});
  std::vector<int32_t> idsCopy = ids;
  auto dids = describe<1>(idsCopy, {slots});
  Descriptor<2, uint8_t> dw{w, w, 0, {experts * n, wCols}, {wCols, 1}};
  auto ds = describe<2>(scale, {experts * scaleRows, scaleCols});
  auto runForm = [&](const LinearSplitKShape &split, int64_t gridRows,
                     const std::function<void(void *, void *, void *)> &call) {
    const int64_t o = split.rowsPerBlock * split.outputsPerBlock, t = split.threads;
    launch(gridRows, (n + split.outputsPerBlock - 1) / split.outputsPerBlock, t,
           size_t(split.sharedBytes()), [&](void *shared) {
      float *p = static_cast<float *>(shared);
      Descriptor<2, float> dPart{p, p, 0, {o, t}, {t, 1}};
      float *q = p + o * t;
      Descriptor<2, float> dSums{q, q, 0, {o, kSplitKParts}, {kSplitKParts, 1}};
      int32_t *l = reinterpret_cast<int32_t *>(q + o * kSplitKParts);
      Descriptor<1, int32_t> dList{l, l, 0, {t + 1}, {1}};
      call(&dPart, &dSums, &dList);
    });
  };
  std::vector<uint16_t> hostY(size_t(slots * n), 0x7FC1), formY(size_t(slots * n), 0x7FC1);
  auto dhy = describe<2>(hostY, {slots, n});
  auto dfy = describe<2>(formY, {slots, n});
  reinterpret_cast<Fn5>(hostGrouped)(&dx, &dids, &dw, &ds, &dhy);
  takeSimtMemoryEvents();
  if (gathered) {
    // A block per (expert, tile).
    runForm(splitGrouped, experts, [&](void *part, void *sums, void *list) {
      reinterpret_cast<Fn8>(formGrouped)(&dx, &dids, &dw, &ds, &dfy, part, sums, list);
    });
  } else {
    runForm(splitGrouped, slots, [&](void *part, void *sums, void *) {
      reinterpret_cast<Fn7>(formGrouped)(&dx, &dids, &dw, &ds, &dfy, part, sums);
    });
  }
  // The grouped form prefetches its slots' experts' rows and scale rows,
  // no other expert's, after it waits (the ids come from upstream).
  std::set<uintptr_t> expected;
  for (int32_t e : ids)
    if (e >= 0 && e < experts) {
      expected.merge(linesOf(w + e * n * wCols, size_t(n * wCols)));
      expected.merge(linesOf(scale.data() + e * scaleRows * scaleCols, size_t(scaleRows * scaleCols)));
    }
  const int64_t blocks = slots * ((n + splitGrouped.outputsPerBlock - 1) / splitGrouped.outputsPerBlock);
  if (!gathered)
    expectPrefetched(takeSimtMemoryEvents(), blocks, splitGrouped.threads, expected,
                     /*prefetchBeforeWait=*/false);
  for (int64_t r = 0; r < slots; ++r) {
    SCOPED_TRACE(::testing::Message() << "slot " << r << ", expert " << ids[size_t(r)]);
    const int32_t e = ids[size_t(r)];
    std::vector<uint16_t> hostRef(size_t(n), 0), formRef(size_t(n), 0);
    if (e >= 0 && e < experts) {
      // The expert's own weight and scales, the slot's activation row.
      std::vector<uint16_t> xr(x.begin() + (r / slotsPerRow) * k,
                               x.begin() + (r / slotsPerRow + 1) * k);
      auto dxr = describe<2>(xr, {1, k});
      uint8_t *we = w + e * n * wCols;
      Descriptor<2, uint8_t> dwe{we, we, 0, {n, wCols}, {wCols, 1}};
      int8_t *se = scale.data() + e * scaleRows * scaleCols;
      Descriptor<2, int8_t> dse{se, se, 0, {scaleRows, scaleCols}, {scaleCols, 1}};
      auto dhr = describe<2>(hostRef, {1, n});
      auto dfr = describe<2>(formRef, {1, n});
      reinterpret_cast<Fn4>(hostSingle)(&dxr, &dwe, &dse, &dhr);
      runForm(splitSingle, 1, [&](void *part, void *sums, void *) {
        reinterpret_cast<Fn6>(formSingle)(&dxr, &dwe, &dse, &dfr, part, sums);
      });
    }
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(bits(hostY[size_t(r * n + j)]), bits(hostRef[size_t(j)])) << "host, output " << j;
      ASSERT_EQ(bits(formY[size_t(r * n + j)]), bits(formRef[size_t(j)])) << "form, output " << j;
    }
  }
}

} // namespace

TEST(GpuFormEmulation, GroupedLinearsGiveTheirExpertsBits) {
  // Two slots a row (the experts' first projection, top-2) and one (the
  // second); an expert repeated, a negative id and one past the experts.
  expectGroupedEqualsPerExpert(LinearFormat::FP4E2M1, 128, 40, 3, 2, {2, 0, 1, 1, -1, 7});
  // The released expert widths (K split over 160 threads, 16 outputs a
  // block where the single kernel has 4).
  expectGroupedEqualsPerExpert(LinearFormat::FP4E2M1, 5120, 48, 2, 1, {1, 0});
  expectGroupedEqualsPerExpert(LinearFormat::FP4E2M1, 64, 24, 4, 1, {3, 0, 2});
  expectGroupedEqualsPerExpert(LinearFormat::FP8Block32, 192, 40, 3, 2, {1, 2, 0, -1});
}

TEST(GpuFormEmulation, GatheredGroupedLinearsGiveTheirExpertsBits) {
  // Each expert's slots run 4 (or 2) at a time: an expert with 5 slots (a
  // full group and one alone), one with none, ids outside the experts.
  const std::vector<int32_t> ids{2, 0, 2, 1, 2, -1, 2, 0, 7, 2, 1, 0};
  expectGroupedEqualsPerExpert(LinearFormat::FP4E2M1, 128, 40, 4, 2, ids, 4);
  expectGroupedEqualsPerExpert(LinearFormat::FP8Block32, 192, 40, 3, 2, {1, 2, 1, 1, -1, 1}, 4);
  expectGroupedEqualsPerExpert(LinearFormat::FP4E2M1, 64, 24, 4, 1, {3, 0, 3, 3}, 2);
  // More slots than a block's threads (two steps of the scan: 32 threads).
  std::vector<int32_t> many;
  for (int i = 0; i < 45; ++i)
    many.push_back(i % 7 == 3 ? 1 : i % 3);
  expectGroupedEqualsPerExpert(LinearFormat::FP4E2M1, 64, 24, 3, 1, many, 4);
}

namespace {

/// The grouped tensor-core form (a block per (expert, output tile)
/// gathering its slots) against the grouped host kernel: every slot's row
/// within the dot-product bound, a slot whose id is no expert all zeros.
void expectGroupedMmaMeetsTheBound(LinearFormat format, int64_t k, int64_t n, int64_t experts,
                                   int64_t slotsPerRow, const std::vector<int32_t> &ids,
                                   bool e4m3 = false) {
  LinearKernelSpec spec = specOf(format, k, n);
  spec.experts = experts;
  spec.slotsPerRow = slotsPerRow;
  std::optional<LinearMmaShape> shape = linearMmaShape(spec, 1, e4m3);
  ASSERT_TRUE(shape.has_value() && shape->grouped && shape->fp8 == e4m3);
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildLinearKernel(m, "host", spec);
    func::FuncOp form = buildLinearKernel(m, "form", spec);
    buildLinearMmaBody(form, spec, *shape, mmaLanes(simt, m.getContext(), *shape));
  });
  const bool fp4 = format == LinearFormat::FP4E2M1;
  const int64_t slots = int64_t(ids.size()), rows = (slots + slotsPerRow - 1) / slotsPerRow;
  GroupedOperands ops = groupedOperands(format, k, n, experts, rows,
                                        uint32_t(k * 7 + n + experts), uint32_t(k + 3));
  std::vector<uint16_t> &x = ops.x;
  std::vector<uint8_t> &wStore = ops.wStore;
  uint8_t *w = ops.w;
  std::vector<int8_t> &scale = ops.scale;
  const int64_t wCols = ops.wCols, scaleRows = ops.scaleRows, scaleCols = ops.scaleCols;
  using Fn5 = void (*)(void *, void *, void *, void *, void *);
  using Fn6 = void (*)(void *, void *, void *, void *, void *, void *);
  void *host = lib.symbol("host"), *form = lib.symbol("form");
  ASSERT_TRUE(host && form);
  auto dx = describe<2>(x, {rows, k});
  std::vector<int32_t> idsCopy = ids;
  auto dids = describe<1>(idsCopy, {slots});
  Descriptor<2, uint8_t> dw{w, w, 0, {experts * n, wCols}, {wCols, 1}};
  auto ds = describe<2>(scale, {experts * scaleRows, scaleCols});
  // Poisoned outputs: every element must be written.
  std::vector<uint16_t> hostY(size_t(slots * n), 0x7FC1), formY(size_t(slots * n), 0x7FC1);
  auto dhy = describe<2>(hostY, {slots, n});
  auto dfy = describe<2>(formY, {slots, n});
  reinterpret_cast<Fn5>(host)(&dx, &dids, &dw, &ds, &dhy);
  launch(experts, n / shape->outputsPerTile, shape->threads(), size_t(shape->sharedBytes()),
         [&](void *shared) {
    uint8_t *p = static_cast<uint8_t *>(shared);
    Descriptor<1, uint8_t> dShared{p, p, 0, {shape->sharedBytes()}, {1}};
    reinterpret_cast<Fn6>(form)(&dx, &dids, &dw, &ds, &dfy, &dShared);
  }, /*lastFirst=*/true);
  // The bound: the host kernel on the operands' magnitudes.
  std::vector<uint16_t> xAbs = x;
  nx::takeMagnitudes(xAbs.data(), xAbs.size(), 2, nx::OperandEncoding::Real);
  std::vector<uint8_t> wAbsStore(wStore.size());
  uint8_t *wAbs = wAbsStore.data() + (w - wStore.data());
  std::memcpy(wAbs, w, size_t(experts * n * wCols));
  nx::takeMagnitudes(wAbs, size_t(experts * n * wCols), 1,
                     fp4 ? nx::OperandEncoding::E2M1x2 : nx::OperandEncoding::E4M3);
  auto dxa = describe<2>(xAbs, {rows, k});
  Descriptor<2, uint8_t> dwa{wAbs, wAbs, 0, {experts * n, wCols}, {wCols, 1}};
  std::vector<uint16_t> sums(size_t(slots * n));
  auto dsums = describe<2>(sums, {slots, n});
  reinterpret_cast<Fn5>(host)(&dxa, &dids, &dwa, &ds, &dsums);
  for (int64_t r = 0; r < slots; ++r) {
    SCOPED_TRACE(::testing::Message() << "slot " << r << ", expert " << ids[size_t(r)]);
    const bool routed = ids[size_t(r)] >= 0 && ids[size_t(r)] < experts;
    for (int64_t j = 0; j < n; ++j) {
      const size_t i = size_t(r * n + j);
      if (!routed) {
        ASSERT_EQ(bits(formY[i]), 0u) << "output " << j;
        continue;
      }
      const double u = nx::bf16ToFloat(hostY[i]), v = nx::bf16ToFloat(formY[i]);
      ASSERT_TRUE(std::isfinite(u) && std::isfinite(v)) << "output " << j << ": " << u << " " << v;
      ASSERT_LE(std::fabs(u - v), nx::dotErrorBound(k, nx::bf16ToFloat(sums[i]), u, true))
          << "output " << j << ": host " << u << ", form " << v;
    }
  }
}

/// `slots` expert ids: mostly in [0, experts), a few -1 and experts + 3,
/// and `hot` taking every third slot (more than a tile of one expert).
std::vector<int32_t> routing(int64_t slots, int64_t experts, int32_t hot, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> id(0, int32_t(experts) - 1), odd(0, 40);
  std::vector<int32_t> ids(static_cast<size_t>(slots));
  for (int64_t i = 0; i < slots; ++i) {
    const int32_t o = odd(gen);
    ids[size_t(i)] = o == 0 ? -1 : o == 1 ? int32_t(experts) + 3 : i % 3 == 0 ? hot : id(gen);
  }
  return ids;
}

} // namespace

TEST(GpuFormEmulation, GroupedMmaLinearMeetsTheDotBound) {
  // FP4 with 32 outputs a tile (64 threads, 256 ids a scan step): 700
  // slots over 3 steps, several full tiles a step and the rest carried over.
  expectGroupedMmaMeetsTheBound(LinearFormat::FP4E2M1, 128, 64, 2, 1, routing(700, 2, 1, 1));
  // FP8, 64 outputs a tile, two slots a row (x rows shared by two slots).
  expectGroupedMmaMeetsTheBound(LinearFormat::FP8Block32, 64, 64, 3, 2, routing(300, 3, 2, 2));
  // 128 outputs a tile (256 threads), six slots a row, an expert with none.
  std::vector<int32_t> ids = routing(300, 4, 0, 3);
  for (int32_t &id : ids)
    if (id == 3)
      id = 1;
  expectGroupedMmaMeetsTheBound(LinearFormat::FP8Block32, 96, 128, 4, 6, ids);
}

namespace {

/// Runs the tensor-core form `name` of `lib` for `shape` on the operands
/// (descriptors; `ids` only when `experts` > 0: the grouped form, a block
/// per expert) and returns its bf16 outputs, poisoned before.
std::vector<uint16_t> runMmaForm(KernelLibrary &lib, const char *name, const LinearMmaShape &shape,
                                 int64_t rows, int64_t n, int64_t experts, void *x, void *ids,
                                 void *w, void *scales) {
  std::vector<uint16_t> y(size_t(rows * n), 0x7FC1);
  auto dy = describe<2>(y, {rows, n});
  void *fn = lib.symbol(name);
  EXPECT_NE(fn, nullptr);
  if (!fn)
    return y;
  const int64_t gridX = experts > 0 ? experts : (rows + shape.rowsPerTile - 1) / shape.rowsPerTile;
  launch(gridX, n / shape.outputsPerTile, shape.threads(), size_t(shape.sharedBytes()),
         [&](void *shared) {
    uint8_t *p = static_cast<uint8_t *>(shared);
    Descriptor<1, uint8_t> dShared{p, p, 0, {shape.sharedBytes()}, {1}};
    if (experts > 0)
      reinterpret_cast<void (*)(void *, void *, void *, void *, void *, void *)>(fn)(
          x, ids, w, scales, &dy, &dShared);
    else
      reinterpret_cast<void (*)(void *, void *, void *, void *, void *)>(fn)(x, w, scales, &dy,
                                                                             &dShared);
  }, /*lastFirst=*/true);
  return y;
}

/// The tensor-core form staging several 32-blocks of K between two barriers
/// (LinearMmaShape::kBlocksPerStage) against the form staging one: each
/// block's partial goes into the sums in the same order, so every output
/// has the same bits. `experts` > 0: the grouped form, one slot a row.
void expectStagedMmaEqualsOneBlock(LinearFormat format, int64_t k, int64_t n, int64_t rows,
                                   int64_t maxBlocks, int64_t experts = 0,
                                   bool prefetch = false, bool e4m3 = false) {
  LinearKernelSpec spec = specOf(format, k, n);
  if (experts > 0) {
    spec.experts = experts;
    spec.slotsPerRow = 1;
  }
  std::optional<LinearMmaShape> one = linearMmaShape(spec, 1, e4m3),
                                staged = linearMmaShape(spec, maxBlocks, e4m3);
  ASSERT_TRUE(one.has_value() && staged.has_value());
  ASSERT_TRUE(one->fp8 == e4m3 && staged->fp8 == e4m3);
  staged->prefetch = prefetch;
  ASSERT_EQ(one->kBlocksPerStage, 1);
  ASSERT_GT(staged->kBlocksPerStage * (prefetch ? 2 : 1), 1);
  ASSERT_LE(staged->kBlocksPerStage, maxBlocks);
  ASSERT_EQ(k / 32 % staged->kBlocksPerStage, 0);
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    func::FuncOp a = buildLinearKernel(m, "one", spec);
    buildLinearMmaBody(a, spec, *one, mmaLanes(simt, m.getContext(), *one));
    func::FuncOp b = buildLinearKernel(m, "staged", spec);
    buildLinearMmaBody(b, spec, *staged, mmaLanes(simt, m.getContext(), *staged));
  });
  const int64_t e = std::max<int64_t>(experts, 1);
  GroupedOperands ops = groupedOperands(format, k, n, e, rows, uint32_t(k + 5 * n + rows),
                                        uint32_t(k * 3 + rows));
  std::vector<int32_t> ids = routing(rows, e, 0, uint32_t(rows + 1));
  auto dx = describe<2>(ops.x, {rows, k});
  auto dids = describe<1>(ids, {rows});
  Descriptor<2, uint8_t> dw{ops.w, ops.w, 0, {e * n, ops.wCols}, {ops.wCols, 1}};
  auto ds = describe<2>(ops.scale, {e * ops.scaleRows, ops.scaleCols});
  auto run = [&](const char *name, const LinearMmaShape &shape) {
    return runMmaForm(lib, name, shape, rows, n, experts, &dx, &dids, &dw, &ds);
  };
  std::vector<uint16_t> yOne = run("one", *one), yStaged = run("staged", *staged);
  int64_t written = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const size_t i = size_t(r * n + j);
      ASSERT_EQ(yStaged[i], yOne[i]) << "row " << r << " output " << j << ", "
                                     << staged->kBlocksPerStage << " blocks a stage"
                                     << (prefetch ? ", loads a stage ahead" : "");
      written += yOne[i] != 0x7FC1;
    }
  EXPECT_EQ(written, rows * n) << "every output written";
}

} // namespace

TEST(GpuFormEmulation, MmaStagesOfSeveralKBlocksGiveTheSameBits) {
  // 8 K blocks: stages of 2, 4 and 8; FP8 and FP4; tiles of 128 and 32
  // outputs; a partial row tile.
  expectStagedMmaEqualsOneBlock(LinearFormat::FP8Block32, 256, 128, 70, 2);
  expectStagedMmaEqualsOneBlock(LinearFormat::FP8Block32, 256, 128, 70, 8);
  expectStagedMmaEqualsOneBlock(LinearFormat::FP4E2M1, 256, 32, 9, 4);
  // 6 K blocks: at most 2 a stage whatever is asked.
  expectStagedMmaEqualsOneBlock(LinearFormat::FP8Block32, 192, 64, 20, 8);
  // The grouped form (a block per expert and output tile), slots of no
  // expert among them.
  expectStagedMmaEqualsOneBlock(LinearFormat::FP4E2M1, 128, 64, 150, 4, 3);
  expectStagedMmaEqualsOneBlock(LinearFormat::FP8Block32, 256, 64, 90, 8, 2);
}

TEST(GpuFormEmulation, MmaLoadsAStageAheadGiveTheSameBits) {
  // One block a stage and two; plain and grouped; FP8 and FP4.
  expectStagedMmaEqualsOneBlock(LinearFormat::FP8Block32, 256, 128, 70, 1, 0, true);
  expectStagedMmaEqualsOneBlock(LinearFormat::FP8Block32, 256, 128, 70, 2, 0, true);
  expectStagedMmaEqualsOneBlock(LinearFormat::FP4E2M1, 256, 32, 9, 4, 0, true);
  expectStagedMmaEqualsOneBlock(LinearFormat::FP4E2M1, 128, 64, 150, 1, 3, true);
  expectStagedMmaEqualsOneBlock(LinearFormat::FP8Block32, 256, 64, 90, 2, 2, true);
}

TEST(GpuFormEmulation, GroupedMmaFormTakesTheRoutedExperts) {
  LinearKernelSpec fp4 = specOf(LinearFormat::FP4E2M1, 5120, 2304);
  fp4.experts = 64;
  fp4.slotsPerRow = 6;
  ASSERT_TRUE(linearMmaShape(fp4).has_value());
  EXPECT_TRUE(linearMmaShape(fp4)->grouped);
  EXPECT_EQ(linearMmaShape(fp4)->outputsPerTile, 128);
  // The slot list and its count after the staged tiles.
  EXPECT_EQ(linearMmaShape(fp4)->sharedBytes(),
            linearMmaShape(fp4)->tilesBytes() + (63 + 1024 + 1) * 4);
  LinearKernelSpec bf16 = specOf(LinearFormat::BF16, 64, 64);
  bf16.experts = 4;
  EXPECT_FALSE(linearMmaShape(bf16).has_value());
}

TEST(GpuFormEmulation, SplitKLinearIsExactWhenEverySumIs) {
  // With exact partial sums the order cannot matter: the form must give the
  // host kernel's bits. The released widths' shapes as an H200 splits them.
  auto exact = [](LinearKernelSpec spec, int64_t rows, int64_t sms) {
    LinearCase c{spec, rows};
    c.exact = true;
    c.multiprocessors = sms;
    return c;
  };
  for (auto [k, n] : {std::pair<int64_t, int64_t>{2304, 40}, {1280, 24}, {8192, 16}}) {
    SCOPED_TRACE(::testing::Message() << "FP8 " << k << "x" << n);
    expectTiledMatchesHost(exact(specOf(LinearFormat::FP8Block32, k, n), 1, 4), LinearForm::SplitK);
  }
  expectTiledMatchesHost(exact(specOf(LinearFormat::FP8Block32, 192, 7), 3, 4), LinearForm::SplitK);
  expectTiledMatchesHost(exact(specOf(LinearFormat::FP4E2M1, 2304, 24), 1, 4), LinearForm::SplitK);
  expectTiledMatchesHost(exact(specOf(LinearFormat::FP8AsBF16, 1024, 32, 2), 1, 4), LinearForm::SplitK);
  expectTiledMatchesHost(exact(specOf(LinearFormat::BF16, 1024, 16), 1, 4), LinearForm::SplitK);
  expectTiledMatchesHost(exact(specOf(LinearFormat::F32, 512, 40, 1, true), 2, 4), LinearForm::SplitK);
}

// The E4M3 variant of the tensor-core form (LinearMmaShape::fp8).

TEST(GpuFormEmulation, E4m3MmaLinearMeetsTheDotBound) {
  // As MmaLinearMeetsTheDotBound: two row tiles, FP8 and FP4 by 16-byte
  // loads and at an odd address, 128 outputs a tile (act_quant over 4
  // lanes), FP4 with 64 outputs (16 codes a lane).
  for (bool misaligned : {false, true}) {
    SCOPED_TRACE(misaligned ? "misaligned weight" : "aligned weight");
    expectTiledMatchesHost({specOf(LinearFormat::FP8Block32, 96, 64), 70, misaligned},
                           LinearForm::MmaE4m3);
    expectTiledMatchesHost({specOf(LinearFormat::FP4E2M1, 128, 32), 9, misaligned},
                           LinearForm::MmaE4m3);
  }
  expectTiledMatchesHost({specOf(LinearFormat::FP8Block32, 64, 128), 40}, LinearForm::MmaE4m3);
  expectTiledMatchesHost({specOf(LinearFormat::FP4E2M1, 256, 128), 70}, LinearForm::MmaE4m3);
  expectTiledMatchesHost({specOf(LinearFormat::FP4E2M1, 64, 64), 33}, LinearForm::MmaE4m3);
}

TEST(GpuFormEmulation, E4m3MmaLinearIsExactWhenEverySumIs) {
  LinearCase fp8{specOf(LinearFormat::FP8Block32, 64, 64), 17};
  fp8.exact = true;
  expectTiledMatchesHost(fp8, LinearForm::MmaE4m3);
  LinearCase fp4{specOf(LinearFormat::FP4E2M1, 128, 128), 70};
  fp4.exact = true;
  expectTiledMatchesHost(fp4, LinearForm::MmaE4m3);
}

TEST(GpuFormEmulation, GroupedE4m3MmaLinearMeetsTheDotBound) {
  expectGroupedMmaMeetsTheBound(LinearFormat::FP4E2M1, 128, 64, 2, 1, routing(700, 2, 1, 1), true);
  expectGroupedMmaMeetsTheBound(LinearFormat::FP8Block32, 64, 64, 3, 2, routing(300, 3, 2, 2), true);
  expectGroupedMmaMeetsTheBound(LinearFormat::FP4E2M1, 96, 128, 4, 6, routing(300, 4, 0, 3), true);
}

TEST(GpuFormEmulation, E4m3MmaStagesOfSeveralKBlocksGiveTheSameBits) {
  expectStagedMmaEqualsOneBlock(LinearFormat::FP8Block32, 256, 128, 70, 4, 0, false, true);
  expectStagedMmaEqualsOneBlock(LinearFormat::FP4E2M1, 256, 32, 9, 8, 0, false, true);
  expectStagedMmaEqualsOneBlock(LinearFormat::FP4E2M1, 128, 64, 150, 4, 3, false, true);
}

TEST(GpuFormEmulation, E4m3MmaFormTakesOnlyBlockScaledWeights) {
  // FP8 block-scaled and FP4 take it; FP8-as-bf16 and bf16 (activations not
  // act_quant-ed) keep the bf16 form.
  EXPECT_TRUE(linearMmaShape(specOf(LinearFormat::FP8Block32, 64, 64), 1, true)->fp8);
  EXPECT_TRUE(linearMmaShape(specOf(LinearFormat::FP4E2M1, 64, 64), 1, true)->fp8);
  EXPECT_FALSE(linearMmaShape(specOf(LinearFormat::FP8AsBF16, 128, 64, 2), 1, true)->fp8);
  EXPECT_FALSE(linearMmaShape(specOf(LinearFormat::BF16, 64, 256), 1, true)->fp8);
  EXPECT_FALSE(linearMmaShape(specOf(LinearFormat::FP8Block32, 64, 64))->fp8);
  // Half the bf16 form's bytes a staged row (48 + 4 against 80): the
  // routed experts stage 4 K blocks within the static 48 KB.
  LinearKernelSpec fp4 = specOf(LinearFormat::FP4E2M1, 5120, 2304);
  fp4.experts = 64;
  fp4.slotsPerRow = 6;
  std::optional<LinearMmaShape> shape = linearMmaShape(fp4, 8, true);
  ASSERT_TRUE(shape.has_value() && shape->fp8 && shape->grouped);
  EXPECT_EQ(shape->kBlocksPerStage, 4);
  EXPECT_EQ(shape->tilesBytes(), 4 * (64 + 128) * (kMmaFp8RowBytes + 4));
  EXPECT_LE(shape->sharedBytes(), 48 * 1024);
}

namespace {

/// The E4M3 form against the bf16 form on FP8 block-scaled weights, both
/// emulated: the mma emulations add the same products in the same k order
/// (the E4M3 form's partial is the bf16 form's over the activation's scale,
/// a power of two), so every output has the same bits. A check of the
/// E4M3 form's staging, fragments and scales (on a GPU the two mma's sums
/// need not agree: the dot-product bound holds there).
void expectE4m3FormEqualsBf16Form(int64_t k, int64_t n, int64_t rows, int64_t experts) {
  LinearKernelSpec spec = specOf(LinearFormat::FP8Block32, k, n);
  if (experts > 0) {
    spec.experts = experts;
    spec.slotsPerRow = 1;
  }
  std::optional<LinearMmaShape> bf16 = linearMmaShape(spec, 2), e4m3 = linearMmaShape(spec, 2, true);
  ASSERT_TRUE(bf16.has_value() && e4m3.has_value() && e4m3->fp8 && !bf16->fp8);
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    func::FuncOp a = buildLinearKernel(m, "bf16", spec);
    buildLinearMmaBody(a, spec, *bf16, mmaLanes(simt, m.getContext(), *bf16));
    func::FuncOp b = buildLinearKernel(m, "e4m3", spec);
    buildLinearMmaBody(b, spec, *e4m3, mmaLanes(simt, m.getContext(), *e4m3));
  });
  const int64_t e = std::max<int64_t>(experts, 1);
  GroupedOperands ops = groupedOperands(LinearFormat::FP8Block32, k, n, e, rows,
                                        uint32_t(k + 7 * n + rows), uint32_t(k * 5 + rows));
  std::vector<int32_t> ids = routing(rows, e, 0, uint32_t(rows + 2));
  auto dx = describe<2>(ops.x, {rows, k});
  auto dids = describe<1>(ids, {rows});
  Descriptor<2, uint8_t> dw{ops.w, ops.w, 0, {e * n, ops.wCols}, {ops.wCols, 1}};
  auto ds = describe<2>(ops.scale, {e * ops.scaleRows, ops.scaleCols});
  auto run = [&](const char *name, const LinearMmaShape &shape) {
    return runMmaForm(lib, name, shape, rows, n, experts, &dx, &dids, &dw, &ds);
  };
  std::vector<uint16_t> yBf16 = run("bf16", *bf16), yE4m3 = run("e4m3", *e4m3);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const size_t i = size_t(r * n + j);
      ASSERT_NE(yBf16[i], 0x7FC1) << "row " << r << " output " << j << " not written";
      ASSERT_EQ(yE4m3[i], yBf16[i]) << "row " << r << " output " << j;
    }
}

} // namespace

TEST(GpuFormEmulation, E4m3MmaFormGivesTheBf16FormsSums) {
  expectE4m3FormEqualsBf16Form(256, 128, 70, 0);
  expectE4m3FormEqualsBf16Form(128, 64, 20, 0);
  expectE4m3FormEqualsBf16Form(128, 64, 150, 3);
}

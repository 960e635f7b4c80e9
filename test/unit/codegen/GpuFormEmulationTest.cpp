//===- GpuFormEmulationTest.cpp - The GPU forms, run by host threads ------===//
//
// The GPU forms of the linear and attention kernels (the bodies the NVPTX
// back end gives a thread per lane) built for the host instead, their lane
// indices and barriers calls into this test: a "launch" runs one host thread
// per GPU thread of a block, with a real barrier, one block after another.
// Each form must give the host kernel's bits on fresh random inputs, so the
// lane arithmetic, shared-memory phases, 16-byte weight loads and the order
// of every sum are checked without a GPU (the device runs them for real:
// tools/scripts/gpu-check.sh).
//
//===----------------------------------------------------------------------===//
#include "codegen/host/AttentionKernels.h"
#include "codegen/host/EngramKernels.h"
#include "codegen/host/HostKernels.h"
#include "codegen/host/LinearKernels.h"
#include "codegen/host/LinearMma.h"
#include "codegen/host/LinearSplitK.h"
#include "codegen/host/MhcKernels.h"
#include "codegen/host/MoeKernels.h"
#include "codegen/host/QuantizeKernels.h"
#include "test/unit/codegen/KernelTestSupport.h"
#include "runtime/numerics/Tolerance.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <pthread.h>
#include <thread>

using namespace csa::codegen;
using namespace csa::codegen::testing;
using namespace mlir;

namespace {
thread_local int64_t simtThread = 0, simtBlockX = 0, simtBlockY = 0;
thread_local pthread_barrier_t *simtBarrier = nullptr;
/// The block's warps: a barrier each, and a slot a thread for shuffles.
thread_local pthread_barrier_t *simtWarpBarrier = nullptr;
thread_local float *simtExchange = nullptr;
/// The mma's operand words: six a thread (a0..a3, b0, b1).
thread_local int32_t *simtWords = nullptr;

/// bf16 `half` (0: low) of an mma operand word, as f32.
float mmaHalf(int32_t word, int half) {
  const uint32_t bits = (uint32_t(word) >> (16 * half)) & 0xFFFF;
  return nx::bf16ToFloat(uint16_t(bits));
}
} // namespace

// What the forms' lane callbacks call (the test binary exports them).
extern "C" {
int64_t csa_simt_thread() { return simtThread; }
int64_t csa_simt_block_x() { return simtBlockX; }
int64_t csa_simt_block_y() { return simtBlockY; }
void csa_simt_barrier() { pthread_barrier_wait(simtBarrier); }
// shfl.sync.bfly: every lane of the warp puts its value in its slot, then
// reads lane (l ^ mask)'s.
float csa_simt_shuffle_xor(float v, int32_t mask) {
  const int64_t warpBase = simtThread / 32 * 32;
  simtExchange[simtThread] = v;
  pthread_barrier_wait(simtWarpBarrier);
  const float other = simtExchange[warpBase + ((simtThread - warpBase) ^ mask)];
  pthread_barrier_wait(simtWarpBarrier);
  return other;
}
// mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32, element `e` of this lane's
// d: every lane puts its a and b words in its slots, then computes its
// element from the warp's fragments (PTX's layout: lane = 4 x group + quad;
// a_i holds A[group + 8 (i & 1)][2 quad + 8 (i >> 1) + 0/1], b_i holds
// B[2 quad + 8 i + 0/1][group], d_e is D[group + 8 (e >> 1)][2 quad + (e & 1)]).
float csa_simt_mma_bf16(int32_t a0, int32_t a1, int32_t a2, int32_t a3, int32_t b0, int32_t b1,
                        float c, int32_t e) {
  const int64_t warpBase = simtThread / 32 * 32, lane = simtThread - warpBase;
  int32_t *mine = simtWords + simtThread * 6;
  const int32_t in[6] = {a0, a1, a2, a3, b0, b1};
  std::memcpy(mine, in, sizeof in);
  pthread_barrier_wait(simtWarpBarrier);
  const int64_t row = lane / 4 + 8 * (e >> 1), col = 2 * (lane % 4) + (e & 1);
  float sum = c;
  for (int64_t kk = 0; kk < 16; ++kk) {
    const int32_t *aLane = simtWords + (warpBase + (row % 8) * 4 + (kk % 8) / 2) * 6;
    const int32_t *bLane = simtWords + (warpBase + col * 4 + (kk % 8) / 2) * 6;
    const float av = mmaHalf(aLane[(row >= 8 ? 1 : 0) + (kk >= 8 ? 2 : 0)], int(kk % 2));
    const float bv = mmaHalf(bLane[4 + (kk >= 8 ? 1 : 0)], int(kk % 2));
    sum += av * bv;
  }
  pthread_barrier_wait(simtWarpBarrier);
  return sum;
}
}

namespace {

/// A grid of gridX x gridY blocks of `threads` threads: `call(shared)` on
/// each, every block with its own zeroed `sharedBytes` of shared memory.
/// The blocks run one after another, the last first with `lastFirst` (a GPU
/// promises no order: a form must not depend on it).
void launch(int64_t gridX, int64_t gridY, int64_t threads, size_t sharedBytes,
            const std::function<void(void *)> &call, bool lastFirst = false) {
  for (int64_t i = 0; i < gridX; ++i)
    for (int64_t by = 0; by < gridY; ++by) {
      const int64_t bx = lastFirst ? gridX - 1 - i : i;
      std::vector<uint8_t> shared(sharedBytes + 64, 0);
      pthread_barrier_t barrier;
      pthread_barrier_init(&barrier, nullptr, unsigned(threads));
      const int64_t warps = (threads + 31) / 32;
      std::vector<pthread_barrier_t> warpBarriers(static_cast<size_t>(warps));
      for (int64_t w = 0; w < warps; ++w)
        pthread_barrier_init(&warpBarriers[size_t(w)], nullptr,
                             unsigned(std::min<int64_t>(32, threads - 32 * w)));
      std::vector<float> exchange(size_t(warps * 32), 0.f);
      std::vector<int32_t> words(size_t(warps * 32 * 6), 0);
      std::vector<std::thread> pool;
      for (int64_t t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          simtThread = t;
          simtBlockX = bx;
          simtBlockY = by;
          simtBarrier = &barrier;
          simtWarpBarrier = &warpBarriers[size_t(t / 32)];
          simtExchange = exchange.data();
          simtWords = words.data();
          call(shared.data());
        });
      for (std::thread &th : pool)
        th.join();
      pthread_barrier_destroy(&barrier);
      for (pthread_barrier_t &wb : warpBarriers)
        pthread_barrier_destroy(&wb);
    }
}

/// The lane callbacks: calls of the exported functions above.
struct Simt {
  func::FuncOp thread, blockX, blockY, barrier, shuffle, mma;
  explicit Simt(ModuleOp m) {
    OpBuilder b(m.getBodyRegion());
    Type index = b.getIndexType();
    auto declare = [&](const char *name, TypeRange results) {
      auto f = func::FuncOp::create(b, m.getLoc(), name, b.getFunctionType({}, results));
      f.setPrivate();
      return f;
    };
    thread = declare("csa_simt_thread", index);
    blockX = declare("csa_simt_block_x", index);
    blockY = declare("csa_simt_block_y", index);
    barrier = declare("csa_simt_barrier", {});
    Type f32 = b.getF32Type();
    shuffle = func::FuncOp::create(b, m.getLoc(), "csa_simt_shuffle_xor",
                                   b.getFunctionType({f32, b.getI32Type()}, {f32}));
    shuffle.setPrivate();
    Type i32 = b.getI32Type();
    mma = func::FuncOp::create(
        b, m.getLoc(), "csa_simt_mma_bf16",
        b.getFunctionType({i32, i32, i32, i32, i32, i32, f32, i32}, {f32}));
    mma.setPrivate();
  }
  MmaBf16 mmaBf16() const {
    return [f = mma](OpBuilder &b, Location loc, ValueRange a, ValueRange bw,
                     ValueRange c) -> SmallVector<Value> {
      SmallVector<Value> d;
      for (int32_t e = 0; e < 4; ++e) {
        Value which = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(e));
        SmallVector<Value> args(a.begin(), a.end());
        args.append(bw.begin(), bw.end());
        args.push_back(c[size_t(e)]);
        args.push_back(which);
        d.push_back(func::CallOp::create(b, loc, f, args).getResult(0));
      }
      return d;
    };
  }
  std::function<Value(OpBuilder &, Location, Value, int32_t)> shuffleXor() const {
    return [f = shuffle](OpBuilder &b, Location loc, Value v, int32_t mask) -> Value {
      Value m = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(mask));
      return func::CallOp::create(b, loc, f, ValueRange{v, m}).getResult(0);
    };
  }
  std::function<Value(OpBuilder &, Location)> value(func::FuncOp f) const {
    return [f](OpBuilder &b, Location loc) -> Value {
      return func::CallOp::create(b, loc, f, ValueRange{}).getResult(0);
    };
  }
  std::function<void(OpBuilder &, Location)> sync() const {
    return [f = barrier](OpBuilder &b, Location loc) {
      func::CallOp::create(b, loc, f, ValueRange{});
    };
  }
  /// A block of `threads` per row (block x).
  BlockRowLanes blockRow(int64_t threads) const {
    BlockRowLanes lanes;
    lanes.row = value(blockX);
    lanes.thread = value(thread);
    lanes.threads = threads;
    lanes.barrier = sync();
    return lanes;
  }
};

uint32_t bits(uint16_t v) { return v; }
uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

/// The split-K form's lanes on host threads: a block per (row, output tile),
/// its shared partials and sums appended to the kernel's arguments.
LinearSplitKLanes splitKLanes(const Simt &simt, MLIRContext *ctx, const LinearSplitKShape &split) {
  LinearSplitKLanes lanes;
  lanes.row = simt.value(simt.blockX);
  lanes.outputTile = simt.value(simt.blockY);
  lanes.thread = simt.value(simt.thread);
  lanes.barrier = simt.sync();
  lanes.weightAddressSpace = 0;
  lanes.sharedPartialsType =
      MemRefType::get({split.outputsPerBlock, split.threads}, Float32Type::get(ctx));
  lanes.sharedSumsType =
      MemRefType::get({split.outputsPerBlock, kSplitKParts}, Float32Type::get(ctx));
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
};

/// The GPU forms of a linear: the row-tiled and per-output forms give the
/// host kernel's bits; the split-K form meets the dot-product tolerance.
enum class LinearForm { Tiled, PerOutput, SplitK, Mma };

void expectTiledMatchesHost(const LinearCase &c, LinearForm which) {
  const bool perOutput = which == LinearForm::PerOutput;
  const bool mma = which == LinearForm::Mma;
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
      std::optional<LinearMmaShape> shape = linearMmaShape(spec);
      ASSERT_TRUE(shape.has_value());
      mmaShape = *shape;
      LinearMmaLanes lanes;
      lanes.rowTile = simt.value(simt.blockX);
      lanes.outputTile = simt.value(simt.blockY);
      lanes.thread = simt.value(simt.thread);
      lanes.barrier = simt.sync();
      lanes.mma = simt.mmaBf16();
      lanes.shuffleXor = simt.shuffleXor();
      lanes.weightAddressSpace = 0;
      lanes.sharedType = MemRefType::get({mmaShape.sharedBytes()}, IntegerType::get(ctx, 8));
      buildLinearMmaBody(form, spec, mmaShape, lanes);
    } else if (splitK) {
      std::optional<LinearSplitKShape> shape = linearSplitKShape(spec, c.multiprocessors);
      ASSERT_TRUE(shape.has_value());
      split = *shape;
      buildLinearSplitKBody(form, spec, split, splitKLanes(simt, ctx, split));
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
    const int64_t o = split.outputsPerBlock, t = split.threads;
    launch(rows, (n + o - 1) / o, t, size_t(split.sharedBytes()), [&](void *shared) {
      float *p = static_cast<float *>(shared);
      Descriptor<2, float> dPart{p, p, 0, {o, t}, {t, 1}};
      float *q = p + o * t;
      Descriptor<2, float> dSums{q, q, 0, {o, kSplitKParts}, {kSplitKParts, 1}};
      void *out = y(false);
      if (scaled)
        reinterpret_cast<Fn6>(form)(xDesc, &dw, &ds, out, &dPart, &dSums);
      else
        reinterpret_cast<Fn5>(form)(xDesc, &dw, out, &dPart, &dSums);
    });
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

namespace {

/// A grouped linear (LinearKernelSpec::experts) against its experts' own
/// kernels: host and split-K form, each slot's row must be the bits of the
/// ungrouped kernel of the same form on the slot's expert and activation
/// row (zeros for an id outside [0, E)): grouping changes which weights a
/// block reads, never its sums.
void expectGroupedEqualsPerExpert(LinearFormat format, int64_t k, int64_t n, int64_t experts,
                                  int64_t slotsPerRow, const std::vector<int32_t> &ids) {
  LinearKernelSpec single = specOf(format, k, n);
  LinearKernelSpec grouped = single;
  grouped.experts = experts;
  grouped.slotsPerRow = slotsPerRow;
  // Each kernel in its own shape (the grouped one has more outputs a block:
  // which block computes an output must not change its sum).
  const int64_t mps = 4;
  LinearSplitKShape splitSingle = *linearSplitKShape(single, mps),
                    splitGrouped = *linearSplitKShape(grouped, mps);
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    MLIRContext *ctx = m.getContext();
    buildLinearKernel(m, "host_single", single);
    buildLinearKernel(m, "host_grouped", grouped);
    for (auto [name, spec] : {std::pair<const char *, LinearKernelSpec *>{"form_single", &single},
                              {"form_grouped", &grouped}}) {
      func::FuncOp form = buildLinearKernel(m, name, *spec);
      const LinearSplitKShape &split = spec == &single ? splitSingle : splitGrouped;
      buildLinearSplitKBody(form, *spec, split, splitKLanes(simt, ctx, split));
    }
  });
  const bool fp4 = format == LinearFormat::FP4E2M1;
  const int64_t slots = int64_t(ids.size()), rows = (slots + slotsPerRow - 1) / slotsPerRow;
  const int64_t wCols = fp4 ? k / 2 : k, scaleRows = fp4 ? n : (n + 31) / 32, scaleCols = k / 32;
  std::mt19937 gen(uint32_t(k + n + experts));
  std::uniform_int_distribution<int> code(100, 140), any(0, 255), exponent(120, 130);
  std::vector<uint16_t> x = randomBf16(size_t(rows * k), uint32_t(k));
  // 16-byte aligned weights (the form's vector loads), E experts stacked.
  std::vector<uint8_t> wStore(size_t(experts * n * wCols) + 16);
  uint8_t *w = wStore.data() + (16 - reinterpret_cast<uintptr_t>(wStore.data()) % 16) % 16;
  for (int64_t i = 0; i < experts * n * wCols; ++i) {
    w[i] = uint8_t(fp4 ? any(gen) : code(gen));
    if (!fp4 && (w[i] & 0x7F) == 0x7F)
      w[i] ^= 1;
  }
  std::vector<int8_t> scale(size_t(experts * scaleRows * scaleCols));
  for (int8_t &v : scale)
    v = int8_t(exponent(gen));
  using Fn4 = void (*)(void *, void *, void *, void *);
  using Fn5 = void (*)(void *, void *, void *, void *, void *);
  using Fn6 = void (*)(void *, void *, void *, void *, void *, void *);
  using Fn7 = void (*)(void *, void *, void *, void *, void *, void *, void *);
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
    const int64_t o = split.outputsPerBlock, t = split.threads;
    launch(gridRows, (n + o - 1) / o, t, size_t(split.sharedBytes()), [&](void *shared) {
      float *p = static_cast<float *>(shared);
      Descriptor<2, float> dPart{p, p, 0, {o, t}, {t, 1}};
      float *q = p + o * t;
      Descriptor<2, float> dSums{q, q, 0, {o, kSplitKParts}, {kSplitKParts, 1}};
      call(&dPart, &dSums, shared);
    });
  };
  std::vector<uint16_t> hostY(size_t(slots * n), 0x7FC1), formY(size_t(slots * n), 0x7FC1);
  auto dhy = describe<2>(hostY, {slots, n});
  auto dfy = describe<2>(formY, {slots, n});
  reinterpret_cast<Fn5>(hostGrouped)(&dx, &dids, &dw, &ds, &dhy);
  runForm(splitGrouped, slots, [&](void *part, void *sums, void *) {
    reinterpret_cast<Fn7>(formGrouped)(&dx, &dids, &dw, &ds, &dfy, part, sums);
  });
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
      auto blockY = simt.value(simt.blockY);
      lanes.splits = splits;
      lanes.splitRows = kAttentionSplitRows;
      lanes.head = [blockY, splits](OpBuilder &b, Location loc) -> Value {
        return arith::DivUIOp::create(b, loc, blockY(b, loc),
                                      arith::ConstantIndexOp::create(b, loc, splits));
      };
      lanes.split = [blockY, splits](OpBuilder &b, Location loc) -> Value {
        return arith::RemUIOp::create(b, loc, blockY(b, loc),
                                      arith::ConstantIndexOp::create(b, loc, splits));
      };
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
  std::vector<uint16_t> q = randomBf16(size_t(n * heads * dim), 13, 0.5f);
  std::vector<uint16_t> rowValues = randomBf16(size_t(table * dim), 14, 0.5f);
  std::vector<uint16_t> rowStore(rowValues.size() + 16);
  uint16_t *rowsAt = rowStore.data();
  while (reinterpret_cast<uintptr_t>(rowsAt) % 16 != 0)
    ++rowsAt;
  rowsAt += misalignedRows ? 1 : 0;
  std::copy(rowValues.begin(), rowValues.end(), rowsAt);
  std::vector<int32_t> idx(size_t(n * numIdx));
  std::mt19937 gen(15);
  std::uniform_int_distribution<int> pick(-1, int(table) - 1);
  for (int32_t &v : idx)
    v = pick(gen);
  std::vector<float> sinks(size_t(heads), 0.f);
  for (int64_t h = 0; h < heads; ++h)
    sinks[size_t(h)] = 0.25f * float(h % 5) - 0.5f;
  const float scale = 0.125f;
  // Poisoned (NaN) outputs: an element the form does not store shows.
  std::vector<uint16_t> outHost(q.size(), 0xFFFF), outForm(q.size(), 0xFFFF);
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
  EXPECT_TRUE(host && form);
  if (!host || !form)
    return 0;
  host(&dq, &dr, &di, &dsink, scale, &doutHost);
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
      form(&dq, &dr, &di, &dsink, scale, &doutForm, &dScores, &dIndex, &dReduce, &dAcc);
    }, /*lastFirst=*/true);
  };
  run();
  if (splits > 1) {
    // A second launch gives the same bytes: the last block of each (row,
    // head) put its count back to zero.
    std::vector<uint16_t> first = outForm;
    std::fill(outForm.begin(), outForm.end(), 0xFFFF);
    run();
    EXPECT_EQ(first, outForm) << "the split form's second launch differs";
  }
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
    expectTopKBlockFormMatchesHost(100, masked, 256, n, width, scores, mask); // the GPU's: a bin a thread
  }
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
/// fewer than the width: -inf past them), negative dots (ReLU).
void expectIndexScoreBlockFormMatchesHost(int64_t heads, int64_t dim, int64_t n,
                                          int64_t numKeys, int64_t width,
                                          std::vector<int64_t> visible, uint32_t seed) {
  const int64_t tileKeys = std::max<int64_t>(1, 256 / heads), padded = dim + 2;
  KernelLibrary lib([&](ModuleOp m) {
    Simt simt(m);
    buildIndexScoreKernel(m, "host", heads, dim);
    func::FuncOp form = buildIndexScoreKernel(m, "form", heads, dim);
    IndexScoreBlockLanes lanes;
    lanes.row = simt.value(simt.blockX);
    lanes.tile = simt.value(simt.blockY);
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
  launch(n, (width + tileKeys - 1) / tileKeys, heads * tileKeys,
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
    formMissed[size_t(simtBlockX * threads + simtThread)] = form(&dr, &df, start);
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

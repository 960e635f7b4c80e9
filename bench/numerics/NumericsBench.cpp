//===- NumericsBench.cpp - Throughput of csa_numerics ---------------------===//
//
// CPU throughput of the released cache-row quantizers / dequantizers, the
// FP8 activation quantizer and the checkpoint weight dequantizers, at the
// released sizes, plus a memcpy baseline so that every figure can be read as
// a fraction of this machine's copy bandwidth.
//
// Inputs are random (fixed seed) and live in pools larger than the private
// caches (64 MiB of fp32 for the rows); each iteration takes the next row of
// the pool, so consecutive iterations never reuse an input. Bytes are
// counted as read + written, the same convention as the memcpy baseline.
//
//===----------------------------------------------------------------------===//
#include "runtime/numerics/Numerics.h"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace nx = csa::numerics;

namespace {

constexpr uint64_t kSeed = 20261130;
/// Bytes of fp32 input the row benchmarks cycle through.
constexpr size_t kPoolBytes = size_t(64) << 20;
constexpr size_t kPoolFloats = kPoolBytes / sizeof(float);

/// Released sizes (models/configs/deepseek-v4.1-flash.json).
constexpr size_t kDim = 5120;          // dim: activation rows for act_quant
constexpr size_t kQLoraRank = 1280;    // wq_a is [q_lora_rank, dim], FP8
constexpr size_t kMoeInterDim = 2304;  // expert w1 / w3 are [moe_inter_dim, dim], FP4
constexpr size_t kActBlock = 32;       // act_quant block (UE8M0 scales)
constexpr size_t kFp8WeightBlock = 32; // FP8 weight scale blocks 32 x 32

/// 64 MiB of N(0, 1) fp32 values, generated once and never written.
const std::vector<float> &randomPool() {
  static const std::vector<float> pool = [] {
    std::vector<float> v(kPoolFloats);
    std::mt19937_64 rng(kSeed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float &x : v)
      x = normal(rng);
    return v;
  }();
  return pool;
}

/// The pool quantized row by row in `format` (inputs of the dequantizers).
const std::vector<uint8_t> &quantizedPool(nx::RowFormat format, size_t dim) {
  static std::vector<uint8_t> pools[3];
  std::vector<uint8_t> &pool = pools[int(format)];
  if (pool.empty()) {
    const std::vector<float> &x = randomPool();
    const size_t rows = kPoolFloats / dim, bytes = nx::rowBytes(format, dim);
    pool.resize(rows * bytes);
    for (size_t r = 0; r < rows; ++r)
      nx::quantizeRow(format, x.data() + r * dim, dim, pool.data() + r * bytes);
  }
  return pool;
}

/// Random bytes; `avoidE4M3Nan` replaces the two E4M3 NaN codes (0x7F, 0xFF).
std::vector<uint8_t> randomBytes(size_t n, uint64_t seed, bool avoidE4M3Nan) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (uint8_t &b : v) {
    b = uint8_t(rng());
    if (avoidE4M3Nan && (b & 0x7F) == 0x7F)
      b ^= 1;
  }
  return v;
}

/// UE8M0 scale bytes around 2^-7 (what the random checkpoints hold).
std::vector<uint8_t> randomScales(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (uint8_t &b : v)
    b = uint8_t(127 - 8 + int(rng() % 4));
  return v;
}

void setRowCounters(benchmark::State &state, size_t bytesPerRow) {
  state.SetItemsProcessed(int64_t(state.iterations()));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytesPerRow));
}

//===----------------------------------------------------------------------===//
// Baseline: memcpy (bytes = read + write)
//===----------------------------------------------------------------------===//

void BM_Memcpy(benchmark::State &state) {
  const size_t n = size_t(state.range(0));
  std::vector<uint8_t> src(n), dst(n);
  std::memset(src.data(), 0x5A, n); // touch every page before timing
  std::memset(dst.data(), 0, n);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * 2 * int64_t(n));
}
BENCHMARK(BM_Memcpy)->Arg(int64_t(64) << 20)->Arg(int64_t(512) << 20)
    ->Unit(benchmark::kMillisecond);

//===----------------------------------------------------------------------===//
// Cache rows (one row per iteration)
//===----------------------------------------------------------------------===//

template <nx::RowFormat Format, size_t Dim>
void BM_QuantizeRow(benchmark::State &state) {
  const std::vector<float> &x = randomPool();
  const size_t rows = kPoolFloats / Dim, bytes = nx::rowBytes(Format, Dim);
  std::vector<uint8_t> out(rows * bytes);
  size_t r = 0;
  for (auto _ : state) {
    uint8_t *row = out.data() + r * bytes;
    switch (Format) {
    case nx::RowFormat::MainKvFp4:
      nx::quantizeMainKvRow(x.data() + r * Dim, Dim, row);
      break;
    case nx::RowFormat::IndexKeyFp4:
      nx::quantizeIndexKeyRow(x.data() + r * Dim, Dim, row);
      break;
    case nx::RowFormat::SwaKvFp8:
      nx::quantizeSwaKvRow(x.data() + r * Dim, Dim, row);
      break;
    }
    benchmark::DoNotOptimize(row);
    benchmark::ClobberMemory();
    if (++r == rows)
      r = 0;
  }
  setRowCounters(state, Dim * sizeof(float) + bytes);
}

template <nx::RowFormat Format, size_t Dim>
void BM_DequantizeRow(benchmark::State &state) {
  const std::vector<uint8_t> &in = quantizedPool(Format, Dim);
  const size_t bytes = nx::rowBytes(Format, Dim), rows = in.size() / bytes;
  std::vector<float> out(rows * Dim);
  size_t r = 0;
  for (auto _ : state) {
    float *o = out.data() + r * Dim;
    const uint8_t *row = in.data() + r * bytes;
    switch (Format) {
    case nx::RowFormat::MainKvFp4:
      nx::dequantizeMainKvRow(row, Dim, o);
      break;
    case nx::RowFormat::IndexKeyFp4:
      nx::dequantizeIndexKeyRow(row, Dim, o);
      break;
    case nx::RowFormat::SwaKvFp8:
      nx::dequantizeSwaKvRow(row, Dim, o);
      break;
    }
    benchmark::DoNotOptimize(o);
    benchmark::ClobberMemory();
    if (++r == rows)
      r = 0;
  }
  setRowCounters(state, bytes + Dim * sizeof(float));
}

using RF = nx::RowFormat;
BENCHMARK_TEMPLATE(BM_QuantizeRow, RF::MainKvFp4, nx::kMainKvDim)
    ->Name("BM_QuantizeMainKvRow/512");
BENCHMARK_TEMPLATE(BM_DequantizeRow, RF::MainKvFp4, nx::kMainKvDim)
    ->Name("BM_DequantizeMainKvRow/512");
BENCHMARK_TEMPLATE(BM_QuantizeRow, RF::IndexKeyFp4, nx::kIndexKeyDim)
    ->Name("BM_QuantizeIndexKeyRow/128");
BENCHMARK_TEMPLATE(BM_DequantizeRow, RF::IndexKeyFp4, nx::kIndexKeyDim)
    ->Name("BM_DequantizeIndexKeyRow/128");
BENCHMARK_TEMPLATE(BM_QuantizeRow, RF::SwaKvFp8, nx::kSwaKvDim)
    ->Name("BM_QuantizeSwaKvRow/512");
BENCHMARK_TEMPLATE(BM_DequantizeRow, RF::SwaKvFp8, nx::kSwaKvDim)
    ->Name("BM_DequantizeSwaKvRow/512");

//===----------------------------------------------------------------------===//
// act_quant(inplace=True), FP8 per 32 with UE8M0 scales, one row of `dim`
//===----------------------------------------------------------------------===//

void BM_ActQuantInplace(benchmark::State &state) {
  // A private copy: the benchmark writes its input. After one pass over the
  // pool the values already lie on the FP8 grid; the work per element (amax,
  // divide, encode, decode, multiply) is the same either way.
  std::vector<float> x = randomPool();
  const size_t rows = kPoolFloats / kDim;
  size_t r = 0;
  for (auto _ : state) {
    float *row = x.data() + r * kDim;
    nx::actQuantInplace(row, kDim, kActBlock, nx::Fp8ScaleFormat::Ue8m0);
    benchmark::DoNotOptimize(row);
    benchmark::ClobberMemory();
    if (++r == rows)
      r = 0;
  }
  setRowCounters(state, 2 * kDim * sizeof(float));
}
BENCHMARK(BM_ActQuantInplace)->Name("BM_ActQuantInplaceUe8m0/5120");

//===----------------------------------------------------------------------===//
// Weight dequantization, one whole matrix per iteration (items = rows)
//===----------------------------------------------------------------------===//

void BM_DequantizeFp8Weight(benchmark::State &state) {
  const size_t n = kQLoraRank, k = kDim, b = kFp8WeightBlock;
  const size_t scales = ((n + b - 1) / b) * ((k + b - 1) / b);
  std::vector<uint8_t> w = randomBytes(n * k, kSeed + 1, /*avoidE4M3Nan=*/true);
  std::vector<uint8_t> s = randomScales(scales, kSeed + 2);
  std::vector<float> out(n * k);
  for (auto _ : state) {
    nx::dequantizeFp8Weight(w.data(), s.data(), n, k, out.data(), b);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(n));
  state.SetBytesProcessed(int64_t(state.iterations()) *
                          int64_t(n * k + scales + n * k * sizeof(float)));
}
BENCHMARK(BM_DequantizeFp8Weight)->Name("BM_DequantizeFp8Weight/1280x5120")
    ->Unit(benchmark::kMillisecond);

void BM_DequantizeFp4Weight(benchmark::State &state) {
  const size_t n = kMoeInterDim, k = kDim;
  const size_t packedBytes = n * k / 2, scales = n * (k / nx::kFp4WeightGroup);
  std::vector<uint8_t> w = randomBytes(packedBytes, kSeed + 3, false);
  std::vector<uint8_t> s = randomScales(scales, kSeed + 4);
  std::vector<float> out(n * k);
  for (auto _ : state) {
    nx::dequantizeFp4Weight(w.data(), s.data(), n, k, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(n));
  state.SetBytesProcessed(int64_t(state.iterations()) *
                          int64_t(packedBytes + scales + n * k * sizeof(float)));
}
BENCHMARK(BM_DequantizeFp4Weight)->Name("BM_DequantizeFp4Weight/2304x5120")
    ->Unit(benchmark::kMillisecond);

} // namespace

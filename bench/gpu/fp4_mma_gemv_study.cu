// fp4_mma_gemv_study.cu - how fast can a batch-1 FP4 expert GEMV be on the
// H200 with mma.sync, before csa's form is written? (A study, not csa code:
// csa builds its kernels through MLIR; this is the schedule measured first.)
//
//   nvcc -O3 -arch=sm_90a -o fp4_mma_gemv_study bench/gpu/fp4_mma_gemv_study.cu
//   ./fp4_mma_gemv_study
//
// y[s][j] = sum_b sw[e_s][j][b] * sx[s][b] * sum_{k in b} w[e_s][j][k] * q[s][k]
// with w E2M1 (two a byte, low nibble first), sw UE8M0 per 32-block of a row,
// q/sx the E4M3 act_quant of x per 32-block. Six slots (a top-6 token), 64
// experts; each timed launch uses six other experts so the weights come from
// HBM (64 x 2304 x 5120 / 2 = 377 MB > L2).
//
// The schedule: a warp owns 16 output rows (A = weights, m16) and 4 scale
// blocks a step; thread (g, t) loads 16 bytes of rows g and g + 8: block
// 4 step + t, whole. B = activations, column n holding block 4 step + n's
// values at thread n's k-slots only, zeros elsewhere, so C[row][n] is block
// (4 step + n)'s partial of that row: every mma's k range may then mix
// blocks, and each block's partial still gets its own scale in fp32.
// Variant "f16": nibbles -> E4M3 bytes (integer ops) -> f16x2 (cvt), mma
// m16n8k16 f16 with f32 accumulation. Variant "e4m3": the E4M3 bytes feed mma
// m16n8k32 e4m3 directly (no cvt).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

constexpr int kSlots = 6, kExperts = 64;

__device__ __forceinline__ uint4 ldg128(const void *p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Nibbles 0,2,4,6 (even) and 1,3,5,7 (odd) of w as E4M3 bytes (E2M1 x 2^-6).
__device__ __forceinline__ void e2m1ToE4m3(uint32_t w, uint32_t &even, uint32_t &odd) {
  even = ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u);
  odd = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);
}

__device__ __forceinline__ uint32_t e4m3x2ToF16x2(uint32_t lo16) {
  uint32_t r;
  asm("{.reg .b16 t; mov.b32 {t, _}, %1; cvt.rn.f16x2.e4m3x2 %0, t;}" : "=r"(r) : "r"(lo16));
  return r;
}

__device__ __forceinline__ void mmaF16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mmaE4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float ue8m0(uint8_t c) { return __uint_as_float(uint32_t(c) << 23); }

// act_quant of row s: per 32-block scale 2^ceil(log2(amax / 448)), E4M3 codes;
// a thread per 8 values (16 bytes), the block's amax over 4 lanes. Writes the
// codes in the order each variant's fragments want them, plus the plain codes
// and scales for the host's check.
template <int K, int Mode>
__device__ void actQuant(const __nv_bfloat16 *x, uint32_t *xq, float *xs, uint8_t *dbgQ,
                         float *dbgS) {
  for (int base = 0; base < K / 8; base += blockDim.x) {
    const int i = base + threadIdx.x;
    if (base + (threadIdx.x & ~31) >= K / 8)
      break; // whole warps (K / 8 is a multiple of 32 here)
    uint4 raw = *reinterpret_cast<const uint4 *>(x + 8 * i);
    const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
    float v[8], amax = 0.f;
    for (int k = 0; k < 4; ++k) {
      v[2 * k] = __uint_as_float(r[k] << 16);
      v[2 * k + 1] = __uint_as_float(r[k] & 0xFFFF0000u);
      amax = fmaxf(amax, fmaxf(fabsf(v[2 * k]), fabsf(v[2 * k + 1])));
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
    const float scale = amax > 0.f ? exp2f(ceilf(log2f(amax / 448.f))) : 1.f;
    uint8_t q[8];
    for (int k = 0; k < 8; ++k)
      q[k] = __nv_cvt_float_to_fp8(v[k] / scale, __NV_SATFINITE, __NV_E4M3);
    const int b = i / 4;
    if (i % 4 == 0)
      xs[b] = scale;
    if (dbgQ) {
      for (int k = 0; k < 8; ++k)
        dbgQ[8 * i + k] = q[k];
      if (i % 4 == 0)
        dbgS[b] = scale;
    }
    // Word i holds elements 8i..8i+7 (nibble m = element 8i+m).
    const uint32_t even = q[0] | q[2] << 8 | q[4] << 16 | uint32_t(q[6]) << 24;
    const uint32_t odd = q[1] | q[3] << 8 | q[5] << 16 | uint32_t(q[7]) << 24;
    if (Mode == 1) {
      xq[2 * i] = even;
      xq[2 * i + 1] = odd;
    } else {
      xq[4 * i + 0] = e4m3x2ToF16x2(even & 0xFFFF);
      xq[4 * i + 1] = e4m3x2ToF16x2(even >> 16);
      xq[4 * i + 2] = e4m3x2ToF16x2(odd & 0xFFFF);
      xq[4 * i + 3] = e4m3x2ToF16x2(odd >> 16);
    }
  }
}

// grid (N / (16 * RG), slots), RG row groups of 16 a block, KW warps
// splitting K in each, P steps of weights in flight a thread. Mode 0: f16
// mma, 1: e4m3 mma, 2: the same loads and no arithmetic (the bound of the
// access pattern).
template <int K, int N, int RG, int KW, int P, int Mode>
__global__ void __launch_bounds__(32 * RG * KW)
    fp4GemvMma(const __nv_bfloat16 *x, const int *ids, const uint8_t *w, const uint8_t *sw,
               __nv_bfloat16 *y, uint8_t *dbgQ, float *dbgS) {
  constexpr int KB = K / 32, RowBytes = K / 2, Steps = KB / 4;
  static_assert(KB % 4 == 0, "whole steps");
  __shared__ uint32_t xq[KB * (Mode == 1 ? 8 : 16)];
  __shared__ float xs[KB];
  __shared__ float red[RG][KW][16];
  const int slot = blockIdx.y;
  const int e = ids[slot];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int rg = warp / KW, kw = warp % KW;
  const int row0 = blockIdx.x * 16 * RG + rg * 16;
  const size_t wRow = size_t(e) * N + row0 + g;
  const uint8_t *w0 = w + wRow * RowBytes, *w1 = w0 + 8 * size_t(RowBytes);
  const uint8_t *s0 = sw + wRow * KB, *s1 = s0 + 8 * size_t(KB);
  // The first P steps' weights in flight before the act_quant.
  // Threads t < 2 also load the scale codes of blocks 4 step + 2t, + 1
  // (two bytes of rows g and g + 8) with them.
  uint4 b0[P], b1[P];
  uint32_t sc[P];
  auto scales = [&](int step) -> uint32_t {
    if (t >= 2)
      return 0u;
    const int k0 = 4 * step + 2 * t;
    return uint32_t(*reinterpret_cast<const uint16_t *>(s0 + k0)) |
           uint32_t(*reinterpret_cast<const uint16_t *>(s1 + k0)) << 16;
  };
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int step = kw + p * KW;
    if (step < Steps) {
      b0[p] = ldg128(w0 + (4 * step + t) * 16);
      b1[p] = ldg128(w1 + (4 * step + t) * 16);
      sc[p] = scales(step);
    }
  }
  actQuant<K, Mode>(x + size_t(slot) * K, xq, xs,
                    blockIdx.x == 0 ? dbgQ + size_t(slot) * K : nullptr,
                    blockIdx.x == 0 ? dbgS + size_t(slot) * KB : nullptr);
  __syncthreads();
  const bool feeds = g == t; // this thread's B column carries block 4 step + t
  float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
  uint32_t sink = 0;
  for (int base = kw; base < Steps; base += P * KW) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int step = base + p * KW;
      if (step >= Steps)
        break;
      const int blk = 4 * step + t;
      const uint4 q0 = b0[p], q1 = b1[p];
      const uint32_t codes = sc[p];
      if (step + P * KW < Steps) {
        b0[p] = ldg128(w0 + (blk + 4 * P * KW) * 16);
        b1[p] = ldg128(w1 + (blk + 4 * P * KW) * 16);
        sc[p] = scales(step + P * KW);
      }
      if (Mode == 2) {
        sink ^= codes ^ q0.x ^ q0.y ^ q0.z ^ q0.w ^ q1.x ^ q1.y ^ q1.z ^ q1.w;
        continue;
      }
      float c[4] = {0.f, 0.f, 0.f, 0.f};
      const uint32_t r0[4] = {q0.x, q0.y, q0.z, q0.w}, r1[4] = {q1.x, q1.y, q1.z, q1.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t e0, o0, e1, o1;
        e2m1ToE4m3(r0[i], e0, o0);
        e2m1ToE4m3(r1[i], e1, o1);
        if (Mode == 1) {
          uint32_t x0 = feeds ? xq[blk * 8 + 2 * i] : 0u, x1 = feeds ? xq[blk * 8 + 2 * i + 1] : 0u;
          mmaE4m3(c, e0, e1, o0, o1, x0, x1);
        } else {
          const uint32_t *xb = xq + blk * 16 + 4 * i;
          uint32_t x0 = feeds ? xb[0] : 0u, x1 = feeds ? xb[1] : 0u, x2 = feeds ? xb[2] : 0u,
                   x3 = feeds ? xb[3] : 0u;
          mmaF16(c, e4m3x2ToF16x2(e0 & 0xFFFF), e4m3x2ToF16x2(e1 & 0xFFFF),
                 e4m3x2ToF16x2(e0 >> 16), e4m3x2ToF16x2(e1 >> 16), x0, x1);
          mmaF16(c, e4m3x2ToF16x2(o0 & 0xFFFF), e4m3x2ToF16x2(o1 & 0xFFFF),
                 e4m3x2ToF16x2(o0 >> 16), e4m3x2ToF16x2(o1 >> 16), x2, x3);
        }
      }
      // c[0], c[1]: row g, blocks 4 step + 2t, + 2t + 1; c[2], c[3]: row g + 8.
      if (t < 2) {
        const int k0 = 4 * step + 2 * t, k1 = k0 + 1;
        const float f0 = xs[k0] * 64.f, f1 = xs[k1] * 64.f;
        acc0 = fmaf(c[0], ue8m0(codes & 0xFF) * f0, acc0);
        acc1 = fmaf(c[1], ue8m0((codes >> 8) & 0xFF) * f1, acc1);
        acc2 = fmaf(c[2], ue8m0((codes >> 16) & 0xFF) * f0, acc2);
        acc3 = fmaf(c[3], ue8m0(codes >> 24) * f1, acc3);
      }
    }
  }
  if (Mode == 2)
    acc0 = __uint_as_float(sink & 0x3F000000u);
  // Row g: acc0 + acc1 of threads t = 0, 1; row g + 8: acc2 + acc3.
  float rowG = acc0 + acc1, rowG8 = acc2 + acc3;
  rowG += __shfl_xor_sync(0xFFFFFFFFu, rowG, 1);
  rowG8 += __shfl_xor_sync(0xFFFFFFFFu, rowG8, 1);
  if (t == 0) {
    red[rg][kw][g] = rowG;
    red[rg][kw][g + 8] = rowG8;
  }
  __syncthreads();
  if (threadIdx.x < 16 * RG) {
    const int r = threadIdx.x / 16, o = threadIdx.x % 16;
    float total = 0.f;
    for (int k = 0; k < KW; ++k)
      total += red[r][k][o];
    y[size_t(slot) * N + blockIdx.x * 16 * RG + r * 16 + o] = __float2bfloat16(total);
  }
}

static float e2m1Value(uint8_t n) {
  static const float mag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  return (n & 8) ? -mag[n & 7] : mag[n & 7];
}
static float e4m3Value(uint8_t c) {
  __nv_fp8_e4m3 v;
  memcpy(&v, &c, 1);
  return float(v);
}

template <int K, int N, int RG, int KW, int P, int Mode>
void study() {
  const char *name = Mode == 0 ? "f16" : Mode == 1 ? "e4m3" : "stream";
  constexpr int KB = K / 32;
  const size_t wBytes = size_t(kExperts) * N * K / 2, sBytes = size_t(kExperts) * N * KB;
  std::mt19937 rng(K * 7 + N);
  std::vector<uint8_t> hw(wBytes), hs(sBytes);
  for (auto &b : hw) b = uint8_t(rng());
  for (auto &b : hs) b = uint8_t(127 - 12 + rng() % 8); // scales 2^-12 .. 2^-5
  std::vector<__nv_bfloat16> hx(size_t(kSlots) * K);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto &v : hx) v = __float2bfloat16(nd(rng) * (rng() % 16 == 0 ? 30.f : 1.f));
  uint8_t *dw, *ds, *dq;
  __nv_bfloat16 *dx, *dy;
  int *dids;
  float *dsx;
  CHECK(cudaMalloc(&dw, wBytes));
  CHECK(cudaMalloc(&ds, sBytes));
  CHECK(cudaMalloc(&dx, hx.size() * 2));
  CHECK(cudaMalloc(&dy, size_t(kSlots) * N * 2));
  CHECK(cudaMalloc(&dids, 64 * kSlots * sizeof(int)));
  CHECK(cudaMalloc(&dq, size_t(kSlots) * K));
  CHECK(cudaMalloc(&dsx, size_t(kSlots) * KB * 4));
  CHECK(cudaMemcpy(dw, hw.data(), wBytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(ds, hs.data(), sBytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  std::vector<int> ids(64 * kSlots);
  for (int i = 0; i < 64 * kSlots; ++i) ids[i] = (i * 11 + i / kSlots) % kExperts;
  CHECK(cudaMemcpy(dids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dy, 0xFF, size_t(kSlots) * N * 2)); // NaN poison
  dim3 grid(N / (16 * RG), kSlots), block(32 * RG * KW);
  fp4GemvMma<K, N, RG, KW, P, Mode><<<grid, block>>>(dx, dids, dw, ds, dy, dq, dsx);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> hy(size_t(kSlots) * N);
  std::vector<uint8_t> hq(size_t(kSlots) * K);
  std::vector<float> hsx(size_t(kSlots) * KB);
  CHECK(cudaMemcpy(hy.data(), dy, hy.size() * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hq.data(), dq, hq.size(), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hsx.data(), dsx, hsx.size() * 4, cudaMemcpyDeviceToHost));
  // Exact sums in double; the error of each output as a fraction of
  // 2 * gamma_K * S (S = sum of |terms|) after the bf16 rounding.
  double worst = 0.0, worstRel = 0.0;
  int bad = 0;
  const double u = std::ldexp(1.0, -24), gamma = K * u / (1 - K * u);
  for (int s = 0; s < kSlots; ++s) {
    const int e = ids[s];
    for (int j = 0; j < N; ++j) {
      double exact = 0.0, S = 0.0;
      const size_t row = size_t(e) * N + j;
      for (int b = 0; b < KB; ++b) {
        const double scale = std::ldexp(1.0, int(hs[row * KB + b]) - 127) * hsx[size_t(s) * KB + b];
        for (int i = 0; i < 32; ++i) {
          const int k = b * 32 + i;
          const uint8_t byte = hw[row * (K / 2) + k / 2];
          const double term = double(e2m1Value(k % 2 ? byte >> 4 : byte & 15)) *
                              e4m3Value(hq[size_t(s) * K + k]) * scale;
          exact += term;
          S += std::fabs(term);
        }
      }
      const double got = __bfloat162float(hy[size_t(s) * N + j]);
      const double bound = 2 * gamma * S + std::ldexp(1.0, -8) * (std::fabs(exact) + 2 * gamma * S) + 1e-30;
      const double err = std::fabs(got - exact);
      if (!(err <= bound)) ++bad;
      worst = std::max(worst, std::isnan(err) ? 1e30 : err / bound);
      worstRel = std::max(worstRel, err / (S + 1e-30));
    }
  }
  // Timing: each launch six other experts (the weights from HBM).
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  const int iters = getenv("STUDY_ITERS") ? atoi(getenv("STUDY_ITERS")) : 200;
  std::vector<float> times;
  for (int rep = 0; rep < 5; ++rep) {
    CHECK(cudaEventRecord(a));
    for (int i = 0; i < iters; ++i)
      fp4GemvMma<K, N, RG, KW, P, Mode><<<grid, block>>>(dx, dids + kSlots * (i % 64), dw, ds, dy,
                                                         dq, dsx);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    times.push_back(ms * 1000.f / iters);
  }
  std::sort(times.begin(), times.end());
  const double bytes = double(kSlots) * N * (K / 2 + KB);
  printf("%-8s K=%d N=%d RG=%d KW=%d P=%d: %.2f us a launch (median of 5 x %d), %.0f GB/s (%.0f %% of "
         "4.3 TB/s); outputs over the dot bound %d of %d, worst %.3f of it, worst |err|/S %.2e\n",
         name, K, N, RG, KW, P, times[2], iters, bytes / times[2] / 1e3,
         100.0 * bytes / times[2] / 1e3 / 4300.0, bad, kSlots * N, worst, worstRel);
  cudaFree(dw); cudaFree(ds); cudaFree(dx); cudaFree(dy); cudaFree(dids); cudaFree(dq); cudaFree(dsx);
}

// The same sweep for each shape: loads only, f16 and E4M3 at a few row
// groups x K warps and steps in flight.
template <int K, int N>
void sweep() {
  study<K, N, 4, 2, 4, 2>();
  study<K, N, 4, 2, 2, 0>();
  study<K, N, 4, 2, 4, 0>();
  study<K, N, 4, 2, 4, 1>();
  study<K, N, 2, 4, 2, 1>();
  study<K, N, 2, 4, 4, 1>();
}

int main() {
  // w1/w3 (in 5120, out 2304) and w2 (in 2304, out 5120) of h200-full.
  sweep<5120, 2304>();
  sweep<2304, 5120>();
  return 0;
}

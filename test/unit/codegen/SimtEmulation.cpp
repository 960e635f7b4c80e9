//===- SimtEmulation.cpp - GPU forms' lanes on host threads ---------------===//
//
// See SimtEmulation.h: the exported lane functions and the launch.
//
//===----------------------------------------------------------------------===//
#include "test/unit/codegen/SimtEmulation.h"

#include "test/unit/codegen/KernelTestSupport.h"

#include <array>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <vector>

using namespace csa::codegen::testing;

namespace {
thread_local int64_t simtThread = 0, simtBlockX = 0, simtBlockY = 0;
thread_local pthread_barrier_t *simtBarrier = nullptr;
/// The block's warps: a barrier each, and a slot a thread for shuffles.
thread_local pthread_barrier_t *simtWarpBarrier = nullptr;
thread_local float *simtExchange = nullptr;
/// The mma's operand words: six a thread (a0..a3, b0, b1).
thread_local int32_t *simtWords = nullptr;

std::mutex simtEventsMutex;
std::vector<SimtMemoryEvent> simtEvents;
void recordEvent(const void *address) {
  std::lock_guard<std::mutex> lock(simtEventsMutex);
  simtEvents.push_back({simtBlockX, simtBlockY, simtThread, address});
}

/// bf16 `half` (0: low) of an mma operand word, as f32.
float mmaHalf(int32_t word, int half) {
  const uint32_t bits = (uint32_t(word) >> (16 * half)) & 0xFFFF;
  return nx::bf16ToFloat(uint16_t(bits));
}
/// E4M3 code `byte` (0: lowest) of an mma operand word, as f32.
float mmaByte(int32_t word, int byte) {
  return nx::kE4M3Values[(uint32_t(word) >> (8 * byte)) & 0xFF];
}

/// Element `e` of this lane's d of a warp-wide m16n8 mma whose operand
/// words hold `perWord` elements each (`element(word, i)` the i-th as f32):
/// k = 8 x perWord; a lane's a_i holds A[group + 8 (i & 1)][perWord quad +
/// 4 perWord (i >> 1) + 0..perWord-1], b_i B[perWord quad + 4 perWord i +
/// ..][group]; d_e is D[group + 8 (e >> 1)][2 quad + (e & 1)]. Every lane
/// puts its words in its slots first; c, then the products in k order.
float warpMma(const std::array<int32_t, 6> &in, float c, int32_t e, int64_t perWord,
              float (*element)(int32_t, int)) {
  const int64_t warpBase = simtThread / 32 * 32, lane = simtThread - warpBase;
  std::memcpy(simtWords + simtThread * 6, in.data(), sizeof(int32_t) * 6);
  pthread_barrier_wait(simtWarpBarrier);
  const int64_t row = lane / 4 + 8 * (e >> 1), col = 2 * (lane % 4) + (e & 1);
  const int64_t half = 4 * perWord;
  float sum = c;
  for (int64_t kk = 0; kk < 2 * half; ++kk) {
    const int32_t *aLane = simtWords + (warpBase + (row % 8) * 4 + (kk % half) / perWord) * 6;
    const int32_t *bLane = simtWords + (warpBase + col * 4 + (kk % half) / perWord) * 6;
    const float av = element(aLane[(row >= 8 ? 1 : 0) + (kk >= half ? 2 : 0)], int(kk % perWord));
    const float bv = element(bLane[4 + (kk >= half ? 1 : 0)], int(kk % perWord));
    sum += av * bv;
  }
  pthread_barrier_wait(simtWarpBarrier);
  return sum;
}
} // namespace

extern "C" {
int64_t csa_simt_thread() { return simtThread; }
int64_t csa_simt_block_x() { return simtBlockX; }
int64_t csa_simt_block_y() { return simtBlockY; }
void csa_simt_barrier() { pthread_barrier_wait(simtBarrier); }
void csa_simt_prefetch_l2(const void *address) { recordEvent(address); }
void csa_simt_dependency_wait() { recordEvent(nullptr); }
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
  return warpMma({a0, a1, a2, a3, b0, b1}, c, e, 2, mmaHalf);
}
// mma.sync.m16n8k32.row.col.f32.e4m3.e4m3.f32: as csa_simt_mma_bf16 with
// four E4M3 codes a word (a_i holds A[group + 8 (i & 1)][4 quad + 16 (i >> 1)
// + byte], b_i holds B[4 quad + 16 i + byte][group]). The products are exact
// in f32, added to c in k order (the hardware's order is its own: the forms
// are held to the dot-product bound, or to exact sums).
float csa_simt_mma_e4m3(int32_t a0, int32_t a1, int32_t a2, int32_t a3, int32_t b0, int32_t b1,
                        float c, int32_t e) {
  return warpMma({a0, a1, a2, a3, b0, b1}, c, e, 4, mmaByte);
}
}

namespace csa::codegen::testing {

std::vector<SimtMemoryEvent> takeSimtMemoryEvents() {
  std::lock_guard<std::mutex> lock(simtEventsMutex);
  std::vector<SimtMemoryEvent> events;
  events.swap(simtEvents);
  return events;
}

/// A grid of gridX x gridY blocks of `threads` threads: `call(shared)` on
/// each, every block with its own zeroed `sharedBytes` of shared memory.
/// The blocks run one after another, the last first with `lastFirst` (a GPU
/// promises no order: a form must not depend on it).
void launch(int64_t gridX, int64_t gridY, int64_t threads, size_t sharedBytes,
            const std::function<void(void *)> &call, bool lastFirst) {
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

} // namespace csa::codegen::testing

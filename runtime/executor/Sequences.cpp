//===- Sequences.cpp - A sequence's caches: new, synthetic, their bytes ---===//
//
// Executor::newSequence (the plan's caches, empty), Executor::syntheticSequence
// (a context of a given length made up without a prefill, for timing long
// contexts) and the cache byte counts csa-run reports. Split from
// Executor.cpp, which loads the plan and runs it.
//
//===----------------------------------------------------------------------===//
#include "runtime/executor/Executor.h"
#include "runtime/executor/ExecutorImpl.h"
#include "runtime/executor/HostThreads.h"

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

namespace csa::runtime {

uint64_t Sequence::cacheBytes() const {
  uint64_t total = 0;
  for (const auto &[id, cache] : caches)
    total += cache.bytes.size();
  return total;
}

uint64_t Sequence::cacheBytesInUse(const artifact::Plan &plan) const {
  uint64_t total = 0;
  for (const CacheBuffer &b : plan.caches) {
    auto it = caches.find(b.id);
    if (it == caches.end())
      continue;
    if (b.kind == CacheKind::GlobalCache)
      total += uint64_t(std::max(it->second.mainEntries, it->second.indexEntries) *
                        b.entryBytes);
    else
      total += it->second.bytes.size();
  }
  return total;
}

Sequence Executor::newSequence() const {
  Sequence seq;
  for (const CacheBuffer &b : impl->artifact->plan().caches) {
    CacheState &c = seq.caches[b.id];
    if (b.kind == CacheKind::SwaRing) {
      c.bytes.assign(size_t(b.fixedBytes), 0);
    } else if (b.kind == CacheKind::CompressorState) {
      // kv then score, [ratio x dim] fp32 each; an empty slot scores -inf.
      c.bytes.assign(size_t(b.fixedBytes), 0);
      float *f = reinterpret_cast<float *>(c.bytes.data());
      const size_t half = size_t(b.fixedBytes) / 8;
      std::fill(f + half, f + 2 * half, kNegInf);
    }
  }
  return seq;
}

absl::Status Executor::reserve(Sequence &sequence, int64_t positions) const {
  if (sequence.cachesHeldBy != 0)
    return absl::FailedPreconditionError(
        "reserve: the sequence's caches are held on a device (reserve before its first run, "
        "or after syncToHost)");
  const artifact::Plan &plan = impl->artifact->plan();
  positions = std::min(positions, plan.maxContext);
  sequence.reservedPositions = std::max(sequence.reservedPositions, positions);
  for (const CacheBuffer &b : plan.caches) {
    if (b.kind != CacheKind::GlobalCache)
      continue;
    CacheState &c = sequence.caches[b.id];
    const size_t bytes = size_t(b.entriesAt(positions) * b.entryBytes);
    if (c.bytes.size() < bytes)
      c.bytes.resize(bytes, 0);
  }
  return absl::OkStatus();
}

namespace {
/// The dimension whose `format` row is `bytes` long (a multiple of 32 up to
/// 16384), or 0.
size_t rowDim(numerics::RowFormat format, int64_t bytes) {
  for (size_t dim = 32; dim <= 16384; dim += 32)
    if (int64_t(numerics::rowBytes(format, dim)) == bytes)
      return dim;
  return 0;
}
/// The dimension of a V4 FP8 main-KV row of `bytes` with `rope` bf16
/// channels (a multiple of 8 up to 16384), or 0.
size_t mainKvFp8Dim(int64_t rope, int64_t bytes) {
  for (size_t dim = size_t(rope) + 8; dim <= 16384; dim += 8)
    if (int64_t(numerics::mainKvFp8RowBytes(dim, size_t(rope))) == bytes)
      return dim;
  return 0;
}
} // namespace

absl::StatusOr<Sequence> Executor::syntheticSequence(int64_t position,
                                                     uint64_t seed) const {
  const artifact::Plan &plan = impl->artifact->plan();
  if (position < 1)
    return absl::InvalidArgumentError("a synthetic context needs position >= 1");
  if (absl::Status st = artifact::checkContext(plan, position + 1); !st.ok())
    return st;
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int32_t> token(0, int32_t(impl->vocab - 1));
  Sequence seq = newSequence();
  seq.position = position;
  seq.history.resize(size_t(position));
  for (int32_t &t : seq.history)
    t = token(gen);
  // Encodes `count` rows of `dim` random values with `encode` at `stride`
  // apart (dim 0: `rowBytes` is no shape of that format). The rows go in
  // chunks on the executor's host threads, each chunk's values from a
  // generator of its own seeded by (seed, cache, part, chunk): the same bytes
  // for any thread count, and a 1M-token context of h200-full in seconds,
  // not minutes.
  int64_t part = 0;
  auto fillRows = [&](const CacheBuffer &b, size_t dim, int64_t rowBytes, uint8_t *first,
                      int64_t count, int64_t stride,
                      const std::function<void(const float *, uint8_t *)> &encode) -> absl::Status {
    if (dim == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "cache '", b.id, "': a row of ", rowBytes, " bytes is no known format"));
    constexpr int64_t kRowsPerChunk = 1024;
    const int64_t chunks = (count + kRowsPerChunk - 1) / kRowsPerChunk;
    const uint64_t partSeed = uint64_t(++part);
    impl->hostThreads->forEach(chunks, [&](int64_t chunk) {
      std::seed_seq seeds{uint32_t(seed), uint32_t(seed >> 32), uint32_t(partSeed),
                          uint32_t(chunk), uint32_t(uint64_t(chunk) >> 32)};
      std::mt19937_64 chunkGen(seeds);
      std::normal_distribution<float> chunkNormal(0.f, 1.f);
      std::vector<float> values(dim);
      const int64_t end = std::min(count, (chunk + 1) * kRowsPerChunk);
      for (int64_t e = chunk * kRowsPerChunk; e < end; ++e) {
        for (float &v : values)
          v = chunkNormal(chunkGen);
        encode(values.data(), first + e * stride);
      }
    });
    return absl::OkStatus();
  };
  auto fill = [&](const CacheBuffer &b, numerics::RowFormat format, int64_t rowBytes,
                  uint8_t *first, int64_t count, int64_t stride) {
    const size_t dim = rowDim(format, rowBytes);
    return fillRows(b, dim, rowBytes, first, count, stride, [&](const float *x, uint8_t *row) {
      numerics::quantizeRow(format, x, dim, row);
    });
  };
  for (const CacheBuffer &b : plan.caches) {
    CacheState &c = seq.caches[b.id];
    absl::Status st;
    if (b.kind == CacheKind::SwaRing) {
      st = fill(b, numerics::RowFormat::SwaKvFp8, b.rowBytes, c.bytes.data(),
                b.window, b.rowBytes);
      c.ringStart = std::max<int64_t>(0, position - b.window);
      c.ringEnd = position;
    } else if (b.kind == CacheKind::GlobalCache) {
      const int64_t entries = b.entriesAt(position);
      c.bytes.assign(size_t(entries * b.entryBytes), 0);
      const int64_t mainBytes = b.mainRowBytes ? b.mainRowBytes : b.entryBytes;
      uint8_t *indexRows = c.bytes.data() + mainBytes;
      if (b.mainRowRope > 0) {
        const size_t dim = mainKvFp8Dim(b.mainRowRope, mainBytes);
        st = fillRows(b, dim, mainBytes, c.bytes.data(), entries, b.entryBytes,
                      [&](const float *x, uint8_t *row) {
                        numerics::quantizeMainKvFp8Row(x, dim, size_t(b.mainRowRope), row);
                      });
      } else {
        st = fill(b, numerics::RowFormat::MainKvFp4, mainBytes, c.bytes.data(),
                  entries, b.entryBytes);
      }
      if (st.ok() && b.indexRowBytes && b.indexRowFp8) {
        const size_t dim = size_t(b.indexRowBytes - 4);
        st = fillRows(b, dim, b.indexRowBytes, indexRows, entries, b.entryBytes,
                      [&](const float *x, uint8_t *row) {
                        numerics::quantizeIndexKeyFp8Row(x, dim, row);
                      });
      } else if (st.ok() && b.indexRowBytes) {
        st = fill(b, numerics::RowFormat::IndexKeyFp4, b.indexRowBytes, indexRows, entries,
                  b.entryBytes);
      }
      c.mainEntries = entries;
      c.indexEntries = b.indexRowBytes ? entries : 0;
    } else if (b.kind == CacheKind::CompressorState && b.ratio > 1) {
      // kv then score, [ratio x dim] fp32 each: the partial group's rows.
      float *f = reinterpret_cast<float *>(c.bytes.data());
      const int64_t dim = b.fixedBytes / (8 * b.ratio);
      const int64_t rows = position % b.ratio;
      for (int64_t i = 0; i < rows * dim; ++i) {
        f[i] = normal(gen);
        f[b.ratio * dim + i] = normal(gen);
      }
    }
    if (!st.ok())
      return st;
  }
  return seq;
}

} // namespace csa::runtime

//===- CompiledVsReferenceTest.cpp - The compiled graph against the oracle ===//
//
// End to end on the CPU: `csa-compile --emit=artifact` builds the tiny
// variant (for several schedules, with bounded replay on and off), the
// runtime's executor runs the artifact's generated kernels on a random
// checkpoint, and the reference forward runs the same checkpoint. Prefill
// logits and 32 greedy decode steps (both fed the reference's tokens) must
// agree, and so must every cache byte.
//
// Tolerance: 0. The kernels follow the reference's fp32 operation order and
// bf16 rounding points (docs/codegen.md), so the logits are bit-for-bit
// equal; any difference is a bug in a kernel, the plan or the executor.
//
//===----------------------------------------------------------------------===//
#include "models/reference/ReferenceModel.h"
#include "models/variants/Variants.h"
#include "models/weights/RandomCheckpoint.h"
#include "runtime/artifact/Artifact.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/executor/Executor.h"
#include "runtime/numerics/Quantize.h"
#include "test/e2e/E2eSupport.h"
#include "test/unit/support/TempDir.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace csa {
namespace {

struct Case {
  const char *name;
  const char *schedule;  ///< "" = the variant's own
  bool boundedReplay;    ///< the compiler's default is on
  int64_t promptLength;
  bool noCed = false;    ///< csa-compile --no-ced (implies no bounded replay)
  /// ExecutorOptions::threads: a linear's rows and a layer's routed experts
  /// split among this many threads must not change a bit.
  int64_t threads = 1;
  /// csa-compile --index-publication=release against the reference's
  /// IndexPublication::Release (the released model.py's stale index keys).
  bool release = false;
  /// csa-compile --main-kv-format=fp8 against the reference's
  /// MainKvFormat::Fp8 (V4's FP8 main-KV rows, a cache format variant).
  bool fp8MainKv = false;
  /// csa-compile --index-key-format=fp8 against IndexKeyFormat::Fp8.
  bool fp8IndexKeys = false;
};

std::string describe(const Case &c) {
  return std::string(c.name) + (c.noCed ? "_no_ced" : "") +
         (c.boundedReplay ? "" : "_no_bounded_replay") +
         "_prompt" + std::to_string(c.promptLength) +
         (c.threads != 1 ? "_threads" + std::to_string(c.threads) : "") +
         (c.release ? "_release" : "") + (c.fp8MainKv ? "_fp8_main_kv" : "") +
         (c.fp8IndexKeys ? "_fp8_index_keys" : "");
}

class CompiledVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(CompiledVsReference, PrefillAndDecodeMatchBitForBit) {
  const Case &c = GetParam();
  test::TempDir dir;
  auto variant = loadVariant(c.name);
  ASSERT_TRUE(variant.ok()) << variant.status();
  if (*c.schedule) {
    auto schedule = scheduleFromString(variant->config, c.schedule);
    ASSERT_TRUE(schedule.ok()) << schedule.status();
    variant->schedule = *schedule;
  }
  if (c.noCed)
    variant->schedule = makeNoCed(variant->schedule);
  applyScheduleToConfig(variant->schedule, variant->config);

  // Compile.
  std::string artifactDir = dir / "model.csa";
  std::string args = std::string("--variant=") + c.name + " --emit=artifact -o " +
                     artifactDir;
  if (*c.schedule)
    args += std::string(" --schedule=") + c.schedule;
  if (!c.boundedReplay && !c.noCed)
    args += " --no-bounded-replay";
  if (c.noCed)
    args += " --no-ced";
  if (c.release)
    args += " --index-publication=release";
  if (c.fp8MainKv)
    args += " --main-kv-format=fp8";
  if (c.fp8IndexKeys)
    args += " --index-key-format=fp8";
  ASSERT_EQ(compile(args, dir / "compile.log"), 0) << readAll(dir / "compile.log");

  // Weights, the executor and the reference.
  LoadedModel model;
  runtime::ExecutorOptions executorOptions;
  executorOptions.threads = c.threads;
  ASSERT_NO_FATAL_FAILURE(loadModel(*variant, dir, artifactDir, 7, model, executorOptions));
  ASSERT_EQ(model.executor->threads(), c.threads);
  checkpoint::Checkpoint *ckpt = model.ckpt.get();
  runtime::Executor *executor = model.executor.get();
  reference::ReferenceOptions refOptions;
  if (c.release)
    refOptions.publication = reference::ReferenceOptions::IndexPublication::Release;
  if (c.fp8MainKv)
    refOptions.mainKvFormat = reference::ReferenceOptions::MainKvFormat::Fp8;
  if (c.fp8IndexKeys)
    refOptions.indexKeyFormat = reference::ReferenceOptions::IndexKeyFormat::Fp8;
  refOptions.boundedReplay = c.boundedReplay; // compiler defaults: start after
                                              // the last Full, tail = window
  auto ref = reference::ReferenceModel::create(
      variant->config, variant->schedule,
      reference::checkpointTensorSource(*ckpt), refOptions);
  ASSERT_TRUE(ref.ok()) << ref.status();

  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < c.promptLength; ++i)
    prompt.push_back(int32_t((i * 37 + 11) % variant->config.vocabSize));

  // The caches hold the reference's bytes.
  runtime::Sequence seq = executor->newSequence();
  auto checkCaches = [&](const char *when) {
  for (const artifact::CacheBuffer &b : executor->plan().caches) {
    const reference::LayerState &s = (*ref)->layerState(b.layer);
    const runtime::CacheState &cache = seq.caches.at(b.id);
    if (b.kind == artifact::CacheKind::SwaRing) {
      EXPECT_EQ(cache.bytes, s.swaRing) << b.id << " " << when;
    } else if (b.kind == artifact::CacheKind::GlobalCache) {
      EXPECT_EQ(cache.mainEntries * b.mainRowBytes, int64_t(s.mainKv.size())) << b.id << " " << when;
      for (int64_t e = 0; e < cache.mainEntries; ++e) {
        const uint8_t *entry = cache.bytes.data() + e * b.entryBytes;
        EXPECT_EQ(0, std::memcmp(entry, s.mainKv.data() + e * b.mainRowBytes,
                                 size_t(b.mainRowBytes)))
            << b.id << " main-KV entry " << e << " " << when;
        EXPECT_EQ(0, std::memcmp(entry + b.mainRowBytes,
                                 s.indexKeys.data() + e * b.indexRowBytes,
                                 size_t(b.indexRowBytes)))
            << b.id << " index-key entry " << e << " " << when;
      }
    }
  }
  };

  auto got = executor->prefill(seq, prompt);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = (*ref)->prefill(prompt);
  ASSERT_TRUE(want.ok()) << want.status();
  checkCaches("after prefill");
  ASSERT_EQ(firstDifference(*got, *want), -1)
      << "prefill logits differ at " << firstDifference(*got, *want);

  for (int step = 0; step < 32; ++step) {
    // Greedy on the reference's logits; both models get the same token.
    int32_t token = int32_t(std::max_element(want->begin(), want->end()) -
                            want->begin());
    got = executor->decode(seq, token);
    ASSERT_TRUE(got.ok()) << "decode step " << step << ": " << got.status();
    want = (*ref)->decode(token);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(firstDifference(*got, *want), -1)
        << "decode step " << step << " (position " << seq.position - 1
        << "): logits differ at " << firstDifference(*got, *want);
  }

  checkCaches("after decode");
}

// The tiny variant's released-like schedule (WWF.C.R.) with bounded replay on
// and off, ablations of it (every compressed layer Full; no Reindex, layer 6
// reusing layer 4's top-k; --no-ced), and SWA-only / single-Full schedules
// that isolate the parts; prompts shorter and longer than the window (8) and
// the bounded-replay tail (8); the CPU's rows and experts split among 2 and 3
// threads; the released index-key publication at even and odd prompt lengths
// (two ratio-2 Full layers before the ratio-1 one: the second reads the
// first's keys on the steps that complete no group); V4's FP8 main-KV rows,
// FP8 index keys, both.
INSTANTIATE_TEST_SUITE_P(
    Tiny, CompiledVsReference,
    ::testing::Values(Case{"tiny", "", true, 5}, Case{"tiny", "", true, 21},
                      Case{"tiny", "", false, 21},
                      Case{"tiny", "WWFFFFFF", true, 13},
                      Case{"tiny", "WWF.C...", true, 13},
                      Case{"tiny", "WWWWWWWW", false, 11},
                      Case{"tiny", "WWFWWWWW", false, 3},
                      Case{"tiny", "WWWWF1WWW", false, 11},
                      Case{"tiny", "", false, 13, /*noCed=*/true},
                      Case{"tiny", "", true, 40, false, /*threads=*/3},
                      Case{"tiny", "WWFFFFFF", false, 21, false, /*threads=*/2},
                      Case{"tiny", "", true, 12, false, 1, /*release=*/true},
                      Case{"tiny", "", true, 13, false, 1, /*release=*/true},
                      Case{"tiny", "WWFFC.R.", false, 20, false, 1, /*release=*/true},
                      Case{"tiny", "", true, 21, false, 1, false, /*fp8MainKv=*/true},
                      Case{"tiny", "WWFFFFFF", false, 13, false, 2, false, /*fp8MainKv=*/true},
                      Case{"tiny", "", true, 21, false, 1, false, false, /*fp8IndexKeys=*/true},
                      Case{"tiny", "", false, 26, false, 1, false, true, /*fp8IndexKeys=*/true}),
    [](const ::testing::TestParamInfo<Case> &info) {
      std::string name = describe(info.param) + "_" +
                         (*info.param.schedule ? info.param.schedule : "own");
      for (char &ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch)))
          ch = ch == '.' ? 'u' : '_';
      return name;
    });

/// Executor::syntheticSequence (csa-run --context): the state of a sequence
/// at a position, every row valid in its byte format, and steps run from it.
TEST(SyntheticSequence, HoldsValidRowsForItsPositionAndDecodesFromIt) {
  test::TempDir dir;
  auto variant = loadVariant("tiny");
  ASSERT_TRUE(variant.ok()) << variant.status();
  const std::string artifactDir = dir / "tiny.csa";
  ASSERT_EQ(compile("--variant=tiny --emit=artifact -o " + artifactDir,
                    dir / "compile.log"),
            0)
      << readAll(dir / "compile.log");
  LoadedModel model;
  ASSERT_NO_FATAL_FAILURE(loadModel(*variant, dir, artifactDir, 3, model));
  runtime::Executor &ex = *model.executor;

  constexpr int64_t position = 77;
  auto seq = ex.syntheticSequence(position, 5);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(seq->position, position);
  ASSERT_EQ(int64_t(seq->history.size()), position);
  for (int32_t t : seq->history)
    ASSERT_TRUE(t >= 0 && t < ex.vocabSize());
  // Every row decodes to finite values.
  auto finiteRows = [](numerics::RowFormat format, const uint8_t *first,
                       int64_t rowBytes, int64_t count, int64_t stride) {
    size_t dim = 32;
    while (int64_t(numerics::rowBytes(format, dim)) != rowBytes && dim < 16384)
      dim += 32;
    std::vector<float> out(dim);
    for (int64_t e = 0; e < count; ++e) {
      numerics::dequantizeRow(format, first + e * stride, dim, out.data());
      for (float v : out)
        if (!std::isfinite(v))
          return false;
    }
    return true;
  };
  int rings = 0, globals = 0;
  for (const artifact::CacheBuffer &b : ex.plan().caches) {
    const runtime::CacheState &c = seq->caches.at(b.id);
    if (b.kind == artifact::CacheKind::SwaRing) {
      ++rings;
      EXPECT_EQ(c.ringStart, position - b.window) << b.id;
      EXPECT_EQ(c.ringEnd, position) << b.id;
      EXPECT_TRUE(finiteRows(numerics::RowFormat::SwaKvFp8, c.bytes.data(),
                             b.rowBytes, b.window, b.rowBytes))
          << b.id;
    } else if (b.kind == artifact::CacheKind::GlobalCache) {
      ++globals;
      const int64_t entries = position / b.ratio;
      EXPECT_EQ(c.mainEntries, entries) << b.id;
      ASSERT_EQ(int64_t(c.bytes.size()), entries * b.entryBytes) << b.id;
      const int64_t mainBytes = b.mainRowBytes ? b.mainRowBytes : b.entryBytes;
      EXPECT_TRUE(finiteRows(numerics::RowFormat::MainKvFp4, c.bytes.data(),
                             mainBytes, entries, b.entryBytes))
          << b.id;
      if (b.indexRowBytes)
        EXPECT_TRUE(finiteRows(numerics::RowFormat::IndexKeyFp4,
                               c.bytes.data() + mainBytes, b.indexRowBytes,
                               entries, b.entryBytes))
            << b.id;
    }
  }
  EXPECT_GT(rings, 0);
  EXPECT_GT(globals, 0);
  // The bytes a real sequence holds there (complete entries per layer).
  uint64_t expected = 0;
  for (const artifact::CacheBuffer &b : ex.plan().caches)
    expected += b.bytesAt(position);
  EXPECT_EQ(seq->cacheBytesInUse(ex.plan()), expected);
  // Decode steps run from it, with finite logits.
  for (int32_t t : {1, 2, 3}) {
    auto logits = ex.decode(*seq, t);
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (float v : *logits)
      ASSERT_TRUE(std::isfinite(v));
  }
  EXPECT_EQ(seq->position, position + 3);
  // Positions outside the plan are errors.
  EXPECT_FALSE(ex.syntheticSequence(0, 5).ok());
  EXPECT_FALSE(ex.syntheticSequence(ex.plan().maxContext, 5).ok());
}

/// The same for V4's FP8 main-KV rows: the plan names their bf16 channels,
/// and the synthetic rows are valid rows of that format.
TEST(SyntheticSequence, WritesV4Fp8MainKvRows) {
  test::TempDir dir;
  auto variant = loadVariant("tiny");
  ASSERT_TRUE(variant.ok()) << variant.status();
  const std::string artifactDir = dir / "tiny.csa";
  ASSERT_EQ(compile("--variant=tiny --main-kv-format=fp8 --emit=artifact -o " + artifactDir,
                    dir / "compile.log"),
            0)
      << readAll(dir / "compile.log");
  LoadedModel model;
  ASSERT_NO_FATAL_FAILURE(loadModel(*variant, dir, artifactDir, 3, model));
  runtime::Executor &ex = *model.executor;
  constexpr int64_t position = 30;
  auto seq = ex.syntheticSequence(position, 5);
  ASSERT_TRUE(seq.ok()) << seq.status();
  int globals = 0;
  for (const artifact::CacheBuffer &b : ex.plan().caches) {
    if (b.kind != artifact::CacheKind::GlobalCache)
      continue;
    ++globals;
    // tiny: head_dim 32 = 24 NoPE + 8 RoPE -> 24 + 16 + 8 bytes.
    EXPECT_EQ(b.mainRowRope, 8) << b.id;
    EXPECT_EQ(b.mainRowBytes, 48) << b.id;
    const runtime::CacheState &c = seq->caches.at(b.id);
    std::vector<float> row(32);
    for (int64_t e = 0; e < c.mainEntries; ++e) {
      const uint8_t *bytes = c.bytes.data() + e * b.entryBytes;
      numerics::dequantizeMainKvFp8Row(bytes, 32, 8, row.data());
      for (float v : row)
        ASSERT_TRUE(std::isfinite(v)) << b.id << " entry " << e;
      // Random normal values: some NoPE and some RoPE channel is not zero.
      EXPECT_TRUE(std::any_of(row.begin(), row.begin() + 24, [](float v) { return v != 0; }));
      EXPECT_TRUE(std::any_of(row.begin() + 24, row.end(), [](float v) { return v != 0; }));
      EXPECT_EQ(bytes[47], 0) << "pad byte, entry " << e;
    }
  }
  EXPECT_GT(globals, 0);
  for (int32_t t : {1, 2}) {
    auto logits = ex.decode(*seq, t);
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (float v : *logits)
      ASSERT_TRUE(std::isfinite(v));
  }
}

/// tiny compiled into `dir` and loaded on the CPU (weights seed 7), and the
/// options of an emulated-GPU executor that keeps caches on the device.
void loadTinyWithEmulatedGpu(const test::TempDir &dir, LoadedModel &cpu,
                             runtime::ExecutorOptions &options) {
  auto variant = loadVariant("tiny");
  ASSERT_TRUE(variant.ok()) << variant.status();
  std::string artifactDir = dir / "model.csa";
  ASSERT_EQ(compile("--variant=tiny --emit=artifact -o " + artifactDir, dir / "compile.log"), 0)
      << readAll(dir / "compile.log");
  ASSERT_NO_FATAL_FAILURE(loadModel(*variant, dir, artifactDir, 7, cpu));
  options.device = runtime::ExecutorOptions::Device::Cuda;
  options.keepCachesOnDevice = true;
  options.emulateGpu = true;
}

/// The GPU path's caches kept on the device between runs, with the device
/// emulated (ExecutorOptions::emulateGpu: host memory, host kernels, the same
/// bookkeeping): the same logits as the CPU executor step after step, the
/// same cache bytes once synced back; a copy of a held sequence and a
/// sequence held by another executor are refused, not run on stale bytes.
TEST(CachesOnDevice, StayBetweenRunsAndComeBackWithSyncToHost) {
  test::TempDir dir;
  LoadedModel cpu;
  runtime::ExecutorOptions options;
  ASSERT_NO_FATAL_FAILURE(loadTinyWithEmulatedGpu(dir, cpu, options));
  auto gpu = runtime::Executor::create(*cpu.art, *cpu.ckpt, options);
  auto other = runtime::Executor::create(*cpu.art, *cpu.ckpt, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE(other.ok()) << other.status();

  const std::vector<int32_t> prompt = {5, 9, 2, 7, 11, 3, 8, 1, 4, 6, 10, 12, 13};
  runtime::Sequence onCpu = cpu.executor->newSequence();
  runtime::Sequence held = (*gpu)->newSequence();
  auto a = cpu.executor->prefill(onCpu, prompt);
  auto b = (*gpu)->prefill(held, prompt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(firstDifference(*a, *b), -1);
  EXPECT_NE(held.cachesHeldBy, 0u);
  for (int32_t token : {3, 14, 15, 9, 2, 6}) {
    a = cpu.executor->decode(onCpu, token);
    b = (*gpu)->decode(held, token);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(firstDifference(*a, *b), -1) << "token " << token;
  }
  // A copy holds stale host bytes; another executor does not hold them.
  runtime::Sequence copy = held;
  auto refused = (*gpu)->decode(copy, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("copy"), std::string::npos) << refused.status();
  refused = (*other)->decode(held, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("another executor"), std::string::npos)
      << refused.status();
  EXPECT_FALSE((*other)->syncToHost(held).ok());
  // Back on the host: the CPU executor's bytes.
  ASSERT_TRUE((*gpu)->syncToHost(held).ok());
  EXPECT_EQ(held.cachesHeldBy, 0u);
  int compared = 0;
  for (const auto &[name, cache] : onCpu.caches) {
    const runtime::CacheState &h = held.caches.at(name);
    ASSERT_EQ(cache.bytes.size(), h.bytes.size()) << name;
    EXPECT_EQ(std::memcmp(cache.bytes.data(), h.bytes.data(), cache.bytes.size()), 0) << name;
    ++compared;
  }
  EXPECT_GT(compared, 0);
  // Synced, it runs anywhere: the next step on the other executor.
  a = cpu.executor->decode(onCpu, 1);
  b = (*other)->decode(held, 1);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ(firstDifference(*a, *b), -1);
}

/// Executor::reserve (csa-run sizes a run's caches at once): the global
/// caches hold the reserved positions' entries from the start, a prefill
/// keeps the reservation, no step of the run moves them (on the emulated GPU
/// path, which would reallocate their device copies), the logits are those
/// of an unreserved sequence on the CPU bit for bit, and a reservation is capped at
/// max_context and refused while a device holds the caches.
TEST(ReservedCaches, SizedOnceKeptByPrefillNeverMovedSameLogits) {
  test::TempDir dir;
  LoadedModel cpu;
  runtime::ExecutorOptions options;
  ASSERT_NO_FATAL_FAILURE(loadTinyWithEmulatedGpu(dir, cpu, options));
  auto gpu = runtime::Executor::create(*cpu.art, *cpu.ckpt, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();

  const std::vector<int32_t> prompt = {5, 9, 2, 7, 11, 3, 8, 1, 4, 6, 10, 12, 13};
  const std::vector<int32_t> tokens = {3, 14, 15, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3};
  const int64_t positions = int64_t(prompt.size() + tokens.size());
  runtime::Sequence plain = cpu.executor->newSequence();
  runtime::Sequence reserved = (*gpu)->newSequence();
  ASSERT_TRUE((*gpu)->reserve(reserved, positions).ok());
  std::map<std::string, size_t> sized;
  for (const artifact::CacheBuffer &b : (*gpu)->plan().caches)
    if (b.kind == artifact::CacheKind::GlobalCache) {
      sized[b.id] = size_t(b.entriesAt(positions) * b.entryBytes);
      EXPECT_EQ(reserved.caches.at(b.id).bytes.size(), sized[b.id]) << b.id;
    }
  ASSERT_FALSE(sized.empty());
  auto a = cpu.executor->prefill(plain, prompt);
  auto b = (*gpu)->prefill(reserved, prompt);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ(firstDifference(*a, *b), -1);
  std::map<std::string, const uint8_t *> at;
  for (const auto &[id, bytes] : sized) {
    EXPECT_EQ(reserved.caches.at(id).bytes.size(), bytes) << id << " after the prefill";
    at[id] = reserved.caches.at(id).bytes.data();
  }
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    a = cpu.executor->decode(plain, tokens[i]);
    b = (*gpu)->decode(reserved, tokens[i]);
    ASSERT_TRUE(a.ok() && b.ok()) << b.status();
    EXPECT_EQ(firstDifference(*a, *b), -1) << "step " << i;
  }
  for (const auto &[id, bytes] : sized)
    EXPECT_EQ(reserved.caches.at(id).bytes.data(), at[id]) << id << " moved";
  // Held by the device: refused; synced back, allowed; capped at max_context.
  auto refused = (*gpu)->reserve(reserved, 2 * positions);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("held on a device"), std::string::npos) << refused;
  ASSERT_TRUE((*gpu)->syncToHost(reserved).ok());
  ASSERT_TRUE((*gpu)->reserve(reserved, (*gpu)->plan().maxContext * 4).ok());
  EXPECT_EQ(reserved.reservedPositions, (*gpu)->plan().maxContext);
  for (const artifact::CacheBuffer &c : (*gpu)->plan().caches)
    if (c.kind == artifact::CacheKind::GlobalCache)
      EXPECT_EQ(reserved.caches.at(c.id).bytes.size(),
                size_t(c.entriesAt((*gpu)->plan().maxContext) * c.entryBytes))
          << c.id;
}

/// Executor::extend (chunked prefill, csa-run --prefill-chunk): a prompt run
/// in chunks longer than bounded replay's tail gives one prefill's logits,
/// caches and next steps bit for bit, also as a new turn after decode steps
/// (the whole history prefilled at once); a chunk no longer than the tail runs
/// the replayed layers on all its rows, as that many decode steps do, and
/// gives their bits; the emulated GPU path (rings kept on the device) gives
/// the CPU's.
TEST(ChunkedPrefill, EqualsOnePrefillAndShortChunksEqualDecodeSteps) {
  test::TempDir dir;
  auto variant = loadVariant("tiny");
  ASSERT_TRUE(variant.ok()) << variant.status();
  const std::string artifactDir = dir / "tiny.csa";
  ASSERT_EQ(compile("--variant=tiny --emit=artifact -o " + artifactDir, dir / "compile.log"), 0)
      << readAll(dir / "compile.log");
  LoadedModel model;
  ASSERT_NO_FATAL_FAILURE(loadModel(*variant, dir, artifactDir, 11, model));
  runtime::Executor &ex = *model.executor;
  const int64_t window = variant->config.windowSize;
  ASSERT_EQ(window, 8) << "the chunk lengths below assume tiny's window (the replay tail)";

  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 40; ++i)
    prompt.push_back((i * 37 + 11) % int32_t(ex.vocabSize()));
  auto part = [&](size_t from, size_t to) {
    return std::vector<int32_t>(prompt.begin() + from, prompt.begin() + to);
  };

  runtime::Sequence whole = ex.newSequence();
  auto want = ex.prefill(whole, prompt);
  ASSERT_TRUE(want.ok()) << want.status();
  // Chunks of 13, 9 and 18 tokens (a ring left mid-way, a compressor group
  // left open, both later chunks past the tail).
  runtime::Sequence chunked = ex.newSequence();
  ASSERT_TRUE(ex.prefill(chunked, part(0, 13)).ok());
  ASSERT_TRUE(ex.extend(chunked, part(13, 22)).ok());
  auto got = ex.extend(chunked, part(22, 40));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(chunked.position, 40);
  EXPECT_EQ(chunked.history, whole.history);
  EXPECT_EQ(firstDifference(*want, *got), -1);
  EXPECT_EQ(cacheDifference(ex.plan(), whole, chunked), "");
  for (int32_t token : {3, 14, 15}) {
    want = ex.decode(whole, token);
    got = ex.decode(chunked, token);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(firstDifference(*want, *got), -1) << "decode token " << token;
  }

  // A new turn after decode steps (the agent pattern): 12 tokens more equal
  // one prefill of the whole history.
  std::vector<int32_t> turn;
  for (int32_t i = 0; i < 12; ++i)
    turn.push_back((i * 53 + 7) % int32_t(ex.vocabSize()));
  got = ex.extend(chunked, turn);
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<int32_t> history = chunked.history;
  runtime::Sequence replayed = ex.newSequence();
  want = ex.prefill(replayed, history);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(firstDifference(*want, *got), -1) << "a turn after decode steps";
  EXPECT_EQ(cacheDifference(ex.plan(), replayed, chunked), "");

  // Short chunks (5 and 8 tokens, at most the tail) against decode steps.
  runtime::Sequence stepped = ex.newSequence(), extended = ex.newSequence();
  ASSERT_TRUE(ex.prefill(stepped, part(0, 13)).ok());
  ASSERT_TRUE(ex.prefill(extended, part(0, 13)).ok());
  for (auto [from, to] : {std::pair<size_t, size_t>{13, 18}, {18, 26}}) {
    for (size_t i = from; i < to; ++i) {
      want = ex.decode(stepped, prompt[i]);
      ASSERT_TRUE(want.ok()) << want.status();
    }
    got = ex.extend(extended, part(from, to));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(firstDifference(*want, *got), -1) << "the chunk " << from << ".." << to;
    EXPECT_EQ(cacheDifference(ex.plan(), stepped, extended), "") << "the chunk " << from << ".." << to;
  }

  // The GPU path's bookkeeping, the device emulated, caches held there.
  runtime::ExecutorOptions options;
  options.device = runtime::ExecutorOptions::Device::Cuda;
  options.keepCachesOnDevice = true;
  options.emulateGpu = true;
  auto gpu = runtime::Executor::create(*model.art, *model.ckpt, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  runtime::Sequence onGpu = (*gpu)->newSequence(), onCpu = ex.newSequence();
  for (auto [from, to] : {std::pair<size_t, size_t>{0, 13}, {13, 22}, {22, 27}, {27, 40}}) {
    want = from == 0 ? ex.prefill(onCpu, part(from, to)) : ex.extend(onCpu, part(from, to));
    got = from == 0 ? (*gpu)->prefill(onGpu, part(from, to)) : (*gpu)->extend(onGpu, part(from, to));
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(firstDifference(*want, *got), -1) << "the chunk " << from << ".." << to;
  }
  ASSERT_TRUE((*gpu)->syncToHost(onGpu).ok());
  EXPECT_EQ(cacheDifference(ex.plan(), onCpu, onGpu), "");

  // Out of order and out of range.
  runtime::Sequence fresh = ex.newSequence();
  auto refused = ex.extend(fresh, {1, 2});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  refused = ex.extend(chunked, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  refused = ex.extend(chunked, {int32_t(ex.vocabSize())});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  refused = ex.extend(chunked, std::vector<int32_t>(size_t(ex.plan().maxContext), 1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(chunked.position, 55);
  EXPECT_EQ(chunked.history.size(), 55u);
}

} // namespace
} // namespace csa

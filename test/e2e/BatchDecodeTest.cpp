//===- BatchDecodeTest.cpp - Several sequences in one decode step ---------===//
//
// Executor::decodeBatch runs the decode plan once for several sequences.
// On the CPU every row must equal decode() of its sequence alone bit for bit,
// and every cache byte must too: the sequences here sit at other positions
// (other ring states, compressor groups completing in some and not in
// others), so both kinds of steps and the moves between them are exercised.
// The emulated GPU path (caches held on the device) must give the CPU's bits.
//
//===----------------------------------------------------------------------===//
#include "models/variants/Variants.h"
#include "runtime/executor/Executor.h"
#include "runtime/sampling/Sampling.h"
#include "test/e2e/E2eSupport.h"
#include "test/unit/support/TempDir.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace csa {
namespace {

std::vector<int32_t> promptOf(int64_t length, int32_t salt, int64_t vocab) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < length; ++i)
    p.push_back(int32_t((i * 37 + salt * 11 + 5) % vocab));
  return p;
}

class BatchDecode : public ::testing::Test {
protected:
  void SetUp() override {
    auto variant = loadVariant("tiny");
    ASSERT_TRUE(variant.ok()) << variant.status();
    artifactDir = dir / "tiny.csa";
    ASSERT_EQ(compile("--variant=tiny --emit=artifact -o " + artifactDir, dir / "compile.log"), 0)
        << readAll(dir / "compile.log");
    ASSERT_NO_FATAL_FAILURE(loadModel(*variant, dir, artifactDir, 5, model));
  }
  test::TempDir dir;
  std::string artifactDir;
  LoadedModel model;
};

/// Six sequences prefilled with 5, 13, 22, 9, 13 and 13 tokens, decoded one
/// by one and as one batch (all six, then the three at one position, whose
/// values a step reads may all be put together): the same logits and caches
/// bit for bit, on the CPU and on the emulated GPU.
TEST_F(BatchDecode, EachRowEqualsItsSequenceDecodedAlone) {
  runtime::Executor &cpu = *model.executor;
  runtime::ExecutorOptions gpuOptions;
  gpuOptions.device = runtime::ExecutorOptions::Device::Cuda;
  gpuOptions.emulateGpu = true;
  gpuOptions.keepCachesOnDevice = true;
  auto gpu = runtime::Executor::create(*model.art, *model.ckpt, gpuOptions);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int64_t vocab = cpu.vocabSize();
  const std::vector<int64_t> lengths = {5, 13, 22, 9, 13, 13};
  std::vector<runtime::Sequence> alone, together, onGpu;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const std::vector<int32_t> prompt = promptOf(lengths[i], int32_t(i), vocab);
    for (auto *group : {&alone, &together, &onGpu}) {
      group->push_back(cpu.newSequence());
      auto logits = (group == &onGpu ? **gpu : cpu).prefill(group->back(), prompt);
      ASSERT_TRUE(logits.ok()) << logits.status();
    }
  }
  for (int step = 0; step < 9; ++step) {
    // From step 5 on only the sequences at one position (the others as if
    // stopped).
    const std::vector<size_t> members =
        step < 5 ? std::vector<size_t>{0, 1, 2, 3, 4, 5} : std::vector<size_t>{1, 4, 5};
    const size_t count = members.size();
    std::vector<runtime::Sequence *> batch, gpuBatch;
    std::vector<int32_t> tokens;
    for (size_t i : members) {
      batch.push_back(&together[i]);
      gpuBatch.push_back(&onGpu[i]);
      tokens.push_back(int32_t((step * 29 + int(i) * 7 + 3) % vocab));
    }
    auto rows = cpu.decodeBatch(batch, tokens);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->size(), count * size_t(vocab));
    auto gpuRows = (*gpu)->decodeBatch(gpuBatch, tokens);
    ASSERT_TRUE(gpuRows.ok()) << gpuRows.status();
    EXPECT_EQ(firstDifference(*rows, *gpuRows), -1) << "step " << step;
    for (size_t row = 0; row < count; ++row) {
      const size_t i = members[row];
      auto want = cpu.decode(alone[i], tokens[row]);
      ASSERT_TRUE(want.ok()) << want.status();
      const std::vector<float> got(rows->begin() + int64_t(row) * vocab,
                                   rows->begin() + int64_t(row + 1) * vocab);
      EXPECT_EQ(firstDifference(*want, got), -1) << "step " << step << ", sequence " << i;
      EXPECT_EQ(together[i].position, alone[i].position);
      EXPECT_EQ(together[i].history, alone[i].history);
    }
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    EXPECT_EQ(cacheDifference(cpu.plan(), alone[i], together[i]), "") << "sequence " << i;
    ASSERT_TRUE((*gpu)->syncToHost(onGpu[i]).ok());
    EXPECT_EQ(cacheDifference(cpu.plan(), alone[i], onGpu[i]), "") << "sequence " << i;
  }
}

/// On the GPU path (emulated) a batch step's per-sequence steps put each
/// sequence on a graph lane of its own (ExecutorOptions::sequenceLanes):
/// launches on branches, which a run without them does not have, and the
/// same bits either way.
TEST_F(BatchDecode, SequencesRunOnGraphLanesWithTheSameBits) {
  std::vector<std::vector<float>> rowsOf;
  std::vector<int64_t> branchLaunches;
  for (bool lanes : {true, false}) {
    runtime::ExecutorOptions o;
    o.device = runtime::ExecutorOptions::Device::Cuda;
    o.emulateGpu = true;
    o.keepCachesOnDevice = true;
    o.overlapSteps = false; // only the sequences' lanes
    o.sequenceLanes = lanes;
    auto gpu = runtime::Executor::create(*model.art, *model.ckpt, o);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    std::vector<runtime::Sequence> seqs;
    const std::vector<int64_t> lengths = {5, 13, 22, 9};
    for (size_t i = 0; i < lengths.size(); ++i) {
      seqs.push_back((*gpu)->newSequence());
      auto logits =
          (*gpu)->prefill(seqs.back(), promptOf(lengths[i], int32_t(i), (*gpu)->vocabSize()));
      ASSERT_TRUE(logits.ok()) << logits.status();
    }
    std::vector<runtime::Sequence *> batch;
    for (auto &s : seqs)
      batch.push_back(&s);
    std::vector<float> all;
    int64_t onBranches = 0;
    for (int step = 0; step < 4; ++step) {
      auto rows = (*gpu)->decodeBatch(batch, {3, int32_t(step + 7), 11, 2});
      ASSERT_TRUE(rows.ok()) << rows.status();
      all.insert(all.end(), rows->begin(), rows->end());
      onBranches += (*gpu)->lastTiming().gpu.branchLaunches;
    }
    rowsOf.push_back(std::move(all));
    branchLaunches.push_back(onBranches);
  }
  EXPECT_GT(branchLaunches[0], 0);
  EXPECT_EQ(branchLaunches[1], 0);
  EXPECT_EQ(firstDifference(rowsOf[0], rowsOf[1]), -1);
}

/// decodeGreedy gives each sequence the token greedyToken picks from its
/// decode logits, alone and in a batch, on the CPU and on the emulated GPU
/// (where the head's greedy kernel picks and only the ids come back).
TEST_F(BatchDecode, GreedyStepsGiveTheLogitsGreedyTokens) {
  runtime::Executor &cpu = *model.executor;
  runtime::ExecutorOptions gpuOptions;
  gpuOptions.device = runtime::ExecutorOptions::Device::Cuda;
  gpuOptions.emulateGpu = true;
  gpuOptions.keepCachesOnDevice = true;
  auto gpu = runtime::Executor::create(*model.art, *model.ckpt, gpuOptions);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int64_t vocab = cpu.vocabSize();
  for (runtime::Executor *ex : {&cpu, gpu->get()}) {
    const std::vector<int64_t> lengths = {5, 13, 22};
    std::vector<runtime::Sequence> withLogits, greedy;
    for (size_t i = 0; i < lengths.size(); ++i)
      for (auto *group : {&withLogits, &greedy}) {
        group->push_back(ex->newSequence());
        ASSERT_TRUE(ex->prefill(group->back(), promptOf(lengths[i], int32_t(i), vocab)).ok());
      }
    for (int step = 0; step < 3; ++step) {
      std::vector<runtime::Sequence *> batch, want;
      std::vector<int32_t> tokens;
      for (size_t i = 0; i < lengths.size(); ++i) {
        batch.push_back(&greedy[i]);
        want.push_back(&withLogits[i]);
        tokens.push_back(int32_t((step * 13 + int(i) * 5 + 1) % vocab));
      }
      // All three together, then the first alone.
      const size_t count = step < 2 ? batch.size() : 1;
      batch.resize(count);
      want.resize(count);
      tokens.resize(count);
      auto ids = ex->decodeGreedy(batch, tokens);
      ASSERT_TRUE(ids.ok()) << ids.status();
      ASSERT_EQ(ids->size(), count);
      auto rows = count > 1 ? ex->decodeBatch(want, tokens) : ex->decode(*want[0], tokens[0]);
      ASSERT_TRUE(rows.ok()) << rows.status();
      for (size_t j = 0; j < count; ++j) {
        auto pick = sampling::greedyToken(absl::MakeConstSpan(rows->data() + j * size_t(vocab),
                                                              size_t(vocab)));
        ASSERT_TRUE(pick.ok()) << pick.status();
        EXPECT_EQ((*ids)[j], *pick) << "step " << step << ", sequence " << j;
      }
      if (ex != &cpu) {
        // The emulated GPU: one download a greedy step, the ids.
        ASSERT_TRUE(ex->decodeGreedy(batch, tokens).ok());
        EXPECT_EQ(ex->lastTiming().gpu.downloads, 1);
        ASSERT_TRUE((count > 1 ? ex->decodeBatch(want, tokens) : ex->decode(*want[0], tokens[0]))
                        .ok());
      }
    }
  }
}

/// Bad batches are refused with a message naming the problem, and leave
/// the sequences as they were.
TEST_F(BatchDecode, RefusesBadBatches) {
  runtime::Executor &ex = *model.executor;
  runtime::Sequence a = ex.newSequence(), b = ex.newSequence(), fresh = ex.newSequence();
  ASSERT_TRUE(ex.prefill(a, {1, 2, 3}).ok());
  ASSERT_TRUE(ex.prefill(b, {4, 5}).ok());
  auto refused = [&](std::vector<runtime::Sequence *> seqs, std::vector<int32_t> tokens,
                     const std::string &words) {
    auto r = ex.decodeBatch(seqs, tokens);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status();
  };
  refused({&a, &b}, {1}, "a token for each sequence");
  refused({}, {}, "at least one");
  refused({&a, &a}, {1, 2}, "also an earlier one");
  refused({&a, nullptr}, {1, 2}, "null");
  refused({&a, &fresh}, {1, 2}, "sequence 1: decode needs a prefill first");
  refused({&a, &b}, {1, int32_t(ex.vocabSize())}, "sequence 1: token id");
  EXPECT_EQ(a.position, 3);
  EXPECT_EQ(b.position, 2);
  EXPECT_EQ(a.history.size(), 3u);

  runtime::ExecutorOptions dumping;
  dumping.dumpDecisions = dir / "decisions";
  std::filesystem::create_directories(dumping.dumpDecisions);
  auto dumper = runtime::Executor::create(*model.art, *model.ckpt, dumping);
  ASSERT_TRUE(dumper.ok()) << dumper.status();
  auto r = (*dumper)->decodeBatch({&a, &b}, {1, 2});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("one by one"), std::string::npos) << r.status();
}

} // namespace
} // namespace csa

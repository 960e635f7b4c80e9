//===- PrefixCacheTest.cpp - The agent loop's prefix cache on tiny --------===//
//
// runtime/prefix/PrefixCache.h on the CPU: a global + local hit continues
// the saved sequence bit for bit; a global-only hit (another process, an
// expired snapshot) keeps the stored global entries and rebuilds the rings
// by replay; corrupt, truncated and foreign entries are removed, never used.
//
//===----------------------------------------------------------------------===//
#include "runtime/prefix/PrefixCache.h"
#include "test/e2e/E2eSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace csa {
namespace {

namespace fs = std::filesystem;
using runtime::prefix::PrefixCache;
using runtime::prefix::PrefixCacheOptions;
using runtime::prefix::RestoreCase;

class PrefixCacheTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir = new test::TempDir();
    auto variant = loadVariant("tiny");
    ASSERT_TRUE(variant.ok()) << variant.status();
    const std::string artifactDir = *dir / "tiny.csa";
    ASSERT_EQ(compile("--variant=tiny --emit=artifact -o " + artifactDir, *dir / "compile.log"), 0)
        << readAll(*dir / "compile.log");
    model = new LoadedModel();
    loadModel(*variant, *dir, artifactDir, 5, *model);
  }
  static void TearDownTestSuite() {
    delete model;
    delete dir;
  }

  runtime::Executor &ex() { return *model->executor; }
  absl::StatusOr<std::unique_ptr<PrefixCache>> openCache(PrefixCacheOptions o) {
    return PrefixCache::open(*model->art, runtime::prefix::weightsFingerprint(*model->ckpt, {}),
                             std::move(o));
  }
  const artifact::Artifact &art() { return *model->art; }

  std::vector<int32_t> tokens(int32_t count, int32_t salt) {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < count; ++i)
      out.push_back((i * 37 + salt * 11 + 5) % int32_t(ex().vocabSize()));
    return out;
  }

  /// A conversation's first turn: `history` prefilled, two tokens decoded.
  runtime::Sequence firstTurn(const std::vector<int32_t> &history) {
    runtime::Sequence seq = ex().newSequence();
    auto logits = ex().prefill(seq, history);
    EXPECT_TRUE(logits.ok()) << logits.status();
    EXPECT_TRUE(ex().decode(seq, 3).ok());
    EXPECT_TRUE(ex().decode(seq, 4).ok());
    return seq;
  }

  std::vector<std::string> warnings;
  PrefixCacheOptions options(const std::string &directory) {
    PrefixCacheOptions o;
    o.directory = directory;
    o.blockTokens = 16; // tiny plans 128 tokens of context
    o.warn = [this](const std::string &w) { warnings.push_back(w); };
    return o;
  }

  static test::TempDir *dir;
  static LoadedModel *model;
};
test::TempDir *PrefixCacheTest::dir = nullptr;
LoadedModel *PrefixCacheTest::model = nullptr;

/// The sequence saved after a turn, restored for the next request (its
/// history and more tokens), continues bit for bit: the same logits for the
/// new tokens and the same caches as the sequence kept in memory.
TEST_F(PrefixCacheTest, GlobalAndLocalHitContinuesBitExactly) {
  test::TempDir cacheDir;
  auto cache = openCache(options(cacheDir / "cache"));
  ASSERT_TRUE(cache.ok()) << cache.status();
  const int64_t block = (*cache)->stats().blockTokens;
  runtime::Sequence kept = firstTurn(tokens(int32_t(2 * block + 9), 1));
  ASSERT_TRUE((*cache)->save(kept).ok());
  EXPECT_EQ((*cache)->stats().blocksWritten, 2);

  std::vector<int32_t> request = kept.history, turn = tokens(23, 2);
  request.push_back(4);
  request.insert(request.end(), turn.begin(), turn.end());
  auto restored = (*cache)->restore(ex(), request);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->kind, RestoreCase::GlobalAndLocal);
  EXPECT_EQ(restored->restoredTokens, kept.position);
  EXPECT_EQ(cacheDifference(ex().plan(), kept, restored->sequence), "");
  ASSERT_EQ(restored->suffix.size(), turn.size() + 1);

  auto want = ex().extend(kept, restored->suffix);
  auto got = ex().extend(restored->sequence, restored->suffix);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status();
  EXPECT_EQ(firstDifference(*want, *got), -1);
  EXPECT_EQ(cacheDifference(ex().plan(), kept, restored->sequence), "");
  EXPECT_TRUE(warnings.empty());
}

/// Another process (a new cache over the directory, no snapshot): the
/// stored blocks are restored and the rings rebuilt by replaying the tokens
/// before the last block boundary; the global entries are the stored ones.
/// With persistLocal the snapshot on disk makes it a global + local hit.
TEST_F(PrefixCacheTest, GlobalOnlyHitReplaysAndKeepsGlobalEntries) {
  test::TempDir cacheDir;
  runtime::Sequence kept;
  {
    PrefixCacheOptions o = options(cacheDir / "cache");
    o.persistLocal = true;
    auto writer = openCache(o);
    ASSERT_TRUE(writer.ok());
    kept = firstTurn(tokens(int32_t(3 * (*writer)->stats().blockTokens + 5), 3));
    ASSERT_TRUE((*writer)->save(kept).ok());
  }
  std::vector<int32_t> request = kept.history, turn = tokens(30, 4);
  request.insert(request.end(), turn.begin(), turn.end());

  auto reader = openCache(options(cacheDir / "cache"));
  ASSERT_TRUE(reader.ok());
  const int64_t block = (*reader)->stats().blockTokens;
  auto restored = (*reader)->restore(ex(), request);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->kind, RestoreCase::GlobalOnly);
  EXPECT_EQ(restored->restoredTokens, 3 * block);
  EXPECT_GT(restored->replayedTokens, 0);
  EXPECT_EQ(restored->suffix.size(), request.size() - size_t(3 * block));
  const runtime::Sequence &seq = restored->sequence;
  EXPECT_EQ(seq.position, 3 * block);
  for (const artifact::CacheBuffer &b : ex().plan().caches) {
    const runtime::CacheState &c = seq.caches.at(b.id);
    if (b.kind == artifact::CacheKind::GlobalCache) {
      ASSERT_EQ(c.mainEntries, 3 * block / b.ratio) << b.id;
      EXPECT_EQ(std::memcmp(c.bytes.data(), kept.caches.at(b.id).bytes.data(),
                            size_t(c.mainEntries * b.entryBytes)),
                0)
          << b.id << ": the stored global entries are kept";
    } else if (b.kind == artifact::CacheKind::SwaRing) {
      EXPECT_EQ(c.ringEnd, 3 * block) << b.id;
    }
  }
  runtime::Sequence next = restored->sequence;
  auto logits = ex().extend(next, restored->suffix);
  ASSERT_TRUE(logits.ok()) << logits.status();
  for (float v : *logits)
    ASSERT_TRUE(std::isfinite(v));

  // The V4-style policy: the snapshot was written too.
  PrefixCacheOptions o = options(cacheDir / "cache");
  o.persistLocal = true;
  auto withLocal = openCache(o);
  ASSERT_TRUE(withLocal.ok());
  restored = (*withLocal)->restore(ex(), request);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->kind, RestoreCase::GlobalAndLocal);
  EXPECT_EQ(cacheDifference(ex().plan(), kept, restored->sequence), "");
  EXPECT_TRUE(warnings.empty());
}

/// Entries saved with other weights (another fingerprint) are never used:
/// the same tokens restore nothing.
TEST_F(PrefixCacheTest, AnotherCheckpointNeverMatches) {
  test::TempDir cacheDir;
  auto cache = openCache(options(cacheDir / "cache"));
  ASSERT_TRUE(cache.ok());
  runtime::Sequence kept = firstTurn(tokens(int32_t(2 * (*cache)->stats().blockTokens + 3), 9));
  ASSERT_TRUE((*cache)->save(kept).ok());
  std::vector<int32_t> request = kept.history;
  request.push_back(1);
  std::vector<int64_t> otherMap(size_t(ex().vocabSize()), 1);
  auto other = PrefixCache::open(
      art(), runtime::prefix::weightsFingerprint(*model->ckpt, otherMap), options(cacheDir / "cache"));
  ASSERT_TRUE(other.ok());
  auto restored = (*other)->restore(ex(), request);
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(restored->kind, RestoreCase::Cold);
  EXPECT_NE(runtime::prefix::weightsFingerprint(*model->ckpt, {}),
            runtime::prefix::weightsFingerprint(*model->ckpt, otherMap));
  EXPECT_TRUE(warnings.empty());
  EXPECT_FALSE(PrefixCache::open(art(), "not a hash", options("")).ok());
}

/// A snapshot past its time-to-live is gone: the same request becomes a
/// global-only hit.
TEST_F(PrefixCacheTest, ExpiredLocalStateFallsBackToGlobalOnly) {
  auto clock = std::chrono::steady_clock::now();
  PrefixCacheOptions o = options("");
  o.localTtl = std::chrono::minutes(5);
  o.now = [&] { return clock; };
  auto cache = openCache(o);
  ASSERT_TRUE(cache.ok());
  runtime::Sequence kept = firstTurn(tokens(int32_t((*cache)->stats().blockTokens + 30), 5));
  ASSERT_TRUE((*cache)->save(kept).ok());
  std::vector<int32_t> request = kept.history;
  request.push_back(9);
  clock += std::chrono::minutes(4);
  auto restored = (*cache)->restore(ex(), request);
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(restored->kind, RestoreCase::GlobalAndLocal);
  clock += std::chrono::minutes(6);
  restored = (*cache)->restore(ex(), request);
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(restored->kind, RestoreCase::GlobalOnly);
  EXPECT_EQ((*cache)->stats().snapshotsExpired, 1);
}

/// A block with a flipped byte, a truncated block, one grown to 64 MiB and
/// another key's block under a key's name are each removed with a warning
/// and not used: the restored prefix ends before them.
TEST_F(PrefixCacheTest, CorruptTruncatedAndForeignBlocksAreRemoved) {
  test::TempDir cacheDir;
  const std::string root = cacheDir / "cache";
  std::vector<int32_t> request;
  std::vector<fs::path> files;
  int64_t block = 0;
  {
    auto writer = openCache(options(root));
    ASSERT_TRUE(writer.ok());
    block = (*writer)->stats().blockTokens;
    runtime::Sequence kept = firstTurn(tokens(int32_t(3 * block + 5), 6));
    ASSERT_TRUE((*writer)->save(kept).ok());
    request = kept.history;
    request.push_back(1);
  }
  for (const auto &e : fs::directory_iterator(root + "/blocks"))
    files.push_back(e.path());
  ASSERT_EQ(files.size(), 3u);
  // Which file is which block: restore with each removed in turn is costly;
  // read the block index from the restore's outcome instead.
  auto damage = [&](const std::function<void(const fs::path &)> &how) -> int64_t {
    int64_t shortest = 3 * block;
    for (const fs::path &f : files) {
      const std::string saved = readAll(f.string());
      how(f);
      warnings.clear();
      auto cache = openCache(options(root));
      auto restored = (*cache)->restore(ex(), request);
      EXPECT_TRUE(restored.ok());
      EXPECT_LT(restored->restoredTokens, 3 * block) << f;
      EXPECT_EQ(warnings.size(), 1u) << f;
      EXPECT_FALSE(fs::exists(f)) << f << " is removed";
      shortest = std::min(shortest, restored->restoredTokens);
      std::ofstream(f, std::ios::binary) << saved;
    }
    return shortest;
  };
  EXPECT_EQ(damage([](const fs::path &f) {
              std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
              io.seekp(400);
              io.put('\x5a');
            }),
            0);
  EXPECT_EQ(damage([](const fs::path &f) { fs::resize_file(f, fs::file_size(f) / 2); }), 0);
  // Grown past any block's size: not even read.
  EXPECT_EQ(damage([](const fs::path &f) { fs::resize_file(f, uint64_t(64) << 20); }), 0);
  const std::string other = readAll(files[1].string());
  EXPECT_EQ(damage([&](const fs::path &f) {
              std::ofstream(f, std::ios::binary) << (f == files[1] ? readAll(files[0].string()) : other);
            }),
            0);
  // Whole again: every block is used.
  auto cache = openCache(options(root));
  auto restored = (*cache)->restore(ex(), request);
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(restored->restoredTokens, 3 * block);
}

/// The disk tier stays within its budget, dropping the least recently used
/// blocks first.
TEST_F(PrefixCacheTest, DiskBudgetEvictsLeastRecentlyUsed) {
  test::TempDir cacheDir;
  PrefixCacheOptions o = options(cacheDir / "cache");
  auto probe = openCache(o);
  ASSERT_TRUE(probe.ok());
  const int64_t block = (*probe)->stats().blockTokens;
  runtime::Sequence first = firstTurn(tokens(int32_t(2 * block + 1), 7));
  ASSERT_TRUE((*probe)->save(first).ok());
  const uint64_t twoBlocks = (*probe)->stats().diskBytes;
  ASSERT_GT(twoBlocks, 0u);
  o.diskBytes = twoBlocks + twoBlocks / 4; // room for two blocks and a half
  auto cache = openCache(o);
  ASSERT_TRUE(cache.ok());
  runtime::Sequence second = firstTurn(tokens(int32_t(2 * block + 1), 8));
  ASSERT_TRUE((*cache)->save(second).ok());
  EXPECT_LE((*cache)->stats().diskBytes, o.diskBytes);
  EXPECT_EQ(std::distance(fs::directory_iterator(cacheDir / "cache/blocks"),
                          fs::directory_iterator{}),
            2);
  // The newer conversation's blocks are the ones kept.
  auto fresh = openCache(options(cacheDir / "cache"));
  std::vector<int32_t> request = second.history;
  request.push_back(2);
  auto restored = (*fresh)->restore(ex(), request);
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(restored->restoredTokens, 2 * block);
}

} // namespace
} // namespace csa

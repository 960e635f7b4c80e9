//===- PrefixCache.h - Global KV kept, local state expired and replayed -*- C++ -*-===//
//
// The agent loop's cache (docs/prefix-cache.md): a conversation's history is
// run once, and the next turn starts from what the cache restores.
//
// - Global blocks (persisted): the global caches' entries (the Full source
//   layers' main-KV rows and index keys) of each block of `blockTokens`
//   tokens, keyed by a SHA-256 chain over the blocks' token ids, the model
//   hash, the schedule hash and the weights' fingerprint (a prefix of another
//   model, schedule or checkpoint never matches). Two tiers: host memory and a directory, each with a byte
//   budget and LRU eviction. A block file is written to a temporary name,
//   fsynced and renamed (readers never see half of one), carries a SHA-256
//   of its bytes, and is verified when read: a corrupt or truncated block is
//   removed with a warning and the prefix ends before it.
// - Local snapshots (host memory only, never on disk unless `persistLocal`):
//   the SWA rings, the compressor states and the global entries of the last,
//   partial block of a sequence at the end of a turn, kept for `localTtl`.
//
// Restoring a request's tokens gives one of three cases:
// - GlobalAndLocal: a snapshot of a prefix of the request is in the pool and
//   the global blocks before it are stored: the sequence is the one saved,
//   byte for byte (on the CPU the run continues bit-exactly).
// - GlobalOnly: the blocks of a prefix are stored but no snapshot: the
//   sequence is rebuilt at the last stored block boundary P by running the
//   `replay` tokens before P through every layer from empty rings (encoder
//   SWA bounded replay: the local state is approximate) and then putting the
//   stored global entries of those tokens back (global KV is not replaced).
// - Cold: nothing stored; the request is prefilled from position 0.
// At least one token of a request is always left to run (its logits).
//
// Plain C++17 and POSIX, no LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_PREFIX_PREFIXCACHE_H
#define CSA_RUNTIME_PREFIX_PREFIXCACHE_H

#include "runtime/artifact/Artifact.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/executor/Executor.h"

#include "absl/status/statusor.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace csa::runtime::prefix {

struct PrefixCacheOptions {
  /// The disk tier's directory (created if missing); empty: memory only.
  std::string directory;
  /// Byte budgets of the tiers; past one, the least recently used entries
  /// go (on disk: by modification time, which a read refreshes).
  uint64_t diskBytes = uint64_t(16) << 30;
  uint64_t memoryBytes = uint64_t(2) << 30;
  uint64_t localBytes = uint64_t(2) << 30;
  /// How long a local snapshot is kept after its last use.
  std::chrono::duration<double> localTtl = std::chrono::minutes(10);
  /// Tokens of a global block: 0 chooses 64 rounded up to a multiple of
  /// every compression ratio; another value must be such a multiple.
  int64_t blockTokens = 0;
  /// Tokens a global-only hit replays before the block boundary it restores
  /// at: 0 is the widest SWA window rounded up to a multiple of the ratios
  /// (the released 128); another value must be such a multiple. Longer
  /// replays rebuild the local state more exactly (20 layers x 128 would be
  /// exact on the released model) and cost more.
  int64_t replayTokens = 0;
  /// Also write local snapshots to the disk tier (the V4-style policy that
  /// persists SWA state, to measure what it costs; cross-process hits are
  /// then exact).
  bool persistLocal = false;
  /// Warnings (a corrupt entry removed, a write that failed); empty: stderr.
  std::function<void(const std::string &)> warn;
  /// The clock of the local pool's time-to-live (tests move it).
  std::function<std::chrono::steady_clock::time_point()> now;
};

enum class RestoreCase { Cold, GlobalAndLocal, GlobalOnly };
/// "cold", "global+local", "global-only".
const char *restoreCaseName(RestoreCase c);

struct Restored {
  Sequence sequence; ///< ready for Executor::extend (prefill when Cold)
  RestoreCase kind = RestoreCase::Cold;
  int64_t restoredTokens = 0; ///< the request's tokens the sequence holds
  int64_t replayedTokens = 0; ///< GlobalOnly: tokens run again to rebuild
  std::vector<int32_t> suffix; ///< the request's tokens still to run
  double seconds = 0;          ///< reading the tiers and replaying
};

/// What the cache holds and has done (csa-run's report, the benchmarks).
struct PrefixCacheStats {
  int64_t blockTokens = 0;
  int64_t globalBytesPerToken = 0; ///< a block's global entries / its tokens
  int64_t localSnapshotBytes = 0;  ///< rings and compressor states alone
  int64_t blocksWritten = 0, blocksRead = 0, blocksEvicted = 0;
  int64_t snapshotsSaved = 0, snapshotsExpired = 0, corruptRemoved = 0;
  uint64_t memoryBytes = 0, diskBytes = 0, localBytes = 0;
  uint64_t bytesWrittenToDisk = 0;
};

/// What decides a cache's bytes besides the artifact: the weights and the
/// Engram token map the executor runs with. A SHA-256 over every tensor's
/// name, dtype, shape and four 32-byte windows spread over its bytes (a
/// few pages a tensor, however large the checkpoint), then the map's ids.
std::string weightsFingerprint(const checkpoint::Checkpoint &weights,
                               const std::vector<int64_t> &engramTokenMap);

class PrefixCache {
public:
  /// A cache for `artifact`'s plan, model hash and schedule hash, and the
  /// weights of `fingerprint` (weightsFingerprint). Errors: a block size or
  /// replay length that is no multiple of the ratios, a directory that
  /// cannot be made.
  static absl::StatusOr<std::unique_ptr<PrefixCache>>
  open(const artifact::Artifact &artifact, std::string fingerprint, PrefixCacheOptions options);
  ~PrefixCache();

  /// Stores what `sequence` holds (its history is its tokens): the global
  /// blocks of every complete block not stored yet, and a local snapshot at
  /// its position. The sequence's caches must be on the host
  /// (Executor::syncToHost).
  absl::Status save(const Sequence &sequence);

  /// The longest usable stored prefix of `tokens` (see above), run through
  /// `executor` where local state is rebuilt.
  absl::StatusOr<Restored> restore(Executor &executor, const std::vector<int32_t> &tokens);

  const PrefixCacheStats &stats() const;
  /// Drops every local snapshot (as if their time-to-live had passed).
  void expireLocalState();

private:
  struct Impl;
  explicit PrefixCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace csa::runtime::prefix

#endif // CSA_RUNTIME_PREFIX_PREFIXCACHE_H

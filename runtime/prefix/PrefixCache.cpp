//===- PrefixCache.cpp - Global blocks, local snapshots, restore ----------===//
//
// Entry files (docs/prefix-cache.md): a magic, the model and schedule
// hashes, what the entry covers, the token ids it covers, the cache rows,
// then the SHA-256 of all that. Blocks: DIR/blocks/<key>.blk; snapshots
// (persistLocal only): DIR/local/<position>-<key>.snap. Temporary files are
// dot files beside them (AtomicFile.h); ones left by a killed writer are
// removed an hour later.
//
//===----------------------------------------------------------------------===//
#include "runtime/prefix/PrefixCache.h"

#include "runtime/artifact/Sha256.h"
#include "runtime/support/AtomicFile.h"

#include "absl/strings/str_cat.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <unordered_map>

namespace csa::runtime::prefix {
namespace {

namespace fs = std::filesystem;
using artifact::CacheBuffer;
using artifact::CacheKind;
using Clock = std::chrono::steady_clock;

constexpr char kBlockMagic[8] = {'C', 'S', 'A', 'P', 'F', 'X', 'B', '1'};
constexpr char kLocalMagic[8] = {'C', 'S', 'A', 'P', 'F', 'X', 'L', '1'};

/// Little-endian fields appended to a string (the hosts csa runs on are
/// little-endian; the artifact's formats assume it too).
struct Writer {
  std::string out;
  template <typename T> void put(T v) { out.append(reinterpret_cast<const char *>(&v), sizeof v); }
  void bytes(const void *p, size_t n) { out.append(static_cast<const char *>(p), n); }
  void text(const std::string &s) {
    put<uint32_t>(uint32_t(s.size()));
    out += s;
  }
  /// The SHA-256 of everything so far, appended.
  std::string seal() {
    artifact::Sha256 h;
    h.update(out);
    const artifact::Sha256Digest d = h.finish();
    out.append(reinterpret_cast<const char *>(d.data()), d.size());
    return std::move(out);
  }
};

/// Reads what Writer wrote; every read is bounds-checked (a short or
/// corrupt entry fails instead of reading past it).
struct Reader {
  std::string_view in;
  size_t at = 0;
  bool ok = true;
  template <typename T> T get() {
    T v{};
    if (!ok || in.size() - at < sizeof v) {
      ok = false;
      return v;
    }
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string_view bytes(uint64_t n) {
    if (!ok || in.size() - at < n) {
      ok = false;
      return {};
    }
    std::string_view v = in.substr(at, size_t(n));
    at += size_t(n);
    return v;
  }
  std::string text() {
    const uint32_t n = get<uint32_t>();
    return n > 4096 ? (ok = false, std::string()) : std::string(bytes(n));
  }
};

/// Whether `entry` ends with the SHA-256 of what comes before; the body.
std::optional<std::string_view> verifiedBody(std::string_view entry) {
  if (entry.size() < 32 + 8)
    return std::nullopt;
  const std::string_view body = entry.substr(0, entry.size() - 32);
  artifact::Sha256 h;
  h.update(body);
  const artifact::Sha256Digest d = h.finish();
  if (std::memcmp(d.data(), entry.data() + body.size(), 32) != 0)
    return std::nullopt;
  return body;
}

/// A file's bytes; an empty string when it is longer than `most` (not
/// read: a planted or runaway file fails the entry's checks instead).
std::optional<std::string> readWhole(const std::string &path, uint64_t most) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec)
    return std::nullopt;
  if (size > most)
    return std::string();
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad())
    return std::nullopt;
  return text;
}

/// The local state of a sequence at the end of a turn: rings and
/// compressor states whole, and the global entries after the last complete
/// block (`tail`: bytes from entry tailFirst on; mainEntries/indexEntries
/// as the sequence had them).
struct Snapshot {
  int64_t position = 0;
  std::vector<int32_t> tokens;
  std::map<std::string, CacheState> local, tail;
  std::map<std::string, int64_t> tailFirst;
  Clock::time_point lastUse;
  uint64_t bytes = 0;
};

} // namespace

std::string weightsFingerprint(const checkpoint::Checkpoint &weights,
                               const std::vector<int64_t> &engramTokenMap) {
  artifact::Sha256 h;
  std::vector<std::string> names = weights.names();
  std::sort(names.begin(), names.end());
  for (const std::string &name : names) {
    auto t = weights.tensor(name);
    if (!t.ok())
      continue;
    h.update(name);
    const uint32_t dtype = uint32_t(t->dtype);
    h.update(&dtype, sizeof dtype);
    h.update(t->shape.data(), t->shape.size() * sizeof(int64_t));
    h.update(&t->bytes, sizeof t->bytes);
    constexpr uint64_t kWindow = 32;
    if (t->bytes <= 4 * kWindow) {
      h.update(t->data, size_t(t->bytes));
      continue;
    }
    for (uint64_t at : {uint64_t(0), t->bytes / 3, 2 * (t->bytes / 3), t->bytes - kWindow})
      h.update(t->data + at, size_t(kWindow));
  }
  h.update(engramTokenMap.data(), engramTokenMap.size() * sizeof(int64_t));
  return artifact::toHex(h.finish());
}

const char *restoreCaseName(RestoreCase c) {
  switch (c) {
  case RestoreCase::Cold:
    return "cold";
  case RestoreCase::GlobalAndLocal:
    return "global+local";
  case RestoreCase::GlobalOnly:
    return "global-only";
  }
  return "?";
}

struct PrefixCache::Impl {
  const artifact::Artifact *artifact = nullptr;
  const artifact::Plan *plan = nullptr;
  PrefixCacheOptions options;
  std::string modelHash, scheduleHash, weights;
  int64_t blockTokens = 0;
  /// Tokens run again to rebuild local state: the widest ring, rounded up
  /// to a multiple of the ratios (so that it starts at a group boundary).
  int64_t replayTokens = 0;
  std::vector<const CacheBuffer *> globals;
  /// The most bytes a block or a snapshot entry can hold.
  uint64_t maxBlockBytes = 0, maxSnapshotBytes = 0;
  PrefixCacheStats stats;

  // The memory tier: block key -> its entry bytes, most recent first.
  std::list<std::pair<std::string, std::string>> memory;
  std::unordered_map<std::string, decltype(memory)::iterator> memoryIndex;
  // The local pool, most recent first.
  std::list<Snapshot> pool;

  Clock::time_point now() const { return options.now ? options.now() : Clock::now(); }
  void warn(const std::string &message) {
    if (options.warn)
      options.warn(message);
    else
      std::cerr << "warning: prefix cache: " << message << "\n";
  }
  std::string blockPath(const std::string &key) const {
    return absl::StrCat(options.directory, "/blocks/", key, ".blk");
  }
  std::string localPath(int64_t position, const std::string &key) const {
    return absl::StrCat(options.directory, "/local/", position, "-", key, ".snap");
  }

  /// The chain key of the block after `parent` holding `tokens`.
  std::string chainKey(const std::string &parent, const int32_t *tokens) const {
    artifact::Sha256 h;
    h.update(modelHash);
    h.update(scheduleHash);
    h.update(weights);
    h.update(&blockTokens, sizeof blockTokens);
    h.update(parent);
    h.update(tokens, size_t(blockTokens) * sizeof(int32_t));
    return artifact::toHex(h.finish());
  }
  /// The key of a snapshot: every token of its prefix.
  std::string prefixKey(const int32_t *tokens, int64_t count) const {
    artifact::Sha256 h;
    h.update(modelHash);
    h.update(scheduleHash);
    h.update(weights);
    h.update(tokens, size_t(count) * sizeof(int32_t));
    return artifact::toHex(h.finish());
  }

  // --- global blocks ---------------------------------------------------------

  std::string encodeBlock(const Sequence &seq, int64_t block, const std::string &key,
                          const std::string &parent) const {
    Writer w;
    w.bytes(kBlockMagic, 8);
    w.text(modelHash);
    w.text(scheduleHash);
    w.text(weights);
    w.text(key);
    w.text(parent);
    w.put<int64_t>(block);
    w.put<int64_t>(blockTokens);
    w.bytes(seq.history.data() + block * blockTokens, size_t(blockTokens) * sizeof(int32_t));
    w.put<uint32_t>(uint32_t(globals.size()));
    for (const CacheBuffer *b : globals) {
      const CacheState &c = seq.caches.at(b->id);
      const int64_t per = blockTokens / b->ratio, first = block * per;
      w.text(b->id);
      w.put<int64_t>(first);
      w.put<int64_t>(per);
      w.put<int64_t>(b->entryBytes); // the row formats: main-KV then index key
      w.put<int64_t>(b->mainRowBytes);
      w.put<int64_t>(b->indexRowBytes);
      w.bytes(c.bytes.data() + first * b->entryBytes, size_t(per * b->entryBytes));
    }
    return w.seal();
  }

  /// Copies a block's entries into `seq`'s global caches when the entry is
  /// whole, of this model and schedule, and holds `tokens`; false if not.
  bool decodeBlock(std::string_view entry, int64_t block, const std::string &key,
                   const int32_t *tokens, Sequence &seq) const {
    auto body = verifiedBody(entry);
    if (!body)
      return false;
    Reader r{*body};
    if (r.bytes(8) != std::string_view(kBlockMagic, 8) || r.text() != modelHash ||
        r.text() != scheduleHash || r.text() != weights || r.text() != key)
      return false;
    r.text(); // the parent's key (part of this key already)
    if (r.get<int64_t>() != block || r.get<int64_t>() != blockTokens)
      return false;
    std::string_view ids = r.bytes(uint64_t(blockTokens) * sizeof(int32_t));
    if (!r.ok || std::memcmp(ids.data(), tokens, ids.size()) != 0)
      return false;
    if (r.get<uint32_t>() != globals.size())
      return false;
    for (const CacheBuffer *b : globals) {
      const int64_t per = blockTokens / b->ratio, first = block * per;
      if (r.text() != b->id || r.get<int64_t>() != first || r.get<int64_t>() != per ||
          r.get<int64_t>() != b->entryBytes || r.get<int64_t>() != b->mainRowBytes ||
          r.get<int64_t>() != b->indexRowBytes)
        return false;
      std::string_view rows = r.bytes(uint64_t(per * b->entryBytes));
      if (!r.ok)
        return false;
      CacheState &c = seq.caches.at(b->id);
      const size_t need = size_t((first + per) * b->entryBytes);
      if (c.bytes.size() < need)
        c.bytes.resize(need);
      std::memcpy(c.bytes.data() + first * b->entryBytes, rows.data(), rows.size());
    }
    return r.ok && r.at == body->size();
  }

  bool inMemory(const std::string &key) const { return memoryIndex.count(key) != 0; }

  void remember(const std::string &key, std::string entry) {
    if (auto it = memoryIndex.find(key); it != memoryIndex.end()) {
      memory.splice(memory.begin(), memory, it->second);
      return;
    }
    stats.memoryBytes += entry.size();
    memory.emplace_front(key, std::move(entry));
    memoryIndex[key] = memory.begin();
    while (stats.memoryBytes > options.memoryBytes && memory.size() > 1) {
      stats.memoryBytes -= memory.back().second.size();
      memoryIndex.erase(memory.back().first);
      memory.pop_back();
      ++stats.blocksEvicted;
    }
  }

  /// A block's entry from memory or disk (then kept in memory), or nothing.
  std::optional<std::string> lookup(const std::string &key) {
    if (auto it = memoryIndex.find(key); it != memoryIndex.end()) {
      memory.splice(memory.begin(), memory, it->second);
      return it->second->second;
    }
    if (options.directory.empty())
      return std::nullopt;
    const std::string path = blockPath(key);
    auto entry = readWhole(path, maxBlockBytes);
    if (!entry)
      return std::nullopt;
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); // recently used
    return entry;
  }

  void dropCorrupt(const std::string &key, const std::string &why) {
    if (auto it = memoryIndex.find(key); it != memoryIndex.end()) {
      stats.memoryBytes -= it->second->second.size();
      memory.erase(it->second);
      memoryIndex.erase(it);
    }
    if (!options.directory.empty()) {
      std::error_code ec;
      fs::remove(blockPath(key), ec);
    }
    ++stats.corruptRemoved;
    warn(absl::StrCat("block ", key.substr(0, 16), "... ", why, ": removed, not used"));
  }

  absl::Status writeEntry(const std::string &path, const std::string &entry) {
    if (absl::Status st = support::writeFileAtomically(path, entry); !st.ok())
      return st;
    // The rename itself survives a power loss once its directory is flushed.
    const std::string dir = fs::path(path).parent_path().string();
    if (int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
    stats.bytesWrittenToDisk += entry.size();
    return absl::OkStatus();
  }

  /// Removes the least recently used files past the disk budget, and temp
  /// files a killed writer left more than an hour ago.
  void evictDisk() {
    if (options.directory.empty())
      return;
    struct File {
      fs::path path;
      uint64_t size;
      fs::file_time_type time;
    };
    std::vector<File> files;
    uint64_t total = 0;
    const auto stale = fs::file_time_type::clock::now() - std::chrono::hours(1);
    for (const char *sub : {"/blocks", "/local"}) {
      std::error_code ec;
      for (const auto &e : fs::directory_iterator(options.directory + sub, ec)) {
        std::error_code fe;
        const uint64_t size = e.file_size(fe);
        const auto time = e.last_write_time(fe);
        if (fe)
          continue;
        if (e.path().filename().string().front() == '.') {
          if (time < stale)
            fs::remove(e.path(), fe);
          continue;
        }
        files.push_back({e.path(), size, time});
        total += size;
      }
    }
    std::sort(files.begin(), files.end(),
              [](const File &a, const File &b) { return a.time < b.time; });
    for (const File &f : files) {
      if (total <= options.diskBytes)
        break;
      std::error_code ec;
      if (fs::remove(f.path, ec))
        ++stats.blocksEvicted;
      total -= f.size;
    }
    stats.diskBytes = total;
  }

  // --- local snapshots ---------------------------------------------------------

  void expirePool() {
    const auto t = now();
    for (auto it = pool.begin(); it != pool.end();) {
      if (t - it->lastUse > options.localTtl) {
        stats.localBytes -= it->bytes;
        it = pool.erase(it);
        ++stats.snapshotsExpired;
      } else {
        ++it;
      }
    }
    while (stats.localBytes > options.localBytes && !pool.empty()) {
      stats.localBytes -= pool.back().bytes;
      pool.pop_back();
      ++stats.snapshotsExpired;
    }
  }

  Snapshot snapshotOf(const Sequence &seq) const {
    Snapshot s;
    s.position = seq.position;
    s.tokens = seq.history;
    const int64_t boundary = seq.position / blockTokens * blockTokens;
    for (const CacheBuffer &b : plan->caches) {
      const CacheState &c = seq.caches.at(b.id);
      if (b.kind != CacheKind::GlobalCache) {
        s.local[b.id] = c;
        s.bytes += c.bytes.size();
        continue;
      }
      const int64_t first = boundary / b.ratio;
      const int64_t end = std::max(c.mainEntries, c.indexEntries);
      CacheState t;
      t.mainEntries = c.mainEntries;
      t.indexEntries = c.indexEntries;
      t.bytes.assign(c.bytes.begin() + first * b.entryBytes,
                     c.bytes.begin() + std::max(first, end) * b.entryBytes);
      s.bytes += t.bytes.size();
      s.tailFirst[b.id] = first;
      s.tail[b.id] = std::move(t);
    }
    s.bytes += s.tokens.size() * sizeof(int32_t);
    return s;
  }

  std::string encodeSnapshot(const Snapshot &s) const {
    Writer w;
    w.bytes(kLocalMagic, 8);
    w.text(modelHash);
    w.text(scheduleHash);
    w.text(weights);
    w.put<int64_t>(s.position);
    w.bytes(s.tokens.data(), s.tokens.size() * sizeof(int32_t));
    w.put<uint32_t>(uint32_t(plan->caches.size()));
    for (const CacheBuffer &b : plan->caches) {
      const bool global = b.kind == CacheKind::GlobalCache;
      const CacheState &c = global ? s.tail.at(b.id) : s.local.at(b.id);
      w.text(b.id);
      w.put<int64_t>(global ? s.tailFirst.at(b.id) : 0);
      w.put<int64_t>(c.mainEntries);
      w.put<int64_t>(c.indexEntries);
      w.put<int64_t>(c.ringStart);
      w.put<int64_t>(c.ringEnd);
      w.put<uint64_t>(c.bytes.size());
      w.bytes(c.bytes.data(), c.bytes.size());
    }
    return w.seal();
  }

  std::optional<Snapshot> decodeSnapshot(std::string_view entry) const {
    auto body = verifiedBody(entry);
    if (!body)
      return std::nullopt;
    Reader r{*body};
    Snapshot s;
    if (r.bytes(8) != std::string_view(kLocalMagic, 8) || r.text() != modelHash ||
        r.text() != scheduleHash || r.text() != weights)
      return std::nullopt;
    s.position = r.get<int64_t>();
    if (!r.ok || s.position < 1 || s.position > plan->maxContext)
      return std::nullopt;
    std::string_view ids = r.bytes(uint64_t(s.position) * sizeof(int32_t));
    if (!r.ok)
      return std::nullopt;
    s.tokens.resize(size_t(s.position));
    std::memcpy(s.tokens.data(), ids.data(), ids.size());
    if (r.get<uint32_t>() != plan->caches.size())
      return std::nullopt;
    for (const CacheBuffer &b : plan->caches) {
      if (r.text() != b.id)
        return std::nullopt;
      const bool global = b.kind == CacheKind::GlobalCache;
      const int64_t first = r.get<int64_t>();
      CacheState c;
      c.mainEntries = r.get<int64_t>();
      c.indexEntries = r.get<int64_t>();
      c.ringStart = r.get<int64_t>();
      c.ringEnd = r.get<int64_t>();
      std::string_view rows = r.bytes(r.get<uint64_t>());
      if (!r.ok)
        return std::nullopt;
      c.bytes.assign(rows.begin(), rows.end());
      const int64_t boundary = s.position / blockTokens * blockTokens;
      if (global) {
        if (first != boundary / b.ratio ||
            int64_t(c.bytes.size()) !=
                (std::max({c.mainEntries, c.indexEntries, first}) - first) * b.entryBytes)
          return std::nullopt;
        s.tailFirst[b.id] = first;
        s.tail[b.id] = std::move(c);
      } else {
        if (int64_t(c.bytes.size()) != b.fixedBytes)
          return std::nullopt;
        s.local[b.id] = std::move(c);
      }
    }
    if (r.at != body->size())
      return std::nullopt;
    s.bytes = entry.size();
    return s;
  }

  /// Snapshots on disk (persistLocal) whose prefix `tokens` starts with,
  /// loaded into the pool.
  void loadDiskSnapshots(const std::vector<int32_t> &tokens) {
    if (!options.persistLocal || options.directory.empty())
      return;
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(options.directory + "/local", ec)) {
      const std::string name = e.path().filename().string();
      const size_t dash = name.find('-');
      if (name.front() == '.' || dash == std::string::npos)
        continue;
      int64_t position = 0;
      try {
        position = std::stoll(name.substr(0, dash));
      } catch (...) {
        continue;
      }
      if (position < 1 || position >= int64_t(tokens.size()))
        continue;
      const std::string key = prefixKey(tokens.data(), position);
      if (name != absl::StrCat(position, "-", key, ".snap"))
        continue;
      bool held = false;
      for (const Snapshot &s : pool)
        held |= s.position == position &&
                std::equal(s.tokens.begin(), s.tokens.end(), tokens.begin());
      if (held)
        continue;
      auto entry = readWhole(e.path().string(), maxSnapshotBytes);
      std::optional<Snapshot> s = entry ? decodeSnapshot(*entry) : std::nullopt;
      if (!s || !std::equal(s->tokens.begin(), s->tokens.end(), tokens.begin())) {
        fs::remove(e.path(), ec);
        ++stats.corruptRemoved;
        warn(absl::StrCat("snapshot ", name.substr(0, 24), "... is corrupt: removed, not used"));
        continue;
      }
      s->lastUse = now();
      stats.localBytes += s->bytes;
      pool.push_front(std::move(*s));
    }
  }
};

PrefixCache::PrefixCache(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}
PrefixCache::~PrefixCache() = default;

absl::StatusOr<std::unique_ptr<PrefixCache>>
PrefixCache::open(const artifact::Artifact &artifact, std::string fingerprint,
                  PrefixCacheOptions options) {
  if (!artifact::isSha256Hex(fingerprint))
    return absl::InvalidArgumentError(
        "prefix cache: the weights' fingerprint is not a SHA-256 (weightsFingerprint)");
  auto impl = std::make_unique<Impl>();
  impl->weights = std::move(fingerprint);
  impl->artifact = &artifact;
  impl->plan = &artifact.plan();
  impl->modelHash = artifact.manifest().modelHash;
  impl->scheduleHash = artifact.manifest().scheduleHash;
  int64_t ratios = 1, window = 0;
  for (const CacheBuffer &b : impl->plan->caches) {
    if (b.kind == CacheKind::GlobalCache) {
      if (b.ratio < 1 || b.entryBytes < 1)
        return absl::InvalidArgumentError(
            absl::StrCat("prefix cache: cache '", b.id, "' has no ratio or entry size"));
      impl->globals.push_back(&b);
    }
    if (b.ratio > 0)
      ratios = std::lcm(ratios, b.ratio);
    if (b.kind == CacheKind::SwaRing)
      window = std::max(window, b.window);
  }
  int64_t block = options.blockTokens;
  if (block == 0)
    block = (64 + ratios - 1) / ratios * ratios;
  if (block < 1 || block % ratios != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "prefix cache: a block of ", block, " tokens is no multiple of the compression ratios (",
        ratios, ")"));
  impl->blockTokens = block;
  // Header fields (magic, hashes, keys, counts) take well under 1 KiB.
  impl->maxBlockBytes = 1024 + uint64_t(block) * sizeof(int32_t);
  impl->maxSnapshotBytes = 1024 + uint64_t(impl->plan->maxContext) * sizeof(int32_t);
  for (const CacheBuffer &b : impl->plan->caches) {
    const uint64_t perBlock =
        b.kind == CacheKind::GlobalCache ? uint64_t(block / b.ratio * b.entryBytes) : 0;
    impl->maxBlockBytes += 64 + b.id.size() + perBlock;
    impl->maxSnapshotBytes += 64 + b.id.size() +
                              (b.kind == CacheKind::GlobalCache ? perBlock + uint64_t(b.entryBytes)
                                                                : uint64_t(b.fixedBytes));
  }
  impl->replayTokens = (window + ratios - 1) / ratios * ratios;
  if (options.replayTokens != 0) {
    if (options.replayTokens < 0 || options.replayTokens % ratios != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "prefix cache: a replay of ", options.replayTokens,
          " tokens is no positive multiple of the compression ratios (", ratios, ")"));
    impl->replayTokens = options.replayTokens;
  }
  if (!options.directory.empty()) {
    for (const char *sub : {"/blocks", "/local"}) {
      std::error_code ec;
      fs::create_directories(options.directory + sub, ec);
      if (ec)
        return absl::FailedPreconditionError(absl::StrCat(
            options.directory, sub, ": cannot make the prefix cache's directory: ", ec.message()));
    }
  }
  impl->options = std::move(options);
  PrefixCacheStats &st = impl->stats;
  st.blockTokens = block;
  int64_t perBlock = 0;
  for (const CacheBuffer *b : impl->globals)
    perBlock += block / b->ratio * b->entryBytes;
  st.globalBytesPerToken = perBlock / block;
  for (const CacheBuffer &b : impl->plan->caches)
    if (b.kind != CacheKind::GlobalCache)
      st.localSnapshotBytes += b.fixedBytes;
  impl->evictDisk();
  return std::unique_ptr<PrefixCache>(new PrefixCache(std::move(impl)));
}

const PrefixCacheStats &PrefixCache::stats() const { return impl->stats; }

void PrefixCache::expireLocalState() {
  impl->stats.snapshotsExpired += int64_t(impl->pool.size());
  impl->pool.clear();
  impl->stats.localBytes = 0;
}

absl::Status PrefixCache::save(const Sequence &seq) {
  Impl &m = *impl;
  if (seq.cachesHeldBy != 0)
    return absl::FailedPreconditionError(
        "prefix cache: the sequence's caches are on the GPU (Executor::syncToHost first)");
  if (int64_t(seq.history.size()) != seq.position || seq.position < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "prefix cache: a sequence at position ", seq.position, " with ", seq.history.size(),
        " tokens of history cannot be saved"));
  const int64_t blocks = seq.position / m.blockTokens;
  for (const CacheBuffer *b : m.globals) {
    const CacheState &c = seq.caches.at(b->id);
    const int64_t need = blocks * m.blockTokens / b->ratio;
    if (c.mainEntries < need || (b->indexRowBytes && c.indexEntries < need) ||
        int64_t(c.bytes.size()) < need * b->entryBytes)
      return absl::InternalError(absl::StrCat("prefix cache: cache '", b->id, "' holds ",
                                              c.mainEntries, " entries at position ",
                                              seq.position, " (a runtime bug)"));
  }
  absl::Status firstError = absl::OkStatus();
  std::string parent;
  for (int64_t block = 0; block < blocks; ++block) {
    const std::string key = m.chainKey(parent, seq.history.data() + block * m.blockTokens);
    const bool onDisk = !m.options.directory.empty() && fs::exists(m.blockPath(key));
    if (!m.inMemory(key) || (!m.options.directory.empty() && !onDisk)) {
      std::string entry = m.encodeBlock(seq, block, key, parent);
      bool written = m.options.directory.empty() && !m.inMemory(key);
      if (!m.options.directory.empty() && !onDisk) {
        absl::Status st = m.writeEntry(m.blockPath(key), entry);
        written = st.ok();
        if (!st.ok()) {
          m.warn(std::string(st.message()));
          if (firstError.ok())
            firstError = st;
        }
      }
      m.stats.blocksWritten += written;
      m.remember(key, std::move(entry));
    } else {
      m.remember(key, {}); // most recently used (already held)
    }
    parent = key;
  }
  // The snapshot replaces one of the same prefix.
  Snapshot s = m.snapshotOf(seq);
  s.lastUse = m.now();
  for (auto it = m.pool.begin(); it != m.pool.end(); ++it)
    if (it->position == s.position && it->tokens == s.tokens) {
      m.stats.localBytes -= it->bytes;
      m.pool.erase(it);
      break;
    }
  if (m.options.persistLocal && !m.options.directory.empty()) {
    const std::string path =
        m.localPath(s.position, m.prefixKey(s.tokens.data(), s.position));
    if (absl::Status st = m.writeEntry(path, m.encodeSnapshot(s)); !st.ok() && firstError.ok())
      firstError = st;
  }
  m.stats.localBytes += s.bytes;
  m.pool.push_front(std::move(s));
  ++m.stats.snapshotsSaved;
  m.expirePool();
  m.evictDisk();
  return firstError;
}

absl::StatusOr<Restored> PrefixCache::restore(Executor &executor,
                                              const std::vector<int32_t> &tokens) {
  Impl &m = *impl;
  const auto start = Clock::now();
  Restored out;
  out.sequence = executor.newSequence();
  const int64_t n = int64_t(tokens.size());
  m.expirePool();
  m.loadDiskSnapshots(tokens);

  // The stored blocks, from the first, while each is there and whole; at
  // least one token is left to run.
  Sequence &seq = out.sequence;
  int64_t blocks = 0;
  std::string parent;
  while ((blocks + 1) * m.blockTokens <= n - 1) {
    const int32_t *ids = tokens.data() + blocks * m.blockTokens;
    const std::string key = m.chainKey(parent, ids);
    std::optional<std::string> entry = m.lookup(key);
    if (!entry)
      break;
    if (!m.decodeBlock(*entry, blocks, key, ids, seq)) {
      m.dropCorrupt(key, "is corrupt or truncated");
      break;
    }
    m.remember(key, std::move(*entry));
    ++m.stats.blocksRead;
    ++blocks;
    parent = key;
  }
  const int64_t globalEnd = blocks * m.blockTokens;

  // The longest snapshot of a prefix of the request at or after the stored
  // blocks' end (and within one block of them).
  Snapshot *best = nullptr;
  for (Snapshot &s : m.pool)
    if (s.position < n && s.position >= globalEnd && s.position / m.blockTokens <= blocks &&
        std::equal(s.tokens.begin(), s.tokens.end(), tokens.begin()) &&
        (!best || s.position > best->position))
      best = &s;

  auto setGlobalEntries = [&](int64_t position) {
    for (const CacheBuffer *b : m.globals) {
      CacheState &c = seq.caches.at(b->id);
      c.mainEntries = b->entriesAt(position);
      c.indexEntries = b->indexRowBytes ? c.mainEntries : 0;
      c.bytes.resize(size_t(c.mainEntries * b->entryBytes));
    }
  };

  if (best) {
    best->lastUse = m.now();
    m.pool.splice(m.pool.begin(), m.pool, std::find_if(m.pool.begin(), m.pool.end(),
                                                       [&](const Snapshot &s) { return &s == best; }));
    for (const auto &[id, c] : best->local)
      seq.caches[id] = c;
    for (const CacheBuffer *b : m.globals) {
      const CacheState &t = best->tail.at(b->id);
      CacheState &c = seq.caches.at(b->id);
      const int64_t first = best->tailFirst.at(b->id);
      c.bytes.resize(size_t(first * b->entryBytes));
      c.bytes.insert(c.bytes.end(), t.bytes.begin(), t.bytes.end());
      c.mainEntries = t.mainEntries;
      c.indexEntries = t.indexEntries;
    }
    seq.position = best->position;
    seq.history = best->tokens;
    out.kind = RestoreCase::GlobalAndLocal;
  } else if (blocks > 0) {
    // Encoder SWA bounded replay: from empty rings at a group boundary,
    // then the stored global entries of the replayed tokens back in.
    const int64_t from = std::max<int64_t>(0, globalEnd - m.replayTokens);
    std::map<std::string, std::string> stored;
    for (const CacheBuffer *b : m.globals) {
      const CacheState &c = seq.caches.at(b->id);
      stored[b->id].assign(reinterpret_cast<const char *>(c.bytes.data()) +
                               b->entriesAt(from) * b->entryBytes,
                           size_t((b->entriesAt(globalEnd) - b->entriesAt(from)) * b->entryBytes));
    }
    setGlobalEntries(from);
    seq.position = from;
    seq.history.assign(tokens.begin(), tokens.begin() + from);
    const std::vector<int32_t> replay(tokens.begin() + from, tokens.begin() + globalEnd);
    auto logits = from == 0 ? executor.prefill(seq, replay) : executor.extend(seq, replay);
    if (!logits.ok())
      return absl::Status(logits.status().code(),
                          absl::StrCat("prefix cache: replaying tokens ", from, "..", globalEnd - 1,
                                       ": ", logits.status().message()));
    if (absl::Status st = executor.syncToHost(seq); !st.ok())
      return st;
    for (const CacheBuffer *b : m.globals) {
      CacheState &c = seq.caches.at(b->id);
      const std::string &rows = stored.at(b->id);
      if (c.mainEntries != b->entriesAt(globalEnd) ||
          c.bytes.size() < size_t(b->entriesAt(from) * b->entryBytes) + rows.size())
        return absl::InternalError(absl::StrCat("prefix cache: the replay left '", b->id,
                                                "' with ", c.mainEntries, " entries"));
      std::memcpy(c.bytes.data() + b->entriesAt(from) * b->entryBytes, rows.data(), rows.size());
    }
    out.kind = RestoreCase::GlobalOnly;
    out.replayedTokens = globalEnd - from;
  } else {
    setGlobalEntries(0);
  }
  out.restoredTokens = seq.position;
  out.suffix.assign(tokens.begin() + seq.position, tokens.end());
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

} // namespace csa::runtime::prefix

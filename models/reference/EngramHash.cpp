//===- EngramHash.cpp - Engram n-gram hashing of DeepSeek-V4.1 --------------===//
//
// See EngramHash.h for the algorithm. numpy's generators are re-derived here
// from their published definitions (SeedSequence after O'Neill's seed_seq
// design, PCG64 XSL-RR, Lemire's nearly-divisionless bounded draws), and
// checked against numpy's own output in test/unit/engram.
//
//===----------------------------------------------------------------------===//

#include "models/reference/EngramHash.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

namespace csa {

namespace {

__extension__ typedef unsigned __int128 u128;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

//===----------------------------------------------------------------------===//
// SeedSequence constants (numpy/random/bit_generator.pyx).
//===----------------------------------------------------------------------===//

constexpr uint32_t kInitA = 0x43b0d7e5u;
constexpr uint32_t kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu;
constexpr uint32_t kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu;
constexpr uint32_t kMixMultR = 0x4973f715u;
constexpr unsigned kXShift = 16;

/// Hashes `value` with the running constant, which advances each call.
uint32_t hashMix(uint32_t value, uint32_t &hashConst) {
  value ^= hashConst;
  hashConst *= kMultA;
  value *= hashConst;
  return value ^ (value >> kXShift);
}

uint32_t mixWords(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  return result ^ (result >> kXShift);
}

//===----------------------------------------------------------------------===//
// PCG64 constants (numpy/random/src/pcg64/pcg64.h).
//===----------------------------------------------------------------------===//

constexpr uint64_t kPcgMultHi = 0x2360ed051fc65da4ull;
constexpr uint64_t kPcgMultLo = 0x4385df649fccf645ull;

u128 join128(uint64_t hi, uint64_t lo) { return (u128(hi) << 64) | lo; }

//===----------------------------------------------------------------------===//
// Bounded draws (numpy/random/src/distributions/distributions.c).
//===----------------------------------------------------------------------===//

/// Uniform in [0, rng] from 64-bit draws; rng < UINT64_MAX.
uint64_t lemire64(NumpyPcg64 &gen, uint64_t rng) {
  const uint64_t rangeExcl = rng + 1;
  u128 m = u128(gen.next64()) * rangeExcl;
  uint64_t leftover = static_cast<uint64_t>(m);
  if (leftover < rangeExcl) {
    const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - rng) %
                               rangeExcl;
    while (leftover < threshold) {
      m = u128(gen.next64()) * rangeExcl;
      leftover = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

/// Uniform in [0, rng] from 32-bit draws; rng < UINT32_MAX.
uint32_t lemire32(NumpyPcg64 &gen, uint32_t rng) {
  const uint32_t rangeExcl = rng + 1;
  uint64_t m = uint64_t(gen.next32()) * rangeExcl;
  uint32_t leftover = static_cast<uint32_t>(m);
  if (leftover < rangeExcl) {
    const uint32_t threshold =
        (std::numeric_limits<uint32_t>::max() - rng) % rangeExcl;
    while (leftover < threshold) {
      m = uint64_t(gen.next32()) * rangeExcl;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

uint64_t mulMod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>(u128(a) * b % m);
}

uint64_t powMod(uint64_t base, uint64_t exp, uint64_t m) {
  uint64_t result = 1 % m;
  base %= m;
  for (; exp; exp >>= 1) {
    if (exp & 1)
      result = mulMod(result, base, m);
    base = mulMod(base, base, m);
  }
  return result;
}

} // namespace

//===----------------------------------------------------------------------===//
// NumpySeedSequence
//===----------------------------------------------------------------------===//

static std::vector<uint32_t> wordsOf(uint64_t entropy) {
  std::vector<uint32_t> words;
  do {
    words.push_back(static_cast<uint32_t>(entropy));
    entropy >>= 32;
  } while (entropy);
  return words;
}

NumpySeedSequence::NumpySeedSequence(uint64_t entropy)
    : NumpySeedSequence(wordsOf(entropy)) {}

NumpySeedSequence::NumpySeedSequence(const std::vector<uint32_t> &entropy) {
  const size_t n = pool_.size();
  uint32_t hashConst = kInitA;
  // The first pool-size words are hashed in (zeros past the entropy's end).
  for (size_t i = 0; i < n; ++i)
    pool_[i] = hashMix(i < entropy.size() ? entropy[i] : 0u, hashConst);
  // Every word then mixes into every other one.
  for (size_t src = 0; src < n; ++src)
    for (size_t dst = 0; dst < n; ++dst)
      if (src != dst)
        pool_[dst] = mixWords(pool_[dst], hashMix(pool_[src], hashConst));
  // Entropy beyond the pool size mixes into every pool word.
  for (size_t src = n; src < entropy.size(); ++src)
    for (size_t dst = 0; dst < n; ++dst)
      pool_[dst] = mixWords(pool_[dst], hashMix(entropy[src], hashConst));
}

std::vector<uint32_t> NumpySeedSequence::generateState32(size_t nWords) const {
  std::vector<uint32_t> state(nWords);
  uint32_t hashConst = kInitB;
  for (size_t i = 0; i < nWords; ++i) {
    uint32_t value = pool_[i % pool_.size()];
    value ^= hashConst;
    hashConst *= kMultB;
    value *= hashConst;
    state[i] = value ^ (value >> kXShift);
  }
  return state;
}

std::vector<uint64_t> NumpySeedSequence::generateState64(size_t nWords) const {
  std::vector<uint32_t> words = generateState32(2 * nWords);
  std::vector<uint64_t> state(nWords);
  for (size_t i = 0; i < nWords; ++i)
    state[i] = uint64_t(words[2 * i]) | (uint64_t(words[2 * i + 1]) << 32);
  return state;
}

//===----------------------------------------------------------------------===//
// NumpyPcg64
//===----------------------------------------------------------------------===//

NumpyPcg64::NumpyPcg64(const NumpySeedSequence &seed) {
  std::vector<uint64_t> words = seed.generateState64(4);
  const u128 initState = join128(words[0], words[1]);
  const u128 initSeq = join128(words[2], words[3]);
  const u128 inc = (initSeq << 1) | 1u;
  incHi_ = static_cast<uint64_t>(inc >> 64);
  incLo_ = static_cast<uint64_t>(inc);
  stateHi_ = stateLo_ = 0;
  step();
  u128 state = join128(stateHi_, stateLo_) + initState;
  stateHi_ = static_cast<uint64_t>(state >> 64);
  stateLo_ = static_cast<uint64_t>(state);
  step();
}

void NumpyPcg64::step() {
  u128 state = join128(stateHi_, stateLo_) * join128(kPcgMultHi, kPcgMultLo) +
               join128(incHi_, incLo_);
  stateHi_ = static_cast<uint64_t>(state >> 64);
  stateLo_ = static_cast<uint64_t>(state);
}

uint64_t NumpyPcg64::next64() {
  step();
  const uint64_t folded = stateHi_ ^ stateLo_;
  const unsigned rot = static_cast<unsigned>(stateHi_ >> 58);
  return (folded >> rot) | (folded << ((64 - rot) & 63));
}

uint32_t NumpyPcg64::next32() {
  if (hasHalf_) {
    hasHalf_ = false;
    return half_;
  }
  const uint64_t draw = next64();
  hasHalf_ = true;
  half_ = static_cast<uint32_t>(draw >> 32);
  return static_cast<uint32_t>(draw);
}

std::vector<int64_t> numpyIntegersInt64(NumpyPcg64 &gen, int64_t low,
                                        int64_t high, size_t count) {
  // numpy draws on the closed range [low, high - 1] as an offset plus an
  // unsigned range, both wrapped to 64 bits.
  const uint64_t off = static_cast<uint64_t>(low);
  const uint64_t rng = static_cast<uint64_t>(high) - 1 - off;
  std::vector<int64_t> out(count);
  for (size_t i = 0; i < count; ++i) {
    uint64_t value;
    if (rng == 0)
      value = 0;
    else if (rng == 0xffffffffull)
      value = gen.next32();
    else if (rng < 0xffffffffull)
      value = lemire32(gen, static_cast<uint32_t>(rng));
    else if (rng == std::numeric_limits<uint64_t>::max())
      value = gen.next64();
    else
      value = lemire64(gen, rng);
    out[i] = static_cast<int64_t>(off + value);
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Layout and multipliers
//===----------------------------------------------------------------------===//

bool isPrime(uint64_t n) {
  if (n < 2)
    return false;
  static const uint64_t kBases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  for (uint64_t p : kBases) {
    if (n % p == 0)
      return n == p;
  }
  uint64_t d = n - 1;
  unsigned r = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++r;
  }
  // These bases decide primality for every n < 3.3e24.
  for (uint64_t a : kBases) {
    uint64_t x = powMod(a, d, n);
    if (x == 1 || x == n - 1)
      continue;
    bool composite = true;
    for (unsigned i = 1; i < r && composite; ++i) {
      x = mulMod(x, x, n);
      composite = x != n - 1;
    }
    if (composite)
      return false;
  }
  return true;
}

absl::StatusOr<EngramLayout> engramLayout(const ModelConfig &config) {
  const std::string where = absl::StrCat("engram layout of '", config.source,
                                         "': ");
  if (config.engramLayerIds.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(where, "the config has no engram layers"));
  if (config.engramMaxNgramSize < 2 || config.engramNHeads < 1)
    return absl::InvalidArgumentError(
        absl::StrCat(where, "needs engram_max_ngram_size >= 2 and "
                            "engram_n_heads >= 1"));
  // Primes stay below 2^62 with room to spare, so sums cannot overflow for
  // any table that fits in memory.
  if (config.engramVocabSize < 1 || config.engramVocabSize > (int64_t(1) << 56))
    return absl::InvalidArgumentError(absl::StrCat(
        where, "engram_vocab_size ", config.engramVocabSize,
        " is out of range [1, 2^56]"));

  EngramLayout layout;
  layout.maxNgramSize = config.engramMaxNgramSize;
  layout.nHeads = config.engramNHeads;
  layout.layerIds = config.engramLayerIds;
  // The reference: per layer, per order, restart the search just below
  // engram_vocab_size and take, per head, the next prime not yet handed out.
  std::set<int64_t> seen;
  for (size_t k = 0; k < layout.layerIds.size(); ++k) {
    std::vector<int64_t> primes, offsets;
    int64_t rows = 0;
    for (int64_t order = 2; order <= layout.maxNgramSize; ++order) {
      int64_t current = config.engramVocabSize - 1;
      for (int64_t head = 0; head < layout.nHeads; ++head) {
        do
          ++current;
        while (!isPrime(static_cast<uint64_t>(current)) || seen.count(current));
        seen.insert(current);
        primes.push_back(current);
        offsets.push_back(rows);
        if (rows > kInt64Max - current)
          return absl::InvalidArgumentError(
              absl::StrCat(where, "table of layer ", layout.layerIds[k],
                           " overflows int64"));
        rows += current;
      }
    }
    layout.primes.push_back(std::move(primes));
    layout.offsets.push_back(std::move(offsets));
    layout.tableRows.push_back(rows);
  }
  return layout;
}

absl::Status checkEngramNumEmbeddings(const ModelConfig &config) {
  absl::StatusOr<EngramLayout> layout = engramLayout(config);
  if (!layout.ok())
    return layout.status();
  if (config.engramNumEmbeddings == layout->tableRows)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "'", config.source, "': engram_num_embeddings is [",
      absl::StrJoin(config.engramNumEmbeddings, ", "),
      "] but the prime layout of engram_vocab_size ", config.engramVocabSize,
      ", max_ngram_size ", config.engramMaxNgramSize, ", n_heads ",
      config.engramNHeads, " gives [", absl::StrJoin(layout->tableRows, ", "),
      "]"));
}

int64_t engramMultiplierBound(int64_t compressedVocab) {
  return std::max<int64_t>(1, (kInt64Max / compressedVocab) / 2);
}

std::vector<int64_t> engramMultipliers(int64_t layerId, int64_t maxNgramSize,
                                       int64_t compressedVocab) {
  NumpyPcg64 gen(static_cast<uint64_t>(10007) * static_cast<uint64_t>(layerId));
  std::vector<int64_t> values =
      numpyIntegersInt64(gen, 0, engramMultiplierBound(compressedVocab),
                         static_cast<size_t>(maxNgramSize));
  for (int64_t &v : values)
    v = v * 2 + 1;
  return values;
}

//===----------------------------------------------------------------------===//
// EngramHasher
//===----------------------------------------------------------------------===//

absl::StatusOr<EngramHasher>
EngramHasher::create(const ModelConfig &config, int64_t layerId,
                     std::vector<int64_t> compressedMap) {
  absl::StatusOr<EngramLayout> layout = engramLayout(config);
  if (!layout.ok())
    return layout.status();
  const std::string where =
      absl::StrCat("engram hasher of layer ", layerId, " of '", config.source,
                   "': ");
  auto it = std::find(layout->layerIds.begin(), layout->layerIds.end(),
                      layerId);
  if (it == layout->layerIds.end())
    return absl::InvalidArgumentError(absl::StrCat(
        where, "not an engram layer (engram_layer_ids [",
        absl::StrJoin(layout->layerIds, ", "), "])"));
  if (layerId < 0 || layerId > kInt64Max / 10007)
    return absl::InvalidArgumentError(
        absl::StrCat(where, "layer id out of range"));
  const size_t k = static_cast<size_t>(it - layout->layerIds.begin());
  const int64_t vocab = config.engramCompressedVocabSize;
  if (vocab < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        where, "engram_compressed_vocab_size must be >= 1, got ", vocab));
  if (k < config.engramNumEmbeddings.size() &&
      config.engramNumEmbeddings[k] < layout->tableRows[k])
    return absl::InvalidArgumentError(absl::StrCat(
        where, "engram_num_embeddings ", config.engramNumEmbeddings[k],
        " is smaller than the ", layout->tableRows[k],
        " rows its primes address"));

  if (compressedMap.empty()) {
    if (config.vocabSize < 1)
      return absl::InvalidArgumentError(absl::StrCat(
          where, "vocab_size must be >= 1 for the default compressed map"));
    compressedMap.resize(static_cast<size_t>(config.vocabSize));
    for (int64_t t = 0; t < config.vocabSize; ++t)
      compressedMap[static_cast<size_t>(t)] = t % vocab;
  }
  for (size_t t = 0; t < compressedMap.size(); ++t)
    if (compressedMap[t] < 0 || compressedMap[t] >= vocab)
      return absl::InvalidArgumentError(absl::StrCat(
          where, "compressed map sends token ", t, " to ", compressedMap[t],
          ", outside [0, ", vocab, ")"));
  if (config.engramPadId < 0 ||
      config.engramPadId >= static_cast<int64_t>(compressedMap.size()))
    return absl::InvalidArgumentError(absl::StrCat(
        where, "engram_pad_id ", config.engramPadId,
        " is outside the compressed map of ", compressedMap.size(),
        " tokens"));

  EngramHasher hasher;
  hasher.layerId_ = layerId;
  hasher.maxNgramSize_ = layout->maxNgramSize;
  hasher.nHeads_ = layout->nHeads;
  hasher.primes_ = layout->primes[k];
  hasher.offsets_ = layout->offsets[k];
  hasher.tableRows_ = layout->tableRows[k];
  hasher.multipliers_ =
      engramMultipliers(layerId, layout->maxNgramSize, vocab);
  hasher.padId_ = compressedMap[static_cast<size_t>(config.engramPadId)];
  hasher.map_ = std::move(compressedMap);
  return hasher;
}

void EngramHasher::hashShifted(const int64_t *shifted, int64_t *out) const {
  // Tokens are < V and multipliers < 2 * bound <= INT64_MAX / V, so products
  // and their XOR stay below 2^63: unsigned arithmetic gives the reference's
  // int64 values exactly, and % gives its non-negative remainders.
  uint64_t rolling = static_cast<uint64_t>(shifted[0]) *
                     static_cast<uint64_t>(multipliers_[0]);
  for (int64_t shift = 1; shift < maxNgramSize_; ++shift) {
    rolling ^= static_cast<uint64_t>(shifted[shift]) *
               static_cast<uint64_t>(multipliers_[shift]);
    for (int64_t head = 0; head < nHeads_; ++head) {
      const size_t col = static_cast<size_t>((shift - 1) * nHeads_ + head);
      out[col] = static_cast<int64_t>(
                     rolling % static_cast<uint64_t>(primes_[col])) +
                 offsets_[col];
    }
  }
}

absl::StatusOr<std::vector<int64_t>>
EngramHasher::hash(const std::vector<int64_t> &tokens, int64_t start,
                   int64_t count) const {
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (start < 0 || count < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "engram hash: start ", start, " and count ", count,
        " must be >= 0"));
  const int64_t end = start + count; // one past the last hashed position
  const int64_t first = std::max<int64_t>(0, start - (maxNgramSize_ - 1));
  if (size > end || end - size > first)
    return absl::InvalidArgumentError(absl::StrCat(
        "engram hash: ", size, " tokens ending at position ", end - 1,
        " must cover positions ", first, "..", end - 1, " and none before 0"));
  const int64_t base = end - size; // position of tokens[0]
  for (int64_t p = first; p < end; ++p) {
    const int64_t t = tokens[static_cast<size_t>(p - base)];
    if (t != kImageToken && (t < 0 || t >= mapSize()))
      return absl::InvalidArgumentError(absl::StrCat(
          "engram hash: token ", t, " at position ", p,
          " is outside the compressed map of ", mapSize(), " tokens"));
  }

  const int64_t cols = columns();
  std::vector<int64_t> ids(static_cast<size_t>(count * cols));
  std::vector<int64_t> shifted(static_cast<size_t>(maxNgramSize_));
  for (int64_t p = start; p < end; ++p) {
    bool blocked = false;
    for (int64_t s = 0; s < maxNgramSize_; ++s) {
      const int64_t q = p - s;
      const int64_t t = q < 0 ? kImageToken
                              : tokens[static_cast<size_t>(q - base)];
      blocked = blocked || t == kImageToken;
      shifted[static_cast<size_t>(s)] =
          blocked ? padId_ : map_[static_cast<size_t>(t)];
    }
    hashShifted(shifted.data(), ids.data() + (p - start) * cols);
  }
  return ids;
}

} // namespace csa

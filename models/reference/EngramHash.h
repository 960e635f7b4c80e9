//===- EngramHash.h - Engram n-gram hashing of DeepSeek-V4.1 -----*- C++ -*-===//
//
// The hash ids that the Engram layers look up, bit-exact with the official
// reference (`inference/engram.py` of DeepSeek-V4.1-Flash). Written from the
// description in docs and from reading the reference; no code is shared.
//
// The algorithm, per engram layer L (a backbone layer id in engram_layer_ids,
// at position k in that list), n = engram_max_ngram_size, H = engram_n_heads:
//
//  * Multipliers: numpy's `default_rng(10007 * L)` (SeedSequence -> PCG64)
//    draws `integers(low=0, high=B, size=(n,), dtype=int64)` with
//    B = max(1, (INT64_MAX / V) / 2), V = engram_compressed_vocab_size
//    (floor divisions). Multiplier j = 2 * draw_j + 1 (odd). B bounds every
//    product token * multiplier below INT64_MAX.
//  * Primes: one per (layer, order, head), handed out in that order (layer
//    outer, head inner). Each (layer, order) restarts the search at
//    engram_vocab_size - 1 and takes, head by head, the smallest prime above
//    the previous one that no earlier (layer, order, head) took. In effect
//    layer k gets the consecutive primes number k*(n-1)*H ..
//    (k+1)*(n-1)*H - 1 at or above engram_vocab_size, ascending.
//  * Offsets: column c = (order - 2) * H + head of layer k starts at the sum
//    of the primes of columns < c of the same layer (each layer has its own
//    table); the layer's table has sum(primes) rows.
//  * Tokens: raw ids go through the compressed-token map. For position p and
//    shift s = 0..n-1, the token is the compressed id at p - s, or pad (the
//    compressed id of engram_pad_id) once p - s < 0 or an image position was
//    met at some shift <= s (padding is sticky: an n-gram never reaches over
//    the sequence start or an image span).
//  * Hash: r = t_0 * m_0; for order o = 2..n: r ^= t_{o-1} * m_{o-1}, and for
//    each head h: id = r % prime[o-2][h] + offset[o-2][h]. The ids of a
//    position are [order-major, head-minor], (n-1)*H of them.
//
// The compressed-token map comes from the tokenizer (a normalizing map with
// engram_compressed_vocab_size classes, built by runtime/tokenizer's
// EngramTokenMap, which this independent implementation does not include),
// so it is an input; empty, token t maps to t % engram_compressed_vocab_size
// (the identity when vocab_size <= V), for random weights.
//
// Also numpy's random machinery needed for the multipliers: SeedSequence
// (integer entropy, pool mixing, generate_state), PCG64 (128-bit LCG with
// XSL-RR output, buffered 32-bit draws) and Generator.integers for int64.
//
// Plain C++17 (no LLVM), shared with the runtime and the reference forward.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_MODELS_REFERENCE_ENGRAMHASH_H
#define CSA_MODELS_REFERENCE_ENGRAMHASH_H

#include "models/config/ModelConfig.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace csa {

//===----------------------------------------------------------------------===//
// numpy.random, as far as the Engram multipliers need it.
//===----------------------------------------------------------------------===//

/// numpy's `SeedSequence(entropy)` with the default pool of 4 words and no
/// spawn key.
class NumpySeedSequence {
public:
  /// Integer entropy: split into 32-bit words, lowest first (0 -> one word).
  explicit NumpySeedSequence(uint64_t entropy);
  /// Entropy already as 32-bit words (numpy's uint32-array entropy).
  explicit NumpySeedSequence(const std::vector<uint32_t> &entropyWords);

  const std::array<uint32_t, 4> &pool() const { return pool_; }

  /// `generate_state(nWords, np.uint32)`.
  std::vector<uint32_t> generateState32(size_t nWords) const;
  /// `generate_state(nWords, np.uint64)`: 2 * nWords 32-bit words, paired
  /// little-endian (low word first).
  std::vector<uint64_t> generateState64(size_t nWords) const;

private:
  std::array<uint32_t, 4> pool_{};
};

/// numpy's `PCG64` bit generator: 128-bit LCG (multiplier
/// 0x2360ed051fc65da44385df649fccf645), XSL-RR 128 -> 64 output of the
/// advanced state, 32-bit draws served as the low then the high half of one
/// 64-bit draw.
class NumpyPcg64 {
public:
  /// Seeded as numpy does: generate_state(4, uint64) gives initstate =
  /// (w0 << 64 | w1) and initseq = (w2 << 64 | w3).
  explicit NumpyPcg64(const NumpySeedSequence &seed);
  explicit NumpyPcg64(uint64_t seed) : NumpyPcg64(NumpySeedSequence(seed)) {}

  uint64_t next64();
  uint32_t next32();

  /// The LCG state and increment, as {high, low} 64-bit halves.
  std::array<uint64_t, 2> state() const { return {stateHi_, stateLo_}; }
  std::array<uint64_t, 2> increment() const { return {incHi_, incLo_}; }

private:
  void step();
  uint64_t stateHi_ = 0, stateLo_ = 0, incHi_ = 0, incLo_ = 0;
  bool hasHalf_ = false;
  uint32_t half_ = 0;
};

/// `Generator.integers(low, high, size=(count,), dtype=np.int64)` with the
/// default `endpoint=False`: numpy's Lemire rejection on the inclusive range
/// high - 1 - low (32-bit draws when that range fits in 32 bits). Requires
/// low < high.
std::vector<int64_t> numpyIntegersInt64(NumpyPcg64 &gen, int64_t low,
                                        int64_t high, size_t count);

//===----------------------------------------------------------------------===//
// Engram layout and multipliers.
//===----------------------------------------------------------------------===//

/// Deterministic primality for any 64-bit value (the reference uses sympy).
bool isPrime(uint64_t n);

/// The bucket layout of every engram layer of a config.
struct EngramLayout {
  int64_t maxNgramSize = 0;
  int64_t nHeads = 0;
  std::vector<int64_t> layerIds; ///< backbone layer ids, config order
  /// [engram layer][column], column = (order - 2) * nHeads + head.
  std::vector<std::vector<int64_t>> primes;
  std::vector<std::vector<int64_t>> offsets; ///< same shape as primes
  std::vector<int64_t> tableRows;            ///< sum of primes, per layer

  /// Hash ids per position: (max_ngram_size - 1) * n_heads.
  int64_t columns() const { return (maxNgramSize - 1) * nHeads; }
};

/// The layout the reference derives from engram_layer_ids, engram_vocab_size,
/// engram_max_ngram_size and engram_n_heads. Errors if the config has no
/// engram layers or out-of-range engram fields.
absl::StatusOr<EngramLayout> engramLayout(const ModelConfig &config);

/// OK if engram_num_embeddings equals the derived table rows of every layer;
/// otherwise an error listing both. (The reference does not check this: a
/// larger table has unused rows, ids past a smaller one read zeros.)
absl::Status checkEngramNumEmbeddings(const ModelConfig &config);

/// max(1, (INT64_MAX / compressedVocab) / 2): the exclusive bound of the
/// multiplier draws.
int64_t engramMultiplierBound(int64_t compressedVocab);

/// The odd multipliers of backbone layer `layerId`, one per shift
/// 0..maxNgramSize-1.
std::vector<int64_t> engramMultipliers(int64_t layerId, int64_t maxNgramSize,
                                       int64_t compressedVocab);

//===----------------------------------------------------------------------===//
// The hasher of one engram layer.
//===----------------------------------------------------------------------===//

class EngramHasher {
public:
  /// Marks an image position in a token history (the reference's DEAD): it
  /// takes part in no n-gram, and neither does anything before it.
  static constexpr int64_t kImageToken = -1;

  /// The hasher of backbone layer `layerId` (one of engram_layer_ids).
  /// `compressedMap[t]` is the compressed id of raw token t, each in
  /// [0, engram_compressed_vocab_size); empty means t % that size for
  /// t < vocab_size. Errors on a bad config, layer or map, and if the
  /// config's engram_num_embeddings is smaller than the derived table (ids
  /// would index past it).
  static absl::StatusOr<EngramHasher>
  create(const ModelConfig &config, int64_t layerId,
         std::vector<int64_t> compressedMap = {});

  /// Hash ids of positions [start, start + count), row-major
  /// [count][columns()], each a row of this layer's table (offset included).
  ///
  /// `tokens` holds raw ids (or kImageToken) of consecutive positions ending
  /// at start + count - 1: its last element is position start + count - 1,
  /// so tokens[i] is position start + count - tokens.size() + i. It must
  /// reach back to position max(0, start - (max_ngram_size - 1)); anything
  /// earlier is ignored. So prefill passes the prompt with start = 0,
  /// count = N; decode of position P passes the whole history, or just its
  /// last min(P, max_ngram_size - 1) ids followed by token P, with start = P,
  /// count = 1. Both give the same ids.
  absl::StatusOr<std::vector<int64_t>>
  hash(const std::vector<int64_t> &tokens, int64_t start, int64_t count) const;

  /// The ids of one position from its compressed tokens at shifts
  /// 0..max_ngram_size-1 (already padded): `shifted[s]` is the compressed
  /// token s positions back. Writes columns() ids to `out`.
  void hashShifted(const int64_t *shifted, int64_t *out) const;

  int64_t layerId() const { return layerId_; }
  int64_t maxNgramSize() const { return maxNgramSize_; }
  int64_t columns() const { return static_cast<int64_t>(primes_.size()); }
  const std::vector<int64_t> &primes() const { return primes_; }
  const std::vector<int64_t> &offsets() const { return offsets_; }
  const std::vector<int64_t> &multipliers() const { return multipliers_; }
  /// Rows of this layer's table (sum of its primes).
  int64_t tableRows() const { return tableRows_; }
  /// The compressed id that fills padded shifts.
  int64_t padCompressedId() const { return padId_; }
  /// The compressed id of raw token `token` (must be in range).
  int64_t compress(int64_t token) const { return map_[token]; }
  int64_t mapSize() const { return static_cast<int64_t>(map_.size()); }

private:
  EngramHasher() = default;

  int64_t layerId_ = 0;
  int64_t maxNgramSize_ = 0;
  int64_t nHeads_ = 0;
  std::vector<int64_t> primes_, offsets_, multipliers_, map_;
  int64_t tableRows_ = 0;
  int64_t padId_ = 0;
};

} // namespace csa

#endif // CSA_MODELS_REFERENCE_ENGRAMHASH_H

//===- EngramTables.h - Engram hash constants of DeepSeek-V4.1 --*- C++ -*-===//
//
// The constants of the Engram n-gram hash that the compiled model embeds in
// its hash kernels, derived as the released `inference/engram.py` derives
// them:
//
//  * multipliers: per Engram layer L, one odd number per n-gram shift,
//    2 * draw + 1 with the draws from `np.random.default_rng(10007 * L)
//    .integers(0, max(1, (INT64_MAX // V) // 2), size=(max_ngram_size,),
//    dtype=np.int64)`, V = the compressed vocabulary (the bound keeps every
//    token * multiplier below INT64_MAX);
//  * primes: one bucket count per (layer, order 2..max_ngram_size, head).
//    engram.py searches, per (layer, order), from vocab_size upwards for
//    primes not handed out before; that is the same as taking the primes at
//    or above vocab_size in increasing order, (max_ngram_size - 1) * n_heads
//    per layer, which is how they are computed here;
//  * offsets: each layer has one table; column (order - 2) * n_heads + head
//    starts where the buckets of the columns before it end.
//
// Written for the compiler from engram.py, independently of the reference
// forward's hasher (models/reference/EngramHash.h); test/unit/tables checks
// it against numpy and the released figures.
//
// Plain C++17 (no LLVM).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_MODELS_TABLES_ENGRAMTABLES_H
#define CSA_MODELS_TABLES_ENGRAMTABLES_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <vector>

namespace csa::tables {

/// What the hash constants depend on (engram.py's constructor arguments).
struct EngramHashShape {
  /// Backbone layer ids of the Engram layers; primes go out in this order.
  std::vector<int64_t> layerIds;
  int64_t maxNgramSize = 0;        ///< orders 2..maxNgramSize
  int64_t nHeads = 0;              ///< hash heads per order
  int64_t vocabSize = 0;           ///< where the prime search starts
  int64_t compressedVocabSize = 0; ///< bounds the multipliers
};

/// The constants of one Engram layer's hash.
struct EngramLayerTables {
  int64_t layerId = 0;
  std::vector<int64_t> multipliers; ///< one per shift 0..maxNgramSize-1
  /// Per column (order - 2) * nHeads + head: its bucket count and the row of
  /// the layer's table where its buckets start.
  std::vector<int64_t> primes, offsets;
  int64_t tableRows = 0; ///< sum of the primes
};

/// The constants of every Engram layer of `shape`, in its layer order.
/// Errors if the shape is empty or out of range, or a table's rows would
/// overflow int64.
absl::StatusOr<std::vector<EngramLayerTables>>
engramTables(const EngramHashShape &shape);

/// max(1, (INT64_MAX // compressedVocabSize) // 2), the exclusive bound of
/// the multiplier draws. Requires compressedVocabSize >= 1.
int64_t engramMultiplierBound(int64_t compressedVocabSize);

/// The odd multipliers of backbone layer `layerId`, one per shift.
std::vector<int64_t> engramMultipliers(int64_t layerId, int64_t maxNgramSize,
                                       int64_t compressedVocabSize);

/// Whether `n` is prime (engram.py asks sympy.isprime); exact for every
/// 64-bit value.
bool isPrime(uint64_t n);

} // namespace csa::tables

#endif // CSA_MODELS_TABLES_ENGRAMTABLES_H

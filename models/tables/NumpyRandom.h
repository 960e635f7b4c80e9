//===- NumpyRandom.h - numpy's random generators for engram.py --*- C++ -*-===//
//
// The Engram hash multipliers of the released model are drawn with
// `np.random.default_rng(seed).integers(0, bound, size, dtype=np.int64)`, so
// the compiler needs numpy's random pipeline bit for bit:
//
//   SeedSequence(seed)  -> 128 bits of pool -> generate_state(4, uint64)
//   PCG64(those words)  -> 128-bit LCG, XSL-RR output, 64- and 32-bit draws
//   Generator.integers  -> Lemire's bounded draws on [low, high)
//
// Written from numpy's sources (numpy/random/bit_generator.pyx,
// src/pcg64/pcg64.h, src/distributions/distributions.c), for the compiler,
// independently of the reference forward's port (models/reference/
// EngramHash.h); test/unit/tables checks it against numpy's own output.
//
// Plain C++17 (no LLVM).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_MODELS_TABLES_NUMPYRANDOM_H
#define CSA_MODELS_TABLES_NUMPYRANDOM_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace csa::tables {

/// `np.random.SeedSequence(entropy)`: a non-negative integer seed, no spawn
/// key, the default pool of four 32-bit words.
class SeedSequence {
public:
  static constexpr size_t kPoolWords = 4;

  explicit SeedSequence(uint64_t entropy);

  const std::array<uint32_t, kPoolWords> &pool() const { return pool_; }

  /// `generate_state(words, np.uint32)`.
  std::vector<uint32_t> generateState32(size_t words) const;
  /// `generate_state(words, np.uint64)`: twice as many 32-bit words, each
  /// pair read as one little-endian 64-bit word.
  std::vector<uint64_t> generateState64(size_t words) const;

private:
  std::array<uint32_t, kPoolWords> pool_{};
};

/// `np.random.PCG64(seed)`: the 128-bit permuted congruential generator.
class Pcg64 {
public:
  explicit Pcg64(const SeedSequence &seed);
  explicit Pcg64(uint64_t seed) : Pcg64(SeedSequence(seed)) {}

  /// `random_raw()`: one 64-bit output.
  uint64_t nextUint64();
  /// numpy's 32-bit draw: the low half of a fresh 64-bit output, then its
  /// high half on the next call.
  uint32_t nextUint32();

  /// The LCG's state and increment right now, as {high, low} 64-bit words
  /// (numpy's `bit_generator.state["state"]`).
  std::array<uint64_t, 2> state() const;
  std::array<uint64_t, 2> increment() const;

private:
  __extension__ typedef unsigned __int128 Uint128;
  void advance();

  Uint128 state_ = 0;
  Uint128 increment_ = 0;
  /// The high half of the last 64-bit output, while not yet handed out.
  bool hasPendingHalf_ = false;
  uint32_t pendingHalf_ = 0;
};

/// `Generator(Pcg64).integers(low, high, size=(count,), dtype=np.int64)`
/// with numpy's defaults (endpoint=False, Lemire's method). Requires
/// low < high.
std::vector<int64_t> integersInt64(Pcg64 &generator, int64_t low, int64_t high,
                                   size_t count);

} // namespace csa::tables

#endif // CSA_MODELS_TABLES_NUMPYRANDOM_H

//===- RopeTables.h - RoPE frequencies of DeepSeek-V4.1 ---------*- C++ -*-===//
//
// The rotation frequency of each channel pair of a RoPE table, as the
// released `inference/model.py` computes them in `precompute_freqs_cis`:
// theta^(-2i/dim) in fp32 and, for the tables that extend the context with
// YaRN, a blend of those frequencies and the frequencies divided by the
// YaRN factor (no attention-scale change: DeepSeek-V4.1 uses mscale 1).
// The compiled model embeds these fp32 values in its RoPE kernels, which
// take cos and sin of position * frequency themselves.
//
// Written for the compiler from model.py, independently of the reference
// forward's tables (models/reference/Kernels.h); test/unit/tables checks it
// against numpy and the released figures.
//
// Plain C++17 (no LLVM).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_MODELS_TABLES_ROPETABLES_H
#define CSA_MODELS_TABLES_ROPETABLES_H

#include <cstdint>
#include <optional>
#include <vector>

namespace csa::tables {

/// YaRN's parameters (model.py's rope_factor, original_seq_len, beta_fast,
/// beta_slow).
struct YarnScaling {
  double factor = 1;
  int64_t originalSeqLen = 0;
  double betaFast = 0;
  double betaSlow = 0;
};

/// `find_correction_range`: pairs below `low` keep their frequency, pairs
/// from `high` on are divided by the factor, a linear ramp lies between.
/// Whole numbers, clamped to low >= 0 and high <= dim - 1 as model.py does
/// (so high < low is possible for a tiny original_seq_len).
struct YarnRamp {
  double low = 0;
  double high = 0;
};
YarnRamp yarnCorrectionRange(int64_t dim, double theta,
                             const YarnScaling &yarn);

/// The dim / 2 pair frequencies of a table rotating `dim` channels (even)
/// with base `theta`; YaRN-blended when `yarn` is given.
std::vector<float> ropeFrequencies(int64_t dim, double theta,
                                   const std::optional<YarnScaling> &yarn);

} // namespace csa::tables

#endif // CSA_MODELS_TABLES_ROPETABLES_H

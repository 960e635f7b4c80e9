//===- Quantize.h - Block quantizers, cache rows, weights -------*- C++ -*-===//
//
// The block quantizers of the released kernels (`act_quant`, `fp4_act_quant`,
// spec §7), the three byte-level cache rows built from them (spec §4), and
// dequantization of the FP8 / FP4 checkpoint weights (spec §6).
//
// Inputs are fp32. The reference feeds bf16 tensors (its kernels are compiled
// for bf16 input and upcast to fp32 first), so callers convert bf16 to fp32
// before calling; for such inputs every result here is bit-exact with the
// reference. All element arithmetic is the reference's fp32 arithmetic in the
// same order (x / s is a division, not a multiply by 1/s).
//
// Non-finite inputs (the reference never produces them; its own results
// would be NaN for the whole group): the block amax ignores NaN elements and
// counts +-inf as FLT_MAX, so one bad element cannot poison its group's
// scale. The element itself is then encoded by the scalar codecs: +-inf
// saturates to +-max * scale, NaN becomes E4M3 NaN (FP8 formats) or +0 (FP4).
//
// Buffers are raw pointers; the element count must be a multiple of the block
// (checked with assert). Scales of consecutive blocks are stored in order.
//
//===----------------------------------------------------------------------===//

#ifndef CSA_RUNTIME_NUMERICS_QUANTIZE_H
#define CSA_RUNTIME_NUMERICS_QUANTIZE_H

#include "runtime/numerics/Formats.h"

#include <cstddef>
#include <cstdint>

namespace csa {
namespace numerics {

//===----------------------------------------------------------------------===//
// Per-block scale rules (amax = max |x| over the block, before any floor)
//===----------------------------------------------------------------------===//

/// amax floors of the kernels: they keep an all-zero block's scale non-zero.
constexpr float kFp8AmaxFloor = 1e-4f;                           // act_quant
constexpr float kFp4E4M3AmaxFloor = 6.0f * detail::exp2i(-9);    // 6 * 2^-9
constexpr float kFp4Ue8m0AmaxFloor = 6.0f * detail::exp2i(-126); // 6 * 2^-126
/// The kernels multiply by these fp32 reciprocals (`fp8_max_inv`,
/// `fp4_max_inv`); fp32(1/6) is inexact, which the scale rule depends on.
constexpr float kFp8MaxInv = 1.0f / 448.0f;
constexpr float kFp4MaxInv = 1.0f / 6.0f;

/// max |x[i]|, ignoring NaN and counting +-inf as FLT_MAX (see file comment).
float blockAmax(const float *x, std::size_t n);

/// act_quant, scale_fmt="ue8m0": 2^ceil(log2(max(amax, 1e-4) * fp32(1/448))).
std::uint8_t fp8Ue8m0ScaleCode(float amax);
/// act_quant without scale_fmt: max(amax, 1e-4) * fp32(1/448), an fp32 scale.
float fp8Fp32Scale(float amax);
/// fp4_act_quant, E8M0 path: 2^ceil(log2(max(amax, 6*2^-126) * fp32(1/6))).
std::uint8_t fp4Ue8m0ScaleCode(float amax);
/// fp4_act_quant, E4M3 path: e4m3_RNE(max(amax, 6*2^-9) / 6), never zero.
std::uint8_t fp4E4M3ScaleCode(float amax);

//===----------------------------------------------------------------------===//
// act_quant: FP8 E4M3 values, one scale per block along the last dimension
//===----------------------------------------------------------------------===//

enum class Fp8ScaleFormat {
  Fp32,  ///< scale_fmt=None: s = amax / 448 in fp32
  Ue8m0, ///< scale_fmt="ue8m0": power-of-two s (what V4.1 uses, block 32)
};

/// Quantizes n values (blocks of `blockSize`) to E4M3 codes `codes[n]`:
/// q = e4m3_satfinite_RNE(x / s). `scales[n / blockSize]` receives s as fp32
/// (an exact power of two for Ue8m0; encodeUe8m0 turns it into its byte).
void actQuant(const float *x, std::size_t n, std::size_t blockSize,
              Fp8ScaleFormat format, std::uint8_t *codes, float *scales);

/// Same with Ue8m0 scales stored as UE8M0 bytes (scale_dtype=float8_e8m0fnu,
/// as the model calls it for its FP8 GEMM inputs).
void actQuantUe8m0(const float *x, std::size_t n, std::size_t blockSize,
                   std::uint8_t *codes, std::uint8_t *scaleCodes);

/// codes * scale per block, in fp32.
void actDequant(const std::uint8_t *codes, const float *scales, std::size_t n,
                std::size_t blockSize, float *out);
/// Same with UE8M0 scale bytes (exact in fp32 and in bf16).
void actDequantUe8m0(const std::uint8_t *codes, const std::uint8_t *scaleCodes,
                     std::size_t n, std::size_t blockSize, float *out);

/// act_quant(inplace=True): quantize, dequantize and store back, rounded to
/// bf16 as the reference writes into its bf16 tensor (a no-op for Ue8m0,
/// where q * s is exact in bf16; it matters for Fp32 scales).
void actQuantInplace(float *x, std::size_t n, std::size_t blockSize,
                     Fp8ScaleFormat format);

//===----------------------------------------------------------------------===//
// fp4_act_quant: packed E2M1 values, one scale per block
//===----------------------------------------------------------------------===//

enum class Fp4ScaleFormat {
  Ue8m0, ///< power-of-two scale; V4.1 uses block 32 (indexer keys)
  E4M3,  ///< scale = e4m3(amax / 6); V4.1 uses block 16 (main KV)
};

/// Quantizes n values to packed E2M1, `packed[n / 2]` with element 2i in the
/// low nibble of byte i: q = e2m1_RNE(clamp(x / s, -6, 6)). `scaleCodes` gets
/// n / blockSize UE8M0 or E4M3 bytes. blockSize must be even.
void fp4ActQuant(const float *x, std::size_t n, std::size_t blockSize,
                 Fp4ScaleFormat format, std::uint8_t *packed,
                 std::uint8_t *scaleCodes);

/// Inverse of fp4ActQuant, in fp32 (E2M1 * UE8M0 and E2M1 * E4M3 products are
/// exact in fp32 and in bf16).
void fp4ActDequant(const std::uint8_t *packed, const std::uint8_t *scaleCodes,
                   std::size_t n, std::size_t blockSize, Fp4ScaleFormat format,
                   float *out);

/// fp4_act_quant(inplace=True): quantize and dequantize back into x.
void fp4ActQuantInplace(float *x, std::size_t n, std::size_t blockSize,
                        Fp4ScaleFormat format);

//===----------------------------------------------------------------------===//
// Cache rows (spec §4): data bytes first, then the scale bytes of the row
//===----------------------------------------------------------------------===//

enum class RowFormat {
  MainKvFp4,   ///< "V41_FP4": E2M1 + E4M3 scale per 16 (512 -> 288 B)
  IndexKeyFp4, ///< indexer K: E2M1 + UE8M0 scale per 32 (128 -> 68 B)
  SwaKvFp8,    ///< "V41": E4M3 + UE8M0 scale per 32 (512 -> 528 B)
};

/// Dimensions of the released model.
constexpr std::size_t kMainKvDim = 512;
constexpr std::size_t kIndexKeyDim = 128;
constexpr std::size_t kSwaKvDim = 512;

/// Channels per scale.
constexpr std::size_t kMainKvGroup = 16;
constexpr std::size_t kIndexKeyGroup = 32;
constexpr std::size_t kSwaKvGroup = 32;

/// Byte sizes; dim must be a multiple of the format's group.
constexpr std::size_t mainKvRowBytes(std::size_t dim) {
  return dim / 2 + dim / kMainKvGroup;
}
constexpr std::size_t indexKeyRowBytes(std::size_t dim) {
  return dim / 2 + dim / kIndexKeyGroup;
}
constexpr std::size_t swaKvRowBytes(std::size_t dim) {
  return dim + dim / kSwaKvGroup;
}
/// Offset of the first scale byte (= number of data bytes).
constexpr std::size_t rowScaleOffset(RowFormat format, std::size_t dim) {
  return format == RowFormat::SwaKvFp8 ? dim : dim / 2;
}
constexpr std::size_t rowGroup(RowFormat format) {
  return format == RowFormat::MainKvFp4     ? kMainKvGroup
         : format == RowFormat::IndexKeyFp4 ? kIndexKeyGroup
                                            : kSwaKvGroup;
}
constexpr std::size_t rowBytes(RowFormat format, std::size_t dim) {
  return format == RowFormat::MainKvFp4     ? mainKvRowBytes(dim)
         : format == RowFormat::IndexKeyFp4 ? indexKeyRowBytes(dim)
                                            : swaKvRowBytes(dim);
}

static_assert(mainKvRowBytes(kMainKvDim) == 288, "V41_FP4 entry is 288 B");
static_assert(indexKeyRowBytes(kIndexKeyDim) == 68, "index-K entry is 68 B");
static_assert(swaKvRowBytes(kSwaKvDim) == 528, "V41 SWA entry is 528 B");

/// Quantizes one row of `dim` values into `row[rowBytes(format, dim)]`.
void quantizeRow(RowFormat format, const float *x, std::size_t dim,
                 std::uint8_t *row);
/// Dequantizes one row to fp32 `out[dim]`.
void dequantizeRow(RowFormat format, const std::uint8_t *row, std::size_t dim,
                   float *out);

inline void quantizeMainKvRow(const float *x, std::size_t dim,
                              std::uint8_t *row) {
  quantizeRow(RowFormat::MainKvFp4, x, dim, row);
}
inline void dequantizeMainKvRow(const std::uint8_t *row, std::size_t dim,
                                float *out) {
  dequantizeRow(RowFormat::MainKvFp4, row, dim, out);
}
inline void quantizeIndexKeyRow(const float *x, std::size_t dim,
                                std::uint8_t *row) {
  quantizeRow(RowFormat::IndexKeyFp4, x, dim, row);
}
inline void dequantizeIndexKeyRow(const std::uint8_t *row, std::size_t dim,
                                  float *out) {
  dequantizeRow(RowFormat::IndexKeyFp4, row, dim, out);
}
inline void quantizeSwaKvRow(const float *x, std::size_t dim,
                             std::uint8_t *row) {
  quantizeRow(RowFormat::SwaKvFp8, x, dim, row);
}
inline void dequantizeSwaKvRow(const std::uint8_t *row, std::size_t dim,
                               float *out) {
  dequantizeRow(RowFormat::SwaKvFp8, row, dim, out);
}

//===----------------------------------------------------------------------===//
// V4's FP8 main-KV row (spec §4, "V4" / FlashMLA MODEL1_FP8Sparse), a cache
// format variant (issue 18): the NoPE channels as E4M3 with a UE8M0 scale per
// group (act_quant(kv[..., :-rope], 64, "ue8m0")), the RoPE channels as bf16,
// then the scale bytes padded to 8: 448 + 128 + 7 + 1 = 584 B at the released
// widths. Values are the NoPE bytes, the rope bf16 pairs (little-endian),
// then the scales.
//===----------------------------------------------------------------------===//

/// The released group; narrower test widths whose NoPE part is not a
/// multiple of 64 use the largest power of two that divides it.
constexpr std::size_t kMainKvFp8Group = 64;
constexpr std::size_t mainKvFp8Group(std::size_t nope) {
  std::size_t g = kMainKvFp8Group;
  while (g > 1 && nope % g != 0)
    g /= 2;
  return g;
}
constexpr std::size_t mainKvFp8ScaleBytes(std::size_t nope) {
  return (nope / mainKvFp8Group(nope) + 7) / 8 * 8;
}
/// Offsets in the row: NoPE codes at 0, rope bf16 at `nope`, scales after.
constexpr std::size_t mainKvFp8ScaleOffset(std::size_t dim, std::size_t rope) {
  return (dim - rope) + 2 * rope;
}
constexpr std::size_t mainKvFp8RowBytes(std::size_t dim, std::size_t rope) {
  return mainKvFp8ScaleOffset(dim, rope) + mainKvFp8ScaleBytes(dim - rope);
}
static_assert(mainKvFp8RowBytes(kMainKvDim, 64) == 584, "V4 entry is 584 B");

/// Quantizes one row of `dim` values whose last `rope` are the RoPE channels
/// (rope < dim) into `row[mainKvFp8RowBytes(dim, rope)]`; pad bytes are 0.
void quantizeMainKvFp8Row(const float *x, std::size_t dim, std::size_t rope,
                          std::uint8_t *row);
/// Its inverse, in fp32 (E4M3 x UE8M0 products and bf16 values are exact).
void dequantizeMainKvFp8Row(const std::uint8_t *row, std::size_t dim,
                            std::size_t rope, float *out);

//===----------------------------------------------------------------------===//
// The FP8 index-key row, a cache format variant (issue 18): `dim` E4M3 values
// and one fp32 scale for the row, little-endian (act_quant(k, dim) without
// scale_fmt: s = max(amax, 1e-4) * fp32(1/448)): 128 + 4 = 132 B at the
// released widths. The rows' readers (the index scoring) take the values
// rounded to bf16, as the FP4 rows' (where that rounding is exact).
//===----------------------------------------------------------------------===//

constexpr std::size_t indexKeyFp8RowBytes(std::size_t dim) { return dim + 4; }
static_assert(indexKeyFp8RowBytes(kIndexKeyDim) == 132, "FP8 index key is 132 B");

/// Quantizes one row of `dim` values into `row[indexKeyFp8RowBytes(dim)]`.
void quantizeIndexKeyFp8Row(const float *x, std::size_t dim, std::uint8_t *row);
/// Its inverse, in fp32: code * scale (not rounded to bf16).
void dequantizeIndexKeyFp8Row(const std::uint8_t *row, std::size_t dim, float *out);

//===----------------------------------------------------------------------===//
// Checkpoint weights (spec §6)
//===----------------------------------------------------------------------===//

/// FP8 weight [n, k] (E4M3, row-major) with UE8M0 block scales
/// [ceil(n / blockSize), ceil(k / blockSize)] (V4.1: 32 x 32 blocks) to fp32
/// `out[n * k]`. n and k need not be multiples of the block.
void dequantizeFp8Weight(const std::uint8_t *weight,
                         const std::uint8_t *scaleCodes, std::size_t n,
                         std::size_t k, float *out, std::size_t blockSize = 32);

/// FP4 expert weight stored as I8 [n, k / 2] (E2M1 pairs, even k in the low
/// nibble) with a UE8M0 scale per 32 along k, [n, k / 32], to fp32
/// `out[n * k]`. k must be a multiple of 32.
void dequantizeFp4Weight(const std::uint8_t *packed,
                         const std::uint8_t *scaleCodes, std::size_t n,
                         std::size_t k, float *out);

constexpr std::size_t kFp4WeightGroup = 32;

} // namespace numerics
} // namespace csa

#endif // CSA_RUNTIME_NUMERICS_QUANTIZE_H

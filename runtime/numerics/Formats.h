//===- Formats.h - Scalar codecs: bf16, E4M3, E2M1, UE8M0 -------*- C++ -*-===//
//
// Bit-exact scalar conversions between fp32 and the narrow formats used by
// DeepSeek-V4.1-Flash (spec: model-architecture.md §4, §7). Plain C++17 so the
// compiler, the CPU runtime and the reference forward share one definition.
//
// Every encoder rounds to nearest, ties to even, straight from the fp32 value
// (one rounding), and saturates instead of overflowing ("satfinite"), which is
// what the CUDA `cvt.rn.satfinite` conversions and the torch port of the
// reference kernels do. The choices where no reference defines the result
// (NaN into formats without NaN, UE8M0 of zero, ...) are listed per function.
//
//===----------------------------------------------------------------------===//

#ifndef CSA_RUNTIME_NUMERICS_FORMATS_H
#define CSA_RUNTIME_NUMERICS_FORMATS_H

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>

namespace csa {
namespace numerics {

//===----------------------------------------------------------------------===//
// fp32 bit access
//===----------------------------------------------------------------------===//

inline std::uint32_t floatBits(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

inline float floatFromBits(std::uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

//===----------------------------------------------------------------------===//
// bf16
//===----------------------------------------------------------------------===//

/// fp32 -> bf16 bits, round to nearest even. Overflow rounds to infinity as
/// IEEE requires (bf16 has fp32's exponent range, so only values within half
/// a bf16 ulp of FLT_MAX do). NaN keeps its sign and top payload bits and
/// gets the quiet bit set, so a NaN never turns into an infinity.
std::uint16_t floatToBf16(float x);

inline float bf16ToFloat(std::uint16_t bits) {
  return floatFromBits(static_cast<std::uint32_t>(bits) << 16);
}

/// The value the reference gets by storing `x` into a bf16 tensor.
inline float roundToBf16(float x) { return bf16ToFloat(floatToBf16(x)); }

//===----------------------------------------------------------------------===//
// Decode tables (constexpr so that decoding is a load, usable in hot loops)
//===----------------------------------------------------------------------===//

namespace detail {
// 2^e for small |e| without <cmath>, usable in constant expressions.
constexpr float exp2i(int e) {
  float r = 1.0f;
  for (; e > 0; --e)
    r *= 2.0f;
  for (; e < 0; ++e)
    r *= 0.5f;
  return r;
}

constexpr std::array<float, 256> makeE4M3Table() {
  std::array<float, 256> table{};
  for (unsigned code = 0; code < 256; ++code) {
    unsigned exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
    float mag = 0.0f;
    if ((code & 0x7F) == 0x7F)
      mag = std::numeric_limits<float>::quiet_NaN();
    else if (exponent == 0)
      mag = static_cast<float>(mantissa) * exp2i(-9); // subnormal: m * 2^-9
    else
      mag = static_cast<float>(8 + mantissa) *
            exp2i(static_cast<int>(exponent) - 10);
    table[code] = (code & 0x80) ? -mag : mag;
  }
  return table;
}
} // namespace detail

//===----------------------------------------------------------------------===//
// E4M3 (OCP FP8 E4M3FN)
//===----------------------------------------------------------------------===//

/// Largest finite E4M3 magnitude (code 0x7E).
constexpr float kE4M3Max = 448.0f;
/// Smallest positive E4M3 value (subnormal code 0x01).
constexpr float kE4M3MinSubnormal = detail::exp2i(-9);
/// The canonical NaN the encoder produces (the format has no infinities).
constexpr std::uint8_t kE4M3NaN = 0x7F;

/// Value of every E4M3 code: bias 7, subnormals m * 2^-9, S.1111.111 = NaN.
inline constexpr std::array<float, 256> kE4M3Values = detail::makeE4M3Table();

inline float decodeE4M3(std::uint8_t code) { return kE4M3Values[code]; }

/// fp32 -> E4M3 code, RNE with saturation: |x| > 448 (including infinity)
/// gives +-448; NaN gives 0x7F whatever its sign (as CUDA's satfinite cvt).
/// The sign of zero is kept, also for negative values that round to zero.
std::uint8_t encodeE4M3(float x);

inline float roundToE4M3(float x) { return decodeE4M3(encodeE4M3(x)); }

//===----------------------------------------------------------------------===//
// E2M1 (FP4)
//===----------------------------------------------------------------------===//

/// Largest E2M1 magnitude (code 0x7).
constexpr float kE2M1Max = 6.0f;

/// Value of every 4-bit E2M1 code; bit 3 is the sign, so code 8 is -0.
inline constexpr std::array<float, 16> kE2M1Values = {
    0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/// Decodes the low 4 bits of `code`.
inline float decodeE2M1(std::uint8_t code) { return kE2M1Values[code & 0xF]; }

/// fp32 -> 4-bit E2M1 code, RNE (ties to the even mantissa: 0.25 -> 0,
/// 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), saturating
/// at +-6 (infinities included). The sign is kept, so -0 and small negative
/// values give code 8 (-0), as the reference's sign-bit packing does.
/// NaN gives code 0 (+0): the format has no NaN, the reference kernels clamp
/// before converting so NaN never reaches them, and +0 keeps a poisoned
/// element from turning into a maximal value.
std::uint8_t encodeE2M1(float x);

inline float roundToE2M1(float x) { return decodeE2M1(encodeE2M1(x)); }

/// Two E2M1 codes in one byte: the even element in the low nibble.
inline std::uint8_t packE2M1(std::uint8_t even, std::uint8_t odd) {
  return static_cast<std::uint8_t>((even & 0xF) | ((odd & 0xF) << 4));
}
inline std::uint8_t lowE2M1(std::uint8_t byte) { return byte & 0xF; }
inline std::uint8_t highE2M1(std::uint8_t byte) { return byte >> 4; }

//===----------------------------------------------------------------------===//
// UE8M0 (scale: unsigned, exponent only)
//===----------------------------------------------------------------------===//

constexpr int kUe8m0Bias = 127;
constexpr std::uint8_t kUe8m0NaN = 0xFF;

/// Byte e means 2^(e-127); e = 0 is 2^-127, an fp32 subnormal; 0xFF is NaN.
inline float decodeUe8m0(std::uint8_t code) {
  if (code == kUe8m0NaN)
    return std::numeric_limits<float>::quiet_NaN();
  if (code == 0)
    return floatFromBits(0x00400000u); // 2^-127
  return floatFromBits(static_cast<std::uint32_t>(code) << 23);
}

/// fp32 -> UE8M0 code. A power of two in [2^-127, 2^127] is exact; any other
/// magnitude rounds *up* to the next power of two, the direction every
/// scale computation here needs (the scaled values must not exceed the
/// element format's range). The sign is ignored. Choices where the format
/// cannot represent the value: +-0 and magnitudes below 2^-127 give 0x00
/// (2^-127); magnitudes above 2^127 and infinities saturate to 0xFE (2^127);
/// NaN gives 0xFF.
std::uint8_t encodeUe8m0(float x);

/// The reference's `fast_round_scale` (kernel.py "exponent-bit trick") on an
/// already multiplied value x = amax * max_inv: the biased fp32 exponent of x,
/// plus one when its mantissa is non-zero, i.e. 2^ceil(log2(x)) as a UE8M0
/// code. It only differs from encodeUe8m0 outside the range the callers use
/// (they floor amax so x is a positive normal): it gives 0 for zero, 1 for
/// an fp32 subnormal, 0xFF for inf, NaN and values above 2^127, and it
/// ignores the sign bit.
inline std::uint8_t ceilPow2Ue8m0(float x) {
  std::uint32_t bits = floatBits(x);
  std::uint32_t exponent = (bits >> 23) & 0xFF;
  std::uint32_t code = exponent + ((bits & 0x7FFFFF) != 0 ? 1 : 0);
  return static_cast<std::uint8_t>(code > 0xFF ? 0xFF : code);
}

//===----------------------------------------------------------------------===//
// Batch encoders
//===----------------------------------------------------------------------===//

// The encoders above over arrays, for bulk conversion (a generated or
// converted checkpoint). Same bytes for every input, NaN and infinity
// included; built without calls or branches so they vectorize (on x86-64 also
// as AVX2 and AVX-512 clones picked at load time).

/// dst[i] = encodeE4M3(v[i] * m).
void encodeE4M3Scaled(const float *v, float m, std::int64_t n, std::uint8_t *dst);
/// dst[j] = packE2M1(encodeE2M1(v[2j] * m), encodeE2M1(v[2j + 1] * m)).
void encodeE2M1PairsScaled(const float *v, float m, std::int64_t pairs,
                           std::uint8_t *dst);
/// dst[2i], dst[2i + 1] = floatToBf16(v[i]), little-endian.
void floatToBf16Bytes(const float *v, std::int64_t n, std::uint8_t *dst);

} // namespace numerics
} // namespace csa

#endif // CSA_RUNTIME_NUMERICS_FORMATS_H

//===- Formats.cpp - Scalar codecs: bf16, E4M3, E2M1, UE8M0 ---------------===//
//
// The encoders work on the fp32 bit pattern with integer arithmetic only, so
// the result does not depend on the floating-point environment (rounding
// mode, flush-to-zero, x87 excess precision).
//
//===----------------------------------------------------------------------===//

#include "runtime/numerics/Formats.h"

namespace csa {
namespace numerics {

namespace {

/// Rounds the magnitude |x| (finite, sign ignored) to a binary format with
/// `manBits` stored mantissa bits and exponent bias `bias`, with gradual
/// underflow and no upper limit, and returns the magnitude code
/// (exponent field << manBits | mantissa field). The caller saturates.
///
/// The code of a value with significand q (in units of the target quantum at
/// exponent max(e, emin)) is ((max(e, emin) + bias - 1) << manBits) + q. This
/// single formula covers normals, subnormals (whose exponent field is 0) and
/// the carry when rounding reaches the next binade.
std::uint32_t roundMagnitude(std::uint32_t absBits, int manBits, int bias) {
  int biasedExp = static_cast<int>(absBits >> 23);
  std::uint32_t significand = absBits & 0x7FFFFF;
  if (biasedExp == 0)
    biasedExp = 1; // fp32 subnormal: exponent -126, no implicit bit
  else
    significand |= 0x800000;
  int exponent = biasedExp - 127;
  int minExponent = 1 - bias;
  int targetExponent = exponent < minExponent ? minExponent : exponent;
  // Number of low significand bits below the target quantum.
  int shift = 23 - manBits + (targetExponent - exponent);
  std::uint32_t q;
  if (shift > 24) {
    q = 0; // significand < 2^24 <= 2^(shift-1): below half a quantum
  } else {
    q = significand >> shift;
    std::uint32_t rem = significand & ((1u << shift) - 1);
    std::uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
      ++q;
  }
  return (static_cast<std::uint32_t>(targetExponent + bias - 1) << manBits) + q;
}

} // namespace

std::uint16_t floatToBf16(float x) {
  std::uint32_t bits = floatBits(x);
  if ((bits & 0x7FFFFFFF) > 0x7F800000)
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040);
  // Adding 0x7FFF plus the lsb of the kept part rounds half to even; a carry
  // out of the mantissa correctly bumps the exponent (up to infinity).
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<std::uint16_t>(bits >> 16);
}

std::uint8_t encodeE4M3(float x) {
  std::uint32_t bits = floatBits(x);
  std::uint32_t absBits = bits & 0x7FFFFFFF;
  if (absBits > 0x7F800000)
    return kE4M3NaN;
  std::uint8_t sign = static_cast<std::uint8_t>((bits >> 24) & 0x80);
  // Anything above 448 rounds to 448 or to the NaN slot (480): saturate. This
  // also covers infinity and keeps the shift arithmetic away from huge values.
  if (absBits > floatBits(kE4M3Max))
    return sign | 0x7E;
  return sign | static_cast<std::uint8_t>(roundMagnitude(absBits, 3, 7));
}

std::uint8_t encodeE2M1(float x) {
  std::uint32_t bits = floatBits(x);
  std::uint32_t absBits = bits & 0x7FFFFFFF;
  if (absBits > 0x7F800000)
    return 0; // NaN: documented choice, +0
  std::uint8_t sign = static_cast<std::uint8_t>((bits >> 28) & 0x8);
  if (absBits > floatBits(kE2M1Max))
    return sign | 0x7;
  return sign | static_cast<std::uint8_t>(roundMagnitude(absBits, 1, 1));
}

std::uint8_t encodeUe8m0(float x) {
  std::uint32_t absBits = floatBits(x) & 0x7FFFFFFF;
  if (absBits > 0x7F800000)
    return kUe8m0NaN;
  if (absBits <= 0x00400000) // +-0 up to 2^-127 inclusive
    return 0;
  if (absBits < 0x00800000)
    return 1; // (2^-127, 2^-126): fp32 subnormal, rounds up to 2^-126
  std::uint32_t code = (absBits >> 23) + ((absBits & 0x7FFFFF) != 0 ? 1 : 0);
  return static_cast<std::uint8_t>(code > 0xFE ? 0xFE : code);
}

//===----------------------------------------------------------------------===//
// Batch encoders
//===----------------------------------------------------------------------===//

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CSA_CPU_CLONES                                                         \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CSA_CPU_CLONES
#endif

namespace {
/// roundMagnitude for one format, as selects: a shift past the significand
/// (clamped to 31) leaves q = 0 and no carry, as the branch there does.
template <int ManBits, int Bias>
inline std::uint32_t roundMagnitudeSelect(std::uint32_t absBits) {
  const std::int32_t field = std::int32_t(absBits >> 23);
  const std::uint32_t significand =
      (absBits & 0x7FFFFF) | (field != 0 ? 0x800000u : 0u);
  const std::int32_t exponent = (field != 0 ? field : 1) - 127;
  const std::int32_t target = exponent < 1 - Bias ? 1 - Bias : exponent;
  std::int32_t shift = 23 - ManBits + (target - exponent);
  shift = shift > 31 ? 31 : shift;
  const std::uint32_t q = significand >> shift;
  const std::uint32_t rem = significand & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  const std::uint32_t up = (rem > half) | ((rem == half) & (q & 1));
  return (std::uint32_t(target + Bias - 1) << ManBits) + q + up;
}
} // namespace

CSA_CPU_CLONES
void encodeE4M3Scaled(const float *v, float m, std::int64_t n,
                      std::uint8_t *dst) {
  const std::uint32_t maxBits = floatBits(kE4M3Max);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t bits = floatBits(v[i] * m), absBits = bits & 0x7FFFFFFF;
    const std::uint32_t sign = (bits >> 24) & 0x80;
    const std::uint32_t code =
        absBits > 0x7F800000 ? kE4M3NaN
        : absBits > maxBits  ? sign | 0x7E
                             : sign | roundMagnitudeSelect<3, 7>(absBits);
    dst[i] = std::uint8_t(code);
  }
}

CSA_CPU_CLONES
void encodeE2M1PairsScaled(const float *v, float m, std::int64_t pairs,
                           std::uint8_t *dst) {
  const std::uint32_t maxBits = floatBits(kE2M1Max);
  for (std::int64_t j = 0; j < pairs; ++j) {
    std::uint32_t code[2];
    for (int k = 0; k < 2; ++k) {
      const std::uint32_t bits = floatBits(v[2 * j + k] * m),
                          absBits = bits & 0x7FFFFFFF;
      const std::uint32_t sign = (bits >> 28) & 0x8;
      code[k] = absBits > 0x7F800000 ? 0u
                : absBits > maxBits  ? sign | 0x7
                                     : sign | roundMagnitudeSelect<1, 1>(absBits);
    }
    dst[j] = std::uint8_t(code[0] | (code[1] << 4));
  }
}

CSA_CPU_CLONES
void floatToBf16Bytes(const float *v, std::int64_t n, std::uint8_t *dst) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t bits = floatBits(v[i]);
    const std::uint32_t rounded =
        (bits & 0x7FFFFFFF) > 0x7F800000 ? (bits | 0x00400000)
                                         : bits + 0x7FFF + ((bits >> 16) & 1);
    dst[2 * i] = std::uint8_t(rounded >> 16);
    dst[2 * i + 1] = std::uint8_t(rounded >> 24);
  }
}

} // namespace numerics
} // namespace csa

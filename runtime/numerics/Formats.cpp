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

} // namespace numerics
} // namespace csa

//===- Quantize.cpp - Block quantizers, cache rows, weight dequant --------===//
//
// Mirrors the torch port of the released kernels (act_quant, fp4_act_quant)
// operation by operation; see Quantize.h for the contract.
//
//===----------------------------------------------------------------------===//

#include "runtime/numerics/Quantize.h"

#include <algorithm>

#include <cassert>
#include <cmath>
#include <limits>

namespace csa {
namespace numerics {

namespace {

float floorAmax(float amax, float minimum) {
  return amax < minimum ? minimum : amax;
}

float fp4ScaleValue(Fp4ScaleFormat format, std::uint8_t code) {
  return format == Fp4ScaleFormat::E4M3 ? decodeE4M3(code) : decodeUe8m0(code);
}

std::uint8_t fp4ScaleCode(Fp4ScaleFormat format, float amax) {
  return format == Fp4ScaleFormat::E4M3 ? fp4E4M3ScaleCode(amax)
                                        : fp4Ue8m0ScaleCode(amax);
}

/// One FP8 block: codes for x[0, n) given scale s.
void encodeFp8Block(const float *x, std::size_t n, float scale,
                    std::uint8_t *codes) {
  // encodeE4M3 saturates, which is the kernel's clamp to +-448 before the cast.
  for (std::size_t i = 0; i < n; ++i)
    codes[i] = encodeE4M3(x[i] / scale);
}

/// One FP4 block: packed codes for x[0, n), n even, given scale s.
void encodeFp4Block(const float *x, std::size_t n, float scale,
                    std::uint8_t *packed) {
  // encodeE2M1 saturates at +-6, so the kernel's clamp(x / s, -6, 6) is
  // implied: RNE of a clamped value equals saturating RNE of the value.
  for (std::size_t i = 0; i < n; i += 2)
    packed[i / 2] =
        packE2M1(encodeE2M1(x[i] / scale), encodeE2M1(x[i + 1] / scale));
}

void decodeFp4Block(const std::uint8_t *packed, std::size_t n, float scale,
                    float *out) {
  for (std::size_t i = 0; i < n; i += 2) {
    out[i] = decodeE2M1(lowE2M1(packed[i / 2])) * scale;
    out[i + 1] = decodeE2M1(highE2M1(packed[i / 2])) * scale;
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Scale rules
//===----------------------------------------------------------------------===//

float blockAmax(const float *x, std::size_t n) {
  float amax = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    float a = std::fabs(x[i]);
    if (a > amax) // false for NaN, which is thereby ignored
      amax = a;
  }
  return amax > std::numeric_limits<float>::max()
             ? std::numeric_limits<float>::max()
             : amax;
}

std::uint8_t fp8Ue8m0ScaleCode(float amax) {
  return ceilPow2Ue8m0(floorAmax(amax, kFp8AmaxFloor) * kFp8MaxInv);
}

float fp8Fp32Scale(float amax) {
  return floorAmax(amax, kFp8AmaxFloor) * kFp8MaxInv;
}

std::uint8_t fp4Ue8m0ScaleCode(float amax) {
  return ceilPow2Ue8m0(floorAmax(amax, kFp4Ue8m0AmaxFloor) * kFp4MaxInv);
}

std::uint8_t fp4E4M3ScaleCode(float amax) {
  // A division by 6 here (the kernel's amax / fp4_max), unlike the UE8M0 path.
  return encodeE4M3(floorAmax(amax, kFp4E4M3AmaxFloor) / kE2M1Max);
}

//===----------------------------------------------------------------------===//
// act_quant
//===----------------------------------------------------------------------===//

void actQuant(const float *x, std::size_t n, std::size_t blockSize,
              Fp8ScaleFormat format, std::uint8_t *codes, float *scales) {
  assert(blockSize > 0 && n % blockSize == 0 && "n must be whole blocks");
  for (std::size_t b = 0; b * blockSize < n; ++b) {
    const float *block = x + b * blockSize;
    float amax = blockAmax(block, blockSize);
    float scale = format == Fp8ScaleFormat::Ue8m0
                      ? decodeUe8m0(fp8Ue8m0ScaleCode(amax))
                      : fp8Fp32Scale(amax);
    scales[b] = scale;
    encodeFp8Block(block, blockSize, scale, codes + b * blockSize);
  }
}

void actQuantUe8m0(const float *x, std::size_t n, std::size_t blockSize,
                   std::uint8_t *codes, std::uint8_t *scaleCodes) {
  assert(blockSize > 0 && n % blockSize == 0 && "n must be whole blocks");
  for (std::size_t b = 0; b * blockSize < n; ++b) {
    const float *block = x + b * blockSize;
    std::uint8_t scaleCode = fp8Ue8m0ScaleCode(blockAmax(block, blockSize));
    scaleCodes[b] = scaleCode;
    encodeFp8Block(block, blockSize, decodeUe8m0(scaleCode),
                   codes + b * blockSize);
  }
}

void actDequant(const std::uint8_t *codes, const float *scales, std::size_t n,
                std::size_t blockSize, float *out) {
  assert(blockSize > 0 && n % blockSize == 0 && "n must be whole blocks");
  for (std::size_t i = 0; i < n; ++i)
    out[i] = decodeE4M3(codes[i]) * scales[i / blockSize];
}

void actDequantUe8m0(const std::uint8_t *codes, const std::uint8_t *scaleCodes,
                     std::size_t n, std::size_t blockSize, float *out) {
  assert(blockSize > 0 && n % blockSize == 0 && "n must be whole blocks");
  for (std::size_t i = 0; i < n; ++i)
    out[i] = decodeE4M3(codes[i]) * decodeUe8m0(scaleCodes[i / blockSize]);
}

void actQuantInplace(float *x, std::size_t n, std::size_t blockSize,
                     Fp8ScaleFormat format) {
  assert(blockSize > 0 && n % blockSize == 0 && "n must be whole blocks");
  for (std::size_t b = 0; b * blockSize < n; ++b) {
    float *block = x + b * blockSize;
    float amax = blockAmax(block, blockSize);
    float scale = format == Fp8ScaleFormat::Ue8m0
                      ? decodeUe8m0(fp8Ue8m0ScaleCode(amax))
                      : fp8Fp32Scale(amax);
    for (std::size_t i = 0; i < blockSize; ++i)
      block[i] = roundToBf16(decodeE4M3(encodeE4M3(block[i] / scale)) * scale);
  }
}

//===----------------------------------------------------------------------===//
// fp4_act_quant
//===----------------------------------------------------------------------===//

void fp4ActQuant(const float *x, std::size_t n, std::size_t blockSize,
                 Fp4ScaleFormat format, std::uint8_t *packed,
                 std::uint8_t *scaleCodes) {
  assert(blockSize > 0 && blockSize % 2 == 0 && n % blockSize == 0 &&
         "n must be whole blocks of an even size");
  for (std::size_t b = 0; b * blockSize < n; ++b) {
    const float *block = x + b * blockSize;
    std::uint8_t scaleCode = fp4ScaleCode(format, blockAmax(block, blockSize));
    scaleCodes[b] = scaleCode;
    encodeFp4Block(block, blockSize, fp4ScaleValue(format, scaleCode),
                   packed + b * blockSize / 2);
  }
}

void fp4ActDequant(const std::uint8_t *packed, const std::uint8_t *scaleCodes,
                   std::size_t n, std::size_t blockSize, Fp4ScaleFormat format,
                   float *out) {
  assert(blockSize > 0 && blockSize % 2 == 0 && n % blockSize == 0 &&
         "n must be whole blocks of an even size");
  for (std::size_t b = 0; b * blockSize < n; ++b)
    decodeFp4Block(packed + b * blockSize / 2, blockSize,
                   fp4ScaleValue(format, scaleCodes[b]), out + b * blockSize);
}

void fp4ActQuantInplace(float *x, std::size_t n, std::size_t blockSize,
                        Fp4ScaleFormat format) {
  assert(blockSize > 0 && blockSize % 2 == 0 && n % blockSize == 0 &&
         "n must be whole blocks of an even size");
  for (std::size_t b = 0; b * blockSize < n; ++b) {
    float *block = x + b * blockSize;
    float scale = fp4ScaleValue(
        format, fp4ScaleCode(format, blockAmax(block, blockSize)));
    // The product is exact in bf16 for both scale formats; rounding anyway
    // keeps the "as stored in a bf16 tensor" contract obvious.
    for (std::size_t i = 0; i < blockSize; ++i)
      block[i] = roundToBf16(roundToE2M1(block[i] / scale) * scale);
  }
}

//===----------------------------------------------------------------------===//
// Cache rows
//===----------------------------------------------------------------------===//

void quantizeRow(RowFormat format, const float *x, std::size_t dim,
                 std::uint8_t *row) {
  assert(dim % rowGroup(format) == 0 && "dim must be whole groups");
  std::uint8_t *scales = row + rowScaleOffset(format, dim);
  switch (format) {
  case RowFormat::MainKvFp4:
    fp4ActQuant(x, dim, kMainKvGroup, Fp4ScaleFormat::E4M3, row, scales);
    return;
  case RowFormat::IndexKeyFp4:
    fp4ActQuant(x, dim, kIndexKeyGroup, Fp4ScaleFormat::Ue8m0, row, scales);
    return;
  case RowFormat::SwaKvFp8:
    actQuantUe8m0(x, dim, kSwaKvGroup, row, scales);
    return;
  }
}

void dequantizeRow(RowFormat format, const std::uint8_t *row, std::size_t dim,
                   float *out) {
  assert(dim % rowGroup(format) == 0 && "dim must be whole groups");
  const std::uint8_t *scales = row + rowScaleOffset(format, dim);
  switch (format) {
  case RowFormat::MainKvFp4:
    fp4ActDequant(row, scales, dim, kMainKvGroup, Fp4ScaleFormat::E4M3, out);
    return;
  case RowFormat::IndexKeyFp4:
    fp4ActDequant(row, scales, dim, kIndexKeyGroup, Fp4ScaleFormat::Ue8m0, out);
    return;
  case RowFormat::SwaKvFp8:
    actDequantUe8m0(row, scales, dim, kSwaKvGroup, out);
    return;
  }
}

void quantizeMainKvFp8Row(const float *x, std::size_t dim, std::size_t rope,
                          std::uint8_t *row) {
  assert(rope < dim && "the row needs NoPE channels");
  const std::size_t nope = dim - rope, group = mainKvFp8Group(nope);
  std::uint8_t *scales = row + mainKvFp8ScaleOffset(dim, rope);
  actQuantUe8m0(x, nope, group, row, scales);
  std::fill(scales + nope / group, scales + mainKvFp8ScaleBytes(nope),
            std::uint8_t(0));
  for (std::size_t i = 0; i < rope; ++i) {
    const std::uint16_t bits = floatToBf16(x[nope + i]);
    row[nope + 2 * i] = std::uint8_t(bits & 0xFF);
    row[nope + 2 * i + 1] = std::uint8_t(bits >> 8);
  }
}

void dequantizeMainKvFp8Row(const std::uint8_t *row, std::size_t dim,
                            std::size_t rope, float *out) {
  assert(rope < dim && "the row needs NoPE channels");
  const std::size_t nope = dim - rope;
  actDequantUe8m0(row, row + mainKvFp8ScaleOffset(dim, rope), nope,
                  mainKvFp8Group(nope), out);
  for (std::size_t i = 0; i < rope; ++i)
    out[nope + i] = bf16ToFloat(std::uint16_t(
        row[nope + 2 * i] | (std::uint16_t(row[nope + 2 * i + 1]) << 8)));
}

void quantizeIndexKeyFp8Row(const float *x, std::size_t dim, std::uint8_t *row) {
  float scale = 0.0f;
  actQuant(x, dim, dim, Fp8ScaleFormat::Fp32, row, &scale);
  const std::uint32_t bits = floatBits(scale);
  for (int i = 0; i < 4; ++i)
    row[dim + std::size_t(i)] = std::uint8_t(bits >> (8 * i));
}

void dequantizeIndexKeyFp8Row(const std::uint8_t *row, std::size_t dim, float *out) {
  std::uint32_t bits = 0;
  for (int i = 0; i < 4; ++i)
    bits |= std::uint32_t(row[dim + std::size_t(i)]) << (8 * i);
  const float scale = floatFromBits(bits);
  actDequant(row, &scale, dim, dim, out);
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

void dequantizeFp8Weight(const std::uint8_t *weight,
                         const std::uint8_t *scaleCodes, std::size_t n,
                         std::size_t k, float *out, std::size_t blockSize) {
  assert(blockSize > 0 && "block size must be positive");
  std::size_t scaleCols = (k + blockSize - 1) / blockSize;
  for (std::size_t row = 0; row < n; ++row) {
    const std::uint8_t *rowScales = scaleCodes + (row / blockSize) * scaleCols;
    for (std::size_t col = 0; col < k; ++col)
      out[row * k + col] = decodeE4M3(weight[row * k + col]) *
                           decodeUe8m0(rowScales[col / blockSize]);
  }
}

void dequantizeFp4Weight(const std::uint8_t *packed,
                         const std::uint8_t *scaleCodes, std::size_t n,
                         std::size_t k, float *out) {
  assert(k % kFp4WeightGroup == 0 && "k must be whole groups of 32");
  std::size_t groups = k / kFp4WeightGroup;
  for (std::size_t row = 0; row < n; ++row)
    for (std::size_t g = 0; g < groups; ++g)
      decodeFp4Block(packed + row * (k / 2) + g * (kFp4WeightGroup / 2),
                     kFp4WeightGroup, decodeUe8m0(scaleCodes[row * groups + g]),
                     out + row * k + g * kFp4WeightGroup);
}

} // namespace numerics
} // namespace csa

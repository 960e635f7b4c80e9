//===- RopeTables.cpp - RoPE frequencies of DeepSeek-V4.1 -----------------===//
//
// Every step is model.py's, in its precision: the frequencies and the blend
// are fp32 tensor arithmetic (torch), the correction range is Python float
// (double) arithmetic.
//
//===----------------------------------------------------------------------===//

#include "models/tables/RopeTables.h"

#include <algorithm>
#include <cmath>

namespace csa::tables {

namespace {

constexpr double kPi = 3.141592653589793; // math.pi

/// `find_correction_dim`: the channel index whose wavelength fits
/// `rotations` full turns into the original context.
double correctionDim(double rotations, int64_t dim, double theta,
                     int64_t originalSeqLen) {
  return double(dim) *
         std::log(double(originalSeqLen) / (rotations * 2 * kPi)) /
         (2 * std::log(theta));
}

} // namespace

YarnRamp yarnCorrectionRange(int64_t dim, double theta,
                             const YarnScaling &yarn) {
  double low =
      std::floor(correctionDim(yarn.betaFast, dim, theta, yarn.originalSeqLen));
  double high =
      std::ceil(correctionDim(yarn.betaSlow, dim, theta, yarn.originalSeqLen));
  return {std::max(low, 0.0), std::min(high, double(dim - 1))};
}

std::vector<float> ropeFrequencies(int64_t dim, double theta,
                                   const std::optional<YarnScaling> &yarn) {
  // freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=float32) / dim))
  const int64_t pairs = dim / 2;
  std::vector<float> freqs(static_cast<size_t>(pairs));
  for (int64_t i = 0; i < pairs; ++i) {
    const float exponent = float(2 * i) / float(dim);
    freqs[size_t(i)] = 1.0f / std::pow(float(theta), exponent);
  }
  if (!yarn)
    return freqs;

  // smooth = 1 - linear_ramp_factor(low, high, dim // 2), where an empty
  // range is widened by 0.001 (in Python floats, then used as fp32);
  // freqs = freqs / factor * (1 - smooth) + freqs * smooth.
  const YarnRamp range = yarnCorrectionRange(dim, theta, *yarn);
  const double top = range.high == range.low ? range.high + 0.001 : range.high;
  const float width = float(top - range.low);
  const float low = float(range.low);
  const float factor = float(yarn->factor);
  for (int64_t i = 0; i < pairs; ++i) {
    const float ramp = std::clamp((float(i) - low) / width, 0.0f, 1.0f);
    const float smooth = 1.0f - ramp;
    const float f = freqs[size_t(i)];
    freqs[size_t(i)] = f / factor * (1.0f - smooth) + f * smooth;
  }
  return freqs;
}

} // namespace csa::tables

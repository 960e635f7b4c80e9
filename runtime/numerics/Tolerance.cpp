//===- Tolerance.cpp - The tolerance contract of GPU kernels --------------===//
#include "runtime/numerics/Tolerance.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace csa::numerics {

double fp32Gamma(int64_t terms) {
  const double nu = double(terms) * std::ldexp(1.0, -24);
  return nu < 1 ? nu / (1 - nu) : INFINITY;
}

double dotErrorBound(int64_t terms, double absSum, double reference, bool outputBf16) {
  const double gamma = fp32Gamma(std::max<int64_t>(terms, 1));
  // bf16 keeps 8 significant bits: a rounding moves a value by at most
  // 2^-8 of it.
  const double unitBf16 = std::ldexp(1.0, -8);
  // absSum was summed in fp32 and (for a bf16 output) rounded once.
  const double magnitude =
      std::fabs(absSum) / ((1 - gamma) * (outputBf16 ? 1 - unitBf16 : 1.0));
  const double sums = 2 * gamma * magnitude;
  const double roundings =
      outputBf16 ? unitBf16 * (2 * std::fabs(reference) + sums) * (1 + unitBf16) : 0.0;
  const double subnormal = outputBf16 ? std::ldexp(1.0, -133) : std::ldexp(1.0, -149);
  return sums + roundings + subnormal;
}

double normErrorBound(int64_t terms, double reference, bool outputBf16) {
  const double gamma = fp32Gamma(std::max<int64_t>(terms, 1));
  const double unit = std::ldexp(1.0, -24), unitBf16 = std::ldexp(1.0, -8);
  // The reference was rounded to bf16 once: the exact value is within 2^-8
  // of it, and the GPU's own rounding adds as much again.
  const double magnitude = std::fabs(reference) * (outputBf16 ? 1 + unitBf16 : 1.0);
  const double scale = (gamma + 6 * unit) * magnitude;
  const double roundings = outputBf16 ? 2 * unitBf16 * (magnitude + scale) : 0.0;
  const double subnormal = outputBf16 ? std::ldexp(1.0, -133) : std::ldexp(1.0, -149);
  return scale + roundings + subnormal;
}

std::optional<OperandEncoding> parseOperandEncoding(const std::string &name) {
  if (name == "real")
    return OperandEncoding::Real;
  if (name == "e4m3")
    return OperandEncoding::E4M3;
  if (name == "e2m1x2")
    return OperandEncoding::E2M1x2;
  if (name == "ue8m0")
    return OperandEncoding::UE8M0;
  if (name == "expert_id")
    return OperandEncoding::ExpertId;
  if (name == "output")
    return OperandEncoding::Output;
  return std::nullopt;
}

void takeMagnitudes(void *data, size_t count, size_t elementBytes, OperandEncoding encoding) {
  auto *bytes = static_cast<uint8_t *>(data);
  switch (encoding) {
  case OperandEncoding::Real:
    // The sign is the top bit of the element's last (little-endian) byte.
    for (size_t i = 0; i < count; ++i)
      bytes[i * elementBytes + elementBytes - 1] &= 0x7F;
    return;
  case OperandEncoding::E4M3:
    for (size_t i = 0; i < count * elementBytes; ++i)
      bytes[i] &= 0x7F;
    return;
  case OperandEncoding::E2M1x2:
    for (size_t i = 0; i < count * elementBytes; ++i)
      bytes[i] &= 0x77;
    return;
  case OperandEncoding::UE8M0:
  case OperandEncoding::ExpertId:
  case OperandEncoding::Output:
    return;
  }
}

} // namespace csa::numerics

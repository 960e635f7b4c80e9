//===- Tolerance.h - The tolerance contract of GPU kernels -------*- C++ -*-===//
//
// GPU kernels may sum in another order than their host kernels (split
// reductions, tensor cores); they are checked against the host kernel, the
// bit-exact oracle, within bounds derived from the op's arithmetic
// (docs/semantics.md, "The tolerance contract"). This is the bound of a dot
// product and the magnitudes it is computed from.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_NUMERICS_TOLERANCE_H
#define CSA_RUNTIME_NUMERICS_TOLERANCE_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace csa::numerics {

/// gamma_n = n u / (1 - n u) with u = 2^-24: any fp32 summation order of n
/// terms is within gamma_n * sum |terms| of the exact sum (Higham, Accuracy
/// and Stability of Numerical Algorithms, 4.2).
double fp32Gamma(int64_t terms);

/// The most a GPU result may differ from the host kernel's `reference` when
/// both add the same `terms` exactly formed fp32 products (each multiplied by
/// a power-of-two block scale, exact too) in different orders: 2 gamma_n S,
/// plus one rounding of each result when the output is bf16 (`outputBf16`),
/// plus the smallest subnormal of the output type. `absSum` is the host
/// kernel's result on the operands' magnitudes (S, itself rounded: it is
/// inflated by that rounding first).
double dotErrorBound(int64_t terms, double absSum, double reference, bool outputBf16);

/// The most an RMS norm's output may differ from the host kernel's
/// `reference` when the GPU adds the `terms` squares in another order: the
/// sums differ by at most 2 gamma_n of the (positive) sum, which moves
/// 1 / sqrt(mean + eps) by at most gamma_n of it plus a few roundings of
/// the same operations on different inputs (6 u); then one rounding of the
/// output when it is bf16 (two: the reference's and the GPU's), plus the
/// smallest subnormal of the output type.
double normErrorBound(int64_t terms, double reference, bool outputBf16);

/// How an operand's bytes encode its values, for taking magnitudes:
/// bf16/f32 values (`Real`), E4M3 codes, two E2M1 codes a byte, UE8M0 scale
/// codes (no sign), i32 expert ids choosing which products are summed (the
/// grouped linears; left as they are), or the result (left as it is).
enum class OperandEncoding { Real, E4M3, E2M1x2, UE8M0, ExpertId, Output };

/// "real", "e4m3", "e2m1x2", "ue8m0", "expert_id", "output" (kernels.json
/// "tolerance").
std::optional<OperandEncoding> parseOperandEncoding(const std::string &name);

/// Clears the sign of every value of `count` elements of `elementBytes`
/// bytes at `data` encoded as `encoding`.
void takeMagnitudes(void *data, size_t count, size_t elementBytes, OperandEncoding encoding);

} // namespace csa::numerics

#endif // CSA_RUNTIME_NUMERICS_TOLERANCE_H

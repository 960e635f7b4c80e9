//===- CsaDialect.h - The csa dialect ----------------------------*- C++ -*-===//
//
// Single include for users of the dialect: dialect, enums, attributes, types,
// interfaces and ops.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_DIALECTS_CSA_CSADIALECT_H
#define CSA_DIALECTS_CSA_CSADIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/csa/ScheduleRules.h"

namespace mlir {
/// Floating-point parameters of csa attributes (RoPE theta, YaRN factor).
template <>
struct FieldParser<llvm::APFloat> {
  static FailureOr<llvm::APFloat> parse(AsmParser &parser) {
    double value;
    if (parser.parseFloat(value))
      return failure();
    return llvm::APFloat(value);
  }
};
} // namespace mlir

#include "dialects/csa/CsaDialect.h.inc"
#include "dialects/csa/CsaEnums.h.inc"

#include "dialects/csa/CsaTypeInterfaces.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/csa/CsaTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/csa/CsaAttrs.h.inc"

#include "dialects/csa/CsaInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/csa/CsaOps.h.inc"

namespace csa {
/// Whether `row` is an index-key row format: `!csa.fp4_row` (released) or
/// `!csa.fp8_row<dim, f32, dim>` (the FP8 variant).
bool isIndexKeyRow(mlir::Type row);

/// The discardable attribute of an op's linear lowering strategy
/// (#csa.linear_form, set by csa-select-linear-forms).
inline constexpr const char *kLinearFormAttrName = "csa.linear_form";
/// The discardable attribute of a sparse attention's lowering strategy
/// (#csa.attention_form, set by csa-select-attention-forms).
inline constexpr const char *kAttentionFormAttrName = "csa.attention_form";

/// Whether #csa.attention_form<mma> can take a sparse attention of `heads`
/// heads of `dim` channels: whole mma M tiles of 16 heads, whole fragments
/// of 8 channels a warp (dim % 32), and a chunk of staged rows in a block's
/// 48 KiB of static shared memory (dim <= 256, or 512 in two slices).
inline bool sparseAttentionMmaFits(int64_t heads, int64_t dim) {
  return heads > 0 && heads % 16 == 0 && dim > 0 && dim % 32 == 0 && (dim <= 256 || dim == 512);
}
/// The discardable attribute of an op's host row tile (#csa.row_tile, set by
/// csa-tile-kernels).
inline constexpr const char *kRowTileAttrName = "csa.row_tile";

/// The schedule-rule view of an attention mode.
inline LayerMode toLayerMode(AttentionMode mode) {
  return static_cast<LayerMode>(static_cast<uint32_t>(mode));
}
inline AttentionMode toAttentionMode(LayerMode mode) {
  return static_cast<AttentionMode>(static_cast<uint32_t>(mode));
}
} // namespace csa

#endif // CSA_DIALECTS_CSA_CSADIALECT_H

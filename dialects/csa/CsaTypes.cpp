//===- CsaTypes.cpp - csa types --------------------------------------------===//
#include "dialects/csa/CsaDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace csa;

#include "dialects/csa/CsaTypeInterfaces.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/csa/CsaTypes.cpp.inc"

void CsaDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/csa/CsaTypes.cpp.inc"
      >();
}

/// Rows are whole bytes of values followed by whole scale bytes.
static LogicalResult verifyRow(function_ref<InFlightDiagnostic()> emitError,
                               const char *kind, int64_t dim, int64_t group,
                               int64_t valuesPerByte) {
  if (dim <= 0 || group <= 0)
    return emitError() << kind << " needs dim > 0 and group > 0, got " << dim
                       << " and " << group;
  if (dim % group != 0)
    return emitError() << kind << " dim " << dim
                       << " is not a multiple of its scale group " << group;
  if (dim % valuesPerByte != 0)
    return emitError() << kind << " dim " << dim << " must be even";
  return success();
}

LogicalResult Fp4RowType::verify(function_ref<InFlightDiagnostic()> emitError,
                                 int64_t dim, ScaleFormat scale,
                                 int64_t group) {
  if (scale == ScaleFormat::F32)
    return emitError() << "fp4_row scales are e4m3 or ue8m0, not f32";
  return verifyRow(emitError, "fp4_row", dim, group, 2);
}

LogicalResult Fp8RowType::verify(function_ref<InFlightDiagnostic()> emitError,
                                 int64_t dim, ScaleFormat scale,
                                 int64_t group) {
  if (scale == ScaleFormat::E4M3)
    return emitError() << "fp8_row scales are ue8m0 or f32, not e4m3";
  return verifyRow(emitError, "fp8_row", dim, group, 1);
}

bool csa::isIndexKeyRow(Type row) {
  if (isa<Fp4RowType>(row))
    return true;
  auto fp8 = dyn_cast<Fp8RowType>(row);
  return fp8 && fp8.getScale() == ScaleFormat::F32 && fp8.getGroup() == fp8.getDim();
}

LogicalResult
Fp8NopeRowType::verify(function_ref<InFlightDiagnostic()> emitError,
                       int64_t dim, int64_t rope, ScaleFormat scale,
                       int64_t group) {
  if (rope < 0 || rope >= dim)
    return emitError() << "fp8_nope_row needs 0 <= rope < dim, got rope " << rope
                       << " of " << dim;
  if (scale != ScaleFormat::UE8M0)
    return emitError() << "fp8_nope_row scales are ue8m0, not "
                       << stringifyScaleFormat(scale);
  return verifyRow(emitError, "fp8_nope_row NoPE part", dim - rope, group, 1);
}

LogicalResult GlobalCacheType::verify(function_ref<InFlightDiagnostic()> emitError,
                                      int64_t ratio, CacheRowTypeInterface mainRow,
                                      CacheRowTypeInterface indexRow) {
  if (ratio < 1)
    return emitError() << "global_cache ratio must be >= 1, got " << ratio;
  if (!isa<Fp4RowType, Fp8NopeRowType>(mainRow))
    return emitError() << "global_cache main rows are !csa.fp4_row or "
                          "!csa.fp8_nope_row, not "
                       << Type(mainRow);
  if (!isIndexKeyRow(indexRow))
    return emitError() << "global_cache index rows are !csa.fp4_row or "
                          "!csa.fp8_row with one f32 scale a row, not "
                       << Type(indexRow);
  return success();
}

LogicalResult SwaRingType::verify(function_ref<InFlightDiagnostic()> emitError,
                                  int64_t window, Fp8RowType row) {
  if (window < 1)
    return emitError() << "swa_ring window must be >= 1, got " << window;
  if (row.getScale() != ScaleFormat::UE8M0)
    return emitError() << "swa_ring rows have ue8m0 scales, not "
                       << stringifyScaleFormat(row.getScale());
  return success();
}

LogicalResult
CompressorStateType::verify(function_ref<InFlightDiagnostic()> emitError,
                            int64_t ratio, int64_t dim) {
  if (ratio < 2)
    return emitError() << "compressor_state is only needed for ratio >= 2, got "
                       << ratio;
  if (dim < 1)
    return emitError() << "compressor_state dim must be >= 1, got " << dim;
  return success();
}

LogicalResult TopKType::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t k) {
  if (k < 1)
    return emitError() << "topk k must be >= 1, got " << k;
  return success();
}

LogicalResult
CandidatePoolType::verify(function_ref<InFlightDiagnostic()> emitError,
                          int64_t blocks, int64_t blockSize) {
  if (blocks < 1 || blockSize < 1)
    return emitError() << "candidate_pool needs blocks >= 1 and block_size "
                          ">= 1, got "
                       << blocks << " and " << blockSize;
  return success();
}

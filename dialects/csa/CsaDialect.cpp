//===- CsaDialect.cpp - csa dialect, attributes and types -----------------===//
#include "dialects/csa/CsaDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace csa;

static_assert(static_cast<uint32_t>(AttentionMode::Full) ==
                      static_cast<uint32_t>(LayerMode::Full) &&
                  static_cast<uint32_t>(AttentionMode::Reindex) ==
                      static_cast<uint32_t>(LayerMode::Reindex) &&
                  static_cast<uint32_t>(AttentionMode::Reuse) ==
                      static_cast<uint32_t>(LayerMode::Reuse) &&
                  static_cast<uint32_t>(AttentionMode::SwaOnly) ==
                      static_cast<uint32_t>(LayerMode::SwaOnly),
              "AttentionMode and LayerMode must agree");

#include "dialects/csa/CsaDialect.cpp.inc"
#include "dialects/csa/CsaEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/csa/CsaAttrs.cpp.inc"

namespace {
/// Gives the long, repeated attributes of a model graph short aliases
/// (`#csa_attn`, `#rope_base`, ...), so that a 40-layer graph stays readable.
struct CsaOpAsmInterface : public OpAsmDialectInterface {
  using OpAsmDialectInterface::OpAsmDialectInterface;
  AliasResult getAlias(Attribute attr, raw_ostream &os) const override {
    if (isa<AttentionConfigAttr>(attr)) {
      os << "csa_attn";
      return AliasResult::FinalAlias;
    }
    if (auto rope = dyn_cast<RopeTableAttr>(attr)) {
      os << (rope.getFactor().convertToDouble() > 1.0 ? "rope_yarn" : "rope_base");
      return AliasResult::FinalAlias;
    }
    if (isa<HsiConfigAttr>(attr)) {
      os << "hsi";
      return AliasResult::FinalAlias;
    }
    return AliasResult::NoAlias;
  }
};
} // namespace

void CsaDialect::initialize() {
  registerTypes();
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "dialects/csa/CsaOps.cpp.inc"
      >();
  addInterfaces<CsaOpAsmInterface>();
}

void CsaDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/csa/CsaAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Attribute verifiers
//===----------------------------------------------------------------------===//

LogicalResult RopeTableAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                    int64_t dim, APFloat thetaValue,
                                    APFloat factorValue, int64_t originalSeqLen,
                                    APFloat betaFastValue,
                                    APFloat betaSlowValue) {
  double theta = thetaValue.convertToDouble();
  double factor = factorValue.convertToDouble();
  double betaFast = betaFastValue.convertToDouble();
  double betaSlow = betaSlowValue.convertToDouble();
  if (dim <= 0 || dim % 2 != 0)
    return emitError() << "rope dim must be positive and even, got " << dim;
  if (!(theta > 1.0))
    return emitError() << "rope theta must be > 1, got " << theta;
  if (!(factor >= 1.0))
    return emitError() << "rope factor must be >= 1 (1 = no YaRN), got "
                       << factor;
  if (factor > 1.0) {
    if (originalSeqLen <= 0)
      return emitError() << "YaRN needs original_seq_len > 0";
    if (!(betaFast > betaSlow) || !(betaSlow > 0.0))
      return emitError() << "YaRN needs beta_fast > beta_slow > 0, got "
                         << betaFast << " and " << betaSlow;
  }
  return success();
}

LogicalResult AttentionConfigAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, int64_t heads,
    int64_t headDim, int64_t ropeDim, int64_t qRank, int64_t window,
    int64_t indexHeads, int64_t indexDim, int64_t indexRopeDim, int64_t topk,
    int64_t oGroups, int64_t oRank, CacheRowTypeInterface mainRow,
    CacheRowTypeInterface indexRow, Fp8RowType swaRow) {
  auto positive = [&](int64_t v, const char *name) -> LogicalResult {
    if (v > 0)
      return success();
    return emitError() << "attention config: " << name
                       << " must be positive, got " << v;
  };
  for (auto [v, name] :
       {std::pair{heads, "heads"}, {headDim, "head_dim"}, {ropeDim, "rope_dim"},
        {qRank, "q_rank"}, {window, "window"}, {indexHeads, "index_heads"},
        {indexDim, "index_dim"}, {indexRopeDim, "index_rope_dim"},
        {topk, "topk"}, {oGroups, "o_groups"}, {oRank, "o_rank"}})
    if (failed(positive(v, name)))
      return failure();
  if (ropeDim > headDim || ropeDim % 2 != 0)
    return emitError() << "attention config: rope_dim " << ropeDim
                       << " must be even and at most head_dim " << headDim;
  if (indexRopeDim > indexDim || indexRopeDim % 2 != 0)
    return emitError() << "attention config: index_rope_dim " << indexRopeDim
                       << " must be even and at most index_dim " << indexDim;
  if (heads % oGroups != 0)
    return emitError() << "attention config: heads " << heads
                       << " must be a multiple of o_groups " << oGroups;
  if (!isa<Fp4RowType, Fp8NopeRowType>(mainRow))
    return emitError() << "attention config: main_row is !csa.fp4_row or "
                          "!csa.fp8_nope_row, not "
                       << Type(mainRow);
  if (auto nope = dyn_cast<Fp8NopeRowType>(mainRow); nope && nope.getRope() != ropeDim)
    return emitError() << "attention config: main_row keeps " << nope.getRope()
                       << " channels in bf16 but rope_dim is " << ropeDim;
  if (!isIndexKeyRow(indexRow))
    return emitError() << "attention config: index_row is !csa.fp4_row or "
                          "!csa.fp8_row with one f32 scale a row, not "
                       << Type(indexRow);
  if (mainRow.getDim() != headDim)
    return emitError() << "attention config: main_row holds "
                       << mainRow.getDim() << " channels but head_dim is "
                       << headDim;
  if (swaRow.getDim() != headDim)
    return emitError() << "attention config: swa_row holds " << swaRow.getDim()
                       << " channels but head_dim is " << headDim;
  if (indexRow.getDim() != indexDim)
    return emitError() << "attention config: index_row holds "
                       << indexRow.getDim() << " channels but index_dim is "
                       << indexDim;
  return success();
}

LogicalResult HsiConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                    int64_t blocks, int64_t blockSize) {
  if (blocks <= 0 || blockSize <= 0)
    return emitError() << "HSI pool needs blocks > 0 and block_size > 0, got "
                       << blocks << " and " << blockSize;
  return success();
}

/// Parses a lowering attribute's `<FORM(, NAME = INT)*>`: the form's
/// keyword, checked by `symbolize`, and each of `names` at most once (0 when
/// absent, in `values`); anything else is an error naming it. `what` is the
/// attribute (`#csa.linear_form`), `forms` the keywords it takes.
template <typename Form>
static ParseResult
parseFormAndParameters(AsmParser &parser, StringRef what, StringRef forms,
                       std::optional<Form> (*symbolize)(StringRef), std::optional<Form> &form,
                       ArrayRef<StringRef> names, SmallVectorImpl<int64_t> &values) {
  SMLoc start = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseLess() || parser.parseKeyword(&keyword))
    return failure();
  form = symbolize(keyword);
  if (!form)
    return parser.emitError(start) << what << ": expected " << forms << ", got '" << keyword
                                   << "'";
  values.assign(names.size(), 0);
  SmallVector<bool> seen(names.size(), false);
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc at = parser.getCurrentLocation();
    StringRef key;
    if (parser.parseKeyword(&key))
      return failure();
    const auto *name = llvm::find(names, key);
    if (name == names.end())
      return parser.emitError(at) << what << ": unknown parameter '" << key << "' ("
                                  << llvm::join(names, ", ") << ")";
    const size_t i = size_t(name - names.begin());
    if (seen[i])
      return parser.emitError(at) << what << ": '" << key << "' given twice";
    seen[i] = true;
    if (parser.parseEqual() || parser.parseInteger(values[i]))
      return failure();
  }
  return parser.parseGreater();
}

// #csa.attention_form<FORM[, splits = N]>
Attribute AttentionFormAttr::parse(AsmParser &parser, Type) {
  SMLoc start = parser.getCurrentLocation();
  std::optional<AttentionForm> form;
  SmallVector<int64_t> values;
  if (failed(parseFormAndParameters<AttentionForm>(parser, "#csa.attention_form",
                                                   "warp, head, split or mma",
                                                   symbolizeAttentionForm, form, {"splits"},
                                                   values)))
    return {};
  return getChecked([&] { return parser.emitError(start); }, parser.getContext(), *form,
                    values[0]);
}

void AttentionFormAttr::print(AsmPrinter &printer) const {
  printer << '<' << stringifyAttentionForm(getValue());
  if (getSplits())
    printer << ", splits = " << getSplits();
  printer << '>';
}

LogicalResult AttentionFormAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                        AttentionForm form, int64_t splits) {
  if (splits < 0 || splits > 16)
    return emitError() << "#csa.attention_form: splits must be from 1 to 16 (0: the back end's "
                          "choice), got "
                       << splits;
  if (splits && form != AttentionForm::Split && form != AttentionForm::Mma)
    return emitError() << "#csa.attention_form: splits divide the walk of the split and mma "
                          "forms; "
                       << stringifyAttentionForm(form) << " has none";
  return success();
}

// #csa.linear_form<FORM[, outputs_per_block = N][, outputs_in_flight = N]>
Attribute LinearFormAttr::parse(AsmParser &parser, Type) {
  SMLoc start = parser.getCurrentLocation();
  std::optional<LinearForm> form;
  SmallVector<int64_t> values;
  if (failed(parseFormAndParameters<LinearForm>(
          parser, "#csa.linear_form", "split_k or per_output", symbolizeLinearForm, form,
          {"outputs_per_block", "outputs_in_flight"}, values)))
    return {};
  return getChecked([&] { return parser.emitError(start); }, parser.getContext(), *form,
                    values[0], values[1]);
}

void LinearFormAttr::print(AsmPrinter &printer) const {
  printer << '<' << stringifyLinearForm(getValue());
  if (getOutputsPerBlock())
    printer << ", outputs_per_block = " << getOutputsPerBlock();
  if (getOutputsInFlight())
    printer << ", outputs_in_flight = " << getOutputsInFlight();
  printer << '>';
}

LogicalResult LinearFormAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                     LinearForm form, int64_t outputsPerBlock,
                                     int64_t outputsInFlight) {
  if (outputsPerBlock < 0 || outputsPerBlock > 64)
    return emitError() << "#csa.linear_form: outputs_per_block must be from 1 to 64 (0: the "
                          "back end's choice), got "
                       << outputsPerBlock;
  if (outputsInFlight < 0 || outputsInFlight > 16)
    return emitError() << "#csa.linear_form: outputs_in_flight must be from 1 to 16 (0: the "
                          "back end's choice), got "
                       << outputsInFlight;
  if (form != LinearForm::SplitK && (outputsPerBlock || outputsInFlight))
    return emitError() << "#csa.linear_form: outputs_per_block and outputs_in_flight shape the "
                          "split_k form's block; "
                       << stringifyLinearForm(form) << " has none";
  return success();
}

LogicalResult RowTileAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t rows) {
  if (rows < 1)
    return emitError() << "a row tile needs rows >= 1, got " << rows;
  return success();
}

/// `csa.linear_form` and `csa.row_tile` only where there are linears,
/// `csa.attention_form` only on sparse attention, and only their attributes.
mlir::LogicalResult
csa::CsaDialect::verifyOperationAttribute(mlir::Operation *op, mlir::NamedAttribute attr) {
  if (attr.getName() == "csa.tile")
    return op->emitOpError() << "carries 'csa.tile', which #csa.row_tile replaced: write "
                                "csa.row_tile = #csa.row_tile<N> (N rows a tile)";
  if (attr.getName() == kRowTileAttrName) {
    if (!mlir::isa<RowTileAttr>(attr.getValue()))
      return op->emitOpError() << "'" << kRowTileAttrName << "' must be a #csa.row_tile<N>";
    if (!mlir::isa<LinearOp, CompressOp, MoeOp, EngramOp, LmHeadOp>(op))
      return op->emitOpError() << "has no linear kernels: '" << kRowTileAttrName
                               << "' belongs on csa.linear, csa.compress, csa.moe, csa.engram and "
                                  "csa.lm_head";
    return mlir::success();
  }
  if (attr.getName() == kAttentionFormAttrName) {
    if (!mlir::isa<AttentionFormAttr>(attr.getValue()))
      return op->emitOpError() << "'" << kAttentionFormAttrName
                               << "' must be a #csa.attention_form<warp|head|split|mma>";
    // Also on a generated kernel (the kernel selection copies its op's form).
    if (!mlir::isa<SparseAttentionOp, mlir::FunctionOpInterface>(op))
      return op->emitOpError() << "has no attention kernel: '" << kAttentionFormAttrName
                               << "' belongs on csa.sparse_attention";
    auto attention = mlir::dyn_cast<SparseAttentionOp>(op);
    if (attention &&
        mlir::cast<AttentionFormAttr>(attr.getValue()).getValue() == AttentionForm::Mma) {
      auto type = mlir::cast<mlir::ShapedType>(attention->getResult(0).getType());
      const int64_t heads = type.getDimSize(1), dim = type.getDimSize(2);
      if (!sparseAttentionMmaFits(heads, dim))
        return op->emitOpError() << "cannot take #csa.attention_form<mma>: " << heads
                                 << " heads of " << dim
                                 << " channels (the form needs heads a multiple of 16 and "
                                    "channels a multiple of 32, at most 256 or 512)";
    }
    return mlir::success();
  }
  if (attr.getName() != kLinearFormAttrName)
    return mlir::success();
  if (!mlir::isa<LinearFormAttr>(attr.getValue()))
    return op->emitOpError() << "'" << kLinearFormAttrName
                             << "' must be a #csa.linear_form<split_k|per_output[, ...]>";
  // Also on a generated kernel (the kernel selection copies its op's form).
  if (!mlir::isa<LinearOp, CompressOp, MoeOp, EngramOp, LmHeadOp, mlir::FunctionOpInterface>(op))
    return op->emitOpError() << "has no linear kernels: '" << kLinearFormAttrName
                             << "' belongs on csa.linear, csa.compress, csa.moe, csa.engram and "
                                "csa.lm_head";
  return mlir::success();
}

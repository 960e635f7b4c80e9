//===- GraphBuilder.cpp - Model graph as csa IR ---------------------------===//
//
// The block structure follows the released `Transformer.forward` (spec §2):
// Single-Pass mHC, where each sub-layer reads the stream mix computed one
// site earlier, Engram before its block, and the final collapse using the
// last block's FFN `pre` coefficients.
//
//===----------------------------------------------------------------------===//
#include "models/graph/GraphBuilder.h"

#include "dialects/csa/CsaDialect.h"
#include "runtime/numerics/Quantize.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

#include <algorithm>

using namespace mlir;

namespace csa {

void loadGraphDialects(MLIRContext &context) {
  context.loadDialect<CsaDialect, func::FuncDialect, arith::ArithDialect,
                      tensor::TensorDialect>();
}

namespace {

WeightFormat weightFormat(const std::string &dtype) {
  if (dtype == "fp4")
    return WeightFormat::FP4E2M1;
  if (dtype == "fp8")
    return WeightFormat::FP8Block32;
  return WeightFormat::BF16;
}

/// Emits the forward pass of one function body.
class ForwardEmitter {
public:
  ForwardEmitter(OpBuilder &b, Location loc, const ModelVariant &variant,
                 const GraphOptions &options)
      : b(b), loc(loc), v(variant), c(variant.config) {
    MLIRContext *ctx = b.getContext();
    CacheRowTypeInterface mainRow;
    if (options.mainKvFormat == GraphOptions::MainKvFormat::Fp8) {
      const auto nope = size_t(c.headDim - c.ropeHeadDim);
      mainRow = Fp8NopeRowType::get(ctx, c.headDim, c.ropeHeadDim, ScaleFormat::UE8M0,
                                    int64_t(numerics::mainKvFp8Group(nope)));
    } else {
      mainRow = Fp4RowType::get(ctx, c.headDim, ScaleFormat::E4M3, 16);
    }
    CacheRowTypeInterface indexRow =
        options.indexKeyFormat == GraphOptions::IndexKeyFormat::Fp8
            ? CacheRowTypeInterface(
                  Fp8RowType::get(ctx, c.indexHeadDim, ScaleFormat::F32, c.indexHeadDim))
            : CacheRowTypeInterface(
                  Fp4RowType::get(ctx, c.indexHeadDim, ScaleFormat::UE8M0, 32));
    auto swaRow = Fp8RowType::get(ctx, c.headDim, ScaleFormat::UE8M0, 32);
    attnConfig = AttentionConfigAttr::get(
        ctx, c.nHeads, c.headDim, c.ropeHeadDim, c.qLoraRank, c.windowSize,
        c.indexNHeads, c.indexHeadDim, c.ropeHeadDim, c.indexTopk, c.oGroups,
        c.oLoraRank, mainRow, indexRow, swaRow);
    baseRope = RopeTableAttr::get(ctx, c.ropeHeadDim, APFloat(c.ropeTheta),
                                  APFloat(1.0), c.originalSeqLen,
                                  APFloat(c.betaFast), APFloat(c.betaSlow));
    compressRope = RopeTableAttr::get(
        ctx, c.ropeHeadDim, APFloat(c.compressRopeTheta),
        APFloat(c.ropeFactor), c.originalSeqLen, APFloat(c.betaFast),
        APFloat(c.betaSlow));
    if (c.candidateTopkBlocks > 0 && c.candidateBlockSize > 0)
      pool = HsiConfigAttr::get(ctx, c.candidateTopkBlocks,
                                c.candidateBlockSize);
  }

  /// Emits embed -> blocks -> head; returns the logits.
  Value emit(Value tokens, Value pos, int64_t rows, bool lastOnly) {
    Type bf16 = b.getBF16Type(), f32 = b.getF32Type();
    auto hidden = RankedTensorType::get({rows, c.dim}, bf16);
    auto streams = RankedTensorType::get({rows, c.hcMult, c.dim}, bf16);
    auto coeffs = RankedTensorType::get({rows, c.hcMult}, f32);
    auto comb = RankedTensorType::get({rows, c.hcMult, c.hcMult}, f32);

    Value h = EmbedOp::create(b, loc, hidden, tokens, c.vocabSize,
                              "embed.weight");
    Value x = HcExpandOp::create(b, loc, streams, h);
    // pre_in of layer 0 is one_hot(0): the first stream, i.e. `h` itself.
    Value preIn;
    for (const LayerRole &role : v.schedule.layers) {
      const int64_t l = role.layer;
      const std::string prefix = "layers." + std::to_string(l) + ".";
      auto engram = std::find(c.engramLayerIds.begin(), c.engramLayerIds.end(), l);
      if (engram != c.engramLayerIds.end()) {
        int64_t rowsOfTable =
            c.engramNumEmbeddings[engram - c.engramLayerIds.begin()];
        x = EngramOp::create(b, loc, streams, x, tokens, pos, l,
                             c.engramMaxNgramSize, c.engramNHeads,
                             c.engramHeadDim, rowsOfTable, c.engramVocabSize,
                             c.engramCompressedVocabSize, c.engramPadId,
                             prefix + "engram");
      }
      auto attnMix = HcMixOp::create(b, loc, coeffs, coeffs, comb, x,
                                     c.hcSinkhornIters, APFloat(c.hcEps),
                                     prefix + "hc_attn");
      Value attnIn =
          preIn ? Value(HcCollapseOp::create(b, loc, hidden, x, preIn)) : h;
      Value normed = RmsNormOp::create(b, loc, hidden, attnIn,
                                       APFloat(c.normEps), prefix + "attn_norm");
      Value attn = emitAttention(role, normed, pos, hidden, prefix + "attn");
      x = HcUpdateOp::create(b, loc, streams, x, attn, attnMix.getPost(),
                             attnMix.getComb());

      auto ffnMix = HcMixOp::create(b, loc, coeffs, coeffs, comb, x,
                                    c.hcSinkhornIters, APFloat(c.hcEps),
                                    prefix + "hc_ffn");
      // Single-Pass mHC: the FFN input mixes with the attention site's pre.
      Value ffnIn = HcCollapseOp::create(b, loc, hidden, x, attnMix.getPre());
      Value ffnNormed = RmsNormOp::create(b, loc, hidden, ffnIn,
                                          APFloat(c.normEps),
                                          prefix + "ffn_norm");
      Value moe = MoeOp::create(
          b, loc, hidden, ffnNormed, l, c.nRoutedExperts, c.nActivatedExperts,
          c.nSharedExperts, c.moeInterDim, APFloat(c.routeScale),
          APFloat(c.swigluLimit),
          weightFormat(c.expertDtype), weightFormat(c.dtype),
          prefix + "ffn");
      x = HcUpdateOp::create(b, loc, streams, x, moe, ffnMix.getPost(),
                             ffnMix.getComb());
      preIn = ffnMix.getPre();
    }
    Value y = preIn ? Value(HcCollapseOp::create(b, loc, hidden, x, preIn)) : h;
    y = RmsNormOp::create(b, loc, hidden, y, APFloat(c.normEps), "norm.weight");
    auto logits = RankedTensorType::get({lastOnly ? 1 : rows, c.vocabSize}, f32);
    return LmHeadOp::create(b, loc, logits, y, c.vocabSize, "head.weight",
                            lastOnly);
  }

private:
  Value emitAttention(const LayerRole &role, Value x, Value pos, Type hidden,
                      const std::string &weights) {
    MLIRContext *ctx = b.getContext();
    auto optionalLayer = [&](int64_t layer, bool present) -> IntegerAttr {
      return present && layer >= 0 ? b.getI64IntegerAttr(layer) : IntegerAttr();
    };
    const bool full = role.mode == LayerMode::Full;
    return AttentionOp::create(
        b, loc, hidden, x, pos, b.getI64IntegerAttr(role.layer),
        AttentionModeAttr::get(ctx, toAttentionMode(role.mode)),
        b.getI64IntegerAttr(role.ratio),
        optionalLayer(role.kvSource, !full),
        optionalLayer(role.indexSource, role.mode == LayerMode::Reuse),
        optionalLayer(role.candidateSource, role.mode == LayerMode::Reindex),
        role.candidatePool ? pool : HsiConfigAttr(),
        role.ratio > 0 ? compressRope : baseRope, attnConfig,
        b.getStringAttr(weights));
  }

  OpBuilder &b;
  Location loc;
  const ModelVariant &v;
  const ModelConfig &c;
  AttentionConfigAttr attnConfig;
  RopeTableAttr baseRope, compressRope;
  HsiConfigAttr pool;
};

} // namespace

OwningOpRef<ModuleOp> buildModelGraph(MLIRContext &context,
                                      const ModelVariant &variant,
                                      const GraphOptions &options) {
  loadGraphDialects(context);
  OpBuilder b(&context);
  Location loc = FileLineColLoc::get(&context, variant.name, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  module->getOperation()->setAttr("csa.model", b.getStringAttr(variant.name));
  module->getOperation()->setAttr(
      "csa.schedule", b.getStringAttr(variant.schedule.letters()));
  // What later stages need from the config: the dense projections' format
  // and the context the caches are planned for.
  module->getOperation()->setAttr(
      "csa.dense_format",
      b.getStringAttr(stringifyWeightFormat(weightFormat(variant.config.dtype))));
  if (variant.config.maxPositionEmbeddings > 0)
    module->getOperation()->setAttr(
        "csa.max_context",
        b.getI64IntegerAttr(variant.config.maxPositionEmbeddings));
  b.setInsertionPointToEnd(module->getBody());

  const ModelConfig &c = variant.config;
  Type i32 = b.getI32Type();
  auto logits = RankedTensorType::get({1, c.vocabSize}, b.getF32Type());
  {
    // The tokens and the position of the first: 0 for a prompt, the
    // sequence's length for a chunk that extends it (chunked prefill).
    auto tokens = RankedTensorType::get({ShapedType::kDynamic}, i32);
    auto fn = func::FuncOp::create(
        b, loc, "prefill",
        b.getFunctionType({tokens, b.getIndexType()}, {logits}));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(fn.addEntryBlock());
    ForwardEmitter emitter(b, loc, variant, options);
    Value out = emitter.emit(fn.getArgument(0), fn.getArgument(1),
                             ShapedType::kDynamic, /*lastOnly=*/true);
    func::ReturnOp::create(b, loc, out);
  }
  {
    auto token = RankedTensorType::get({1}, i32);
    auto fn = func::FuncOp::create(
        b, loc, "decode", b.getFunctionType({token, b.getIndexType()}, {logits}));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(fn.addEntryBlock());
    ForwardEmitter emitter(b, loc, variant, options);
    Value out = emitter.emit(fn.getArgument(0), fn.getArgument(1), 1,
                             /*lastOnly=*/false);
    func::ReturnOp::create(b, loc, out);
  }
  return module;
}

} // namespace csa

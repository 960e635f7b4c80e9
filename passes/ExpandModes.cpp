//===- ExpandModes.cpp - CSA2 layers into their primitives ----------------===//
//
// One rewrite per attention layer, in program order, so that a source
// layer's cache handle, top-k set and candidate pool exist (as SSA values)
// before the layers that read them. The primitive sequence mirrors the
// released model.py (spec §3); comments name the step.
//
//===----------------------------------------------------------------------===//
#include "dialects/csa/CsaDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

#include "llvm/ADT/DenseMap.h"

#include <cmath>
#include <numeric>

namespace csa {
#define GEN_PASS_DEF_EXPANDMODES
#include "passes/Passes.h.inc"
} // namespace csa

using namespace mlir;
using namespace csa;

namespace {

/// Release publication (csa.index_score's `published`): the caches a layer's
/// index scores may read instead of its own, and which by position residue
/// (-1: its own).
struct PublishedKeys {
  SmallVector<Value> caches;
  SmallVector<int64_t> at;
};

/// What a layer publishes to the layers after it.
struct Published {
  Value cache;    ///< !csa.global_cache (Full)
  Value selected; ///< !csa.topk (Full, Reindex)
  Value pool;     ///< !csa.candidate_pool (candidate source)
};

class LayerExpander {
public:
  LayerExpander(OpBuilder &b, AttentionOp op, WeightFormat dense,
                llvm::DenseMap<int64_t, Published> &published)
      : b(b), op(op), loc(op.getLoc()), dense(dense), published(published),
        c(op.getConfig()) {
    auto inputType = cast<RankedTensorType>(op.getInput().getType());
    rows = inputType.getDimSize(0);
    bf16 = b.getBF16Type();
    prefix = op.getWeights().str() + ".";
  }

  /// Release publication for this layer's index scores (null: owner).
  const PublishedKeys *publishedKeys = nullptr;

  /// Emits the primitives; returns the layer output.
  Value expand(Value ring, Value cache, Value state) {
    Value x = op.getInput(), pos = op.getPosition();
    const int64_t heads = c.getHeads(), hd = c.getHeadDim();

    // Query path (V4.1 has no per-head q norm).
    Value qr = rmsNorm(linear(x, "wq_a", dense, c.getQRank()), "q_norm");
    Value q = rope(split(linear(qr, "wq_b", dense, heads * hd), heads, hd),
                   pos, 1, false);

    // The layer's own SWA KV: FP8 rows, RoPE tail included, into its ring.
    Value kv = rope(rmsNorm(linear(x, "wkv", dense, hd), "kv_norm"), pos, 1,
                    false);
    Value swaRows = quantize(kv, c.getSwaRow());
    CacheAppendOp::create(b, loc, swaRows, ring, pos);

    Value global, selected;
    const int64_t layer = op.getLayerAttr().getInt();
    const int64_t ratio = op.getRatioAttr().getInt();
    switch (op.getMode()) {
    case AttentionMode::SwaOnly:
      break;
    case AttentionMode::Full: {
      // Compressor: pre-RoPE latents of the groups this call completes.
      auto latentType =
          RankedTensorType::get({ShapedType::kDynamic, hd}, bf16);
      Value latent = CompressOp::create(
          b, loc, latentType, x, pos, ratio, state, /*gated=*/ratio > 1,
          prefix + "compressor");
      Value entry = groupEntry(pos, ratio), entryPos = entryPosition(entry, ratio);
      // Index keys from the pre-RoPE latent, published before scoring.
      Value keys = rope(
          rmsNorm(linear(latent, "indexer.wk", WeightFormat::BF16,
                         c.getIndexDim()),
                  "indexer.k_norm"),
          entryPos, ratio, false, c.getIndexRopeDim());
      CacheAppendOp::create(b, loc, quantize(keys, c.getIndexRow()), cache,
                            entry);
      selected = indexer(x, qr, pos, cache, /*pool=*/Value(),
                         op.getCandidatePoolAttr());
      // Then the latent itself: RoPE at the group's first token, FP4 rows.
      Value rotated = rope(latent, entryPos, ratio, false);
      CacheAppendOp::create(b, loc, quantize(rotated, c.getMainRow()), cache,
                            entry);
      global = cache;
      published[layer] = {cache, selected, pool};
      break;
    }
    case AttentionMode::Reindex: {
      const Published &kvSource = published[op.getKvSourceAttr().getInt()];
      const Published &poolSource =
          published[op.getCandidateSourceAttr().getInt()];
      global = kvSource.cache;
      selected = indexer(x, qr, pos, global, poolSource.pool, nullptr);
      published[layer] = {Value(), selected, Value()};
      break;
    }
    case AttentionMode::Reuse:
      global = published[op.getKvSourceAttr().getInt()].cache;
      selected = published[op.getIndexSourceAttr().getInt()].selected;
      break;
    }

    // One softmax over window and selected rows, sink in the denominator.
    const double scale = 1.0 / std::sqrt(double(hd));
    Value o = SparseAttentionOp::create(
        b, loc, q.getType(), q, ring, swaRows, pos, global, selected,
        b.getStringAttr(prefix + "attn_sink"), b.getF64FloatAttr(scale));
    o = rope(o, pos, 1, /*inverse=*/true);
    // Grouped low-rank output: wo_a block-diagonal over o_groups, then wo_b.
    // Stored as FP8 blocks in the released checkpoint, computed as the bf16
    // weight convert.py dequantizes it to.
    Value u = linear(merge(o), "wo_a",
                     dense == WeightFormat::FP8Block32 ? WeightFormat::FP8AsBF16
                                                       : WeightFormat::BF16,
                     c.getOGroups() * c.getORank(), c.getOGroups());
    auto outType = cast<RankedTensorType>(x.getType());
    return linear(u, "wo_b", dense, outType.getDimSize(1));
  }

  Value pool;

private:
  /// Indexer queries, weights and scores; the top-k (within `poolIn` when
  /// given); on the candidate source, also the HSI pool.
  Value indexer(Value x, Value qr, Value pos, Value keyCache, Value poolIn,
                HsiConfigAttr buildsPool) {
    const int64_t ih = c.getIndexHeads(), id = c.getIndexDim();
    Value iq = rope(split(linear(qr, "indexer.wq_b", dense, ih * id), ih, id),
                    pos, 1, false, c.getIndexRopeDim());
    Value w = linear(x, "indexer.weights_proj", WeightFormat::BF16, ih);
    auto scoresType = RankedTensorType::get({rows, ShapedType::kDynamic},
                                            b.getF32Type());
    Value scores =
        publishedKeys
            ? IndexScoreOp::create(b, loc, scoresType, iq, w, keyCache, publishedKeys->caches,
                                   b.getDenseI64ArrayAttr(publishedKeys->at))
            : IndexScoreOp::create(b, loc, scoresType, iq, w, keyCache, ValueRange{},
                                   DenseI64ArrayAttr());
    if (buildsPool) {
      auto poolType = CandidatePoolType::get(
          b.getContext(), buildsPool.getBlocks(), buildsPool.getBlockSize());
      pool = HsiSelectOp::create(b, loc, poolType, scores);
    }
    auto topkType = TopKType::get(b.getContext(), c.getTopk());
    return TopKOp::create(b, loc, topkType, scores, poolIn,
                          TieBreakAttr::get(b.getContext(),
                                            TieBreak::LowestPosition));
  }

  Value linear(Value in, StringRef name, WeightFormat format, int64_t out,
               int64_t groups = 1) {
    auto inType = cast<RankedTensorType>(in.getType());
    auto type = RankedTensorType::get({inType.getDimSize(0), out}, bf16);
    return LinearOp::create(b, loc, type, in, b.getStringAttr(prefix + name),
                            WeightFormatAttr::get(b.getContext(), format),
                            b.getI64IntegerAttr(groups));
  }

  Value rmsNorm(Value in, StringRef name) {
    // The released model uses one epsilon for every RMSNorm; the graph's
    // norms carry it.
    return RmsNormOp::create(b, loc, in.getType(), in, b.getF64FloatAttr(eps),
                             b.getStringAttr(prefix + name + ".weight"));
  }

  Value rope(Value in, Value pos, int64_t stride, bool inverse,
             int64_t dim = -1) {
    RopeTableAttr table = op.getRope();
    if (dim >= 0 && dim != table.getDim())
      table = RopeTableAttr::get(b.getContext(), dim, table.getTheta(),
                                 table.getFactor(), table.getOriginalSeqLen(),
                                 table.getBetaFast(), table.getBetaSlow());
    return RopeOp::create(b, loc, in.getType(), in, pos,
                          b.getI64IntegerAttr(stride), table,
                          inverse ? b.getUnitAttr() : UnitAttr());
  }

  Value quantize(Value in, Type row) {
    auto inType = cast<RankedTensorType>(in.getType());
    return QuantizeOp::create(
        b, loc, RankedTensorType::get({inType.getDimSize(0)}, row), in);
  }

  /// [n, h*d] -> [n, h, d].
  Value split(Value in, int64_t h, int64_t d) {
    auto inType = cast<RankedTensorType>(in.getType());
    auto type = RankedTensorType::get({inType.getDimSize(0), h, d}, bf16);
    return tensor::ExpandShapeOp::create(
        b, loc, type, in, ArrayRef<ReassociationIndices>{{0}, {1, 2}});
  }

  /// [n, h, d] -> [n, h*d].
  Value merge(Value in) {
    auto inType = cast<RankedTensorType>(in.getType());
    auto type = RankedTensorType::get(
        {inType.getDimSize(0), inType.getDimSize(1) * inType.getDimSize(2)},
        bf16);
    return tensor::CollapseShapeOp::create(
        b, loc, type, in, ArrayRef<ReassociationIndices>{{0}, {1, 2}});
  }

  /// The first cache entry this call writes: pos / ratio.
  Value groupEntry(Value pos, int64_t ratio) {
    if (ratio == 1)
      return pos;
    Value r = arith::ConstantIndexOp::create(b, loc, ratio);
    return arith::DivUIOp::create(b, loc, pos, r);
  }
  /// The position entry e is rotated at: e * ratio (its group's first token).
  Value entryPosition(Value entry, int64_t ratio) {
    if (ratio == 1)
      return entry;
    Value r = arith::ConstantIndexOp::create(b, loc, ratio);
    return arith::MulIOp::create(b, loc, entry, r);
  }

  OpBuilder &b;
  AttentionOp op;
  Location loc;
  WeightFormat dense;
  llvm::DenseMap<int64_t, Published> &published;
  AttentionConfigAttr c;
  int64_t rows = 0;
  Type bf16;
  std::string prefix;

public:
  double eps = 1e-20;
};

/// A layer's caches, allocated at the function's start.
struct LayerCaches {
  Value ring, cache, state;
};

/// Release publication (spec §10.1) in a decode function: for each Full
/// layer of ratio > 1 and each Reindex layer, whose index keys the released
/// model.py scores at each position residue. A Full layer publishes its keys
/// on a step that completes its group ((p + 1) % ratio == 0; every step at
/// ratio 1) and the last publisher's are read: an earlier Full layer of the
/// step, else the last Full layer's of the step before (or of the prefill),
/// which is why that layer must have ratio 1.
LogicalResult releaseKeys(func::FuncOp fn, ArrayRef<AttentionOp> layers,
                          ArrayRef<LayerCaches> caches,
                          llvm::DenseMap<int64_t, PublishedKeys> &out) {
  struct Publisher {
    size_t index;
    int64_t layer, ratio;
    Value cache;
  };
  SmallVector<Publisher> full;
  llvm::DenseMap<int64_t, Value> cacheOf; // layer -> its global cache
  for (auto [i, layerOp] : llvm::enumerate(layers))
    if (AttentionOp op = layerOp; op.getMode() == AttentionMode::Full) {
      full.push_back({i, op.getLayerAttr().getInt(), op.getRatioAttr().getInt(),
                      caches[i].cache});
      cacheOf[full.back().layer] = caches[i].cache;
    }
  if (full.empty())
    return success();
  const Publisher &last = full.back();
  if (last.ratio != 1)
    return fn.emitError() << "index-publication=release needs the last Full layer to have "
                             "ratio 1 (as the released model's layer 20), so that every step "
                             "ends with its index keys published; layer "
                          << last.layer << " has ratio " << last.ratio;
  constexpr int64_t kMaxPeriod = 4096;
  int64_t period = 1;
  for (const Publisher &p : full) {
    period = std::lcm(period, p.ratio);
    if (period > kMaxPeriod)
      return fn.emitError() << "index-publication=release: the Full layers' ratios repeat "
                               "only every "
                            << period << " positions (at most " << kMaxPeriod << ")";
  }
  auto publishes = [](const Publisher &p, int64_t residue) {
    return (residue + 1) % p.ratio == 0;
  };
  for (auto [i, layerOp] : llvm::enumerate(layers)) {
    AttentionOp op = layerOp;
    const int64_t layer = op.getLayerAttr().getInt(), ratio = op.getRatioAttr().getInt();
    const bool isFull = op.getMode() == AttentionMode::Full;
    if (!(isFull && ratio > 1) && op.getMode() != AttentionMode::Reindex)
      continue;
    const Value own = isFull ? caches[i].cache : cacheOf.lookup(op.getKvSourceAttr().getInt());
    PublishedKeys keys;
    for (int64_t residue = 0; residue < period; ++residue) {
      Value source = last.cache;
      if (isFull && (residue + 1) % ratio == 0)
        source = own;
      else
        for (const Publisher &p : full)
          if (p.index < i && publishes(p, residue))
            source = p.cache; // the latest earlier publisher wins
      int64_t slot = -1;
      if (source != own) {
        auto it = llvm::find(keys.caches, source);
        slot = it - keys.caches.begin();
        if (it == keys.caches.end())
          keys.caches.push_back(source);
      }
      keys.at.push_back(slot);
    }
    if (!keys.caches.empty())
      out[layer] = std::move(keys);
  }
  return success();
}

struct ExpandModesPass : public csa::impl::ExpandModesBase<ExpandModesPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    std::string format = denseFormat;
    if (format.empty()) {
      auto module = fn->getParentOfType<ModuleOp>();
      auto attr = module ? module->getAttrOfType<StringAttr>("csa.dense_format")
                         : StringAttr();
      format = attr ? attr.str() : "fp8_block32";
    }
    std::optional<WeightFormat> dense = symbolizeWeightFormat(format);
    if (!dense || (*dense != WeightFormat::FP8Block32 &&
                   *dense != WeightFormat::BF16)) {
      fn.emitError() << "csa-expand-modes: dense-format must be fp8_block32 "
                        "or bf16, got '"
                     << format << "'";
      return signalPassFailure();
    }
    SmallVector<AttentionOp> layers;
    fn.walk([&](AttentionOp op) { layers.push_back(op); });
    if (layers.empty())
      return;
    // The norm epsilon the graph uses (every norm of the model shares it).
    double eps = 1e-20;
    fn.walk([&](RmsNormOp norm) { eps = norm.getEps().convertToDouble(); });

    OpBuilder b(fn.getContext());
    b.setInsertionPointToStart(&fn.getBody().front());
    std::vector<LayerCaches> caches;
    for (AttentionOp op : layers) {
      Location loc = op.getLoc();
      const int64_t layer = op.getLayerAttr().getInt();
      LayerCaches entry;
      entry.ring = CacheAllocOp::create(b, loc, op.getSwaRingType(), layer);
      ++numCaches;
      if (op.ownsGlobalCache()) {
        entry.cache =
            CacheAllocOp::create(b, loc, op.getGlobalCacheType(), layer);
        ++numCaches;
        if (op.getRatioAttr().getInt() > 1) {
          auto stateType = CompressorStateType::get(
              fn.getContext(), op.getRatioAttr().getInt(),
              op.getConfig().getHeadDim());
          entry.state = CacheAllocOp::create(b, loc, stateType, layer);
          ++numCaches;
        }
      }
      caches.push_back(entry);
    }

    std::string publication = indexPublication;
    if (publication.empty()) {
      auto module = fn->getParentOfType<ModuleOp>();
      auto attr = module ? module->getAttrOfType<StringAttr>("csa.index_publication")
                         : StringAttr();
      publication = attr ? attr.str() : "owner";
    }
    if (publication != "owner" && publication != "release") {
      fn.emitError() << "csa-expand-modes: index-publication must be owner or release, got '"
                     << publication << "'";
      return signalPassFailure();
    }
    llvm::DenseMap<int64_t, PublishedKeys> release;
    if (publication == "release" && fn.getName() == "decode")
      if (failed(releaseKeys(fn, layers, caches, release)))
        return signalPassFailure();

    llvm::DenseMap<int64_t, Published> published;
    for (auto [op, entry] : llvm::zip(layers, caches)) {
      OpBuilder layerBuilder(op);
      LayerExpander expander(layerBuilder, op, *dense, published);
      expander.eps = eps;
      if (auto it = release.find(op.getLayerAttr().getInt()); it != release.end())
        expander.publishedKeys = &it->second;
      Value out = expander.expand(entry.ring, entry.cache, entry.state);
      if (op.getCandidatePoolAttr())
        published[op.getLayerAttr().getInt()].pool = expander.pool;
      op.getResult().replaceAllUsesWith(out);
      op.erase();
      ++numLayers;
    }
  }
};

} // namespace

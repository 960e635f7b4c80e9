//===- CsaOps.cpp - csa op verifiers and costs ----------------------------===//
#include "dialects/csa/CsaDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <algorithm>

using namespace mlir;
using namespace csa;

#include "dialects/csa/CsaInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/csa/CsaOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static int64_t dim(Value v, unsigned i) {
  return cast<RankedTensorType>(v.getType()).getDimSize(i);
}

/// Two sizes agree unless both are static and differ.
static bool compatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// Precision weight of a multiply-add, as the DeepSeek tech report counts.
static double precisionWeight(WeightFormat format) {
  switch (format) {
  case WeightFormat::FP8Block32:
    return 0.5;
  case WeightFormat::FP4E2M1:
    return 0.25;
  case WeightFormat::BF16:
  case WeightFormat::F32:
  case WeightFormat::FP8AsBF16:
    return 1.0;
  }
  return 1.0;
}

static constexpr double kFp8 = 0.5;
static constexpr double kFp4 = 0.25;

//===----------------------------------------------------------------------===//
// EmbedOp
//===----------------------------------------------------------------------===//

LogicalResult EmbedOp::verify() {
  if (getVocab() <= 0)
    return emitOpError("vocab must be positive");
  if (!compatible(dim(getTokens(), 0), dim(getResult(), 0)))
    return emitOpError("produces ")
           << dim(getResult(), 0) << " rows for " << dim(getTokens(), 0)
           << " tokens";
  return success();
}
int64_t EmbedOp::getParameterCount() {
  return getVocab() * dim(getResult(), 1);
}
int64_t EmbedOp::getActiveParameterCount() { return dim(getResult(), 1); }
double EmbedOp::getWeightedDecodeFlops(int64_t) { return 0; }

//===----------------------------------------------------------------------===//
// mHC ops
//===----------------------------------------------------------------------===//

LogicalResult HcExpandOp::verify() {
  if (!compatible(dim(getInput(), 0), dim(getResult(), 0)) ||
      !compatible(dim(getInput(), 1), dim(getResult(), 2)))
    return emitOpError("result must be [tokens, streams, dim] of the input's "
                       "tokens and dim");
  if (dim(getResult(), 1) < 1)
    return emitOpError("needs at least one stream");
  return success();
}
int64_t HcExpandOp::getParameterCount() { return 0; }
int64_t HcExpandOp::getActiveParameterCount() { return 0; }
double HcExpandOp::getWeightedDecodeFlops(int64_t) { return 0; }

/// Checks a [tokens, hc] or [tokens, hc, hc] coefficient tensor.
static LogicalResult verifyCoefficients(Operation *op, Value coeffs,
                                        int64_t tokens, int64_t hc,
                                        StringRef name) {
  auto type = cast<RankedTensorType>(coeffs.getType());
  bool ok = compatible(type.getDimSize(0), tokens);
  for (unsigned i = 1; i < type.getRank(); ++i)
    ok &= compatible(type.getDimSize(i), hc);
  if (!ok)
    return op->emitOpError() << name << " must have one coefficient per token"
                             << " and stream (" << hc << " streams), got "
                             << type;
  return success();
}

LogicalResult HcMixOp::verify() {
  int64_t tokens = dim(getStreams(), 0), hc = dim(getStreams(), 1);
  if (getIters() < 0)
    return emitOpError("Sinkhorn iterations must be >= 0");
  if (getEps().convertToDouble() < 0)
    return emitOpError("eps must be >= 0");
  if (failed(verifyCoefficients(*this, getPre(), tokens, hc, "pre")) ||
      failed(verifyCoefficients(*this, getPost(), tokens, hc, "post")) ||
      failed(verifyCoefficients(*this, getComb(), tokens, hc, "comb")))
    return failure();
  return success();
}
int64_t HcMixOp::getParameterCount() {
  int64_t hc = dim(getStreams(), 1), d = dim(getStreams(), 2);
  int64_t mixes = hc * (2 + hc);
  return mixes * hc * d + mixes + 3;
}
int64_t HcMixOp::getActiveParameterCount() { return getParameterCount(); }
double HcMixOp::getWeightedDecodeFlops(int64_t) {
  int64_t hc = dim(getStreams(), 1), d = dim(getStreams(), 2);
  return 2.0 * hc * (2 + hc) * hc * d; // fp32
}

LogicalResult HcCollapseOp::verify() {
  int64_t tokens = dim(getStreams(), 0), hc = dim(getStreams(), 1);
  if (!compatible(dim(getStreams(), 2), dim(getResult(), 1)) ||
      !compatible(tokens, dim(getResult(), 0)))
    return emitOpError("result must be [tokens, dim] of the streams");
  return verifyCoefficients(*this, getPre(), tokens, hc, "pre");
}
int64_t HcCollapseOp::getParameterCount() { return 0; }
int64_t HcCollapseOp::getActiveParameterCount() { return 0; }
double HcCollapseOp::getWeightedDecodeFlops(int64_t) {
  return 2.0 * dim(getStreams(), 1) * dim(getStreams(), 2);
}

LogicalResult HcUpdateOp::verify() {
  int64_t tokens = dim(getStreams(), 0), hc = dim(getStreams(), 1);
  if (!compatible(dim(getStreams(), 2), dim(getUpdate(), 1)) ||
      !compatible(tokens, dim(getUpdate(), 0)))
    return emitOpError("update must be [tokens, dim] of the streams");
  if (failed(verifyCoefficients(*this, getPost(), tokens, hc, "post")) ||
      failed(verifyCoefficients(*this, getComb(), tokens, hc, "comb")))
    return failure();
  return success();
}
int64_t HcUpdateOp::getParameterCount() { return 0; }
int64_t HcUpdateOp::getActiveParameterCount() { return 0; }
double HcUpdateOp::getWeightedDecodeFlops(int64_t) {
  int64_t hc = dim(getStreams(), 1), d = dim(getStreams(), 2);
  return 2.0 * (hc * hc + hc) * d;
}

//===----------------------------------------------------------------------===//
// RmsNormOp
//===----------------------------------------------------------------------===//

LogicalResult RmsNormOp::verify() {
  if (getEps().convertToDouble() < 0)
    return emitOpError("eps must be >= 0");
  return success();
}
int64_t RmsNormOp::getParameterCount() {
  auto type = cast<RankedTensorType>(getInput().getType());
  return type.getDimSize(type.getRank() - 1);
}
int64_t RmsNormOp::getActiveParameterCount() { return getParameterCount(); }
// Norms, softmaxes and activations are not multiply-adds; not counted.
double RmsNormOp::getWeightedDecodeFlops(int64_t) { return 0; }

//===----------------------------------------------------------------------===//
// EngramOp
//===----------------------------------------------------------------------===//

LogicalResult EngramOp::verify() {
  if (getMaxNgram() < 2)
    return emitOpError("max_ngram must be >= 2 (orders 2..max_ngram), got ")
           << getMaxNgram();
  if (getHeads() < 1 || getHeadDim() < 1)
    return emitOpError("needs heads >= 1 and head_dim >= 1");
  if (getRows() < (getMaxNgram() - 1) * getHeads())
    return emitOpError("table of ")
           << getRows() << " rows cannot hold one bucket per order and head ("
           << (getMaxNgram() - 1) * getHeads() << ")";
  if (!compatible(dim(getStreams(), 0), dim(getTokens(), 0)))
    return emitOpError("needs one token id per stream row");
  if (getHashVocab() < 1 || getCompressedVocab() < 1)
    return emitOpError("needs hash_vocab >= 1 and compressed_vocab >= 1");
  if (getPadId() < 0)
    return emitOpError("pad_id must be >= 0, got ") << getPadId();
  return success();
}
int64_t EngramOp::getParameterCount() {
  int64_t hc = dim(getStreams(), 1), d = dim(getStreams(), 2);
  return getRows() * getHeadDim() + (hc + 1) * d * getGatherWidth() +
         2 * hc * d;
}
int64_t EngramOp::getActiveParameterCount() {
  int64_t hc = dim(getStreams(), 1), d = dim(getStreams(), 2);
  return getGatherWidth() + (hc + 1) * d * getGatherWidth() + 2 * hc * d;
}
double EngramOp::getWeightedDecodeFlops(int64_t) {
  int64_t hc = dim(getStreams(), 1), d = dim(getStreams(), 2);
  return 2.0 * (hc + 1) * d * getGatherWidth() * kFp8 + 2.0 * hc * d;
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

static int64_t optionalLayer(IntegerAttr attr) {
  return attr ? attr.getInt() : -1;
}

LayerRole AttentionOp::getRole() {
  LayerRole role;
  role.layer = static_cast<int64_t>(getLayerAttr().getInt());
  role.mode = toLayerMode(getMode());
  role.ratio = getRatioAttr().getInt();
  role.kvSource = optionalLayer(getKvSourceAttr());
  role.indexSource = optionalLayer(getIndexSourceAttr());
  role.candidateSource = optionalLayer(getCandidateSourceAttr());
  role.candidatePool = getCandidatePoolAttr() != nullptr;
  // A Full layer is its own source even where the IR leaves that implicit.
  if (role.mode == LayerMode::Full) {
    if (role.kvSource < 0)
      role.kvSource = role.layer;
    if (role.indexSource < 0)
      role.indexSource = role.layer;
  }
  return role;
}

/// The attention layer numbered `layer` in the same block, if any.
static AttentionOp findLayer(Operation *op, int64_t layer) {
  for (auto other : op->getBlock()->getOps<AttentionOp>())
    if (other.getLayerAttr().getInt() == layer)
      return other;
  return {};
}

LogicalResult AttentionOp::verify() {
  LayerRole role = getRole();
  if (auto error = checkLayerLocal(role))
    return emitOpError() << *error;

  AttentionConfigAttr config = getConfig();
  if (getRope().getDim() != config.getRopeDim())
    return emitOpError() << describeLayer(role) << ": rope table rotates "
                         << getRope().getDim() << " channels but the config's "
                         << "rope_dim is " << config.getRopeDim();

  // Cross-layer rules: look the sources up among the sibling layers.
  llvm::DenseMap<int64_t, LayerRole> roles;
  for (auto other : (*this)->getBlock()->getOps<AttentionOp>()) {
    LayerRole otherRole = other.getRole();
    if (other != *this && otherRole.layer == role.layer &&
        other->isBeforeInBlock(*this))
      return emitOpError() << describeLayer(role)
                           << ": layer number appears twice in the graph";
    roles.try_emplace(otherRole.layer, otherRole);
  }
  LayerLookup lookup = [&](int64_t layer) -> const LayerRole * {
    auto it = roles.find(layer);
    return it == roles.end() ? nullptr : &it->second;
  };
  if (auto error = checkLayerSources(role, lookup))
    return emitOpError() << *error;
  return success();
}

GlobalCacheType AttentionOp::getGlobalCacheType() {
  AttentionConfigAttr c = getConfig();
  return GlobalCacheType::get(getContext(), getRatio(), c.getMainRow(),
                              c.getIndexRow());
}

SwaRingType AttentionOp::getSwaRingType() {
  AttentionConfigAttr c = getConfig();
  return SwaRingType::get(getContext(), c.getWindow(), c.getSwaRow());
}

int64_t AttentionOp::getVisibleEntries(int64_t context) {
  return getRatio() > 0 ? context / static_cast<int64_t>(getRatio()) : 0;
}

int64_t AttentionOp::getAttendedRows(int64_t context) {
  AttentionConfigAttr c = getConfig();
  int64_t rows = std::min<int64_t>(c.getWindow(), context);
  if (getMode() != AttentionMode::SwaOnly)
    rows += std::min<int64_t>(c.getTopk(), getVisibleEntries(context));
  return rows;
}

int64_t AttentionOp::getScoredRows(int64_t context) {
  if (!isIndexSource())
    return 0;
  int64_t visible = getVisibleEntries(context);
  if (getMode() == AttentionMode::Reindex) {
    // Candidate-only scoring: at most the pool's positions.
    AttentionOp source = findLayer(*this, getCandidateSourceAttr().getInt());
    if (source && source.getCandidatePoolAttr()) {
      HsiConfigAttr pool = source.getCandidatePoolAttr();
      return std::min(visible, pool.getBlocks() * pool.getBlockSize());
    }
  }
  return visible;
}

int64_t AttentionOp::getParameterCount() {
  AttentionConfigAttr c = getConfig();
  int64_t d = dim(getInput(), 1);
  int64_t qk = c.getHeads() * c.getHeadDim();
  int64_t n = d * c.getQRank() + c.getQRank()       // wq_a, q_norm
              + c.getQRank() * qk                    // wq_b
              + d * c.getHeadDim() + c.getHeadDim()  // wkv, kv_norm
              + c.getORank() * qk                    // wo_a (grouped)
              + d * c.getOGroups() * c.getORank()    // wo_b
              + c.getHeads();                        // attn_sink
  if (ownsGlobalCache()) {
    int64_t gated = getRatio() > 1 ? 2 : 1;
    n += gated * d * c.getHeadDim() + c.getHeadDim();         // compressor
    n += c.getHeadDim() * c.getIndexDim() + c.getIndexDim(); // wk, k_norm
  }
  if (isIndexSource())
    n += c.getQRank() * c.getIndexHeads() * c.getIndexDim() // indexer wq_b
         + d * c.getIndexHeads();                            // weights_proj
  return n;
}

int64_t AttentionOp::getActiveParameterCount() { return getParameterCount(); }

double AttentionOp::getWeightedDecodeFlops(int64_t context) {
  AttentionConfigAttr c = getConfig();
  double d = dim(getInput(), 1);
  double qk = double(c.getHeads()) * c.getHeadDim();
  // FP8 projections; wo_a is used in bf16 (converted from FP8 at load).
  double flops = 2.0 * kFp8 *
                 (d * c.getQRank() + c.getQRank() * qk + d * c.getHeadDim() +
                  d * c.getOGroups() * c.getORank());
  flops += 2.0 * c.getORank() * qk;
  if (ownsGlobalCache()) {
    int64_t gated = getRatio() > 1 ? 2 : 1;
    flops += 2.0 * gated * d * c.getHeadDim(); // compressor (fp32)
    // Index key projection, once per completed group.
    flops += 2.0 * c.getHeadDim() * c.getIndexDim() / double(getRatio());
  }
  if (isIndexSource()) {
    flops += 2.0 * kFp8 * c.getQRank() * c.getIndexHeads() * c.getIndexDim();
    flops += 2.0 * d * c.getIndexHeads(); // weights_proj (bf16)
    // Queries against keys in the index rows' format (FP4 as released).
    const double keyWeight = isa<Fp4RowType>(c.getIndexRow()) ? kFp4 : kFp8;
    flops += 2.0 * keyWeight * c.getIndexHeads() * c.getIndexDim() *
             double(getScoredRows(context));
  }
  // QK^T and PV over the gathered rows (bf16 after dequantization).
  flops += 2.0 * c.getHeads() * double(getAttendedRows(context)) *
           (2.0 * c.getHeadDim());
  return flops;
}

//===----------------------------------------------------------------------===//
// MoeOp
//===----------------------------------------------------------------------===//

LogicalResult MoeOp::verify() {
  if (getExperts() < 1 || getInter() < 1)
    return emitOpError("needs experts >= 1 and inter >= 1");
  if (getTopK() < 1 || getTopK() > getExperts())
    return emitOpError("top_k ")
           << getTopK() << " must be in [1, experts = " << getExperts() << "]";
  if (getRouteScale().convertToDouble() <= 0)
    return emitOpError("route_scale must be positive");
  if (getSwigluLimit().convertToDouble() <= 0)
    return emitOpError("swiglu_limit must be positive");
  return success();
}
int64_t MoeOp::getParameterCount() {
  int64_t d = dim(getInput(), 1), expert = 3 * d * getInter();
  return (getExperts() + getShared()) * expert + getExperts() * d +
         2 * getExperts();
}
int64_t MoeOp::getActiveParameterCount() {
  int64_t d = dim(getInput(), 1), expert = 3 * d * getInter();
  return (getTopK() + getShared()) * expert + getExperts() * d;
}
double MoeOp::getWeightedDecodeFlops(int64_t) {
  double d = dim(getInput(), 1), expert = 3.0 * d * getInter();
  return 2.0 * expert *
             (getTopK() * precisionWeight(getExpertFormat()) +
              getShared() * precisionWeight(getSharedFormat())) +
         2.0 * getExperts() * d; // router (fp32)
}

//===----------------------------------------------------------------------===//
// LmHeadOp
//===----------------------------------------------------------------------===//

LogicalResult LmHeadOp::verify() {
  if (dim(getResult(), 1) != getVocab())
    return emitOpError("result has ")
           << dim(getResult(), 1) << " logits per row but vocab is "
           << getVocab();
  if (getLastOnly() && !compatible(dim(getResult(), 0), 1))
    return emitOpError("with last_only produces exactly one row");
  if (!getLastOnly() && !compatible(dim(getResult(), 0), dim(getInput(), 0)))
    return emitOpError("produces one row of logits per input row");
  return success();
}
int64_t LmHeadOp::getParameterCount() {
  return getVocab() * dim(getInput(), 1);
}
int64_t LmHeadOp::getActiveParameterCount() { return getParameterCount(); }
double LmHeadOp::getWeightedDecodeFlops(int64_t) {
  return 2.0 * getVocab() * dim(getInput(), 1);
}

//===----------------------------------------------------------------------===//
// Primitives
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::verify() {
  if (!compatible(dim(getInput(), 0), dim(getResult(), 0)))
    return emitOpError("produces one output row per input row");
  int64_t groups = getGroups();
  if (groups < 1)
    return emitOpError("groups must be >= 1, got ") << groups;
  if (groups > 1 && (getFormat() == WeightFormat::FP8Block32 ||
                     getFormat() == WeightFormat::FP4E2M1))
    return emitOpError("groups need a bf16, f32 or fp8_as_bf16 weight (the "
                       "quantized formats scale whole 32-blocks), got ")
           << stringifyWeightFormat(getFormat());
  for (auto [value, what] : {std::pair{dim(getInput(), 1), "input channels"},
                             std::pair{dim(getResult(), 1), "outputs"}})
    if (!ShapedType::isDynamic(value) && value % groups != 0)
      return emitOpError() << groups << " groups do not divide the " << value
                           << " " << what;
  return success();
}

LogicalResult RopeOp::verify() {
  auto type = cast<RankedTensorType>(getInput().getType());
  int64_t channels = type.getDimSize(type.getRank() - 1);
  if (getStride() < 1)
    return emitOpError("stride must be >= 1, got ") << getStride();
  if (!ShapedType::isDynamic(channels) && getTable().getDim() > channels)
    return emitOpError("rotates ")
           << getTable().getDim() << " channels of a " << channels
           << "-channel row";
  return success();
}

LogicalResult CompressOp::verify() {
  int64_t ratio = getRatio();
  if (ratio < 1)
    return emitOpError("ratio must be >= 1, got ") << ratio;
  auto state = getState();
  if (ratio == 1) {
    if (state)
      return emitOpError("ratio 1 emits one entry per token; it keeps no "
                         "compressor state");
    if (getGated())
      return emitOpError("ratio 1 has no gate (there is nothing to pool)");
    return success();
  }
  if (!state)
    return emitOpError("ratio ")
           << ratio << " needs a compressor state for the partial group";
  if (!getGated())
    return emitOpError("ratio ")
           << ratio << " pools each group with a softmax gate: mark it gated";
  auto stateType = cast<CompressorStateType>(state.getType());
  if (stateType.getRatio() != ratio)
    return emitOpError("state has ratio ")
           << stateType.getRatio() << " but the compressor has ratio "
           << ratio;
  if (!compatible(stateType.getDim(), dim(getResult(), 1)))
    return emitOpError("state holds ")
           << stateType.getDim() << " channels but the latent has "
           << dim(getResult(), 1);
  return success();
}

LogicalResult IndexScoreOp::verify() {
  auto cache = cast<GlobalCacheType>(getCache().getType());
  int64_t tokens = dim(getQuery(), 0), heads = dim(getQuery(), 1);
  if (!compatible(dim(getQuery(), 2), cache.getIndexRow().getDim()))
    return emitOpError("query heads have ")
           << dim(getQuery(), 2) << " channels but index keys have "
           << cache.getIndexRow().getDim();
  if (!compatible(dim(getHeadWeights(), 0), tokens) ||
      !compatible(dim(getHeadWeights(), 1), heads))
    return emitOpError("needs one weight per query row and head");
  if (!compatible(dim(getScores(), 0), tokens))
    return emitOpError("produces one row of scores per query row");
  // Release publication: a table of residues naming `cache` (-1) or one of
  // `published`, whose keys are rows of the same format.
  std::optional<ArrayRef<int64_t>> at = getPublishedAt();
  if (getPublished().empty() != !at)
    return emitOpError("needs both `published` caches and their `at` table, or neither");
  if (at) {
    if (at->empty())
      return emitOpError("has an empty `at` table (one entry per position residue)");
    const int64_t count = int64_t(getPublished().size());
    for (auto [i, e] : llvm::enumerate(*at))
      if (e < -1 || e >= count)
        return emitOpError("`at` entry ")
               << i << " is " << e << "; it names the own cache (-1) or one of the " << count
               << " published caches";
    for (Value p : getPublished())
      if (cast<GlobalCacheType>(p.getType()).getIndexRow() != cache.getIndexRow())
        return emitOpError("reads published index keys of type ")
               << cast<GlobalCacheType>(p.getType()).getIndexRow() << ", not its own "
               << cache.getIndexRow();
  }
  return success();
}

LogicalResult HsiSelectOp::verify() {
  auto pool = getPool().getType();
  // Pool positions are stored as i32 indices.
  if (pool.getBlocks() * pool.getBlockSize() > (int64_t(1) << 31) - 1)
    return emitOpError("pool of ")
           << pool.getBlocks() << " x " << pool.getBlockSize()
           << " positions does not fit 32-bit indices";
  return success();
}

LogicalResult TopKOp::verify() {
  int64_t k = getResult().getType().getK();
  if (auto pool = getPool()) {
    auto poolType = cast<CandidatePoolType>(pool.getType());
    int64_t positions = poolType.getBlocks() * poolType.getBlockSize();
    if (k > positions)
      return emitOpError("selects ")
             << k << " positions from a candidate pool of only " << positions;
  }
  return success();
}

/// The row type and the value tensor of a quantize/dequantize pair agree.
static LogicalResult verifyRowsMatch(Operation *op, Value values, Value rows) {
  Type rowType = cast<RankedTensorType>(rows.getType()).getElementType();
  int64_t rowDim = cast<CacheRowTypeInterface>(rowType).getDim();
  if (!compatible(dim(values, 1), rowDim))
    return op->emitOpError("rows of ")
           << rowDim << " channels do not match values of " << dim(values, 1)
           << " channels";
  if (!compatible(dim(values, 0), dim(rows, 0)))
    return op->emitOpError("needs one row per value row");
  return success();
}

LogicalResult QuantizeOp::verify() {
  return verifyRowsMatch(*this, getInput(), getResult());
}

LogicalResult DequantizeOp::verify() {
  return verifyRowsMatch(*this, getResult(), getInput());
}

LogicalResult CacheAllocOp::verify() {
  if (static_cast<int64_t>(getLayerAttr().getInt()) < 0)
    return emitOpError("layer must be >= 0");
  return success();
}

LogicalResult CacheAppendOp::verify() {
  Type rowType = getRows().getType().getElementType();
  Type cacheType = getCache().getType();
  if (isa<CompressorStateType>(cacheType))
    return emitOpError("cannot append rows to a compressor state");
  if (auto ring = dyn_cast<SwaRingType>(cacheType)) {
    if (rowType != ring.getRow())
      return emitOpError("rows of type ")
             << rowType << " do not match the ring's " << ring.getRow();
    return success();
  }
  auto global = cast<GlobalCacheType>(cacheType);
  if (rowType != global.getMainRow() && rowType != global.getIndexRow())
    return emitOpError("rows of type ")
           << rowType << " are neither the cache's main rows ("
           << global.getMainRow() << ") nor its index rows ("
           << global.getIndexRow() << ")";
  return success();
}

LogicalResult SparseAttentionOp::verify() {
  if (getResult().getType() != getQuery().getType())
    return emitOpError("result must have the query's type");
  int64_t channels = dim(getQuery(), 2);
  auto ring = getWindow().getType();
  if (!compatible(channels, ring.getRow().getDim()))
    return emitOpError("query has ")
           << channels << " channels per head but window rows have "
           << ring.getRow().getDim();
  if (getFresh().getType().getElementType() != ring.getRow())
    return emitOpError("fresh rows of type ")
           << getFresh().getType().getElementType()
           << " do not match the ring's " << ring.getRow();
  if (!compatible(dim(getFresh(), 0), dim(getQuery(), 0)))
    return emitOpError("needs one fresh window row per query row");
  if (bool(getCache()) != bool(getSelected()))
    return emitOpError("a global cache and its selected positions come "
                       "together");
  if (auto cache = getCache()) {
    auto global = cast<GlobalCacheType>(cache.getType());
    if (!compatible(channels, global.getMainRow().getDim()))
      return emitOpError("query has ")
             << channels << " channels per head but global rows have "
             << global.getMainRow().getDim();
  }
  if (getScale().convertToDouble() <= 0)
    return emitOpError("scale must be positive");
  return success();
}

LogicalResult MoeRouteOp::verify() {
  if (getTopK() < 1 || getTopK() > getExperts())
    return emitOpError("top_k ")
           << getTopK() << " must be in [1, experts = " << getExperts() << "]";
  for (Value v : {getExpertWeights(), getExpertIds()})
    if (!compatible(dim(v, 1), getTopK()) ||
        !compatible(dim(v, 0), dim(getInput(), 0)))
      return emitOpError("results must be [tokens, top_k]");
  return success();
}

//===----------------------------------------------------------------------===//
// Kernel regions
//===----------------------------------------------------------------------===//

void FusionOp::build(OpBuilder &builder, OperationState &state, FusionKind kind,
                     TypeRange results, ValueRange inputs) {
  state.addAttribute(getKindAttrName(state.name),
                     FusionKindAttr::get(builder.getContext(), kind));
  state.addOperands(inputs);
  state.addTypes(results);
  Region *body = state.addRegion();
  Block *block = new Block();
  body->push_back(block);
  for (Value input : inputs)
    block->addArgument(input.getType(), input.getLoc());
}

LogicalResult FusionOp::verify() {
  Block &block = getBody().front();
  if (block.getNumArguments() != getInputs().size())
    return emitOpError("body takes ")
           << block.getNumArguments() << " arguments for "
           << getInputs().size() << " inputs";
  for (auto [i, pair] : llvm::enumerate(
           llvm::zip(block.getArgumentTypes(), getInputs().getTypes())))
    if (std::get<0>(pair) != std::get<1>(pair))
      return emitOpError("body argument #")
             << i << " has type " << std::get<0>(pair) << ", input #" << i
             << " has type " << std::get<1>(pair);
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield)
    return emitOpError("body must end with csa.yield");
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yields ")
           << yield.getValues().size() << " values of types "
           << yield.getValues().getTypes() << " for results of types "
           << getResultTypes();
  if (block.getOperations().size() < 2)
    return emitOpError("body is empty (a kernel region holds at least one op)");
  switch (getKind()) {
  case FusionKind::RopeQuantizeStore: {
    auto ops = llvm::to_vector(llvm::map_range(block.without_terminator(),
                                               [](Operation &o) { return &o; }));
    auto rope = ops.size() == 3 ? dyn_cast<RopeOp>(ops[0]) : RopeOp();
    auto quantize = ops.size() == 3 ? dyn_cast<QuantizeOp>(ops[1]) : QuantizeOp();
    auto append = ops.size() == 3 ? dyn_cast<CacheAppendOp>(ops[2]) : CacheAppendOp();
    if (!rope || !quantize || !append || quantize.getInput() != rope.getResult() ||
        append.getRows() != quantize.getResult())
      return emitOpError("a rope_quantize_store body is csa.rope, csa.quantize "
                         "of its result and csa.cache_append of the quantized "
                         "rows, in that order");
    break;
  }
  case FusionKind::HcCollapseNorm: {
    auto ops = llvm::to_vector(llvm::map_range(block.without_terminator(),
                                               [](Operation &o) { return &o; }));
    auto collapse = ops.size() == 2 ? dyn_cast<HcCollapseOp>(ops[0]) : HcCollapseOp();
    auto norm = ops.size() == 2 ? dyn_cast<RmsNormOp>(ops[1]) : RmsNormOp();
    if (!collapse || !norm || norm.getInput() != collapse.getResult() ||
        yield.getValues().size() != 1 || yield.getValues()[0] != norm.getResult())
      return emitOpError("a hc_collapse_norm body is csa.hc_collapse and "
                         "csa.rms_norm of its rows, in that order, yielding "
                         "the norm");
    break;
  }
  }
  return success();
}

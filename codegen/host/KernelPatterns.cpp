//===- KernelPatterns.cpp - The host target's kernel patterns -------------===//
#include "codegen/host/KernelPatterns.h"

#include "codegen/host/AttentionKernels.h"
#include "codegen/host/SelectionKernels.h"
#include "codegen/host/CompressKernels.h"
#include "codegen/host/FusedKernels.h"
#include "codegen/host/HostKernels.h"
#include "codegen/host/LinearKernels.h"
#include "codegen/host/LinearSplitK.h"
#include "codegen/host/MhcKernels.h"
#include "codegen/host/MoeKernels.h"
#include "codegen/host/QuantizeKernels.h"
#include "models/tables/RopeTables.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <optional>

using namespace mlir;

namespace csa::codegen {

//===----------------------------------------------------------------------===//
// KernelSelector
//===----------------------------------------------------------------------===//

void KernelSelector::use(const std::string &name, const std::string &op,
                         const std::string &detail, KernelParallelism parallelism,
                         const std::function<void()> &build, const std::string &role) {
  auto [it, inserted] = index.try_emplace(name, selection.kernels.size());
  if (inserted) {
    build();
    if (auto fn = kernels.lookupSymbol<func::FuncOp>(name))
      fn->setAttr(kKernelParallelismAttr, KernelParallelismAttr::get(fn.getContext(), parallelism));
    else
      unbuilt.push_back(name + " (" + op + ")"); // the builder said why
    selection.kernels.push_back({name, op, detail, 0, {}, {}});
  }
  selection.kernels[it->second].uses++;
  if (current)
    selection.opKernels[current][role] = name;
}

void KernelSelector::alsoCalls(const std::string &role, const std::string &name) {
  if (current && !name.empty())
    selection.opKernels[current][role] = name;
}

int64_t KernelSelector::tileRows() const {
  auto tile = current ? current->getAttrOfType<RowTileAttr>(kRowTileAttrName) : RowTileAttr();
  return tile ? tile.getRows() : 1;
}

std::string KernelSelector::kernelOf(Operation *op, const std::string &role) const {
  auto it = selection.opKernels.find(op);
  if (it == selection.opKernels.end())
    return "";
  auto r = it->second.find(role);
  return r == it->second.end() ? "" : r->second;
}

const EngramHashLayout *KernelSelector::engramLayout(int64_t layer) const {
  auto it = engramLayouts.find(layer);
  return it == engramLayouts.end() ? nullptr : &it->second;
}

namespace {

LinearFormat linearFormat(WeightFormat format) {
  switch (format) {
  case WeightFormat::BF16:
    return LinearFormat::BF16;
  case WeightFormat::F32:
    return LinearFormat::F32;
  case WeightFormat::FP8Block32:
    return LinearFormat::FP8Block32;
  case WeightFormat::FP4E2M1:
    return LinearFormat::FP4E2M1;
  case WeightFormat::FP8AsBF16:
    return LinearFormat::FP8AsBF16;
  }
  return LinearFormat::BF16;
}

} // namespace

void KernelSelector::linear(const std::string &op, WeightFormat format, int64_t in, int64_t out,
                            int64_t groups, const std::string &role, int64_t experts,
                            int64_t slotsPerRow) {
  const int64_t tile = experts > 0 ? 1 : tileRows();
  // The op's GPU form (csa-select-linear-forms): a per-output kernel is its
  // own kernel, named for it; the kernel carries the form for the NVPTX back
  // end. The routed experts' grouped kernels are always split-K: of the
  // op's form they take only its block shape (outputs_per_block,
  // outputs_in_flight), which names their kernels like the others'.
  auto form = current ? current->getAttrOfType<LinearFormAttr>(kLinearFormAttrName)
                      : LinearFormAttr();
  if (form && experts > 0)
    form = form.getOutputsPerBlock() || form.getOutputsInFlight()
               ? LinearFormAttr::get(form.getContext(), LinearForm::SplitK,
                                     form.getOutputsPerBlock(), form.getOutputsInFlight())
               : LinearFormAttr();
  const bool perOutput = form && form.getValue() == LinearForm::PerOutput;
  const int64_t outputsPerBlock = form ? form.getOutputsPerBlock() : 0,
                outputsInFlight = form ? form.getOutputsInFlight() : 0;
  std::string name =
      llvm::formatv("linear_{0}_{1}x{2}{3}{4}{5}{6}{7}{8}", stringifyWeightFormat(format), in, out,
                    groups > 1 ? "_g" + std::to_string(groups) : "",
                    tile > 1 ? "_t" + std::to_string(tile) : "", perOutput ? "_per_output" : "",
                    experts > 0 ? "_e" + std::to_string(experts) +
                                      (slotsPerRow > 1 ? "_s" + std::to_string(slotsPerRow) : "")
                                : "",
                    outputsPerBlock ? "_o" + std::to_string(outputsPerBlock) : "",
                    outputsInFlight ? "_f" + std::to_string(outputsInFlight) : "")
          .str();
  LinearKernelSpec spec;
  spec.format = linearFormat(format);
  spec.inFeatures = in;
  spec.outFeatures = out;
  spec.groups = groups;
  spec.rowTile = tile;
  spec.experts = experts;
  spec.slotsPerRow = slotsPerRow;
  std::optional<LinearSplitKShape> split =
      form && !perOutput ? linearSplitKShape(spec) : std::nullopt;
  if (form && !perOutput && !split) {
    current->emitError() << "csa.linear_form split_k: the " << stringifyWeightFormat(format)
                         << " linear " << in << " -> " << out
                         << " cannot be split over K (a group's K must be a whole number of "
                            "16-byte words); give this op #csa.linear_form<per_output>";
    unbuilt.push_back(name + " (" + op + ")");
  } else if (split && outputsPerBlock > 0) {
    // The block's outputs in one group, its partials in shared memory.
    const int64_t g = std::max<int64_t>(groups, 1);
    split->outputsPerBlock = outputsPerBlock;
    std::string problem;
    if (g > 1 && (out / g) % outputsPerBlock != 0)
      problem = llvm::formatv("its {0} groups of {1} outputs do not split into blocks of {2}", g,
                              out / g, outputsPerBlock);
    else if (split->sharedBytes() > kMaxStaticSharedBytes)
      problem = llvm::formatv("a block's partials would take {0} bytes of shared memory (at "
                              "most {1}: {2} threads x {3} outputs)",
                              split->sharedBytes(), kMaxStaticSharedBytes, split->threads,
                              outputsPerBlock);
    if (!problem.empty()) {
      current->emitError() << "csa.linear_form split_k: outputs_per_block = " << outputsPerBlock
                           << " does not fit the " << stringifyWeightFormat(format) << " linear "
                           << in << " -> " << out << ": " << problem;
      unbuilt.push_back(name + " (" + op + ")");
    }
  }
  use(name, op, llvm::formatv("{0} -> {1}", in, out).str(), KernelParallelism::Rows, [&] {
    if (func::FuncOp fn = buildLinearKernel(kernels, name, spec); fn && form)
      fn->setAttr(kLinearFormAttrName, form);
  }, role);
}

void KernelSelector::rmsNorm(int64_t dim, const std::string &role) {
  std::string name = llvm::formatv("rms_norm_{0}", dim).str();
  use(name, "csa.rms_norm", "", KernelParallelism::Rows,
      [&] { buildRmsNormKernel(kernels, name, dim, eps); }, role);
}

//===----------------------------------------------------------------------===//
// KernelPatternSet
//===----------------------------------------------------------------------===//

void KernelPatternSet::insert(std::unique_ptr<KernelPattern> pattern) {
  std::string name = pattern->getRootName().str();
  byName[name] = std::move(pattern);
}

const KernelPattern *KernelPatternSet::lookup(Operation *op) const {
  auto it = byName.find(op->getName().getStringRef());
  return it == byName.end() ? nullptr : it->second.get();
}

void configureHostKernelTarget(ConversionTarget &target) {
  target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
  target.addIllegalDialect<CsaDialect>();
  target.addLegalOp<CacheAllocOp, YieldOp>();
}

//===----------------------------------------------------------------------===//
// The patterns
//===----------------------------------------------------------------------===//

namespace {

numerics::RowFormat rowFormat(Type row) {
  if (isa<Fp8RowType>(row))
    return numerics::RowFormat::SwaKvFp8;
  auto fp4 = cast<Fp4RowType>(row);
  return fp4.getScale() == ScaleFormat::E4M3 ? numerics::RowFormat::MainKvFp4
                                             : numerics::RowFormat::IndexKeyFp4;
}

int64_t rowDim(Type row) {
  if (auto fp8 = dyn_cast<Fp8RowType>(row))
    return fp8.getDim();
  return cast<Fp4RowType>(row).getDim();
}

/// The FP8 index-key row: E4M3 values and one fp32 scale.
bool isIndexKeyFp8(Type row) {
  auto fp8 = dyn_cast<Fp8RowType>(row);
  return fp8 && fp8.getScale() == ScaleFormat::F32;
}

std::string rowName(Type row) {
  if (isIndexKeyFp8(row))
    return "index_key_fp8_" + std::to_string(rowDim(row));
  if (auto v4 = dyn_cast<Fp8NopeRowType>(row))
    return "main_kv_fp8_" + std::to_string(v4.getDim()) + "_r" + std::to_string(v4.getRope());
  switch (rowFormat(row)) {
  case numerics::RowFormat::MainKvFp4:
    return "main_kv_fp4_" + std::to_string(rowDim(row));
  case numerics::RowFormat::IndexKeyFp4:
    return "index_key_fp4_" + std::to_string(rowDim(row));
  case numerics::RowFormat::SwaKvFp8:
    return "swa_kv_fp8_" + std::to_string(rowDim(row));
  }
  return "row";
}

int64_t lastDim(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  return type.getDimSize(type.getRank() - 1);
}

/// A short, stable name for a RoPE table's contents.
std::string ropeName(RopeTableAttr table) {
  return llvm::formatv("rope_{0}_t{1:F0}_f{2:F0}_o{3}", table.getDim(),
                       table.getTheta().convertToDouble(), table.getFactor().convertToDouble(),
                       table.getOriginalSeqLen())
      .str();
}

/// The quantizer and dequantizer kernels of a cache row type.
void buildQuantizer(ModuleOp kernels, const std::string &name, Type row) {
  if (auto v4 = dyn_cast<Fp8NopeRowType>(row))
    buildQuantizeMainKvFp8Kernel(kernels, name, v4.getDim(), v4.getRope());
  else if (isIndexKeyFp8(row))
    buildQuantizeIndexKeyFp8Kernel(kernels, name, rowDim(row));
  else
    buildQuantizeRowsKernel(kernels, name, rowFormat(row), rowDim(row));
}
void buildDequantizer(ModuleOp kernels, const std::string &name, Type row) {
  if (auto v4 = dyn_cast<Fp8NopeRowType>(row))
    buildDequantizeMainKvFp8Kernel(kernels, name, v4.getDim(), v4.getRope());
  else if (isIndexKeyFp8(row))
    buildDequantizeIndexKeyFp8Kernel(kernels, name, rowDim(row));
  else
    buildDequantizeRowsKernel(kernels, name, rowFormat(row), rowDim(row));
}

/// The dequantizer of a cache row format (shared by the ops that read rows).
void useDequantizer(KernelSelector &s, Type row, const std::string &op, const std::string &detail,
                    const std::string &role) {
  std::string name = "dequantize_" + rowName(row);
  s.use(name, op, detail, KernelParallelism::Nest,
        [&] { buildDequantizer(s.kernels, name, row); }, role);
}

struct EmbedPattern : OpKernelPattern<EmbedOp> {
  LogicalResult select(EmbedOp op, KernelSelector &s) const override {
    int64_t dim = lastDim(op.getResult());
    std::string name = llvm::formatv("embed_{0}x{1}", op.getVocab(), dim).str();
    s.use(name, "csa.embed", "", KernelParallelism::Nest,
          [&] { buildEmbedKernel(s.kernels, name, op.getVocab(), dim); });
    return success();
  }
};

struct HcExpandPattern : OpKernelPattern<HcExpandOp> {
  LogicalResult select(HcExpandOp op, KernelSelector &s) const override {
    auto type = cast<RankedTensorType>(op.getResult().getType());
    int64_t hc = type.getDimSize(1), dim = type.getDimSize(2);
    std::string name = llvm::formatv("hc_expand_{0}x{1}", hc, dim).str();
    s.use(name, "csa.hc_expand", "", KernelParallelism::Nest,
          [&] { buildHcExpandKernel(s.kernels, name, hc, dim); });
    return success();
  }
};

struct HcMixPattern : OpKernelPattern<HcMixOp> {
  LogicalResult select(HcMixOp op, KernelSelector &s) const override {
    auto type = cast<RankedTensorType>(op.getStreams().getType());
    int64_t hc = type.getDimSize(1), dim = type.getDimSize(2);
    std::string sums = llvm::formatv("hc_mix_sums_{0}x{1}", hc, dim).str();
    s.use(sums, "csa.hc_mix", "", KernelParallelism::Nest,
          [&] { buildHcMixSumsKernel(s.kernels, sums, hc, dim); }, "sums");
    std::string name = llvm::formatv("hc_mix_{0}x{1}_i{2}", hc, dim, op.getIters()).str();
    s.use(name, "csa.hc_mix", "", KernelParallelism::Rows, [&] {
      buildHcMixKernel(s.kernels, name, hc, dim, op.getIters(),
                       float(op.getEps().convertToDouble()), float(s.graphEps()));
    });
    return success();
  }
};

struct HcCollapsePattern : OpKernelPattern<HcCollapseOp> {
  LogicalResult select(HcCollapseOp op, KernelSelector &s) const override {
    auto type = cast<RankedTensorType>(op.getStreams().getType());
    std::string name =
        llvm::formatv("hc_collapse_{0}x{1}", type.getDimSize(1), type.getDimSize(2)).str();
    s.use(name, "csa.hc_collapse", "", KernelParallelism::Nest, [&] {
      buildHcCollapseKernel(s.kernels, name, type.getDimSize(1), type.getDimSize(2));
    });
    return success();
  }
};

struct HcUpdatePattern : OpKernelPattern<HcUpdateOp> {
  LogicalResult select(HcUpdateOp op, KernelSelector &s) const override {
    auto type = cast<RankedTensorType>(op.getStreams().getType());
    std::string name =
        llvm::formatv("hc_update_{0}x{1}", type.getDimSize(1), type.getDimSize(2)).str();
    s.use(name, "csa.hc_update", "", KernelParallelism::Nest, [&] {
      buildHcUpdateKernel(s.kernels, name, type.getDimSize(1), type.getDimSize(2));
    });
    return success();
  }
};

struct RmsNormPattern : OpKernelPattern<RmsNormOp> {
  LogicalResult select(RmsNormOp op, KernelSelector &s) const override {
    // The kernel takes the graph's epsilon; an op with another is refused
    // rather than given a kernel of the wrong one.
    if (op.getEps().convertToDouble() != s.graphEps())
      return op.emitOpError() << "has eps " << op.getEps().convertToDouble()
                              << " but the graph's norms use " << s.graphEps()
                              << ": the host kernels take one epsilon";
    s.rmsNorm(lastDim(op.getInput()));
    return success();
  }
};

struct LinearPattern : OpKernelPattern<LinearOp> {
  LogicalResult select(LinearOp op, KernelSelector &s) const override {
    s.linear("csa.linear", op.getFormat(), lastDim(op.getInput()), lastDim(op.getResult()),
             op.getGroups());
    return success();
  }
};

struct RopePattern : OpKernelPattern<RopeOp> {
  LogicalResult select(RopeOp op, KernelSelector &s) const override {
    RopeTableAttr table = op.getTable();
    std::string name = ropeName(table) + (op.getInverse() ? "_inverse" : "");
    s.use(name, "csa.rope", "", KernelParallelism::Nest, [&] {
      // A factor of 1 is a plain table; above it, YaRN.
      std::optional<tables::YarnScaling> yarn;
      if (table.getFactor().convertToDouble() > 1.0)
        yarn = tables::YarnScaling{table.getFactor().convertToDouble(), table.getOriginalSeqLen(),
                                   table.getBetaFast().convertToDouble(),
                                   table.getBetaSlow().convertToDouble()};
      buildRopeKernel(s.kernels, name,
                      tables::ropeFrequencies(table.getDim(), table.getTheta().convertToDouble(),
                                              yarn),
                      op.getInverse());
    });
    return success();
  }
};

struct QuantizePattern : OpKernelPattern<QuantizeOp> {
  LogicalResult select(QuantizeOp op, KernelSelector &s) const override {
    Type row = op.getResult().getType().getElementType();
    std::string name = "quantize_" + rowName(row);
    s.use(name, "csa.quantize", "", KernelParallelism::Nest,
          [&] { buildQuantizer(s.kernels, name, row); });
    return success();
  }
};

struct DequantizePattern : OpKernelPattern<DequantizeOp> {
  LogicalResult select(DequantizeOp op, KernelSelector &s) const override {
    useDequantizer(s, op.getInput().getType().getElementType(), "csa.dequantize", "", "main");
    return success();
  }
};

struct CacheAppendPattern : OpKernelPattern<CacheAppendOp> {
  LogicalResult select(CacheAppendOp op, KernelSelector &s) const override {
    Type row = op.getRows().getType().getElementType();
    int64_t window = 0;
    if (auto ring = dyn_cast<SwaRingType>(op.getCache().getType()))
      window = ring.getWindow();
    std::string name =
        "cache_append_" + rowName(row) + (window ? "_ring" + std::to_string(window) : "");
    s.use(name, "csa.cache_append", "", KernelParallelism::Serial,
          [&] {
            buildCacheAppendKernel(s.kernels, name,
                                   cast<CacheRowTypeInterface>(row).getBytes(), window);
          });
    return success();
  }
};

struct CompressPattern : OpKernelPattern<CompressOp> {
  LogicalResult select(CompressOp op, KernelSelector &s) const override {
    int64_t in = lastDim(op.getInput()), out = lastDim(op.getResult());
    int64_t ratio = op.getRatio();
    if (ratio > 1) {
      // fp32 projections of KV and gate, the pooling, then the norm.
      s.linear("csa.compress", WeightFormat::F32, in, out, 1, "linear");
      std::string name = llvm::formatv("compress_pool_r{0}_{1}", ratio, out).str();
      s.use(name, "csa.compress", "", KernelParallelism::Channels,
            [&] { buildCompressPoolKernel(s.kernels, name, ratio, out); }, "pool");
    } else {
      s.linear("csa.compress", WeightFormat::BF16, in, out, 1, "linear");
    }
    s.rmsNorm(out, "norm");
    return success();
  }
};

struct IndexScorePattern : OpKernelPattern<IndexScoreOp> {
  LogicalResult select(IndexScoreOp op, KernelSelector &s) const override {
    auto type = cast<RankedTensorType>(op.getQuery().getType());
    int64_t heads = type.getDimSize(1), dim = type.getDimSize(2);
    // The queries go through the keys' row format (FP4 as released) before
    // scoring; keys and queries are read back by one dequantizer.
    Type row = cast<GlobalCacheType>(op.getCache().getType()).getIndexRow();
    std::string qdq = "quantize_" + rowName(row);
    s.use(qdq, "csa.index_score", "query rows", KernelParallelism::Nest,
          [&] { buildQuantizer(s.kernels, qdq, row); }, "quantize");
    std::string dq = "dequantize_" + rowName(row);
    s.use(dq, "csa.index_score", "keys and query rows", KernelParallelism::Nest,
          [&] { buildDequantizer(s.kernels, dq, row); }, "dequantize");
    // The head weights times (heads * dim)^-1/2, rounded to bf16.
    const float weightScale = float(std::pow(double(dim), -0.5) * std::pow(double(heads), -0.5));
    std::string scaleName = llvm::formatv("index_weights_scale_{0}x{1}", heads, dim).str();
    s.use(scaleName, "csa.index_score", "head weights", KernelParallelism::Nest,
          [&] { buildScaleRowsKernel(s.kernels, scaleName, heads, weightScale); }, "scale");
    std::string name = llvm::formatv("index_score_{0}x{1}", heads, dim).str();
    s.use(name, "csa.index_score", "", KernelParallelism::Nest,
          [&] { buildIndexScoreKernel(s.kernels, name, heads, dim); });
    return success();
  }
};

/// The top-k's rank kernel (of `k`, `masked`) as the current op's "rank":
/// csa.topk's, and HSI's over its block scores.
void useTopKRank(KernelSelector &s, const std::string &op, int64_t k, bool masked) {
  std::string rank = llvm::formatv("topk_rank_{0}{1}", k, masked ? "_masked" : "").str();
  s.use(rank, op, "", KernelParallelism::Nest,
        [&] { buildTopKRankKernel(s.kernels, rank, k, masked); }, "rank");
}

struct HsiSelectPattern : OpKernelPattern<HsiSelectOp> {
  LogicalResult select(HsiSelectOp op, KernelSelector &s) const override {
    auto pool = op.getPool().getType();
    std::string blocks = llvm::formatv("hsi_block_scores_{0}", pool.getBlockSize()).str();
    s.use(blocks, "csa.hsi_select", "", KernelParallelism::Nest,
          [&] { buildHsiBlockScoresKernel(s.kernels, blocks, pool.getBlockSize()); }, "blocks");
    // The best blocks: a top-k over the block scores (the top-k's rank
    // kernel, whose GPU block form is a radix select; the one-kernel
    // selection counted each block's elders serially, 1 ms a 32K-entry row
    // on an H100), then the kept blocks' positions.
    useTopKRank(s, "csa.hsi_select", pool.getBlocks(), /*masked=*/false);
    std::string expand = llvm::formatv("hsi_expand_{0}", pool.getBlockSize()).str();
    s.use(expand, "csa.hsi_select", "", KernelParallelism::Nest,
          [&] { buildHsiExpandKernel(s.kernels, expand, pool.getBlockSize()); }, "expand");
    return success();
  }
};

struct TopKPattern : OpKernelPattern<TopKOp> {
  LogicalResult select(TopKOp op, KernelSelector &s) const override {
    int64_t k = op.getResult().getType().getK();
    bool masked = bool(op.getPool());
    useTopKRank(s, "csa.topk", k, masked);
    std::string name = llvm::formatv("topk_compact_{0}", k).str();
    s.use(name, "csa.topk", "", KernelParallelism::Rows,
          [&] { buildTopKCompactKernel(s.kernels, name, k); });
    return success();
  }
};

struct SparseAttentionPattern : OpKernelPattern<SparseAttentionOp> {
  LogicalResult select(SparseAttentionOp op, KernelSelector &s) const override {
    auto type = cast<RankedTensorType>(op.getQuery().getType());
    int64_t heads = type.getDimSize(1), dim = type.getDimSize(2);
    // The gathered rows: the ring's and the global cache's, dequantized.
    useDequantizer(s, op.getWindow().getType().getRow(), "csa.sparse_attention", "window rows",
                   "dequantize_window");
    s.use("attention_window_index", "csa.sparse_attention", "window index lists",
          KernelParallelism::Nest,
          [&] { buildWindowIndexKernel(s.kernels, "attention_window_index"); }, "window_index");
    s.use("attention_rows_window_index", "csa.sparse_attention",
          "window index lists of a prefill or a chunk", KernelParallelism::Nest,
          [&] { buildRowsWindowIndexKernel(s.kernels, "attention_rows_window_index"); },
          "window_index_rows");
    if (auto cache = op.getCache()) {
      useDequantizer(s, cast<GlobalCacheType>(cache.getType()).getMainRow(),
                     "csa.sparse_attention", "selected rows", "dequantize_selected");
      s.use("gather_cache_entries", "csa.sparse_attention", "selected entries",
            KernelParallelism::Nest,
            [&] { buildGatherCacheEntriesKernel(s.kernels, "gather_cache_entries"); },
            "gather_selected");
      s.use("attention_selected_index", "csa.sparse_attention", "index lists",
            KernelParallelism::Nest,
            [&] { buildSelectedIndexKernel(s.kernels, "attention_selected_index"); },
            "selected_index");
      s.use("attention_entry_index", "csa.sparse_attention",
            "index lists of a prefill's selected entries", KernelParallelism::Nest,
            [&] { buildEntryIndexKernel(s.kernels, "attention_entry_index"); }, "entry_index");
    }
    // The op's GPU form (csa-select-attention-forms): a form with a kernel
    // of its own is named for it; the kernel carries the form for the NVPTX
    // back end.
    auto form = op->getAttrOfType<AttentionFormAttr>(kAttentionFormAttrName);
    const char *suffix = !form                                   ? ""
                         : form.getValue() == AttentionForm::Head  ? "_head"
                         : form.getValue() == AttentionForm::Split ? "_split"
                         : form.getValue() == AttentionForm::Mma   ? "_mma"
                                                                   : "";
    std::string name =
        llvm::formatv("sparse_attention_{0}x{1}{2}{3}", heads, dim, suffix,
                      form && form.getSplits() ? "_x" + std::to_string(form.getSplits()) : "")
            .str();
    s.use(name, "csa.sparse_attention", "", KernelParallelism::Nest, [&] {
      if (func::FuncOp fn = buildSparseAttentionKernel(s.kernels, name, heads, dim); fn && form)
        fn->setAttr(kAttentionFormAttrName, form);
    });
    return success();
  }
};

struct MoePattern : OpKernelPattern<MoeOp> {
  LogicalResult select(MoeOp op, KernelSelector &s) const override {
    int64_t dim = lastDim(op.getInput()), inter = op.getInter();
    std::string route =
        llvm::formatv("moe_route_{0}_top{1}", op.getExperts(), op.getTopK()).str();
    s.linear("csa.moe", WeightFormat::F32, dim, op.getExperts(), 1, "gate");
    s.use(route, "csa.moe", "", KernelParallelism::Rows, [&] {
      buildMoeRouteKernel(s.kernels, route, op.getExperts(), op.getTopK(),
                          float(op.getRouteScale().convertToDouble()));
    }, "route");
    std::string gather = llvm::formatv("moe_gather_{0}", dim).str();
    s.use(gather, "csa.moe", "", KernelParallelism::Nest,
          [&] { buildMoeGatherKernel(s.kernels, gather, dim); }, "gather");
    s.linear("csa.moe", op.getExpertFormat(), dim, inter, 1, "expert_in");
    s.linear("csa.moe", op.getExpertFormat(), inter, dim, 1, "expert_out");
    s.linear("csa.moe", op.getSharedFormat(), dim, inter, 1, "shared_in");
    s.linear("csa.moe", op.getSharedFormat(), inter, dim, 1, "shared_out");
    float limit = float(op.getSwigluLimit().convertToDouble());
    // The limit in the name without a '.': PTX identifiers have none.
    auto swigluName = [&](const char *kind) {
      std::string name = llvm::formatv("{0}_{1}_l{2}", kind, inter, limit).str();
      std::replace(name.begin(), name.end(), '.', 'p');
      return name;
    };
    std::string swiglu = swigluName("swiglu");
    s.use(swiglu, "csa.moe", "", KernelParallelism::Nest,
          [&] { buildSwigluKernel(s.kernels, swiglu, inter, limit); }, "swiglu");
    // Gate and up as one linear of 2 x inter outputs, w1's rows then w3's
    // (where the executor can place them so: on the GPU), and the SwiGLU
    // over the halves of its rows: one weight-streaming launch where two
    // were, each too short to reach the HBM bandwidth in a decode step.
    s.linear("csa.moe", op.getSharedFormat(), dim, 2 * inter, 1, "shared_gate_up");
    std::string paired = swigluName("swiglu_paired");
    s.use(paired, "csa.moe", "", KernelParallelism::Nest,
          [&] { buildSwigluKernel(s.kernels, paired, inter, limit, /*paired=*/true); },
          "swiglu_paired");
    std::string acc = llvm::formatv("moe_accumulate_{0}", dim).str();
    s.use(acc, "csa.moe", "", KernelParallelism::Nest,
          [&] { buildMoeAccumulateKernel(s.kernels, acc, dim); }, "accumulate");
    std::string fin = llvm::formatv("moe_finish_{0}", dim).str();
    s.use(fin, "csa.moe", "", KernelParallelism::Nest,
          [&] { buildMoeFinishKernel(s.kernels, fin, dim); }, "finish");
    // The routed experts in one launch per projection, from the routing on
    // the device (an expert id a slot), then one combine.
    const WeightFormat ef = op.getExpertFormat();
    if (ef == WeightFormat::FP8Block32 || ef == WeightFormat::FP4E2M1) {
      const int64_t experts = op.getExperts(), topK = op.getTopK();
      s.linear("csa.moe", ef, dim, inter, 1, "experts_in", experts, topK);
      s.linear("csa.moe", ef, inter, dim, 1, "experts_out", experts, 1);
      // The same fusion of gate and up, grouped: an expert's w1 rows then
      // its w3 rows are the expert's block of one array.
      s.linear("csa.moe", ef, dim, 2 * inter, 1, "experts_gate_up", experts, topK);
      std::string combine =
          llvm::formatv("moe_combine_{0}_top{1}_e{2}", dim, topK, experts).str();
      s.use(combine, "csa.moe", "", KernelParallelism::Nest,
            [&] { buildMoeCombineKernel(s.kernels, combine, dim, topK, experts); }, "combine");
    }
    return success();
  }
};

struct EngramPattern : OpKernelPattern<EngramOp> {
  LogicalResult select(EngramOp op, KernelSelector &s) const override {
    auto type = cast<RankedTensorType>(op.getStreams().getType());
    int64_t hc = type.getDimSize(1), dim = type.getDimSize(2);
    // The hash: primes are handed out across all Engram layers in order, so
    // the layout is computed for the whole graph.
    const EngramHashLayout *layout = s.engramLayout(op.getLayer());
    if (!layout)
      return op.emitOpError()
             << "has no hash layout: the Engram layers of the graph disagree on "
                "max_ngram, heads, hash_vocab, compressed_vocab or pad_id, and primes are "
                "handed out across all of them";
    s.linear("csa.engram", WeightFormat::FP8Block32, op.getGatherWidth(), (hc + 1) * dim, 1,
             "linear");
    std::string gate = llvm::formatv("engram_gate_{0}x{1}", hc, dim).str();
    s.use(gate, "csa.engram", "", KernelParallelism::Nest,
          [&] { buildEngramGateKernel(s.kernels, gate, hc, dim, float(s.graphEps())); }, "gate");
    std::string hash = llvm::formatv("engram_hash_l{0}", op.getLayer()).str();
    s.use(hash, "csa.engram", "", KernelParallelism::Rows,
          [&] { buildEngramHashKernel(s.kernels, hash, *layout); }, "hash");
    const int64_t cols = (op.getMaxNgram() - 1) * op.getHeads();
    std::string gather = llvm::formatv("engram_gather_{0}x{1}", cols, op.getHeadDim()).str();
    s.use(gather, "csa.engram", "table rows", KernelParallelism::Nest,
          [&] { buildEngramGatherKernel(s.kernels, gather, cols, op.getHeadDim()); }, "gather");
    return success();
  }
};

/// A fusion region's kernel from the kernels of its body's ops, which the
/// walk selected first (post-order).
struct FusionPattern : OpKernelPattern<FusionOp> {
  LogicalResult select(FusionOp op, KernelSelector &s) const override {
    Block &body = op.getBody().front();
    auto ops = llvm::to_vector(
        llvm::map_range(body.without_terminator(), [](Operation &o) { return &o; }));
    if (op.getKind() == FusionKind::HcCollapseNorm && ops.size() == 2 &&
        isa<HcCollapseOp>(ops[0]) && isa<RmsNormOp>(ops[1])) {
      auto type = cast<RankedTensorType>(cast<HcCollapseOp>(ops[0]).getStreams().getType());
      std::string collapseK = s.kernelOf(ops[0]), normK = s.kernelOf(ops[1]);
      std::string name = "fused_" + normK + "__" + collapseK;
      s.use(name, "csa.fusion", "hc_collapse_norm", KernelParallelism::Serial, [&] {
        buildHcCollapseNormKernel(s.kernels, name, collapseK, normK, type.getDimSize(1),
                                  type.getDimSize(2), s.graphEps());
      });
      // Its parts, for a runtime that runs them separately.
      s.alsoCalls("collapse", collapseK);
      s.alsoCalls("norm", normK);
      return success();
    }
    if (op.getKind() != FusionKind::RopeQuantizeStore || ops.size() != 3 ||
        !isa<RopeOp>(ops[0]) || !isa<QuantizeOp>(ops[1]) || !isa<CacheAppendOp>(ops[2]))
      return op.emitOpError() << "of kind '" << stringifyFusionKind(op.getKind())
                              << "' has no host kernel (rope_quantize_store regions of "
                                 "csa.rope, csa.quantize and csa.cache_append have one, "
                                 "hc_collapse_norm regions of csa.hc_collapse and "
                                 "csa.rms_norm too)";
    auto rope = cast<RopeOp>(ops[0]);
    std::string ropeK = s.kernelOf(ops[0]), quantK = s.kernelOf(ops[1]),
                appendK = s.kernelOf(ops[2]);
    std::string name = "fused_" + appendK + "__" + ropeK + "_s" + std::to_string(rope.getStride());
    s.use(name, "csa.fusion", "rope_quantize_store", KernelParallelism::Serial, [&] {
      buildRopeQuantizeStoreKernel(s.kernels, name, ropeK, quantK, appendK, rope.getStride(),
                                   rope.getInverse());
    });
    // Its parts, for a runtime that runs them separately (the GPU: RoPE and
    // the quantizer a thread per element, only the store ordered).
    s.alsoCalls("rope", ropeK);
    s.alsoCalls("quantize", quantK);
    s.alsoCalls("append", appendK);
    return success();
  }
};

struct LmHeadPattern : OpKernelPattern<LmHeadOp> {
  LogicalResult select(LmHeadOp op, KernelSelector &s) const override {
    s.linear("csa.lm_head", WeightFormat::F32, lastDim(op.getInput()), op.getVocab());
    // A greedy decode step's tokens from the logits where they are (the
    // runtime downloads these ids, not the logits, when that is all it
    // needs).
    s.use("greedy_token", "csa.lm_head", "", KernelParallelism::Rows,
          [&] { buildGreedyTokenKernel(s.kernels, "greedy_token"); }, "greedy");
    return success();
  }
};

} // namespace

void populateHostKernelPatterns(KernelPatternSet &patterns) {
  patterns.add<EmbedPattern, HcExpandPattern, HcMixPattern, HcCollapsePattern, HcUpdatePattern,
               RmsNormPattern, LinearPattern, RopePattern, QuantizePattern, DequantizePattern,
               CacheAppendPattern, CompressPattern, IndexScorePattern, HsiSelectPattern,
               TopKPattern, SparseAttentionPattern, MoePattern, EngramPattern, FusionPattern,
               LmHeadPattern>();
}

} // namespace csa::codegen

//===- KernelSelection.cpp - The host kernels an expanded graph needs -----===//
//
// The driver of the kernel patterns (KernelPatterns.h): walks the graph in
// post-order (a fusion region's ops before the region), applies each op's
// pattern, and refuses an op the host target must lower and no pattern takes.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/KernelSelection.h"

#include "codegen/host/HostKernels.h"
#include "codegen/host/KernelPatterns.h"
#include "dialects/csa/CsaDialect.h"
#include "models/tables/EngramTables.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

using namespace mlir;

namespace csa::codegen {

char DiagnosedSelectionError::ID = 0;

std::map<int64_t, EngramHashLayout> engramHashLayoutsOf(ModuleOp graph) {
  std::map<int64_t, EngramOp> layers;
  graph.walk([&](EngramOp op) { layers.emplace(op.getLayer(), op); });
  if (layers.empty())
    return {};
  // Primes are handed out across all Engram layers, so every layer must
  // agree on the hash's shape; otherwise no layer gets a hash kernel.
  EngramOp first = layers.begin()->second;
  tables::EngramHashShape shape;
  shape.maxNgramSize = first.getMaxNgram();
  shape.nHeads = first.getHeads();
  shape.vocabSize = first.getHashVocab();
  shape.compressedVocabSize = first.getCompressedVocab();
  for (auto &[layer, op] : layers) {
    if (op.getMaxNgram() != first.getMaxNgram() ||
        op.getHeads() != first.getHeads() ||
        op.getHashVocab() != first.getHashVocab() ||
        op.getCompressedVocab() != first.getCompressedVocab() ||
        op.getPadId() != first.getPadId())
      return {};
    shape.layerIds.push_back(layer);
  }
  auto layerTables = tables::engramTables(shape);
  if (!layerTables.ok())
    return {};
  std::map<int64_t, EngramHashLayout> engramLayouts;
  for (tables::EngramLayerTables &t : *layerTables)
    engramLayouts[t.layerId] = {shape.maxNgramSize, shape.nHeads,
                                std::move(t.multipliers), std::move(t.primes),
                                std::move(t.offsets), first.getPadId()};
  return engramLayouts;
}

llvm::Expected<KernelSelection> selectHostKernels(ModuleOp graph,
                                                  ModuleOp kernels) {
  bool graphLevel = false;
  graph.walk([&](AttentionOp) { graphLevel = true; });
  if (graphLevel)
    return llvm::createStringError(
        "host kernels are selected from the expanded stage; this IR still "
        "holds graph-level csa.attention ops (run csa-expand-modes)");
  loadHostKernelDialects(*kernels.getContext());
  double eps = 1e-20;
  graph.walk([&](RmsNormOp op) { eps = op.getEps().convertToDouble(); });

  KernelPatternSet patterns;
  populateHostKernelPatterns(patterns);
  ConversionTarget target(*graph.getContext());
  configureHostKernelTarget(target);
  KernelSelector selector(kernels, eps, engramHashLayoutsOf(graph));

  int64_t refused = 0;
  graph.walk([&](Operation *op) {
    const KernelPattern *pattern = patterns.lookup(op);
    if (!pattern) {
      if (target.isIllegal(op)) {
        op->emitOpError() << "has no host kernel pattern: the host target lowers every csa op "
                             "but csa.cache_alloc and csa.yield";
        ++refused;
      }
      return;
    }
    selector.setCurrent(op);
    if (failed(pattern->select(op, selector)))
      ++refused;
  });
  selector.setCurrent(nullptr);
  if (refused)
    return llvm::make_error<DiagnosedSelectionError>(
        llvm::formatv("{0} op(s) could not be lowered to host kernels (the errors above name them)",
                      refused)
            .str());
  // A builder that refused its op (and said why on the module) fails the
  // selection: no artifact is written around a missing kernel.
  if (!selector.unbuiltKernels().empty())
    return llvm::make_error<DiagnosedSelectionError>(
        llvm::formatv("{0} kernel(s) could not be built: {1}", selector.unbuiltKernels().size(),
                      llvm::join(selector.unbuiltKernels(), ", "))
            .str());
  KernelSelection selection = selector.finish();
  for (SelectedKernel &k : selection.kernels) {
    auto fn = kernels.lookupSymbol<func::FuncOp>(k.name);
    if (!fn)
      continue;
    auto print = [](Type t) {
      std::string text;
      llvm::raw_string_ostream os(text);
      t.print(os);
      return text;
    };
    for (Type t : fn.getArgumentTypes())
      k.arguments.push_back(print(t));
    for (Type t : fn.getResultTypes())
      k.results.push_back(print(t));
  }
  return selection;
}

void printKernelSelectionJson(const KernelSelection &selection,
                              llvm::raw_ostream &os) {
  llvm::json::Array kernels;
  for (const SelectedKernel &k : selection.kernels) {
    llvm::json::Array arguments, results;
    for (const std::string &a : k.arguments)
      arguments.push_back(a);
    for (const std::string &r : k.results)
      results.push_back(r);
    kernels.push_back(llvm::json::Object{{"name", k.name},
                                         {"symbol", "_mlir_ciface_" + k.name},
                                         {"op", k.op},
                                         {"detail", k.detail},
                                         {"uses", k.uses},
                                         {"arguments", std::move(arguments)},
                                         {"results", std::move(results)}});
  }
  llvm::json::Object root{{"kernels", std::move(kernels)}};
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

} // namespace csa::codegen

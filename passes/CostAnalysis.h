//===- CostAnalysis.h - What a csa model graph costs -------------*- C++ -*-===//
//
// Derives a model's cache bytes, per-token reads, FLOPs and parameters from
// its graph-stage IR, so the figures follow the IR a user compiles (including
// hand-edited IR), not a second description of the model.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_PASSES_COSTANALYSIS_H
#define CSA_PASSES_COSTANALYSIS_H

#include "mlir/IR/Operation.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>
#include <vector>

namespace csa {

/// One Full layer's contribution to the global KV cache.
struct KvSourceCost {
  int64_t layer = 0;
  int64_t ratio = 1;
  int64_t mainRowBytes = 0;
  int64_t indexRowBytes = 0;
  int64_t entryBytes = 0;
  double entriesPerToken = 0;
  double bytesPerToken = 0;
};

/// Per decode token at one context length.
struct DecodeCost {
  int64_t context = 0;
  int64_t indexerRows = 0;   ///< index-key rows scored, all index sources
  int64_t indexerBytes = 0;
  int64_t attentionRows = 0; ///< rows gathered by sparse attention, all layers
  int64_t attentionBytes = 0;
  double weightedFlops = 0;  ///< BF16 = 1, FP8 = 0.5, FP4 = 0.25
  double globalKvBytes = 0;  ///< global KV held for one sequence
};

/// A prompt's prefill (function @prefill): each op's per-token FLOPs summed
/// over the rows it runs on, at each row's own context.
struct PrefillCost {
  int64_t tokens = 0;
  double weightedFlops = 0;       ///< every layer on every prompt token
  double weightedFlopsReplay = 0; ///< CED bounded replay (ModelCost::replay*)
};

struct ModelCost {
  std::string function;
  std::map<std::string, int64_t> modeCounts;
  std::string schedule; ///< one letter per layer (see docs/schedules.md)
  std::vector<KvSourceCost> kvSources;
  double globalKvBytesPerToken = 0;
  double globalEntriesPerToken = 0;
  int64_t swaLayers = 0;
  int64_t swaBytesPerSequence = 0;
  int64_t compressorLayers = 0;
  int64_t compressorBytesPerSequence = 0;
  int64_t parameters = 0;
  int64_t activeParameters = 0;
  std::map<std::string, int64_t> parametersByOp;
  std::vector<DecodeCost> decode;
  /// Bounded replay as csa-bounded-replay's defaults place it: layers from
  /// replayStartLayer on run on the prompt's last replayTail tokens (-1: no
  /// layer can, replayNote says why).
  int64_t replayStartLayer = -1, replayTail = 0;
  std::string replayNote;
  bool replayCompiled = true; ///< the build runs bounded replay (its option)
  std::vector<PrefillCost> prefill;
};

/// The contexts reported when the user names none: 4K, 32K, 128K, 1M.
std::vector<int64_t> defaultReportContexts();

/// The prompt lengths whose prefill a report prints: its contexts up to 128K
/// (each costs a sum over every row).
std::vector<int64_t> prefillReportLengths(llvm::ArrayRef<int64_t> contexts);

/// Analyses the function `functionName` of `module` (empty: `decode`, else
/// the first function holding csa ops). Fails with a message if there is none.
/// With a @prefill function, also the prefill of each of `prefillLengths`
/// tokens (at most 2^20: the sum runs over every row).
/// How the build places bounded replay (csa-compile's flags): off, or its
/// start layer and tail (-1: csa-bounded-replay's defaults).
struct ReplayChoice {
  bool enabled = true;
  int64_t startLayer = -1, tail = -1;
};

llvm::Expected<ModelCost> analyzeCost(mlir::Operation *module,
                                      llvm::ArrayRef<int64_t> contexts,
                                      llvm::StringRef functionName = "",
                                      llvm::ArrayRef<int64_t> prefillLengths = {},
                                      ReplayChoice replay = {});

void printCostText(const ModelCost &cost, llvm::raw_ostream &os);
void printCostJson(const ModelCost &cost, llvm::raw_ostream &os);

} // namespace csa

#endif // CSA_PASSES_COSTANALYSIS_H

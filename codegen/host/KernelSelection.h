//===- KernelSelection.h - The host kernels an expanded graph needs -*- C++ -*-===//
//
// Walks expanded-stage IR and builds, into a kernel module, one host kernel
// per distinct (op kind, static parameters) the graph uses: the kernels the
// CPU target executes for that graph, which the NVPTX back end maps to
// threads. Each op family's kernels come from its pattern (KernelPatterns.h)
// and are named by what they compute (`linear_fp8_block32_64x32`,
// `rope_8_<table>`...), so identical ops share one kernel; an op the host
// target must lower and no pattern takes is an error naming it.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_KERNELSELECTION_H
#define CSA_CODEGEN_HOST_KERNELSELECTION_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include "codegen/host/EngramKernels.h"

#include <map>
#include <string>
#include <vector>

namespace csa::codegen {

/// The csa::KernelParallelismAttr on every host kernel: which of its loops
/// have independent iterations (the NVPTX back end's thread mapping).
inline constexpr const char *kKernelParallelismAttr = "csa.parallelism";

struct SelectedKernel {
  std::string name; ///< symbol: _mlir_ciface_<name>
  std::string op;   ///< the csa op it implements
  std::string detail;
  int64_t uses = 0; ///< how many ops of the graph call it
  /// The kernel's argument types ("memref<?x64xbf16>", "i64", ...) and
  /// result types, as the runtime checks its calls against them.
  std::vector<std::string> arguments, results;
};

struct KernelSelection {
  std::vector<SelectedKernel> kernels;
  /// The kernels each op of the graph calls, by role ("main", "linear",
  /// "dequantize_window", ...): what the plan builder binds.
  std::map<mlir::Operation *, std::map<std::string, std::string>> opKernels;
};

/// The error of a selection whose causes were emitted as diagnostics on the
/// ops (and kernels) concerned: its message only sums them up.
class DiagnosedSelectionError : public llvm::ErrorInfo<DiagnosedSelectionError> {
public:
  static char ID;
  explicit DiagnosedSelectionError(std::string summary) : summary(std::move(summary)) {}
  void log(llvm::raw_ostream &os) const override { os << summary; }
  std::error_code convertToErrorCode() const override { return llvm::inconvertibleErrorCode(); }

private:
  std::string summary;
};

/// Builds into `kernels` (a fresh module) the host kernels `graph` (expanded
/// stage) needs. Fails if `graph` still holds graph-level attention, or an
/// op cannot be lowered (the error on the op says why).
llvm::Expected<KernelSelection> selectHostKernels(mlir::ModuleOp graph,
                                                  mlir::ModuleOp kernels);

/// The Engram hash layout of every Engram layer of `graph`, by layer: primes
/// are handed out across all layers in order, so they come from the whole
/// graph (empty if the layers disagree on the hash parameters).
std::map<int64_t, EngramHashLayout> engramHashLayoutsOf(mlir::ModuleOp graph);

/// The selection as JSON (for the artifact and for people).
void printKernelSelectionJson(const KernelSelection &selection,
                              llvm::raw_ostream &os);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_KERNELSELECTION_H

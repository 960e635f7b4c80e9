//===- KernelPatterns.h - Kernels from op patterns -----------*- C++ -*-===//
//
// The host kernels an expanded graph needs are built by patterns, one per
// op family, in the manner of MLIR's conversion patterns: a pattern matches
// an op by name, reads its types and its lowering attributes (the forms that
// csa-select-linear-forms and csa-select-attention-forms attached, the row
// tile of csa-tile-kernels, #csa.row_tile) and builds its kernels through a KernelSelector,
// which names each kernel once and records which kernel the op calls in each
// role. A ConversionTarget says which ops must be lowered: every csa op but
// the structural ones (cache_alloc, yield) is illegal, so an op no pattern
// takes is an error that names it, never an op the plan silently skips.
//
// Adding an op family is one pattern class here and its builder; a new GPU
// form of a family is one value of its lowering attribute, read by its
// pattern (the kernel's name) and the NVPTX back end (the thread mapping).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_KERNELPATTERNS_H
#define CSA_CODEGEN_HOST_KERNELPATTERNS_H

#include "codegen/host/EngramKernels.h"
#include "codegen/host/KernelSelection.h"
#include "dialects/csa/CsaDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/StringMap.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace csa::codegen {

/// What a kernel pattern asks of the selection: build a kernel once under
/// its name, and record it as the current op's kernel for a role.
class KernelSelector {
public:
  KernelSelector(mlir::ModuleOp kernels, double eps,
                 std::map<int64_t, EngramHashLayout> engramLayouts)
      : kernels(kernels), eps(eps), engramLayouts(std::move(engramLayouts)) {}

  /// Builds `name` once with `build` and marks it with the loops it runs in
  /// parallel (csa.parallelism: the NVPTX back end's thread mapping); counts
  /// every use and records it as the current op's kernel for `role`.
  void use(const std::string &name, const std::string &op, const std::string &detail,
           KernelParallelism parallelism, const std::function<void()> &build,
           const std::string &role = "main");
  /// The current op also names `name` (built for another op) as `role`.
  void alsoCalls(const std::string &role, const std::string &name);
  /// The current op's #csa.row_tile (csa-tile-kernels; 1: none).
  int64_t tileRows() const;
  /// A linear kernel of the current op, in the op's linear form. With
  /// `experts` > 0, the routed experts' linear grouped into one launch
  /// (LinearKernelSpec::experts; not tiled).
  void linear(const std::string &op, WeightFormat format, int64_t in, int64_t out,
              int64_t groups = 1, const std::string &role = "main", int64_t experts = 0,
              int64_t slotsPerRow = 1);
  void rmsNorm(int64_t dim, const std::string &role = "main");
  /// The kernel an op already selected calls for `role` ("" if none).
  std::string kernelOf(mlir::Operation *op, const std::string &role = "main") const;
  /// The graph's RMS-norm epsilon (the mHC and Engram kernels use it too).
  double graphEps() const { return eps; }
  /// The Engram hash layout of `layer` (null when the layers disagree).
  const EngramHashLayout *engramLayout(int64_t layer) const;

  void setCurrent(mlir::Operation *op) { current = op; }
  /// "name (op)" of every kernel whose builder refused it (it said why).
  const std::vector<std::string> &unbuiltKernels() const { return unbuilt; }
  KernelSelection finish() { return std::move(selection); }

  mlir::ModuleOp kernels;

private:
  mlir::Operation *current = nullptr;
  double eps;
  std::map<int64_t, EngramHashLayout> engramLayouts;
  std::vector<std::string> unbuilt;
  KernelSelection selection;
  llvm::StringMap<size_t> index;
};

/// Builds the kernels of one op family. Fails (having emitted an error on
/// the op) when the op cannot be lowered.
class KernelPattern {
public:
  explicit KernelPattern(llvm::StringRef rootName) : rootName(rootName.str()) {}
  virtual ~KernelPattern() = default;
  /// The op name this pattern matches ("csa.linear").
  llvm::StringRef getRootName() const { return rootName; }
  virtual mlir::LogicalResult select(mlir::Operation *op, KernelSelector &s) const = 0;

private:
  std::string rootName;
};

/// A pattern on ops of type OpTy.
template <typename OpTy>
class OpKernelPattern : public KernelPattern {
public:
  OpKernelPattern() : KernelPattern(OpTy::getOperationName()) {}
  mlir::LogicalResult select(mlir::Operation *op, KernelSelector &s) const final {
    return select(llvm::cast<OpTy>(op), s);
  }
  virtual mlir::LogicalResult select(OpTy op, KernelSelector &s) const = 0;
};

/// The patterns of a target, by the op name they match.
class KernelPatternSet {
public:
  template <typename... Patterns>
  KernelPatternSet &add() {
    (insert(std::make_unique<Patterns>()), ...);
    return *this;
  }
  /// The pattern for `op`, or null.
  const KernelPattern *lookup(mlir::Operation *op) const;

private:
  void insert(std::unique_ptr<KernelPattern> pattern);
  llvm::StringMap<std::unique_ptr<KernelPattern>> byName;
};

/// The host target's patterns: one per primitive op family.
void populateHostKernelPatterns(KernelPatternSet &patterns);

/// The ops the host kernels must lower: the csa dialect is illegal but for
/// its structural ops (cache_alloc, yield) and the ops inside a fusion
/// region (lowered with their region); everything outside csa is legal.
void configureHostKernelTarget(mlir::ConversionTarget &target);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_KERNELPATTERNS_H

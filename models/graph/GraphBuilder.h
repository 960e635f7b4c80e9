//===- GraphBuilder.h - Model graph as csa IR --------------------*- C++ -*-===//
//
// Builds the graph stage of a model variant: a module with a `prefill` and a
// `decode` function, one csa op per model block.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_MODELS_GRAPH_GRAPHBUILDER_H
#define CSA_MODELS_GRAPH_GRAPHBUILDER_H

#include "models/variants/Variants.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace csa {

/// Registers what the graph needs (csa, func, arith, tensor) in `context`.
void loadGraphDialects(mlir::MLIRContext &context);

/// Build choices that are not the model's config or schedule: cache format
/// variants (issue 18).
struct GraphOptions {
  /// The main (compressed) KV rows: the released FP4 row, or V4's FP8 row
  /// (E4M3 NoPE channels, bf16 RoPE channels; `--main-kv-format=fp8`).
  enum class MainKvFormat { Fp4, Fp8 };
  MainKvFormat mainKvFormat = MainKvFormat::Fp4;
  /// The index-key rows: the released FP4 row, or an FP8 row (E4M3 values,
  /// one fp32 scale; `--index-key-format=fp8`).
  enum class IndexKeyFormat { Fp4, Fp8 };
  IndexKeyFormat indexKeyFormat = IndexKeyFormat::Fp4;
};

/// The graph stage of `variant`:
///   func.func @prefill(%tokens: tensor<?xi32>) -> tensor<1x<vocab>xf32>
///   func.func @decode(%token: tensor<1xi32>, %pos: index) -> tensor<1x<vocab>xf32>
/// Module attributes `csa.model` and `csa.schedule` name the variant.
mlir::OwningOpRef<mlir::ModuleOp> buildModelGraph(mlir::MLIRContext &context,
                                                  const ModelVariant &variant,
                                                  const GraphOptions &options = {});

} // namespace csa

#endif // CSA_MODELS_GRAPH_GRAPHBUILDER_H

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

/// The graph stage of `variant`:
///   func.func @prefill(%tokens: tensor<?xi32>) -> tensor<1x<vocab>xf32>
///   func.func @decode(%token: tensor<1xi32>, %pos: index) -> tensor<1x<vocab>xf32>
/// Module attributes `csa.model` and `csa.schedule` name the variant.
mlir::OwningOpRef<mlir::ModuleOp> buildModelGraph(mlir::MLIRContext &context,
                                                  const ModelVariant &variant);

} // namespace csa

#endif // CSA_MODELS_GRAPH_GRAPHBUILDER_H

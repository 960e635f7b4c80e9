//===- InputIr.h - Verifying IR that a user wrote or edited -----*- C++ -*-===//
//
// csa-compile --compile-from reads a stage a user may have edited. Upstream
// MLIR 22's verifiers crash on some malformed ops instead of reporting them,
// so such IR is parsed without the parser's verification and checked here
// first, then verified.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_PASSES_INPUTIR_H
#define CSA_PASSES_INPUTIR_H

#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"

namespace csa {

/// Rejects, with a diagnostic on the op, what upstream verifiers crash on:
/// a `tensor.expand_shape` or `memref.expand_shape` whose reassociation has
/// an empty group (the verifier reads each group's first expression; found by
/// fuzz-ir). Then runs MLIR's verifier on `op`.
mlir::LogicalResult verifyInputIr(mlir::Operation *op);

} // namespace csa

#endif // CSA_PASSES_INPUTIR_H

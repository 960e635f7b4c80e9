//===- FormSelection.h - Giving ops a lowering-strategy attribute -*- C++ -*-===//
//
// What the csa-select-*-forms passes share: every op of `Ops` that has no
// `attrName` yet gets `form` (an op that has one, set by a user in
// tiled.mlir, keeps it).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_PASSES_FORMSELECTION_H
#define CSA_PASSES_FORMSELECTION_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <cstdint>

namespace csa {

/// Sets `formOf(op)` as `attrName` on every op of `Ops` in `module` without
/// one (the form may depend on the op: a form that fits only some shapes);
/// returns how many it set.
template <typename... Ops>
int64_t setFormWhereAbsent(mlir::ModuleOp module, llvm::StringRef attrName,
                           llvm::function_ref<mlir::Attribute(mlir::Operation *)> formOf) {
  int64_t set = 0;
  module.walk([&](mlir::Operation *op) {
    if (!mlir::isa<Ops...>(op) || op->hasAttr(attrName))
      return;
    op->setAttr(attrName, formOf(op));
    ++set;
  });
  return set;
}

/// The same form for every op.
template <typename... Ops>
int64_t setFormWhereAbsent(mlir::ModuleOp module, llvm::StringRef attrName,
                           mlir::Attribute form) {
  return setFormWhereAbsent<Ops...>(module, attrName,
                                    [&](mlir::Operation *) { return form; });
}

} // namespace csa

#endif // CSA_PASSES_FORMSELECTION_H

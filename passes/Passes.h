//===- Passes.h - csa passes -------------------------------------*- C++ -*-===//
#ifndef CSA_PASSES_PASSES_H
#define CSA_PASSES_PASSES_H

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace csa {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace csa

#endif // CSA_PASSES_PASSES_H

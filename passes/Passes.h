//===- Passes.h - csa passes -------------------------------------*- C++ -*-===//
#ifndef CSA_PASSES_PASSES_H
#define CSA_PASSES_PASSES_H

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <optional>

namespace csa {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// The number of an NVPTX chip name ("sm_90a" -> 90), or nullopt when the
/// name is not sm_<number>[suffix].
std::optional<int> nvptxChipNumber(llvm::StringRef chip);

} // namespace csa

#endif // CSA_PASSES_PASSES_H

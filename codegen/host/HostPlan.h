//===- HostPlan.h - The expanded graph as a plan of host kernel calls -*- C++ -*-===//
//
// Turns the expanded stage (@prefill and @decode) into the artifact's plan
// (runtime/artifact/Plan.h): one step per csa op, in program order, naming
// the generated kernels it calls (from the kernel selection) and binding
// every operand and result to a weight, a per-sequence cache, a transient
// buffer, an entry-point input or output, or an index expression the runtime
// evaluates per step (positions, row counts). Shape-only tensor ops
// (expand_shape, collapse_shape) alias their operand; bounded replay's
// row slice becomes the data-movement builtin `builtin.slice_rows`.
//
// Each step's arguments are bound by slot name and laid out by the op ABI
// table (runtime/artifact/OpAbi.h), which the executor reads them by; a
// binding the table does not describe is an internal error naming the op
// and the slot.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_HOSTPLAN_H
#define CSA_CODEGEN_HOST_HOSTPLAN_H

#include "codegen/host/KernelSelection.h"
#include "runtime/artifact/Plan.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <string>

namespace csa::codegen {

struct HostPlanOptions {
  /// The artifact path of the shared object that holds the kernels.
  std::string object = "kernels/host.so";
};

/// The plan of `graph` (expanded stage, with csa.max_context), calling the
/// kernels of `selection` (selectHostKernels on the same module). Fails,
/// naming the op, on IR the plan cannot express.
llvm::Expected<artifact::Plan> buildHostPlan(mlir::ModuleOp graph,
                                             const KernelSelection &selection,
                                             const HostPlanOptions &options = {});

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_HOSTPLAN_H

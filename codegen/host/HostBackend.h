//===- HostBackend.h - Host kernels to a loadable shared object --*- C++ -*-===//
//
// The CPU target's back end: lowers a module of host kernels to the LLVM
// dialect (scf -> cf, arith/math/memref/func -> llvm), translates it to LLVM
// IR, emits an object file for the host with the TargetMachine, and links it
// into a shared object with the system compiler driver, which the runtime
// dlopens (the runtime itself links no LLVM).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_HOSTBACKEND_H
#define CSA_CODEGEN_HOST_HOSTBACKEND_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <string>

namespace csa::codegen {

/// Lowers host kernels (scf/arith/math/memref/func) to the LLVM dialect.
mlir::LogicalResult lowerHostKernelsToLLVM(mlir::ModuleOp module);

/// LLVM IR text of a module already in the LLVM dialect.
llvm::Expected<std::string> translateToLLVMIR(mlir::ModuleOp module);

/// Records in an LLVM-dialect module of host kernels what it is built for:
/// the model config text and schedule letters as the exported C strings
/// csa_kernels_config and csa_kernels_schedule, which the runtime compares
/// with the artifact's manifest before it runs a kernel (docs/files.md,
/// "The artifact's code").
void recordKernelTarget(mlir::ModuleOp module, llvm::StringRef configText,
                        llvm::StringRef schedule);

/// How the host object is emitted.
struct HostObjectOptions {
  /// Instrument every kernel with AddressSanitizer (csa-compile
  /// --sanitize-kernels): each load and store is checked against the
  /// process's ASan shadow, so an out-of-bounds access of a generated kernel
  /// is reported where it happens. The library then needs the ASan runtime
  /// of a csa-run built with CSA_SANITIZE=ON.
  bool addressSanitizer = false;
};

/// Writes an object file for the host CPU from an LLVM-dialect module.
llvm::Error emitHostObject(mlir::ModuleOp module, const std::string &path,
                           const HostObjectOptions &options = {});

/// Links objects into a shared object with `cc -shared` (CSA_CC overrides).
llvm::Error linkSharedObject(const std::vector<std::string> &objects,
                             const std::string &path);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_HOSTBACKEND_H

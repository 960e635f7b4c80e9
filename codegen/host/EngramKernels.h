//===- EngramKernels.h - Generated kernels for Engram -------------*- C++ -*-===//
//
// Host kernels for csa.engram's n-gram hashing, bit-exact with the official
// engram.py; its constants come from models/tables/EngramTables.h.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_ENGRAMKERNELS_H
#define CSA_CODEGEN_HOST_ENGRAMKERNELS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <functional>
#include <string>
#include <vector>

namespace csa::codegen {

/// What the hash of one Engram layer needs, all known at compile time.
struct EngramHashLayout {
  int64_t maxNgram = 0;            ///< orders 2..maxNgram
  int64_t heads = 0;
  std::vector<int64_t> multipliers; ///< maxNgram odd multipliers
  std::vector<int64_t> primes;      ///< (maxNgram - 1) * heads table sizes
  std::vector<int64_t> offsets;     ///< per column, into the layer's table
  int64_t padId = 0; ///< raw token whose compressed id fills positions before 0
};

/// `name(tokens: memref<?xi32>, map: memref<?xi64>, base: i64, start: i64,
/// ids: memref<?xCOLSxi64>)`: for positions p = start .. start + rows(ids) - 1
/// the row ids of the layer's table. tokens[i] is the raw id of position
/// base + i (it must reach back to max(0, start - (maxNgram - 1))); `map`
/// takes raw ids to compressed ids; positions before 0 take map[padId].
mlir::func::FuncOp buildEngramHashKernel(mlir::ModuleOp module,
                                         const std::string &name,
                                         const EngramHashLayout &layout);

/// `name(ids: memref<?xCOLSxi64>, table: memref<?xHDxi8>,
/// scale: memref<?x(HD/32)xi8>, rows: memref<?x(COLS*HD)xbf16>)`: the table
/// rows of the hash ids, E4M3 codes times their UE8M0 scale per 32, in bf16.
mlir::func::FuncOp buildEngramGatherKernel(mlir::ModuleOp module,
                                           const std::string &name,
                                           int64_t columns, int64_t headDim);

/// `name(streams: memref<?xHCxDxbf16>, kv: memref<?x((HC+1)*D)xbf16>,
/// qWeight: memref<HCxDxbf16>, kWeight: memref<HCxDxbf16>)`, in place: each
/// stream j += sigmoid(signed sqrt(<h_j * q_j * k_j, key_j> * rstd / sqrt(D)))
/// * value, where kv holds the HC keys then the value (the wkv projection of
/// the gathered table rows).
mlir::func::FuncOp buildEngramGateKernel(mlir::ModuleOp module,
                                         const std::string &name, int64_t hc,
                                         int64_t dim, float eps);

/// The attribute on every Engram gate kernel, {hc, dim, eps}: the NVPTX back
/// end rebuilds it as the block form.
inline constexpr const char *kEngramGateAttr = "csa.engram_gate";

/// How the gate's block form is spread: a block of `threads` per (row,
/// stream); `chunk` elements staged a pass.
struct EngramGateBlockLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> row, stream, thread;
  std::function<void(mlir::OpBuilder &, mlir::Location)> barrier;
  int64_t threads = 256, chunk = 1024;
  /// Appended to the kernel's arguments, in shared memory: memref<3 x chunk
  /// x f32> (a pass's products) and memref<1 x f32> (the gate).
  mlir::Type sharedProductsType, sharedGateType;
};

/// Replaces the body of `fn` (from buildEngramGateKernel) with the block
/// form, the host kernel's bits: each pass, the threads compute the products
/// of `chunk` elements (h * h, key * key, h * (q * k) * key, as the host
/// does) into shared memory, and one thread adds them to the three sums in
/// element order; that thread computes the gate, and every thread updates
/// its elements of the stream. One thread walking the stream in global
/// memory (the host kernel run a (row, stream) a thread) waited for each
/// element's loads in turn.
void buildEngramGateBlockBody(mlir::func::FuncOp fn, int64_t hc, int64_t dim, float eps,
                              const EngramGateBlockLanes &lanes);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_ENGRAMKERNELS_H

//===- QuantizeKernels.h - Cache-row quantizers generated as IR --*- C++ -*-===//
//
// Host kernels for `csa.quantize`, `csa.dequantize` and `csa.cache_append`
// on the three released cache row formats (spec §4, docs/cache-formats.md).
// Like HostKernels.h: one func.func of scf loops over memrefs, arith only
// (every codec is integer arithmetic on `arith.bitcast`ed fp32), carrying
// `llvm.emit_c_interface`, so the runtime calls `_mlir_ciface_<name>`.
//
// The row bytes are those of `runtime/numerics` (`numerics::quantizeRow`):
// values first (E2M1 pairs with the even element in the low nibble, or E4M3
// bytes), then one scale byte per group. The arithmetic is numerics' fp32
// arithmetic in the same order, so the kernels are bit-exact with it:
//  - amax = max |x| over the group ignoring NaN, +-inf counted as FLT_MAX,
//    then floored (6*2^-9 main KV, 6*2^-126 index keys, 1e-4 SWA);
//  - main KV: s = e4m3_rne_sat(amax / 6) (a division), index keys and SWA:
//    s = 2^ceil(log2(amax * fp32(1/6) or fp32(1/448))) by the exponent-bit
//    trick (a multiplication by the fp32 reciprocal);
//  - q = encode(x / s) (a division by the decoded scale), E2M1 or E4M3
//    RNE with saturation; NaN encodes to E2M1 +0 / E4M3 0x7F.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_QUANTIZEKERNELS_H
#define CSA_CODEGEN_HOST_QUANTIZEKERNELS_H

#include "codegen/host/GpuFormLanes.h"
#include "runtime/numerics/Quantize.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <functional>
#include <string>

namespace csa::codegen {

/// `name(x: memref<?xDxT>, rows: memref<?xRxi8>)`: quantizes each row of x
/// into `numerics::rowBytes(format, dim)` = R bytes, as
/// `numerics::quantizeRow` does (csa.quantize). T is `valueType`: bf16 (the
/// default, when null) or f32. `dim` must be a positive multiple of the
/// format's group; otherwise an error is emitted and a null op returned.
mlir::func::FuncOp buildQuantizeRowsKernel(mlir::ModuleOp module,
                                           const std::string &name,
                                           numerics::RowFormat format,
                                           int64_t dim,
                                           mlir::Type valueType = {});

/// The quantizer and dequantizer of V4's FP8 main-KV row
/// (`!csa.fp8_nope_row<dim, rope N, ue8m0, G>`), as
/// `numerics::quantizeMainKvFp8Row` and `dequantizeMainKvFp8Row` do:
/// `name(x: memref<?xDxT>, rows: memref<?xRxi8>)` and
/// `name(rows: memref<?xRxi8>, y: memref<?xDxT>)`. They carry no block-form
/// attribute: the NVPTX back end runs them by its nest rule.
mlir::func::FuncOp buildQuantizeMainKvFp8Kernel(mlir::ModuleOp module,
                                                const std::string &name, int64_t dim,
                                                int64_t rope, mlir::Type valueType = {});
mlir::func::FuncOp buildDequantizeMainKvFp8Kernel(mlir::ModuleOp module,
                                                  const std::string &name, int64_t dim,
                                                  int64_t rope, mlir::Type valueType = {});

/// The quantizer and dequantizer of the FP8 index-key row
/// (`!csa.fp8_row<dim, f32, dim>`), as `numerics::quantizeIndexKeyFp8Row`
/// and `dequantizeIndexKeyFp8Row` do (the values then rounded to T); the
/// same signatures as the V4 row's, run by the nest rule on the GPU.
mlir::func::FuncOp buildQuantizeIndexKeyFp8Kernel(mlir::ModuleOp module,
                                                  const std::string &name, int64_t dim,
                                                  mlir::Type valueType = {});
mlir::func::FuncOp buildDequantizeIndexKeyFp8Kernel(mlir::ModuleOp module,
                                                    const std::string &name, int64_t dim,
                                                    mlir::Type valueType = {});

/// The attribute on every quantizer kernel, {format (numerics::RowFormat),
/// dim}: the NVPTX back end rebuilds it as the block form.
inline constexpr const char *kQuantizeRowsAttr = "csa.quantize_rows";

/// Where the block form of a quantizer runs: a block per row, a thread per
/// output byte, and a shuffle (XOR of the lane) within the warp.
struct QuantizeRowsBlockLanes : BlockRowLanes {
  ShuffleXorFn shuffleXor;
  /// A fused region's hooks (FusedKernels.h); unset for the quantizer's own
  /// form. `loadValue`: the fp32 value of element `column` of row `r` of
  /// `x` (default: the element, widened). `alsoStore`: called beside each
  /// byte the form stores into its rows (`column` of row `r`, the i8
  /// `byte`), inside the store's guard.
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::Value x, mlir::Value r,
                            mlir::Value column)>
      loadValue;
  std::function<void(mlir::OpBuilder &, mlir::Location, mlir::Value r, mlir::Value column,
                     mlir::Value byte)>
      alsoStore;
};

/// The block form's threads for a row of `dim` values (the row's bytes
/// rounded up to a warp), or 0 where it does not apply: a group must be a
/// power of two of at most 32 bytes' lanes, the row at most 1024 bytes.
int64_t quantizeRowsBlockThreads(numerics::RowFormat format, int64_t dim);

/// Replaces the body of `fn` (from buildQuantizeRowsKernel) with the block
/// form: thread t loads the elements of the row's byte t (one E4M3 value or
/// an E2M1 pair), the group's amax is found by XOR shuffles among its lanes
/// (a max, so the host's value whatever the order), every lane computes the
/// scale by the host's rule and encodes its byte, and the group's first lane
/// writes the scale: the host kernel's bytes. (The nest rule gave each
/// group to one thread, which walked its elements twice: 5.7 us for a SWA
/// row on the H200.) `lanes.threads` must be quantizeRowsBlockThreads.
void buildQuantizeRowsBlockBody(mlir::func::FuncOp fn, numerics::RowFormat format,
                                int64_t dim, const QuantizeRowsBlockLanes &lanes);

/// The block form's work for row `lanes.row` of `x` into `out` (both
/// memrefs as buildQuantizeRowsKernel's), emitted at `b`'s insertion point:
/// what buildQuantizeRowsBlockBody's body does, for a fused region's form
/// that quantizes a row among other work.
void emitQuantizeRowsBlock(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                           mlir::Value out, numerics::RowFormat format, int64_t dim,
                           const QuantizeRowsBlockLanes &lanes);

/// `name(rows: memref<?xRxi8>, y: memref<?xDxT>)`: y = value * group scale
/// (csa.dequantize), as `numerics::dequantizeRow`. The fp32 product is exact
/// for every row the quantizer produces; T = bf16 (default) rounds it to
/// nearest even, which is exact for those rows too (E2M1 x E4M3, E2M1 x
/// UE8M0 and, for SWA scales >= 2^-124, E4M3 x UE8M0 fit bf16). For
/// arbitrary bytes the f32 result equals numerics' up to NaN payloads and
/// the bf16 result equals `floatToBf16` of it (NaN in, NaN out).
mlir::func::FuncOp buildDequantizeRowsKernel(mlir::ModuleOp module,
                                             const std::string &name,
                                             numerics::RowFormat format,
                                             int64_t dim,
                                             mlir::Type valueType = {});

/// `name(rows: memref<?xRxi8>, cache: memref<?xRxi8, strided<[?, 1],
/// offset: ?>>, start: i64) -> i32` (csa.cache_append): copies row i of
/// `rows` to cache entry `start + i` (window == 0: a global cache, entries
/// in order) or to slot `(start + i) % window` (window > 0: the SWA ring;
/// rows are written in order, so of more than `window` rows the last ones
/// win, as in the ring). The cache's row stride is free, so the runtime may
/// pass a view into records that hold more than this row.
///
/// Capacity: an entry is written only when 0 <= start + i and its entry or
/// slot is < dim(cache, 0); others are not written (nothing is clamped).
/// The result is the number of rows not written: 0 on success. The runtime
/// checks capacity before calling, so non-zero is a runtime bug.
mlir::func::FuncOp buildCacheAppendKernel(mlir::ModuleOp module,
                                          const std::string &name,
                                          numerics::RowFormat format,
                                          int64_t dim, int64_t window = 0);
/// The same for rows of `rowBytes` bytes of any format (the append copies
/// bytes).
mlir::func::FuncOp buildCacheAppendKernel(mlir::ModuleOp module,
                                          const std::string &name, int64_t rowBytes,
                                          int64_t window = 0);

/// The attribute on every cache-append kernel, {row_bytes, window}: the
/// NVPTX back end rebuilds it as the block form.
inline constexpr const char *kCacheAppendAttr = "csa.cache_append";

/// Where a block form stores row `row` of `n` rows into `cache` from entry
/// `start` (the append kernel's rule): `slot` (i64), `write` (i1: the slot
/// exists, the row is one of the n, and in a ring of `window` > 0 slots no
/// later row takes the slot), and `missed` (i32: the rows whose slot does not
/// exist, which the host kernel returns; every thread counts them). Emitted
/// at `b`'s insertion point.
struct CacheStoreSlot {
  mlir::Value slot, write, missed;
};
CacheStoreSlot emitCacheStoreSlot(mlir::OpBuilder &b, mlir::Location loc, mlir::Value cache,
                                  mlir::Value start, mlir::Value n, mlir::Value row,
                                  int64_t window);

/// Replaces the body of `fn` (from buildCacheAppendKernel) with the block
/// form: a block per row (`row`), its `threads` threads each copying every
/// `threads`-th byte, all loads before the stores. The cache ends as the
/// host kernel leaves it: of rows that share a ring slot only the last is
/// written (the host writes them in order). Every thread returns the host
/// kernel's count of rows not written (computed from the positions, not
/// from the copies). One thread copying byte after byte waited for each
/// load before its store.
void buildCacheAppendBlockBody(mlir::func::FuncOp fn, int64_t rowBytes, int64_t window,
                               const std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> &row,
                               const std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> &thread,
                               int64_t threads);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_QUANTIZEKERNELS_H

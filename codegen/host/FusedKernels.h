//===- FusedKernels.h - Host kernels of csa.fusion regions -------*- C++ -*-===//
//
// One kernel per kernel region: a function that runs the region's ops in
// order by calling their kernels (already in the module) on buffers it
// allocates for the values that stay inside the region. The parts are the
// verified single-op kernels, so the region computes exactly what the ops
// compute one by one; the runtime makes one call instead of several and the
// region's inner values never become transients.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_FUSEDKERNELS_H
#define CSA_CODEGEN_HOST_FUSEDKERNELS_H

#include "codegen/host/HostKernels.h"
#include "codegen/host/QuantizeKernels.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <string>

namespace csa::codegen {

/// `name(x: memref<?xDxbf16>, ropePosition: i64, storePosition: i64,
/// cache: <the append kernel's cache view>, rows: memref<?xRxi8>) -> i32`
/// for a `rope_quantize_store` region: rows = quantize(rope(x at
/// ropePosition, `stride`)), stored into `cache` from entry storePosition;
/// returns the store's count of rows not written (0). `rope`, `quantize` and
/// `append` name the kernels of the three ops, which must be in `module`.
mlir::func::FuncOp buildRopeQuantizeStoreKernel(mlir::ModuleOp module,
                                                const std::string &name,
                                                const std::string &rope,
                                                const std::string &quantize,
                                                const std::string &append,
                                                int64_t stride, bool inverse);

/// What the block form of a rope_quantize_store kernel needs, which
/// buildRopeQuantizeStoreKernel records on the kernel (kRopeQuantizeStoreAttr)
/// when its quantizer has a block form (the released row formats): the row
/// format and width, the ring's window (0: a global cache), the RoPE
/// stride, whether it is the inverse rotation, and the RoPE kernel's
/// frequency table (a memref.global of `pairs` f32).
struct RopeQuantizeStoreSpec {
  numerics::RowFormat format{};
  int64_t dim = 0, window = 0, stride = 1, pairs = 0;
  bool inverse = false;
  std::string table;
};
inline constexpr const char *kRopeQuantizeStoreAttr = "csa.rope_quantize_store";

/// The spec recorded on `fn`, if any.
std::optional<RopeQuantizeStoreSpec> ropeQuantizeStoreSpecOf(mlir::func::FuncOp fn);

/// Replaces the body of `fn` (from buildRopeQuantizeStoreKernel) with its
/// block form, one kernel instead of the parts' three launches: a block per
/// row (`lanes`, as the quantizer's block form: quantizeRowsBlockThreads
/// threads), each thread rotating the elements of its byte as the RoPE
/// kernel does (the pair's partner loaded beside it, the result rounded to
/// bf16 as the host's rotated copy holds it), then quantizing them as the
/// quantizer's block form does and storing each byte to the rows and to
/// the row's cache slot (a ring slot only from the last row that takes it).
/// Every thread returns the host kernel's count of rows not stored: the host
/// kernel's bytes, rows and cache alike.
void buildRopeQuantizeStoreBlockBody(mlir::func::FuncOp fn, const RopeQuantizeStoreSpec &spec,
                                     const QuantizeRowsBlockLanes &lanes);

/// `name(streams: memref<?xHCxDxbf16>, pre: memref<?xHCxf32>,
/// weight: memref<Dxbf16>, y: memref<?xDxbf16>)` for a `hc_collapse_norm`
/// region: y = rms_norm(hc_collapse(streams, pre)) by the kernels `collapse`
/// and `norm` (in `module`), the collapsed rows in a buffer of its own.
/// Records {hc, dim, eps} (kHcCollapseNormAttr) for the word form.
mlir::func::FuncOp buildHcCollapseNormKernel(mlir::ModuleOp module, const std::string &name,
                                             const std::string &collapse,
                                             const std::string &norm, int64_t hc,
                                             int64_t dim, double eps);
inline constexpr const char *kHcCollapseNormAttr = "csa.hc_collapse_norm";

/// Replaces the body of `fn` (from buildHcCollapseNormKernel) with the RMS
/// norm's word form (RmsNormBlockLanes with shuffleXor: a block per row, a
/// 16-byte word a thread) whose words are the collapse's: each thread loads
/// its word of the HC streams, adds pre_i * X_i in the collapse kernel's
/// order and rounds to bf16 as the collapsed rows hold them, then normalizes
/// as the word form does. So its bits are the two kernels' on the GPU (the
/// collapse's, then the word form's), in one launch; the collapsed rows are
/// never written.
void buildHcCollapseNormWordBody(mlir::func::FuncOp fn, int64_t hc, int64_t dim, double eps,
                                 const RmsNormBlockLanes &lanes);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_FUSEDKERNELS_H

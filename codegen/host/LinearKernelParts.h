//===- LinearKernelParts.h - Pieces the linear kernels' forms share -*- C++ -*-===//
//
// The code decoders, the activation quantization of one 32-block and the
// loads-ahead loop that the host linear kernels (LinearKernels.cpp) and their
// GPU forms (LinearSplitK.cpp) are built from, so that every form quantizes
// and decodes with the same operations.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_LINEARKERNELPARTS_H
#define CSA_CODEGEN_HOST_LINEARKERNELPARTS_H

#include "mlir/IR/Builders.h"

#include <functional>

namespace csa::codegen {

/// An i8 code byte of `memref` at `indices`, zero-extended to i32.
mlir::Value loadCode(mlir::OpBuilder &b, mlir::Location loc, mlir::Value memref,
                     mlir::ValueRange indices);

/// numerics::decodeUe8m0 of an i32 code in [0, 255]: 2^(e-127); e = 0 is
/// 2^-127, e = 255 is NaN.
mlir::Value decodeUe8m0(mlir::OpBuilder &b, mlir::Location loc, mlir::Value code);

/// The E4M3 value of an i32 code in [0, 255] (NaN for S.1111.111), without a
/// table.
mlir::Value decodeE4M3Arith(mlir::OpBuilder &b, mlir::Location loc, mlir::Value code);

/// The E2M1 value of an i32 code in [0, 15], without a table.
mlir::Value decodeE2M1Arith(mlir::OpBuilder &b, mlir::Location loc, mlir::Value code);

/// act_quant(x, 32, ue8m0) of one block of 32, dequantized: `load(c)` gives
/// element c as f32, `store(c, v)` receives the dequantized bf16 element
/// (numerics::actQuantInplace, bit for bit).
void emitActQuantBlock(mlir::OpBuilder &b, mlir::Location loc,
                       const std::function<mlir::Value(mlir::OpBuilder &, mlir::Value)> &load,
                       const std::function<void(mlir::OpBuilder &, mlir::Value, mlir::Value)> &store);

/// Items first, first + stride, ... below `count`, `group` a loop trip: the
/// trip's loads (`load(read)`; an item past the end reads the last item
/// again) are all emitted before their uses (`use(item, loaded)`, only for
/// items below `count`), so that they are in flight together.
void forGroupsLoadedAhead(
    mlir::OpBuilder &b, mlir::Location loc, mlir::Value first, int64_t count,
    mlir::Value stride, int64_t group,
    const std::function<llvm::SmallVector<mlir::Value>(mlir::OpBuilder &, mlir::Value)> &load,
    const std::function<void(mlir::OpBuilder &, mlir::Value, mlir::ValueRange)> &use);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_LINEARKERNELPARTS_H

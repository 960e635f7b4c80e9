//===- LinearKernelParts.h - Pieces the linear kernels' forms share -*- C++ -*-===//
//
// The code decoders, the activation quantization of one 32-block, the
// loads-ahead loop and the small IR helpers that the host linear kernels
// (LinearKernels.cpp) and their GPU forms (LinearGpuForms.cpp: per-output and
// row-tiled; LinearSplitK.cpp) are built from, so that every form quantizes
// and decodes with the same operations.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_LINEARKERNELPARTS_H
#define CSA_CODEGEN_HOST_LINEARKERNELPARTS_H

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

#include <cstdint>
#include <functional>
#include <utility>

namespace csa::codegen {

/// An i8 code byte of `memref` at `indices`, zero-extended to i32.
mlir::Value loadCode(mlir::OpBuilder &b, mlir::Location loc, mlir::Value memref,
                     mlir::ValueRange indices);

/// The expert id of slot `slot` (an i32 of `ids`), clamped to [0, experts)
/// as an index, and whether it was in range (the grouped linears).
std::pair<mlir::Value, mlir::Value> loadExpertId(mlir::OpBuilder &b, mlir::Location loc,
                                                 mlir::Value ids, mlir::Value slot,
                                                 int64_t experts);

/// numerics::decodeUe8m0 of an i32 code in [0, 255]: 2^(e-127); e = 0 is
/// 2^-127, e = 255 is NaN.
mlir::Value decodeUe8m0(mlir::OpBuilder &b, mlir::Location loc, mlir::Value code);

/// The E4M3 value of an i32 code in [0, 255] (NaN for S.1111.111), without a
/// table.
mlir::Value decodeE4M3Arith(mlir::OpBuilder &b, mlir::Location loc, mlir::Value code);

/// The E2M1 value of an i32 code in [0, 15], without a table.
mlir::Value decodeE2M1Arith(mlir::OpBuilder &b, mlir::Location loc, mlir::Value code);

/// Two f32 values rounded to E4M3 and back (RNE, saturating to +-448): an
/// instruction where the target has one (sm_89's cvt.rn.satfinite.e4m3x2).
using E4M3RoundPair = std::function<std::pair<mlir::Value, mlir::Value>(
    mlir::OpBuilder &, mlir::Location, mlir::Value, mlir::Value)>;

/// act_quant(x, 32, ue8m0) of one block of 32, dequantized: `load(c)` gives
/// element c as f32, `store(c, v)` receives the dequantized bf16 element
/// (numerics::actQuantInplace, bit for bit). The E4M3 rounding is
/// emitRoundToE4M3's integer arithmetic, or `roundPair` when given (equal
/// on every value act_quant rounds: |x / s| <= 448 or an infinity, NaN
/// staying NaN).
void emitActQuantBlock(mlir::OpBuilder &b, mlir::Location loc,
                       const std::function<mlir::Value(mlir::OpBuilder &, mlir::Value)> &load,
                       const std::function<void(mlir::OpBuilder &, mlir::Value, mlir::Value)> &store,
                       const E4M3RoundPair &roundPair = nullptr);

/// The pieces of emitActQuantBlock, for forms that split a block over
/// threads: one step of the block's amax (`magnitude` = |x|; NaN ignored,
/// so partial maxima combine in any order to the same value), the scale s
/// and 1 / s from the amax (+-inf counted as FLT_MAX, the 1e-4 floor,
/// UE8M0 ceil), and two elements quantized and dequantized to bf16.
mlir::Value emitAmaxStep(mlir::OpBuilder &b, mlir::Location loc, mlir::Value amax,
                         mlir::Value magnitude);
std::pair<mlir::Value, mlir::Value> emitActQuantScale(mlir::OpBuilder &b, mlir::Location loc,
                                                      mlir::Value amax);
std::pair<mlir::Value, mlir::Value> emitActQuantPair(mlir::OpBuilder &b, mlir::Location loc,
                                                     mlir::Value v0, mlir::Value v1,
                                                     mlir::Value scale, mlir::Value inverse,
                                                     const E4M3RoundPair &roundPair);

/// Items first, first + stride, ... below `count`, `group` a loop trip: the
/// trip's loads (`load(read)`; an item past the end reads the last item
/// again) are all emitted before their uses (`use(item, loaded)`, only for
/// items below `count`), so that they are in flight together.
void forGroupsLoadedAhead(
    mlir::OpBuilder &b, mlir::Location loc, mlir::Value first, int64_t count,
    mlir::Value stride, int64_t group,
    const std::function<llvm::SmallVector<mlir::Value>(mlir::OpBuilder &, mlir::Value)> &load,
    const std::function<void(mlir::OpBuilder &, mlir::Value, mlir::ValueRange)> &use);

/// The small IR helpers of the linear kernels' files (LinearKernels.cpp,
/// LinearGpuForms.cpp), in a namespace of their own so that their short
/// names stay out of the rest of codegen.
namespace linear {

/// The act_quant block and the weight-scale block.
inline constexpr int64_t kBlock = 32;

mlir::Value idx(mlir::OpBuilder &b, mlir::Location loc, int64_t v);
mlir::Value i32c(mlir::OpBuilder &b, mlir::Location loc, uint32_t v);
mlir::Value f32c(mlir::OpBuilder &b, mlir::Location loc, float v);
/// An fp32 value as `type` (bf16: rounded to nearest even; f32: itself).
mlir::Value fromF32(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v, mlir::Type type);

/// A loop [lb, ub) step 1 whose body returns the next iteration values.
using LoopBody = std::function<llvm::SmallVector<mlir::Value>(
    mlir::OpBuilder &, mlir::Location, mlir::Value, mlir::ValueRange)>;
mlir::scf::ForOp forLoop(mlir::OpBuilder &b, mlir::Location loc, mlir::Value lb, mlir::Value ub,
                         mlir::ValueRange inits, const LoopBody &body);
mlir::scf::ForOp forLoop(mlir::OpBuilder &b, mlir::Location loc, int64_t lb, int64_t ub,
                         mlir::ValueRange inits, const LoopBody &body);

/// The E4M3 and E2M1 decode tables (constant memref.globals of `module`,
/// created once) and a lookup of an i32 code in one.
mlir::Value e4m3Table(mlir::OpBuilder &b, mlir::Location loc, mlir::Operation *module);
mlir::Value e2m1Table(mlir::OpBuilder &b, mlir::Location loc, mlir::Operation *module);
mlir::Value lookup(mlir::OpBuilder &b, mlir::Location loc, mlir::Value table, mlir::Value codeI32);

/// act_quant of 32-block `kb` of row `r` of x; `store(col, v)` receives each
/// dequantized bf16 element with its column.
void emitActQuantRowBlock(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x, mlir::Value r,
                          mlir::Value kb,
                          const std::function<void(mlir::OpBuilder &, mlir::Value, mlir::Value)> &store);

/// Weight element (j, e) of a bf16/f32 weight, or of an FP8-as-bf16 one (an
/// E4M3 code times its block's UE8M0 scale, `s`; null for bf16/f32).
mlir::Value denseWeightAt(mlir::OpBuilder &b, mlir::Location loc, mlir::Value w, mlir::Value s,
                          mlir::Value table, mlir::Value j, mlir::Value e);

/// The 16-byte words (vector<4xi32>) holding 32-block `kb` of weight row
/// `j` (K channels): one (FP4) or two (FP8) 16-byte loads from `base`.
llvm::SmallVector<mlir::Value> loadBlockWords(mlir::OpBuilder &b, mlir::Location loc,
                                              mlir::Value base, mlir::Value j, mlir::Value kb,
                                              int64_t k, bool fp8);
/// The 32 codes of a block's words (loadBlockWords) decoded to f32 without
/// a table.
llvm::SmallVector<mlir::Value> decodeBlockWords(mlir::OpBuilder &b, mlir::Location loc,
                                                mlir::ValueRange vectors, bool fp8);

/// The 32 codes of 32-block `kb` of weight row `j` (K channels, one byte
/// each for FP8, a nibble for FP4), read with one (FP4) or two (FP8)
/// 16-byte loads from `base` (bytePointer of the weight, 16-byte aligned)
/// and decoded to f32 without a table (unscaled).
llvm::SmallVector<mlir::Value> loadBlockValues(mlir::OpBuilder &b, mlir::Location loc,
                                               mlir::Value base, mlir::Value j, mlir::Value kb,
                                               int64_t k, bool fp8);

} // namespace linear

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_LINEARKERNELPARTS_H

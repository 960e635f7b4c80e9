//===- LinearMma.h - The tensor-core prefill form of csa.linear --*- C++ -*-===//
//
// The prefill form of a linear kernel on Hopper's tensor cores: a block
// computes a tile of `rowsPerTile` rows x `outputsPerTile` outputs, a warp a
// 32 x 32 part of it as 2 x 4 fragments of warp-wide `mma.m16n8k16` with
// bf16 operands and fp32 accumulators. K advances a stage of
// kBlocksPerStage 32-blocks at a time (one by default), each block with a
// tile set of its own: the block stages the tile's activations (act_quant-ed
// for FP8/FP4, as the host kernel does) and the weight codes of the blocks
// (decoded exactly to bf16, unscaled; every block's loads first) in shared
// memory, each warp loads its fragments from there and multiplies; each
// 32-block's fp32 partial is multiplied by its UE8M0 weight scale and added
// to the accumulator, in K order (the released semantics: the scale on each
// 32-block's partial).
//
// Every operand is exact in bf16 (E4M3 and E2M1 codes, the act_quant-ed
// activations, bf16 weights), so only the order and the rounding of the fp32
// sums differ from the host kernel: the form meets the tolerance contract
// of a dot product (docs/semantics.md), like the split-K form.
//
// Used for FP8 block-scaled, FP8-as-bf16 (grouped, `wo_a`), FP4 and bf16
// weights with bf16 activations, K % 32 == 0 per group and a group's
// outputs a multiple of 32 (linearMmaShape); the rest keep the row-tiled
// form.
//
// The routed experts' grouped kernels (FP8/FP4 with `experts`, a slot's
// expert id an output row) have a grouped form for prefill: a block per
// (expert, output tile) scans the slots' ids, gathers its expert's slots
// into a list in shared memory and runs a tile of the form on every
// `rowsPerTile` of them (the rows of x their slots name, the expert's
// weight and scale rows), so one launch does every expert's work from the
// routing on the device, with no host read and no per-expert launch. A
// slot whose id is no expert gets a row of zeros, as from the host kernel.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_LINEARMMA_H
#define CSA_CODEGEN_HOST_LINEARMMA_H

#include "codegen/host/LinearKernelParts.h"
#include "codegen/host/LinearKernels.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

namespace csa::codegen {

/// bf16 elements of a staged row in shared memory: a 32-block and 8 of
/// padding, so that a fragment load's 8 rows x 4 words fall in 32 banks.
inline constexpr int64_t kMmaRowStride = 40;

/// Bytes of a staged row of E4M3 codes in the E4M3 form (LinearMmaShape::fp8):
/// a 32-block and 16 of padding, so that a fragment load's 8 rows x 4 words
/// fall in 32 banks (rows 12 words apart).
inline constexpr int64_t kMmaFp8RowBytes = 48;

/// The grouped form runs from this many slots (the expert-id argument's
/// length) on. Its blocks walk K serially for their expert's slots (about
/// 150 us a launch at the released widths however few the slots, measured:
/// six slots, a decode step's), while the split-K grouped form reads an
/// expert's weights once a slot (about 3.5 us a slot), but its blocks of one
/// output tile run side by side for all slots, so slots of one expert read
/// its tile from L2: on an H100 (forty-third
/// session, h200-full at 4K) 96 slots (batch 16) stepped in 106 ms with the
/// split-K form against 149 ms with this one, and 384 slots (batch 64)
/// about alike (284 against 257-279 ms). Hence 512.
inline constexpr int64_t kGroupedMmaMinSlots = 512;

/// A tile of the form: rows x outputs, a warp per 32 x 32.
struct LinearMmaShape {
  int64_t rowsPerTile = 64, outputsPerTile = 128;
  /// 32-blocks of K staged between two barriers (each block's tiles of its
  /// own): more loads in flight and fewer barriers a tile. The blocks'
  /// partials still go into the accumulators one block after another, so the
  /// sums (and the bits) are the same whatever the count.
  int64_t kBlocksPerStage = 1;
  /// The next stage's global loads (act_quant's inputs, the weights' 16
  /// bytes) issued before this stage is staged and multiplied, carried in
  /// registers (FP8 block-scaled and FP4 linears); the same bits.
  bool prefetch = false;
  /// The grouped form (the routed experts, LinearKernelSpec::experts): a
  /// block per (expert, output tile) gathers the expert's slots.
  bool grouped = false;
  /// The E4M3 form (FP8 block-scaled and FP4 weights): the tiles hold the
  /// act_quant codes and the weights' E4M3 codes (FP4: each E2M1 value
  /// times 2^-6, exact) with their scales beside them as f32, and a warp
  /// multiplies a whole 32-block with one `mma.m16n8k32` of E4M3 operands;
  /// the block's partial is then scaled by the activation's and the
  /// weight's scale. Half the shared bytes, fragment loads and mma of the
  /// bf16 form; only the fp32 sums' order differs from it.
  bool fp8 = false;
  int64_t threads() const { return (rowsPerTile / 32) * (outputsPerTile / 32) * 32; }
  /// The staged activations and weight codes of a stage's 32-blocks (bf16;
  /// E4M3 codes and an f32 scale a row in the E4M3 form).
  int64_t tilesBytes() const {
    if (fp8)
      return kBlocksPerStage * (rowsPerTile + outputsPerTile) * (kMmaFp8RowBytes + 4);
    return kBlocksPerStage * (rowsPerTile + outputsPerTile) * kMmaRowStride * 2;
  }
  /// Grouped: the expert ids read in one step of the scan (4 a thread), and
  /// the slot list's capacity (fewer than a tile left over, plus a step's).
  int64_t scanSlots() const { return threads() * 4; }
  int64_t listCapacity() const { return rowsPerTile - 1 + scanSlots(); }
  /// The tiles, then (grouped) the slot list and its count (i32).
  int64_t sharedBytes() const {
    return tilesBytes() + (grouped ? (listCapacity() + 1) * 4 : 0);
  }
};

/// The tile for `spec`, or none when the form does not apply (see the file
/// comment): 64 rows and the most of 128, 64 or 32 outputs that divides a
/// group's outputs; the most 32-blocks a stage, up to `maxKBlocksPerStage`
/// (a power of two), that divides a group's K blocks and keeps the shared
/// memory within the static 48 KB. With `fp8`, the E4M3 form where the
/// weights are FP8 block-scaled or FP4 (the others keep the bf16 form).
std::optional<LinearMmaShape> linearMmaShape(const LinearKernelSpec &spec,
                                             int64_t maxKBlocksPerStage = 1, bool fp8 = false);

/// One warp-wide `mma.m16n8k16.row.col.f32.bf16.bf16.f32`: `a` 4 i32, `b` 2
/// i32 (two bf16 each, the lower index in the low half), `c` 4 f32, in
/// PTX's fragment layout; returns d's 4 f32.
using MmaBf16 = std::function<llvm::SmallVector<mlir::Value>(
    mlir::OpBuilder &, mlir::Location, mlir::ValueRange a, mlir::ValueRange b,
    mlir::ValueRange c)>;

/// One warp-wide `mma.m16n8k32.row.col.f32.e4m3.e4m3.f32`: `a` 4 i32 and
/// `b` 2 i32 of four E4M3 codes each (the lower k in the lower byte), `c` 4
/// f32, in PTX's fragment layout; returns d's 4 f32.
using MmaE4m3 = MmaBf16;

/// Two f32 values' E4M3 codes, RNE with saturation (act_quant's rounding),
/// the first in bits 0-7 of the i32, the second in bits 8-15.
using E4M3CodePair = std::function<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::Value,
                                               mlir::Value)>;

/// How the form's lanes are made: the tile indices (x: rows, y: outputs),
/// the thread in the block, the block barrier and the mma.
struct LinearMmaLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> rowTile, outputTile, thread;
  std::function<void(mlir::OpBuilder &, mlir::Location)> barrier;
  MmaBf16 mma;
  /// The E4M3 form's mma and its act_quant codes (empty: emitRoundToE4M3's
  /// integer arithmetic, then the code of the value).
  MmaE4m3 mmaE4m3;
  E4M3CodePair e4m3CodePair;
  /// shfl.sync.bfly of an f32 over the warp (the act_quant amax).
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::Value, int32_t)> shuffleXor;
  /// act_quant's E4M3 rounding by the GPU's cvt (emitActQuantPair); empty:
  /// integer arithmetic, as on the host.
  E4M3RoundPair e4m3RoundPair;
  /// Two E4M3 codes (the low and high byte of an i16) to f32: the GPU's
  /// cvt.rn.f16x2.e4m3x2 (as LinearSplitKLanes). Empty: decoded with
  /// integer arithmetic (decodeE4M3Arith), as on the host.
  std::function<std::pair<mlir::Value, mlir::Value>(mlir::OpBuilder &, mlir::Location,
                                                    mlir::Value)>
      e4m3PairToF32;
  unsigned weightAddressSpace = 1; ///< of the 16-byte weight loads
  /// The shared buffer: memref<sharedBytes() x i8> (the GPU's workgroup
  /// memory), viewed as the activation and the weight tile.
  mlir::Type sharedType;
};

/// Replaces the body of `fn` (a kernel of `spec` from buildLinearKernel)
/// with the tensor-core form for `shape`; rows past the end are skipped.
void buildLinearMmaBody(mlir::func::FuncOp fn, const LinearKernelSpec &spec,
                        const LinearMmaShape &shape, const LinearMmaLanes &lanes);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_LINEARMMA_H

//===- LinearSplitK.h - The split-K GPU form of csa.linear -------*- C++ -*-===//
//
// The decode form of a linear kernel (a few rows, weight-bandwidth bound):
// a block per (row, tile of `outputsPerBlock` outputs), or per (`rowsPerBlock`
// rows, tile) in its batch variant, which decodes each weight word once for
// all its rows (a batch decode step's rows otherwise each read and decode
// the whole weight, from L2 after the first). Grouped over experts (a row
// a slot, its expert's weight), the batch variant gathers: a block per
// (expert, tile) scans the slots' expert ids, lists its expert's slots in
// shared memory and runs them `rowsPerBlock` at a time, so that an
// expert's weight is read and decoded once for all its slots. The block's threads
// split K: thread t owns `wordsPerThread` consecutive 16-byte words of every
// weight row, keeps the activations those words multiply in registers (the
// FP8/FP4 act_quant of its own 32-blocks, done once), and walks the tile's
// outputs with one 16-byte load per word, several outputs' loads in flight
// at once. Each thread's partial of an output goes to shared memory and the
// block adds them in two steps.
//
// This form does not keep the host kernel's summation order, so its results
// are not the host kernel's bits: it meets the tolerance contract of a dot
// product instead (docs/semantics.md, "The tolerance contract"; the products
// and the act_quant are the host kernel's, only the order of the fp32 sum
// differs).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_LINEARSPLITK_H
#define CSA_CODEGEN_HOST_LINEARSPLITK_H

#include "codegen/host/LinearKernelParts.h"
#include "codegen/host/LinearKernels.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

namespace csa::codegen {

/// How a linear is split: `threads` threads a block (a multiple of 32), the
/// first `activeThreads` of which own `wordsPerThread` 16-byte words of a
/// weight row (`elementsPerWord` weights each) of its group's K; a block
/// computes `outputsPerBlock` outputs of one row.
struct LinearSplitKShape {
  int64_t threads = 0, activeThreads = 0, wordsPerThread = 0, elementsPerWord = 0,
          outputsPerBlock = 0;
  /// Rows a block computes (1: a block a row). A thread keeps every row's
  /// activations in registers and multiplies each decoded weight word by
  /// all of them; each row's sum is the one-row form's, term for term.
  int64_t rowsPerBlock = 1;
  /// The grouped batch variant (rowsPerBlock > 1 over experts): a block per
  /// (expert, tile), its slots gathered from the expert ids.
  bool gathered = false;
  /// Outputs whose weight loads a thread issues before their products (the
  /// bytes in flight that hide the memory's latency).
  int64_t outputsInFlight = 4;
  /// The shared memory the form declares: the partials (rows x outputs x
  /// threads f32), the second step's sums (rows x outputs x kSplitKParts
  /// f32) and, gathered, the slot list (threads + 1 i32).
  int64_t sharedBytes() const;
};

/// The outputs in flight a thread for `shape` (LinearSplitKShape's
/// outputsInFlight): 16 of its 16-byte words, 4 to 8 outputs. Measured in a
/// h200-full step on the H200 (bench/RESULTS.md, eighteenth session): 8
/// outputs in flight against 4 took `linear_fp8_block32_1280x32768` (2
/// words a thread) from 24.4 to 18.0 us, and `linear_fp8_block32_8192x5120`
/// (4 words) from 16.5 to 19.0 us.
inline int64_t linearSplitKOutputsInFlight(const LinearSplitKShape &shape) {
  // The batch variant: every row's activations are live across the outputs,
  // so fewer loads in flight keep the registers within reach.
  if (shape.rowsPerBlock > 1)
    return 4;
  const int64_t outputs = 16 / std::max<int64_t>(shape.wordsPerThread, 1);
  return outputs < 4 ? 4 : (outputs > 8 ? 8 : outputs);
}

/// The second reduction step adds each output's partials in this many parts.
inline constexpr int64_t kSplitKParts = 8;

/// Activations a thread of the batch variant keeps, over all its rows.
inline constexpr int64_t kSplitKMaxRowValues = 128;

/// The split of `spec` for a GPU of `multiprocessors` SMs, or none when the
/// form does not apply: a group's K must be a whole number of 16-byte words
/// (FP8 K % 32, FP4 K % 32, bf16 K % 8, f32 weights K % 4), a block's
/// outputs must lie in one group, and the threads fit in 1024. With
/// `maxRowsPerBlock` > 1, the batch variant (gathered when grouped over
/// experts): the most rows, a power of two up to it, whose activations fit
/// kSplitKMaxRowValues registers a thread and whose shared memory fits
/// `maxSharedBytes`; none when that is one row.
std::optional<LinearSplitKShape> linearSplitKShape(const LinearKernelSpec &spec,
                                                   int64_t multiprocessors = 132,
                                                   int64_t maxRowsPerBlock = 1,
                                                   int64_t maxSharedBytes = 48 * 1024);

/// Where the split-K form runs: the block's row and output tile, the
/// thread's index and the block barrier (GPU intrinsics, or host calls in
/// test/unit/codegen/GpuFormEmulationTest.cpp).
struct LinearSplitKLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> row, outputTile, thread;
  std::function<void(mlir::OpBuilder &, mlir::Location)> barrier;
  /// Two E4M3 codes (the low and high byte of an i16) to f32: the GPU's
  /// cvt.rn.f16x2.e4m3x2 (nvvm.convert.f8x2.to.f16x2). Empty: decoded with
  /// integer arithmetic (decodeE4M3Arith), as on the host.
  std::function<std::pair<mlir::Value, mlir::Value>(mlir::OpBuilder &, mlir::Location,
                                                    mlir::Value)>
      e4m3PairToF32;
  /// FP4 codes decoded two at a time through f16 bit patterns (exact; the
  /// GPU converts f16 to f32 in one instruction). Off: decodeE2M1Arith.
  bool e2m1ThroughF16 = false;
  /// FP4 codes decoded four at a time to E4M3 bytes by bit moves (exact:
  /// every E2M1 value times 2^-6 is an E4M3 value), then through
  /// e4m3PairToF32; fewer instructions a weight than the f16 route. Needs
  /// e4m3PairToF32; takes precedence over e2m1ThroughF16.
  bool e2m1ThroughE4m3 = false;
  /// act_quant's E4M3 rounding by the GPU's cvt (emitActQuantBlock); empty:
  /// integer arithmetic, as on the host.
  E4M3RoundPair e4m3RoundPair;
  /// The address space of the weight's 16-byte loads (1: NVPTX global; 0 on
  /// the host).
  unsigned weightAddressSpace = 1;
  /// Brings the cache line holding a byte (an LLVM pointer in
  /// weightAddressSpace) into L2: `prefetch.global.L2`. Empty: nothing is
  /// prefetched (the host). Set, a block first asks for all its weight rows
  /// and their scales at once, so that they stream in while it loads and
  /// quantizes the activations. A hint only: L2 is where the GPU's
  /// writes meet, so a line brought early is never stale.
  std::function<void(mlir::OpBuilder &, mlir::Location, mlir::Value)> prefetchL2;
  /// Waits for the grids the kernel depends on (griddepcontrol.wait, then
  /// launch_dependents). Set, the form calls it itself and the back end
  /// emits no wait at the kernel's entry: an ungrouped linear prefetches
  /// its rows before it (no upstream kernel writes a weight), so they
  /// stream in while the kernel before it still runs; a grouped one waits
  /// first (its expert ids come from upstream).
  std::function<void(mlir::OpBuilder &, mlir::Location)> dependencyWait;
  /// The gathered variant's slot list, appended after the sums:
  /// memref<(threads + 1) x i32> in shared memory (a scan step's slots of
  /// the block's expert, then their count).
  mlir::Type sharedListType;
  /// Appended to the kernel's arguments, in the block's shared memory:
  /// memref<(rowsPerBlock * outputsPerBlock) x threads x f32>, then
  /// memref<(rowsPerBlock * outputsPerBlock) x kSplitKParts x f32> (row
  /// rho's output o at rho * outputsPerBlock + o).
  mlir::Type sharedPartialsType, sharedSumsType;
};

/// Replaces the body of `fn` (a kernel of `spec` from buildLinearKernel)
/// with the split-K form of `shape` (from linearSplitKShape). Rows are
/// grid.x (`rowsPerBlock` a block: rows past the last are computed from the
/// last row and not stored; gathered, grid.x is the expert); outputs past
/// the end are computed from the last weight row and not stored.
void buildLinearSplitKBody(mlir::func::FuncOp fn, const LinearKernelSpec &spec,
                           const LinearSplitKShape &shape, const LinearSplitKLanes &lanes);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_LINEARSPLITK_H

//===- LinearKernels.h - Host kernels of csa.linear --------------*- C++ -*-===//
//
// Generated kernels for `csa.linear`, y = x @ W^T, one per weight format the
// released model uses, each bit-exact with `reference::linear`:
//
//   * FP8 (E4M3 codes + 32x32 UE8M0 block scales) and FP4 (packed E2M1 +
//     UE8M0 per 32 along K) first quantize-dequantize every activation row
//     per 32 channels (act_quant, UE8M0 power-of-two scale, E4M3 RNE with
//     saturation, back to bf16), then sum an fp32 partial per 32-block of K
//     in K order and add the partials in order; bf16 output.
//   * BF16: an fp32 partial per 32-block of K, the partials added in order
//     (reference::kLinearBlock, the same order as FP8/FP4), bf16 output.
//   * F32: the same in fp32 with an fp32 output (the weight is still stored
//     as bf16 unless `weightF32`).
//   * Grouped (BF16/F32, `groups` G > 1, the block-diagonal `wo_a`): output
//     j of group g = j / (N/G) reads input channels [g*K/G, (g+1)*K/G) and
//     weight row j of width K/G, summed in 32-block partials likewise.
//
// Weights are passed in their checkpoint bytes; the E4M3 and E2M1 decode
// tables are embedded in the module as constant `memref.global`s. K and N are
// static, the number of rows is dynamic. Every kernel carries
// `llvm.emit_c_interface` (call `_mlir_ciface_<name>`).
//
// Kernel signatures (x/y element type bf16 unless noted):
//   BF16/F32 : name(x: memref<?xKxT>, w: memref<N x K/G x bf16|f32>,
//                   y: memref<?xNxbf16|f32>)
//   FP8      : name(x: memref<?xKxT>, w: memref<NxKxi8>,
//                   scale: memref<ceil(N/32) x ceil(K/32) x i8>,
//                   y: memref<?xNxbf16>)
//   FP4      : name(x: memref<?xKxT>, w: memref<N x K/2 x i8>,
//                   scale: memref<N x K/32 x i8>, y: memref<?xNxbf16>)
//   grouped  : name(x: memref<?xKxT>, ids: memref<?xi32>,
//                   w: memref<E*N x ...>, scale: memref<E*S x K/32 x i8>,
//                   y: memref<?xNxbf16>) for FP8/FP4 with `experts` E
//                   (S: the scale rows of one expert, N or ceil(N/32))
//   FP8AsBF16: name(x: memref<?xKxT>, w: memref<N x K/G x i8>,
//                   scale: memref<ceil(N/32) x ceil(K/G/32) x i8>,
//                   y: memref<?xNxbf16>), grouped like BF16; the weight is
//                   decoded exactly (E4M3 x UE8M0) and x is not quantized
// where T is bf16, or f32 with `inputF32`.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_LINEARKERNELS_H
#define CSA_CODEGEN_HOST_LINEARKERNELS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace csa::codegen {

/// The weight formats of `csa.linear` (one to one with csa::WeightFormat:
/// bf16, f32, fp8_block32, fp4_e2m1).
enum class LinearFormat { BF16, F32, FP8Block32, FP4E2M1, FP8AsBF16 };

struct LinearKernelSpec {
  LinearFormat format = LinearFormat::BF16;
  int64_t inFeatures = 0;  ///< K (a multiple of 32 for FP8/FP4)
  int64_t outFeatures = 0; ///< N
  /// Block-diagonal groups (BF16/F32 only); K and N must divide by it.
  int64_t groups = 1;
  /// Activations are fp32 instead of bf16 (the output type is unchanged).
  bool inputF32 = false;
  /// BF16/F32 formats: the weight bytes are fp32 (reference
  /// `Weight::storedF32`) instead of bf16.
  bool weightF32 = false;
  /// Rows per tile (the op's #csa.row_tile): each weight element is
  /// decoded once per tile of rows. Results do not depend on it.
  int64_t rowTile = 1;
  /// FP8/FP4 only: the routed experts' matrices of one projection in one
  /// launch (MoE decode). `experts` E > 0 experts' weights (and scales)
  /// are stacked along N, and the kernel takes one expert id per output row
  /// (a slot): y[r] = x[r / slotsPerRow] @ W[ids[r]]^T. An id outside
  /// [0, E) gives a row of zeros. Rows are not tiled.
  int64_t experts = 0;
  int64_t slotsPerRow = 1;
};

/// Builds `name` for `spec` (signatures in the file comment). Returns a null
/// FuncOp, after emitting an error on the module, when the spec is invalid.
mlir::func::FuncOp buildLinearKernel(mlir::ModuleOp module,
                                     const std::string &name,
                                     const LinearKernelSpec &spec);

/// The attribute on every linear kernel that records its spec, so later
/// stages (the NVPTX backend) can rebuild it in another form.
inline constexpr const char *kLinearSpecAttr = "csa.linear_spec";

/// The spec a kernel built by buildLinearKernel carries (row tile 1).
std::optional<LinearKernelSpec> linearSpecOf(mlir::func::FuncOp fn);

/// FP8/FP4 kernels quantize the activation row once for all its outputs:
/// the per-output form keeps it in a row buffer shared by the lanes.
bool linearNeedsSharedRow(const LinearKernelSpec &spec);

/// The number of 32-block partials of one output (K / G rounded up).
int64_t linearPartials(const LinearKernelSpec &spec);

/// The padding after each 32-block of the per-output form's shared row.
inline constexpr int64_t kLinearRowPad = 2;

/// The per-output form: lanes per output (a warp), each computing the
/// partials of every 32nd 32-block of K.
inline constexpr int64_t kPartialLanes = 32;
/// The per-output form's FP8/FP4 lanes load this many of their 32-blocks
/// (scales and codes) before computing the first.
inline constexpr int64_t kPrefetchBlocks = 4;

/// How the per-output form is spread over parallel lanes (GPU threads): a
/// group of `lanes` lanes works on row `row`; `barrier` synchronizes it.
/// Lanes [32i, 32i + 32) compute output `firstOutput + i` (lanes() must be
/// a multiple of kPartialLanes).
struct LinearLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> row,
      firstOutput, lane, lanes;
  std::function<void(mlir::OpBuilder &, mlir::Location)> barrier;
  /// The address space of the FP8/FP4 weight's 16-byte loads (1: NVPTX
  /// global; 0 where the form runs on the host, in tests).
  unsigned weightAddressSpace = 1;
  /// Appended to the kernel's arguments, in the group's shared memory: the
  /// quantized row (FP8/FP4 only), memref<K / 32 x (32 + kLinearRowPad) x
  /// bf16> flattened (each 32-block padded, so that lanes reading the same
  /// element of neighbouring blocks use different banks), then the partials,
  /// memref<(lanes / 32) x linearPartials(spec) x f32>.
  mlir::Type sharedRowType, sharedPartialsType;
};

/// Replaces the body of `fn` (a kernel of `spec` from buildLinearKernel)
/// with the per-output form, in the host kernel's exact operation order (so
/// the bits are the same): every linear sums an fp32 partial per 32-block of
/// K and adds the partials in order. FP8/FP4 lanes first quantize the row's
/// 32-blocks into the shared row and meet at a barrier; then each lane of an
/// output's warp computes every 32nd partial into the shared partials; after
/// a barrier the warp's first lane adds them in order. Rows or outputs past
/// the end are skipped.
void buildLinearPerOutputBody(mlir::func::FuncOp fn,
                              const LinearKernelSpec &spec,
                              const LinearLanes &lanes);

/// The row-tiled form (prefill): a group of `outputsPerTile` lanes computes
/// a tile of `rowsPerTile` rows x `outputsPerTile` outputs, a lane per
/// output. K runs in chunks of `chunk` elements (a multiple of 32): the
/// lanes stage the tile's activations of the chunk in shared memory
/// (`sharedActType`, memref<chunk x rowsPerTile x f32>; FP8/FP4 rows
/// act_quant-ed there, once per tile), meet at a barrier, and each lane
/// decodes its weight row's elements once and applies each to all the tile's
/// rows. A lane keeps each row's fp32 sum in registers and adds its 32-block
/// partials in K order, as the host kernel does, so the bits are the same.
struct LinearTileLanes {
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)> rowTile,
      outputTile, lane;
  std::function<void(mlir::OpBuilder &, mlir::Location)> barrier;
  int64_t rowsPerTile = 8, outputsPerTile = 128, chunk = 1024;
  unsigned weightAddressSpace = 1; ///< as LinearLanes
  mlir::Type sharedActType;
};

/// The outputs per tile the tiled form can use for `spec` with at most
/// `maxOutputs` lanes: a multiple of 32 that divides a group's outputs (every
/// output of a tile reads the same input channels); 0 when there is none.
int64_t linearTileOutputs(const LinearKernelSpec &spec, int64_t maxOutputs);

/// Replaces the body of `fn` (a kernel of `spec` from buildLinearKernel)
/// with the row-tiled form (LinearTileLanes); rows and outputs past the end
/// are skipped.
void buildLinearTiledBody(mlir::func::FuncOp fn, const LinearKernelSpec &spec,
                          const LinearTileLanes &lanes);

/// `name(x: memref<?xKxbf16>, y: memref<?xKxbf16>)`: y = act_quant(x, 32,
/// ue8m0) dequantized back to bf16, per row (reference `fp8QuantDequant`);
/// the activation step of the FP8/FP4 linear kernels. K % 32 == 0.
mlir::func::FuncOp buildFp8ActQuantKernel(mlir::ModuleOp module,
                                          const std::string &name, int64_t k);

/// `name(x: memref<?xf32>, y: memref<?xf32>)`: y = decodeE4M3(encodeE4M3(x))
/// elementwise, computed with integer operations (the rounding step of the
/// activation quantization, exposed for exhaustive testing).
mlir::func::FuncOp buildE4M3RoundKernel(mlir::ModuleOp module,
                                        const std::string &name);

/// `name(codes: memref<?xi8>, values: memref<?xf32>)`: each code decoded
/// with integer arithmetic instead of a table (E4M3, or E2M1 of the low 4
/// bits with `fp4`), as the row-tiled form's 16-byte weight loads do; equal
/// to kE4M3Values / kE2M1Values (checked for every code).
mlir::func::FuncOp buildCodeDecodeKernel(mlir::ModuleOp module,
                                         const std::string &name, bool fp4);

/// Emits the E4M3 round trip of an f32 value: RNE to the E4M3 grid with
/// gradual underflow (quantum 2^-9), saturation to +-448 (infinities too),
/// the sign of zero kept, NaN -> +NaN (0x7FC00000), all as i32 arithmetic.
mlir::Value emitRoundToE4M3(mlir::OpBuilder &b, mlir::Location loc,
                            mlir::Value x);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_LINEARKERNELS_H

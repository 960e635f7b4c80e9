//===- MoeKernels.h - Generated kernels for the MoE block ---------*- C++ -*-===//
//
// The non-GEMM parts of csa.moe, bit-exact with the reference
// (models/reference/Kernels.h routeToken, swiglu): routing, gathering a
// routed expert's rows, the clamped SwiGLU, the fp32 accumulation of expert
// outputs in ascending expert id, and the final bf16 sum with the shared
// expert. The expert projections are linear kernels.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_MOEKERNELS_H
#define CSA_CODEGEN_HOST_MOEKERNELS_H

#include "codegen/host/GpuFormLanes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace csa::codegen {

/// `name(logits: memref<?xExf32>, bias: memref<Exf32>, ids: memref<?xKxi32>,
/// weights: memref<?xKxf32>)`.
mlir::func::FuncOp buildMoeRouteKernel(mlir::ModuleOp module,
                                       const std::string &name, int64_t experts,
                                       int64_t topK, float routeScale);

/// The attribute on every routing kernel, {experts, top_k, route_scale}: the
/// NVPTX back end rebuilds it as the block form.
inline constexpr const char *kMoeRouteAttr = "csa.moe_route";

/// How the routing's block form is spread: a block per row, a thread per
/// expert (`threads` >= experts).
struct MoeRouteLanes : BlockRowLanes {
  /// Appended to the kernel's arguments, in shared memory: memref<2 x E x
  /// f32> (the scores, then the scores plus the bias) and memref<(E + K + 1)
  /// x i32> (taken marks, the chosen ids in order, a NaN flag).
  mlir::Type sharedScoresType, sharedIdsType;
};

/// Replaces the body of `fn` (from buildMoeRouteKernel) with the block form,
/// the host kernel's bits: each thread computes its expert's score with the
/// host's operations, ranks it against the others (higher first, ties to the
/// lower id: the order the host's repeated argmax picks them in), and the
/// first K ranks are the choice; thread 0 adds their scores in that order and
/// writes the weights. If any score is NaN (where a rank is not the host's
/// pick) thread 0 runs the host's repeated argmax instead. A thread per row
/// walked all experts K + 1 times from local memory (42 us a decode step's
/// routing on the H200).
void buildMoeRouteBlockBody(mlir::func::FuncOp fn, int64_t experts, int64_t topK,
                            float routeScale, const MoeRouteLanes &lanes);

/// `name(x: memref<?xDxbf16>, rowIndex: memref<?xi32>, rows: memref<?xDxbf16>)`:
/// rows[i] = x[rowIndex[i]], the tokens routed to one expert (the runtime
/// lists them from the routing, in token order); an index past x's rows
/// copies nothing.
mlir::func::FuncOp buildMoeGatherKernel(mlir::ModuleOp module,
                                        const std::string &name, int64_t dim);

/// `name(gate: memref<?xIxbf16>, up: memref<?xIxbf16>, weight: memref<?xf32>,
/// h: memref<?xIxbf16>)`. With `paired`, gate and up are the two halves of
/// one row, as the fused gate/up projection writes them:
/// `name(gate_up: memref<?x(2I)xbf16>, weight: memref<?xf32>, h: memref<?xIxbf16>)`.
mlir::func::FuncOp buildSwigluKernel(mlir::ModuleOp module,
                                     const std::string &name, int64_t inter,
                                     float limit, bool paired = false);

/// `name(y: memref<?xDxf32>, out: memref<?xDxbf16>, rowIndex: memref<?xi32>)`:
/// y[rowIndex[r]] += out[r].
mlir::func::FuncOp buildMoeAccumulateKernel(mlir::ModuleOp module,
                                            const std::string &name,
                                            int64_t dim);

/// `name(y: memref<?xDxf32>, shared: memref<?xDxbf16>, out: memref<?xDxbf16>)`:
/// out = bf16(y + shared).
mlir::func::FuncOp buildMoeFinishKernel(mlir::ModuleOp module,
                                        const std::string &name, int64_t dim);

/// `name(o: memref<?xKxDxbf16>, ids: memref<?xKxi32>, shared: memref<?xDxbf16>,
/// out: memref<?xDxbf16>)`: the routed experts' outputs of a grouped MoE
/// launch (o[r][k], slot r * K + k) combined as the per-expert launches
/// would: out[r] = bf16((0 + o of the row's slots in ascending (id, slot),
/// in fp32) + shared[r]); slots whose id is outside [0, experts) are left
/// out, as the per-expert lists leave them.
/// The attribute on a kernel with an argument of expert ids, {argument,
/// limit}: kernels.json names it, so that csa-gpu-check draws ids in
/// [-1, limit) for it instead of leaving the kernel unrun.
inline constexpr const char *kExpertIdsAttr = "csa.expert_ids";

mlir::func::FuncOp buildMoeCombineKernel(mlir::ModuleOp module,
                                         const std::string &name, int64_t dim,
                                         int64_t topK, int64_t experts);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_MOEKERNELS_H

//===- NvvmLanes.cpp - What the GPU forms' lanes are made of -------------===//
#include "codegen/gpu/NvvmLanes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include <array>

using namespace mlir;

namespace csa::codegen::nvvm {

// The thread and block indices the GPU forms' lanes are made of.
Value blockX(OpBuilder &b, Location loc) {
  return gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
}
Value blockY(OpBuilder &b, Location loc) {
  return gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
}
Value gridY(OpBuilder &b, Location loc) {
  return gpu::GridDimOp::create(b, loc, gpu::Dimension::y);
}
Value threadX(OpBuilder &b, Location loc) {
  return gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
}
void blockBarrier(OpBuilder &b, Location loc) { gpu::BarrierOp::create(b, loc); }
void prefetchL2(OpBuilder &b, Location loc, Value ptr) {
  NVVM::PrefetchOp::create(b, loc,
                           NVVM::PrefetchCacheLevelAttr::get(b.getContext(),
                                                             NVVM::PrefetchCacheLevel::L2),
                           /*evictPriority=*/nullptr, ptr, /*predicate=*/Value());
}
void dependencyWait(OpBuilder &b, Location loc) {
  NVVM::GriddepcontrolOp::create(b, loc, NVVM::GridDepActionKind::wait);
  NVVM::GriddepcontrolOp::create(b, loc, NVVM::GridDepActionKind::launch_dependents);
}
/// shfl.sync.bfly over the whole warp.
Value shuffleXorLane(OpBuilder &b, Location loc, Value v, int32_t mask) {
  return gpu::ShuffleOp::create(b, loc, v, arith::ConstantIntOp::create(b, loc, mask, 32),
                                arith::ConstantIntOp::create(b, loc, 32, 32),
                                gpu::ShuffleMode::XOR)
      .getShuffleResult();
}

/// Two E4M3 codes (an i16) to f32: cvt.rn.f16x2.e4m3x2 (sm_89 on), then
/// the exact f16 -> f32.
std::pair<Value, Value> e4m3PairToF32(OpBuilder &b, Location loc, Value pair) {
  Value codes = LLVM::BitcastOp::create(b, loc, VectorType::get({2}, b.getI8Type()), pair);
  Value halves = NVVM::ConvertF8x2ToF16x2Op::create(
      b, loc, VectorType::get({2}, b.getF16Type()), codes, b.getBoolAttr(false),
      TypeAttr::get(b.getType<Float8E4M3FNType>()));
  auto half = [&](int32_t i) -> Value {
    Value h = LLVM::ExtractElementOp::create(b, loc, halves,
                                             LLVM::ConstantOp::create(b, loc, b.getI32Type(), i));
    return arith::ExtFOp::create(b, loc, b.getF32Type(), h);
  };
  return {half(0), half(1)};
}

/// act_quant's rounding of two f32 by cvt.rn.satfinite.e4m3x2.f32 (`hi` to
/// the high byte), back through cvt.rn.f16x2.e4m3x2: exact, RNE with
/// saturation, as the host's integer rounding.
std::pair<Value, Value> e4m3RoundPair(OpBuilder &b, Location loc, Value lo, Value hi) {
  MLIRContext *ctx = b.getContext();
  Value packed = NVVM::ConvertF32x2ToF8x2Op::create(
      b, loc, b.getI16Type(), hi, lo, NVVM::FPRoundingModeAttr::get(ctx, NVVM::FPRoundingMode::RN),
      NVVM::SaturationModeAttr::get(ctx, NVVM::SaturationMode::SATFINITE), b.getBoolAttr(false),
      TypeAttr::get(b.getType<Float8E4M3FNType>()));
  return e4m3PairToF32(b, loc, packed);
}

/// One warp-wide mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32.
SmallVector<Value> mmaBf16(OpBuilder &b, Location loc, ValueRange a, ValueRange bw,
                           ValueRange c) {
  Type f32 = b.getF32Type();
  auto result = LLVM::LLVMStructType::getLiteral(b.getContext(), {f32, f32, f32, f32});
  auto mma = NVVM::MmaOp::create(
      b, loc, result, a, bw, c, ArrayRef<int64_t>{16, 8, 16}, std::nullopt, std::nullopt,
      std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16, NVVM::MMATypes::bf16},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
  SmallVector<Value> d;
  for (int64_t i = 0; i < 4; ++i)
    d.push_back(LLVM::ExtractValueOp::create(b, loc, mma.getRes(), ArrayRef<int64_t>{i}));
  return d;
}

/// One warp-wide mma.sync.m16n8k32.row.col.f32.e4m3.e4m3.f32: LLVM's
/// intrinsic called by name (nvvm.mma.sync's verifier takes E4M3 operands
/// only in the sm_100 shapes; the intrinsic is sm_89's, PTX 8.4).
SmallVector<Value> mmaE4m3(OpBuilder &b, Location loc, ValueRange a, ValueRange bw,
                           ValueRange c) {
  Type f32 = b.getF32Type();
  auto result = LLVM::LLVMStructType::getLiteral(b.getContext(), {f32, f32, f32, f32});
  SmallVector<Value> operands(a.begin(), a.end());
  operands.append(bw.begin(), bw.end());
  operands.append(c.begin(), c.end());
  auto mma = LLVM::CallIntrinsicOp::create(
      b, loc, result, b.getStringAttr("llvm.nvvm.mma.m16n8k32.row.col.f32.e4m3.e4m3.f32"),
      operands);
  SmallVector<Value> d;
  for (int64_t i = 0; i < 4; ++i)
    d.push_back(LLVM::ExtractValueOp::create(b, loc, mma.getResult(0), ArrayRef<int64_t>{i}));
  return d;
}

Value e4m3CodePair(OpBuilder &b, Location loc, Value lo, Value hi) {
  MLIRContext *ctx = b.getContext();
  Value packed = NVVM::ConvertF32x2ToF8x2Op::create(
      b, loc, b.getI16Type(), hi, lo, NVVM::FPRoundingModeAttr::get(ctx, NVVM::FPRoundingMode::RN),
      NVVM::SaturationModeAttr::get(ctx, NVVM::SaturationMode::SATFINITE), b.getBoolAttr(false),
      TypeAttr::get(b.getType<Float8E4M3FNType>()));
  return arith::ExtUIOp::create(b, loc, b.getI32Type(), packed);
}

/// A block of `threads` per row: blockIdx.x, threadIdx.x, the block barrier.
BlockRowLanes blockRowLanes(int64_t threads) {
  BlockRowLanes lanes;
  lanes.row = blockX;
  lanes.thread = threadX;
  lanes.threads = threads;
  lanes.barrier = blockBarrier;
  return lanes;
}

SplitGridLanes splitGridLanes(int64_t splits) {
  auto splitsConst = [splits](OpBuilder &b, Location loc) -> Value {
    return arith::ConstantIndexOp::create(b, loc, splits);
  };
  SplitGridLanes lanes;
  lanes.outer = [splitsConst](OpBuilder &b, Location loc) -> Value {
    return arith::DivUIOp::create(b, loc, blockY(b, loc), splitsConst(b, loc));
  };
  lanes.split = [splitsConst](OpBuilder &b, Location loc) -> Value {
    return arith::RemUIOp::create(b, loc, blockY(b, loc), splitsConst(b, loc));
  };
  lanes.fence = [](OpBuilder &b, Location loc) {
    NVVM::MembarOp::create(b, loc, NVVM::MemScopeKind::GPU);
  };
  return lanes;
}

/// The global thread index (x) as an index value.
Value globalThreadId(OpBuilder &b, Location loc) {
  Value block = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value dim = gpu::BlockDimOp::create(b, loc, gpu::Dimension::x);
  Value thread = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  return arith::AddIOp::create(b, loc,
                               arith::MulIOp::create(b, loc, block, dim),
                               thread);
}

} // namespace csa::codegen::nvvm

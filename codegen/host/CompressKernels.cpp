//===- CompressKernels.cpp - Generated kernels for the compressor --------===//
#include "codegen/host/CompressKernels.h"

#include "codegen/host/KernelBuilder.h"

#include <cmath>

using namespace mlir;

namespace csa::codegen {

func::FuncOp buildCompressPoolKernel(ModuleOp module, const std::string &name,
                                     int64_t ratio, int64_t dim) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type f32 = b.getF32Type(), i64 = b.getI64Type();
  auto rows = MemRefType::get({ShapedType::kDynamic, dim}, f32);
  auto state = MemRefType::get({ratio, dim}, f32);
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {rows, rows, state, state, i64,
       MemRefType::get({ShapedType::kDynamic, dim}, b.getBF16Type())});
  KernelBuilder k(b, loc);
  Value kv = fn.getArgument(0), score = fn.getArgument(1),
        stateKv = fn.getArgument(2), stateScore = fn.getArgument(3),
        position = fn.getArgument(4), out = fn.getArgument(5);
  Value ratioI64 = arith::ConstantIntOp::create(b, loc, i64, ratio);
  // Channels are independent (their own state slots, their own output
  // column), so the channel loop is outermost and each channel walks the rows
  // in order: the GPU form gives each channel a thread (launch rule
  // "channels") with the same operations in the same order.
  k.loop(dim, [&](Value ch) {
    // The output row the next completed group goes to.
    k.reduce(k.idx(0), k.dim(kv, 0), k.idx(0), [&](Value i, Value next) -> Value {
      Value p = arith::AddIOp::create(
          b, loc, position, arith::IndexCastOp::create(b, loc, i64, i));
      Value slot = arith::IndexCastOp::create(
          b, loc, b.getIndexType(), arith::RemSIOp::create(b, loc, p, ratioI64));
      k.store(k.load(kv, {i, ch}), stateKv, {slot, ch});
      k.store(k.load(score, {i, ch}), stateScore, {slot, ch});
      Value complete = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                             slot, k.idx(ratio - 1));
      auto ifOp = scf::IfOp::create(b, loc, TypeRange{b.getIndexType()}, complete,
                                    /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(ifOp.thenBlock());
        Value mx = k.reduce(ratio, k.f32(-INFINITY), [&](Value t, Value acc) {
          return k.max(acc, k.load(stateScore, {t, ch}));
        });
        Value denom = k.reduce(ratio, k.f32(0.f), [&](Value t, Value acc) {
          return k.add(acc, k.exp(k.sub(k.load(stateScore, {t, ch}), mx)));
        });
        Value pooled = k.reduce(ratio, k.f32(0.f), [&](Value t, Value acc) {
          Value w = k.div(k.exp(k.sub(k.load(stateScore, {t, ch}), mx)), denom);
          return k.add(acc, k.mul(k.load(stateKv, {t, ch}), w));
        });
        k.storeBf16(pooled, out, {next, ch});
        scf::YieldOp::create(b, loc, ValueRange{k.addi(next, k.idx(1))});
        b.setInsertionPointToStart(ifOp.elseBlock());
        scf::YieldOp::create(b, loc, ValueRange{next});
      }
      return ifOp.getResult(0);
    });
  });
  k.finish();
  return fn;
}

} // namespace csa::codegen

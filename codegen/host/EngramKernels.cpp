//===- EngramKernels.cpp - Generated kernels for Engram -------------------===//
#include "codegen/host/EngramKernels.h"

#include "codegen/host/KernelBuilder.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;

namespace csa::codegen {

namespace {

/// A private constant i64 table, read with memref.get_global.
Value constantTable(OpBuilder &b, ModuleOp module, Location loc,
                    const std::string &name, const std::vector<int64_t> &data) {
  auto type = MemRefType::get({int64_t(data.size())}, b.getI64Type());
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(module.getBody(), module.getBody()->begin());
    memref::GlobalOp::create(
        b, loc, name, b.getStringAttr("private"), type,
        DenseElementsAttr::get(
            RankedTensorType::get({int64_t(data.size())}, b.getI64Type()),
            ArrayRef<int64_t>(data)),
        /*constant=*/true, /*alignment=*/nullptr);
  }
  return memref::GetGlobalOp::create(b, loc, type, name);
}

} // namespace

func::FuncOp buildEngramHashKernel(ModuleOp module, const std::string &name,
                                   const EngramHashLayout &layout) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type i64 = b.getI64Type();
  const int64_t cols = (layout.maxNgram - 1) * layout.heads;
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic}, b.getI32Type()),
       MemRefType::get({ShapedType::kDynamic}, i64), i64, i64,
       MemRefType::get({ShapedType::kDynamic, cols}, i64)});
  KernelBuilder k(b, loc);
  Value tokens = fn.getArgument(0), map = fn.getArgument(1),
        base = fn.getArgument(2), start = fn.getArgument(3),
        ids = fn.getArgument(4);
  Value multipliers =
      constantTable(b, module, loc, name + "_multipliers", layout.multipliers);
  Value primes = constantTable(b, module, loc, name + "_primes", layout.primes);
  Value offsets = constantTable(b, module, loc, name + "_offsets", layout.offsets);
  Value zero64 = arith::ConstantIntOp::create(b, loc, i64, 0);
  Value pad = arith::ConstantIntOp::create(b, loc, i64, layout.padCompressedId);
  Value shifted =
      memref::AllocaOp::create(b, loc, MemRefType::get({layout.maxNgram}, i64));

  auto toIndex = [&](Value v) -> Value {
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
  };
  k.loop(k.idx(0), k.dim(ids, 0), [&](Value row) {
    Value p = arith::AddIOp::create(
        b, loc, start, arith::IndexCastOp::create(b, loc, i64, row));
    // The compressed ids at shifts 0..maxNgram-1; pads before position 0.
    k.loop(layout.maxNgram, [&](Value s) {
      Value q = arith::SubIOp::create(
          b, loc, p, arith::IndexCastOp::create(b, loc, i64, s));
      Value before = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                           q, zero64);
      auto pick = scf::IfOp::create(b, loc, TypeRange{i64}, before,
                                    /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(pick.thenBlock());
        scf::YieldOp::create(b, loc, pad);
        b.setInsertionPointToStart(pick.elseBlock());
        Value at = toIndex(arith::SubIOp::create(b, loc, q, base));
        Value raw = arith::ExtSIOp::create(b, loc, i64, k.load(tokens, at));
        scf::YieldOp::create(b, loc, k.load(map, toIndex(raw)));
      }
      k.store(pick.getResult(0), shifted, s);
    });
    // Running XOR of token x multiplier; per order and head, % prime +
    // offset. uint64 wraparound is exact here (products stay below 2^63).
    Value rolling = arith::MulIOp::create(b, loc, k.load(shifted, k.idx(0)),
                                          k.load(multipliers, k.idx(0)));
    for (int64_t shift = 1; shift < layout.maxNgram; ++shift) {
      rolling = arith::XOrIOp::create(
          b, loc, rolling,
          arith::MulIOp::create(b, loc, k.load(shifted, k.idx(shift)),
                                k.load(multipliers, k.idx(shift))));
      Value current = rolling;
      k.loop(layout.heads, [&](Value head) {
        Value col = k.addi(k.idx((shift - 1) * layout.heads), head);
        Value id = arith::AddIOp::create(
            b, loc, arith::RemUIOp::create(b, loc, current, k.load(primes, col)),
            k.load(offsets, col));
        k.store(id, ids, {row, col});
      });
    }
  });
  k.finish();
  return fn;
}

} // namespace csa::codegen

//===- EngramKernels.cpp - Generated kernels for Engram -------------------===//
#include "codegen/host/EngramKernels.h"

#include "codegen/host/KernelBuilder.h"
#include "runtime/numerics/Numerics.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <algorithm>
#include <array>
#include <cmath>

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
  Value pad = k.load(map, k.idx(layout.padId));
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

func::FuncOp buildEngramGatherKernel(ModuleOp module, const std::string &name,
                                     int64_t columns, int64_t headDim) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type i8 = b.getI8Type(), i32 = b.getI32Type(), f32 = b.getF32Type();
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, columns}, b.getI64Type()),
       MemRefType::get({ShapedType::kDynamic, headDim}, i8),
       MemRefType::get({ShapedType::kDynamic, headDim / 32}, i8),
       MemRefType::get({ShapedType::kDynamic, columns * headDim}, b.getBF16Type())});
  KernelBuilder k(b, loc);
  Value ids = fn.getArgument(0), table = fn.getArgument(1),
        scale = fn.getArgument(2), rows = fn.getArgument(3);
  // E4M3 values by code, as a constant table.
  std::vector<float> e4m3(numerics::kE4M3Values.begin(), numerics::kE4M3Values.end());
  auto tableType = MemRefType::get({256}, f32);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(module.getBody(), module.getBody()->begin());
    memref::GlobalOp::create(
        b, loc, name + "_e4m3", b.getStringAttr("private"), tableType,
        DenseElementsAttr::get(RankedTensorType::get({256}, f32),
                               ArrayRef<float>(e4m3)),
        /*constant=*/true, /*alignment=*/nullptr);
  }
  Value values = memref::GetGlobalOp::create(b, loc, tableType, name + "_e4m3");
  auto code = [&](Value byte) -> Value {
    return arith::IndexCastUIOp::create(
        b, loc, b.getIndexType(), arith::ExtUIOp::create(b, loc, i32, byte));
  };
  k.loop(k.idx(0), k.dim(ids, 0), [&](Value n) {
    k.loop(columns, [&](Value col) {
      Value id = arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                            k.load(ids, {n, col}));
      k.loop(headDim / 32, [&](Value g) {
        // UE8M0: byte e is 2^(e - 127): e << 23 as f32; e = 0 is 2^-127.
        Value e = arith::ExtUIOp::create(b, loc, i32, k.load(scale, {id, g}));
        Value isZero = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::eq, e,
            arith::ConstantIntOp::create(b, loc, i32, 0));
        Value bits = arith::SelectOp::create(
            b, loc, isZero, arith::ConstantIntOp::create(b, loc, i32, 0x00400000),
            arith::ShLIOp::create(b, loc, e,
                                  arith::ConstantIntOp::create(b, loc, i32, 23)));
        Value s = arith::BitcastOp::create(b, loc, f32, bits);
        k.loop(32, [&](Value j) {
          Value c = k.addi(k.muli(g, k.idx(32)), j);
          Value v = k.mul(k.load(values, code(k.load(table, {id, c}))), s);
          k.storeBf16(v, rows, {n, k.addi(k.muli(col, k.idx(headDim)), c)});
        });
      });
    });
  });
  k.finish();
  return fn;
}

namespace {

/// The gate of one stream from its three sums (sum h^2, sum key^2, sum
/// h * weight * key), in the host kernel's operations.
Value engramGateOfSums(KernelBuilder &k, OpBuilder &b, Location loc, Value hh, Value kk,
                       Value hk, int64_t dim, float eps) {
  const float invSqrtD = float(std::pow(double(dim), -0.5));
  Value d = k.f32(float(dim)), epsV = k.f32(eps);
  Value rstd = k.mul(k.div(k.f32(1.f), k.sqrt(k.add(k.div(hh, d), epsV))),
                     k.div(k.f32(1.f), k.sqrt(k.add(k.div(kk, d), epsV))));
  Value dot = k.mul(k.mul(hk, rstd), k.f32(invSqrtD));
  Value magnitude = k.max(math::AbsFOp::create(b, loc, dot), k.f32(1e-6f));
  // copysign(sqrt(magnitude), dot) as bit operations: the sign bit of dot
  // on the (non-negative) root.
  Type i32 = b.getI32Type();
  Value signBit = arith::AndIOp::create(
      b, loc, arith::BitcastOp::create(b, loc, i32, dot),
      arith::ConstantIntOp::create(b, loc, i32, int64_t(0x80000000u)));
  Value rootBits = arith::OrIOp::create(
      b, loc, arith::BitcastOp::create(b, loc, i32, k.sqrt(magnitude)), signBit);
  return k.sigmoid(arith::BitcastOp::create(b, loc, b.getF32Type(), rootBits));
}

} // namespace

func::FuncOp buildEngramGateKernel(ModuleOp module, const std::string &name,
                                   int64_t hc, int64_t dim, float eps) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type bf16 = b.getBF16Type();
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, hc, dim}, bf16),
       MemRefType::get({ShapedType::kDynamic, (hc + 1) * dim}, bf16),
       MemRefType::get({hc, dim}, bf16), MemRefType::get({hc, dim}, bf16)});
  KernelBuilder k(b, loc);
  Value streams = fn.getArgument(0), kv = fn.getArgument(1),
        qWeight = fn.getArgument(2), kWeight = fn.getArgument(3);
  k.loop(k.idx(0), k.dim(streams, 0), [&](Value n) {
    k.loop(hc, [&](Value j) {
      Value keyBase = k.muli(j, k.idx(dim));
      auto sums = scf::ForOp::create(
          b, loc, k.idx(0), k.idx(dim), k.idx(1),
          ValueRange{k.f32(0.f), k.f32(0.f), k.f32(0.f)});
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(sums.getBody());
        Value e = sums.getInductionVar();
        Value h = k.loadF32(streams, {n, j, e});
        Value key = k.loadF32(kv, {n, k.addi(keyBase, e)});
        Value weight = k.mul(k.loadF32(qWeight, {j, e}), k.loadF32(kWeight, {j, e}));
        scf::YieldOp::create(
            b, loc,
            ValueRange{k.add(sums.getRegionIterArg(0), k.mul(h, h)),
                       k.add(sums.getRegionIterArg(1), k.mul(key, key)),
                       k.add(sums.getRegionIterArg(2),
                             k.mul(k.mul(h, weight), key))});
      }
      Value gate = engramGateOfSums(k, b, loc, sums.getResult(0), sums.getResult(1),
                                    sums.getResult(2), dim, eps);
      Value valueBase = k.idx(hc * dim);
      k.loop(dim, [&](Value e) {
        Value h = k.loadF32(streams, {n, j, e});
        Value v = k.loadF32(kv, {n, k.addi(valueBase, e)});
        k.storeBf16(k.add(h, k.mul(gate, v)), streams, {n, j, e});
      });
    });
  });
  k.finish();
  fn->setAttr(kEngramGateAttr,
              b.getDictionaryAttr({b.getNamedAttr("hc", b.getI64IntegerAttr(hc)),
                                   b.getNamedAttr("dim", b.getI64IntegerAttr(dim)),
                                   b.getNamedAttr("eps", b.getF32FloatAttr(eps))}));
  return fn;
}

void buildEngramGateBlockBody(func::FuncOp fn, int64_t hc, int64_t dim, float eps,
                              const EngramGateBlockLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Block *entry = freshBody(fn, {lanes.sharedProductsType, lanes.sharedGateType});
  b.setInsertionPointToStart(entry);
  KernelBuilder k(b, loc);
  Type f32 = b.getF32Type();
  Value streams = entry->getArgument(0), kv = entry->getArgument(1),
        qWeight = entry->getArgument(2), kWeight = entry->getArgument(3),
        products = entry->getArgument(4), sharedGate = entry->getArgument(5);
  const int64_t threads = lanes.threads, chunk = lanes.chunk;
  auto ult = [&](Value a, Value c) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, a, c).getResult();
  };
  Value n = lanes.row(b, loc), j = lanes.stream(b, loc), tid = lanes.thread(b, loc);
  auto active = scf::IfOp::create(b, loc, ult(n, k.dim(streams, 0)), /*withElse=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  Value isFirst = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, k.idx(0));
  Value keyBase = k.muli(j, k.idx(dim));
  // Runs `body` where `cond` holds.
  auto when = [&](Value cond, llvm::function_ref<void()> body) { emitWhen(b, loc, cond, body); };
  Value sums[3] = {k.f32(0.f), k.f32(0.f), k.f32(0.f)};
  for (int64_t c0 = 0; c0 < dim; c0 += chunk) {
    const int64_t length = std::min(chunk, dim - c0);
    // This thread's elements of the pass: every load first (clamped
    // columns), then the products' stores that exist.
    SmallVector<std::pair<Value, Value>> own; // (offset in the pass, valid)
    SmallVector<std::array<Value, 3>> made;
    for (int64_t s = 0; s * threads < length; ++s) {
      Value at = k.addi(tid, k.idx(s * threads));
      Value e = arith::MinUIOp::create(b, loc, k.addi(at, k.idx(c0)), k.idx(c0 + length - 1));
      own.push_back({at, ult(at, k.idx(length))});
      Value h = k.loadF32(streams, {n, j, e});
      Value key = k.loadF32(kv, {n, k.addi(keyBase, e)});
      Value weight = k.mul(k.loadF32(qWeight, {j, e}), k.loadF32(kWeight, {j, e}));
      made.push_back({k.mul(h, h), k.mul(key, key), k.mul(k.mul(h, weight), key)});
    }
    for (size_t s = 0; s < own.size(); ++s)
      when(own[s].second, [&] {
        for (int64_t p = 0; p < 3; ++p)
          k.store(made[s][size_t(p)], products, {k.idx(p), own[s].first});
      });
    lanes.barrier(b, loc);
    // Thread 0 adds the pass's products in element order.
    auto walk = scf::IfOp::create(b, loc, TypeRange{f32, f32, f32}, isFirst, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(walk.thenBlock());
      auto loop = scf::ForOp::create(b, loc, k.idx(0), k.idx(length), k.idx(1),
                                     ValueRange{sums[0], sums[1], sums[2]});
      {
        OpBuilder::InsertionGuard g2(b);
        b.setInsertionPointToStart(loop.getBody());
        Value e = loop.getInductionVar();
        SmallVector<Value> next;
        for (int64_t p = 0; p < 3; ++p)
          next.push_back(k.add(loop.getRegionIterArg(unsigned(p)),
                               k.load(products, {k.idx(p), e})));
        scf::YieldOp::create(b, loc, next);
      }
      scf::YieldOp::create(b, loc, loop.getResults());
      b.setInsertionPointToStart(walk.elseBlock());
      scf::YieldOp::create(b, loc, ValueRange{sums[0], sums[1], sums[2]});
    }
    for (unsigned p = 0; p < 3; ++p)
      sums[p] = walk.getResult(p);
    lanes.barrier(b, loc); // the next pass overwrites the products
  }
  when(isFirst, [&] {
    k.store(engramGateOfSums(k, b, loc, sums[0], sums[1], sums[2], dim, eps), sharedGate,
            {k.idx(0)});
  });
  lanes.barrier(b, loc);
  Value gate = k.load(sharedGate, {k.idx(0)});
  Value valueBase = k.idx(hc * dim);
  for (int64_t s = 0; s * threads < dim; ++s) {
    Value e = k.addi(tid, k.idx(s * threads));
    when(ult(e, k.idx(dim)), [&] {
      Value h = k.loadF32(streams, {n, j, e});
      Value v = k.loadF32(kv, {n, k.addi(valueBase, e)});
      k.storeBf16(k.add(h, k.mul(gate, v)), streams, {n, j, e});
    });
  }
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

} // namespace csa::codegen

//===- MoeKernels.cpp - Generated kernels for the MoE block ---------------===//
#include "codegen/host/MoeKernels.h"

#include "codegen/host/KernelBuilder.h"
#include "codegen/host/Transcendental.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Arith/IR/Arith.h"

#include <functional>

#include <cmath>

using namespace mlir;

namespace csa::codegen {

namespace {
/// The router's score of logit z: F.softplus (threshold 20), then sqrt.
Value routeScore(KernelBuilder &k, OpBuilder &b, Location loc, Value z) {
  Value big = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, z, k.f32(20.f));
  Value soft = emitLog1p32(b, loc, k.exp(z));
  return k.sqrt(arith::SelectOp::create(b, loc, big, z, soft));
}

/// One pick of the host's repeated argmax over `experts`: the free expert
/// with the highest score (`scoreAt`), the first free one if none is
/// higher (ties and NaN keep the lowest id). Returns its id (index).
Value pickBest(KernelBuilder &k, OpBuilder &b, Location loc, int64_t experts,
               function_ref<Value(Value)> scoreAt, function_ref<Value(Value)> isFree) {
  auto best = scf::ForOp::create(b, loc, k.idx(0), k.idx(experts), k.idx(1),
                                 ValueRange{k.f32(-INFINITY), k.idx(-1)});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(best.getBody());
  Value e = best.getInductionVar();
  Value bestScore = best.getRegionIterArg(0), bestId = best.getRegionIterArg(1);
  Value score = scoreAt(e);
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, bestId, k.idx(0));
  Value better = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, score, bestScore);
  Value pick = arith::AndIOp::create(b, loc, isFree(e), arith::OrIOp::create(b, loc, first, better));
  scf::YieldOp::create(b, loc,
                       ValueRange{arith::SelectOp::create(b, loc, pick, score, bestScore),
                                  arith::SelectOp::create(b, loc, pick, e, bestId)});
  return best.getResult(1);
}
} // namespace

func::FuncOp buildMoeRouteKernel(ModuleOp module, const std::string &name,
                                 int64_t experts, int64_t topK,
                                 float routeScale) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type f32 = b.getF32Type(), i32 = b.getI32Type(), i1 = b.getI1Type();
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, experts}, f32),
       MemRefType::get({experts}, f32),
       MemRefType::get({ShapedType::kDynamic, topK}, i32),
       MemRefType::get({ShapedType::kDynamic, topK}, f32)});
  KernelBuilder k(b, loc);
  Value logits = fn.getArgument(0), bias = fn.getArgument(1),
        ids = fn.getArgument(2), weights = fn.getArgument(3);
  Value s = memref::AllocaOp::create(b, loc, MemRefType::get({experts}, f32));
  Value taken = memref::AllocaOp::create(b, loc, MemRefType::get({experts}, i1));
  Value chosen = memref::AllocaOp::create(b, loc, MemRefType::get({topK}, b.getIndexType()));
  Value falseV = arith::ConstantIntOp::create(b, loc, i1, 0);
  Value trueV = arith::ConstantIntOp::create(b, loc, i1, 1);
  k.loop(k.idx(0), k.dim(logits, 0), [&](Value n) {
    k.loop(experts, [&](Value e) {
      k.store(routeScore(k, b, loc, k.load(logits, {n, e})), s, e);
      k.store(falseV, taken, e);
    });
    // Top-k of s + bias by repeated argmax: ties keep the lowest id.
    Value sum = k.reduce(topK, k.f32(0.f), [&](Value slot, Value acc) {
      Value id = pickBest(
          k, b, loc, experts, [&](Value e) { return k.add(k.load(s, e), k.load(bias, e)); },
          [&](Value e) {
            return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, k.load(taken, e),
                                         falseV)
                .getResult();
          });
      k.store(trueV, taken, id);
      k.store(id, chosen, slot);
      return k.add(acc, k.load(s, id));
    });
    k.loop(topK, [&](Value slot) {
      Value id = k.load(chosen, slot);
      Value w = k.load(s, id);
      if (topK > 1)
        w = k.div(w, k.add(sum, k.f32(1e-20f)));
      w = k.mul(w, k.f32(routeScale));
      k.store(w, weights, {n, slot});
      k.store(arith::IndexCastOp::create(b, loc, i32, id), ids, {n, slot});
    });
  });
  k.finish();
  fn->setAttr(kMoeRouteAttr,
              b.getDictionaryAttr({b.getNamedAttr("experts", b.getI64IntegerAttr(experts)),
                                   b.getNamedAttr("top_k", b.getI64IntegerAttr(topK)),
                                   b.getNamedAttr("route_scale", b.getF32FloatAttr(routeScale))}));
  return fn;
}

void buildMoeRouteBlockBody(func::FuncOp fn, int64_t experts, int64_t topK,
                            float routeScale, const MoeRouteLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Block *entry = freshBody(fn, {lanes.sharedScoresType, lanes.sharedIdsType});
  b.setInsertionPointToStart(entry);
  KernelBuilder k(b, loc);
  Type i32 = b.getI32Type(), indexType = b.getIndexType();
  Value logits = entry->getArgument(0), bias = entry->getArgument(1),
        ids = entry->getArgument(2), weights = entry->getArgument(3),
        scores = entry->getArgument(4), marks = entry->getArgument(5);
  auto cmpI = [&](arith::CmpIPredicate p, Value a, Value c) {
    return arith::CmpIOp::create(b, loc, p, a, c).getResult();
  };
  auto when = [&](Value cond, llvm::function_ref<void()> body) { emitWhen(b, loc, cond, body); };
  auto toI32 = [&](Value v) { return arith::IndexCastOp::create(b, loc, i32, v).getResult(); };
  auto toIndex = [&](Value v) {
    return arith::IndexCastOp::create(b, loc, indexType, v).getResult();
  };
  Value n = lanes.row(b, loc), tid = lanes.thread(b, loc);
  auto active = scf::IfOp::create(b, loc, cmpI(arith::CmpIPredicate::ult, n, k.dim(logits, 0)),
                                  /*withElse=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  Value zeroI32 = intConst(b, loc, i32, 0), oneI32 = intConst(b, loc, i32, 1);
  Value isFirst = cmpI(arith::CmpIPredicate::eq, tid, k.idx(0));
  Value isExpert = cmpI(arith::CmpIPredicate::ult, tid, k.idx(experts));
  Value flagAt = k.idx(experts + topK), chosenAt = k.idx(experts);
  when(isFirst, [&] { k.store(zeroI32, marks, {flagAt}); });
  // The host's score: F.softplus (threshold 20), then sqrt; plus the bias.
  Value e = arith::MinUIOp::create(b, loc, tid, k.idx(experts - 1));
  Value score = routeScore(k, b, loc, k.load(logits, {n, e}));
  Value biased = k.add(score, k.load(bias, e));
  when(isExpert, [&] {
    k.store(score, scores, {k.idx(0), tid});
    k.store(biased, scores, {k.idx(1), tid});
    k.store(zeroI32, marks, {tid});
  });
  lanes.barrier(b, loc);
  Value isNaN = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, biased, biased);
  when(arith::AndIOp::create(b, loc, isExpert, isNaN), [&] { k.store(oneI32, marks, {flagAt}); });
  lanes.barrier(b, loc);
  Value anyNaN = cmpI(arith::CmpIPredicate::ne, k.load(marks, {flagAt}), zeroI32);
  auto choose = scf::IfOp::create(b, loc, anyNaN, /*withElse=*/true);
  {
    // Some score is NaN: thread 0 picks as the host does.
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(choose.thenBlock()->getTerminator());
    when(isFirst, [&] {
      k.loop(topK, [&](Value slot) {
        Value id = pickBest(
            k, b, loc, experts, [&](Value f) { return k.load(scores, {k.idx(1), f}); },
            [&](Value f) { return cmpI(arith::CmpIPredicate::eq, k.load(marks, {f}), zeroI32); });
        k.store(oneI32, marks, {id});
        k.store(toI32(id), marks, {k.addi(chosenAt, slot)});
      });
    });
    // No NaN: each expert's rank is its place in the host's picking order.
    b.setInsertionPoint(choose.elseBlock()->getTerminator());
    when(isExpert, [&] {
      auto rank = scf::ForOp::create(b, loc, k.idx(0), k.idx(experts), k.idx(1),
                                     ValueRange{k.idx(0)});
      {
        OpBuilder::InsertionGuard g2(b);
        b.setInsertionPointToStart(rank.getBody());
        Value f = rank.getInductionVar();
        Value v = k.load(scores, {k.idx(1), f});
        Value higher = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, v, biased);
        Value tiedBefore = arith::AndIOp::create(
            b, loc, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, v, biased),
            cmpI(arith::CmpIPredicate::ult, f, tid));
        Value ahead = arith::OrIOp::create(b, loc, higher, tiedBefore);
        scf::YieldOp::create(
            b, loc,
            ValueRange{arith::SelectOp::create(b, loc, ahead,
                                               k.addi(rank.getRegionIterArg(0), k.idx(1)),
                                               rank.getRegionIterArg(0))});
      }
      Value r = rank.getResult(0);
      when(cmpI(arith::CmpIPredicate::ult, r, k.idx(topK)),
           [&] { k.store(toI32(tid), marks, {k.addi(chosenAt, r)}); });
    });
  }
  lanes.barrier(b, loc);
  // Thread 0: the weights, the chosen scores added in pick order (the host's).
  when(isFirst, [&] {
    auto chosenId = [&](Value slot) {
      return toIndex(k.load(marks, {k.addi(chosenAt, slot)}));
    };
    Value sum = k.reduce(topK, k.f32(0.f), [&](Value slot, Value acc) {
      return k.add(acc, k.load(scores, {k.idx(0), chosenId(slot)}));
    });
    k.loop(topK, [&](Value slot) {
      Value id = chosenId(slot);
      Value w = k.load(scores, {k.idx(0), id});
      if (topK > 1)
        w = k.div(w, k.add(sum, k.f32(1e-20f)));
      w = k.mul(w, k.f32(routeScale));
      k.store(w, weights, {n, slot});
      k.store(toI32(id), ids, {n, slot});
    });
  });
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

func::FuncOp buildMoeGatherKernel(ModuleOp module, const std::string &name,
                                  int64_t dim) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type bf16 = b.getBF16Type();
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, dim}, bf16),
       MemRefType::get({ShapedType::kDynamic}, b.getI32Type()),
       MemRefType::get({ShapedType::kDynamic, dim}, bf16)});
  KernelBuilder k(b, loc);
  Value x = fn.getArgument(0), rowIndex = fn.getArgument(1), rows = fn.getArgument(2);
  Value tokens = k.dim(x, 0);
  k.loop(k.idx(0), k.dim(rowIndex, 0), [&](Value i) {
    k.loop(dim, [&](Value e) {
      // A row index past the tokens copies nothing (never read out of bounds).
      Value n = arith::IndexCastUIOp::create(b, loc, b.getIndexType(), k.load(rowIndex, i));
      Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, n, tokens);
      auto guard = scf::IfOp::create(b, loc, inRange, /*withElseRegion=*/false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(guard.thenBlock());
      k.store(k.load(x, {n, e}), rows, {i, e});
    });
  });
  k.finish();
  return fn;
}

func::FuncOp buildSwigluKernel(ModuleOp module, const std::string &name,
                               int64_t inter, float limit, bool paired) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type();
  auto rows = MemRefType::get({ShapedType::kDynamic, inter}, bf16);
  auto pairs = MemRefType::get({ShapedType::kDynamic, 2 * inter}, bf16);
  auto weights = MemRefType::get({ShapedType::kDynamic}, f32);
  func::FuncOp fn =
      paired ? KernelBuilder::start(b, module, name, {pairs, weights, rows})
             : KernelBuilder::start(b, module, name, {rows, rows, weights, rows});
  KernelBuilder k(b, loc);
  const unsigned first = paired ? 1 : 2;
  Value gate = fn.getArgument(0), up = paired ? gate : fn.getArgument(1),
        weight = fn.getArgument(first), h = fn.getArgument(first + 1);
  k.loop(k.idx(0), k.dim(gate, 0), [&](Value n) {
    Value w = k.load(weight, n);
    k.loop(inter, [&](Value j) {
      // Paired, up is the row's second half.
      Value upColumn =
          paired ? arith::AddIOp::create(b, loc, j, k.idx(inter)).getResult() : j;
      Value g = k.loadF32(gate, {n, j}), u = k.loadF32(up, {n, upColumn});
      if (limit > 0) {
        Value lim = k.f32(limit), negLim = k.f32(-limit);
        // std::clamp(u, -limit, limit) and std::min(g, limit).
        Value below = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, u, negLim);
        u = arith::SelectOp::create(b, loc, below, negLim, u);
        Value above = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, lim, u);
        u = arith::SelectOp::create(b, loc, above, lim, u);
        Value gAbove = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, lim, g);
        g = arith::SelectOp::create(b, loc, gAbove, lim, g);
      }
      Value v = k.mul(k.mul(g, k.sigmoid(g)), u);
      k.storeBf16(k.mul(v, w), h, {n, j});
    });
  });
  k.finish();
  return fn;
}

func::FuncOp buildMoeAccumulateKernel(ModuleOp module, const std::string &name,
                                      int64_t dim) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, dim}, b.getF32Type()),
       MemRefType::get({ShapedType::kDynamic, dim}, b.getBF16Type()),
       MemRefType::get({ShapedType::kDynamic}, b.getI32Type())});
  KernelBuilder k(b, loc);
  Value y = fn.getArgument(0), out = fn.getArgument(1),
        rowIndex = fn.getArgument(2);
  k.loop(k.idx(0), k.dim(out, 0), [&](Value r) {
    Value n = arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                         k.load(rowIndex, r));
    k.loop(dim, [&](Value e) {
      k.store(k.add(k.load(y, {n, e}), k.loadF32(out, {r, e})), y, {n, e});
    });
  });
  k.finish();
  return fn;
}

func::FuncOp buildMoeFinishKernel(ModuleOp module, const std::string &name,
                                  int64_t dim) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  auto bf16Rows = MemRefType::get({ShapedType::kDynamic, dim}, b.getBF16Type());
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, dim}, b.getF32Type()), bf16Rows,
       bf16Rows});
  KernelBuilder k(b, loc);
  Value y = fn.getArgument(0), shared = fn.getArgument(1), out = fn.getArgument(2);
  k.loop(k.idx(0), k.dim(y, 0), [&](Value n) {
    k.loop(dim, [&](Value e) {
      k.storeBf16(k.add(k.load(y, {n, e}), k.loadF32(shared, {n, e})), out, {n, e});
    });
  });
  k.finish();
  return fn;
}

func::FuncOp buildMoeCombineKernel(ModuleOp module, const std::string &name,
                                   int64_t dim, int64_t topK, int64_t experts) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type i32 = b.getI32Type();
  auto bf16Rows = MemRefType::get({ShapedType::kDynamic, dim}, b.getBF16Type());
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, topK, dim}, b.getBF16Type()),
       MemRefType::get({ShapedType::kDynamic, topK}, i32), bf16Rows, bf16Rows});
  KernelBuilder k(b, loc);
  Value o = fn.getArgument(0), ids = fn.getArgument(1), shared = fn.getArgument(2),
        out = fn.getArgument(3);
  using P = arith::CmpIPredicate;
  auto c32 = [&](int64_t v) { return arith::ConstantIntOp::create(b, loc, i32, v); };
  k.loop(k.idx(0), k.dim(shared, 0), [&](Value n) {
    k.loop(dim, [&](Value e) {
      // Rank by rank, the smallest (id, slot) above the previous one: the
      // order of the per-expert lists (ascending expert, then token order).
      SmallVector<Value> id;
      for (int64_t slot = 0; slot < topK; ++slot)
        id.push_back(k.load(ids, {n, k.idx(slot)}));
      Value acc = k.f32(0.f), prevId = c32(-1), prevSlot = c32(-1);
      for (int64_t rank = 0; rank < topK; ++rank) {
        Value bestId = c32(experts), bestSlot = c32(-1);
        for (int64_t slot = 0; slot < topK; ++slot) {
          Value valid = arith::CmpIOp::create(b, loc, P::ult, id[slot], c32(experts));
          Value after = arith::OrIOp::create(
              b, loc, arith::CmpIOp::create(b, loc, P::sgt, id[slot], prevId),
              arith::AndIOp::create(
                  b, loc, arith::CmpIOp::create(b, loc, P::eq, id[slot], prevId),
                  arith::CmpIOp::create(b, loc, P::sgt, c32(slot), prevSlot)));
          Value better = arith::CmpIOp::create(b, loc, P::slt, id[slot], bestId);
          Value pick = arith::AndIOp::create(b, loc, valid,
                                             arith::AndIOp::create(b, loc, after, better));
          bestId = arith::SelectOp::create(b, loc, pick, id[slot], bestId);
          bestSlot = arith::SelectOp::create(b, loc, pick, c32(slot), bestSlot);
        }
        Value found = arith::CmpIOp::create(b, loc, P::sge, bestSlot, c32(0));
        Value slotIndex = arith::IndexCastOp::create(
            b, loc, b.getIndexType(), arith::SelectOp::create(b, loc, found, bestSlot, c32(0)));
        Value sum = k.add(acc, k.loadF32(o, {n, slotIndex, e}));
        acc = arith::SelectOp::create(b, loc, found, sum, acc);
        prevId = arith::SelectOp::create(b, loc, found, bestId, prevId);
        prevSlot = arith::SelectOp::create(b, loc, found, bestSlot, prevSlot);
      }
      k.storeBf16(k.add(acc, k.loadF32(shared, {n, e})), out, {n, e});
    });
  });
  k.finish();
  fn->setAttr(kExpertIdsAttr,
              b.getDictionaryAttr({b.getNamedAttr("argument", b.getI64IntegerAttr(1)),
                                   b.getNamedAttr("limit", b.getI64IntegerAttr(experts))}));
  return fn;
}

} // namespace csa::codegen

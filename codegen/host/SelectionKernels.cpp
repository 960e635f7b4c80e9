//===- SelectionKernels.cpp - Top-k and HSI selection generated as IR -----===//
//
// The indexer's top-k (a rank kernel and a compaction, each with its GPU
// block form) and HSI level 1 (block scores, then the top-k's rank over them
// and the kept blocks' positions), in the reference's order: the same picks
// as `topkIndices` and `selectCandidateBlocks`.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/SelectionKernels.h"

#include "codegen/host/KernelBuilder.h"
#include "codegen/host/ScalarOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <cassert>
#include <functional>
#include <limits>

using namespace mlir;

namespace csa::codegen {

using namespace scalar;

namespace {

/// The order of the reference's top-k: higher score first, then lower
/// position. Returns how many of positions [0, count) come before (s, t) in
/// that order, counting no further than `limit` (so (s, t) is among the
/// first `limit` iff the result is below it). `scoreAt(u)` emits the score
/// of position u. Scores must not be NaN.
Value countAhead(OpBuilder &b, Location loc, Value count, Value limit, Value s,
                 Value t, function_ref<Value(Value)> scoreAt) {
  Type index = b.getIndexType();
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1);
  auto scan = scf::WhileOp::create(
      b, loc, TypeRange{index, index}, ValueRange{zero, zero},
      [&](OpBuilder &, Location, ValueRange state) {
        Value more = andI(b, loc, cmpI(b, loc, arith::CmpIPredicate::slt, state[0], count),
                          cmpI(b, loc, arith::CmpIPredicate::slt, state[1], limit));
        scf::ConditionOp::create(b, loc, more, state);
      },
      [&](OpBuilder &, Location, ValueRange state) {
        Value u = state[0];
        Value su = scoreAt(u);
        Value higher = cmpF(b, loc, arith::CmpFPredicate::OGT, su, s);
        Value tie = andI(b, loc, cmpF(b, loc, arith::CmpFPredicate::OEQ, su, s),
                         cmpI(b, loc, arith::CmpIPredicate::slt, u, t));
        Value ahead = arith::IndexCastOp::create(
            b, loc, index,
            arith::ExtUIOp::create(b, loc, b.getI32Type(), orI(b, loc, higher, tie)));
        scf::YieldOp::create(b, loc,
                             ValueRange{arith::AddIOp::create(b, loc, u, one),
                                        arith::AddIOp::create(b, loc, state[1], ahead)});
      });
  return scan.getResult(1);
}

} // namespace

func::FuncOp buildTopKRankKernel(ModuleOp module, const std::string &name,
                                 int64_t k, bool masked) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type f32 = b.getF32Type(), i8 = b.getI8Type();
  const int64_t dyn = ShapedType::kDynamic;
  auto scoresType = MemRefType::get({dyn, dyn}, f32);
  auto flagType = MemRefType::get({dyn, dyn}, i8);
  SmallVector<Type> args = {scoresType};
  if (masked)
    args.push_back(flagType);
  args.push_back(flagType);
  func::FuncOp fn = startKernel(b, module, name, args);
  fn->setAttr(kTopKRankAttr,
              b.getDictionaryAttr({b.getNamedAttr("k", b.getI64IntegerAttr(k)),
                                   b.getNamedAttr("masked", b.getBoolAttr(masked))}));
  Value scores = fn.getArgument(0);
  Value mask = masked ? fn.getArgument(1) : Value();
  Value picked = fn.getArgument(masked ? 2 : 1);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1),
        numOut = indexConst(b, loc, k);
  Value negInf = f32Const(b, loc, -kInf), zeroI8 = intConst(b, loc, i8, 0);
  Value n = memref::DimOp::create(b, loc, scores, zero);
  Value width = memref::DimOp::create(b, loc, scores, one);
  Value rank = arith::MinSIOp::create(b, loc, numOut, width);

  loop(b, loc, zero, n, one, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
    auto scoreAt = [&](Value t) -> Value {
      Value s = memref::LoadOp::create(b, loc, scores, ValueRange{i, t});
      if (!masked)
        return s;
      Value m = memref::LoadOp::create(b, loc, mask, ValueRange{i, t});
      Value outside = cmpI(b, loc, arith::CmpIPredicate::eq, m, zeroI8);
      return arith::SelectOp::create(b, loc, outside, negInf, s);
    };
    // Each position counts the positions ahead of it in the order, stopping
    // at `rank`: the positions are independent (a GPU thread each).
    loop(b, loc, zero, width, one, {}, [&](Value t, ValueRange) -> SmallVector<Value> {
      Value ahead = countAhead(b, loc, width, rank, scoreAt(t), t, scoreAt);
      Value in = cmpI(b, loc, arith::CmpIPredicate::slt, ahead, rank);
      memref::StoreOp::create(b, loc, arith::ExtUIOp::create(b, loc, i8, in),
                              picked, ValueRange{i, t});
      return {};
    });
    return {};
  });
  func::ReturnOp::create(b, loc);
  return fn;
}

void buildTopKRankBlockBody(func::FuncOp fn, int64_t k, bool masked,
                            const TopKBlockLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Type i8 = b.getI8Type(), i32 = b.getI32Type(), i64 = b.getI64Type(),
       indexType = b.getIndexType();
  Block *entry = freshBody(fn, {lanes.histType, lanes.stateType});
  b.setInsertionPointToStart(entry);
  const unsigned numArgs = fn.getNumArguments();
  Value scores = entry->getArgument(0);
  Value mask = masked ? entry->getArgument(1) : Value();
  Value picked = entry->getArgument(masked ? 2 : 1);
  Value hist = entry->getArgument(numArgs - 2), state = entry->getArgument(numArgs - 1);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1),
        stride = indexConst(b, loc, lanes.threads), bins = indexConst(b, loc, 256);
  auto c64 = [&](int64_t v) { return intConst(b, loc, i64, v); };
  Value i = lanes.row(b, loc), tid = lanes.thread(b, loc);
  Value n = memref::DimOp::create(b, loc, scores, zero);
  Value width = memref::DimOp::create(b, loc, scores, one);
  // Every thread of a block has the same row: a block past the rows skips
  // everything, barriers included.
  auto active = scf::IfOp::create(b, loc, cmpI(b, loc, arith::CmpIPredicate::slt, i, n),
                                  /*withElse=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  Value rank = arith::IndexCastOp::create(
      b, loc, i64, arith::MinSIOp::create(b, loc, indexConst(b, loc, k), width));
  // (is NaN, key) of position t.
  auto keyOf = [&](Value t) -> std::pair<Value, Value> {
    Value s = memref::LoadOp::create(b, loc, scores, ValueRange{i, t});
    if (masked) {
      Value m = memref::LoadOp::create(b, loc, mask, ValueRange{i, t});
      s = arith::SelectOp::create(b, loc,
                                  cmpI(b, loc, arith::CmpIPredicate::eq, m,
                                       intConst(b, loc, i8, 0)),
                                  f32Const(b, loc, -kInf), s);
    }
    Value nan = cmpF(b, loc, arith::CmpFPredicate::UNO, s, s);
    // -0 == +0 in the order: one key.
    Value isZero = cmpF(b, loc, arith::CmpFPredicate::OEQ, s, f32Const(b, loc, 0.f));
    Value bits = arith::BitcastOp::create(
        b, loc, i32, arith::SelectOp::create(b, loc, isZero, f32Const(b, loc, 0.f), s));
    Value negative = cmpI(b, loc, arith::CmpIPredicate::slt, bits, intConst(b, loc, i32, 0));
    Value order = arith::SelectOp::create(
        b, loc, negative, arith::XOrIOp::create(b, loc, bits, intConst(b, loc, i32, -1)),
        arith::OrIOp::create(b, loc, bits, intConst(b, loc, i32, int32_t(0x80000000u))));
    Value high = arith::ShLIOp::create(b, loc, arith::ExtUIOp::create(b, loc, i64, order),
                                       c64(32));
    Value low = arith::SubIOp::create(b, loc, c64(0xFFFFFFFFll),
                                      arith::IndexCastOp::create(b, loc, i64, t));
    return {nan, arith::OrIOp::create(b, loc, high, low)};
  };
  // for (t = tid; t < end; t += threads) body(t)
  auto strided = [&](Value end, function_ref<void(Value)> body) {
    loop(b, loc, tid, end, stride, {}, [&](Value t, ValueRange) -> SmallVector<Value> {
      body(t);
      return {};
    });
  };
  Value isFirst = cmpI(b, loc, arith::CmpIPredicate::eq, tid, zero);
  // Passes: (prefix, remaining); remaining < 0: fewer keys than the rank,
  // 0: settled.
  auto passes = loop(b, loc, zero, indexConst(b, loc, 8), one, {c64(0), rank},
                     [&](Value p, ValueRange st) -> SmallVector<Value> {
    Value prefix = st[0], remaining = st[1];
    // A pass whose bin held exactly the keys still wanted settled the set
    // (remaining 0, the prefix's lower digits 0: every key from it up is
    // picked); so did fewer keys than the rank (remaining < 0). Later passes
    // are skipped: on random scores the set settles after two or three of
    // the eight. (`remaining` is the block's, so all threads skip together.)
    auto live = scf::IfOp::create(b, loc, TypeRange{i64, i64},
                                  cmpI(b, loc, arith::CmpIPredicate::sge, remaining, c64(1)),
                                  /*withElseRegion=*/true);
    b.setInsertionPointToStart(&live.getElseRegion().front());
    scf::YieldOp::create(b, loc, ValueRange{prefix, remaining});
    b.setInsertionPointToStart(&live.getThenRegion().front());
    Value p64 = arith::IndexCastOp::create(b, loc, i64, p);
    Value shift = arith::SubIOp::create(b, loc, c64(56),
                                        arith::MulIOp::create(b, loc, p64, c64(8)));
    // The digits above this pass's: all ones above shift + 8 (none at p = 0).
    Value above = arith::SelectOp::create(
        b, loc, cmpI(b, loc, arith::CmpIPredicate::eq, p64, c64(0)), c64(0),
        arith::ShLIOp::create(b, loc, c64(-1),
                              arith::AddIOp::create(b, loc, shift, c64(8))));
    strided(bins, [&](Value j) {
      memref::StoreOp::create(b, loc, intConst(b, loc, i32, 0), hist, ValueRange{j});
    });
    lanes.barrier(b, loc);
    strided(width, [&](Value t) {
      auto [nan, key] = keyOf(t);
      Value match = andI(b, loc, arith::XOrIOp::create(b, loc, nan, intConst(b, loc, b.getI1Type(), 1)),
                         cmpI(b, loc, arith::CmpIPredicate::eq,
                              arith::AndIOp::create(b, loc, key, above), prefix));
      auto ifMatch = scf::IfOp::create(b, loc, match, /*withElse=*/false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(ifMatch.thenBlock()->getTerminator());
      Value digit = arith::IndexCastOp::create(
          b, loc, indexType,
          arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, key, shift), c64(255)));
      memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi,
                                  intConst(b, loc, i32, 1), hist, ValueRange{digit});
    });
    lanes.barrier(b, loc);
    // The digit of the remaining-th key, from the highest bin down, as a
    // parallel scan: thread t (of the first scanThreads) owns `per`
    // consecutive bins in descending order (bins 255 - t * per, ...); its
    // counts' total goes to hist[t] and a Hillis-Steele scan (a barrier
    // before and after each step's writes) gives the counts of all bins
    // above its own. The thread whose bins hold the remaining-th key writes
    // the state; thread 0 first writes the state of no such bin. (One
    // thread walking the 256 bins took about 4 us a pass on the H200.)
    const int64_t scanThreads = std::min<int64_t>(lanes.threads, 256), per = 256 / scanThreads;
    assert(256 % scanThreads == 0 && "the top-k block's threads must divide the 256 bins");
    Value scanning = cmpI(b, loc, arith::CmpIPredicate::ult, tid, indexConst(b, loc, scanThreads));
    Value firstBin = arith::SubIOp::create(
        b, loc, indexConst(b, loc, 255),
        arith::MulIOp::create(b, loc,
                              arith::MinUIOp::create(b, loc, tid, indexConst(b, loc, scanThreads - 1)),
                              indexConst(b, loc, per)));
    SmallVector<Value> counts;
    Value own = c64(0);
    for (int64_t u = 0; u < per; ++u) {
      Value bin = arith::SubIOp::create(b, loc, firstBin, indexConst(b, loc, u));
      counts.push_back(arith::ExtUIOp::create(
          b, loc, i64, memref::LoadOp::create(b, loc, hist, ValueRange{bin})));
      own = arith::AddIOp::create(b, loc, own, counts.back());
    }
    {
      auto ifFirst = scf::IfOp::create(b, loc, isFirst, /*withElse=*/false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(ifFirst.thenBlock()->getTerminator());
      memref::StoreOp::create(b, loc, prefix, state, ValueRange{zero});
      memref::StoreOp::create(b, loc, c64(-1), state, ValueRange{one});
    }
    auto whenScanning = [&](const std::function<void()> &body) {
      auto ifScan = scf::IfOp::create(b, loc, scanning, /*withElse=*/false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(ifScan.thenBlock()->getTerminator());
      body();
    };
    auto asI32 = [&](Value v) { return arith::TruncIOp::create(b, loc, i32, v).getResult(); };
    auto loadTotal = [&](Value at) {
      return arith::ExtUIOp::create(b, loc, i64, memref::LoadOp::create(b, loc, hist, ValueRange{at}))
          .getResult();
    };
    lanes.barrier(b, loc); // every count read before the totals overwrite them
    whenScanning([&] { memref::StoreOp::create(b, loc, asI32(own), hist, ValueRange{tid}); });
    lanes.barrier(b, loc);
    Value inclusive = own;
    for (int64_t d = 1; d < scanThreads; d *= 2) {
      Value hasLeft = cmpI(b, loc, arith::CmpIPredicate::uge, tid, indexConst(b, loc, d));
      // Every thread loads (the select drops the others' values), so the
      // index stays inside the scan's bins for threads past the scan's too.
      Value scanTid = arith::MinUIOp::create(b, loc, tid, indexConst(b, loc, scanThreads - 1));
      Value left = arith::SelectOp::create(
          b, loc, andI(b, loc, scanning, hasLeft),
          loadTotal(arith::SubIOp::create(
              b, loc, arith::MaxUIOp::create(b, loc, scanTid, indexConst(b, loc, d)),
              indexConst(b, loc, d))),
          c64(0));
      inclusive = arith::AddIOp::create(b, loc, inclusive, left);
      lanes.barrier(b, loc);
      whenScanning([&] { memref::StoreOp::create(b, loc, asI32(inclusive), hist, ValueRange{tid}); });
      lanes.barrier(b, loc);
    }
    // The thread's bins, with the counts above them: the first bin whose
    // running count reaches `remaining` (at most one thread has it).
    Value cum = arith::SubIOp::create(b, loc, inclusive, own);
    Value positive = cmpI(b, loc, arith::CmpIPredicate::sge, remaining, c64(1));
    for (int64_t u = 0; u < per; ++u) {
      Value next = arith::AddIOp::create(b, loc, cum, counts[size_t(u)]);
      Value hit = andI(b, loc, andI(b, loc, scanning, positive),
                       andI(b, loc, cmpI(b, loc, arith::CmpIPredicate::slt, cum, remaining),
                            cmpI(b, loc, arith::CmpIPredicate::sge, next, remaining)));
      auto ifHit = scf::IfOp::create(b, loc, hit, /*withElse=*/false);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPoint(ifHit.thenBlock()->getTerminator());
        Value bin64 = arith::IndexCastOp::create(
            b, loc, i64, arith::SubIOp::create(b, loc, firstBin, indexConst(b, loc, u)));
        memref::StoreOp::create(b, loc,
                                arith::OrIOp::create(b, loc, prefix,
                                                     arith::ShLIOp::create(b, loc, bin64, shift)),
                                state, ValueRange{zero});
        // Of the bin's keys, the first `within` are wanted: all of them
        // settles the set.
        Value within = arith::SubIOp::create(b, loc, remaining, cum);
        Value settled = cmpI(b, loc, arith::CmpIPredicate::eq, within, counts[size_t(u)]);
        memref::StoreOp::create(b, loc, arith::SelectOp::create(b, loc, settled, c64(0), within),
                                state, ValueRange{one});
      }
      cum = next;
    }
    lanes.barrier(b, loc);
    scf::YieldOp::create(b, loc,
                         ValueRange{memref::LoadOp::create(b, loc, state, ValueRange{zero}),
                                    memref::LoadOp::create(b, loc, state, ValueRange{one})});
    b.setInsertionPointAfter(live);
    return {live.getResult(0), live.getResult(1)};
  });
  // All picked when fewer keys than the rank (threshold 0); else the keys
  // from the rank-th's up.
  Value threshold = arith::SelectOp::create(
      b, loc, cmpI(b, loc, arith::CmpIPredicate::slt, passes.getResult(1), c64(0)), c64(0),
      passes.getResult(0));
  strided(width, [&](Value t) {
    auto [nan, key] = keyOf(t);
    Value pick = orI(b, loc, nan, cmpI(b, loc, arith::CmpIPredicate::uge, key, threshold));
    memref::StoreOp::create(b, loc, arith::ExtUIOp::create(b, loc, i8, pick), picked,
                            ValueRange{i, t});
  });
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

func::FuncOp buildTopKCompactKernel(ModuleOp module, const std::string &name,
                                    int64_t k) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type i8 = b.getI8Type(), i32 = b.getI32Type(), i64 = b.getI64Type();
  const int64_t dyn = ShapedType::kDynamic;
  func::FuncOp fn = startKernel(b, module, name,
                                {MemRefType::get({dyn, dyn}, i8),
                                 MemRefType::get({dyn}, i64),
                                 MemRefType::get({dyn, k}, i32)});
  Value picked = fn.getArgument(0), visible = fn.getArgument(1),
        out = fn.getArgument(2);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1),
        numOut = indexConst(b, loc, k);
  Value none = intConst(b, loc, i32, -1), zeroI8 = intConst(b, loc, i8, 0);
  Value n = memref::DimOp::create(b, loc, picked, zero);
  Value width = memref::DimOp::create(b, loc, picked, one);
  loop(b, loc, zero, n, one, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
    Value vis = arith::IndexCastOp::create(
        b, loc, b.getIndexType(), memref::LoadOp::create(b, loc, visible, i));
    // The picks in ascending position order.
    auto written = loop(b, loc, zero, width, one, {zero},
                        [&](Value t, ValueRange c) -> SmallVector<Value> {
      Value chosen = cmpI(b, loc, arith::CmpIPredicate::ne,
                          memref::LoadOp::create(b, loc, picked, ValueRange{i, t}),
                          zeroI8);
      auto next = scf::IfOp::create(
          b, loc, chosen,
          [&](OpBuilder &, Location) {
            Value inside = cmpI(b, loc, arith::CmpIPredicate::slt, t, vis);
            Value pos = arith::IndexCastOp::create(b, loc, i32, t);
            Value v = arith::SelectOp::create(b, loc, inside, pos, none);
            // At most k picks for scores without NaN; with NaN (which ranks
            // ahead of nothing) there can be more: never past column k.
            Value room = cmpI(b, loc, arith::CmpIPredicate::slt, c[0], numOut);
            scf::IfOp::create(b, loc, room, [&](OpBuilder &, Location) {
              memref::StoreOp::create(b, loc, v, out, ValueRange{i, c[0]});
              scf::YieldOp::create(b, loc);
            });
            scf::YieldOp::create(b, loc,
                                 Value(arith::AddIOp::create(b, loc, c[0], one)));
          },
          [&](OpBuilder &, Location) { scf::YieldOp::create(b, loc, c[0]); });
      return {next.getResult(0)};
    });
    loop(b, loc, written.getResult(0), numOut, one, {},
         [&](Value c, ValueRange) -> SmallVector<Value> {
      memref::StoreOp::create(b, loc, none, out, ValueRange{i, c});
      return {};
    });
    return {};
  });
  func::ReturnOp::create(b, loc);
  fn->setAttr(kTopKCompactAttr,
              b.getDictionaryAttr({b.getNamedAttr("k", b.getI64IntegerAttr(k))}));
  return fn;
}

namespace {
/// A candidate for the greedy token: (value, id, saw a NaN or +inf).
struct GreedyCandidate {
  Value value, id, bad;
};

/// `c` after logit `l` at id `t` (ids in increasing order): strictly larger
/// replaces it, so the first of equal ones stays; -inf never does.
GreedyCandidate greedyStep(OpBuilder &b, Location loc, const GreedyCandidate &c, Value l,
                           Value t) {
  Value larger = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, l, c.value);
  // NaN or +inf: !(l < +inf).
  Value bad = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UGE, l,
                                    f32Const(b, loc, std::numeric_limits<float>::infinity()));
  return {arith::SelectOp::create(b, loc, larger, l, c.value),
          arith::SelectOp::create(b, loc, larger, t, c.id),
          arith::OrIOp::create(b, loc, c.bad, bad)};
}

/// The row's token from its candidate: -1 where it saw a NaN or +inf (or no
/// logit above -inf: its id is still -1).
Value greedyToken(OpBuilder &b, Location loc, const GreedyCandidate &c) {
  return arith::SelectOp::create(b, loc, c.bad, intConst(b, loc, b.getI32Type(), -1), c.id);
}
} // namespace

func::FuncOp buildGreedyTokenKernel(ModuleOp module, const std::string &name) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type f32 = b.getF32Type(), i32 = b.getI32Type();
  const int64_t dyn = ShapedType::kDynamic;
  func::FuncOp fn = startKernel(
      b, module, name, {MemRefType::get({dyn, dyn}, f32), MemRefType::get({dyn}, i32)});
  fn->setAttr(kGreedyTokenAttr, b.getUnitAttr());
  Value logits = fn.getArgument(0), tokens = fn.getArgument(1);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1);
  Value n = memref::DimOp::create(b, loc, logits, zero);
  Value vocab = memref::DimOp::create(b, loc, logits, one);
  loop(b, loc, zero, n, one, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
    auto scan = loop(b, loc, zero, vocab, one,
                     {f32Const(b, loc, -kInf), intConst(b, loc, i32, -1),
                      intConst(b, loc, b.getI1Type(), 0)},
                     [&](Value t, ValueRange c) -> SmallVector<Value> {
      Value l = memref::LoadOp::create(b, loc, logits, ValueRange{i, t});
      GreedyCandidate next = greedyStep(
          b, loc, {c[0], c[1], c[2]}, l, arith::IndexCastOp::create(b, loc, i32, t));
      return {next.value, next.id, next.bad};
    });
    memref::StoreOp::create(
        b, loc,
        greedyToken(b, loc, {scan.getResult(0), scan.getResult(1), scan.getResult(2)}), tokens,
        ValueRange{i});
    return {};
  });
  func::ReturnOp::create(b, loc);
  return fn;
}

void buildGreedyTokenBlockBody(func::FuncOp fn, const GreedyTokenLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Type i32 = b.getI32Type(), i1 = b.getI1Type();
  Block *entry = freshBody(fn, {lanes.valuesType, lanes.idsType});
  b.setInsertionPointToStart(entry);
  Value logits = entry->getArgument(0), tokens = entry->getArgument(1),
        values = entry->getArgument(2), ids = entry->getArgument(3);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1),
        threads = indexConst(b, loc, lanes.threads);
  Value i = lanes.row(b, loc), tid = lanes.thread(b, loc);
  Value n = memref::DimOp::create(b, loc, logits, zero);
  Value vocab = memref::DimOp::create(b, loc, logits, one);
  auto active = scf::IfOp::create(b, loc, cmpI(b, loc, arith::CmpIPredicate::slt, i, n),
                                  /*withElse=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  // This thread's share: ids tid, tid + threads, ... (coalesced loads).
  auto scan = loop(b, loc, tid, vocab, threads,
                   {f32Const(b, loc, -kInf), intConst(b, loc, i32, -1), intConst(b, loc, i1, 0)},
                   [&](Value t, ValueRange c) -> SmallVector<Value> {
    Value l = memref::LoadOp::create(b, loc, logits, ValueRange{i, t});
    GreedyCandidate next =
        greedyStep(b, loc, {c[0], c[1], c[2]}, l, arith::IndexCastOp::create(b, loc, i32, t));
    return {next.value, next.id, next.bad};
  });
  Value badAt = arith::AddIOp::create(b, loc, threads, tid);
  memref::StoreOp::create(b, loc, scan.getResult(0), values, ValueRange{tid});
  memref::StoreOp::create(b, loc, scan.getResult(1), ids, ValueRange{tid});
  memref::StoreOp::create(b, loc, arith::ExtUIOp::create(b, loc, i32, scan.getResult(2)), ids,
                          ValueRange{badAt});
  lanes.barrier(b, loc);
  // The tree: the upper half folded onto the lower half, a barrier each.
  int64_t span = 1;
  while (span < lanes.threads)
    span *= 2;
  for (int64_t half = span / 2; half >= 1; half /= 2) {
    Value other = arith::AddIOp::create(b, loc, tid, indexConst(b, loc, half));
    Value folds = arith::AndIOp::create(b, loc, cmpI(b, loc, arith::CmpIPredicate::ult, tid,
                                                     indexConst(b, loc, half)),
                                        cmpI(b, loc, arith::CmpIPredicate::ult, other, threads));
    emitWhen(b, loc, folds, [&] {
      Value v = memref::LoadOp::create(b, loc, values, ValueRange{tid});
      Value id = memref::LoadOp::create(b, loc, ids, ValueRange{tid});
      Value ov = memref::LoadOp::create(b, loc, values, ValueRange{other});
      Value oid = memref::LoadOp::create(b, loc, ids, ValueRange{other});
      // The other's candidate wins when larger, or equal with a lower id
      // (equal values above -inf both have ids; at -inf both are -1).
      Value larger = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, ov, v);
      Value tie = arith::AndIOp::create(
          b, loc, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, ov, v),
          cmpI(b, loc, arith::CmpIPredicate::slt, oid, id));
      Value take = arith::OrIOp::create(b, loc, larger, tie);
      memref::StoreOp::create(b, loc, arith::SelectOp::create(b, loc, take, ov, v), values,
                              ValueRange{tid});
      memref::StoreOp::create(b, loc, arith::SelectOp::create(b, loc, take, oid, id), ids,
                              ValueRange{tid});
      Value otherBadAt = arith::AddIOp::create(b, loc, threads, other);
      memref::StoreOp::create(
          b, loc,
          arith::OrIOp::create(b, loc, memref::LoadOp::create(b, loc, ids, ValueRange{badAt}),
                               memref::LoadOp::create(b, loc, ids, ValueRange{otherBadAt})),
          ids, ValueRange{badAt});
    });
    lanes.barrier(b, loc);
  }
  emitWhen(b, loc, cmpI(b, loc, arith::CmpIPredicate::eq, tid, zero), [&] {
    Value bad = cmpI(b, loc, arith::CmpIPredicate::ne,
                     memref::LoadOp::create(b, loc, ids, ValueRange{threads}),
                     intConst(b, loc, i32, 0));
    memref::StoreOp::create(
        b, loc,
        greedyToken(b, loc,
                    {Value(), memref::LoadOp::create(b, loc, ids, ValueRange{zero}), bad}),
        tokens, ValueRange{i});
  });
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

void buildTopKCompactBlockBody(func::FuncOp fn, int64_t k, const TopKCompactLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Type i8 = b.getI8Type(), i32 = b.getI32Type(), indexType = b.getIndexType();
  Block *entry = freshBody(fn, {lanes.offsetsType});
  b.setInsertionPointToStart(entry);
  Value picked = entry->getArgument(0), visible = entry->getArgument(1),
        out = entry->getArgument(2), offsets = entry->getArgument(3);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1),
        numOut = indexConst(b, loc, k), threads = indexConst(b, loc, lanes.threads);
  Value none = intConst(b, loc, i32, -1), zeroI8 = intConst(b, loc, i8, 0);
  Value i = lanes.row(b, loc), tid = lanes.thread(b, loc);
  Value n = memref::DimOp::create(b, loc, picked, zero);
  Value width = memref::DimOp::create(b, loc, picked, one);
  auto active = scf::IfOp::create(b, loc, cmpI(b, loc, arith::CmpIPredicate::slt, i, n),
                                  /*withElse=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  Value vis = arith::IndexCastOp::create(b, loc, indexType,
                                         memref::LoadOp::create(b, loc, visible, i));
  // This thread's segment [begin, end) of ceil(width / threads) positions.
  Value segment = arith::CeilDivUIOp::create(b, loc, width, threads);
  Value begin = arith::MinUIOp::create(b, loc, arith::MulIOp::create(b, loc, tid, segment),
                                       width);
  Value end = arith::MinUIOp::create(b, loc, arith::AddIOp::create(b, loc, begin, segment),
                                     width);
  auto isPicked = [&](Value t) {
    return cmpI(b, loc, arith::CmpIPredicate::ne,
                memref::LoadOp::create(b, loc, picked, ValueRange{i, t}), zeroI8);
  };
  auto counted = loop(b, loc, begin, end, one, {zero},
                      [&](Value t, ValueRange c) -> SmallVector<Value> {
    return {arith::SelectOp::create(b, loc, isPicked(t),
                                    arith::AddIOp::create(b, loc, c[0], one), c[0])
                .getResult()};
  });
  auto toI32 = [&](Value v) { return arith::IndexCastOp::create(b, loc, i32, v).getResult(); };
  auto toIndex = [&](Value v) {
    return arith::IndexCastOp::create(b, loc, indexType, v).getResult();
  };
  memref::StoreOp::create(b, loc, toI32(counted.getResult(0)), offsets, ValueRange{tid});
  lanes.barrier(b, loc);
  // Thread 0: exclusive offsets in segment order, the total in the last.
  auto first = scf::IfOp::create(b, loc, cmpI(b, loc, arith::CmpIPredicate::eq, tid, zero),
                                 /*withElse=*/false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(first.thenBlock()->getTerminator());
    auto scan = loop(b, loc, zero, threads, one, {intConst(b, loc, i32, 0)},
                     [&](Value s, ValueRange sum) -> SmallVector<Value> {
      Value count = memref::LoadOp::create(b, loc, offsets, ValueRange{s});
      memref::StoreOp::create(b, loc, sum[0], offsets, ValueRange{s});
      return {arith::AddIOp::create(b, loc, sum[0], count).getResult()};
    });
    memref::StoreOp::create(b, loc, scan.getResult(0), offsets, ValueRange{threads});
  }
  lanes.barrier(b, loc);
  Value from = toIndex(memref::LoadOp::create(b, loc, offsets, ValueRange{tid}));
  loop(b, loc, begin, end, one, {from}, [&](Value t, ValueRange c) -> SmallVector<Value> {
    auto next = scf::IfOp::create(
        b, loc, isPicked(t),
        [&](OpBuilder &, Location) {
          Value inside = cmpI(b, loc, arith::CmpIPredicate::slt, t, vis);
          Value v = arith::SelectOp::create(b, loc, inside, toI32(t), none);
          Value room = cmpI(b, loc, arith::CmpIPredicate::slt, c[0], numOut);
          scf::IfOp::create(b, loc, room, [&](OpBuilder &, Location) {
            memref::StoreOp::create(b, loc, v, out, ValueRange{i, c[0]});
            scf::YieldOp::create(b, loc);
          });
          scf::YieldOp::create(b, loc, Value(arith::AddIOp::create(b, loc, c[0], one)));
        },
        [&](OpBuilder &, Location) { scf::YieldOp::create(b, loc, c[0]); });
    return {next.getResult(0)};
  });
  // The columns past the picks.
  Value total = toIndex(memref::LoadOp::create(b, loc, offsets, ValueRange{threads}));
  loop(b, loc, arith::AddIOp::create(b, loc, total, tid), numOut, threads, {},
       [&](Value c, ValueRange) -> SmallVector<Value> {
    memref::StoreOp::create(b, loc, none, out, ValueRange{i, c});
    return {};
  });
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

func::FuncOp buildHsiBlockScoresKernel(ModuleOp module, const std::string &name,
                                       int64_t blockSize) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type f32 = b.getF32Type(), i64 = b.getI64Type();
  const int64_t dyn = ShapedType::kDynamic;
  auto scoresType = MemRefType::get({dyn, dyn}, f32);
  func::FuncOp fn = startKernel(b, module, name,
                                {scoresType, MemRefType::get({dyn}, i64), scoresType});
  Value scores = fn.getArgument(0), visible = fn.getArgument(1),
        blockScores = fn.getArgument(2);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1),
        size = indexConst(b, loc, blockSize);
  Value negInf = f32Const(b, loc, -kInf), posInf = f32Const(b, loc, kInf);
  Value n = memref::DimOp::create(b, loc, blockScores, zero);
  Value numBlocks = memref::DimOp::create(b, loc, blockScores, one);
  Value width = memref::DimOp::create(b, loc, scores, one);
  loop(b, loc, zero, n, one, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
    loop(b, loc, zero, numBlocks, one, {}, [&](Value blk, ValueRange) -> SmallVector<Value> {
      // The max over the block's positions, in position order.
      Value begin = arith::MulIOp::create(b, loc, blk, size);
      Value end = arith::MinSIOp::create(
          b, loc, width, arith::AddIOp::create(b, loc, begin, size));
      auto max = loop(b, loc, begin, end, one, {negInf},
                      [&](Value t, ValueRange acc) -> SmallVector<Value> {
        Value s = memref::LoadOp::create(b, loc, scores, ValueRange{i, t});
        return {stdMax(b, loc, acc[0], s)};
      });
      // The block of the newest visible position is pinned.
      Value vis = arith::IndexCastOp::create(
          b, loc, b.getIndexType(), memref::LoadOp::create(b, loc, visible, i));
      Value newest = arith::DivSIOp::create(
          b, loc, arith::SubIOp::create(b, loc, vis, one), size);
      Value pin = andI(b, loc, cmpI(b, loc, arith::CmpIPredicate::sge, vis, one),
                       cmpI(b, loc, arith::CmpIPredicate::eq, newest, blk));
      Value v = arith::SelectOp::create(b, loc, pin, posInf, max.getResult(0));
      memref::StoreOp::create(b, loc, v, blockScores, ValueRange{i, blk});
      return {};
    });
    return {};
  });
  func::ReturnOp::create(b, loc);
  return fn;
}

func::FuncOp buildHsiExpandKernel(ModuleOp module, const std::string &name,
                                  int64_t blockSize) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type f32 = b.getF32Type(), i8 = b.getI8Type();
  const int64_t dyn = ShapedType::kDynamic;
  func::FuncOp fn = startKernel(b, module, name,
                                {MemRefType::get({dyn, dyn}, f32),
                                 MemRefType::get({dyn, dyn}, i8),
                                 MemRefType::get({dyn, dyn}, i8)});
  Value blockScores = fn.getArgument(0), picked = fn.getArgument(1), mask = fn.getArgument(2);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1),
        size = indexConst(b, loc, blockSize);
  Value n = memref::DimOp::create(b, loc, mask, zero);
  Value width = memref::DimOp::create(b, loc, mask, one);
  loop(b, loc, zero, n, one, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
    loop(b, loc, zero, width, one, {}, [&](Value t, ValueRange) -> SmallVector<Value> {
      Value blk = arith::DivUIOp::create(b, loc, t, size);
      Value s = memref::LoadOp::create(b, loc, blockScores, ValueRange{i, blk});
      Value chosen = cmpI(b, loc, arith::CmpIPredicate::ne,
                          memref::LoadOp::create(b, loc, picked, ValueRange{i, blk}),
                          intConst(b, loc, i8, 0));
      Value keep = andI(b, loc, chosen, cmpF(b, loc, arith::CmpFPredicate::UNE, s, f32Const(b, loc, -kInf)));
      memref::StoreOp::create(b, loc, arith::ExtUIOp::create(b, loc, i8, keep), mask,
                              ValueRange{i, t});
      return {};
    });
    return {};
  });
  func::ReturnOp::create(b, loc);
  return fn;
}

} // namespace csa::codegen

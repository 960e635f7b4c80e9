//===- AttentionKernels.cpp - Attention primitives generated as IR --------===//
//
// Every floating-point operation of the reference kernels appears here once,
// in the same order and with the same operands: fp32 sums run in index order,
// bf16 rounding points are arith.truncf + arith.extf (nearest even, expanded
// to integer arithmetic by the host back end), std::max(a, b) is
// `a < b ? b : a` (so that its signed-zero and NaN behaviour is kept), and
// no fast-math flag is set, so LLVM neither reassociates nor contracts
// a * b + c into an FMA.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/AttentionKernels.h"

#include "codegen/host/KernelBuilder.h"
#include "codegen/host/ScalarOps.h"
#include "codegen/host/Transcendental.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <limits>
#include <utility>

using namespace mlir;

namespace csa::codegen {

using namespace scalar;

namespace {

/// `sparse_attn`'s block of indices (one online-softmax step).
constexpr int64_t kAttentionBlock = 64;

/// sum over e of lhs(e) * rhs(e) for e from 0 to n - 1, in that order (fp32,
/// a multiply then an add each), kChainUnroll elements a loop trip when they
/// divide n.
Value orderedDot(OpBuilder &b, Location loc, int64_t n, function_ref<Value(Value)> lhs,
                 function_ref<Value(Value)> rhs) {
  KernelBuilder k(b, loc);
  return k.reduceUnrolled(n, kChainUnroll, k.f32(0.f), [&](Value e, Value acc) {
    return k.add(acc, k.mul(lhs(e), rhs(e)));
  });
}

} // namespace

func::FuncOp buildSparseAttentionKernel(ModuleOp module,
                                        const std::string &name, int64_t heads,
                                        int64_t headDim) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type(), i32 = b.getI32Type();
  const int64_t dyn = ShapedType::kDynamic;
  auto qType = MemRefType::get({dyn, heads, headDim}, bf16);
  auto rowsType = MemRefType::get({dyn, headDim}, bf16);
  auto idxType = MemRefType::get({dyn, dyn}, i32);
  auto sinkType = MemRefType::get({heads}, f32);
  func::FuncOp fn = startKernel(b, module, name,
                                {qType, rowsType, idxType, sinkType, f32, qType});
  fn->setAttr(kSparseAttentionAttr,
              b.getDictionaryAttr({b.getNamedAttr("heads", b.getI64IntegerAttr(heads)),
                                   b.getNamedAttr("dim", b.getI64IntegerAttr(headDim))}));
  Value q = fn.getArgument(0), rows = fn.getArgument(1),
        idx = fn.getArgument(2), sink = fn.getArgument(3),
        scale = fn.getArgument(4), out = fn.getArgument(5);

  // Per (row, head) scratch: the output accumulator and one block's scores.
  Value acc = memref::AllocaOp::create(b, loc, MemRefType::get({headDim}, f32));
  Value sc = memref::AllocaOp::create(
      b, loc, MemRefType::get({kAttentionBlock}, f32));
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1),
        block = indexConst(b, loc, kAttentionBlock),
        cols = indexConst(b, loc, headDim), numHeads = indexConst(b, loc, heads);
  Value zeroF = f32Const(b, loc, 0.f), negInf = f32Const(b, loc, -kInf),
        startMax = f32Const(b, loc, -1e30f), zeroI32 = intConst(b, loc, i32, 0);
  Value n = memref::DimOp::create(b, loc, q, zero);
  Value numIdx = memref::DimOp::create(b, loc, idx, one);
  Type indexType = b.getIndexType();

  loop(b, loc, zero, n, one, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
    loop(b, loc, zero, numHeads, one, {},
         [&](Value h, ValueRange) -> SmallVector<Value> {
      loop(b, loc, zero, cols, one, {}, [&](Value e, ValueRange) -> SmallVector<Value> {
        memref::StoreOp::create(b, loc, zeroF, acc, e);
        return {};
      });
      // Online softmax over blocks of 64 indices: (running max, sum of exp).
      auto blocks = loop(b, loc, zero, numIdx, block, {startMax, zeroF},
                         [&](Value blk, ValueRange state) -> SmallVector<Value> {
        Value prevMax = state[0], sumExp = state[1];
        Value blockEnd = arith::MinSIOp::create(
            b, loc, numIdx, arith::AddIOp::create(b, loc, blk, block));
        // Scores of the block (-inf where the index is -1) and their max.
        auto scores = loop(b, loc, blk, blockEnd, one, {negInf},
                           [&](Value k, ValueRange bm) -> SmallVector<Value> {
          Value slot = arith::SubIOp::create(b, loc, k, blk);
          Value j = memref::LoadOp::create(b, loc, idx, ValueRange{i, k});
          Value valid = cmpI(b, loc, arith::CmpIPredicate::sge, j, zeroI32);
          auto ifValid = scf::IfOp::create(
              b, loc, valid,
              [&](OpBuilder &, Location) {
                Value r = arith::IndexCastOp::create(b, loc, indexType, j);
                auto dot = loop(b, loc, zero, cols, one, {zeroF},
                                [&](Value e, ValueRange d) -> SmallVector<Value> {
                  Value prod = arith::MulFOp::create(
                      b, loc, loadF32(b, loc, q, ValueRange{i, h, e}),
                      loadF32(b, loc, rows, ValueRange{r, e}));
                  return {arith::AddFOp::create(b, loc, d[0], prod)};
                });
                Value s = arith::MulFOp::create(b, loc, dot.getResult(0), scale);
                memref::StoreOp::create(b, loc, s, sc, slot);
                scf::YieldOp::create(b, loc, stdMax(b, loc, bm[0], s));
              },
              [&](OpBuilder &, Location) {
                memref::StoreOp::create(b, loc, negInf, sc, slot);
                scf::YieldOp::create(b, loc, bm[0]);
              });
          return {ifValid.getResult(0)};
        });
        Value newMax = stdMax(b, loc, prevMax, scores.getResult(0));
        Value rescale = emitExp32(
            b, loc, arith::SubFOp::create(b, loc, prevMax, newMax));
        loop(b, loc, zero, cols, one, {}, [&](Value e, ValueRange) -> SmallVector<Value> {
          Value v = memref::LoadOp::create(b, loc, acc, e);
          memref::StoreOp::create(b, loc, arith::MulFOp::create(b, loc, v, rescale),
                                  acc, e);
          return {};
        });
        // fp32 probabilities into the block sum, bf16 ones into P.V.
        auto probs = loop(b, loc, blk, blockEnd, one, {zeroF},
                          [&](Value k, ValueRange bs) -> SmallVector<Value> {
          Value slot = arith::SubIOp::create(b, loc, k, blk);
          Value s = memref::LoadOp::create(b, loc, sc, slot);
          Value p = emitExp32(b, loc,
                                        arith::SubFOp::create(b, loc, s, newMax));
          Value sum = arith::AddFOp::create(b, loc, bs[0], p);
          Value j = memref::LoadOp::create(b, loc, idx, ValueRange{i, k});
          Value valid = cmpI(b, loc, arith::CmpIPredicate::sge, j, zeroI32);
          scf::IfOp::create(b, loc, valid, [&](OpBuilder &, Location) {
            Value pb = roundBf16(b, loc, p);
            Value r = arith::IndexCastOp::create(b, loc, indexType, j);
            loop(b, loc, zero, cols, one, {},
                 [&](Value e, ValueRange) -> SmallVector<Value> {
              Value prod = arith::MulFOp::create(
                  b, loc, pb, loadF32(b, loc, rows, ValueRange{r, e}));
              Value v = memref::LoadOp::create(b, loc, acc, e);
              memref::StoreOp::create(b, loc, arith::AddFOp::create(b, loc, v, prod),
                                      acc, e);
              return {};
            });
            scf::YieldOp::create(b, loc);
          });
          return {sum};
        });
        Value newSum = arith::AddFOp::create(
            b, loc, arith::MulFOp::create(b, loc, sumExp, rescale),
            probs.getResult(0));
        return {newMax, newSum};
      });
      Value maxScore = blocks.getResult(0);
      Value sinkTerm = emitExp32(
          b, loc, arith::SubFOp::create(
                      b, loc, memref::LoadOp::create(b, loc, sink, h), maxScore));
      Value total = arith::AddFOp::create(b, loc, blocks.getResult(1), sinkTerm);
      loop(b, loc, zero, cols, one, {}, [&](Value e, ValueRange) -> SmallVector<Value> {
        Value v = arith::DivFOp::create(
            b, loc, memref::LoadOp::create(b, loc, acc, e), total);
        memref::StoreOp::create(b, loc, arith::TruncFOp::create(b, loc, bf16, v),
                                out, ValueRange{i, h, e});
        return {};
      });
      return {};
    });
    return {};
  });
  func::ReturnOp::create(b, loc);
  return fn;
}

int64_t attentionHeadThreads(int64_t headDim) {
  if (headDim % 32 != 0)
    return 0;
  for (int64_t t = std::min<int64_t>(headDim, kAttentionHeadMaxThreads); t >= 32; t -= 32)
    if (headDim % t == 0)
      return t;
  return 32;
}

void buildSparseAttentionHeadBody(func::FuncOp fn, int64_t heads, int64_t headDim,
                                  const AttentionHeadLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type(), i32 = b.getI32Type(),
       indexType = b.getIndexType();
  const int64_t threads = lanes.threads, perLane = headDim / threads, chunk = lanes.chunk;
  // Rows a lane's P.V loads ahead (its channels of each), at most 32 values.
  const int64_t ahead = std::clamp<int64_t>(32 / perLane, 1, 16);
  // A fresh body over the same arguments (plus the shared buffers).
  Block *entry = freshBody(fn, {lanes.sharedScoresType, lanes.sharedIndexType,
                                lanes.sharedProbsType, lanes.sharedQueryType});
  b.setInsertionPointToStart(entry);
  const unsigned numArgs = entry->getNumArguments();
  Value q = entry->getArgument(0), rows = entry->getArgument(1),
        idx = entry->getArgument(2), sink = entry->getArgument(3),
        scale = entry->getArgument(4), out = entry->getArgument(5),
        sharedS = entry->getArgument(numArgs - 4), sharedJ = entry->getArgument(numArgs - 3),
        sharedP = entry->getArgument(numArgs - 2), sharedQ = entry->getArgument(numArgs - 1);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1),
        block = indexConst(b, loc, kAttentionBlock), cols = indexConst(b, loc, headDim),
        step = indexConst(b, loc, threads);
  Value zeroF = f32Const(b, loc, 0.f), negInf = f32Const(b, loc, -kInf),
        startMax = f32Const(b, loc, -1e30f), zeroI32 = intConst(b, loc, i32, 0),
        minusOne = intConst(b, loc, i32, -1);
  Value i = lanes.row(b, loc), h = lanes.head(b, loc), lane = lanes.lane(b, loc);
  Value n = memref::DimOp::create(b, loc, q, zero);
  Value numIdx = memref::DimOp::create(b, loc, idx, one);
  // A block past the rows or heads runs the loops (their barriers) idle;
  // the condition is the same for all its threads.
  Value active = andI(b, loc, cmpI(b, loc, arith::CmpIPredicate::slt, i, n),
                      cmpI(b, loc, arith::CmpIPredicate::slt, h,
                           indexConst(b, loc, heads)));
  auto select = [&](Value cond, TypeRange types, function_ref<SmallVector<Value>()> then,
                    function_ref<SmallVector<Value>()> otherwise) {
    return emitSelect(b, loc, cond, types, then, otherwise);
  };
  // Lane l owns channels l, l + threads, ... (neighbouring lanes,
  // neighbouring channels of a row).
  auto channel = [&](int64_t m) {
    return arith::AddIOp::create(b, loc, lane, indexConst(b, loc, threads * m)).getResult();
  };
  // The query head in shared memory, as f32 (every dot reads all of it).
  for (int64_t m = 0; m < perLane; ++m) {
    Value e = channel(m);
    auto qv = select(active, TypeRange{f32}, [&]() -> SmallVector<Value> {
      return {loadF32(b, loc, q, ValueRange{i, h, e})};
    }, [&]() -> SmallVector<Value> { return {zeroF}; });
    memref::StoreOp::create(b, loc, qv.getResult(0), sharedQ, ValueRange{e});
  }
  lanes.barrier(b, loc);
  // `rows` as a pointer, and whether its rows start on 16 bytes (device
  // allocations do; headDim x 2 bytes is a multiple of 16).
  Value rowsBase, rowsStartAligned; // (captured below: no structured binding in C++17)
  std::tie(rowsBase, rowsStartAligned) = bytePointer(b, loc, rows, lanes.rowsAddressSpace);
  Value rowsAligned = andI(b, loc, rowsStartAligned,
                           arith::ConstantOp::create(b, loc, b.getBoolAttr(headDim % 8 == 0)));
  // Row r's dot with the query head, in D order.
  auto dotWithRow = [&](Value r) -> Value {
    auto vectorDot = [&]() -> SmallVector<Value> {
      // 32 bf16 a loop trip in four 16-byte loads, all issued before the
      // trip's adds; element 2w of a load is its word w's low half.
      auto words = VectorType::get({4}, i32);
      const int64_t perTrip = headDim % 32 == 0 ? 32 : 8;
      auto dot = loop(b, loc, zero, cols, indexConst(b, loc, perTrip), {zeroF},
                      [&](Value e0, ValueRange d) -> SmallVector<Value> {
        SmallVector<Value> vecs;
        for (int64_t v = 0; v < perTrip / 8; ++v) {
          Value at = arith::IndexCastUIOp::create(
              b, loc, b.getI64Type(),
              arith::MulIOp::create(
                  b, loc,
                  arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, r, cols),
                                        arith::AddIOp::create(b, loc, e0,
                                                              indexConst(b, loc, 8 * v))),
                  indexConst(b, loc, 2)));
          Value ptr = LLVM::GEPOp::create(b, loc, rowsBase.getType(), b.getI8Type(), rowsBase,
                                          ValueRange{at});
          vecs.push_back(LLVM::LoadOp::create(b, loc, words, ptr, /*alignment=*/16));
        }
        Value acc = d[0];
        for (int64_t v = 0; v < perTrip / 8; ++v)
          for (int64_t w = 0; w < 4; ++w) {
            Value word = LLVM::ExtractElementOp::create(
                b, loc, vecs[size_t(v)], LLVM::ConstantOp::create(b, loc, i32, int32_t(w)));
            std::pair<Value, Value> pair = bf16PairToF32(b, loc, word);
            for (int64_t half = 0; half < 2; ++half) {
              Value e = arith::AddIOp::create(b, loc, e0,
                                              indexConst(b, loc, 8 * v + 2 * w + half));
              Value rowValue = half ? pair.second : pair.first;
              Value prod = arith::MulFOp::create(
                  b, loc, memref::LoadOp::create(b, loc, sharedQ, ValueRange{e}), rowValue);
              acc = arith::AddFOp::create(b, loc, acc, prod);
            }
          }
        return {acc};
      });
      return {dot.getResult(0)};
    };
    auto scalarDot = [&]() -> SmallVector<Value> {
      return {orderedDot(
          b, loc, headDim,
          [&](Value e) -> Value {
            return memref::LoadOp::create(b, loc, sharedQ, ValueRange{e});
          },
          [&](Value e) { return loadF32(b, loc, rows, ValueRange{r, e}); })};
    };
    return select(rowsAligned, TypeRange{f32}, vectorDot, scalarDot).getResult(0);
  };
  SmallVector<Value> init{startMax, zeroF};
  for (int64_t m = 0; m < perLane; ++m)
    init.push_back(zeroF);
  // Chunks of `chunk` indices: first all their scores (independent dots,
  // spread over the lanes), then their blocks of 64 in order.
  auto chunks = loop(b, loc, zero, numIdx, indexConst(b, loc, chunk), init,
                     [&](Value c0, ValueRange chunkState) -> SmallVector<Value> {
    Value chunkEnd = arith::MinSIOp::create(
        b, loc, numIdx, arith::AddIOp::create(b, loc, c0, indexConst(b, loc, chunk)));
    Value chunkCount = arith::SubIOp::create(b, loc, chunkEnd, c0);
    // Scores: lane l takes slots l, l + threads, ... (-inf, index -1 where
    // the index is -1).
    loop(b, loc, lane, chunkCount, step, {}, [&](Value slot, ValueRange) -> SmallVector<Value> {
      auto scored = select(active, TypeRange{f32, i32}, [&]() -> SmallVector<Value> {
        Value k = arith::AddIOp::create(b, loc, c0, slot);
        Value j = memref::LoadOp::create(b, loc, idx, ValueRange{i, k});
        Value valid = cmpI(b, loc, arith::CmpIPredicate::sge, j, zeroI32);
        auto dotted = select(valid, TypeRange{f32}, [&]() -> SmallVector<Value> {
          Value r = arith::IndexCastOp::create(b, loc, indexType, j);
          return {arith::MulFOp::create(b, loc, dotWithRow(r), scale)};
        }, [&]() -> SmallVector<Value> { return {negInf}; });
        return {dotted.getResult(0), arith::SelectOp::create(b, loc, valid, j, minusOne)};
      }, [&]() -> SmallVector<Value> { return {negInf, minusOne}; });
      memref::StoreOp::create(b, loc, scored.getResult(0), sharedS, ValueRange{slot});
      memref::StoreOp::create(b, loc, scored.getResult(1), sharedJ, ValueRange{slot});
      return {};
    });
    lanes.barrier(b, loc);
    auto blocks = loop(b, loc, zero, chunkCount, block, chunkState,
                       [&](Value blk, ValueRange state) -> SmallVector<Value> {
      Value prevMax = state[0], sumExp = state[1];
      SmallVector<Value> acc(state.drop_front(2));
      Value blockEnd = arith::MinSIOp::create(
          b, loc, chunkCount, arith::AddIOp::create(b, loc, blk, block));
      Value count = arith::SubIOp::create(b, loc, blockEnd, blk);
      // The block's max in index order (a -1 index's -inf leaves it as is).
      auto bm = loop(b, loc, zero, count, one, {negInf},
                     [&](Value k, ValueRange m) -> SmallVector<Value> {
        Value s = memref::LoadOp::create(b, loc, sharedS,
                                         ValueRange{arith::AddIOp::create(b, loc, blk, k)});
        return {stdMax(b, loc, m[0], s)};
      });
      Value newMax = stdMax(b, loc, prevMax, bm.getResult(0));
      Value rescale = emitExp32(b, loc, arith::SubFOp::create(b, loc, prevMax, newMax));
      for (Value &a : acc)
        a = arith::MulFOp::create(b, loc, a, rescale);
      // The block's probabilities, a lane each.
      loop(b, loc, lane, count, step, {}, [&](Value k, ValueRange) -> SmallVector<Value> {
        Value s = memref::LoadOp::create(b, loc, sharedS,
                                         ValueRange{arith::AddIOp::create(b, loc, blk, k)});
        Value p = emitExp32(b, loc, arith::SubFOp::create(b, loc, s, newMax));
        memref::StoreOp::create(b, loc, p, sharedP, ValueRange{k});
        return {};
      });
      lanes.barrier(b, loc);
      // fp32 probabilities into the block sum, bf16 ones into P.V, in index
      // order; the rows of `ahead` indices loaded before their adds.
      SmallVector<Value> pvInit{zeroF};
      pvInit.append(acc.begin(), acc.end());
      // (Without rows every index is -1: nothing is loaded.)
      auto pvLoop = [&](bool withRows) -> SmallVector<Value> {
      auto pv = loop(b, loc, zero, count, indexConst(b, loc, ahead), pvInit,
                     [&](Value k0, ValueRange st) -> SmallVector<Value> {
        SmallVector<Value> inBlock, valid, p;
        SmallVector<SmallVector<Value>> values;
        for (int64_t u = 0; u < ahead; ++u) {
          Value k = arith::AddIOp::create(b, loc, k0, indexConst(b, loc, u));
          Value in = cmpI(b, loc, arith::CmpIPredicate::slt, k, count);
          // Slots past the block read slot 0 and are not used.
          Value kk = arith::SelectOp::create(b, loc, in, k, zero);
          Value j = memref::LoadOp::create(b, loc, sharedJ,
                                           ValueRange{arith::AddIOp::create(b, loc, blk, kk)});
          Value ok = andI(b, loc, in, cmpI(b, loc, arith::CmpIPredicate::sge, j, zeroI32));
          Value r = arith::IndexCastOp::create(
              b, loc, indexType, arith::SelectOp::create(b, loc, ok, j, zeroI32));
          inBlock.push_back(in);
          valid.push_back(ok);
          p.push_back(memref::LoadOp::create(b, loc, sharedP, ValueRange{kk}));
          SmallVector<Value> row;
          for (int64_t m = 0; m < perLane; ++m)
            row.push_back(withRows ? loadF32(b, loc, rows, ValueRange{r, channel(m)}) : zeroF);
          values.push_back(row);
        }
        Value sum = st[0];
        SmallVector<Value> cur(st.drop_front(1));
        for (int64_t u = 0; u < ahead; ++u) {
          sum = arith::SelectOp::create(b, loc, inBlock[size_t(u)],
                                        arith::AddFOp::create(b, loc, sum, p[size_t(u)]), sum);
          Value pb = roundBf16(b, loc, p[size_t(u)]);
          for (int64_t m = 0; m < perLane; ++m) {
            Value prod = arith::MulFOp::create(b, loc, pb, values[size_t(u)][size_t(m)]);
            cur[size_t(m)] = arith::SelectOp::create(
                b, loc, valid[size_t(u)], arith::AddFOp::create(b, loc, cur[size_t(m)], prod),
                cur[size_t(m)]);
          }
        }
        SmallVector<Value> result{sum};
        result.append(cur.begin(), cur.end());
        return result;
      });
      return SmallVector<Value>(pv.getResults().begin(), pv.getResults().end());
      };
      SmallVector<Type> pvTypes(size_t(1 + perLane), f32);
      Value hasRows = cmpI(b, loc, arith::CmpIPredicate::sgt,
                           memref::DimOp::create(b, loc, rows, zero), zero);
      auto pv = select(hasRows, pvTypes, [&] { return pvLoop(true); },
                       [&] { return pvLoop(false); });
      // Before the next block's probabilities overwrite what the lanes read.
      lanes.barrier(b, loc);
      Value newSum = arith::AddFOp::create(
          b, loc, arith::MulFOp::create(b, loc, sumExp, rescale), pv.getResult(0));
      SmallVector<Value> next{newMax, newSum};
      for (int64_t m = 0; m < perLane; ++m)
        next.push_back(pv.getResult(unsigned(1 + m)));
      return next;
    });
    // (The blocks' last barrier orders the next chunk's scores after every
    // read of this one's.)
    return SmallVector<Value>(blocks.getResults().begin(), blocks.getResults().end());
  });
  auto store = scf::IfOp::create(b, loc, active, /*withElse=*/false);
  b.setInsertionPointToStart(store.thenBlock());
  Value maxScore = chunks.getResult(0);
  Value sinkTerm = emitExp32(
      b, loc, arith::SubFOp::create(b, loc, memref::LoadOp::create(b, loc, sink, h), maxScore));
  Value total = arith::AddFOp::create(b, loc, chunks.getResult(1), sinkTerm);
  for (int64_t m = 0; m < perLane; ++m) {
    Value v = arith::DivFOp::create(b, loc, chunks.getResult(unsigned(2 + m)), total);
    memref::StoreOp::create(b, loc, arith::TruncFOp::create(b, loc, bf16, v), out,
                            ValueRange{i, h, channel(m)});
  }
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

int64_t attentionSplits(int64_t heads, int64_t multiprocessors) {
  // The form's block holds about 220 registers a thread (one block an SM):
  // more blocks than multiprocessors run in waves, each paying the block's
  // fixed cost again (8 splits at 64 heads: 47 us against 53 for one).
  int64_t splits = 1;
  while (splits < 16 && heads * splits * 2 <= multiprocessors)
    splits *= 2;
  return splits;
}

int64_t attentionWarpVector(int64_t headDim) {
  if (headDim % 256 == 0)
    return 8;
  return headDim % 64 == 0 ? 2 : 1;
}

void buildSparseAttentionWarpBody(func::FuncOp fn, int64_t heads, int64_t headDim,
                                  const AttentionWarpLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type(), i32 = b.getI32Type(),
       indexType = b.getIndexType();
  const int64_t warps = lanes.threads / 32, perLane = headDim / 32,
                vec = attentionWarpVector(headDim), runs = perLane / vec;
  // Rows a warp's trip loads before their adds (scores and P.V): the
  // walk is bound by the latency of those loads, not their bytes.
  const int64_t kAhead = std::clamp<int64_t>(128 / perLane, 1, 8);
  Block *entry = freshBody(fn, {lanes.sharedScoresType, lanes.sharedIndexType,
                                lanes.sharedReduceType, lanes.sharedAccType});
  b.setInsertionPointToStart(entry);
  const unsigned numArgs = entry->getNumArguments();
  Value q = entry->getArgument(0), rows = entry->getArgument(1),
        idx = entry->getArgument(2), sink = entry->getArgument(3),
        scale = entry->getArgument(4), out = entry->getArgument(5),
        sharedS = entry->getArgument(numArgs - 4), sharedJ = entry->getArgument(numArgs - 3),
        sharedR = entry->getArgument(numArgs - 2), sharedA = entry->getArgument(numArgs - 1);
  auto c = [&](int64_t v) { return indexConst(b, loc, v); };
  Value zero = c(0), one = c(1);
  Value zeroF = f32Const(b, loc, 0.f), negInf = f32Const(b, loc, -kInf),
        startMax = f32Const(b, loc, -1e30f), zeroI32 = intConst(b, loc, i32, 0),
        minusOne = intConst(b, loc, i32, -1);
  Value i = lanes.row(b, loc), h = lanes.head(b, loc), thread = lanes.lane(b, loc);
  Value warp = arith::DivUIOp::create(b, loc, thread, c(32));
  Value lane = arith::RemUIOp::create(b, loc, thread, c(32));
  Value laneIsZero = cmpI(b, loc, arith::CmpIPredicate::eq, lane, zero);
  Value n = memref::DimOp::create(b, loc, q, zero);
  Value numIdx = memref::DimOp::create(b, loc, idx, one);
  Value active = andI(b, loc, cmpI(b, loc, arith::CmpIPredicate::slt, i, n),
                      cmpI(b, loc, arith::CmpIPredicate::slt, h, c(heads)));
  // The block's slice of the indices: with the split form and few rows, the
  // split's consecutive share; otherwise all of them for split 0, none for
  // the others.
  const int64_t splits = std::max<int64_t>(lanes.splits, 1);
  Value split = splits > 1 ? lanes.split(b, loc) : zero;
  Value splitting = splits > 1 ? cmpI(b, loc, arith::CmpIPredicate::ule, n, c(lanes.splitRows))
                               : arith::ConstantIntOp::create(b, loc, 0, 1).getResult();
  Value sliceBegin = zero, sliceEnd = numIdx;
  if (splits > 1) {
    Value share = arith::DivUIOp::create(
        b, loc, arith::AddIOp::create(b, loc, numIdx, c(splits - 1)), c(splits));
    Value begin = arith::MinUIOp::create(b, loc, numIdx, arith::MulIOp::create(b, loc, split, share));
    Value end = arith::MinUIOp::create(b, loc, numIdx, arith::AddIOp::create(b, loc, begin, share));
    Value firstSplit = cmpI(b, loc, arith::CmpIPredicate::eq, split, zero);
    sliceBegin = arith::SelectOp::create(b, loc, splitting, begin, zero);
    sliceEnd = arith::SelectOp::create(b, loc, splitting, end,
                                       arith::SelectOp::create(b, loc, firstSplit, numIdx, zero));
  }
  Value hasRows = cmpI(b, loc, arith::CmpIPredicate::sgt,
                       memref::DimOp::create(b, loc, rows, zero), zero);
  auto select = [&](Value cond, TypeRange types, function_ref<SmallVector<Value>()> then,
                    function_ref<SmallVector<Value>()> otherwise) {
    return emitSelect(b, loc, cond, types, then, otherwise);
  };
  auto when = [&](Value cond, function_ref<void()> body) { emitWhen(b, loc, cond, body); };
  // Lane l's channel m: run m / vec at l x vec + 32 x vec x (m / vec).
  auto channel = [&](int64_t m) -> Value {
    Value base = arith::MulIOp::create(b, loc, lane, c(vec));
    return arith::AddIOp::create(b, loc, base, c((m / vec) * 32 * vec + m % vec));
  };
  SmallVector<Value> query;
  for (int64_t m = 0; m < perLane; ++m)
    query.push_back(select(active, TypeRange{f32}, [&]() -> SmallVector<Value> {
      return {loadF32(b, loc, q, ValueRange{i, h, channel(m)})};
    }, [&]() -> SmallVector<Value> { return {zeroF}; }).getResult(0));
  Value rowsBase, rowsAligned;
  std::tie(rowsBase, rowsAligned) = bytePointer(b, loc, rows, lanes.rowsAddressSpace);
  // Lane l's channels of row r (vector loads when the rows start on 16
  // bytes; a row of headDim bf16 is then on 4 or 16 too).
  auto loadRow = [&](Value r) -> SmallVector<Value> {
    SmallVector<Type> types(size_t(perLane), f32);
    auto vectorLoads = [&]() -> SmallVector<Value> {
      SmallVector<Value> values;
      for (int64_t run = 0; run < runs; ++run) {
        Value at = arith::IndexCastUIOp::create(
            b, loc, b.getI64Type(),
            arith::MulIOp::create(b, loc,
                                  arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, r, c(headDim)),
                                                        channel(run * vec)),
                                  c(2)));
        Value ptr = LLVM::GEPOp::create(b, loc, rowsBase.getType(), b.getI8Type(), rowsBase,
                                        ValueRange{at});
        SmallVector<Value> words;
        if (vec == 8) {
          Value v = LLVM::LoadOp::create(b, loc, VectorType::get({4}, i32), ptr, /*alignment=*/16);
          for (int32_t w = 0; w < 4; ++w)
            words.push_back(LLVM::ExtractElementOp::create(
                b, loc, v, LLVM::ConstantOp::create(b, loc, i32, w)));
        } else {
          words.push_back(LLVM::LoadOp::create(b, loc, i32, ptr, /*alignment=*/4));
        }
        // Element 2w of a load is word w's low half.
        for (Value word : words) {
          std::pair<Value, Value> pair = bf16PairToF32(b, loc, word);
          values.push_back(pair.first);
          values.push_back(pair.second);
        }
      }
      return values;
    };
    auto elementLoads = [&]() -> SmallVector<Value> {
      SmallVector<Value> values;
      for (int64_t m = 0; m < perLane; ++m)
        values.push_back(loadF32(b, loc, rows, ValueRange{r, channel(m)}));
      return values;
    };
    if (vec == 1)
      return elementLoads();
    auto op = select(rowsAligned, types, vectorLoads, elementLoads);
    return SmallVector<Value>(op.getResults().begin(), op.getResults().end());
  };
  // The warp's sum (max) of every lane's `v`, on every lane; lanes may
  // differ in a sum's last bits, so lane 0's is the one used.
  auto warpReduce = [&](Value v, bool isMax) {
    for (int32_t mask = 16; mask >= 1; mask /= 2) {
      Value other = lanes.shuffleXor(b, loc, v, mask);
      v = isMax ? stdMax(b, loc, v, other) : arith::AddFOp::create(b, loc, v, other).getResult();
    }
    return v;
  };
  // Lane 0 of each warp puts `v` in sharedR[base + warp]; after a barrier
  // every thread combines the warps' values in warp order.
  auto blockReduce = [&](Value v, bool isMax, int64_t base) {
    Value warpValue = warpReduce(v, isMax);
    when(laneIsZero, [&] {
      memref::StoreOp::create(b, loc, warpValue, sharedR,
                              ValueRange{arith::AddIOp::create(b, loc, warp, c(base))});
    });
    lanes.barrier(b, loc);
    Value total = memref::LoadOp::create(b, loc, sharedR, ValueRange{c(base)});
    for (int64_t w = 1; w < warps; ++w) {
      Value x = memref::LoadOp::create(b, loc, sharedR, ValueRange{c(base + w)});
      total = isMax ? stdMax(b, loc, total, x) : arith::AddFOp::create(b, loc, total, x).getResult();
    }
    return total;
  };
  SmallVector<Value> init{startMax, zeroF};
  init.append(size_t(perLane), zeroF);
  auto chunks = loop(b, loc, sliceBegin, sliceEnd, c(lanes.chunk), init,
                     [&](Value c0, ValueRange state) -> SmallVector<Value> {
    Value prevMax = state[0], sumExp = state[1];
    SmallVector<Value> acc(state.drop_front(2));
    Value chunkEnd = arith::MinSIOp::create(
        b, loc, sliceEnd, arith::AddIOp::create(b, loc, c0, c(lanes.chunk)));
    Value count = arith::SubIOp::create(b, loc, chunkEnd, c0);
    // The chunk's indices in shared memory first (one coalesced pass; -1
    // where nothing is attended), so a warp's trip waits for one load.
    loop(b, loc, thread, count, c(lanes.threads), {}, [&](Value k, ValueRange) -> SmallVector<Value> {
      Value j = select(active, TypeRange{i32}, [&]() -> SmallVector<Value> {
        Value v = memref::LoadOp::create(b, loc, idx, ValueRange{i, arith::AddIOp::create(b, loc, c0, k)});
        return {arith::SelectOp::create(b, loc, cmpI(b, loc, arith::CmpIPredicate::sge, v, zeroI32), v,
                                        minusOne).getResult()};
      }, [&]() -> SmallVector<Value> { return {minusOne}; }).getResult(0);
      memref::StoreOp::create(b, loc, j, sharedJ, ValueRange{k});
      return {};
    });
    lanes.barrier(b, loc);
    // Scores: warp w takes slots w x kAhead, + warps x kAhead, ..., kAhead
    // of them a trip (the rows loaded first). Without rows every index is -1.
    auto scoreTrips = [&](bool withRows) {
      loop(b, loc, arith::MulIOp::create(b, loc, warp, c(kAhead)), count, c(warps * kAhead), {},
           [&](Value k0, ValueRange) -> SmallVector<Value> {
        SmallVector<Value> slot, index;
        SmallVector<SmallVector<Value>> values;
        for (int64_t u = 0; u < kAhead; ++u) {
          Value k = arith::AddIOp::create(b, loc, k0, c(u));
          Value in = cmpI(b, loc, arith::CmpIPredicate::slt, k, count);
          Value kk = arith::SelectOp::create(b, loc, in, k, zero);
          Value j = memref::LoadOp::create(b, loc, sharedJ, ValueRange{kk});
          Value ok = andI(b, loc, in, cmpI(b, loc, arith::CmpIPredicate::sge, j, zeroI32));
          slot.push_back(k);
          index.push_back(arith::SelectOp::create(b, loc, ok, j, minusOne));
          if (withRows)
            values.push_back(loadRow(arith::IndexCastOp::create(
                b, loc, indexType, arith::SelectOp::create(b, loc, ok, j, zeroI32))));
        }
        for (int64_t u = 0; u < kAhead; ++u) {
          Value s = negInf;
          if (withRows) {
            Value partial = zeroF;
            for (int64_t m = 0; m < perLane; ++m)
              partial = arith::AddFOp::create(
                  b, loc, partial,
                  arith::MulFOp::create(b, loc, query[size_t(m)], values[size_t(u)][size_t(m)]));
            Value dot = arith::MulFOp::create(b, loc, warpReduce(partial, false), scale);
            Value ok = cmpI(b, loc, arith::CmpIPredicate::sge, index[size_t(u)], zeroI32);
            s = arith::SelectOp::create(b, loc, ok, dot, negInf);
          }
          when(andI(b, loc, laneIsZero, cmpI(b, loc, arith::CmpIPredicate::slt, slot[size_t(u)], count)), [&] {
            memref::StoreOp::create(b, loc, s, sharedS, ValueRange{slot[size_t(u)]});
          });
        }
        return {};
      });
    };
    auto withRowsIf = scf::IfOp::create(b, loc, hasRows, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(withRowsIf.thenBlock());
      scoreTrips(true);
      b.setInsertionPointToStart(withRowsIf.elseBlock());
      scoreTrips(false);
    }
    lanes.barrier(b, loc);
    // The chunk's max, then its probabilities (in place of the scores) and
    // their sum.
    auto localMax = loop(b, loc, thread, count, c(lanes.threads), {negInf},
                         [&](Value k, ValueRange m) -> SmallVector<Value> {
      return {stdMax(b, loc, m[0], memref::LoadOp::create(b, loc, sharedS, ValueRange{k}))};
    });
    Value newMax = stdMax(b, loc, prevMax, blockReduce(localMax.getResult(0), true, 0));
    Value rescale = emitExp32(b, loc, arith::SubFOp::create(b, loc, prevMax, newMax));
    auto localSum = loop(b, loc, thread, count, c(lanes.threads), {zeroF},
                         [&](Value k, ValueRange s) -> SmallVector<Value> {
      Value p = emitExp32(
          b, loc,
          arith::SubFOp::create(b, loc, memref::LoadOp::create(b, loc, sharedS, ValueRange{k}),
                                newMax));
      memref::StoreOp::create(b, loc, p, sharedS, ValueRange{k});
      return {arith::AddFOp::create(b, loc, s[0], p)};
    });
    Value chunkSum = blockReduce(localSum.getResult(0), false, warps);
    for (Value &a : acc)
      a = arith::MulFOp::create(b, loc, a, rescale);
    // P.V: warp w adds its slots' rows (bf16 probabilities) for all its
    // lanes' channels.
    auto pvTrips = [&](bool withRows) -> SmallVector<Value> {
      if (!withRows)
        return acc;
      auto pv = loop(b, loc, arith::MulIOp::create(b, loc, warp, c(kAhead)), count,
                     c(warps * kAhead), acc, [&](Value k0, ValueRange st) -> SmallVector<Value> {
        SmallVector<Value> ok, pb;
        SmallVector<SmallVector<Value>> values;
        for (int64_t u = 0; u < kAhead; ++u) {
          Value k = arith::AddIOp::create(b, loc, k0, c(u));
          Value in = cmpI(b, loc, arith::CmpIPredicate::slt, k, count);
          Value kk = arith::SelectOp::create(b, loc, in, k, zero);
          Value j = memref::LoadOp::create(b, loc, sharedJ, ValueRange{kk});
          Value valid = andI(b, loc, in, cmpI(b, loc, arith::CmpIPredicate::sge, j, zeroI32));
          ok.push_back(valid);
          pb.push_back(roundBf16(b, loc, memref::LoadOp::create(b, loc, sharedS, ValueRange{kk})));
          values.push_back(loadRow(arith::IndexCastOp::create(
              b, loc, indexType, arith::SelectOp::create(b, loc, valid, j, zeroI32))));
        }
        SmallVector<Value> cur(st.begin(), st.end());
        for (int64_t u = 0; u < kAhead; ++u)
          for (int64_t m = 0; m < perLane; ++m) {
            Value prod = arith::MulFOp::create(b, loc, pb[size_t(u)], values[size_t(u)][size_t(m)]);
            cur[size_t(m)] = arith::SelectOp::create(
                b, loc, ok[size_t(u)], arith::AddFOp::create(b, loc, cur[size_t(m)], prod),
                cur[size_t(m)]);
          }
        return cur;
      });
      return SmallVector<Value>(pv.getResults().begin(), pv.getResults().end());
    };
    SmallVector<Type> accTypes(size_t(perLane), f32);
    auto pv = select(hasRows, accTypes, [&] { return pvTrips(true); },
                     [&] { return pvTrips(false); });
    // Before the next chunk's scores overwrite what the warps read.
    lanes.barrier(b, loc);
    SmallVector<Value> next{newMax, arith::AddFOp::create(
                                        b, loc, arith::MulFOp::create(b, loc, sumExp, rescale),
                                        chunkSum)};
    next.append(pv.getResults().begin(), pv.getResults().end());
    return next;
  });
  // The warps' P.V meet in shared memory; a thread a channel adds them in
  // warp order.
  for (int64_t m = 0; m < perLane; ++m)
    memref::StoreOp::create(b, loc, chunks.getResult(unsigned(2 + m)), sharedA,
                            ValueRange{warp, channel(m)});
  lanes.barrier(b, loc);
  Value maxScore = chunks.getResult(0);
  // Channel e of the block's P.V: the warps' sums in warp order.
  auto blockAcc = [&](Value e) {
    Value sum = memref::LoadOp::create(b, loc, sharedA, ValueRange{zero, e});
    for (int64_t w = 1; w < warps; ++w)
      sum = arith::AddFOp::create(b, loc, sum,
                                  memref::LoadOp::create(b, loc, sharedA, ValueRange{c(w), e}));
    return sum;
  };
  auto sinkOver = [&](Value max) {
    return emitExp32(b, loc, arith::SubFOp::create(b, loc, memref::LoadOp::create(b, loc, sink, h), max));
  };
  // The whole walk's output: P.V over the sum and the sink's term.
  auto storeWhole = [&](Value active) {
    Value sinkTerm = select(active, TypeRange{f32}, [&]() -> SmallVector<Value> {
      return {sinkOver(maxScore)};
    }, [&]() -> SmallVector<Value> { return {zeroF}; }).getResult(0);
    Value total = arith::AddFOp::create(b, loc, chunks.getResult(1), sinkTerm);
    when(active, [&] {
      loop(b, loc, thread, c(headDim), c(lanes.threads), {},
           [&](Value e, ValueRange) -> SmallVector<Value> {
        Value v = arith::DivFOp::create(b, loc, blockAcc(e), total);
        memref::StoreOp::create(b, loc, arith::TruncFOp::create(b, loc, bf16, v), out,
                                ValueRange{i, h, e});
        return {};
      });
    });
  };
  if (splits == 1) {
    storeWhole(active);
    b.setInsertionPointToEnd(entry);
    func::ReturnOp::create(b, loc);
    return;
  }
  // The split form's partials: slot (row, head, split) holds the slice's
  // P.V, then its max and its sum; a (row, head)'s count of finished
  // slices, back to 0 once combined (zero when the module loads).
  const int64_t slot = headDim + 2;
  auto partialsType = MemRefType::get({lanes.splitRows, heads, splits, slot}, f32);
  auto countsType = MemRefType::get({lanes.splitRows, heads}, i32);
  const std::string partialsName = (fn.getSymName() + "_split_partials").str(),
                    countsName = (fn.getSymName() + "_split_counts").str();
  {
    OpBuilder gb(fn);
    memref::GlobalOp::create(gb, loc, partialsName, gb.getStringAttr("private"), partialsType,
                             DenseElementsAttr::get(RankedTensorType::get(partialsType.getShape(), f32),
                                                    gb.getF32FloatAttr(0.f)),
                             /*constant=*/false, /*alignment=*/gb.getI64IntegerAttr(16));
    memref::GlobalOp::create(gb, loc, countsName, gb.getStringAttr("private"), countsType,
                             DenseElementsAttr::get(RankedTensorType::get(countsType.getShape(), i32),
                                                    gb.getI32IntegerAttr(0)),
                             /*constant=*/false, /*alignment=*/gb.getI64IntegerAttr(16));
  }
  auto splitIf = scf::IfOp::create(b, loc, splitting, /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(splitIf.elseBlock());
    storeWhole(andI(b, loc, active, cmpI(b, loc, arith::CmpIPredicate::eq, split, zero)));
  }
  b.setInsertionPointToStart(splitIf.thenBlock());
  Value partials = memref::GetGlobalOp::create(b, loc, partialsType, partialsName);
  Value counts = memref::GetGlobalOp::create(b, loc, countsType, countsName);
  Value threadIsZero = cmpI(b, loc, arith::CmpIPredicate::eq, thread, zero);
  when(active, [&] {
    loop(b, loc, thread, c(headDim), c(lanes.threads), {},
         [&](Value e, ValueRange) -> SmallVector<Value> {
      memref::StoreOp::create(b, loc, blockAcc(e), partials, ValueRange{i, h, split, e});
      return {};
    });
    when(threadIsZero, [&] {
      memref::StoreOp::create(b, loc, maxScore, partials, ValueRange{i, h, split, c(headDim)});
      memref::StoreOp::create(b, loc, chunks.getResult(1), partials,
                              ValueRange{i, h, split, c(headDim + 1)});
    });
  });
  // Every thread's partials are stored; thread 0 makes them visible before
  // it counts the slice, and the block learns whether it was the last.
  lanes.barrier(b, loc);
  when(andI(b, loc, active, threadIsZero), [&] {
    if (lanes.fence)
      lanes.fence(b, loc);
    Value before = memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi,
                                               intConst(b, loc, i32, 1), counts, ValueRange{i, h});
    Value last = cmpI(b, loc, arith::CmpIPredicate::eq, before, intConst(b, loc, i32, splits - 1));
    memref::StoreOp::create(b, loc, arith::SelectOp::create(b, loc, last, f32Const(b, loc, 1.f), zeroF),
                            sharedR, ValueRange{zero});
  });
  lanes.barrier(b, loc);
  Value isLast = andI(b, loc, active,
                      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                            memref::LoadOp::create(b, loc, sharedR, ValueRange{zero}),
                                            f32Const(b, loc, 1.f)));
  when(isLast, [&] {
    if (lanes.fence)
      lanes.fence(b, loc);
    // The other blocks' partials, read past the L1 (volatile): they were
    // written on other multiprocessors during this launch.
    Value base = bytePointer(b, loc, partials, lanes.rowsAddressSpace).first;
    auto mul = [&](Value x, int64_t y) { return arith::MulIOp::create(b, loc, x, c(y)).getResult(); };
    auto add = [&](Value x, Value y) { return arith::AddIOp::create(b, loc, x, y).getResult(); };
    // Slot (i, h, s) starts at float ((i x heads + h) x splits + s) x slot.
    Value firstSlot = mul(add(mul(i, heads), h), splits);
    auto partial = [&](int64_t s, Value e) -> Value {
      Value flat = add(mul(add(firstSlot, c(s)), slot), e);
      Value at = arith::IndexCastUIOp::create(b, loc, b.getI64Type(), mul(flat, 4));
      Value ptr = LLVM::GEPOp::create(b, loc, base.getType(), b.getI8Type(), base, ValueRange{at});
      return LLVM::LoadOp::create(b, loc, f32, ptr, /*alignment=*/4, /*isVolatile=*/true);
    };
    Value max = partial(0, c(headDim));
    for (int64_t s = 1; s < splits; ++s)
      max = stdMax(b, loc, max, partial(s, c(headDim)));
    SmallVector<Value> weight;
    Value total = sinkOver(max);
    for (int64_t s = 0; s < splits; ++s) {
      weight.push_back(emitExp32(b, loc, arith::SubFOp::create(b, loc, partial(s, c(headDim)), max)));
      total = arith::AddFOp::create(
          b, loc, total, arith::MulFOp::create(b, loc, weight.back(), partial(s, c(headDim + 1))));
    }
    loop(b, loc, thread, c(headDim), c(lanes.threads), {},
         [&](Value e, ValueRange) -> SmallVector<Value> {
      Value sum = arith::MulFOp::create(b, loc, weight[0], partial(0, e));
      for (int64_t s = 1; s < splits; ++s)
        sum = arith::AddFOp::create(b, loc, sum,
                                    arith::MulFOp::create(b, loc, weight[size_t(s)], partial(s, e)));
      Value v = arith::DivFOp::create(b, loc, sum, total);
      memref::StoreOp::create(b, loc, arith::TruncFOp::create(b, loc, bf16, v), out,
                              ValueRange{i, h, e});
      return {};
    });
    when(threadIsZero, [&] {
      memref::StoreOp::create(b, loc, intConst(b, loc, i32, 0), counts, ValueRange{i, h});
    });
  });
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

func::FuncOp buildScaleRowsKernel(ModuleOp module, const std::string &name,
                                  int64_t columns, float scale) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  auto type = MemRefType::get({ShapedType::kDynamic, columns}, b.getBF16Type());
  func::FuncOp fn = startKernel(b, module, name, {type, type});
  KernelBuilder k(b, loc);
  Value x = fn.getArgument(0), y = fn.getArgument(1), s = k.f32(scale);
  k.loop(k.idx(0), k.dim(x, 0), [&](Value r) {
    k.loop(columns, [&](Value c) {
      k.storeBf16(k.mul(k.loadF32(x, {r, c}), s), y, {r, c});
    });
  });
  k.finish();
  return fn;
}

func::FuncOp buildIndexScoreKernel(ModuleOp module, const std::string &name,
                                   int64_t heads, int64_t dim) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type(), i64 = b.getI64Type();
  const int64_t dyn = ShapedType::kDynamic;
  auto qType = MemRefType::get({dyn, heads, dim}, bf16);
  auto keysType = MemRefType::get({dyn, dim}, bf16);
  auto wType = MemRefType::get({dyn, heads}, bf16);
  auto visibleType = MemRefType::get({dyn}, i64);
  auto outType = MemRefType::get({dyn, dyn}, f32);
  func::FuncOp fn = startKernel(b, module, name,
                                {qType, keysType, wType, visibleType, outType});
  Value q = fn.getArgument(0), keys = fn.getArgument(1), w = fn.getArgument(2),
        visible = fn.getArgument(3), out = fn.getArgument(4);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1),
        numHeads = indexConst(b, loc, heads);
  Value zeroF = f32Const(b, loc, 0.f), negInf = f32Const(b, loc, -kInf);
  Value n = memref::DimOp::create(b, loc, out, zero);
  Value width = memref::DimOp::create(b, loc, out, one);
  Value numKeys = memref::DimOp::create(b, loc, keys, zero);

  loop(b, loc, zero, n, one, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
    Value vis = arith::IndexCastOp::create(
        b, loc, b.getIndexType(), memref::LoadOp::create(b, loc, visible, i));
    Value limit = arith::MinSIOp::create(b, loc, vis, numKeys);
    loop(b, loc, zero, width, one, {}, [&](Value t, ValueRange) -> SmallVector<Value> {
      Value scored = cmpI(b, loc, arith::CmpIPredicate::slt, t, limit);
      auto score = scf::IfOp::create(
          b, loc, scored,
          [&](OpBuilder &, Location) {
            auto total = loop(b, loc, zero, numHeads, one, {zeroF},
                              [&](Value h, ValueRange sum) -> SmallVector<Value> {
              Value dot = orderedDot(
                  b, loc, dim,
                  [&](Value e) { return loadF32(b, loc, q, ValueRange{i, h, e}); },
                  [&](Value e) { return loadF32(b, loc, keys, ValueRange{t, e}); });
              Value relu = stdMax(b, loc, roundBf16(b, loc, dot), zeroF);
              Value weighted = arith::MulFOp::create(
                  b, loc, relu, loadF32(b, loc, w, ValueRange{i, h}));
              return {arith::AddFOp::create(b, loc, sum[0],
                                            roundBf16(b, loc, weighted))};
            });
            scf::YieldOp::create(b, loc, roundBf16(b, loc, total.getResult(0)));
          },
          [&](OpBuilder &, Location) { scf::YieldOp::create(b, loc, negInf); });
      memref::StoreOp::create(b, loc, score.getResult(0), out, ValueRange{i, t});
      return {};
    });
    return {};
  });
  func::ReturnOp::create(b, loc);
  fn->setAttr(kIndexScoreAttr,
              b.getDictionaryAttr({b.getNamedAttr("heads", b.getI64IntegerAttr(heads)),
                                   b.getNamedAttr("dim", b.getI64IntegerAttr(dim))}));
  return fn;
}

void buildIndexScoreBlockBody(func::FuncOp fn, int64_t heads, int64_t dim,
                              const IndexScoreBlockLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Block *entry = freshBody(fn, {lanes.sharedQueriesType, lanes.sharedKeysType,
                                lanes.sharedHeadsType});
  b.setInsertionPointToStart(entry);
  KernelBuilder k(b, loc);
  Value q = entry->getArgument(0), keys = entry->getArgument(1), w = entry->getArgument(2),
        visible = entry->getArgument(3), out = entry->getArgument(4),
        sq = entry->getArgument(5), sk = entry->getArgument(6), sh = entry->getArgument(7);
  const int64_t tileKeys = lanes.keys, threads = heads * tileKeys;
  auto when = [&](Value cond, function_ref<void()> body) { emitWhen(b, loc, cond, body); };
  auto ult = [&](Value a, Value c) { return cmpI(b, loc, arith::CmpIPredicate::ult, a, c); };
  Value i = lanes.row(b, loc), firstTile = lanes.tile(b, loc), tid = lanes.thread(b, loc);
  Value width = k.dim(out, 1), numKeys = k.dim(keys, 0);
  // Every thread of a block has the same row and tiles: a block past them
  // skips everything, barriers included.
  auto active = scf::IfOp::create(
      b, loc,
      arith::AndIOp::create(b, loc, ult(i, k.dim(out, 0)),
                            ult(k.muli(firstTile, k.idx(tileKeys)), width)),
      /*withElse=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  Value vis = arith::IndexCastOp::create(b, loc, b.getIndexType(), k.load(visible, i));
  Value limit = arith::MinSIOp::create(b, loc, vis, numKeys);
  // Stage the row's queries, once for every tile the block takes (the first
  // tile's barrier orders them before their use).
  for (int64_t s0 = 0; s0 < heads * dim; s0 += threads) {
    Value slot = k.addi(tid, k.idx(s0));
    when(ult(slot, k.idx(heads * dim)), [&] {
      Value h = arith::DivUIOp::create(b, loc, slot, k.idx(dim));
      Value e = arith::RemUIOp::create(b, loc, slot, k.idx(dim));
      k.store(k.load(q, {i, h, e}), sq, {h, e});
    });
  }
  // The block's tiles: its own, or every tileStride-th from it. Each pass
  // writes the keys' tile before its first barrier and the heads' terms
  // after it, and reads the terms after its second: a thread still adding
  // the last tile's terms never meets keys or terms of the next.
  auto scoreTile = [&](Value tile) {
    Value t0 = k.muli(tile, k.idx(tileKeys));
    // Keys past the limit are never read: their scores are -inf.
    for (int64_t s0 = 0; s0 < tileKeys * dim; s0 += threads) {
      Value slot = k.addi(tid, k.idx(s0));
      Value tk = arith::DivUIOp::create(b, loc, slot, k.idx(dim));
      Value e = arith::RemUIOp::create(b, loc, slot, k.idx(dim));
      Value t = k.addi(t0, tk);
      when(arith::AndIOp::create(b, loc, ult(slot, k.idx(tileKeys * dim)),
                                 cmpI(b, loc, arith::CmpIPredicate::slt, t, limit)),
           [&] { k.store(k.load(keys, {t, e}), sk, {tk, e}); });
    }
    lanes.barrier(b, loc);
    // Thread (h, key): the host's per-head term.
    Value tk = arith::RemUIOp::create(b, loc, tid, k.idx(tileKeys));
    Value h = arith::DivUIOp::create(b, loc, tid, k.idx(tileKeys));
    Value t = k.addi(t0, tk);
    when(arith::AndIOp::create(b, loc, ult(tid, k.idx(threads)),
                               cmpI(b, loc, arith::CmpIPredicate::slt, t, limit)),
         [&] {
           Value dot = orderedDot(
               b, loc, dim, [&](Value e) { return loadF32(b, loc, sq, ValueRange{h, e}); },
               [&](Value e) { return loadF32(b, loc, sk, ValueRange{tk, e}); });
           Value relu = stdMax(b, loc, roundBf16(b, loc, dot), f32Const(b, loc, 0.f));
           Value weighted =
               arith::MulFOp::create(b, loc, relu, loadF32(b, loc, w, ValueRange{i, h}));
           k.store(roundBf16(b, loc, weighted), sh, {tk, h});
         });
    lanes.barrier(b, loc);
    // A thread per key adds its heads in order.
    Value key = k.addi(t0, tid);
    when(arith::AndIOp::create(b, loc, ult(tid, k.idx(tileKeys)), ult(key, width)), [&] {
      auto score = scf::IfOp::create(
          b, loc, cmpI(b, loc, arith::CmpIPredicate::slt, key, limit),
          [&](OpBuilder &, Location) {
            Value total = k.reduce(heads, f32Const(b, loc, 0.f), [&](Value hh, Value acc) {
              return arith::AddFOp::create(b, loc, acc, k.load(sh, {tid, hh})).getResult();
            });
            scf::YieldOp::create(b, loc, roundBf16(b, loc, total));
          },
          [&](OpBuilder &, Location) { scf::YieldOp::create(b, loc, f32Const(b, loc, -kInf)); });
      k.store(score.getResult(0), out, {i, key});
    });
  };
  if (lanes.tileStride) {
    Value tiles = arith::DivUIOp::create(b, loc, k.addi(width, k.idx(tileKeys - 1)),
                                         k.idx(tileKeys));
    auto loop = scf::ForOp::create(b, loc, firstTile, tiles, lanes.tileStride(b, loc));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(loop.getBody()->getTerminator());
    scoreTile(loop.getInductionVar());
  } else {
    scoreTile(firstTile);
  }
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

} // namespace csa::codegen

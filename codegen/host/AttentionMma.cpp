//===- AttentionMma.cpp - Sparse attention on tensor cores -----------------===//
//
// See AttentionMma.h. Fragment layouts are PTX's for mma.m16n8k16 with bf16
// operands: lane l is (g, t) = (l / 4, l % 4); A (16 x 16, row-major) holds
// (g, 2t..2t+1), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..); B (16 x 8,
// column-major) holds (2t..2t+1, g) and (2t + 8.., g); C/D hold (g, 2t..2t+1)
// and (g + 8, 2t..2t+1). Heads are the rows of A, the chunk's rows the
// columns of the scores, so the scores' C fragment is, read back from shared
// memory, the A fragment of P.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/AttentionMma.h"

#include "codegen/host/KernelBuilder.h"
#include "codegen/host/Transcendental.h"
#include "dialects/csa/CsaDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>
#include <limits>
#include <tuple>

using namespace mlir;

namespace csa::codegen {

int64_t attentionMmaSplits(const AttentionMmaShape &shape, int64_t multiprocessors) {
  int64_t splits = 1;
  while (splits < 16 && shape.blocksPerRow() * splits * 2 <= 2 * multiprocessors)
    splits *= 2;
  return splits;
}

std::optional<AttentionMmaShape> attentionMmaShape(int64_t heads, int64_t headDim) {
  if (!sparseAttentionMmaFits(heads, headDim))
    return std::nullopt;
  AttentionMmaShape shape;
  shape.heads = heads;
  shape.headDim = headDim;
  shape.channels = std::min<int64_t>(headDim, 256);
  return shape;
}

void buildSparseAttentionMmaBody(func::FuncOp fn, const AttentionMmaShape &shape,
                                 const AttentionMmaLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Type bf16 = b.getBF16Type(), i32 = b.getI32Type(),
       i16 = b.getIntegerType(16), indexType = b.getIndexType();
  const int64_t dim = shape.headDim, chunk = kAttentionMmaChunk, kSteps = dim / 16,
                warpChannels = shape.channels / 4, fragments = warpChannels / 8,
                rowThreads = kAttentionMmaThreads / chunk, // threads staging a row
                threadWords = dim / 8 / rowThreads;          // 16-byte words each
  Block *entry = freshBody(fn, {lanes.sharedRowsType, lanes.sharedScoresType,
                                lanes.sharedIndexType});
  b.setInsertionPointToStart(entry);
  const unsigned numArgs = entry->getNumArguments();
  Value q = entry->getArgument(0), rows = entry->getArgument(1), idx = entry->getArgument(2),
        sink = entry->getArgument(3), scale = entry->getArgument(4), out = entry->getArgument(5),
        sharedRows = entry->getArgument(numArgs - 3), sharedScores = entry->getArgument(numArgs - 2),
        sharedIdx = entry->getArgument(numArgs - 1);

  auto c = [&](int64_t v) { return indexConst(b, loc, v); };
  auto ci = [&](int64_t v) { return intConst(b, loc, i32, v); };
  auto addI = [&](Value x, Value y) -> Value { return arith::AddIOp::create(b, loc, x, y); };
  auto mulI = [&](Value x, Value y) -> Value { return arith::MulIOp::create(b, loc, x, y); };
  auto divI = [&](Value x, int64_t y) -> Value { return arith::DivUIOp::create(b, loc, x, c(y)); };
  auto remI = [&](Value x, int64_t y) -> Value { return arith::RemUIOp::create(b, loc, x, c(y)); };
  auto cmpI = [&](arith::CmpIPredicate p, Value x, Value y) -> Value {
    return arith::CmpIOp::create(b, loc, p, x, y);
  };
  auto addF = [&](Value x, Value y) -> Value { return arith::AddFOp::create(b, loc, x, y); };
  auto mulF = [&](Value x, Value y) -> Value { return arith::MulFOp::create(b, loc, x, y); };
  auto subF = [&](Value x, Value y) -> Value { return arith::SubFOp::create(b, loc, x, y); };
  auto maxF = [&](Value x, Value y) -> Value { // x unless y > x (no NaN here)
    return arith::SelectOp::create(
        b, loc, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, y, x), y, x);
  };
  auto load = [&](Value memref, ValueRange at) -> Value {
    return memref::LoadOp::create(b, loc, memref, at);
  };
  auto store = [&](Value v, Value memref, ValueRange at) {
    memref::StoreOp::create(b, loc, v, memref, at);
  };
  // A bf16 value's 16 bits in the low half of an i32, and two such as one
  // mma operand word (the lower index in the low half).
  auto bitsOf = [&](Value v) -> Value {
    return arith::ExtUIOp::create(b, loc, i32, arith::BitcastOp::create(b, loc, i16, v));
  };
  auto pack = [&](Value low, Value high) -> Value {
    return arith::OrIOp::create(b, loc, low, arith::ShLIOp::create(b, loc, high, ci(16)));
  };
  auto bf16Bits = [&](Value x) { return bitsOf(arith::TruncFOp::create(b, loc, bf16, x)); };
  auto exp = [&](Value x) { return emitExp32(b, loc, x); };

  Value zero = c(0), zeroI32 = ci(0), minusOne = ci(-1), zeroF = f32Const(b, loc, 0.f),
        negInf = f32Const(b, loc, -std::numeric_limits<float>::infinity()),
        startMax = f32Const(b, loc, -1e30f);
  Value i = lanes.row(b, loc), tile = lanes.tile(b, loc), thread = lanes.thread(b, loc);
  Value warp = divI(thread, 32), lane = remI(thread, 32);
  Value g = divI(lane, 4), t = remI(lane, 4), t2 = mulI(t, c(2));
  Value headBase = mulI(divI(tile, shape.channelSlices()), c(kAttentionMmaHeads));
  Value channelBase = mulI(remI(tile, shape.channelSlices()), c(shape.channels));
  Value n = memref::DimOp::create(b, loc, q, zero);
  Value numIdx = memref::DimOp::create(b, loc, idx, c(1));
  Value active = arith::AndIOp::create(b, loc, cmpI(arith::CmpIPredicate::ult, i, n),
                                       cmpI(arith::CmpIPredicate::ult, tile,
                                            c(shape.blocksPerRow())));
  // The block's indices [first, end): all of them, or with the split walk
  // its slice of whole chunks (a query of at most splitRows rows; with more,
  // slice 0 walks everything and the others nothing).
  const int64_t splits = std::max<int64_t>(lanes.splits, 1);
  Value split = splits > 1 ? lanes.split(b, loc) : zero;
  Value isFirstSplit = cmpI(arith::CmpIPredicate::eq, split, zero);
  Value splitting = splits > 1 ? cmpI(arith::CmpIPredicate::ule, n, c(lanes.splitRows))
                               : arith::ConstantIntOp::create(b, loc, 0, 1).getResult();
  Value first = zero, end = numIdx, busySlices = zero;
  if (splits > 1) {
    Value chunksTotal = divI(addI(numIdx, c(chunk - 1)), chunk);
    Value chunksPerSlice = divI(addI(chunksTotal, c(splits - 1)), splits);
    Value perSlice = mulI(chunksPerSlice, c(chunk));
    // Slices that hold indices (the others store empty partials, which the
    // combine skips).
    Value perSliceAtLeast1 = arith::MaxUIOp::create(b, loc, chunksPerSlice, c(1));
    busySlices = arith::DivUIOp::create(
        b, loc, addI(chunksTotal, arith::SubIOp::create(b, loc, perSliceAtLeast1, c(1))),
        perSliceAtLeast1);
    Value sliceFirst = arith::MinUIOp::create(b, loc, mulI(split, perSlice), numIdx);
    Value sliceEnd = arith::MinUIOp::create(b, loc, addI(sliceFirst, perSlice), numIdx);
    first = arith::SelectOp::create(b, loc, splitting, sliceFirst, zero);
    end = arith::SelectOp::create(b, loc, splitting, sliceEnd,
                                  arith::SelectOp::create(b, loc, isFirstSplit, numIdx, zero));
  }
  // The whole block takes the branch or none: its barriers stay uniform.
  emitWhen(b, loc, active, [&] {
    Value headLow = addI(headBase, g), headHigh = addI(headLow, c(8));
    // The query's A fragments, all of the head dimension: a word (two
    // channels) a load where the query lies on 16 bytes, else two element
    // loads.
    Value qBase, qAligned; // lambdas below capture them (no structured bindings)
    std::tie(qBase, qAligned) = bytePointer(b, loc, q, lanes.rowsAddressSpace);
    auto wordLoads = [&](bool vector) {
      return [&, vector]() -> SmallVector<Value> {
        auto queryWord = [&](Value h, int64_t channel) -> Value {
          Value e = addI(c(channel), t2);
          if (!vector)
            return pack(bitsOf(load(q, {i, h, e})), bitsOf(load(q, {i, h, addI(e, c(1))})));
          Value element = addI(mulI(addI(mulI(i, c(shape.heads)), h), c(dim)), e);
          Value at = arith::IndexCastUIOp::create(b, loc, b.getI64Type(), mulI(element, c(2)));
          Value ptr =
              LLVM::GEPOp::create(b, loc, qBase.getType(), b.getI8Type(), qBase, ValueRange{at});
          return LLVM::LoadOp::create(b, loc, i32, ptr, /*alignment=*/4, /*isVolatile=*/false,
                                      /*isNonTemporal=*/false, /*isInvariant=*/true);
        };
        SmallVector<Value> words;
        for (int64_t s = 0; s < kSteps; ++s)
          for (Value w : {queryWord(headLow, 16 * s), queryWord(headHigh, 16 * s),
                          queryWord(headLow, 16 * s + 8), queryWord(headHigh, 16 * s + 8)})
            words.push_back(w);
        return words;
      };
    };
    auto queryWords = emitSelect(b, loc, qAligned, SmallVector<Type>(size_t(4 * kSteps), i32),
                                 wordLoads(true), wordLoads(false));
    SmallVector<SmallVector<Value, 4>> queryA;
    for (int64_t s = 0; s < kSteps; ++s) {
      auto word = [&](int64_t e) { return queryWords.getResult(unsigned(4 * s + e)); };
      queryA.push_back({word(0), word(1), word(2), word(3)});
    }
    Value rowsBase, rowsAligned;
    std::tie(rowsBase, rowsAligned) = bytePointer(b, loc, rows, lanes.rowsAddressSpace);
    Value stageRow = divI(thread, rowThreads), stagePart = remI(thread, rowThreads);
    Value scoreRow = addI(mulI(warp, c(8)), g); // the chunk row of this lane's B fragments

    // State: the running max and this lane's part of the sum for heads g
    // and g + 8, and P.V's C fragments (4 f32 each).
    SmallVector<Value> init{startMax, startMax, zeroF, zeroF};
    init.append(size_t(fragments * 4), zeroF);
    auto chunks = scf::ForOp::create(b, loc, first, end, c(chunk), init);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(chunks.getBody());
      Value c0 = chunks.getInductionVar();
      ValueRange state = chunks.getRegionIterArgs();
      Value runMax[2] = {state[0], state[1]}, runSum[2] = {state[2], state[3]};
      SmallVector<Value> acc(state.begin() + 4, state.end());

      // Stage the chunk's rows: rowThreads threads a row, zeros for -1.
      Value k = addI(c0, stageRow);
      Value j = emitSelect(b, loc, cmpI(arith::CmpIPredicate::ult, k, end), TypeRange{i32},
                           [&]() -> SmallVector<Value> { return {load(idx, {i, k})}; },
                           [&]() -> SmallVector<Value> { return {minusOne}; })
                    .getResult(0);
      Value has = cmpI(arith::CmpIPredicate::sge, j, zeroI32);
      j = arith::SelectOp::create(b, loc, has, j, minusOne);
      emitWhen(b, loc, cmpI(arith::CmpIPredicate::eq, stagePart, zero),
               [&] { store(j, sharedIdx, {stageRow}); });
      Value r = arith::IndexCastOp::create(b, loc, indexType,
                                           arith::SelectOp::create(b, loc, has, j, zeroI32));
      SmallVector<Type> wordTypes(size_t(4 * threadWords), i32);
      auto wordOf = [&](int64_t w) { return addI(mulI(stagePart, c(threadWords)), c(w)); };
      auto loaded = emitSelect(b, loc, has, wordTypes, [&]() -> SmallVector<Value> {
        auto vectorLoads = [&]() -> SmallVector<Value> {
          SmallVector<Value> words;
          for (int64_t w = 0; w < threadWords; ++w) {
            Value element = addI(mulI(r, c(dim)), mulI(wordOf(w), c(8)));
            Value at = arith::IndexCastUIOp::create(b, loc, b.getI64Type(), mulI(element, c(2)));
            for (Value v : load16Bytes(b, loc, rowsBase, at))
              words.push_back(v);
          }
          return words;
        };
        auto elementLoads = [&]() -> SmallVector<Value> {
          SmallVector<Value> words;
          for (int64_t w = 0; w < threadWords; ++w)
            for (int64_t e = 0; e < 4; ++e) {
              Value at = addI(mulI(wordOf(w), c(8)), c(2 * e));
              words.push_back(pack(bitsOf(load(rows, {r, at})),
                                   bitsOf(load(rows, {r, addI(at, c(1))}))));
            }
          return words;
        };
        auto op = emitSelect(b, loc, rowsAligned, wordTypes, vectorLoads, elementLoads);
        return SmallVector<Value>(op.getResults().begin(), op.getResults().end());
      }, [&]() -> SmallVector<Value> { return SmallVector<Value>(wordTypes.size(), zeroI32); });
      for (int64_t w = 0; w < threadWords; ++w)
        for (int64_t e = 0; e < 4; ++e)
          store(loaded.getResult(unsigned(4 * w + e)), sharedRows,
                {stageRow, addI(mulI(wordOf(w), c(4)), c(e))});
      lanes.barrier(b, loc);

      // Scores of chunk rows 8 x warp .. + 7 for the 16 heads.
      SmallVector<Value> scores{zeroF, zeroF, zeroF, zeroF};
      for (int64_t s = 0; s < kSteps; ++s) {
        Value word = addI(c(8 * s), t);
        Value b0 = load(sharedRows, {scoreRow, word});
        Value b1 = load(sharedRows, {scoreRow, addI(word, c(4))});
        scores = lanes.mma(b, loc, queryA[size_t(s)], ValueRange{b0, b1}, scores);
      }
      for (int64_t e = 0; e < 4; ++e) {
        Value column = addI(addI(mulI(warp, c(8)), t2), c(e % 2));
        Value valid = cmpI(arith::CmpIPredicate::sge, load(sharedIdx, {column}), zeroI32);
        Value s = arith::SelectOp::create(b, loc, valid, mulF(scores[size_t(e)], scale), negInf);
        store(s, sharedScores, {e < 2 ? g : addI(g, c(8)), column});
      }
      lanes.barrier(b, loc);

      // One online-softmax step over the chunk: this lane's 8 columns of
      // heads g and g + 8 (2t, 2t + 1, 8 + 2t, ... 24 + 2t + 1), the max
      // over the 4 lanes of a row's quad.
      SmallVector<Value> next(4), probs[2];
      Value rescale[2];
      for (int64_t half = 0; half < 2; ++half) {
        Value row = half == 0 ? g : addI(g, c(8));
        SmallVector<Value> values;
        for (int64_t jj = 0; jj < 8; ++jj)
          values.push_back(load(sharedScores, {row, addI(c(8 * (jj / 2) + jj % 2), t2)}));
        Value chunkMax = values[0];
        for (int64_t jj = 1; jj < 8; ++jj)
          chunkMax = maxF(chunkMax, values[size_t(jj)]);
        chunkMax = maxF(chunkMax, lanes.shuffleXor(b, loc, chunkMax, 1));
        chunkMax = maxF(chunkMax, lanes.shuffleXor(b, loc, chunkMax, 2));
        Value newMax = maxF(runMax[half], chunkMax);
        rescale[half] = exp(subF(runMax[half], newMax));
        Value sum = mulF(runSum[half], rescale[half]);
        for (Value v : values) {
          Value masked = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, v, negInf);
          Value p = arith::SelectOp::create(b, loc, masked, zeroF, exp(subF(v, newMax)));
          probs[half].push_back(p);
          sum = addF(sum, p);
        }
        next[size_t(half)] = newMax;
        next[size_t(2 + half)] = sum;
      }
      // P's A fragments (bf16, as the reference rounds them), chunk rows
      // 16 x kk .. + 15.
      SmallVector<SmallVector<Value, 4>> probsA;
      for (int64_t kk = 0; kk < chunk / 16; ++kk) {
        auto word = [&](int64_t half, int64_t jj) {
          return pack(bf16Bits(probs[half][size_t(jj)]), bf16Bits(probs[half][size_t(jj + 1)]));
        };
        probsA.push_back({word(0, 4 * kk), word(1, 4 * kk), word(0, 4 * kk + 2),
                          word(1, 4 * kk + 2)});
      }
      // P.V for this warp's channels: B (chunk row 2t.., channel g) from the
      // staged words, a bf16 a half.
      Value shift = arith::IndexCastOp::create(b, loc, i32, mulI(remI(g, 2), c(16)));
      Value mask = ci(0xFFFF);
      for (int64_t f = 0; f < fragments; ++f) {
        Value channel = addI(addI(channelBase, mulI(warp, c(warpChannels))), c(8 * f));
        Value word = addI(divI(channel, 2), divI(g, 2));
        auto valueAt = [&](int64_t rowOffset) -> Value {
          Value w = load(sharedRows, {addI(t2, c(rowOffset)), word});
          return arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, w, shift), mask);
        };
        SmallVector<Value> fragment(acc.begin() + 4 * f, acc.begin() + 4 * f + 4);
        for (int64_t e = 0; e < 4; ++e)
          fragment[size_t(e)] = mulF(fragment[size_t(e)], rescale[e / 2]);
        for (int64_t kk = 0; kk < chunk / 16; ++kk) {
          Value b0 = pack(valueAt(16 * kk), valueAt(16 * kk + 1));
          Value b1 = pack(valueAt(16 * kk + 8), valueAt(16 * kk + 9));
          fragment = lanes.mma(b, loc, probsA[size_t(kk)], ValueRange{b0, b1}, fragment);
        }
        for (int64_t e = 0; e < 4; ++e)
          acc[size_t(4 * f + e)] = fragment[size_t(e)];
      }
      // Before the next chunk's rows and scores overwrite what was read.
      lanes.barrier(b, loc);
      next.append(acc.begin(), acc.end());
      scf::YieldOp::create(b, loc, next);
    }

    // This lane's heads' running maxima and probability sums (its quad's
    // parts added; every warp holds the same).
    Value maxOf[2], sumOf[2];
    for (int64_t half = 0; half < 2; ++half) {
      Value sum = chunks.getResult(unsigned(2 + half));
      sum = addF(sum, lanes.shuffleXor(b, loc, sum, 1));
      sumOf[half] = addF(sum, lanes.shuffleXor(b, loc, sum, 2));
      maxOf[half] = chunks.getResult(unsigned(half));
    }
    // The output channel of this lane's accumulator `e` of fragment f.
    auto channelOf = [&](int64_t f, int64_t e) {
      return addI(addI(addI(mulI(warp, c(warpChannels)), c(8 * f)), t2), c(e));
    };
    // The whole walk's outputs: the denominators add the sink.
    auto storeWhole = [&] {
      for (int64_t half = 0; half < 2; ++half) {
        Value head = half == 0 ? headLow : headHigh;
        Value total = addF(sumOf[half], exp(subF(load(sink, {head}), maxOf[half])));
        for (int64_t f = 0; f < fragments; ++f)
          for (int64_t e = 0; e < 2; ++e) {
            Value v = arith::DivFOp::create(
                b, loc, chunks.getResult(unsigned(4 + 4 * f + 2 * half + e)), total);
            store(arith::TruncFOp::create(b, loc, bf16, v), out,
                  {i, head, addI(channelBase, channelOf(f, e))});
          }
      }
    };
    if (splits == 1) {
      storeWhole();
      return;
    }
    auto splitIf = scf::IfOp::create(b, loc, splitting, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(splitIf.elseBlock());
      emitWhen(b, loc, isFirstSplit, storeWhole);
    }
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(splitIf.thenBlock());
    // Slot (row, tile, split): the slice's P.V (16 heads x channels), then
    // the 16 maxima and the 16 sums; a (row, tile)'s count of finished
    // slices, back to 0 once combined (zero when the module loads).
    const int64_t heads = kAttentionMmaHeads, channels = shape.channels,
                  maxAt = heads * channels, sumAt = maxAt + heads, slot = sumAt + heads;
    Type f32 = b.getF32Type();
    auto partialsType =
        MemRefType::get({lanes.splitRows, shape.blocksPerRow(), splits, slot}, f32);
    auto countsType = MemRefType::get({lanes.splitRows, shape.blocksPerRow()}, i32);
    const std::string partialsName = (fn.getSymName() + "_split_partials").str(),
                      countsName = (fn.getSymName() + "_split_counts").str();
    {
      OpBuilder gb(fn);
      memref::GlobalOp::create(
          gb, loc, partialsName, gb.getStringAttr("private"), partialsType,
          DenseElementsAttr::get(RankedTensorType::get(partialsType.getShape(), f32),
                                 gb.getF32FloatAttr(0.f)),
          /*constant=*/false, /*alignment=*/gb.getI64IntegerAttr(16));
      memref::GlobalOp::create(
          gb, loc, countsName, gb.getStringAttr("private"), countsType,
          DenseElementsAttr::get(RankedTensorType::get(countsType.getShape(), i32),
                                 gb.getI32IntegerAttr(0)),
          /*constant=*/false, /*alignment=*/gb.getI64IntegerAttr(16));
    }
    Value partials = memref::GetGlobalOp::create(b, loc, partialsType, partialsName);
    Value counts = memref::GetGlobalOp::create(b, loc, countsType, countsName);
    for (int64_t half = 0; half < 2; ++half) {
      Value head = half == 0 ? g : addI(g, c(8)); // within the block's 16
      for (int64_t f = 0; f < fragments; ++f)
        for (int64_t e = 0; e < 2; ++e)
          store(chunks.getResult(unsigned(4 + 4 * f + 2 * half + e)), partials,
                {i, tile, split, addI(mulI(head, c(channels)), channelOf(f, e))});
      emitWhen(b, loc,
               arith::AndIOp::create(b, loc, cmpI(arith::CmpIPredicate::eq, warp, zero),
                                     cmpI(arith::CmpIPredicate::eq, t, zero)),
               [&] {
                 store(maxOf[half], partials, {i, tile, split, addI(c(maxAt), head)});
                 store(sumOf[half], partials, {i, tile, split, addI(c(sumAt), head)});
               });
    }
    // Every thread's partials are stored; thread 0 makes them visible before
    // it counts the slice, and the block learns whether it was the last
    // (through the chunk's index buffer, free now).
    Value threadIsZero = cmpI(arith::CmpIPredicate::eq, thread, zero);
    lanes.barrier(b, loc);
    emitWhen(b, loc, threadIsZero, [&] {
      if (lanes.fence)
        lanes.fence(b, loc);
      Value before = memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi, ci(1),
                                                 counts, ValueRange{i, tile});
      store(arith::ExtUIOp::create(b, loc, i32,
                                   cmpI(arith::CmpIPredicate::eq, before, ci(int32_t(splits - 1)))),
            sharedIdx, {zero});
    });
    lanes.barrier(b, loc);
    Value isLast = cmpI(arith::CmpIPredicate::eq, load(sharedIdx, {zero}), ci(1));
    emitWhen(b, loc, isLast, [&] {
      // The fence after the count orders the other blocks' partials before
      // these loads (the PTX memory model's fence-fence synchronization; the
      // fence also drops this multiprocessor's L1 lines), so plain loads
      // read them: they can be in flight together, volatile ones could not.
      if (lanes.fence)
        lanes.fence(b, loc);
      auto partial = [&](int64_t s, Value e) -> Value {
        return load(partials, {i, tile, c(s), e});
      };
      // Threads 0-15 weigh the slices of head `thread` (e^(m_s - M) into the
      // scores' row, the denominator into its last column)...
      emitWhen(b, loc, cmpI(arith::CmpIPredicate::ult, thread, c(heads)), [&] {
        Value max = partial(0, addI(c(maxAt), thread));
        for (int64_t s = 1; s < splits; ++s)
          max = maxF(max, partial(s, addI(c(maxAt), thread)));
        Value total = exp(subF(load(sink, {addI(headBase, thread)}), max));
        for (int64_t s = 0; s < splits; ++s) {
          Value weight = exp(subF(partial(s, addI(c(maxAt), thread)), max));
          store(weight, sharedScores, {thread, c(s)});
          total = addF(total, mulF(weight, partial(s, addI(c(sumAt), thread))));
        }
        store(total, sharedScores, {thread, c(chunk + 3)});
      });
      lanes.barrier(b, loc);
      // ... and every thread combines its outputs, kOutputsInFlight at a
      // time with the busy slices' loads of all of them issued together
      // (an empty slice's weight is 0 and its P.V zeros: skipped).
      constexpr int64_t kOutputsInFlight = 4;
      const int64_t perThread = maxAt / kAttentionMmaThreads; // a multiple of 4
      auto outputs = scf::ForOp::create(b, loc, zero, c(perThread), c(kOutputsInFlight));
      {
        OpBuilder::InsertionGuard loopGuard(b);
        b.setInsertionPointToStart(outputs.getBody());
        Value m0 = outputs.getInductionVar();
        SmallVector<Value> at, head, sums;
        for (int64_t u = 0; u < kOutputsInFlight; ++u) {
          Value o = addI(thread, mulI(addI(m0, c(u)), c(kAttentionMmaThreads)));
          at.push_back(o);
          head.push_back(divI(o, channels));
        }
        SmallVector<Value> values(size_t(kOutputsInFlight * splits));
        for (int64_t s = 0; s < splits; ++s) {
          Value busy = cmpI(arith::CmpIPredicate::ult, c(s), busySlices);
          auto loaded = emitSelect(
              b, loc, busy, SmallVector<Type>(size_t(kOutputsInFlight), f32),
              [&]() -> SmallVector<Value> {
                SmallVector<Value> v;
                for (int64_t u = 0; u < kOutputsInFlight; ++u)
                  v.push_back(partial(s, at[size_t(u)]));
                return v;
              },
              [&]() -> SmallVector<Value> {
                return SmallVector<Value>(size_t(kOutputsInFlight), zeroF);
              });
          for (int64_t u = 0; u < kOutputsInFlight; ++u)
            values[size_t(u * splits + s)] = loaded.getResult(unsigned(u));
        }
        for (int64_t u = 0; u < kOutputsInFlight; ++u) {
          Value h = head[size_t(u)];
          Value sum = mulF(load(sharedScores, {h, zero}), values[size_t(u * splits)]);
          for (int64_t s = 1; s < splits; ++s)
            sum = addF(sum, mulF(load(sharedScores, {h, c(s)}), values[size_t(u * splits + s)]));
          Value v = arith::DivFOp::create(b, loc, sum, load(sharedScores, {h, c(chunk + 3)}));
          store(arith::TruncFOp::create(b, loc, bf16, v), out,
                {i, addI(headBase, h), addI(channelBase, remI(at[size_t(u)], channels))});
        }
      }
      emitWhen(b, loc, threadIsZero, [&] { store(ci(0), counts, {i, tile}); });
    });
  });
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

} // namespace csa::codegen

//===- LinearSplitK.cpp - The split-K GPU form of csa.linear --------------===//
//
// See LinearSplitK.h. The weight bytes are read once, 16 bytes a load, and
// the activations a thread multiplies never leave its registers, so the
// form is bound by the weight's bytes; the only cross-thread work is the
// final sum of each output's partials.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/LinearSplitK.h"

#include "codegen/host/KernelBuilder.h"
#include "codegen/host/LinearKernelParts.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

#include <algorithm>

using namespace mlir;

namespace csa::codegen {

using namespace linear;

namespace {

constexpr int64_t kWordBytes = 16;     // one vector load
constexpr int64_t kMaxValues = 64;     // activations a thread keeps

int64_t elementsPerWord(const LinearKernelSpec &spec) {
  switch (spec.format) {
  case LinearFormat::FP8Block32:
  case LinearFormat::FP8AsBF16: return 16;
  case LinearFormat::FP4E2M1: return 32;
  case LinearFormat::BF16:
  case LinearFormat::F32: return spec.weightF32 ? 4 : 8;
  }
  return 0;
}

/// Prefetches bytes [start, start + bytes) of `base` into L2, a cache line
/// a call, spread over the block's `threads` threads.
void prefetchBytes(OpBuilder &b, Location loc, const LinearSplitKLanes &lanes, Value base,
                   Value start, Value bytes, Value t, int64_t threads) {
  constexpr int64_t kLine = 128;
  auto at = [&](OpBuilder &nb, Value offset) {
    Value ptr = LLVM::GEPOp::create(
        nb, loc, base.getType(), nb.getI8Type(), base,
        ValueRange{arith::IndexCastUIOp::create(nb, loc, nb.getI64Type(), offset).getResult()});
    lanes.prefetchL2(nb, loc, ptr);
  };
  Value lines = arith::CeilDivUIOp::create(b, loc, bytes, idx(b, loc, kLine));
  scf::ForOp::create(
      b, loc, t, lines, idx(b, loc, threads), ValueRange{},
      [&](OpBuilder &nb, Location loc, Value i, ValueRange) {
        at(nb, arith::AddIOp::create(nb, loc, start,
                                     arith::MulIOp::create(nb, loc, i, idx(nb, loc, kLine))));
        scf::YieldOp::create(nb, loc);
      });
  // The last byte's line: `start` need not lie on a line.
  auto last = scf::IfOp::create(
      b, loc,
      arith::AndIOp::create(
          b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, t, idx(b, loc, 0)),
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, bytes, idx(b, loc, 0))),
      /*withElse=*/false);
  OpBuilder lb = OpBuilder::atBlockTerminator(last.thenBlock());
  at(lb, arith::SubIOp::create(lb, loc, arith::AddIOp::create(lb, loc, start, bytes), idx(lb, loc, 1)));
}

int64_t pow2Floor(int64_t v) {
  int64_t p = 1;
  while (p * 2 <= v)
    p *= 2;
  return p;
}

} // namespace

int64_t LinearSplitKShape::sharedBytes() const {
  return rowsPerBlock * outputsPerBlock * (threads + kSplitKParts) * 4 +
         (gathered ? (threads + 1) * 4 : 0);
}

std::optional<LinearSplitKShape> linearSplitKShape(const LinearKernelSpec &spec,
                                                   int64_t multiprocessors,
                                                   int64_t maxRowsPerBlock,
                                                   int64_t maxSharedBytes) {
  const int64_t epw = elementsPerWord(spec);
  const int64_t g = std::max<int64_t>(spec.groups, 1);
  if (epw == 0 || spec.inFeatures % g != 0 || spec.outFeatures % g != 0)
    return std::nullopt;
  const int64_t kg = spec.inFeatures / g, ng = spec.outFeatures / g;
  if (kg % epw != 0 || kg == 0)
    return std::nullopt;
  const int64_t words = kg / epw;
  // FP8 with act_quant: a thread quantizes whole 32-blocks (two words).
  const int64_t minWords = spec.format == LinearFormat::FP8Block32 ? 2 : 1;
  const int64_t maxWords = std::max<int64_t>(minWords, kMaxValues / epw);
  std::optional<int64_t> chosen;
  for (int64_t wpt = minWords; wpt <= maxWords; wpt += minWords) {
    if (words % wpt != 0 || (words / wpt + 31) / 32 * 32 > 1024)
      continue;
    // The most words a thread (fewest threads) that still gives 128 threads;
    // otherwise the fewest words.
    if (!chosen || words / wpt >= 128)
      chosen = wpt;
  }
  if (!chosen)
    return std::nullopt;
  LinearSplitKShape shape;
  shape.wordsPerThread = *chosen;
  shape.elementsPerWord = epw;
  shape.activeThreads = words / *chosen;
  shape.threads = (shape.activeThreads + 31) / 32 * 32;
  // Enough blocks for two a multiprocessor, at most 16 outputs a block (the
  // activations are read again by every block), all in one group. A linear
  // grouped over experts has a block row a slot (6 for a top-6 token), so
  // 16. (Which block computes an output does not change its sum.)
  int64_t outputs =
      spec.experts > 0
          ? 16
          : std::clamp<int64_t>(
                pow2Floor(std::max<int64_t>(
                    1, spec.outFeatures / (2 * std::max<int64_t>(multiprocessors, 1)))),
                4, 16);
  while (outputs > 1 && (g > 1 ? ng % outputs != 0 : outputs / 2 >= spec.outFeatures))
    outputs /= 2;
  shape.outputsPerBlock = outputs;
  if (maxRowsPerBlock > 1) {
    shape.gathered = spec.experts > 0;
    int64_t rows = pow2Floor(maxRowsPerBlock);
    const int64_t values = shape.wordsPerThread * epw;
    while (rows > 1 && rows * values > kSplitKMaxRowValues)
      rows /= 2;
    shape.rowsPerBlock = rows;
    while (shape.rowsPerBlock > 1 && shape.sharedBytes() > maxSharedBytes)
      shape.rowsPerBlock /= 2;
    if (shape.rowsPerBlock == 1)
      return std::nullopt;
  }
  return shape;
}

void buildLinearSplitKBody(func::FuncOp fn, const LinearKernelSpec &spec,
                           const LinearSplitKShape &shape, const LinearSplitKLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Type f32 = b.getF32Type(), i32 = b.getI32Type(), i64 = b.getI64Type();
  const bool fp8 = spec.format == LinearFormat::FP8Block32;
  const bool fp4 = spec.format == LinearFormat::FP4E2M1;
  const bool fp8Dense = spec.format == LinearFormat::FP8AsBF16;
  const bool quantized = fp8 || fp4, withScale = quantized || fp8Dense;
  const bool bf16Weight = !withScale && !spec.weightF32;
  const int64_t n = spec.outFeatures, g = std::max<int64_t>(spec.groups, 1);
  const int64_t kg = spec.inFeatures / g, ng = n / g;
  const int64_t epw = shape.elementsPerWord, wpt = shape.wordsPerThread,
                outputs = shape.outputsPerBlock, threads = shape.threads;
  const int64_t rowBytes = kg / epw * kWordBytes;

  // Grouped over experts (spec.experts): the slots' expert ids follow x.
  const bool grouped = spec.experts > 0;
  const bool gathered = grouped && shape.rowsPerBlock > 1;
  SmallVector<Type> sharedTypes{lanes.sharedPartialsType, lanes.sharedSumsType};
  if (gathered)
    sharedTypes.push_back(lanes.sharedListType);
  Block *entry = freshBody(fn, sharedTypes);
  b.setInsertionPointToStart(entry);
  const unsigned first = grouped ? 2 : 1;
  Value x = entry->getArgument(0), ids = grouped ? entry->getArgument(1) : Value(),
        w = entry->getArgument(first),
        s = withScale ? entry->getArgument(first + 1) : Value(),
        y = entry->getArgument(withScale ? first + 2 : first + 1);
  const unsigned sharedFirst = entry->getNumArguments() - unsigned(sharedTypes.size());
  Value partials = entry->getArgument(sharedFirst), sums = entry->getArgument(sharedFirst + 1),
        list = gathered ? entry->getArgument(sharedFirst + 2) : Value();
  Value r = lanes.row(b, loc), t = lanes.thread(b, loc);
  // The batch variant's rows: firstRow .. firstRow + rowsPerBlock - 1
  // (gathered: the block's expert is r, its rows come from the list).
  const int64_t rowsPerBlock = shape.rowsPerBlock;
  Value firstRow = rowsPerBlock > 1 && !gathered
                       ? arith::MulIOp::create(b, loc, r, idx(b, loc, rowsPerBlock)).getResult()
                       : r;
  Value firstOut = arith::MulIOp::create(b, loc, lanes.outputTile(b, loc), idx(b, loc, outputs));
  auto [wBase, aligned] = bytePointer(b, loc, w, lanes.weightAddressSpace);
  // The scale row of output j of its group's weight: FP4 a row an output,
  // FP8 (and FP8-as-bf16) a row a 32-block of outputs.
  auto scaleRowOf = [&](OpBuilder &b, Value j) -> Value {
    return fp4 ? j : arith::DivUIOp::create(b, loc, j, idx(b, loc, kBlock)).getResult();
  };
  // The block's weight rows, from `firstRow` (its expert's rows when
  // grouped), and their scale rows, into L2 (lanes.prefetchL2).
  auto prefetchBlock = [&](OpBuilder &b, Value firstRow, Value firstScaleRow) {
    Value count = arith::MinUIOp::create(
        b, loc, idx(b, loc, outputs), arith::SubIOp::create(b, loc, idx(b, loc, n), firstOut));
    auto ifAligned = scf::IfOp::create(b, loc, aligned, /*withElse=*/false);
    OpBuilder ab = OpBuilder::atBlockTerminator(ifAligned.thenBlock());
    prefetchBytes(ab, loc, lanes, wBase, arith::MulIOp::create(ab, loc, firstRow, idx(ab, loc, rowBytes)),
                  arith::MulIOp::create(ab, loc, count, idx(ab, loc, rowBytes)), t, threads);
    auto sType = withScale ? cast<MemRefType>(s.getType()) : MemRefType();
    if (!sType || !sType.getLayout().isIdentity() || sType.getRank() != 2 ||
        sType.isDynamicDim(1))
      return;
    const int64_t scaleRowBytes = sType.getDimSize(1) * sType.getElementTypeBitWidth() / 8;
    // The scale rows of outputs firstOut .. firstOut + count - 1.
    Value lastOut = arith::SubIOp::create(b, loc, arith::AddIOp::create(b, loc, firstOut, count),
                                          idx(b, loc, 1));
    Value scaleRows = arith::AddIOp::create(
        b, loc,
        arith::SubIOp::create(b, loc, scaleRowOf(b, lastOut), scaleRowOf(b, firstOut)),
        idx(b, loc, 1));
    Value sBase = bytePointer(b, loc, s, lanes.weightAddressSpace).first;
    prefetchBytes(b, loc, lanes, sBase,
                  arith::MulIOp::create(b, loc, firstScaleRow, idx(b, loc, scaleRowBytes)),
                  arith::MulIOp::create(b, loc, scaleRows, idx(b, loc, scaleRowBytes)), t, threads);
  };
  // Ungrouped, the rows are known before the kernels upstream finish: ask
  // for them first (one row of blocks does), then wait. Grouped, the expert
  // ids come from upstream: wait first, prefetch once the id is read.
  if (lanes.prefetchL2 && !grouped) {
    auto first = scf::IfOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, r, idx(b, loc, 0)),
        /*withElse=*/false);
    OpBuilder fb = OpBuilder::atBlockTerminator(first.thenBlock());
    prefetchBlock(fb, firstOut, scaleRowOf(fb, firstOut));
  }
  if (lanes.dependencyWait)
    lanes.dependencyWait(b, loc);
  Value rowCount = memref::DimOp::create(b, loc, grouped ? ids : x, idx(b, loc, 0));
  // Gathered, every block runs (a block an expert).
  auto rowGuard = scf::IfOp::create(
      b, loc,
      gathered ? arith::ConstantIntOp::create(b, loc, 1, 1).getResult()
               : arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, firstRow, rowCount)
                     .getResult(),
      /*withElse=*/false);
  b.setInsertionPoint(rowGuard.thenBlock()->getTerminator());
  // Grouped: the row is a slot, reading activation row r / slotsPerRow and
  // its expert's rows of the stacked weight and scales.
  Value xRow = r, valid, weightBase, scaleBase;
  if (gathered) {
    // The block's expert is r: its weight rows, whatever the slots.
    weightBase = arith::MulIOp::create(b, loc, r, idx(b, loc, n));
    scaleBase = arith::MulIOp::create(
        b, loc, r, idx(b, loc, fp8 ? (n + kBlock - 1) / kBlock : n));
    if (lanes.prefetchL2)
      prefetchBlock(b, arith::AddIOp::create(b, loc, weightBase, firstOut),
                    arith::AddIOp::create(b, loc, scaleBase, scaleRowOf(b, firstOut)));
  } else if (grouped) {
    xRow = arith::DivUIOp::create(b, loc, r, idx(b, loc, spec.slotsPerRow));
    auto [e, inRange] = loadExpertId(b, loc, ids, r, spec.experts);
    valid = inRange;
    weightBase = arith::MulIOp::create(b, loc, e, idx(b, loc, n));
    scaleBase = arith::MulIOp::create(
        b, loc, e, idx(b, loc, fp8 ? (n + kBlock - 1) / kBlock : n));
    if (lanes.prefetchL2) {
      auto ifValid = scf::IfOp::create(b, loc, valid, /*withElse=*/false);
      OpBuilder vb = OpBuilder::atBlockTerminator(ifValid.thenBlock());
      prefetchBlock(vb, arith::AddIOp::create(vb, loc, weightBase, firstOut),
                    arith::AddIOp::create(vb, loc, scaleBase, scaleRowOf(vb, firstOut)));
    }
  }
  auto weightRow = [&](OpBuilder &b, Value j) -> Value {
    return grouped ? arith::AddIOp::create(b, loc, weightBase, j).getResult() : j;
  };

  // Threads past the words (a block is whole warps) compute with the last
  // thread's words and contribute zero.
  Value active = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, t,
                                       idx(b, loc, shape.activeThreads));
  Value tc = arith::MinUIOp::create(b, loc, t, idx(b, loc, shape.activeThreads - 1));
  // The thread's words are interleaved with the other threads' a unit at a
  // time (a unit: the words act_quant needs together, two for FP8's
  // 32-blocks, else one), so that a warp's loads of its i-th words lie
  // side by side in memory: word (u * activeThreads + t) * unit + v is the
  // thread's (u * unit + v)-th.
  const int64_t unit = fp8 ? 2 : 1;
  auto wordOf = [&](OpBuilder &nb, int64_t i) -> Value {
    Value u = arith::MulIOp::create(
        nb, loc,
        arith::AddIOp::create(nb, loc, tc, idx(nb, loc, (i / unit) * shape.activeThreads)),
        idx(nb, loc, unit));
    return arith::AddIOp::create(nb, loc, u, idx(nb, loc, i % unit));
  };
  // The block's outputs lie in one group (linearSplitKShape).
  Value inBase = arith::MulIOp::create(
      b, loc, arith::DivUIOp::create(b, loc, firstOut, idx(b, loc, ng)), idx(b, loc, kg));

  // The thread's activations, once: act_quant-ed per 32-block (FP8/FP4,
  // the host kernel's values) or as they are. They are read as 16-byte
  // words where the row and the thread's columns lie on 16 bytes (element
  // loads otherwise): the activations are the same for every block, so
  // element loads cost L1 throughput the weights' stream needs.
  const int64_t values = wpt * epw;
  // Activation c of the thread's (c / epw)-th word.
  auto column = [&](OpBuilder &nb, int64_t c) -> Value {
    Value word = wordOf(nb, c / epw);
    return arith::AddIOp::create(
        nb, loc, inBase,
        arith::AddIOp::create(nb, loc, arith::MulIOp::create(nb, loc, word, idx(nb, loc, epw)),
                              idx(nb, loc, c % epw)));
  };
  auto xType = cast<MemRefType>(x.getType());
  const int64_t xBytes = xType.getElementTypeBitWidth() / 8;
  const bool xF32 = xType.getElementType().isF32();
  const bool xVectorizable =
      xType.getLayout().isIdentity() && xType.getRank() == 2 &&
      xType.getShape()[1] == spec.inFeatures && (xF32 || xType.getElementType().isBF16()) &&
      (epw * xBytes) % kWordBytes == 0 && (kg * xBytes) % kWordBytes == 0 &&
      (spec.inFeatures * xBytes) % kWordBytes == 0;
  // Row `xRow`'s activations of this thread (`values` of them).
  auto loadActivations = [&](OpBuilder &b, Value xRow) -> SmallVector<Value> {
    SmallVector<Value> xs;
    SmallVector<Value> raw;
    if (xVectorizable) {
      auto [xBase, xAligned] = bytePointer(b, loc, x, lanes.weightAddressSpace);
      SmallVector<Type> types(size_t(values), f32);
      auto ifX = scf::IfOp::create(b, loc, types, xAligned, /*withElse=*/true);
      {
        OpBuilder vb = OpBuilder::atBlockBegin(ifX.thenBlock());
        SmallVector<Value> loaded;
        Value rowStart = arith::MulIOp::create(vb, loc, xRow, idx(vb, loc, spec.inFeatures));
        const int64_t perWord = kWordBytes / xBytes;
        for (int64_t c0 = 0; c0 < values; c0 += perWord) {
          Value element = arith::AddIOp::create(vb, loc, rowStart, column(vb, c0));
          Value offset = arith::IndexCastUIOp::create(
              vb, loc, i64, arith::MulIOp::create(vb, loc, element, idx(vb, loc, xBytes)));
          llvm::append_range(loaded, load16BytesAsF32(vb, loc, xBase, offset, xF32));
        }
        scf::YieldOp::create(vb, loc, loaded);
        OpBuilder eb = OpBuilder::atBlockBegin(ifX.elseBlock());
        SmallVector<Value> elements;
        for (int64_t c = 0; c < values; ++c)
          elements.push_back(loadF32(eb, loc, x, ValueRange{xRow, column(eb, c)}));
        scf::YieldOp::create(eb, loc, elements);
      }
      llvm::append_range(raw, ifX.getResults());
    } else {
      for (int64_t c = 0; c < values; ++c)
        raw.push_back(loadF32(b, loc, x, ValueRange{xRow, column(b, c)}));
    }
    if (quantized) {
      for (int64_t c0 = 0; c0 < values; c0 += kBlock) {
        SmallVector<Value> block(kBlock);
        emitActQuantBlock(
            b, loc,
            [&](OpBuilder &, Value c) {
              return raw[size_t(c0 + getConstantIntValue(c).value_or(0))];
            },
            [&](OpBuilder &nb, Value c, Value v) {
              int64_t at = getConstantIntValue(c).value_or(0);
              block[size_t(at)] = arith::ExtFOp::create(nb, loc, f32, v);
            },
            lanes.e4m3RoundPair);
        llvm::append_range(xs, block);
      }
    } else {
      xs = raw;
    }
    return xs;
  };
  // Gathered: the group of the list being run, [groupStart, groupStart +
  // rowsPerBlock) of its groupCount slots (set in the scan below).
  Value groupStart, groupCount;
  auto listSlot = [&](OpBuilder &b, Value i) -> Value {
    return arith::IndexCastUIOp::create(b, loc, b.getIndexType(),
                                        memref::LoadOp::create(b, loc, list, ValueRange{i}));
  };
  // The output row of the block's rho-th row (the last one in place of rows
  // past it): batch variant firstRow + rho, gathered the list's slot.
  auto blockRow = [&](OpBuilder &b, Value rho) -> Value {
    if (gathered)
      return listSlot(b, arith::MinUIOp::create(
                             b, loc, arith::AddIOp::create(b, loc, groupStart, rho),
                             arith::SubIOp::create(b, loc, groupCount, idx(b, loc, 1))));
    return arith::MinUIOp::create(b, loc, arith::AddIOp::create(b, loc, firstRow, rho),
                                  arith::SubIOp::create(b, loc, rowCount, idx(b, loc, 1)));
  };
  // Whether the block's rho-th row exists.
  auto blockRowExists = [&](OpBuilder &b, Value rho) -> Value {
    if (gathered)
      return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                   arith::AddIOp::create(b, loc, groupStart, rho), groupCount);
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                 arith::AddIOp::create(b, loc, firstRow, rho), rowCount);
  };
  // Each row's activations, once per block (gathered: per group).
  SmallVector<SmallVector<Value>> xsOf;
  auto loadRows = [&] {
    xsOf.clear();
    if (rowsPerBlock == 1) {
      xsOf.push_back(loadActivations(b, xRow));
      return;
    }
    for (int64_t rho = 0; rho < rowsPerBlock; ++rho) {
      Value row = blockRow(b, idx(b, loc, rho));
      if (gathered)
        row = arith::DivUIOp::create(b, loc, row, idx(b, loc, spec.slotsPerRow));
      xsOf.push_back(loadActivations(b, row));
    }
  };

  // A word's weights as f32, and the factor its products are to be scaled
  // by (the f16 route of FP4 leaves its values 2^-14 small).
  auto decodeWord = [&](OpBuilder &b, ArrayRef<Value> q) -> std::pair<SmallVector<Value>, float> {
    SmallVector<Value> v(static_cast<size_t>(epw));
    auto bits = [&](Value word, int64_t shift, uint32_t mask) -> Value {
      Value sh = shift ? arith::ShRUIOp::create(b, loc, word, i32c(b, loc, uint32_t(shift))).getResult()
                       : word;
      return arith::AndIOp::create(b, loc, sh, i32c(b, loc, mask));
    };
    if (fp8 || fp8Dense) {
      for (int64_t i = 0; i < 4; ++i) {
        if (lanes.e4m3PairToF32) {
          for (int64_t half = 0; half < 2; ++half) {
            Value word = half ? arith::ShRUIOp::create(b, loc, q[size_t(i)], i32c(b, loc, 16)).getResult()
                              : q[size_t(i)];
            auto [lo, hi] = lanes.e4m3PairToF32(
                b, loc, arith::TruncIOp::create(b, loc, b.getI16Type(), word));
            v[size_t(4 * i + 2 * half)] = lo;
            v[size_t(4 * i + 2 * half + 1)] = hi;
          }
        } else {
          for (int64_t k = 0; k < 4; ++k)
            v[size_t(4 * i + k)] = decodeE4M3Arith(b, loc, bits(q[size_t(i)], 8 * k, 0xFF));
        }
      }
      return {v, 1.f};
    }
    if (fp4 && lanes.e2m1ThroughE4m3 && lanes.e4m3PairToF32) {
      // Four nibbles to four E4M3 bytes in three or four integer ops: the
      // sign to bit 7, exponent and mantissa to bits 2-4 (the E2M1 value
      // times 2^-6, subnormal 0.5 included), then two bytes a conversion.
      for (int64_t i = 0; i < 4; ++i) {
        Value w = q[size_t(i)];
        auto masked = [&](Value v, uint32_t mask) -> Value {
          return arith::AndIOp::create(b, loc, v, i32c(b, loc, mask));
        };
        // Nibbles 0, 2, 4, 6 (even) and 1, 3, 5, 7 (odd), a byte each.
        Value even = arith::OrIOp::create(
            b, loc, masked(arith::ShLIOp::create(b, loc, w, i32c(b, loc, 2)), 0x1C1C1C1Cu),
            masked(arith::ShLIOp::create(b, loc, w, i32c(b, loc, 4)), 0x80808080u));
        Value odd = arith::OrIOp::create(
            b, loc, masked(arith::ShRUIOp::create(b, loc, w, i32c(b, loc, 2)), 0x1C1C1C1Cu),
            masked(w, 0x80808080u));
        for (int64_t parity = 0; parity < 2; ++parity) {
          Value bytes = parity ? odd : even;
          for (int64_t half = 0; half < 2; ++half) {
            Value word = half ? arith::ShRUIOp::create(b, loc, bytes, i32c(b, loc, 16)).getResult()
                              : bytes;
            auto [lo, hi] = lanes.e4m3PairToF32(
                b, loc, arith::TruncIOp::create(b, loc, b.getI16Type(), word));
            v[size_t(8 * i + 4 * half + parity)] = lo;
            v[size_t(8 * i + 4 * half + 2 + parity)] = hi;
          }
        }
      }
      return {v, 64.f};
    }
    if (fp4) {
      for (int64_t i = 0; i < 4; ++i) {
        if (lanes.e2m1ThroughF16) {
          // Nibbles k and k + 4 of a word become the two halves of an f16
          // pair: sign to bit 15, exponent and mantissa to bits 9-11 (the
          // E2M1 value times 2^-14, subnormal 0.5 included).
          auto pairType = VectorType::get({2}, b.getF16Type());
          for (int64_t k = 0; k < 4; ++k) {
            Value sh = k ? arith::ShRUIOp::create(b, loc, q[size_t(i)], i32c(b, loc, uint32_t(4 * k))).getResult()
                         : q[size_t(i)];
            Value mag = arith::ShLIOp::create(
                b, loc, arith::AndIOp::create(b, loc, sh, i32c(b, loc, 0x00070007u)), i32c(b, loc, 9));
            Value sign = arith::ShLIOp::create(
                b, loc, arith::AndIOp::create(b, loc, sh, i32c(b, loc, 0x00080008u)), i32c(b, loc, 12));
            Value pair = LLVM::BitcastOp::create(b, loc, pairType,
                                                 arith::OrIOp::create(b, loc, mag, sign));
            for (int64_t half = 0; half < 2; ++half) {
              Value h = LLVM::ExtractElementOp::create(
                  b, loc, pair, LLVM::ConstantOp::create(b, loc, i32, int32_t(half)));
              v[size_t(8 * i + k + 4 * half)] = arith::ExtFOp::create(b, loc, f32, h);
            }
          }
        } else {
          for (int64_t m = 0; m < 8; ++m)
            v[size_t(8 * i + m)] = decodeE2M1Arith(b, loc, bits(q[size_t(i)], 4 * m, 0xF));
        }
      }
      return {v, lanes.e2m1ThroughF16 ? 16384.f : 1.f};
    }
    for (int64_t i = 0; i < 4; ++i) {
      if (bf16Weight) {
        std::tie(v[size_t(2 * i)], v[size_t(2 * i + 1)]) = bf16PairToF32(b, loc, q[size_t(i)]);
      } else {
        v[size_t(i)] = arith::BitcastOp::create(b, loc, f32, q[size_t(i)]);
      }
    }
    return {v, 1.f};
  };

  // The words of output row j this thread owns, as 4 i32 each: one 16-byte
  // load (aligned weights) or element loads put together.
  auto loadWords = [&](OpBuilder &b, Value output, bool vectorLoads) -> SmallVector<Value> {
    Value j = weightRow(b, output);
    SmallVector<Value> q;
    for (int64_t i = 0; i < wpt; ++i) {
      Value word = wordOf(b, i);
      if (vectorLoads) {
        Value offset = arith::IndexCastUIOp::create(
            b, loc, i64,
            arith::AddIOp::create(
                b, loc, arith::MulIOp::create(b, loc, j, idx(b, loc, rowBytes)),
                arith::MulIOp::create(b, loc, word, idx(b, loc, kWordBytes))));
        llvm::append_range(q, load16Bytes(b, loc, wBase, offset));
        continue;
      }
      // Element loads: the memref's elements of this word, in order.
      const int64_t perWord = withScale ? 16 : (spec.weightF32 ? 4 : 8);
      const int64_t perI32 = perWord / 4;
      Value firstElement = arith::MulIOp::create(b, loc, word, idx(b, loc, perWord));
      for (int64_t e = 0; e < 4; ++e) {
        Value acc = i32c(b, loc, 0);
        for (int64_t u = 0; u < perI32; ++u) {
          Value col = arith::AddIOp::create(b, loc, firstElement, idx(b, loc, e * perI32 + u));
          Value elem = memref::LoadOp::create(b, loc, w, ValueRange{j, col});
          Value asInt;
          if (withScale)
            asInt = arith::ExtUIOp::create(b, loc, i32, elem);
          else if (spec.weightF32)
            asInt = arith::BitcastOp::create(b, loc, i32, elem);
          else
            asInt = arith::ExtUIOp::create(
                b, loc, i32, arith::BitcastOp::create(b, loc, b.getI16Type(), elem));
          const int64_t shift = (32 / perI32) * u;
          if (shift)
            asInt = arith::ShLIOp::create(b, loc, asInt, i32c(b, loc, uint32_t(shift)));
          acc = arith::OrIOp::create(b, loc, acc, asInt);
        }
        q.push_back(acc);
      }
    }
    return q;
  };
  // The scale codes the thread's words of output j need: FP8 one per
  // 32-block (two words), FP4 and FP8-as-bf16 one per word.
  auto loadScales = [&](OpBuilder &b, Value j) -> SmallVector<Value> {
    SmallVector<Value> codes;
    if (!withScale)
      return codes;
    Value scaleRow = scaleRowOf(b, j);
    if (grouped)
      scaleRow = arith::AddIOp::create(b, loc, scaleBase, scaleRow);
    for (int64_t i = 0; i < wpt; i += fp8 ? 2 : 1) {
      Value word = wordOf(b, i);
      Value block = fp4 ? word : arith::DivUIOp::create(b, loc, word, idx(b, loc, 2)).getResult();
      codes.push_back(loadCode(b, loc, s, ValueRange{scaleRow, block}));
    }
    return codes;
  };

  auto fma = [&](OpBuilder &b, Value a, Value c, Value acc) -> Value {
    return math::FmaOp::create(b, loc, a, c, acc);
  };
  auto emitOutputs = [&](OpBuilder &b, bool vectorLoads) {
    forGroupsLoadedAhead(
        b, loc, idx(b, loc, 0), outputs, idx(b, loc, 1),
        std::clamp<int64_t>(shape.outputsInFlight, 1, outputs),
        [&](OpBuilder &b, Value o) -> SmallVector<Value> {
          Value j = arith::MinUIOp::create(b, loc, arith::AddIOp::create(b, loc, firstOut, o),
                                           idx(b, loc, n - 1));
          SmallVector<Value> loaded = loadScales(b, j);
          llvm::append_range(loaded, loadWords(b, j, vectorLoads));
          return loaded;
        },
        [&](OpBuilder &b, Value o, ValueRange loaded) {
          const size_t scaleCount = withScale ? size_t(fp8 ? wpt / 2 : wpt) : 0;
          ValueRange codes = loaded.take_front(scaleCount);
          ValueRange words = loaded.drop_front(scaleCount);
          // Each word decoded once, multiplied by every row's activations
          // (each row's terms in the one-row form's order).
          SmallVector<Value> acc(size_t(rowsPerBlock), f32Const(b, loc, 0.f));
          SmallVector<Value> partial(size_t(rowsPerBlock), f32Const(b, loc, 0.f));
          for (int64_t i = 0; i < wpt; ++i) {
            auto [v, factor] = decodeWord(
                b, SmallVector<Value>(words.begin() + 4 * i, words.begin() + 4 * i + 4));
            for (int64_t rho = 0; rho < rowsPerBlock; ++rho) {
              const SmallVector<Value> &xs = xsOf[size_t(rho)];
              Value &sum = withScale ? partial[size_t(rho)] : acc[size_t(rho)];
              for (int64_t e = 0; e < epw; ++e)
                sum = fma(b, xs[size_t(i * epw + e)], v[size_t(e)], sum);
            }
            // FP8: a 32-block is two words; its scale applies to both.
            if (!withScale || (fp8 && i % 2 == 0))
              continue;
            Value ws = decodeUe8m0(b, loc, codes[size_t(fp8 ? i / 2 : i)]);
            for (int64_t rho = 0; rho < rowsPerBlock; ++rho) {
              Value p = partial[size_t(rho)];
              if (factor != 1.f)
                p = arith::MulFOp::create(b, loc, p, f32Const(b, loc, factor));
              acc[size_t(rho)] = fma(b, p, ws, acc[size_t(rho)]);
              partial[size_t(rho)] = f32Const(b, loc, 0.f);
            }
          }
          for (int64_t rho = 0; rho < rowsPerBlock; ++rho) {
            Value a = arith::SelectOp::create(b, loc, active, acc[size_t(rho)], f32Const(b, loc, 0.f));
            Value slot = rowsPerBlock == 1
                             ? o
                             : arith::AddIOp::create(b, loc, o, idx(b, loc, rho * outputs)).getResult();
            memref::StoreOp::create(b, loc, a, partials, ValueRange{slot, t});
          }
        });
  };
  Type outType = spec.format == LinearFormat::F32 ? f32 : Type(b.getBF16Type());
  // The block's rows (gathered: a group of the list): activations,
  // partials, their sums, the outputs.
  auto emitGroup = [&] {
    loadRows();
    auto ifAligned = scf::IfOp::create(b, loc, aligned, /*withElse=*/true);
    {
      OpBuilder vb = OpBuilder::atBlockTerminator(ifAligned.thenBlock());
      emitOutputs(vb, /*vectorLoads=*/true);
      OpBuilder eb = OpBuilder::atBlockTerminator(ifAligned.elseBlock());
      emitOutputs(eb, /*vectorLoads=*/false);
    }
    lanes.barrier(b, loc);
    // Each output's partials in kSplitKParts parts, then the parts.
    const int64_t partSize = threads / kSplitKParts;
    scf::ForOp::create(
        b, loc, t, idx(b, loc, rowsPerBlock * outputs * kSplitKParts), idx(b, loc, threads),
        ValueRange{}, [&](OpBuilder &b, Location loc, Value p, ValueRange) {
          Value o = arith::DivUIOp::create(b, loc, p, idx(b, loc, kSplitKParts));
          Value part = arith::RemUIOp::create(b, loc, p, idx(b, loc, kSplitKParts));
          Value first = arith::MulIOp::create(b, loc, part, idx(b, loc, partSize));
          Value total = f32Const(b, loc, 0.f);
          for (int64_t u = 0; u < partSize; ++u)
            total = arith::AddFOp::create(
                b, loc, total,
                memref::LoadOp::create(
                    b, loc, partials,
                    ValueRange{o, arith::AddIOp::create(b, loc, first, idx(b, loc, u))}));
          memref::StoreOp::create(b, loc, total, sums, ValueRange{o, part});
          scf::YieldOp::create(b, loc);
        });
    lanes.barrier(b, loc);
    scf::ForOp::create(
        b, loc, t, idx(b, loc, rowsPerBlock * outputs), idx(b, loc, threads), ValueRange{},
        [&](OpBuilder &b, Location loc, Value slot, ValueRange) {
          // Slot rho * outputs + o: the block's rho-th row's output o.
          Value o = slot, row = r;
          Value inRows = arith::ConstantIntOp::create(b, loc, 1, 1);
          if (rowsPerBlock > 1) {
            o = arith::RemUIOp::create(b, loc, slot, idx(b, loc, outputs));
            Value rho = arith::DivUIOp::create(b, loc, slot, idx(b, loc, outputs));
            row = blockRow(b, rho);
            inRows = blockRowExists(b, rho);
          }
          Value j = arith::AddIOp::create(b, loc, firstOut, o);
          auto inRange = scf::IfOp::create(
              b, loc,
              arith::AndIOp::create(
                  b, loc, inRows,
                  arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, j, idx(b, loc, n))),
              /*withElse=*/false);
          OpBuilder ib = OpBuilder::atBlockTerminator(inRange.thenBlock());
          Value total = f32Const(ib, loc, 0.f);
          for (int64_t part = 0; part < kSplitKParts; ++part)
            total = arith::AddFOp::create(
                ib, loc, total,
                memref::LoadOp::create(ib, loc, sums, ValueRange{slot, idx(ib, loc, part)}));
          if (grouped && !gathered)
            total = arith::SelectOp::create(ib, loc, valid, total, f32Const(ib, loc, 0.f));
          Value out = outType.isF32()
                          ? total
                          : arith::TruncFOp::create(ib, loc, outType, total).getResult();
          memref::StoreOp::create(ib, loc, out, y, ValueRange{row, j});
          scf::YieldOp::create(b, loc);
        });
  };
  if (!gathered) {
    emitGroup();
    b.setInsertionPointToEnd(entry);
    func::ReturnOp::create(b, loc);
    return;
  }

  // Gathered: the block reads the slots' expert ids a thread each, appends
  // its expert's slots to the list (a shared counter taken atomically: the
  // order is arbitrary, and no slot's sums depend on it), then runs the
  // list rowsPerBlock slots at a time. A slot whose id is no expert is a
  // row of zeros, written by expert 0's blocks.
  Value slots = rowCount, zero = idx(b, loc, 0), countAt = idx(b, loc, threads);
  Value firstThread = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, t, zero);
  auto resetCount = [&] {
    auto ifFirst = scf::IfOp::create(b, loc, firstThread, /*withElse=*/false);
    OpBuilder fb = OpBuilder::atBlockTerminator(ifFirst.thenBlock());
    memref::StoreOp::create(fb, loc, i32c(fb, loc, 0), list, ValueRange{countAt});
    lanes.barrier(b, loc);
  };
  resetCount();
  auto scan = scf::ForOp::create(b, loc, zero, slots, idx(b, loc, threads));
  b.setInsertionPoint(scan.getBody()->getTerminator());
  Value slot = arith::AddIOp::create(b, loc, scan.getInductionVar(), t);
  {
    auto inSlots = scf::IfOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, slot, slots),
        /*withElse=*/false);
    OpBuilder sb = OpBuilder::atBlockTerminator(inSlots.thenBlock());
    auto [id, inRange] = loadExpertId(sb, loc, ids, slot, spec.experts);
    Value mine = arith::AndIOp::create(
        sb, loc, inRange, arith::CmpIOp::create(sb, loc, arith::CmpIPredicate::eq, id, r));
    auto ifMine = scf::IfOp::create(sb, loc, mine, /*withElse=*/false);
    OpBuilder mb = OpBuilder::atBlockTerminator(ifMine.thenBlock());
    Value at = memref::AtomicRMWOp::create(mb, loc, arith::AtomicRMWKind::addi, i32c(mb, loc, 1),
                                           list, ValueRange{countAt});
    memref::StoreOp::create(mb, loc, arith::IndexCastUIOp::create(mb, loc, i32, slot), list,
                            ValueRange{arith::IndexCastUIOp::create(mb, loc, mb.getIndexType(), at)});
    auto ifZeros = scf::IfOp::create(
        sb, loc,
        arith::AndIOp::create(
            sb, loc, arith::XOrIOp::create(sb, loc, inRange, arith::ConstantIntOp::create(sb, loc, 1, 1)),
            arith::CmpIOp::create(sb, loc, arith::CmpIPredicate::eq, r, idx(sb, loc, 0))),
        /*withElse=*/false);
    OpBuilder zb = OpBuilder::atBlockTerminator(ifZeros.thenBlock());
    Value zeroOut = outType.isF32() ? f32Const(zb, loc, 0.f)
                                    : arith::TruncFOp::create(zb, loc, outType, f32Const(zb, loc, 0.f))
                                          .getResult();
    for (int64_t o = 0; o < outputs; ++o) {
      Value j = arith::AddIOp::create(zb, loc, firstOut, idx(zb, loc, o));
      auto inN = scf::IfOp::create(
          zb, loc, arith::CmpIOp::create(zb, loc, arith::CmpIPredicate::ult, j, idx(zb, loc, n)),
          /*withElse=*/false);
      OpBuilder nb = OpBuilder::atBlockTerminator(inN.thenBlock());
      memref::StoreOp::create(nb, loc, zeroOut, y, ValueRange{slot, j});
    }
  }
  lanes.barrier(b, loc);
  groupCount = listSlot(b, countAt);
  auto groups = scf::ForOp::create(b, loc, zero, groupCount, idx(b, loc, rowsPerBlock));
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(groups.getBody()->getTerminator());
    groupStart = groups.getInductionVar();
    emitGroup();
  }
  // Every thread past the list's last reads before the next step's appends.
  lanes.barrier(b, loc);
  resetCount();
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

} // namespace csa::codegen

//===- LinearGpuForms.cpp - The per-output and row-tiled GPU forms --------===//
//
// The GPU forms of csa.linear that keep the host kernel's bits (the same
// operations in the same order, spread over lanes): the per-output form (a
// warp per output, decode) and the row-tiled form (a thread per output for a
// tile of rows, prefill). Both are declared in LinearKernels.h; the split-K
// form, which meets the tolerance contract instead, is LinearSplitK.cpp.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/LinearKernels.h"

#include "codegen/host/KernelBuilder.h"
#include "codegen/host/LinearKernelParts.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <functional>
#include <tuple>

using namespace mlir;

namespace csa::codegen {

using namespace linear;

namespace {
/// Column c of the per-output form's shared row: each 32-block is followed
/// by kLinearRowPad bf16 of padding, so lanes reading the same element of
/// neighbouring blocks hit different banks.
Value paddedColumn(OpBuilder &b, Location loc, Value col) {
  return arith::AddIOp::create(
      b, loc, col,
      arith::MulIOp::create(b, loc, arith::DivUIOp::create(b, loc, col, idx(b, loc, kBlock)),
                            idx(b, loc, kLinearRowPad)));
}

} // namespace

/// Items first, first + stride, ... below `count`, `group` a loop trip: the
/// trip's loads (`load(read)`; an item past the end reads the last item
/// again) are all emitted before their uses (`use(item, loaded)`, only for
/// items below `count`), so that they are in flight together.
void forGroupsLoadedAhead(
    OpBuilder &b, Location loc, Value first, int64_t count, Value stride, int64_t group,
    const std::function<SmallVector<Value>(OpBuilder &, Value)> &load,
    const std::function<void(OpBuilder &, Value, ValueRange)> &use) {
  Value step = arith::MulIOp::create(b, loc, stride, idx(b, loc, group));
  scf::ForOp::create(
      b, loc, first, idx(b, loc, count), step, ValueRange{},
      [&](OpBuilder &b, Location loc, Value item0, ValueRange) {
    SmallVector<Value> items;
    SmallVector<SmallVector<Value>> loaded;
    Value last = idx(b, loc, count - 1);
    for (int64_t u = 0; u < group; ++u) {
      Value item = u == 0 ? item0
                          : arith::AddIOp::create(
                                b, loc, item0,
                                arith::MulIOp::create(b, loc, stride, idx(b, loc, u)))
                                .getResult();
      Value read = u == 0 ? item : arith::MinUIOp::create(b, loc, item, last).getResult();
      items.push_back(item);
      loaded.push_back(load(b, read));
    }
    for (int64_t u = 0; u < group; ++u) {
      if (u == 0) { // item0 < count: the loop's condition
        use(b, items[0], loaded[0]);
        continue;
      }
      auto inRange = scf::IfOp::create(
          b, loc,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, items[size_t(u)],
                                idx(b, loc, count)),
          /*withElse=*/false);
      OpBuilder ib = OpBuilder::atBlockTerminator(inRange.thenBlock());
      use(ib, items[size_t(u)], loaded[size_t(u)]);
    }
    scf::YieldOp::create(b, loc);
  });
}

SmallVector<Value> linear::loadBlockWords(OpBuilder &b, Location loc, Value base, Value j,
                                          Value kb, int64_t k, bool fp8) {
  const int64_t rowBytes = fp8 ? k : k / 2, blockBytes = fp8 ? kBlock : kBlock / 2;
  Value offset = arith::IndexCastUIOp::create(
      b, loc, b.getI64Type(),
      arith::AddIOp::create(
          b, loc, arith::MulIOp::create(b, loc, j, idx(b, loc, rowBytes)),
          arith::MulIOp::create(b, loc, kb, idx(b, loc, blockBytes))));
  auto words = VectorType::get({4}, b.getI32Type());
  SmallVector<Value> vectors;
  for (int64_t v = 0; v < blockBytes / 16; ++v) {
    Value at = arith::AddIOp::create(
        b, loc, offset, arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(16 * v)));
    Value ptr = LLVM::GEPOp::create(b, loc, base.getType(), b.getI8Type(), base,
                                    ValueRange{at});
    vectors.push_back(LLVM::LoadOp::create(b, loc, words, ptr, /*alignment=*/16,
                                           /*isVolatile=*/false, /*isNonTemporal=*/false,
                                           /*isInvariant=*/true));
  }
  return vectors;
}

SmallVector<Value> linear::decodeBlockWords(OpBuilder &b, Location loc, ValueRange vectors,
                                            bool fp8) {
  SmallVector<Value> word;
  for (Value vec : vectors)
    for (int64_t i = 0; i < 4; ++i)
      word.push_back(LLVM::ExtractElementOp::create(
          b, loc, vec, LLVM::ConstantOp::create(b, loc, b.getI32Type(), int32_t(i))));
  SmallVector<Value> values;
  for (int64_t e = 0; e < kBlock; ++e) {
    // FP8: byte e; FP4: nibble e (element 2i is byte i's low nibble).
    const int64_t perWord = fp8 ? 4 : 8, bits = fp8 ? 8 : 4;
    Value code = arith::AndIOp::create(
        b, loc,
        arith::ShRUIOp::create(b, loc, word[size_t(e / perWord)],
                               i32c(b, loc, uint32_t(bits * (e % perWord)))),
        i32c(b, loc, fp8 ? 0xFF : 0xF));
    values.push_back(fp8 ? decodeE4M3Arith(b, loc, code) : decodeE2M1Arith(b, loc, code));
  }
  return values;
}


SmallVector<Value> linear::loadBlockValues(OpBuilder &b, Location loc, Value base, Value j,
                                           Value kb, int64_t k, bool fp8) {
  return decodeBlockWords(b, loc, loadBlockWords(b, loc, base, j, kb, k, fp8), fp8);
}

void buildLinearPerOutputBody(func::FuncOp fn, const LinearKernelSpec &spec,
                              const LinearLanes &lanes) {
  MLIRContext *context = fn.getContext();
  OpBuilder b(context);
  Location loc = fn.getLoc();
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type();
  const bool quantized = linearNeedsSharedRow(spec);
  const bool fp8Dense = spec.format == LinearFormat::FP8AsBF16;
  const bool fp8 = spec.format == LinearFormat::FP8Block32;
  const int64_t k = spec.inFeatures, n = spec.outFeatures, g = spec.groups;
  const int64_t kg = k / g, ng = n / g;
  const int64_t kBlocks = linearPartials(spec);
  Operation *symbols = SymbolTable::getNearestSymbolTable(fn->getParentOp());
  // A fresh body over the same arguments (plus the shared buffers).
  SmallVector<Type> sharedTypes;
  if (quantized)
    sharedTypes.push_back(lanes.sharedRowType);
  sharedTypes.push_back(lanes.sharedPartialsType);
  Block *entry = freshBody(fn, sharedTypes);
  b.setInsertionPointToStart(entry);
  const bool withScale = quantized || fp8Dense;
  Value x = entry->getArgument(0), w = entry->getArgument(1),
        s = withScale ? entry->getArgument(2) : Value(),
        y = entry->getArgument(withScale ? 3 : 2),
        shared = quantized ? entry->getArgument(4) : Value(),
        partials = entry->getArguments().back();
  Value table = fp8 || fp8Dense ? e4m3Table(b, loc, symbols)
                : quantized     ? e2m1Table(b, loc, symbols)
                                : Value();
  Value r = lanes.row(b, loc), lane = lanes.lane(b, loc),
        lanesPerRow = lanes.lanes(b, loc);
  Value rows = memref::DimOp::create(b, loc, x, idx(b, loc, 0));
  Value block = idx(b, loc, kBlock);
  auto ifThen = [&](Value cond, const std::function<void()> &body) {
    auto op = scf::IfOp::create(b, loc, cond, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op.thenBlock()->getTerminator());
    body();
  };
  // Lanes of one row agree on r, so the guard is uniform and the barriers
  // inside it are reached by all of them or none.
  Value rowInRange =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, r, rows);
  auto rowGuard = scf::IfOp::create(b, loc, rowInRange, /*withElse=*/false);
  b.setInsertionPoint(rowGuard.thenBlock()->getTerminator());
  if (quantized) {
    // act_quant of row r into the shared row as bf16 (the dequantized values
    // are bf16 exactly), one 32-block per lane at a time. A bf16 row is first
    // copied there as it is (neighbouring lanes, neighbouring elements: whole
    // lines, where a lane per 32-block would read 32 lines a load) and
    // quantized in place (each block read whole before it is written); an
    // f32 row is read from global memory.
    if (!spec.inputF32) {
      // 16-byte loads of 8 elements, kCopyLoads of them issued before their
      // stores, when the row starts on 16 bytes (device allocations; rows are
      // 64-byte multiples); one element at a time otherwise.
      // (Not a structured binding: the lambdas below capture it, which C++17
      // does not allow.)
      Value xBase, xAligned;
      std::tie(xBase, xAligned) = bytePointer(b, loc, x, lanes.weightAddressSpace);
      auto ifAligned = scf::IfOp::create(b, loc, xAligned, /*withElse=*/true);
      {
        OpBuilder eb = OpBuilder::atBlockTerminator(ifAligned.elseBlock());
        scf::ForOp::create(
            eb, loc, lane, idx(eb, loc, k), lanesPerRow, ValueRange{},
            [&](OpBuilder &b, Location loc, Value e, ValueRange) {
          Value v = memref::LoadOp::create(b, loc, x, ValueRange{r, e});
          memref::StoreOp::create(b, loc, v, shared, ValueRange{paddedColumn(b, loc, e)});
          scf::YieldOp::create(b, loc);
        });
      }
      {
        OpBuilder vb = OpBuilder::atBlockTerminator(ifAligned.thenBlock());
        constexpr int64_t kCopyLoads = 4;
        auto words = VectorType::get({4}, vb.getI32Type());
        auto halves = VectorType::get({8}, bf16);
        forGroupsLoadedAhead(
            vb, loc, lane, k / 8, lanesPerRow, kCopyLoads,
            [&](OpBuilder &b, Value read) -> SmallVector<Value> {
              Value at = arith::IndexCastUIOp::create(
                  b, loc, b.getI64Type(),
                  arith::AddIOp::create(b, loc,
                                        arith::MulIOp::create(b, loc, r, idx(b, loc, 2 * k)),
                                        arith::MulIOp::create(b, loc, read, idx(b, loc, 16))));
              Value ptr = LLVM::GEPOp::create(b, loc, xBase.getType(), b.getI8Type(), xBase,
                                              ValueRange{at});
              return {LLVM::LoadOp::create(b, loc, words, ptr, /*alignment=*/16)};
            },
            [&](OpBuilder &b, Value g, ValueRange loaded) {
              Value v8 = LLVM::BitcastOp::create(b, loc, halves, loaded[0]);
              Value first = arith::MulIOp::create(b, loc, g, idx(b, loc, 8));
              for (int64_t e = 0; e < 8; ++e) {
                Value v = LLVM::ExtractElementOp::create(
                    b, loc, v8, LLVM::ConstantOp::create(b, loc, b.getI32Type(), int32_t(e)));
                Value col = arith::AddIOp::create(b, loc, first, idx(b, loc, e));
                memref::StoreOp::create(b, loc, v, shared, ValueRange{paddedColumn(b, loc, col)});
              }
            });
      }
      lanes.barrier(b, loc);
    }
    scf::ForOp::create(
        b, loc, lane, idx(b, loc, k / kBlock), lanesPerRow, ValueRange{},
        [&](OpBuilder &b, Location loc, Value kb, ValueRange) {
      Value at = arith::MulIOp::create(b, loc, kb, idx(b, loc, kBlock + kLinearRowPad));
      auto column = [&](OpBuilder &nb, Value c) -> Value {
        return arith::AddIOp::create(nb, loc, at, c);
      };
      emitActQuantBlock(
          b, loc,
          [&](OpBuilder &nb, Value c) {
            if (spec.inputF32)
              return loadF32(nb, loc, x,
                             ValueRange{r, arith::AddIOp::create(
                                               nb, loc,
                                               arith::MulIOp::create(nb, loc, kb, block), c)});
            return loadF32(nb, loc, shared, ValueRange{column(nb, c)});
          },
          [&](OpBuilder &nb, Value c, Value v) {
            memref::StoreOp::create(nb, loc, v, shared, ValueRange{column(nb, c)});
          });
      scf::YieldOp::create(b, loc);
    });
    lanes.barrier(b, loc);
  }
  Value wBase, aligned;
  if (quantized)
    std::tie(wBase, aligned) = bytePointer(b, loc, w, lanes.weightAddressSpace);
  // kPartialLanes lanes per output: lane `sub` computes the fp32 partials of
  // 32-blocks sub, sub + 32, ... of the output's K (its group's, for G > 1),
  // each over its block in order (contiguous weight bytes across the lanes).
  Value partialLanes = idx(b, loc, kPartialLanes);
  Value slot = arith::DivUIOp::create(b, loc, lane, partialLanes);
  Value sub = arith::RemUIOp::create(b, loc, lane, partialLanes);
  Value j = arith::AddIOp::create(b, loc, lanes.firstOutput(b, loc), slot);
  Value outInRange =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, j, idx(b, loc, n));
  ifThen(outInRange, [&] {
    Value inBase = arith::MulIOp::create(
        b, loc, arith::DivUIOp::create(b, loc, j, idx(b, loc, ng)),
        idx(b, loc, kg));
    Value scaleRow = fp8 ? arith::DivUIOp::create(b, loc, j, block).getResult() : j;
    // The lane's partials one block at a time, element by element (any
    // format, any alignment).
    auto scalarLoop = [&](OpBuilder &b) {
    scf::ForOp::create(
        b, loc, sub, idx(b, loc, kBlocks), partialLanes, ValueRange{},
        [&](OpBuilder &b, Location loc, Value kb, ValueRange) {
      Value base = arith::MulIOp::create(b, loc, kb, block);
      Value end = arith::MinSIOp::create(
          b, loc, arith::AddIOp::create(b, loc, base, block), idx(b, loc, kg));
      // The block's weight scale (FP8/FP4: one per 32-block of K).
      Value ws = quantized ? decodeUe8m0(b, loc, loadCode(b, loc, s,
                                                          ValueRange{scaleRow, kb}))
                           : Value();
      auto scalarPartial = [&](OpBuilder &b) -> Value {
      return forLoop(b, loc, base, end, ValueRange{f32c(b, loc, 0.f)},
                  [&](OpBuilder &b, Location loc, Value e, ValueRange p) {
        Value a, wv;
        if (!quantized) {
          a = loadF32(b, loc, x, ValueRange{r, arith::AddIOp::create(b, loc, inBase, e)});
          wv = denseWeightAt(b, loc, w, s, table, j, e);
        } else {
          Value code;
          if (fp8) {
            code = loadCode(b, loc, w, ValueRange{j, e});
          } else {
            // Element 2i is byte i's low nibble, 2i + 1 its high one.
            Value byte = loadCode(
                b, loc, w,
                ValueRange{j, arith::DivUIOp::create(b, loc, e, idx(b, loc, 2))});
            Value odd = arith::IndexCastUIOp::create(
                b, loc, b.getI32Type(),
                arith::RemUIOp::create(b, loc, e, idx(b, loc, 2)));
            Value shift = arith::MulIOp::create(b, loc, odd, i32c(b, loc, 4));
            code = arith::AndIOp::create(
                b, loc, arith::ShRUIOp::create(b, loc, byte, shift),
                i32c(b, loc, 0xF));
          }
          wv = arith::MulFOp::create(b, loc, lookup(b, loc, table, code), ws);
          a = loadF32(b, loc, shared, ValueRange{paddedColumn(b, loc, e)});
        }
        Value prod = arith::MulFOp::create(b, loc, a, wv);
        return SmallVector<Value>{arith::AddFOp::create(b, loc, p[0], prod)};
      })
              .getResult(0);
      };
      Value partial = scalarPartial(b);
      memref::StoreOp::create(b, loc, partial, partials, ValueRange{slot, kb});
      scf::YieldOp::create(b, loc);
    });
    };
    if (!quantized) {
      scalarLoop(b);
      return;
    }
    // FP8/FP4 with a 16-byte aligned weight (device allocations): the lane's
    // blocks kPrefetchBlocks at a time, all their scale and 16-byte code loads
    // issued before the first is used (a block's loads would otherwise wait
    // for the previous block's arithmetic), each block's codes decoded
    // without a table (neighbouring lanes read neighbouring blocks: whole
    // lines). The partials are the scalar loop's, element for element.
    auto ifAligned = scf::IfOp::create(b, loc, aligned, /*withElse=*/true);
    OpBuilder eb = OpBuilder::atBlockTerminator(ifAligned.elseBlock());
    scalarLoop(eb);
    OpBuilder vb = OpBuilder::atBlockTerminator(ifAligned.thenBlock());
    const int64_t trips = (kBlocks + kPartialLanes - 1) / kPartialLanes;
    forGroupsLoadedAhead(
        vb, loc, sub, kBlocks, idx(vb, loc, kPartialLanes),
        std::min<int64_t>(trips, kPrefetchBlocks),
        [&](OpBuilder &b, Value read) {
          SmallVector<Value> loaded{loadCode(b, loc, s, ValueRange{scaleRow, read})};
          llvm::append_range(loaded, loadBlockWords(b, loc, wBase, j, read, k, fp8));
          return loaded;
        },
        [&](OpBuilder &b, Value kb, ValueRange loaded) {
          Value ws = decodeUe8m0(b, loc, loaded[0]);
          SmallVector<Value> values = decodeBlockWords(b, loc, loaded.drop_front(), fp8);
          Value at = arith::MulIOp::create(b, loc, kb, idx(b, loc, kBlock + kLinearRowPad));
          Value p = f32c(b, loc, 0.f);
          for (int64_t e = 0; e < kBlock; ++e) {
            Value a = loadF32(b, loc, shared,
                              ValueRange{arith::AddIOp::create(b, loc, at, idx(b, loc, e))});
            Value wv = arith::MulFOp::create(b, loc, values[size_t(e)], ws);
            p = arith::AddFOp::create(b, loc, p, arith::MulFOp::create(b, loc, a, wv));
          }
          memref::StoreOp::create(b, loc, p, partials, ValueRange{slot, kb});
        });
  });
  lanes.barrier(b, loc);
  // The output's first lane adds the partials in block order, as the host
  // kernel does, and rounds once.
  Value first =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, sub, idx(b, loc, 0));
  ifThen(arith::AndIOp::create(b, loc, outInRange, first), [&] {
    Value acc = forLoop(b, loc, 0, kBlocks, ValueRange{f32c(b, loc, 0.f)},
                        [&](OpBuilder &b, Location loc, Value kb, ValueRange t) {
                          Value p = memref::LoadOp::create(b, loc, partials,
                                                           ValueRange{slot, kb});
                          return SmallVector<Value>{
                              arith::AddFOp::create(b, loc, t[0], p)};
                        })
                    .getResult(0);
    Type outType = spec.format == LinearFormat::F32 ? f32 : bf16;
    memref::StoreOp::create(b, loc, fromF32(b, loc, acc, outType), y,
                            ValueRange{r, j});
  });
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

int64_t linearTileOutputs(const LinearKernelSpec &spec, int64_t maxOutputs) {
  const int64_t g = std::max<int64_t>(spec.groups, 1);
  const int64_t ng = spec.outFeatures / g;
  maxOutputs -= maxOutputs % kPartialLanes;
  if (maxOutputs < kPartialLanes || ng < 1)
    return 0;
  if (g == 1) // one group: the last tile's extra lanes are skipped
    return std::min(maxOutputs, (ng + kPartialLanes - 1) / kPartialLanes * kPartialLanes);
  for (int64_t t = maxOutputs; t >= kPartialLanes; t -= kPartialLanes)
    if (ng % t == 0)
      return t;
  return 0;
}

void buildLinearTiledBody(func::FuncOp fn, const LinearKernelSpec &spec,
                          const LinearTileLanes &lanes) {
  MLIRContext *context = fn.getContext();
  OpBuilder b(context);
  Location loc = fn.getLoc();
  Type f32 = b.getF32Type(), bf16 = b.getBF16Type();
  const bool quantized = linearNeedsSharedRow(spec);
  const bool fp8Dense = spec.format == LinearFormat::FP8AsBF16;
  const bool fp8 = spec.format == LinearFormat::FP8Block32;
  const bool fp4 = spec.format == LinearFormat::FP4E2M1;
  const int64_t k = spec.inFeatures, n = spec.outFeatures, g = spec.groups;
  const int64_t kg = k / g, ng = n / g;
  const int64_t rowsPerTile = lanes.rowsPerTile, outputsPerTile = lanes.outputsPerTile,
                chunk = lanes.chunk;
  const int64_t chunks = (kg + chunk - 1) / chunk;
  Operation *symbols = SymbolTable::getNearestSymbolTable(fn->getParentOp());
  // A fresh body over the same arguments (plus the shared activations).
  Block *entry = freshBody(fn, {lanes.sharedActType});
  b.setInsertionPointToStart(entry);
  const bool withScale = quantized || fp8Dense;
  Value x = entry->getArgument(0), w = entry->getArgument(1),
        s = withScale ? entry->getArgument(2) : Value(),
        y = entry->getArgument(withScale ? 3 : 2),
        act = entry->getArguments().back();
  Value table = fp8 || fp8Dense ? e4m3Table(b, loc, symbols)
                : fp4           ? e2m1Table(b, loc, symbols)
                                : Value();
  auto add = [&](OpBuilder &b, Value l, Value r) -> Value {
    return arith::AddIOp::create(b, loc, l, r);
  };
  auto mul = [&](OpBuilder &b, Value l, int64_t r) -> Value {
    return arith::MulIOp::create(b, loc, l, idx(b, loc, r));
  };
  auto less = [&](OpBuilder &b, Value l, Value r) -> Value {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, l, r);
  };
  Value lane = lanes.lane(b, loc);
  Value r0 = mul(b, lanes.rowTile(b, loc), rowsPerTile);
  Value j0 = mul(b, lanes.outputTile(b, loc), outputsPerTile);
  Value j = add(b, j0, lane);
  Value rows = memref::DimOp::create(b, loc, x, idx(b, loc, 0));
  // Every output of a tile is in the tile's group (the tile divides it).
  Value inBase = mul(b, arith::DivUIOp::create(b, loc, j0, idx(b, loc, ng)), kg);
  Value outInRange = less(b, j, idx(b, loc, n));
  Value scaleRow =
      fp8 ? arith::DivUIOp::create(b, loc, j, idx(b, loc, kBlock)).getResult() : j;
  SmallVector<Value> zeros(size_t(rowsPerTile), f32c(b, loc, 0.f));
  SmallVector<Type> accTypes(size_t(rowsPerTile), f32);
  Value wBase, aligned;
  if (quantized)
    std::tie(wBase, aligned) = bytePointer(b, loc, w, lanes.weightAddressSpace);
  Value zero = f32c(b, loc, 0.f);
  scf::ForOp chunkLoop = forLoop(
      b, loc, 0, chunks, zeros,
      [&](OpBuilder &b, Location loc, Value c, ValueRange acc) {
    Value cBase = mul(b, c, chunk);
    Value cLen = arith::MinSIOp::create(
        b, loc, idx(b, loc, chunk), arith::SubIOp::create(b, loc, idx(b, loc, kg), cBase));
    // Stage the tile's activations of this chunk: act[e][t] is row r0 + t,
    // channel cBase + e (0 past the rows or K).
    if (quantized) {
      // act_quant of the tile's 32-blocks, one (row, block) per lane at a time.
      scf::ForOp::create(
          b, loc, lane, idx(b, loc, rowsPerTile * (chunk / kBlock)),
          idx(b, loc, outputsPerTile), ValueRange{},
          [&](OpBuilder &b, Location loc, Value task, ValueRange) {
        Value t = arith::RemUIOp::create(b, loc, task, idx(b, loc, rowsPerTile));
        Value kbl = arith::DivUIOp::create(b, loc, task, idx(b, loc, rowsPerTile));
        Value row = add(b, r0, t);
        Value local = mul(b, kbl, kBlock);
        Value valid = arith::AndIOp::create(b, loc, less(b, row, rows),
                                            less(b, local, cLen));
        auto ifValid = scf::IfOp::create(b, loc, valid, /*withElse=*/true);
        {
          OpBuilder tb = OpBuilder::atBlockTerminator(ifValid.thenBlock());
          Value kb = add(tb, mul(tb, c, chunk / kBlock), kbl);
          emitActQuantRowBlock(tb, loc, x, row, kb, [&](OpBuilder &nb, Value col, Value v) {
            Value e = arith::SubIOp::create(nb, loc, col, cBase);
            memref::StoreOp::create(nb, loc, arith::ExtFOp::create(nb, loc, f32, v),
                                    act, ValueRange{e, t});
          });
          OpBuilder eb = OpBuilder::atBlockTerminator(ifValid.elseBlock());
          forLoop(eb, loc, 0, kBlock, ValueRange{},
                  [&](OpBuilder &b, Location loc, Value e, ValueRange) {
            memref::StoreOp::create(b, loc, zero, act, ValueRange{add(b, local, e), t});
            return SmallVector<Value>{};
          });
        }
        scf::YieldOp::create(b, loc);
      });
    } else {
      // Element i of the tile: row i / chunk, channel i % chunk (neighbouring
      // lanes read neighbouring channels).
      scf::ForOp::create(
          b, loc, lane, idx(b, loc, rowsPerTile * chunk), idx(b, loc, outputsPerTile),
          ValueRange{}, [&](OpBuilder &b, Location loc, Value i, ValueRange) {
        Value t = arith::DivUIOp::create(b, loc, i, idx(b, loc, chunk));
        Value e = arith::RemUIOp::create(b, loc, i, idx(b, loc, chunk));
        Value row = add(b, r0, t);
        Value valid = arith::AndIOp::create(b, loc, less(b, row, rows), less(b, e, cLen));
        auto ifValid = scf::IfOp::create(b, loc, TypeRange{f32}, valid, /*withElse=*/true);
        {
          OpBuilder tb = OpBuilder::atBlockEnd(ifValid.thenBlock());
          Value v = loadF32(tb, loc, x, ValueRange{row, add(tb, add(tb, inBase, cBase), e)});
          scf::YieldOp::create(tb, loc, v);
          OpBuilder eb = OpBuilder::atBlockEnd(ifValid.elseBlock());
          scf::YieldOp::create(eb, loc, zero);
        }
        memref::StoreOp::create(b, loc, ifValid.getResult(0), act, ValueRange{e, t});
        scf::YieldOp::create(b, loc);
      });
    }
    lanes.barrier(b, loc);
    // Each lane: its output's 32-blocks of the chunk, in K order; each weight
    // element decoded once and applied to every row of the tile.
    auto ifOut = scf::IfOp::create(b, loc, accTypes, outInRange, /*withElse=*/true);
    {
      OpBuilder eb = OpBuilder::atBlockEnd(ifOut.elseBlock());
      scf::YieldOp::create(eb, loc, acc);
      OpBuilder tb = OpBuilder::atBlockEnd(ifOut.thenBlock());
      Value blocks = arith::DivUIOp::create(
          tb, loc, add(tb, cLen, idx(tb, loc, kBlock - 1)), idx(tb, loc, kBlock));
      scf::ForOp blockLoop = forLoop(
          tb, loc, idx(tb, loc, 0), blocks, acc,
          [&](OpBuilder &b, Location loc, Value kbl, ValueRange sums) {
        Value local = mul(b, kbl, kBlock);
        Value col0 = add(b, cBase, local); // in the group's channels
        Value len = arith::MinSIOp::create(
            b, loc, idx(b, loc, kBlock), arith::SubIOp::create(b, loc, cLen, local));
        Value ws = quantized
                       ? decodeUe8m0(b, loc,
                                     loadCode(b, loc, s,
                                              ValueRange{scaleRow,
                                                         arith::DivUIOp::create(
                                                             b, loc, col0,
                                                             idx(b, loc, kBlock))}))
                       : Value();
        // partial[t] += act[local + e][t] * weight(e), e in block order.
        auto accumulate = [&](OpBuilder &b, Value e, Value wv,
                              SmallVector<Value> &partial) {
          Value at = add(b, local, e);
          for (int64_t t = 0; t < rowsPerTile; ++t) {
            Value a = memref::LoadOp::create(b, loc, act, ValueRange{at, idx(b, loc, t)});
            Value prod = arith::MulFOp::create(b, loc, a, wv);
            partial[size_t(t)] = arith::AddFOp::create(b, loc, partial[size_t(t)], prod);
          }
        };
        auto scalarPartials = [&](OpBuilder &b) -> SmallVector<Value> {
        scf::ForOp elements;
        if (fp4) {
          // Byte i of the block holds elements 2i (low nibble) and 2i + 1.
          Value byteBase = arith::DivUIOp::create(b, loc, col0, idx(b, loc, 2));
          elements = forLoop(
              b, loc, 0, kBlock / 2, zeros,
              [&](OpBuilder &b, Location loc, Value i, ValueRange p) {
            SmallVector<Value> partial(p);
            Value byte = loadCode(b, loc, w, ValueRange{j, add(b, byteBase, i)});
            Value lo = arith::AndIOp::create(b, loc, byte, i32c(b, loc, 0xF));
            Value hi = arith::ShRUIOp::create(b, loc, byte, i32c(b, loc, 4));
            Value even = mul(b, i, 2);
            Value odd = add(b, even, idx(b, loc, 1));
            for (auto [nibble, e] : {std::pair{lo, even}, std::pair{hi, odd}})
              accumulate(b, e,
                         arith::MulFOp::create(b, loc, lookup(b, loc, table, nibble), ws),
                         partial);
            return partial;
          });
        } else {
          elements = forLoop(
              b, loc, idx(b, loc, 0), len, zeros,
              [&](OpBuilder &b, Location loc, Value e, ValueRange p) {
            SmallVector<Value> partial(p);
            Value col = add(b, col0, e);
            Value wv = fp8 ? arith::MulFOp::create(
                                 b, loc,
                                 lookup(b, loc, table, loadCode(b, loc, w, ValueRange{j, col})),
                                 ws)
                                 .getResult()
                           : denseWeightAt(b, loc, w, s, table, j, col);
            accumulate(b, e, wv, partial);
            return partial;
          });
        }
        return SmallVector<Value>(elements.getResults());
        };
        SmallVector<Value> partials;
        if (!quantized) {
          partials = scalarPartials(b);
        } else {
          // The block's codes in one or two 16-byte loads when the weight is
          // 16-byte aligned (rows are: K % 32 == 0), decoded arithmetically.
          auto ifAligned = scf::IfOp::create(b, loc, accTypes, aligned, /*withElse=*/true);
          OpBuilder eb = OpBuilder::atBlockEnd(ifAligned.elseBlock());
          scf::YieldOp::create(eb, loc, scalarPartials(eb));
          OpBuilder vb = OpBuilder::atBlockEnd(ifAligned.thenBlock());
          SmallVector<Value> values = loadBlockValues(
              vb, loc, wBase, j,
              arith::DivUIOp::create(vb, loc, col0, idx(vb, loc, kBlock)), k, fp8);
          SmallVector<Value> partial(zeros);
          for (int64_t e = 0; e < kBlock; ++e)
            accumulate(vb, idx(vb, loc, e),
                       arith::MulFOp::create(vb, loc, values[size_t(e)], ws), partial);
          scf::YieldOp::create(vb, loc, partial);
          partials = SmallVector<Value>(ifAligned.getResults());
        }
        SmallVector<Value> next;
        for (int64_t t = 0; t < rowsPerTile; ++t)
          next.push_back(arith::AddFOp::create(b, loc, sums[size_t(t)], partials[size_t(t)]));
        return next;
      });
      scf::YieldOp::create(tb, loc, blockLoop.getResults());
    }
    // Before the next chunk's staging overwrites what others still read.
    lanes.barrier(b, loc);
    return SmallVector<Value>(ifOut.getResults());
  });
  Type outType = spec.format == LinearFormat::F32 ? f32 : bf16;
  auto store = scf::IfOp::create(b, loc, outInRange, /*withElse=*/false);
  OpBuilder sb = OpBuilder::atBlockTerminator(store.thenBlock());
  for (int64_t t = 0; t < rowsPerTile; ++t) {
    Value row = add(sb, r0, idx(sb, loc, t));
    auto inRows = scf::IfOp::create(sb, loc, less(sb, row, rows), /*withElse=*/false);
    OpBuilder ib = OpBuilder::atBlockTerminator(inRows.thenBlock());
    memref::StoreOp::create(ib, loc,
                            fromF32(ib, loc, chunkLoop.getResult(unsigned(t)), outType),
                            y, ValueRange{row, j});
  }
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

int64_t linearPartials(const LinearKernelSpec &spec) {
  const int64_t kg = spec.inFeatures / std::max<int64_t>(spec.groups, 1);
  return (kg + kBlock - 1) / kBlock;
}

} // namespace csa::codegen

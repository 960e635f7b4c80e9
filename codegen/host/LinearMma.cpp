//===- LinearMma.cpp - The tensor-core prefill form of csa.linear ---------===//
//
// See LinearMma.h. The body is built on memrefs and lane callbacks like the
// other GPU forms, so the host can run it (GpuFormEmulationTest, the mma
// emulated per warp) and the NVPTX back end lowers it with nvvm.mma.sync.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/LinearMma.h"

#include "codegen/host/GpuFormLanes.h"
#include "codegen/host/KernelBuilder.h"
#include "codegen/host/LinearKernelParts.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>
#include <tuple>
#include <vector>

using namespace mlir;

namespace csa::codegen {

using namespace linear;

namespace {
/// A warp's part of the tile: 2 fragments of 16 rows x 4 of 8 outputs.
constexpr int64_t kWarpRowFragments = 2, kWarpColFragments = 4;
/// The K of one mma; a 32-block is two.
constexpr int64_t kMmaK = 16;
} // namespace

std::optional<LinearMmaShape> linearMmaShape(const LinearKernelSpec &spec,
                                             int64_t maxKBlocksPerStage, bool fp8) {
  const bool formatFits =
      spec.format == LinearFormat::FP8Block32 || spec.format == LinearFormat::FP4E2M1 ||
      spec.format == LinearFormat::FP8AsBF16 ||
      (spec.format == LinearFormat::BF16 && !spec.weightF32);
  const int64_t g = std::max<int64_t>(spec.groups, 1);
  const bool grouped = spec.experts > 0;
  if (!formatFits || spec.inputF32 || spec.inFeatures % g != 0 || spec.outFeatures % g != 0 ||
      (grouped && (g != 1 || spec.slotsPerRow < 1 ||
                   (spec.format != LinearFormat::FP8Block32 && spec.format != LinearFormat::FP4E2M1))))
    return std::nullopt;
  const int64_t kg = spec.inFeatures / g, ng = spec.outFeatures / g;
  if (kg == 0 || kg % kBlock != 0)
    return std::nullopt;
  for (int64_t outputs : {128, 64, 32})
    if (ng % outputs == 0) {
      LinearMmaShape shape;
      shape.outputsPerTile = outputs;
      shape.grouped = grouped;
      shape.fp8 = fp8 && !spec.inputF32 &&
                  (spec.format == LinearFormat::FP8Block32 || spec.format == LinearFormat::FP4E2M1);
      // More blocks a stage while they divide K and the tiles fit the
      // static shared memory.
      for (LinearMmaShape more = shape; more.kBlocksPerStage * 2 <= maxKBlocksPerStage &&
                                        (kg / kBlock) % (more.kBlocksPerStage * 2) == 0;) {
        more.kBlocksPerStage *= 2;
        if (more.sharedBytes() > kMaxStaticSharedBytes)
          break;
        shape = more;
      }
      return shape;
    }
  return std::nullopt;
}

namespace {
/// The E4M3 code of an f32 value that is one (emitRoundToE4M3's results:
/// on the grid, |v| <= 448, or NaN): sign, then the biased exponent and
/// the top three mantissa bits, or v x 2^9 below 2^-6 (subnormal); NaN
/// 0x7F.
Value e4m3CodeOfValue(OpBuilder &b, Location loc, Value v) {
  Type i32 = b.getI32Type();
  auto c = [&](uint32_t x) { return i32c(b, loc, x); };
  Value bits = arith::BitcastOp::create(b, loc, i32, v);
  Value sign = arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, bits, c(24)), c(0x80));
  Value magnitude = arith::AndIOp::create(b, loc, bits, c(0x7FFFFFFF));
  Value exponent = arith::ShRUIOp::create(b, loc, magnitude, c(23));
  // Normal: (e - 120) << 3 | m >> 20 (2^-6 has biased f32 exponent 121).
  Value normal = arith::OrIOp::create(
      b, loc,
      arith::ShLIOp::create(b, loc, arith::SubIOp::create(b, loc, exponent, c(120)), c(3)),
      arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, magnitude, c(20)), c(7)));
  Value absV = arith::BitcastOp::create(b, loc, b.getF32Type(), magnitude);
  Value subnormal = arith::FPToUIOp::create(
      b, loc, i32, arith::MulFOp::create(b, loc, absV, f32c(b, loc, 512.f)));
  Value isNormal = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, exponent, c(121));
  Value code = arith::SelectOp::create(b, loc, isNormal, normal, subnormal);
  Value isNaN = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, magnitude, c(0x7F800000));
  code = arith::SelectOp::create(b, loc, isNaN, c(0x7F), code);
  return arith::OrIOp::create(b, loc, sign, code);
}

/// Four E2M1 codes, one in the low nibble of each byte, as E4M3 codes of
/// the same values times 2^-6 (exact): s.e1e0.m -> s.00e1e0.m00.
Value e4m3OfE2m1Bytes(OpBuilder &b, Location loc, Value nibbles) {
  Value sign = arith::ShLIOp::create(
      b, loc, arith::AndIOp::create(b, loc, nibbles, i32c(b, loc, 0x08080808)), i32c(b, loc, 4));
  Value magnitude = arith::ShLIOp::create(
      b, loc, arith::AndIOp::create(b, loc, nibbles, i32c(b, loc, 0x07070707)), i32c(b, loc, 2));
  return arith::OrIOp::create(b, loc, sign, magnitude);
}

/// Four codes (i32, each below 256) as a word, the first in the low byte.
Value packCodes(OpBuilder &b, Location loc, ArrayRef<Value> codes) {
  Value word = codes[0];
  for (int64_t i = 1; i < 4; ++i)
    word = arith::OrIOp::create(
        b, loc, word,
        arith::ShLIOp::create(b, loc, codes[size_t(i)], i32c(b, loc, uint32_t(8 * i))));
  return word;
}
} // namespace

void buildLinearMmaBody(func::FuncOp fn, const LinearKernelSpec &spec,
                        const LinearMmaShape &shape, const LinearMmaLanes &lanes) {
  MLIRContext *context = fn.getContext();
  OpBuilder b(context);
  Location loc = fn.getLoc();
  Type f32 = b.getF32Type(), bf16 = b.getBF16Type(), i32 = b.getI32Type();
  const bool quantized = linearNeedsSharedRow(spec); // FP8 block-scaled, FP4
  const bool fp8Dense = spec.format == LinearFormat::FP8AsBF16;
  const bool fp4 = spec.format == LinearFormat::FP4E2M1;
  const bool scaled = quantized || fp8Dense;
  const bool grouped = spec.experts > 0;
  const int64_t g = std::max<int64_t>(spec.groups, 1);
  const int64_t k = spec.inFeatures, kg = k / g, ng = spec.outFeatures / g;
  const int64_t tileRows = shape.rowsPerTile, tileOutputs = shape.outputsPerTile,
                threads = shape.threads(), warpsN = tileOutputs / 32;
  const int64_t wordsPerRow = kMmaRowStride / 2;
  // Threads a row's act_quant block is split over (adjacent lanes).
  const int64_t quantThreads = threads / tileRows, perThread = kBlock / quantThreads;
  // Threads a weight row of the tile is staged by (FP8: a 16-byte load each).
  const int64_t parts = scaled && !fp4 && tileOutputs * 2 <= threads ? 2 : 1;
  Operation *symbols = SymbolTable::getNearestSymbolTable(fn->getParentOp());
  Block *entry = freshBody(fn, {lanes.sharedType});
  b.setInsertionPointToStart(entry);
  // Grouped kernels take the slots' expert ids second (LinearKernels.h).
  const unsigned idsArgs = grouped ? 1 : 0;
  Value x = entry->getArgument(0), w = entry->getArgument(idsArgs + 1),
        s = scaled ? entry->getArgument(idsArgs + 2) : Value(),
        y = entry->getArgument(idsArgs + (scaled ? 3 : 2)),
        shared = entry->getArguments().back();
  Value table = !scaled ? Value()
                : fp4   ? e2m1Table(b, loc, symbols)
                        : e4m3Table(b, loc, symbols);
  // The shared bytes as the two staged tiles (bf16, rows of kMmaRowStride)
  // and as the 32-bit words the fragments are loaded from.
  Attribute space = cast<MemRefType>(shared.getType()).getMemorySpace();
  auto view = [&](Type element, int64_t byteOffset, ArrayRef<int64_t> shapeOf) -> Value {
    return memref::ViewOp::create(
        b, loc, MemRefType::get(shapeOf, element, MemRefLayoutAttrInterface{}, space), shared,
        idx(b, loc, byteOffset), ValueRange{});
  };
  // A stage's tile sets one after another: set g's activation rows from
  // g x stageRows, its weight rows after them.
  const int64_t stageBlocks = shape.kBlocksPerStage, stageRows = tileRows + tileOutputs;
  // Loads a stage ahead (act_quant-ed activations and block-scaled weights).
  const bool prefetch = shape.prefetch && quantized && !shape.fp8;
  Value tiles = view(bf16, 0, {stageBlocks * stageRows, kMmaRowStride});
  // The same as bit patterns: what a copy through control flow carries (a
  // bf16 value would be widened and narrowed again on the host target).
  Value tileBits = view(b.getI16Type(), 0, {stageBlocks * stageRows, kMmaRowStride});
  Value words = view(i32, 0, {stageBlocks * stageRows * wordsPerRow});

  auto add = [&](OpBuilder &b, Value l, Value r) -> Value {
    return arith::AddIOp::create(b, loc, l, r);
  };
  auto addc = [&](OpBuilder &b, Value l, int64_t r) -> Value {
    return r == 0 ? l : add(b, l, idx(b, loc, r));
  };
  auto mul = [&](OpBuilder &b, Value l, int64_t r) -> Value {
    return arith::MulIOp::create(b, loc, l, idx(b, loc, r));
  };
  auto div = [&](OpBuilder &b, Value l, int64_t r) -> Value {
    return arith::DivUIOp::create(b, loc, l, idx(b, loc, r));
  };
  auto rem = [&](OpBuilder &b, Value l, int64_t r) -> Value {
    return arith::RemUIOp::create(b, loc, l, idx(b, loc, r));
  };
  auto less = [&](OpBuilder &b, Value l, Value r) -> Value {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, l, r);
  };
  Value tid = lanes.thread(b, loc);
  Value warp = div(b, tid, 32), lane = rem(b, tid, 32);
  // PTX's fragment coordinates: lane = 4 x group + quad.
  Value group = div(b, lane, 4), quad2 = mul(b, rem(b, lane, 4), 2);
  Value warpRow = mul(b, div(b, warp, warpsN), 32), warpCol = mul(b, rem(b, warp, warpsN), 32);
  Value j0 = mul(b, lanes.outputTile(b, loc), tileOutputs);
  Value rows = memref::DimOp::create(b, loc, x, idx(b, loc, 0));
  // Every output of a tile is in the tile's group (the tile divides it).
  Value inBase = mul(b, div(b, j0, ng), kg);
  Value wBase, aligned;
  if (scaled)
    std::tie(wBase, aligned) = bytePointer(b, loc, w, lanes.weightAddressSpace);
  Value zeroF32 = f32c(b, loc, 0.f);
  constexpr int64_t kAccumulators = kWarpRowFragments * kWarpColFragments * 4;
  SmallVector<Value> zeros(size_t(kAccumulators), zeroF32);

  // Grouped (the routed experts): the block's expert is its x tile index,
  // its rows the slots routed to it (a list in shared memory), its weight
  // rows and scale rows the expert's part of the stacked arrays.
  Value expert = grouped ? lanes.rowTile(b, loc) : Value();
  Value weightRowBase = grouped ? mul(b, expert, spec.outFeatures) : idx(b, loc, 0);
  Value scaleRowBase = grouped ? mul(b, expert, fp4 ? spec.outFeatures : (spec.outFeatures + kBlock - 1) / kBlock)
                               : idx(b, loc, 0);
  Value slotList = grouped ? view(i32, shape.tilesBytes(), {shape.listCapacity()}) : Value();
  Value listCount =
      grouped ? view(i32, shape.tilesBytes() + shape.listCapacity() * 4, {1}) : Value();

  // Tile row t (< tileRows): whether it holds a row, the x row it reads and
  // the y row it writes. Plain: rows r0 + t; grouped: the slots
  // list[head + t], t < count, reading x row slot / slotsPerRow.
  struct TileRow {
    Value valid, xRow, yRow;
  };
  auto emitTile = [&](Value head, Value count) {
    auto rowOf = [&](OpBuilder &b, Value t) -> TileRow {
      if (!grouped) {
        Value r = add(b, head, t);
        return {less(b, r, rows), r, r};
      }
      // In the list's bounds whether or not t < count (head + tileRows <=
      // capacity); the slot is used only when it is.
      Value slot = arith::IndexCastUIOp::create(
          b, loc, b.getIndexType(), memref::LoadOp::create(b, loc, slotList, ValueRange{add(b, head, t)}));
      return {less(b, t, count), div(b, slot, spec.slotsPerRow), slot};
    };
    // The staging thread's row of the act_quant-ed activations (fixed).
    TileRow quantRow;
    if (quantized)
      quantRow = rowOf(b, div(b, tid, quantThreads));
    // A stage's 32-blocks: kb = stage x stageBlocks + g, staged in tile set g
    // (rows g x stageRows on).
    auto blocksOf = [&](OpBuilder &b, Value stage) {
      std::pair<SmallVector<Value>, SmallVector<Value>> kb; // kb, kb x 32
      for (int64_t g = 0; g < stageBlocks; ++g) {
        kb.first.push_back(addc(b, mul(b, stage, stageBlocks), g));
        kb.second.push_back(mul(b, kb.first.back(), kBlock));
      }
      return kb;
    };
    // act_quant's inputs of a stage: `quantThreads` neighbouring lanes a
    // (row, block), `perThread` channels each (zeros past the rows); every
    // block's loads at once.
    Value quantPart = rem(b, tid, quantThreads);
    auto actLoads = [&](OpBuilder &b, ArrayRef<Value> kBases) -> SmallVector<Value> {
      SmallVector<Type> types(size_t(perThread * stageBlocks), f32);
      auto loaded = emitSelect(
          b, loc, quantRow.valid, types,
          [&]() -> SmallVector<Value> {
            SmallVector<Value> v;
            for (int64_t g = 0; g < stageBlocks; ++g) {
              Value first = add(b, kBases[size_t(g)], mul(b, quantPart, perThread));
              for (int64_t e = 0; e < perThread; ++e)
                v.push_back(loadF32(b, loc, x, ValueRange{quantRow.xRow, addc(b, first, e)}));
            }
            return v;
          },
          [&]() -> SmallVector<Value> { return SmallVector<Value>(types.size(), zeroF32); });
      return SmallVector<Value>(loaded.getResults());
    };
    // A (row, block)'s act_quant scale and its inverse from this lane's
    // values: the amax over the block's `quantThreads` lanes by shuffles.
    auto actQuantScale = [&](OpBuilder &b, ArrayRef<Value> values) {
      Value amax = zeroF32;
      for (Value v : values)
        amax = emitAmaxStep(b, loc, amax, math::AbsFOp::create(b, loc, v));
      for (int32_t mask = 1; mask < quantThreads; mask *= 2)
        amax = emitAmaxStep(b, loc, amax, lanes.shuffleXor(b, loc, amax, mask));
      return emitActQuantScale(b, loc, amax);
    };
    // act_quant, the host kernel's bits: the block's amax by shuffles (a
    // maximum: the same in any order). Every lane takes part (rows past the
    // end quantize zeros and are not read).
    auto actStore = [&](OpBuilder &b, ValueRange loaded) {
      Value row = div(b, tid, quantThreads);
      for (int64_t g = 0; g < stageBlocks; ++g) {
        SmallVector<Value> values(loaded.begin() + g * perThread,
                                  loaded.begin() + (g + 1) * perThread);
        auto [scale, inverse] = actQuantScale(b, values);
        Value local = mul(b, quantPart, perThread);
        Value tileRow = addc(b, row, g * stageRows);
        for (int64_t e = 0; e < perThread; e += 2) {
          auto [d0, d1] = emitActQuantPair(b, loc, values[size_t(e)], values[size_t(e + 1)],
                                           scale, inverse, lanes.e4m3RoundPair);
          memref::StoreOp::create(b, loc, d0, tiles, ValueRange{tileRow, addc(b, local, e)});
          memref::StoreOp::create(b, loc, d1, tiles, ValueRange{tileRow, addc(b, local, e + 1)});
        }
      }
    };
    // The weights: `parts` threads an output row (FP8: 16 codes, one 16-byte
    // load, each), the rest a whole row; decoded exactly to bf16 without
    // their scale.
    Value hasWeightRow = less(b, tid, idx(b, loc, tileOutputs * parts));
    Value rowInTile = parts > 1 ? div(b, tid, parts) : tid;
    Value e0 = parts > 1 ? mul(b, rem(b, tid, parts), kBlock / parts) : idx(b, loc, 0);
    const int64_t codesPerThread = kBlock / parts;
    Value wRow = add(b, weightRowBase, add(b, j0, rowInTile));
    // A stage's 16-byte weight loads (FP8: four words a block; FP4: one
    // vector<4xi32>): where the weight is 16-byte aligned.
    auto rawWeights = [&](OpBuilder &b, ArrayRef<Value> kbs,
                          ArrayRef<Value> kBases) -> SmallVector<Value> {
      SmallVector<Value> raw;
      for (int64_t g = 0; g < stageBlocks; ++g) {
        if (fp4) {
          llvm::append_range(raw, loadBlockWords(b, loc, wBase, wRow, kbs[size_t(g)], k,
                                                 /*fp8=*/false));
          continue;
        }
        // 16 E4M3 codes of the row from byte kb * 32 + e0.
        const int64_t rowBytes = fp8Dense ? kg : k;
        Value offset = arith::IndexCastUIOp::create(
            b, loc, b.getI64Type(), add(b, add(b, mul(b, wRow, rowBytes), kBases[size_t(g)]), e0));
        llvm::append_range(raw, load16Bytes(b, loc, wBase, offset));
      }
      return raw;
    };
    // Block g's decoded values into its tile set (exact in bf16: E4M3 and
    // E2M1 values; NaN's upper half is a NaN: the upper half of the f32
    // bits).
    auto storeWeights = [&](OpBuilder &b, int64_t g, ArrayRef<Value> decoded) {
      Value tileRow = addc(b, rowInTile, g * stageRows + tileRows);
      for (int64_t e = 0; e < codesPerThread; ++e) {
        Value v = decoded[size_t(e)];
        if (scaled) {
          Value bits = arith::ShRUIOp::create(b, loc, arith::BitcastOp::create(b, loc, i32, v),
                                              i32c(b, loc, 16));
          v = arith::BitcastOp::create(b, loc, bf16,
                                       arith::TruncIOp::create(b, loc, b.getI16Type(), bits));
        }
        memref::StoreOp::create(b, loc, v, tiles, ValueRange{tileRow, addc(b, e0, e)});
      }
    };
    // A stage's weights into the tiles: from `raw` (rawWeights, loaded
    // earlier; empty: loaded here) where aligned, a code at a time through
    // the table where not.
    auto stageWeights = [&](OpBuilder &b, ArrayRef<Value> kbs, ArrayRef<Value> kBases,
                            ValueRange raw) {
      emitWhen(b, loc, hasWeightRow, [&] {
        if (!scaled) {
          for (int64_t g = 0; g < stageBlocks; ++g) {
            SmallVector<Value> values;
            for (int64_t e = 0; e < codesPerThread; ++e)
              values.push_back(memref::LoadOp::create(
                  b, loc, w, ValueRange{wRow, add(b, addc(b, kBases[size_t(g)], e), e0)}));
            storeWeights(b, g, values);
          }
          return;
        }
        auto alignedIf = scf::IfOp::create(b, loc, aligned, /*withElseRegion=*/true);
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(alignedIf.thenBlock()->getTerminator());
          SmallVector<Value> words =
              raw.empty() ? rawWeights(b, kbs, kBases) : SmallVector<Value>(raw);
          const size_t perBlock = words.size() / size_t(stageBlocks);
          for (int64_t g = 0; g < stageBlocks; ++g) {
            ValueRange block(ArrayRef<Value>(words).slice(size_t(g) * perBlock, perBlock));
            if (fp4) {
              storeWeights(b, g, decodeBlockWords(b, loc, block, /*fp8=*/false));
              continue;
            }
            SmallVector<Value> v;
            for (Value word : block)
              for (int64_t half = 0; half < 2; ++half) {
                Value pair = half ? arith::ShRUIOp::create(b, loc, word, i32c(b, loc, 16)).getResult()
                                  : word;
                if (lanes.e4m3PairToF32) {
                  auto [lo, hi] = lanes.e4m3PairToF32(
                      b, loc, arith::TruncIOp::create(b, loc, b.getI16Type(), pair));
                  v.push_back(lo);
                  v.push_back(hi);
                  continue;
                }
                for (int64_t byte = 0; byte < 2; ++byte)
                  v.push_back(decodeE4M3Arith(
                      b, loc,
                      arith::AndIOp::create(
                          b, loc,
                          byte ? arith::ShRUIOp::create(b, loc, pair, i32c(b, loc, 8)).getResult()
                               : pair,
                          i32c(b, loc, 0xFF))));
              }
            storeWeights(b, g, v);
          }
        }
        {
          // A weight off 16 bytes: a code at a time through the table.
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(alignedIf.elseBlock()->getTerminator());
          for (int64_t g = 0; g < stageBlocks; ++g) {
            SmallVector<Value> v;
            for (int64_t e = 0; e < codesPerThread; ++e) {
              Value at = add(b, addc(b, kBases[size_t(g)], e), e0);
              Value code;
              if (fp4) {
                // Byte i holds elements 2i (low nibble) and 2i + 1.
                Value byte = loadCode(b, loc, w, ValueRange{wRow, div(b, at, 2)});
                code = arith::AndIOp::create(
                    b, loc, arith::ShRUIOp::create(b, loc, byte, i32c(b, loc, 4 * (e % 2))),
                    i32c(b, loc, 0xF));
              } else {
                code = loadCode(b, loc, w, ValueRange{wRow, at});
              }
              v.push_back(lookup(b, loc, table, code));
            }
            storeWeights(b, g, v);
          }
        }
      });
    };
    // The E4M3 form (shape.fp8): the staged rows hold E4M3 codes as i32
    // words (kMmaFp8RowBytes a row), then one f32 scale a staged row, set
    // g's rows from g x stageRows as in the bf16 form. FP4 weights are
    // staged with each 8 codes' even elements in one word and the odd ones
    // in the next (three integer ops for 8 nibbles); the activations' codes
    // go in the same order, so every 32-block's dot is the same sum.
    const int64_t fp8RowWords = kMmaFp8RowBytes / 4;
    auto fp8KLoop = [&]() -> scf::ForOp {
      const int64_t stagedRows = stageBlocks * stageRows;
      Value codeWords = view(i32, 0, {stagedRows * fp8RowWords});
      Value rowScales = view(f32, stagedRows * kMmaFp8RowBytes, {stagedRows});
      auto wordOf = [&](OpBuilder &b, Value stagedRow, Value word) -> Value {
        return add(b, mul(b, stagedRow, fp8RowWords), word);
      };
      auto storeWord = [&](OpBuilder &b, Value value, Value stagedRow, Value word) {
        memref::StoreOp::create(b, loc, value, codeWords, ValueRange{wordOf(b, stagedRow, word)});
      };
      // 8 codes (elements 8i .. 8i + 7 of a block) as the two words staged.
      auto wordsOf8 = [&](OpBuilder &b, ArrayRef<Value> c) -> std::pair<Value, Value> {
        if (fp4)
          return {packCodes(b, loc, {c[0], c[2], c[4], c[6]}),
                  packCodes(b, loc, {c[1], c[3], c[5], c[7]})};
        return {packCodes(b, loc, c.take_front(4)), packCodes(b, loc, c.slice(4, 4))};
      };
      // act_quant as in the bf16 form, its codes and scale staged (FP4: the
      // scale times 2^6, for the weights' 2^-6).
      auto actStage = [&](OpBuilder &b, ValueRange loaded) {
        Value row = div(b, tid, quantThreads);
        Value firstWord = mul(b, quantPart, perThread / 4);
        for (int64_t g = 0; g < stageBlocks; ++g) {
          SmallVector<Value> values(loaded.begin() + g * perThread,
                                    loaded.begin() + (g + 1) * perThread);
          std::pair<Value, Value> scaleAndInverse = actQuantScale(b, values);
          Value scale = scaleAndInverse.first, inverse = scaleAndInverse.second;
          SmallVector<Value> codes;
          for (int64_t e = 0; e < perThread; e += 2) {
            Value q0 = arith::MulFOp::create(b, loc, values[size_t(e)], inverse);
            Value q1 = arith::MulFOp::create(b, loc, values[size_t(e + 1)], inverse);
            if (lanes.e4m3CodePair) {
              Value pair = lanes.e4m3CodePair(b, loc, q0, q1);
              codes.push_back(arith::AndIOp::create(b, loc, pair, i32c(b, loc, 0xFF)));
              codes.push_back(arith::AndIOp::create(
                  b, loc, arith::ShRUIOp::create(b, loc, pair, i32c(b, loc, 8)), i32c(b, loc, 0xFF)));
              continue;
            }
            codes.push_back(e4m3CodeOfValue(b, loc, emitRoundToE4M3(b, loc, q0)));
            codes.push_back(e4m3CodeOfValue(b, loc, emitRoundToE4M3(b, loc, q1)));
          }
          Value stagedRow = addc(b, row, g * stageRows);
          for (int64_t j = 0; j < perThread; j += 8) {
            auto [w0, w1] = wordsOf8(b, ArrayRef<Value>(codes).slice(size_t(j), 8));
            storeWord(b, w0, stagedRow, addc(b, firstWord, j / 4));
            storeWord(b, w1, stagedRow, addc(b, firstWord, j / 4 + 1));
          }
          emitWhen(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, quantPart, idx(b, loc, 0)),
                   [&] {
            Value staged = fp4 ? arith::MulFOp::create(b, loc, scale, f32c(b, loc, 64.f)).getResult()
                               : scale;
            memref::StoreOp::create(b, loc, staged, rowScales, ValueRange{stagedRow});
          });
        }
      };
      // The weights' codes (FP8: as they are; FP4: E4M3 bytes of 2^-6 x
      // the E2M1 value) and each staged row's scale (the first of its
      // `parts` threads): 16-byte loads where aligned, a code at a time
      // where not.
      Value firstOfRow = parts > 1 ? arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                                           rem(b, tid, parts), idx(b, loc, 0))
                                         .getResult()
                                   : Value();
      Value firstWeightWord = div(b, e0, 4);
      auto weightStage = [&](OpBuilder &b, ArrayRef<Value> kbs, ArrayRef<Value> kBases) {
        emitWhen(b, loc, hasWeightRow, [&] {
          auto alignedIf = scf::IfOp::create(b, loc, aligned, /*withElseRegion=*/true);
          {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPoint(alignedIf.thenBlock()->getTerminator());
            SmallVector<Value> raw = rawWeights(b, kbs, kBases);
            for (int64_t g = 0; g < stageBlocks; ++g) {
              Value stagedRow = addc(b, rowInTile, g * stageRows + tileRows);
              if (!fp4) {
                for (int64_t i = 0; i < 4; ++i)
                  storeWord(b, raw[size_t(g * 4 + i)], stagedRow, addc(b, firstWeightWord, i));
                continue;
              }
              for (int64_t i = 0; i < 4; ++i) {
                Value w = LLVM::ExtractElementOp::create(
                    b, loc, raw[size_t(g)], LLVM::ConstantOp::create(b, loc, i32, int32_t(i)));
                Value evens = arith::AndIOp::create(b, loc, w, i32c(b, loc, 0x0F0F0F0F));
                Value odds = arith::AndIOp::create(
                    b, loc, arith::ShRUIOp::create(b, loc, w, i32c(b, loc, 4)), i32c(b, loc, 0x0F0F0F0F));
                storeWord(b, e4m3OfE2m1Bytes(b, loc, evens), stagedRow, idx(b, loc, 2 * i));
                storeWord(b, e4m3OfE2m1Bytes(b, loc, odds), stagedRow, idx(b, loc, 2 * i + 1));
              }
            }
          }
          {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPoint(alignedIf.elseBlock()->getTerminator());
            for (int64_t g = 0; g < stageBlocks; ++g) {
              SmallVector<Value> codes;
              for (int64_t e = 0; e < codesPerThread; ++e) {
                Value at = add(b, addc(b, kBases[size_t(g)], e), e0);
                if (!fp4) {
                  codes.push_back(loadCode(b, loc, w, ValueRange{wRow, at}));
                  continue;
                }
                Value byte = loadCode(b, loc, w, ValueRange{wRow, div(b, at, 2)});
                Value nibble = arith::AndIOp::create(
                    b, loc, arith::ShRUIOp::create(b, loc, byte, i32c(b, loc, 4 * (e % 2))),
                    i32c(b, loc, 0xF));
                codes.push_back(e4m3OfE2m1Bytes(b, loc, nibble));
              }
              Value stagedRow = addc(b, rowInTile, g * stageRows + tileRows);
              for (int64_t j = 0; j < codesPerThread; j += 8) {
                auto [w0, w1] = wordsOf8(b, ArrayRef<Value>(codes).slice(size_t(j), 8));
                storeWord(b, w0, stagedRow, addc(b, firstWeightWord, j / 4));
                storeWord(b, w1, stagedRow, addc(b, firstWeightWord, j / 4 + 1));
              }
            }
          }
          auto stageScales = [&] {
            Value j = add(b, j0, rowInTile);
            Value scaleRow = fp4 ? add(b, scaleRowBase, j) : add(b, scaleRowBase, div(b, j, kBlock));
            for (int64_t g = 0; g < stageBlocks; ++g) {
              Value sw = decodeUe8m0(b, loc, loadCode(b, loc, s, ValueRange{scaleRow, kbs[size_t(g)]}));
              memref::StoreOp::create(b, loc, sw, rowScales,
                                      ValueRange{addc(b, rowInTile, g * stageRows + tileRows)});
            }
          };
          if (firstOfRow)
            emitWhen(b, loc, firstOfRow, stageScales);
          else
            stageScales();
        });
      };
      Value quad = rem(b, lane, 4);
      return forLoop(
          b, loc, idx(b, loc, 0), idx(b, loc, kg / kBlock / stageBlocks), zeros,
          [&](OpBuilder &b, Location loc, Value stage, ValueRange acc) {
        auto blocks = blocksOf(b, stage);
        actStage(b, actLoads(b, blocks.second));
        weightStage(b, blocks.first, blocks.second);
        lanes.barrier(b, loc);
        auto word = [&](Value stagedRow, int64_t w) -> Value {
          return memref::LoadOp::create(b, loc, codeWords,
                                        ValueRange{wordOf(b, stagedRow, addc(b, quad, w))});
        };
        auto scaleAt = [&](Value stagedRow) -> Value {
          return memref::LoadOp::create(b, loc, rowScales, ValueRange{stagedRow});
        };
        SmallVector<Value> sums(acc.begin(), acc.end());
        SmallVector<Value> zero4(4, zeroF32);
        for (int64_t g = 0; g < stageBlocks; ++g) {
          const int64_t actRow = g * stageRows, weightRow = actRow + tileRows;
          SmallVector<Value> a[kWarpRowFragments], bw[kWarpColFragments];
          Value sa[kWarpRowFragments][2], sw[kWarpColFragments][2];
          for (int64_t mi = 0; mi < kWarpRowFragments; ++mi) {
            Value r = addc(b, add(b, addc(b, warpRow, mi * 16), group), actRow);
            Value r8 = addc(b, r, 8);
            a[mi] = {word(r, 0), word(r8, 0), word(r, 4), word(r8, 4)};
            sa[mi][0] = scaleAt(r);
            sa[mi][1] = scaleAt(r8);
          }
          for (int64_t ni = 0; ni < kWarpColFragments; ++ni) {
            Value c = addc(b, add(b, addc(b, warpCol, ni * 8), group), weightRow);
            bw[ni] = {word(c, 0), word(c, 4)};
            Value col = addc(b, add(b, addc(b, warpCol, ni * 8), quad2), weightRow);
            sw[ni][0] = scaleAt(col);
            sw[ni][1] = scaleAt(addc(b, col, 1));
          }
          // The block's partial times the activation's scale, then the
          // weight's (the bf16 form's values: there the activations carry
          // their scale); into the accumulators in block order.
          for (int64_t mi = 0; mi < kWarpRowFragments; ++mi)
            for (int64_t ni = 0; ni < kWarpColFragments; ++ni) {
              const size_t base = size_t((mi * kWarpColFragments + ni) * 4);
              SmallVector<Value> d = lanes.mmaE4m3(b, loc, a[mi], bw[ni], zero4);
              for (int64_t e = 0; e < 4; ++e) {
                Value t = arith::MulFOp::create(b, loc, d[size_t(e)], sa[mi][e / 2]);
                t = arith::MulFOp::create(b, loc, t, sw[ni][e % 2]);
                sums[base + size_t(e)] = arith::AddFOp::create(b, loc, sums[base + size_t(e)], t);
              }
            }
        }
        // Before the next stage's staging overwrites what other warps read.
        lanes.barrier(b, loc);
        return sums;
      });
    };
    // With prefetch, a stage's global loads (act_quant's inputs, the
    // aligned weights' 16 bytes) are issued one stage ahead and carried in
    // registers through the loop: the next stage's loads are in flight while
    // this one is staged and multiplied.
    const int64_t stages = kg / kBlock / stageBlocks;
    SmallVector<Value> inits(zeros);
    size_t carriedAct = 0, carriedWeights = 0;
    auto prefetchLoads = [&](OpBuilder &b, Value stage) -> SmallVector<Value> {
      auto blocks = blocksOf(b, stage);
      const SmallVector<Value> &kbs = blocks.first, &kBases = blocks.second;
      SmallVector<Value> loaded = actLoads(b, kBases);
      // Zeros where this thread stages no weight row or the weight is not
      // aligned (the table path loads those itself).
      SmallVector<Type> types;
      for (int64_t g = 0; g < stageBlocks; ++g) {
        if (fp4)
          types.push_back(VectorType::get({4}, i32));
        else
          types.append(4, i32);
      }
      auto raw = emitSelect(
          b, loc, arith::AndIOp::create(b, loc, hasWeightRow, aligned), types,
          [&]() -> SmallVector<Value> { return rawWeights(b, kbs, kBases); },
          [&]() -> SmallVector<Value> {
            SmallVector<Value> z;
            for (Type t : types)
              z.push_back(arith::ConstantOp::create(b, loc, b.getZeroAttr(t)));
            return z;
          });
      llvm::append_range(loaded, raw.getResults());
      return loaded;
    };
    if (prefetch) {
      SmallVector<Value> first = prefetchLoads(b, idx(b, loc, 0));
      carriedAct = size_t(perThread * stageBlocks);
      carriedWeights = first.size() - carriedAct;
      inits.append(first.begin(), first.end());
    }
    scf::ForOp kLoop = shape.fp8 ? fp8KLoop() : forLoop(
        b, loc, idx(b, loc, 0), idx(b, loc, stages), inits,
        [&](OpBuilder &b, Location loc, Value stage, ValueRange loopArgs) {
      ValueRange acc = loopArgs.take_front(kAccumulators);
      auto blocks = blocksOf(b, stage);
      const SmallVector<Value> &kbs = blocks.first, &kBases = blocks.second;
      SmallVector<Value> ahead;
      if (prefetch) {
        // The next stage's loads first (the last stage loads itself again:
        // in bounds, unused).
        Value last = idx(b, loc, stages - 1);
        Value following = arith::MinUIOp::create(b, loc, addc(b, stage, 1), last);
        ahead = prefetchLoads(b, following);
        ValueRange carried = loopArgs.drop_front(kAccumulators);
        actStore(b, carried.take_front(carriedAct));
        stageWeights(b, kbs, kBases, carried.drop_front(carriedAct).take_front(carriedWeights));
      } else if (quantized) {
        actStore(b, actLoads(b, kBases));
        stageWeights(b, kbs, kBases, ValueRange{});
      } else {
        // Two neighbouring channels a thread at a time.
        for (int64_t g = 0; g < stageBlocks; ++g)
          scf::ForOp::create(
              b, loc, tid, idx(b, loc, tileRows * kBlock / 2), idx(b, loc, threads), ValueRange{},
              [&](OpBuilder &b, Location loc, Value i, ValueRange) {
            Value t = div(b, i, kBlock / 2), c = mul(b, rem(b, i, kBlock / 2), 2);
            TileRow at = rowOf(b, t);
            Value col = add(b, add(b, inBase, kBases[size_t(g)]), c);
            Type i16 = b.getI16Type();
            auto bitsAt = [&](Value column) -> Value {
              return arith::BitcastOp::create(
                  b, loc, i16, memref::LoadOp::create(b, loc, x, ValueRange{at.xRow, column}));
            };
            Value zeroBits = arith::ConstantOp::create(b, loc, b.getIntegerAttr(i16, 0));
            auto pair = emitSelect(
                b, loc, at.valid, TypeRange{i16, i16},
                [&]() -> SmallVector<Value> { return {bitsAt(col), bitsAt(addc(b, col, 1))}; },
                [&]() -> SmallVector<Value> { return {zeroBits, zeroBits}; });
            Value tileRow = addc(b, t, g * stageRows);
            memref::StoreOp::create(b, loc, pair.getResult(0), tileBits, ValueRange{tileRow, c});
            memref::StoreOp::create(b, loc, pair.getResult(1), tileBits,
                                    ValueRange{tileRow, addc(b, c, 1)});
            scf::YieldOp::create(b, loc);
          });
        stageWeights(b, kbs, kBases, ValueRange{});
      }
      lanes.barrier(b, loc);
      // The fragments: word (row, channel pair) of a staged tile.
      auto word = [&](int64_t firstRow, Value row, Value col) -> Value {
        Value at = add(b, mul(b, addc(b, row, firstRow), wordsPerRow), div(b, col, 2));
        return memref::LoadOp::create(b, loc, words, ValueRange{at});
      };
      SmallVector<Value> sums(acc.begin(), acc.end());
      for (int64_t g = 0; g < stageBlocks; ++g) {
        const int64_t actRow = g * stageRows, weightRow = actRow + tileRows;
        SmallVector<Value> a[2][kWarpRowFragments], bw[2][kWarpColFragments];
        for (int64_t ks = 0; ks < 2; ++ks) {
          Value c = addc(b, quad2, ks * kMmaK);
          for (int64_t mi = 0; mi < kWarpRowFragments; ++mi) {
            Value r = add(b, addc(b, warpRow, mi * 16), group);
            a[ks][mi] = {word(actRow, r, c), word(actRow + 8, r, c),
                         word(actRow, r, addc(b, c, 8)), word(actRow + 8, r, addc(b, c, 8))};
          }
          for (int64_t ni = 0; ni < kWarpColFragments; ++ni) {
            Value r = add(b, addc(b, warpCol, ni * 8), group);
            bw[ks][ni] = {word(weightRow, r, c), word(weightRow, r, addc(b, c, 8))};
          }
        }
        SmallVector<Value> zero4(4, zeroF32);
        for (int64_t mi = 0; mi < kWarpRowFragments; ++mi)
          for (int64_t ni = 0; ni < kWarpColFragments; ++ni) {
            const size_t base = size_t((mi * kWarpColFragments + ni) * 4);
            SmallVector<Value> in =
                scaled ? zero4 : SmallVector<Value>(sums.begin() + base, sums.begin() + base + 4);
            SmallVector<Value> d = lanes.mma(b, loc, a[0][mi], bw[0][ni], in);
            d = lanes.mma(b, loc, a[1][mi], bw[1][ni], d);
            if (!scaled) {
              std::copy(d.begin(), d.end(), sums.begin() + base);
              continue;
            }
            // The 32-block's partial times its weight scale: a column's own
            // (FP4) or its 32 x 32 block's (FP8); into the accumulators in
            // block order.
            Value kb = kbs[size_t(g)];
            Value col = add(b, addc(b, j0, ni * 8), add(b, warpCol, quad2));
            Value scaleEven, scaleOdd;
            if (fp4) {
              Value sr = add(b, scaleRowBase, col);
              scaleEven = decodeUe8m0(b, loc, loadCode(b, loc, s, ValueRange{sr, kb}));
              scaleOdd = decodeUe8m0(b, loc, loadCode(b, loc, s, ValueRange{addc(b, sr, 1), kb}));
            } else {
              scaleEven = scaleOdd = decodeUe8m0(
                  b, loc,
                  loadCode(b, loc, s, ValueRange{add(b, scaleRowBase, div(b, col, kBlock)), kb}));
            }
            for (int64_t e = 0; e < 4; ++e) {
              Value scaledPartial =
                  arith::MulFOp::create(b, loc, d[size_t(e)], e % 2 ? scaleOdd : scaleEven);
              sums[base + size_t(e)] =
                  arith::AddFOp::create(b, loc, sums[base + size_t(e)], scaledPartial);
            }
          }
      }
      // Before the next stage's staging overwrites what other warps read.
      lanes.barrier(b, loc);
      sums.append(ahead.begin(), ahead.end());
      return sums;
    });
    // d's elements: (group, quad2 + 0/1), then 8 rows down.
    for (int64_t mi = 0; mi < kWarpRowFragments; ++mi)
      for (int64_t half = 0; half < 2; ++half) {
        TileRow at = rowOf(b, add(b, addc(b, warpRow, mi * 16 + half * 8), group));
        emitWhen(b, loc, at.valid, [&] {
          for (int64_t ni = 0; ni < kWarpColFragments; ++ni)
            for (int64_t e = 2 * half; e < 2 * half + 2; ++e) {
              Value col = add(b, add(b, j0, addc(b, warpCol, ni * 8 + e % 2)), quad2);
              Value v = kLoop.getResult(unsigned((mi * kWarpColFragments + ni) * 4 + e));
              memref::StoreOp::create(b, loc, fromF32(b, loc, v, bf16), y, ValueRange{at.yRow, col});
            }
        });
      }
  };

  if (!grouped) {
    emitTile(mul(b, lanes.rowTile(b, loc), tileRows), Value());
    func::ReturnOp::create(b, loc);
    return;
  }

  // The grouped form's scan: the block reads the slots' expert ids
  // `scanSlots` at a time (4 consecutive a thread), appends the slots of
  // its expert to the list (a shared counter taken atomically: the order in
  // the list is arbitrary, and no row's result depends on it), and runs a
  // tile whenever the list holds tileRows of them; the rest at the end.
  // Every slot whose id is no expert is a row of zeros, written by the
  // blocks of expert 0.
  Value ids = entry->getArgument(1);
  Value slots = memref::DimOp::create(b, loc, ids, idx(b, loc, 0));
  Value zeroIdx = idx(b, loc, 0);
  Value tileRowsIdx = idx(b, loc, tileRows);
  const int64_t scanSlots = shape.scanSlots();
  Value c0i32 = i32c(b, loc, 0);
  Value expertI32 = arith::IndexCastUIOp::create(b, loc, i32, expert);
  Value isFirstExpert = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, expert, zeroIdx);
  Value bf16Zero = fromF32(b, loc, zeroF32, bf16);
  emitWhen(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, zeroIdx),
           [&] { memref::StoreOp::create(b, loc, c0i32, listCount, ValueRange{zeroIdx}); });
  lanes.barrier(b, loc);
  auto countNow = [&]() -> Value {
    return arith::IndexCastUIOp::create(
        b, loc, b.getIndexType(), memref::LoadOp::create(b, loc, listCount, ValueRange{zeroIdx}));
  };
  auto scan = scf::ForOp::create(b, loc, zeroIdx, slots, idx(b, loc, scanSlots));
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(scan.getBody()->getTerminator());
    Value chunk = scan.getInductionVar();
    for (int64_t q = 0; q < 4; ++q) {
      Value slot = addc(b, add(b, chunk, mul(b, tid, 4)), q);
      emitWhen(b, loc, less(b, slot, slots), [&] {
        Value id = memref::LoadOp::create(b, loc, ids, ValueRange{slot});
        Value mine = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, id, expertI32);
        emitWhen(b, loc, mine, [&] {
          Value at = memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi, i32c(b, loc, 1),
                                                 listCount, ValueRange{zeroIdx});
          memref::StoreOp::create(b, loc, arith::IndexCastUIOp::create(b, loc, i32, slot), slotList,
                                  ValueRange{arith::IndexCastUIOp::create(b, loc, b.getIndexType(), at)});
        });
        Value noExpert = arith::OrIOp::create(
            b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, id, c0i32),
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, id,
                                  i32c(b, loc, int32_t(spec.experts))));
        emitWhen(b, loc, arith::AndIOp::create(b, loc, noExpert, isFirstExpert), [&] {
          for (int64_t c = 0; c < tileOutputs; ++c)
            memref::StoreOp::create(b, loc, bf16Zero, y, ValueRange{slot, addc(b, j0, c)});
        });
      });
    }
    lanes.barrier(b, loc);
    Value count = countNow();
    // Full tiles from the list's front: head = 0, tileRows, ... (uniform).
    auto full = scf::WhileOp::create(
        b, loc, TypeRange{b.getIndexType()}, ValueRange{zeroIdx},
        [&](OpBuilder &nb, Location loc, ValueRange args) {
          Value enough = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::ule,
                                               arith::AddIOp::create(nb, loc, args[0], tileRowsIdx), count);
          scf::ConditionOp::create(nb, loc, enough, args);
        },
        [&](OpBuilder &nb, Location loc, ValueRange args) {
          OpBuilder::InsertionGuard inner(b);
          b.restoreInsertionPoint(nb.saveInsertionPoint());
          emitTile(args[0], tileRowsIdx);
          scf::YieldOp::create(b, loc, ValueRange{add(b, args[0], tileRowsIdx)});
        });
    Value headEnd = full.getResult(0);
    // The rest (fewer than tileRows) to the front, once every thread is past
    // the last tile's reads of the list: [headEnd, count) and [0, left) do
    // not overlap (left < tileRows <= headEnd).
    emitWhen(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, headEnd, zeroIdx), [&] {
      lanes.barrier(b, loc);
      Value left = arith::SubIOp::create(b, loc, count, headEnd);
      emitWhen(b, loc, less(b, tid, left), [&] {
        Value v = memref::LoadOp::create(b, loc, slotList, ValueRange{add(b, headEnd, tid)});
        memref::StoreOp::create(b, loc, v, slotList, ValueRange{tid});
      });
      emitWhen(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, zeroIdx), [&] {
        memref::StoreOp::create(b, loc, arith::IndexCastUIOp::create(b, loc, i32, left), listCount,
                                ValueRange{zeroIdx});
      });
    });
    // Before the next chunk's appends (and the last count's read).
    lanes.barrier(b, loc);
  }
  Value rest = countNow();
  emitWhen(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, rest, zeroIdx),
           [&] { emitTile(zeroIdx, rest); });
  func::ReturnOp::create(b, loc);
}

} // namespace csa::codegen

//===- LinearKernels.cpp - Host kernels of csa.linear ---------------------===//
//
// Plain loop nests, correct first: one row at a time, one output at a time,
// K innermost, in exactly the reference's summation order.
//
// Later (performance, not numerics): tile rows x outputs (e.g. 4-8 rows x
// 16-64 outputs per tile, the weight tile decoded once into registers or a
// small scratch and reused across the rows), vectorize across *rows or
// outputs* rather than along K (each output's fp32 sum must keep its K order,
// so a lane per output/row with K as the sequential loop keeps the result
// bit-exact; a horizontal reduction along K would not), parallelize over N
// (scf.forall / OpenMP), and hoist the FP8/FP4 activation quantization of
// all rows out of the row loop. The decode tables stay as they are (a gather
// per element) or become pshufb-style lookups for E2M1.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/LinearKernels.h"

#include "runtime/numerics/Formats.h"
#include "runtime/numerics/Quantize.h"

#include "codegen/host/KernelBuilder.h"
#include "codegen/host/LinearKernelParts.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"

#include <cfloat>
#include <functional>
#include <optional>
#include <tuple>

using namespace mlir;
namespace nx = csa::numerics;

namespace csa::codegen {

using namespace linear;

namespace linear {


//===----------------------------------------------------------------------===//
// Small IR helpers
//===----------------------------------------------------------------------===//

Value idx(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

Value i32c(OpBuilder &b, Location loc, uint32_t v) {
  return arith::ConstantOp::create(b, loc,
                                   b.getI32IntegerAttr(static_cast<int32_t>(v)));
}

Value f32c(OpBuilder &b, Location loc, float v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}

/// Narrows an fp32 value to `type` (RNE for bf16; no-op for f32).
Value fromF32(OpBuilder &b, Location loc, Value v, Type type) {
  if (type.isF32())
    return v;
  return arith::TruncFOp::create(b, loc, type, v);
}

scf::ForOp forLoop(OpBuilder &b, Location loc, Value lb, Value ub,
                   ValueRange inits, const LoopBody &body) {
  return scf::ForOp::create(
      b, loc, lb, ub, idx(b, loc, 1), inits,
      [&](OpBuilder &nb, Location nl, Value iv, ValueRange args) {
        SmallVector<Value> next = body(nb, nl, iv, args);
        scf::YieldOp::create(nb, nl, next);
      });
}
scf::ForOp forLoop(OpBuilder &b, Location loc, int64_t lb, int64_t ub,
                   ValueRange inits, const LoopBody &body) {
  return forLoop(b, loc, idx(b, loc, lb), idx(b, loc, ub), inits, body);
}

/// A constant fp32 lookup table, created once per module (a builtin.module
/// or, for the GPU form, the gpu.module: any one-block symbol table).
Value tableRef(OpBuilder &b, Location loc, Operation *module, StringRef symbol,
               ArrayRef<float> values) {
  auto type = MemRefType::get({int64_t(values.size())}, b.getF32Type());
  if (!SymbolTable::lookupSymbolIn(module, symbol)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&module->getRegion(0).front());
    memref::GlobalOp::create(
        b, loc, symbol, b.getStringAttr("private"), type,
        DenseElementsAttr::get(
            RankedTensorType::get({int64_t(values.size())}, b.getF32Type()),
            values),
        /*constant=*/true, /*alignment=*/nullptr);
  }
  return memref::GetGlobalOp::create(b, loc, type, symbol);
}

Value e4m3Table(OpBuilder &b, Location loc, Operation *module) {
  return tableRef(b, loc, module, "csa_linear_e4m3_values",
                  ArrayRef<float>(nx::kE4M3Values.data(),
                                  nx::kE4M3Values.size()));
}

Value e2m1Table(OpBuilder &b, Location loc, Operation *module) {
  return tableRef(b, loc, module, "csa_linear_e2m1_values",
                  ArrayRef<float>(nx::kE2M1Values.data(),
                                  nx::kE2M1Values.size()));
}

} // namespace linear

// The building blocks LinearKernelParts.h declares (the GPU forms use them).

/// An i8 code byte widened to i32 (zero-extended: codes are unsigned).
Value loadCode(OpBuilder &b, Location loc, Value memref, ValueRange indices) {
  Value v = memref::LoadOp::create(b, loc, memref, indices);
  return arith::ExtUIOp::create(b, loc, b.getI32Type(), v);
}

std::pair<Value, Value> loadExpertId(OpBuilder &b, Location loc, Value ids, Value slot,
                                     int64_t experts) {
  Type i32 = b.getI32Type();
  Value id = memref::LoadOp::create(b, loc, ids, ValueRange{slot});
  // Unsigned: a negative id is above every expert.
  Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, id,
                                        arith::ConstantIntOp::create(b, loc, i32, experts));
  Value clamped = arith::SelectOp::create(b, loc, inRange, id,
                                          arith::ConstantIntOp::create(b, loc, i32, 0));
  return {arith::IndexCastUIOp::create(b, loc, b.getIndexType(), clamped), inRange};
}

namespace linear {
Value lookup(OpBuilder &b, Location loc, Value table, Value codeI32) {
  Value i = arith::IndexCastUIOp::create(b, loc, b.getIndexType(), codeI32);
  return memref::LoadOp::create(b, loc, table, ValueRange{i});
}
} // namespace linear

/// numerics::decodeUe8m0 of an i32 code in [0, 255]: 2^(e-127); e = 0 is
/// 2^-127 (fp32 subnormal 0x00400000), e = 255 is NaN.
Value decodeUe8m0(OpBuilder &b, Location loc, Value code) {
  Value bits = arith::ShLIOp::create(b, loc, code, i32c(b, loc, 23));
  Value isZero =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, code, i32c(b, loc, 0));
  bits = arith::SelectOp::create(b, loc, isZero, i32c(b, loc, 0x00400000u), bits);
  Value isNaN = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, code,
                                      i32c(b, loc, 0xFF));
  bits = arith::SelectOp::create(b, loc, isNaN, i32c(b, loc, 0x7FC00000u), bits);
  return arith::BitcastOp::create(b, loc, b.getF32Type(), bits);
}

/// kE4M3Values[code] of an i32 code in [0, 255] without a table: bias 7,
/// subnormals m * 2^-9, S.1111.111 NaN (0x7FC00000 with the code's sign).
Value decodeE4M3Arith(OpBuilder &b, Location loc, Value code) {
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  auto c = [&](uint32_t v) { return i32c(b, loc, v); };
  Value sign = arith::ShLIOp::create(b, loc, arith::AndIOp::create(b, loc, code, c(0x80)),
                                     c(24));
  Value e = arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, code, c(3)), c(0xF));
  Value m = arith::AndIOp::create(b, loc, code, c(7));
  Value normal = arith::OrIOp::create(
      b, loc, arith::ShLIOp::create(b, loc, arith::AddIOp::create(b, loc, e, c(120)), c(23)),
      arith::ShLIOp::create(b, loc, m, c(20)));
  Value subnormal = arith::BitcastOp::create(
      b, loc, i32,
      arith::MulFOp::create(b, loc, arith::UIToFPOp::create(b, loc, f32, m),
                            f32c(b, loc, nx::kE4M3MinSubnormal)));
  Value isSub = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, e, c(0));
  Value isNaN = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                      arith::AndIOp::create(b, loc, code, c(0x7F)), c(0x7F));
  Value bits = arith::SelectOp::create(b, loc, isSub, subnormal, normal);
  bits = arith::SelectOp::create(b, loc, isNaN, c(0x7FC00000u), bits);
  return arith::BitcastOp::create(b, loc, f32, arith::OrIOp::create(b, loc, bits, sign));
}

/// kE2M1Values[code] of an i32 code in [0, 15] without a table.
Value decodeE2M1Arith(OpBuilder &b, Location loc, Value code) {
  Type f32 = b.getF32Type();
  auto c = [&](uint32_t v) { return i32c(b, loc, v); };
  Value sign = arith::ShLIOp::create(b, loc, arith::AndIOp::create(b, loc, code, c(8)), c(28));
  Value e = arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, code, c(1)), c(3));
  Value m = arith::AndIOp::create(b, loc, code, c(1));
  // e > 0: 2^(e-1) (1 + m/2); e = 0: m * 0.5 (0x3F000000 or 0).
  Value normal = arith::OrIOp::create(
      b, loc, arith::ShLIOp::create(b, loc, arith::AddIOp::create(b, loc, e, c(126)), c(23)),
      arith::ShLIOp::create(b, loc, m, c(22)));
  Value subnormal = arith::MulIOp::create(b, loc, m, c(0x3F000000u));
  Value isSub = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, e, c(0));
  Value bits = arith::SelectOp::create(b, loc, isSub, subnormal, normal);
  return arith::BitcastOp::create(b, loc, f32, arith::OrIOp::create(b, loc, bits, sign));
}

/// sum over e in [0, k) of product(e), as reference::linear sums: an fp32
/// partial per 32-block (the last one shorter), the partials added in order.
Value blockedDot(OpBuilder &b, Location loc, int64_t k,
                 const std::function<Value(OpBuilder &, Location, Value)> &product) {
  const int64_t blocks = (k + kBlock - 1) / kBlock;
  return forLoop(b, loc, 0, blocks, ValueRange{f32c(b, loc, 0.f)},
                 [&](OpBuilder &b, Location loc, Value kb, ValueRange total) {
    Value base = arith::MulIOp::create(b, loc, kb, idx(b, loc, kBlock));
    Value end = arith::MinSIOp::create(
        b, loc, arith::AddIOp::create(b, loc, base, idx(b, loc, kBlock)),
        idx(b, loc, k));
    Value partial =
        forLoop(b, loc, base, end, ValueRange{f32c(b, loc, 0.f)},
                [&](OpBuilder &b, Location loc, Value e, ValueRange p) {
                  return SmallVector<Value>{
                      arith::AddFOp::create(b, loc, p[0], product(b, loc, e))};
                })
            .getResult(0);
    return SmallVector<Value>{arith::AddFOp::create(b, loc, total[0], partial)};
  })
      .getResult(0);
}

//===----------------------------------------------------------------------===//
// act_quant(x, 32, ue8m0), dequantized (numerics::actQuantInplace)
//===----------------------------------------------------------------------===//

/// One block of 32: `load(c)` gives element c as f32, `store(c, v)` receives
/// the dequantized element as bf16, i.e. roundToBf16(roundToE4M3(x / s) * s)
/// with s = 2^ceil(log2(max(amax, 1e-4) * fp32(1/448))).
///
/// Straight-line: each element is loaded once (the GPU forms' shared-row
/// prologue is on every block's critical path), and x / s is computed as
/// x * (1 / s). Both are the correctly rounded x * 2^-e, since s is a power
/// of two whose reciprocal is exact (codes 0..254 give 2^-127..2^127, both
/// ways; code 255, NaN, stays NaN): the same bits without a division.
void emitActQuantBlock(OpBuilder &b, Location loc,
                       const std::function<Value(OpBuilder &, Value)> &load,
                       const std::function<void(OpBuilder &, Value, Value)> &store,
                       const E4M3RoundPair &roundPair) {
  SmallVector<Value> values;
  for (int64_t c = 0; c < kBlock; ++c)
    values.push_back(load(b, idx(b, loc, c)));
  // blockAmax: max |x| in element order, NaN ignored (the comparison is
  // false), +-inf counted as FLT_MAX.
  Value amax = f32c(b, loc, 0.f);
  for (Value v : values)
    amax = emitAmaxStep(b, loc, amax, math::AbsFOp::create(b, loc, v));
  auto [scale, inverse] = emitActQuantScale(b, loc, amax);
  // The elements: x / s, E4M3 round trip, times s, stored as bf16.
  for (int64_t c = 0; c < kBlock; c += 2) {
    auto [d0, d1] = emitActQuantPair(b, loc, values[size_t(c)], values[size_t(c + 1)], scale,
                                     inverse, roundPair);
    store(b, idx(b, loc, c), d0);
    store(b, idx(b, loc, c + 1), d1);
  }
}

Value emitAmaxStep(OpBuilder &b, Location loc, Value amax, Value magnitude) {
  Value gt = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, magnitude, amax);
  return arith::SelectOp::create(b, loc, gt, magnitude, amax);
}

std::pair<Value, Value> emitActQuantScale(OpBuilder &b, Location loc, Value amax) {
  Type i32 = b.getI32Type();
  Value fltMax = f32c(b, loc, FLT_MAX);
  Value isInf =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, amax, fltMax);
  amax = arith::SelectOp::create(b, loc, isInf, fltMax, amax);
  // fp8Ue8m0ScaleCode: floor at 1e-4, times fp32(1/448), exponent-bit ceil.
  Value floor = f32c(b, loc, nx::kFp8AmaxFloor);
  Value below =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, amax, floor);
  amax = arith::SelectOp::create(b, loc, below, floor, amax);
  Value scaled = arith::MulFOp::create(b, loc, amax, f32c(b, loc, nx::kFp8MaxInv));
  Value bits = arith::BitcastOp::create(b, loc, i32, scaled);
  Value exponent = arith::AndIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, bits, i32c(b, loc, 23)),
      i32c(b, loc, 0xFF));
  Value inexact = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::ne,
      arith::AndIOp::create(b, loc, bits, i32c(b, loc, 0x7FFFFF)),
      i32c(b, loc, 0));
  Value code = arith::AddIOp::create(
      b, loc, exponent, arith::ExtUIOp::create(b, loc, i32, inexact));
  code = arith::MinUIOp::create(b, loc, code, i32c(b, loc, 0xFF));
  Value scale = decodeUe8m0(b, loc, code);
  // 1 / s = 2^(127 - (code - 127)): code 254 - code (255 stays NaN).
  Value isNaNCode =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, code, i32c(b, loc, 0xFF));
  Value inverse = decodeUe8m0(
      b, loc,
      arith::SelectOp::create(b, loc, isNaNCode, code,
                              arith::SubIOp::create(b, loc, i32c(b, loc, 254), code)));
  return {scale, inverse};
}

std::pair<Value, Value> emitActQuantPair(OpBuilder &b, Location loc, Value v0, Value v1,
                                         Value scale, Value inverse,
                                         const E4M3RoundPair &roundPair) {
  Value q0 = arith::MulFOp::create(b, loc, v0, inverse);
  Value q1 = arith::MulFOp::create(b, loc, v1, inverse);
  Value r0, r1;
  if (roundPair) {
    std::tie(r0, r1) = roundPair(b, loc, q0, q1);
  } else {
    r0 = emitRoundToE4M3(b, loc, q0);
    r1 = emitRoundToE4M3(b, loc, q1);
  }
  Type bf16 = b.getBF16Type();
  return {arith::TruncFOp::create(b, loc, bf16, arith::MulFOp::create(b, loc, r0, scale)),
          arith::TruncFOp::create(b, loc, bf16, arith::MulFOp::create(b, loc, r1, scale))};
}

namespace linear {

/// act_quant of 32-block `kb` of row `r` of x; `store(col, v)` receives each
/// dequantized bf16 element with its column.
void emitActQuantRowBlock(OpBuilder &b, Location loc, Value x, Value r, Value kb,
                          const std::function<void(OpBuilder &, Value, Value)> &store) {
  Value base = arith::MulIOp::create(b, loc, kb, idx(b, loc, kBlock));
  auto at = [&](OpBuilder &nb, Value c) -> Value {
    return arith::AddIOp::create(nb, loc, base, c);
  };
  emitActQuantBlock(
      b, loc,
      [&](OpBuilder &nb, Value c) { return loadF32(nb, loc, x, ValueRange{r, at(nb, c)}); },
      [&](OpBuilder &nb, Value c, Value v) { store(nb, at(nb, c), v); });
}

/// Weight element (j, e) of a bf16/f32 weight, or of an FP8-as-bf16 one (an
/// E4M3 code times its 32x32 block's UE8M0 scale: exact, equal to the bf16
/// weight convert.py makes).
Value denseWeightAt(OpBuilder &b, Location loc, Value w, Value s, Value table,
                    Value j, Value e) {
  if (!s)
    return loadF32(b, loc, w, ValueRange{j, e});
  Value block = idx(b, loc, kBlock);
  Value code = loadCode(b, loc, w, ValueRange{j, e});
  Value scale = decodeUe8m0(
      b, loc,
      loadCode(b, loc, s,
               ValueRange{arith::DivUIOp::create(b, loc, j, block),
                          arith::DivUIOp::create(b, loc, e, block)}));
  return arith::MulFOp::create(b, loc, lookup(b, loc, table, code), scale);
}
} // namespace linear

namespace {

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

func::FuncOp fail(ModuleOp module, const std::string &name,
                  const std::string &why) {
  emitError(module.getLoc()) << "linear kernel '" << name << "': " << why;
  return nullptr;
}

/// BF16 / F32 formats, optionally grouped: straight fp32 accumulation in K
/// order (reference `linear` with block = K, and the wo_a einsum).
func::FuncOp buildDenseLinear(ModuleOp module, const std::string &name,
                              const LinearKernelSpec &spec) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type();
  const int64_t k = spec.inFeatures, n = spec.outFeatures, g = spec.groups;
  const int64_t kg = k / g, ng = n / g;
  Type inType = spec.inputF32 ? f32 : bf16;
  Type wType = spec.weightF32 ? f32 : bf16;
  Type outType = spec.format == LinearFormat::F32 ? f32 : bf16;
  const bool fp8 = spec.format == LinearFormat::FP8AsBF16;
  auto xType = MemRefType::get({ShapedType::kDynamic, k}, inType);
  auto weightType = MemRefType::get({n, kg}, fp8 ? b.getI8Type() : wType);
  auto scaleType = MemRefType::get(
      {(n + kBlock - 1) / kBlock, (kg + kBlock - 1) / kBlock}, b.getI8Type());
  auto yType = MemRefType::get({ShapedType::kDynamic, n}, outType);
  SmallVector<Type> argTypes{xType, weightType};
  if (fp8)
    argTypes.push_back(scaleType);
  argTypes.push_back(yType);
  func::FuncOp fn = startKernel(b, module, name, argTypes);
  Value x = fn.getArgument(0), w = fn.getArgument(1),
        s = fp8 ? fn.getArgument(2) : Value(),
        y = fn.getArgument(fp8 ? 3 : 2);
  Value table = fp8 ? e4m3Table(b, loc, module) : Value();
  // The weight element (j, e): bf16 bits widened, or an E4M3 code times its
  // block's UE8M0 scale (exact, so equal to the bf16 weight convert.py makes).
  auto weightAt = [&](OpBuilder &b, Location loc, Value j, Value e) {
    return denseWeightAt(b, loc, w, s, table, j, e);
  };
  // Rows in tiles of T (#csa.row_tile): the tile's rows run against one
  // weight row while it is in cache; every output's sum still runs over K in
  // order, so the bits do not depend on T.
  const int64_t tile = std::max<int64_t>(1, spec.rowTile);
  Value rows = memref::DimOp::create(b, loc, x, idx(b, loc, 0));
  scf::ForOp::create(
      b, loc, idx(b, loc, 0), rows, idx(b, loc, tile), ValueRange{},
      [&](OpBuilder &b, Location loc, Value rb, ValueRange) {
    Value count = arith::MinSIOp::create(
        b, loc, idx(b, loc, tile), arith::SubIOp::create(b, loc, rows, rb));
    forLoop(b, loc, 0, g, ValueRange{},
            [&](OpBuilder &b, Location loc, Value gi, ValueRange) {
      Value inBase = arith::MulIOp::create(b, loc, gi, idx(b, loc, kg));
      Value outBase = arith::MulIOp::create(b, loc, gi, idx(b, loc, ng));
      forLoop(b, loc, 0, ng, ValueRange{},
              [&](OpBuilder &b, Location loc, Value jj, ValueRange) {
        Value j = arith::AddIOp::create(b, loc, outBase, jj);
        forLoop(b, loc, idx(b, loc, 0), count, ValueRange{},
                [&](OpBuilder &b, Location loc, Value t, ValueRange) {
          Value r = arith::AddIOp::create(b, loc, rb, t);
          Value acc = blockedDot(b, loc, kg, [&](OpBuilder &b, Location loc, Value e) {
            Value c = arith::AddIOp::create(b, loc, inBase, e);
            Value a = loadF32(b, loc, x, ValueRange{r, c});
            return arith::MulFOp::create(b, loc, a, weightAt(b, loc, j, e)).getResult();
          });
          memref::StoreOp::create(b, loc, fromF32(b, loc, acc, outType), y,
                                  ValueRange{r, j});
          return SmallVector<Value>{};
        });
        return SmallVector<Value>{};
      });
      return SmallVector<Value>{};
    });
    scf::YieldOp::create(b, loc);
  });
  func::ReturnOp::create(b, loc);
  return fn;
}

/// FP8 / FP4 formats: act_quant per 32 into an fp32 row scratch, then per
/// output an fp32 partial per 32-block of K added in order.
func::FuncOp buildQuantizedLinear(ModuleOp module, const std::string &name,
                                  const LinearKernelSpec &spec) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type(), i8 = b.getI8Type();
  const bool fp8 = spec.format == LinearFormat::FP8Block32;
  const int64_t k = spec.inFeatures, n = spec.outFeatures;
  const int64_t kBlocks = k / kBlock;
  Type inType = spec.inputF32 ? f32 : bf16;
  auto xType = MemRefType::get({ShapedType::kDynamic, k}, inType);
  // Grouped over experts: E matrices stacked along N, an expert id a row.
  const bool grouped = spec.experts > 0;
  const int64_t experts = std::max<int64_t>(spec.experts, 1);
  const int64_t scaleRows = fp8 ? (n + kBlock - 1) / kBlock : n;
  auto weightType = MemRefType::get({experts * n, fp8 ? k : k / 2}, i8);
  auto scaleType = MemRefType::get({experts * scaleRows, kBlocks}, i8);
  auto yType = MemRefType::get({ShapedType::kDynamic, n}, bf16);
  SmallVector<Type> argTypes{xType, weightType, scaleType, yType};
  if (grouped)
    argTypes.insert(argTypes.begin() + 1,
                    MemRefType::get({ShapedType::kDynamic}, b.getI32Type()));
  func::FuncOp fn = startKernel(b, module, name, argTypes);
  const unsigned first = grouped ? 2 : 1;
  Value x = fn.getArgument(0), ids = grouped ? fn.getArgument(1) : Value(),
        w = fn.getArgument(first), s = fn.getArgument(first + 1),
        y = fn.getArgument(first + 2);
  Value table = fp8 ? e4m3Table(b, loc, module) : e2m1Table(b, loc, module);
  // Rows in tiles of T (#csa.row_tile): a tile's activations are quantized
  // once, and each 32-block of a weight row is decoded once per tile and
  // applied to the tile's rows. Every output's fp32 sum keeps the order of
  // the untiled loop (blocks in K order, elements in block order), so the
  // bits do not depend on T.
  const int64_t tile = grouped ? 1 : std::max<int64_t>(1, spec.rowTile);
  Value xq = memref::AllocOp::create(b, loc, MemRefType::get({tile, k}, f32));
  Value wb = memref::AllocOp::create(b, loc, MemRefType::get({kBlock}, f32));
  Value acc = memref::AllocOp::create(b, loc, MemRefType::get({tile}, f32));
  Value rows = memref::DimOp::create(b, loc, grouped ? ids : x, idx(b, loc, 0));
  Value block = idx(b, loc, kBlock);
  scf::ForOp::create(
      b, loc, idx(b, loc, 0), rows, idx(b, loc, tile), ValueRange{},
      [&](OpBuilder &b, Location loc, Value rb, ValueRange) {
    Value count = arith::MinSIOp::create(
        b, loc, idx(b, loc, tile), arith::SubIOp::create(b, loc, rows, rb));
    // Grouped (one row a tile): the slot's expert, clamped so that every
    // load stays in the weight; an id outside [0, E) stores zeros.
    Value valid, weightBase, scaleBase;
    if (grouped) {
      auto [e, inRange] = loadExpertId(b, loc, ids, rb, spec.experts);
      valid = inRange;
      weightBase = arith::MulIOp::create(b, loc, e, idx(b, loc, n));
      scaleBase = arith::MulIOp::create(b, loc, e, idx(b, loc, scaleRows));
    }
    auto activationRow = [&](OpBuilder &b, Value r) -> Value {
      return grouped ? arith::DivUIOp::create(b, loc, r, idx(b, loc, spec.slotsPerRow)).getResult()
                     : r;
    };
    // act_quant(x[r], 32, ue8m0) for the tile's rows, dequantized: exact in
    // fp32.
    forLoop(b, loc, idx(b, loc, 0), count, ValueRange{},
            [&](OpBuilder &b, Location loc, Value t, ValueRange) {
      Value r = arith::AddIOp::create(b, loc, rb, t);
      forLoop(b, loc, 0, kBlocks, ValueRange{},
              [&](OpBuilder &b, Location loc, Value kb, ValueRange) {
        emitActQuantRowBlock(b, loc, x, activationRow(b, r), kb, [&](OpBuilder &nb, Value col, Value v) {
          memref::StoreOp::create(nb, loc, arith::ExtFOp::create(nb, loc, f32, v),
                                  xq, ValueRange{t, col});
        });
        return SmallVector<Value>{};
      });
      return SmallVector<Value>{};
    });
    forLoop(b, loc, 0, n, ValueRange{},
            [&](OpBuilder &b, Location loc, Value j, ValueRange) {
      Value scaleRow =
          fp8 ? arith::DivUIOp::create(b, loc, j, block).getResult() : j;
      Value weightRow = j;
      if (grouped) {
        scaleRow = arith::AddIOp::create(b, loc, scaleBase, scaleRow);
        weightRow = arith::AddIOp::create(b, loc, weightBase, j);
      }
      forLoop(b, loc, idx(b, loc, 0), count, ValueRange{},
              [&](OpBuilder &b, Location loc, Value t, ValueRange) {
        memref::StoreOp::create(b, loc, f32c(b, loc, 0.f), acc, ValueRange{t});
        return SmallVector<Value>{};
      });
      forLoop(b, loc, 0, kBlocks, ValueRange{},
              [&](OpBuilder &b, Location loc, Value kb, ValueRange) {
        Value ws = decodeUe8m0(b, loc, loadCode(b, loc, s, ValueRange{scaleRow, kb}));
        Value base = arith::MulIOp::create(b, loc, kb, block);
        // wb[c] = decode(code of element base + c) * scale.
        if (fp8) {
          forLoop(b, loc, 0, kBlock, ValueRange{},
                  [&](OpBuilder &b, Location loc, Value c, ValueRange) {
            Value col = arith::AddIOp::create(b, loc, base, c);
            Value code = loadCode(b, loc, w, ValueRange{weightRow, col});
            memref::StoreOp::create(
                b, loc, arith::MulFOp::create(b, loc, lookup(b, loc, table, code), ws),
                wb, ValueRange{c});
            return SmallVector<Value>{};
          });
        } else {
          // One byte holds elements 2i (low nibble) and 2i + 1 (high).
          Value byteBase = arith::MulIOp::create(b, loc, kb, idx(b, loc, kBlock / 2));
          forLoop(b, loc, 0, kBlock / 2, ValueRange{},
                  [&](OpBuilder &b, Location loc, Value i, ValueRange) {
            Value byte = loadCode(
                b, loc, w, ValueRange{weightRow, arith::AddIOp::create(b, loc, byteBase, i)});
            Value lo = arith::AndIOp::create(b, loc, byte, i32c(b, loc, 0xF));
            Value hi = arith::ShRUIOp::create(b, loc, byte, i32c(b, loc, 4));
            Value even = arith::MulIOp::create(b, loc, i, idx(b, loc, 2));
            Value odd = arith::AddIOp::create(b, loc, even, idx(b, loc, 1));
            for (auto [nibble, at] : {std::pair{lo, even}, std::pair{hi, odd}})
              memref::StoreOp::create(
                  b, loc,
                  arith::MulFOp::create(b, loc, lookup(b, loc, table, nibble), ws),
                  wb, ValueRange{at});
            return SmallVector<Value>{};
          });
        }
        // partial_t = sum_c a[t][base + c] * wb[c]; acc[t] += partial_t.
        forLoop(b, loc, idx(b, loc, 0), count, ValueRange{},
                [&](OpBuilder &b, Location loc, Value t, ValueRange) {
          Value partial =
              forLoop(b, loc, 0, kBlock, ValueRange{f32c(b, loc, 0.f)},
                      [&](OpBuilder &b, Location loc, Value c, ValueRange p) {
                        Value col = arith::AddIOp::create(b, loc, base, c);
                        Value a = memref::LoadOp::create(b, loc, xq, ValueRange{t, col});
                        Value wv = memref::LoadOp::create(b, loc, wb, ValueRange{c});
                        Value prod = arith::MulFOp::create(b, loc, a, wv);
                        return SmallVector<Value>{
                            arith::AddFOp::create(b, loc, p[0], prod)};
                      })
                  .getResult(0);
          Value total = memref::LoadOp::create(b, loc, acc, ValueRange{t});
          memref::StoreOp::create(b, loc, arith::AddFOp::create(b, loc, total, partial),
                                  acc, ValueRange{t});
          return SmallVector<Value>{};
        });
        return SmallVector<Value>{};
      });
      forLoop(b, loc, idx(b, loc, 0), count, ValueRange{},
              [&](OpBuilder &b, Location loc, Value t, ValueRange) {
        Value r = arith::AddIOp::create(b, loc, rb, t);
        Value total = memref::LoadOp::create(b, loc, acc, ValueRange{t});
        if (grouped)
          total = arith::SelectOp::create(b, loc, valid, total, f32c(b, loc, 0.f));
        memref::StoreOp::create(b, loc, arith::TruncFOp::create(b, loc, bf16, total),
                                y, ValueRange{r, j});
        return SmallVector<Value>{};
      });
      return SmallVector<Value>{};
    });
    scf::YieldOp::create(b, loc);
  });
  memref::DeallocOp::create(b, loc, wb);
  memref::DeallocOp::create(b, loc, acc);
  memref::DeallocOp::create(b, loc, xq);
  func::ReturnOp::create(b, loc);
  return fn;
}

} // namespace

//===----------------------------------------------------------------------===//
// E4M3 rounding (numerics::roundToE4M3) in integer arithmetic
//===----------------------------------------------------------------------===//

Value emitRoundToE4M3(OpBuilder &b, Location loc, Value x) {
  using P = arith::CmpIPredicate;
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  auto c = [&](uint32_t v) { return i32c(b, loc, v); };
  Value bits = arith::BitcastOp::create(b, loc, i32, x);
  Value absBits = arith::AndIOp::create(b, loc, bits, c(0x7FFFFFFFu));
  Value sign = arith::AndIOp::create(b, loc, bits, c(0x80000000u));
  // Significand with its implicit bit; fp32 subnormals have exponent field 1.
  Value biased = arith::ShRUIOp::create(b, loc, absBits, c(23));
  Value fraction = arith::AndIOp::create(b, loc, absBits, c(0x7FFFFF));
  Value isSub = arith::CmpIOp::create(b, loc, P::eq, biased, c(0));
  Value significand = arith::SelectOp::create(
      b, loc, isSub, fraction, arith::OrIOp::create(b, loc, fraction, c(0x800000)));
  biased = arith::MaxSIOp::create(b, loc, biased, c(1));
  // The E4M3 quantum is 2^(max(e, -6) - 3): below 2^-6 (biased 121) the
  // grid is the subnormal one, 2^-9. `extra` is how far below the normal
  // range e lies; the shift drops the bits below the quantum. Shifts above
  // 24 give 0 like 25 does (the significand is below 2^24 = half of 2^25),
  // so clamping keeps the shift amounts in range.
  Value extra = arith::MaxSIOp::create(
      b, loc, arith::SubIOp::create(b, loc, c(121), biased), c(0));
  Value shift = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, extra, c(20)), c(25));
  Value q = arith::ShRUIOp::create(b, loc, significand, shift);
  Value one = c(1);
  Value rem = arith::AndIOp::create(
      b, loc, significand,
      arith::SubIOp::create(b, loc, arith::ShLIOp::create(b, loc, one, shift), one));
  Value half = arith::ShLIOp::create(b, loc, one,
                                     arith::SubIOp::create(b, loc, shift, one));
  // Round to nearest, ties to even.
  Value above = arith::CmpIOp::create(b, loc, P::ugt, rem, half);
  Value tie = arith::AndIOp::create(
      b, loc, arith::CmpIOp::create(b, loc, P::eq, rem, half),
      arith::CmpIOp::create(b, loc, P::ne, arith::AndIOp::create(b, loc, q, one),
                            c(0)));
  Value up = arith::OrIOp::create(b, loc, above, tie);
  q = arith::AddIOp::create(b, loc, q, arith::ExtUIOp::create(b, loc, i32, up));
  // value = q * 2^(max(e, -6) - 3): q <= 16 and the power of two is a normal
  // fp32, so the product is exact (a carry into the next binade included).
  Value quantum = arith::BitcastOp::create(
      b, loc, f32,
      arith::ShLIOp::create(
          b, loc,
          arith::SubIOp::create(b, loc,
                                arith::AddIOp::create(b, loc, biased, extra), c(3)),
          c(23)));
  Value magnitude = arith::MulFOp::create(
      b, loc, arith::UIToFPOp::create(b, loc, f32, q), quantum);
  Value magBits = arith::BitcastOp::create(b, loc, i32, magnitude);
  // |x| > 448 (infinity included) saturates to 448.
  const uint32_t maxBits = nx::floatBits(nx::kE4M3Max);
  Value saturate = arith::CmpIOp::create(b, loc, P::ugt, absBits, c(maxBits));
  magBits = arith::SelectOp::create(b, loc, saturate, c(maxBits), magBits);
  Value result = arith::OrIOp::create(b, loc, magBits, sign);
  // NaN encodes to 0x7F, which decodes to +NaN.
  Value isNaN = arith::CmpIOp::create(b, loc, P::ugt, absBits, c(0x7F800000u));
  result = arith::SelectOp::create(b, loc, isNaN, c(0x7FC00000u), result);
  return arith::BitcastOp::create(b, loc, f32, result);
}

namespace {
const char *formatName(LinearFormat f) {
  switch (f) {
  case LinearFormat::BF16: return "bf16";
  case LinearFormat::F32: return "f32";
  case LinearFormat::FP8Block32: return "fp8_block32";
  case LinearFormat::FP4E2M1: return "fp4_e2m1";
  case LinearFormat::FP8AsBF16: return "fp8_as_bf16";
  }
  return "";
}
} // namespace

static func::FuncOp buildLinearKernelBody(ModuleOp module,
                                          const std::string &name,
                                          const LinearKernelSpec &spec);

func::FuncOp buildLinearKernel(ModuleOp module, const std::string &name,
                               const LinearKernelSpec &spec) {
  func::FuncOp fn = buildLinearKernelBody(module, name, spec);
  if (fn) {
    Builder b(module.getContext());
    fn->setAttr(kLinearSpecAttr,
                b.getDictionaryAttr({
                    b.getNamedAttr("format", b.getStringAttr(formatName(spec.format))),
                    b.getNamedAttr("in", b.getI64IntegerAttr(spec.inFeatures)),
                    b.getNamedAttr("out", b.getI64IntegerAttr(spec.outFeatures)),
                    b.getNamedAttr("groups", b.getI64IntegerAttr(spec.groups)),
                    b.getNamedAttr("input_f32", b.getBoolAttr(spec.inputF32)),
                    b.getNamedAttr("weight_f32", b.getBoolAttr(spec.weightF32)),
                    b.getNamedAttr("experts", b.getI64IntegerAttr(spec.experts)),
                    b.getNamedAttr("slots_per_row", b.getI64IntegerAttr(spec.slotsPerRow)),
                }));
  }
  return fn;
}

static func::FuncOp buildLinearKernelBody(ModuleOp module,
                                          const std::string &name,
                                          const LinearKernelSpec &spec) {
  const int64_t k = spec.inFeatures, n = spec.outFeatures, g = spec.groups;
  if (k <= 0 || n <= 0)
    return fail(module, name, "in/out features must be positive");
  if (spec.experts < 0 || spec.slotsPerRow < 1)
    return fail(module, name, "experts must be >= 0 and slots per row >= 1");
  if (spec.experts > 0 && spec.format != LinearFormat::FP8Block32 &&
      spec.format != LinearFormat::FP4E2M1)
    return fail(module, name, "only FP8/FP4 linears are grouped over experts");
  switch (spec.format) {
  case LinearFormat::BF16:
  case LinearFormat::F32:
  case LinearFormat::FP8AsBF16:
    if (g <= 0 || k % g != 0 || n % g != 0)
      return fail(module, name, "groups must divide in and out features");
    return buildDenseLinear(module, name, spec);
  case LinearFormat::FP8Block32:
  case LinearFormat::FP4E2M1:
    if (g != 1)
      return fail(module, name, "groups are only supported for bf16/f32 weights");
    if (spec.weightF32)
      return fail(module, name, "weightF32 applies to bf16/f32 weights only");
    if (k % kBlock != 0)
      return fail(module, name,
                  "FP8/FP4 need in_features % 32 == 0 (act_quant blocks)");
    return buildQuantizedLinear(module, name, spec);
  }
  return fail(module, name, "unknown weight format");
}


std::optional<LinearKernelSpec> linearSpecOf(func::FuncOp fn) {
  auto dict = fn->getAttrOfType<DictionaryAttr>(kLinearSpecAttr);
  if (!dict)
    return std::nullopt;
  auto integer = [&](StringRef key) -> std::optional<int64_t> {
    if (auto a = dict.getAs<IntegerAttr>(key))
      return a.getInt();
    return std::nullopt;
  };
  auto format = dict.getAs<StringAttr>("format");
  auto in = integer("in"), out = integer("out"), groups = integer("groups");
  auto inputF32 = dict.getAs<BoolAttr>("input_f32");
  auto weightF32 = dict.getAs<BoolAttr>("weight_f32");
  if (!format || !in || !out || !groups || !inputF32 || !weightF32)
    return std::nullopt;
  LinearKernelSpec spec;
  bool known = false;
  for (LinearFormat f : {LinearFormat::BF16, LinearFormat::F32,
                         LinearFormat::FP8Block32, LinearFormat::FP4E2M1,
                         LinearFormat::FP8AsBF16})
    if (format.getValue() == formatName(f)) {
      spec.format = f;
      known = true;
    }
  if (!known)
    return std::nullopt;
  spec.inFeatures = *in;
  spec.outFeatures = *out;
  spec.groups = *groups;
  spec.inputF32 = inputF32.getValue();
  spec.weightF32 = weightF32.getValue();
  spec.experts = integer("experts").value_or(0);
  spec.slotsPerRow = integer("slots_per_row").value_or(1);
  return spec;
}

bool linearNeedsSharedRow(const LinearKernelSpec &spec) {
  return spec.format == LinearFormat::FP8Block32 ||
         spec.format == LinearFormat::FP4E2M1;
}

func::FuncOp buildFp8ActQuantKernel(ModuleOp module, const std::string &name,
                                    int64_t k) {
  if (k <= 0 || k % kBlock != 0)
    return fail(module, name, "act_quant needs a positive multiple of 32");
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  auto rowsType = MemRefType::get({ShapedType::kDynamic, k}, b.getBF16Type());
  func::FuncOp fn = startKernel(b, module, name, {rowsType, rowsType});
  Value x = fn.getArgument(0), y = fn.getArgument(1);
  Value rows = memref::DimOp::create(b, loc, x, idx(b, loc, 0));
  Value block = idx(b, loc, kBlock);
  forLoop(b, loc, idx(b, loc, 0), rows, ValueRange{},
          [&](OpBuilder &b, Location loc, Value r, ValueRange) {
    forLoop(b, loc, 0, k / kBlock, ValueRange{},
            [&](OpBuilder &b, Location loc, Value kb, ValueRange) {
      Value base = arith::MulIOp::create(b, loc, kb, block);
      auto at = [&](OpBuilder &nb, Value c) -> Value {
        return arith::AddIOp::create(nb, loc, base, c);
      };
      emitActQuantBlock(
          b, loc,
          [&](OpBuilder &nb, Value c) {
            return loadF32(nb, loc, x, ValueRange{r, at(nb, c)});
          },
          [&](OpBuilder &nb, Value c, Value v) {
            memref::StoreOp::create(nb, loc, v, y, ValueRange{r, at(nb, c)});
          });
      return SmallVector<Value>{};
    });
    return SmallVector<Value>{};
  });
  func::ReturnOp::create(b, loc);
  return fn;
}

func::FuncOp buildCodeDecodeKernel(ModuleOp module, const std::string &name,
                                   bool fp4) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  auto codesType = MemRefType::get({ShapedType::kDynamic}, b.getI8Type());
  auto valuesType = MemRefType::get({ShapedType::kDynamic}, b.getF32Type());
  func::FuncOp fn = startKernel(b, module, name, {codesType, valuesType});
  Value codes = fn.getArgument(0), values = fn.getArgument(1);
  Value size = memref::DimOp::create(b, loc, codes, idx(b, loc, 0));
  forLoop(b, loc, idx(b, loc, 0), size, ValueRange{},
          [&](OpBuilder &b, Location loc, Value i, ValueRange) {
            Value code = loadCode(b, loc, codes, ValueRange{i});
            Value v = fp4 ? decodeE2M1Arith(
                                b, loc, arith::AndIOp::create(b, loc, code, i32c(b, loc, 0xF)))
                          : decodeE4M3Arith(b, loc, code);
            memref::StoreOp::create(b, loc, v, values, ValueRange{i});
            return SmallVector<Value>{};
          });
  func::ReturnOp::create(b, loc);
  return fn;
}

func::FuncOp buildE4M3RoundKernel(ModuleOp module, const std::string &name) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  auto type = MemRefType::get({ShapedType::kDynamic}, b.getF32Type());
  func::FuncOp fn = startKernel(b, module, name, {type, type});
  Value x = fn.getArgument(0), y = fn.getArgument(1);
  Value size = memref::DimOp::create(b, loc, x, idx(b, loc, 0));
  forLoop(b, loc, idx(b, loc, 0), size, ValueRange{},
          [&](OpBuilder &b, Location loc, Value i, ValueRange) {
            Value v = memref::LoadOp::create(b, loc, x, ValueRange{i});
            memref::StoreOp::create(b, loc, emitRoundToE4M3(b, loc, v), y,
                                    ValueRange{i});
            return SmallVector<Value>{};
          });
  func::ReturnOp::create(b, loc);
  return fn;
}

} // namespace csa::codegen

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

namespace {

constexpr int64_t kBlock = 32; // act_quant block and weight scale block

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

/// A loop [lb, ub) step 1 whose body returns the next iteration values.
using LoopBody =
    std::function<SmallVector<Value>(OpBuilder &, Location, Value, ValueRange)>;
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

} // namespace

// The building blocks LinearKernelParts.h declares (the GPU forms use them).

/// An i8 code byte widened to i32 (zero-extended: codes are unsigned).
Value loadCode(OpBuilder &b, Location loc, Value memref, ValueRange indices) {
  Value v = memref::LoadOp::create(b, loc, memref, indices);
  return arith::ExtUIOp::create(b, loc, b.getI32Type(), v);
}

namespace {
Value lookup(OpBuilder &b, Location loc, Value table, Value codeI32) {
  Value i = arith::IndexCastUIOp::create(b, loc, b.getIndexType(), codeI32);
  return memref::LoadOp::create(b, loc, table, ValueRange{i});
}
} // namespace

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
                       const std::function<void(OpBuilder &, Value, Value)> &store) {
  Type i32 = b.getI32Type(), bf16 = b.getBF16Type();
  SmallVector<Value> values;
  for (int64_t c = 0; c < kBlock; ++c)
    values.push_back(load(b, idx(b, loc, c)));
  // blockAmax: max |x| in element order, NaN ignored (the comparison is
  // false), +-inf counted as FLT_MAX.
  Value amax = f32c(b, loc, 0.f);
  for (Value v : values) {
    Value a = math::AbsFOp::create(b, loc, v);
    Value gt = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, a, amax);
    amax = arith::SelectOp::create(b, loc, gt, a, amax);
  }
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
  // The elements: x / s, E4M3 round trip, times s, stored as bf16.
  for (int64_t c = 0; c < kBlock; ++c) {
    Value q = arith::MulFOp::create(b, loc, values[size_t(c)], inverse);
    Value r = emitRoundToE4M3(b, loc, q);
    Value d = arith::MulFOp::create(b, loc, r, scale);
    store(b, idx(b, loc, c), arith::TruncFOp::create(b, loc, bf16, d));
  }
}

namespace {

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
  // Rows in tiles of T (csa.tile rows): the tile's rows run against one
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
  auto weightType = MemRefType::get({n, fp8 ? k : k / 2}, i8);
  auto scaleType = MemRefType::get(
      {fp8 ? (n + kBlock - 1) / kBlock : n, kBlocks}, i8);
  auto yType = MemRefType::get({ShapedType::kDynamic, n}, bf16);
  func::FuncOp fn =
      startKernel(b, module, name, {xType, weightType, scaleType, yType});
  Value x = fn.getArgument(0), w = fn.getArgument(1), s = fn.getArgument(2),
        y = fn.getArgument(3);
  Value table = fp8 ? e4m3Table(b, loc, module) : e2m1Table(b, loc, module);
  // Rows in tiles of T (csa.tile rows): a tile's activations are quantized
  // once, and each 32-block of a weight row is decoded once per tile and
  // applied to the tile's rows. Every output's fp32 sum keeps the order of
  // the untiled loop (blocks in K order, elements in block order), so the
  // bits do not depend on T.
  const int64_t tile = std::max<int64_t>(1, spec.rowTile);
  Value xq = memref::AllocOp::create(b, loc, MemRefType::get({tile, k}, f32));
  Value wb = memref::AllocOp::create(b, loc, MemRefType::get({kBlock}, f32));
  Value acc = memref::AllocOp::create(b, loc, MemRefType::get({tile}, f32));
  Value rows = memref::DimOp::create(b, loc, x, idx(b, loc, 0));
  Value block = idx(b, loc, kBlock);
  scf::ForOp::create(
      b, loc, idx(b, loc, 0), rows, idx(b, loc, tile), ValueRange{},
      [&](OpBuilder &b, Location loc, Value rb, ValueRange) {
    Value count = arith::MinSIOp::create(
        b, loc, idx(b, loc, tile), arith::SubIOp::create(b, loc, rows, rb));
    // act_quant(x[r], 32, ue8m0) for the tile's rows, dequantized: exact in
    // fp32.
    forLoop(b, loc, idx(b, loc, 0), count, ValueRange{},
            [&](OpBuilder &b, Location loc, Value t, ValueRange) {
      Value r = arith::AddIOp::create(b, loc, rb, t);
      forLoop(b, loc, 0, kBlocks, ValueRange{},
              [&](OpBuilder &b, Location loc, Value kb, ValueRange) {
        emitActQuantRowBlock(b, loc, x, r, kb, [&](OpBuilder &nb, Value col, Value v) {
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
            Value code = loadCode(b, loc, w, ValueRange{j, col});
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
                b, loc, w, ValueRange{j, arith::AddIOp::create(b, loc, byteBase, i)});
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
  return spec;
}

bool linearNeedsSharedRow(const LinearKernelSpec &spec) {
  return spec.format == LinearFormat::FP8Block32 ||
         spec.format == LinearFormat::FP4E2M1;
}

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

namespace {

/// The 16-byte words holding 32-block `kb` of weight row `j` (K channels):
/// one (FP4) or two (FP8) 16-byte loads from `base`.
SmallVector<Value> loadBlockWords(OpBuilder &b, Location loc, Value base, Value j,
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

/// The 32 codes of a block's words (loadBlockWords) decoded to f32 without
/// a table.
SmallVector<Value> decodeBlockWords(OpBuilder &b, Location loc, ValueRange vectors,
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

/// The 32 codes (i32) of 32-block `kb` of weight row `j` (K channels), read
/// with one (FP4) or two (FP8) 16-byte loads from `base` and decoded to f32
/// without a table.
SmallVector<Value> loadBlockValues(OpBuilder &b, Location loc, Value base, Value j,
                                   Value kb, int64_t k, bool fp8) {
  return decodeBlockWords(b, loc, loadBlockWords(b, loc, base, j, kb, k, fp8), fp8);
}
} // namespace

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

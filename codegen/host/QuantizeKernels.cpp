//===- QuantizeKernels.cpp - Cache-row quantizers generated as IR ---------===//
//
// The codecs mirror runtime/numerics/Formats.cpp operation by operation, on
// the fp32 bit pattern with i32 arithmetic (no dependence on the rounding
// mode or flush-to-zero); the only floating-point operations are the ones
// numerics performs (|x| compare, amax floor, amax / 6 or amax * fp32(1/n),
// x / s, code value * s).
//
//===----------------------------------------------------------------------===//
#include "codegen/host/QuantizeKernels.h"

#include "codegen/host/KernelBuilder.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"

#include <limits>

using namespace mlir;
namespace nx = csa::numerics;

namespace csa::codegen {

namespace {

/// Terse i32 / f32 arithmetic at one location.
struct Emitter {
  OpBuilder &b;
  Location loc;

  Type i32() { return b.getI32Type(); }
  Type f32() { return b.getF32Type(); }
  Value c32(int64_t v) { return arith::ConstantIntOp::create(b, loc, i32(), v); }
  Value f(float v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }

  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubIOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }
  Value band(Value x, Value y) { return arith::AndIOp::create(b, loc, x, y); }
  Value bor(Value x, Value y) { return arith::OrIOp::create(b, loc, x, y); }
  Value shl(Value x, Value y) { return arith::ShLIOp::create(b, loc, x, y); }
  Value lshr(Value x, Value y) { return arith::ShRUIOp::create(b, loc, x, y); }
  Value cmp(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, loc, p, x, y);
  }
  Value fcmp(arith::CmpFPredicate p, Value x, Value y) {
    return arith::CmpFOp::create(b, loc, p, x, y);
  }
  Value select(Value c, Value x, Value y) {
    return arith::SelectOp::create(b, loc, c, x, y);
  }
  Value bits(Value x) { return arith::BitcastOp::create(b, loc, i32(), x); }
  Value fromBits(Value x) { return arith::BitcastOp::create(b, loc, f32(), x); }

  //===--------------------------------------------------------------------===//
  // Codecs (Formats.cpp)
  //===--------------------------------------------------------------------===//

  /// numerics' roundMagnitude: |x| (finite, as i32 bits) rounded RNE to a
  /// format with `manBits` mantissa bits and bias `bias`, gradual underflow,
  /// no upper limit; returns exponent field << manBits | mantissa field.
  Value roundMagnitude(Value absBits, int manBits, int bias) {
    Value biased = lshr(absBits, c32(23));
    Value sig = band(absBits, c32(0x7FFFFF));
    Value isSub = cmp(arith::CmpIPredicate::eq, biased, c32(0));
    biased = select(isSub, c32(1), biased);
    sig = select(isSub, sig, bor(sig, c32(0x800000)));
    Value exponent = sub(biased, c32(127));
    Value target = arith::MaxSIOp::create(b, loc, exponent, c32(1 - bias));
    Value shift = add(c32(23 - manBits), sub(target, exponent));
    // numerics: shift > 24 gives q = 0. Clamping to 25 gives the same (sig <
    // 2^24 = half, nothing kept, no round-up) and keeps the shift below 32.
    // Finite inputs are normal or subnormal, so shift >= 23 - manBits >= 1.
    shift = arith::MinSIOp::create(b, loc, shift, c32(25));
    Value q = lshr(sig, shift);
    Value rem = band(sig, sub(shl(c32(1), shift), c32(1)));
    Value half = shl(c32(1), sub(shift, c32(1)));
    Value odd = cmp(arith::CmpIPredicate::ne, band(q, c32(1)), c32(0));
    Value up = arith::OrIOp::create(
        b, loc, cmp(arith::CmpIPredicate::ugt, rem, half),
        arith::AndIOp::create(b, loc,
                              cmp(arith::CmpIPredicate::eq, rem, half), odd));
    q = add(q, arith::ExtUIOp::create(b, loc, i32(), up));
    return add(shl(add(target, c32(bias - 1)), c32(manBits)), q);
  }

  /// numerics::encodeE4M3 as an i32 in [0, 255].
  Value encodeE4M3(Value x) {
    Value xb = bits(x);
    Value abs = band(xb, c32(0x7FFFFFFF));
    Value isNaN = cmp(arith::CmpIPredicate::ugt, abs, c32(0x7F800000));
    Value sign = band(lshr(xb, c32(24)), c32(0x80));
    Value saturate = cmp(arith::CmpIPredicate::ugt, abs,
                         c32(nx::floatBits(nx::kE4M3Max)));
    Value mag = select(saturate, c32(0x7E), roundMagnitude(abs, 3, 7));
    return select(isNaN, c32(nx::kE4M3NaN), bor(sign, mag));
  }

  /// numerics::encodeE2M1 as an i32 in [0, 15].
  Value encodeE2M1(Value x) {
    Value xb = bits(x);
    Value abs = band(xb, c32(0x7FFFFFFF));
    Value isNaN = cmp(arith::CmpIPredicate::ugt, abs, c32(0x7F800000));
    Value sign = band(lshr(xb, c32(28)), c32(0x8));
    Value saturate = cmp(arith::CmpIPredicate::ugt, abs,
                         c32(nx::floatBits(nx::kE2M1Max)));
    Value mag = select(saturate, c32(0x7), roundMagnitude(abs, 1, 1));
    return select(isNaN, c32(0), bor(sign, mag));
  }

  /// numerics::ceilPow2Ue8m0 (the exponent-bit trick) as an i32.
  Value ceilPow2Ue8m0(Value x) {
    Value xb = bits(x);
    Value exponent = band(lshr(xb, c32(23)), c32(0xFF));
    Value inexact = cmp(arith::CmpIPredicate::ne, band(xb, c32(0x7FFFFF)),
                        c32(0));
    Value code =
        add(exponent, arith::ExtUIOp::create(b, loc, i32(), inexact));
    return arith::MinUIOp::create(b, loc, code, c32(0xFF));
  }

  /// numerics::decodeUe8m0 of an i32 code in [0, 255].
  Value decodeUe8m0(Value code) {
    Value normal = shl(code, c32(23));
    Value v = select(cmp(arith::CmpIPredicate::eq, code, c32(0)),
                     c32(0x00400000), normal); // 2^-127
    v = select(cmp(arith::CmpIPredicate::eq, code, c32(nx::kUe8m0NaN)),
               c32(nx::floatBits(std::numeric_limits<float>::quiet_NaN())), v);
    return fromBits(v);
  }

  /// numerics::decodeE4M3 of an i32 code in [0, 255] (kE4M3Values).
  Value decodeE4M3(Value code) {
    Value exponent = band(lshr(code, c32(3)), c32(0xF));
    Value mantissa = band(code, c32(0x7));
    // Subnormal m * 2^-9: exact (m < 8, the product a power-of-two scaling).
    Value subnormal = bits(arith::MulFOp::create(
        b, loc, arith::UIToFPOp::create(b, loc, f32(), mantissa),
        f(nx::kE4M3MinSubnormal)));
    // Normal (8 + m) * 2^(e - 10): fp32 exponent field e - 7 + 127.
    Value normal = bor(shl(add(exponent, c32(120)), c32(23)),
                       shl(mantissa, c32(20)));
    Value mag = select(cmp(arith::CmpIPredicate::eq, exponent, c32(0)),
                       subnormal, normal);
    mag = select(cmp(arith::CmpIPredicate::eq, band(code, c32(0x7F)),
                     c32(0x7F)),
                 c32(nx::floatBits(std::numeric_limits<float>::quiet_NaN())),
                 mag);
    // The table negates the magnitude: the sign bit, also of NaN and zero.
    return fromBits(bor(mag, shl(band(code, c32(0x80)), c32(24))));
  }

  /// numerics::decodeE2M1 of an i32 code in [0, 15] (kE2M1Values).
  Value decodeE2M1(Value code) {
    Value mag = band(code, c32(0x7));
    Value exponent = lshr(mag, c32(1));
    Value mantissa = band(mag, c32(1));
    // Code 1 is 0.5, code 0 is 0; codes 2..7 are (1 + m/2) * 2^(e - 1).
    Value subnormal = mul(mantissa, c32(nx::floatBits(0.5f)));
    Value normal = bor(shl(add(exponent, c32(126)), c32(23)),
                       shl(mantissa, c32(22)));
    Value v = select(cmp(arith::CmpIPredicate::eq, exponent, c32(0)),
                     subnormal, normal);
    return fromBits(bor(v, shl(band(code, c32(0x8)), c32(28))));
  }

  //===--------------------------------------------------------------------===//
  // Memory
  //===--------------------------------------------------------------------===//

  /// fp32 -> bf16 bits in an i32, rounded to nearest even; NaN kept quiet
  /// (numerics::floatToBf16, bit for bit).
  Value encodeBf16(Value x) {
    Value v = bits(x);
    Value nan = cmp(arith::CmpIPredicate::ugt, band(v, c32(0x7FFFFFFF)), c32(0x7F800000));
    Value lsb = band(lshr(v, c32(16)), c32(1));
    Value rounded = lshr(add(v, add(c32(0x7FFF), lsb)), c32(16));
    Value quiet = bor(lshr(v, c32(16)), c32(0x40));
    return select(nan, quiet, rounded);
  }
  /// bf16 bits (the low 16 of an i32) -> fp32, exact.
  Value decodeBf16(Value code) { return fromBits(shl(code, c32(16))); }

  /// Loads a value element and widens it to fp32.
  Value loadF32(Value memref, ValueRange indices) {
    Value v = memref::LoadOp::create(b, loc, memref, indices);
    if (v.getType() != f32())
      v = arith::ExtFOp::create(b, loc, f32(), v);
    return v;
  }
  /// Stores an fp32 value, rounded to nearest even when the memref is bf16.
  void storeF32(Value v, Value memref, ValueRange indices) {
    Type element = cast<MemRefType>(memref.getType()).getElementType();
    if (element != f32())
      v = arith::TruncFOp::create(b, loc, element, v);
    memref::StoreOp::create(b, loc, v, memref, indices);
  }
  /// Loads a byte as an unsigned i32.
  Value loadByte(Value memref, ValueRange indices) {
    Value v = memref::LoadOp::create(b, loc, memref, indices);
    return arith::ExtUIOp::create(b, loc, i32(), v);
  }
  /// Stores the low 8 bits of an i32.
  void storeByte(Value v, Value memref, ValueRange indices) {
    Value byte = arith::TruncIOp::create(b, loc, b.getI8Type(), v);
    memref::StoreOp::create(b, loc, byte, memref, indices);
  }
};

/// `for (i = 0; i < upper; ++i) body(i)`, the builder left after the loop.
template <typename Body>
void forLoop(Emitter &e, Value upper, Body body) {
  auto loop = scf::ForOp::create(e.b, e.loc, e.idx(0), upper, e.idx(1));
  OpBuilder::InsertionGuard guard(e.b);
  e.b.setInsertionPointToStart(loop.getBody());
  body(loop.getInductionVar());
}

bool isFp4(nx::RowFormat format) { return format != nx::RowFormat::SwaKvFp8; }

/// Checks the builder arguments; emits an error and returns false if bad.
bool checkRow(ModuleOp module, const std::string &name, nx::RowFormat format,
              int64_t dim, Type valueType) {
  int64_t group = int64_t(nx::rowGroup(format));
  if (dim <= 0 || dim % group != 0) {
    emitError(module.getLoc()) << name << ": dim " << dim
                               << " is not a positive multiple of the group "
                               << group;
    return false;
  }
  if (valueType && !valueType.isBF16() && !valueType.isF32()) {
    emitError(module.getLoc()) << name << ": values must be bf16 or f32, not "
                               << valueType;
    return false;
  }
  return true;
}

/// An amax as the scale rules take it: +-inf counted as FLT_MAX, then
/// floored at the format's `minimum`.
Value scaleAmax(Emitter &e, Value amax, float minimum) {
  Value fltMax = e.f(std::numeric_limits<float>::max());
  amax = e.select(e.fcmp(arith::CmpFPredicate::OGT, amax, fltMax), fltMax, amax);
  Value m = e.f(minimum);
  return e.select(e.fcmp(arith::CmpFPredicate::OLT, amax, m), m, amax);
}

/// The group's scale code and decoded scale from its amax (max |x| ignoring
/// NaN): scaleAmax, then the format's scale rule (Quantize.cpp, "Scale
/// rules"). The host kernel and the block form share it.
std::pair<Value, Value> groupScale(Emitter &e, nx::RowFormat format, Value amax) {
  OpBuilder &b = e.b;
  Value code, scale;
  auto floorAmax = [&](float minimum) { return scaleAmax(e, amax, minimum); };
  switch (format) {
  case nx::RowFormat::MainKvFp4:
    code = e.encodeE4M3(arith::DivFOp::create(
        b, e.loc, floorAmax(nx::kFp4E4M3AmaxFloor), e.f(nx::kE2M1Max)));
    scale = e.decodeE4M3(code);
    break;
  case nx::RowFormat::IndexKeyFp4:
    code = e.ceilPow2Ue8m0(arith::MulFOp::create(
        b, e.loc, floorAmax(nx::kFp4Ue8m0AmaxFloor), e.f(nx::kFp4MaxInv)));
    scale = e.decodeUe8m0(code);
    break;
  case nx::RowFormat::SwaKvFp8:
    code = e.ceilPow2Ue8m0(arith::MulFOp::create(
        b, e.loc, floorAmax(nx::kFp8AmaxFloor), e.f(nx::kFp8MaxInv)));
    scale = e.decodeUe8m0(code);
    break;
  }
  return {code, scale};
}

/// max |x[r, base + i]| for i < count, from 0 (NaN ignored: |x| > amax is
/// false for it), as numerics::blockAmax before its +-inf rule.
Value rowAmax(Emitter &e, Value x, Value r, Value base, int64_t count) {
  OpBuilder &b = e.b;
  auto loop = scf::ForOp::create(b, e.loc, e.idx(0), e.idx(count), e.idx(1),
                                 ValueRange{e.f(0.f)});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value v = e.loadF32(x, {r, e.add(base, loop.getInductionVar())});
  Value a = e.fromBits(e.band(e.bits(v), e.c32(0x7FFFFFFF)));
  Value amax = loop.getRegionIterArg(0);
  scf::YieldOp::create(b, e.loc, e.select(e.fcmp(arith::CmpFPredicate::OGT, a, amax), a, amax));
  return loop.getResult(0);
}

/// A row kernel's signature: values `memref<?xDxT>` and rows
/// `memref<?xRxi8>`, in that order for a quantizer, reversed for a
/// dequantizer.
func::FuncOp startRowKernel(OpBuilder &b, ModuleOp module, const std::string &name,
                            int64_t dim, int64_t rowBytes, Type valueType, bool quantizer) {
  Type element = valueType ? valueType : b.getBF16Type();
  auto values = MemRefType::get({ShapedType::kDynamic, dim}, element);
  auto rows = MemRefType::get({ShapedType::kDynamic, rowBytes}, b.getI8Type());
  return quantizer ? startKernel(b, module, name, {values, rows})
                   : startKernel(b, module, name, {rows, values});
}

} // namespace

func::FuncOp buildQuantizeRowsKernel(ModuleOp module, const std::string &name,
                                     nx::RowFormat format, int64_t dim,
                                     Type valueType) {
  if (!checkRow(module, name, format, dim, valueType))
    return nullptr;
  OpBuilder b(module.getContext());
  Emitter e{b, module.getLoc()};
  func::FuncOp fn = startRowKernel(b, module, name, dim, int64_t(nx::rowBytes(format, dim)),
                                   valueType, /*quantizer=*/true);
  Value x = fn.getArgument(0), out = fn.getArgument(1);
  const int64_t group = int64_t(nx::rowGroup(format));
  const int64_t scaleOffset = int64_t(nx::rowScaleOffset(format, dim));

  forLoop(e, memref::DimOp::create(b, e.loc, x, e.idx(0)), [&](Value r) {
    forLoop(e, e.idx(dim / group), [&](Value g) {
      Value base = arith::MulIOp::create(b, e.loc, g, e.idx(group));
      const std::pair<Value, Value> codeAndScale =
          groupScale(e, format, rowAmax(e, x, r, base, group));
      Value code = codeAndScale.first, scale = codeAndScale.second;
      e.storeByte(code, out,
                  {r, arith::AddIOp::create(b, e.loc, g, e.idx(scaleOffset))});
      if (!isFp4(format)) {
        forLoop(e, e.idx(group), [&](Value i) {
          Value c = arith::AddIOp::create(b, e.loc, base, i);
          Value v = arith::DivFOp::create(b, e.loc, e.loadF32(x, {r, c}), scale);
          e.storeByte(e.encodeE4M3(v), out, {r, c});
        });
        return;
      }
      // Pairs: element 2j in the low nibble of byte j.
      Value byteBase = arith::DivUIOp::create(b, e.loc, base, e.idx(2));
      forLoop(e, e.idx(group / 2), [&](Value j) {
        Value even = arith::AddIOp::create(
            b, e.loc, base, arith::MulIOp::create(b, e.loc, j, e.idx(2)));
        Value odd = arith::AddIOp::create(b, e.loc, even, e.idx(1));
        Value lo = e.encodeE2M1(
            arith::DivFOp::create(b, e.loc, e.loadF32(x, {r, even}), scale));
        Value hi = e.encodeE2M1(
            arith::DivFOp::create(b, e.loc, e.loadF32(x, {r, odd}), scale));
        e.storeByte(e.bor(lo, e.shl(hi, e.c32(4))), out,
                    {r, arith::AddIOp::create(b, e.loc, byteBase, j)});
      });
    });
  });
  func::ReturnOp::create(b, e.loc);
  fn->setAttr(kQuantizeRowsAttr,
              b.getDictionaryAttr(
                  {b.getNamedAttr("format", b.getI64IntegerAttr(int64_t(format))),
                   b.getNamedAttr("dim", b.getI64IntegerAttr(dim))}));
  return fn;
}

int64_t quantizeRowsBlockThreads(nx::RowFormat format, int64_t dim) {
  const int64_t perByte = isFp4(format) ? 2 : 1;
  const int64_t group = int64_t(nx::rowGroup(format)), lanes = group / perByte;
  if (dim <= 0 || dim % group != 0 || lanes > 32 || (lanes & (lanes - 1)) != 0)
    return 0;
  const int64_t threads = (dim / perByte + 31) / 32 * 32;
  return threads <= 1024 ? threads : 0;
}

void buildQuantizeRowsBlockBody(func::FuncOp fn, nx::RowFormat format, int64_t dim,
                                const QuantizeRowsBlockLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Block *entry = freshBody(fn, {});
  b.setInsertionPointToStart(entry);
  emitQuantizeRowsBlock(b, loc, entry->getArgument(0), entry->getArgument(1), format, dim,
                        lanes);
  func::ReturnOp::create(b, loc);
}

void emitQuantizeRowsBlock(OpBuilder &b, Location loc, Value x, Value out,
                           nx::RowFormat format, int64_t dim,
                           const QuantizeRowsBlockLanes &lanes) {
  Emitter e{b, loc};
  const bool fp4 = isFp4(format);
  const int64_t perByte = fp4 ? 2 : 1, bytes = dim / perByte;
  const int64_t groupLanes = int64_t(nx::rowGroup(format)) / perByte;
  const int64_t scaleOffset = int64_t(nx::rowScaleOffset(format, dim));
  Value r = lanes.row(b, loc), t = lanes.thread(b, loc);
  Value active = e.cmp(arith::CmpIPredicate::ult, t, e.idx(bytes));
  // Idle threads (the block's last warp) read the last byte's elements, so
  // that every lane of a warp takes part in the shuffles; they store nothing.
  Value byte = arith::MinUIOp::create(b, loc, t, e.idx(bytes - 1));
  SmallVector<Value, 2> values;
  for (int64_t i = 0; i < perByte; ++i) {
    Value column = fp4 ? e.add(e.mul(byte, e.idx(2)), e.idx(i)) : byte;
    values.push_back(lanes.loadValue ? lanes.loadValue(b, loc, x, r, column)
                                     : e.loadF32(x, {r, column}));
  }
  // The lane's part of the amax, as the host's loop from 0 (NaN ignored:
  // |x| > amax is false), so never NaN; a max of such values does not
  // depend on the order, so the shuffles give the host's amax.
  Value amax = e.f(0.f);
  for (Value v : values) {
    Value a = e.fromBits(e.band(e.bits(v), e.c32(0x7FFFFFFF)));
    amax = e.select(e.fcmp(arith::CmpFPredicate::OGT, a, amax), a, amax);
  }
  for (int64_t mask = groupLanes / 2; mask >= 1; mask /= 2) {
    Value other = lanes.shuffleXor(b, loc, amax, int32_t(mask));
    amax = e.select(e.fcmp(arith::CmpFPredicate::OGT, other, amax), other, amax);
  }
  const std::pair<Value, Value> codeAndScale = groupScale(e, format, amax);
  Value code = codeAndScale.first, scale = codeAndScale.second;
  auto store = scf::IfOp::create(b, loc, active, /*withElse=*/false);
  b.setInsertionPoint(store.thenBlock()->getTerminator());
  Value q;
  if (fp4) {
    Value lo = e.encodeE2M1(arith::DivFOp::create(b, loc, values[0], scale));
    Value hi = e.encodeE2M1(arith::DivFOp::create(b, loc, values[1], scale));
    q = e.bor(lo, e.shl(hi, e.c32(4)));
  } else {
    q = e.encodeE4M3(arith::DivFOp::create(b, loc, values[0], scale));
  }
  auto storeByte = [&](Value v, Value column) {
    Value i8 = arith::TruncIOp::create(b, loc, b.getI8Type(), v);
    memref::StoreOp::create(b, loc, i8, out, ValueRange{r, column});
    if (lanes.alsoStore)
      lanes.alsoStore(b, loc, r, column, i8);
  };
  storeByte(q, byte);
  // The group's first lane writes its scale byte.
  Value lane = arith::RemUIOp::create(b, loc, t, e.idx(groupLanes));
  auto first = scf::IfOp::create(b, loc, e.cmp(arith::CmpIPredicate::eq, lane, e.idx(0)),
                                 /*withElse=*/false);
  b.setInsertionPoint(first.thenBlock()->getTerminator());
  storeByte(code, e.add(arith::DivUIOp::create(b, loc, t, e.idx(groupLanes)),
                        e.idx(scaleOffset)));
  b.setInsertionPointAfter(store);
}

func::FuncOp buildDequantizeRowsKernel(ModuleOp module, const std::string &name,
                                       nx::RowFormat format, int64_t dim,
                                       Type valueType) {
  if (!checkRow(module, name, format, dim, valueType))
    return nullptr;
  OpBuilder b(module.getContext());
  Emitter e{b, module.getLoc()};
  func::FuncOp fn = startRowKernel(b, module, name, dim, int64_t(nx::rowBytes(format, dim)),
                                   valueType, /*quantizer=*/false);
  Value rows = fn.getArgument(0), y = fn.getArgument(1);
  const int64_t group = int64_t(nx::rowGroup(format));
  const int64_t scaleOffset = int64_t(nx::rowScaleOffset(format, dim));

  forLoop(e, memref::DimOp::create(b, e.loc, rows, e.idx(0)), [&](Value r) {
    forLoop(e, e.idx(dim / group), [&](Value g) {
      Value code = e.loadByte(
          rows, {r, arith::AddIOp::create(b, e.loc, g, e.idx(scaleOffset))});
      Value scale = format == nx::RowFormat::MainKvFp4 ? e.decodeE4M3(code)
                                                       : e.decodeUe8m0(code);
      Value base = arith::MulIOp::create(b, e.loc, g, e.idx(group));
      if (!isFp4(format)) {
        forLoop(e, e.idx(group), [&](Value i) {
          Value c = arith::AddIOp::create(b, e.loc, base, i);
          Value v = e.decodeE4M3(e.loadByte(rows, {r, c}));
          e.storeF32(arith::MulFOp::create(b, e.loc, v, scale), y, {r, c});
        });
        return;
      }
      Value byteBase = arith::DivUIOp::create(b, e.loc, base, e.idx(2));
      forLoop(e, e.idx(group / 2), [&](Value j) {
        Value byte = e.loadByte(
            rows, {r, arith::AddIOp::create(b, e.loc, byteBase, j)});
        Value even = arith::AddIOp::create(
            b, e.loc, base, arith::MulIOp::create(b, e.loc, j, e.idx(2)));
        Value odd = arith::AddIOp::create(b, e.loc, even, e.idx(1));
        Value lo = e.decodeE2M1(e.band(byte, e.c32(0xF)));
        Value hi = e.decodeE2M1(e.lshr(byte, e.c32(4)));
        e.storeF32(arith::MulFOp::create(b, e.loc, lo, scale), y, {r, even});
        e.storeF32(arith::MulFOp::create(b, e.loc, hi, scale), y, {r, odd});
      });
    });
  });
  func::ReturnOp::create(b, e.loc);
  return fn;
}

namespace {

/// Checks an FP8 variant row's shape (V4's main-KV row with `rope` bf16
/// channels, or an index-key row with rope 0): the dialect verified the type;
/// a builder called directly gets the same checks.
bool checkFp8Row(ModuleOp module, const std::string &name, int64_t dim,
                    int64_t rope, Type valueType) {
  if (rope < 0 || rope >= dim || (dim - rope) % int64_t(nx::mainKvFp8Group(size_t(dim - rope))) != 0) {
    emitError(module.getLoc()) << name << ": a V4 FP8 row needs 0 <= rope < dim, got rope "
                               << rope << " of " << dim;
    return false;
  }
  if (valueType && !valueType.isBF16() && !valueType.isF32()) {
    emitError(module.getLoc()) << name << ": values must be bf16 or f32, not " << valueType;
    return false;
  }
  return true;
}


} // namespace

func::FuncOp buildQuantizeMainKvFp8Kernel(ModuleOp module, const std::string &name,
                                          int64_t dim, int64_t rope, Type valueType) {
  if (!checkFp8Row(module, name, dim, rope, valueType))
    return nullptr;
  OpBuilder b(module.getContext());
  Emitter e{b, module.getLoc()};
  func::FuncOp fn = startRowKernel(b, module, name, dim,
                                   int64_t(nx::mainKvFp8RowBytes(size_t(dim), size_t(rope))),
                                   valueType, /*quantizer=*/true);
  Value x = fn.getArgument(0), out = fn.getArgument(1);
  const int64_t nope = dim - rope, group = int64_t(nx::mainKvFp8Group(size_t(nope)));
  const int64_t scaleOffset = int64_t(nx::mainKvFp8ScaleOffset(size_t(dim), size_t(rope)));
  const int64_t scaleBytes = int64_t(nx::mainKvFp8ScaleBytes(size_t(nope)));

  forLoop(e, memref::DimOp::create(b, e.loc, x, e.idx(0)), [&](Value r) {
    // The NoPE channels: E4M3 with a UE8M0 scale per group, as the SWA rows.
    forLoop(e, e.idx(nope / group), [&](Value g) {
      Value base = e.mul(g, e.idx(group));
      auto [code, scale] = groupScale(e, nx::RowFormat::SwaKvFp8, rowAmax(e, x, r, base, group));
      e.storeByte(code, out, {r, e.add(g, e.idx(scaleOffset))});
      forLoop(e, e.idx(group), [&](Value i) {
        Value c = e.add(base, i);
        Value v = arith::DivFOp::create(b, e.loc, e.loadF32(x, {r, c}), scale);
        e.storeByte(e.encodeE4M3(v), out, {r, c});
      });
    });
    // The pad after the scales is zero.
    forLoop(e, e.idx(scaleBytes - nope / group), [&](Value i) {
      e.storeByte(e.c32(0), out, {r, e.add(i, e.idx(scaleOffset + nope / group))});
    });
    // The RoPE channels: bf16, low byte first.
    forLoop(e, e.idx(rope), [&](Value i) {
      Value bf = e.encodeBf16(e.loadF32(x, {r, e.add(i, e.idx(nope))}));
      Value at = e.add(e.mul(i, e.idx(2)), e.idx(nope));
      e.storeByte(bf, out, {r, at});
      e.storeByte(e.lshr(bf, e.c32(8)), out, {r, e.add(at, e.idx(1))});
    });
  });
  func::ReturnOp::create(b, e.loc);
  return fn;
}

func::FuncOp buildDequantizeMainKvFp8Kernel(ModuleOp module, const std::string &name,
                                            int64_t dim, int64_t rope, Type valueType) {
  if (!checkFp8Row(module, name, dim, rope, valueType))
    return nullptr;
  OpBuilder b(module.getContext());
  Emitter e{b, module.getLoc()};
  func::FuncOp fn = startRowKernel(b, module, name, dim,
                                   int64_t(nx::mainKvFp8RowBytes(size_t(dim), size_t(rope))),
                                   valueType, /*quantizer=*/false);
  Value rows = fn.getArgument(0), y = fn.getArgument(1);
  const int64_t nope = dim - rope, group = int64_t(nx::mainKvFp8Group(size_t(nope)));
  const int64_t scaleOffset = int64_t(nx::mainKvFp8ScaleOffset(size_t(dim), size_t(rope)));

  forLoop(e, memref::DimOp::create(b, e.loc, rows, e.idx(0)), [&](Value r) {
    forLoop(e, e.idx(nope / group), [&](Value g) {
      Value scale = e.decodeUe8m0(e.loadByte(rows, {r, e.add(g, e.idx(scaleOffset))}));
      Value base = e.mul(g, e.idx(group));
      forLoop(e, e.idx(group), [&](Value i) {
        Value c = e.add(base, i);
        Value v = e.decodeE4M3(e.loadByte(rows, {r, c}));
        e.storeF32(arith::MulFOp::create(b, e.loc, v, scale), y, {r, c});
      });
    });
    forLoop(e, e.idx(rope), [&](Value i) {
      Value at = e.add(e.mul(i, e.idx(2)), e.idx(nope));
      Value bf = e.bor(e.loadByte(rows, {r, at}),
                       e.shl(e.loadByte(rows, {r, e.add(at, e.idx(1))}), e.c32(8)));
      e.storeF32(e.decodeBf16(bf), y, {r, e.add(i, e.idx(nope))});
    });
  });
  func::ReturnOp::create(b, e.loc);
  return fn;
}

func::FuncOp buildQuantizeIndexKeyFp8Kernel(ModuleOp module, const std::string &name,
                                            int64_t dim, Type valueType) {
  if (!checkFp8Row(module, name, dim, 0, valueType))
    return nullptr;
  OpBuilder b(module.getContext());
  Emitter e{b, module.getLoc()};
  func::FuncOp fn = startRowKernel(b, module, name, dim,
                                   int64_t(nx::indexKeyFp8RowBytes(size_t(dim))), valueType,
                                   /*quantizer=*/true);
  Value x = fn.getArgument(0), out = fn.getArgument(1);
  // ptxas compiles `st.b8` of a register that a float instruction wrote as a
  // float-to-u8 conversion (F2IP.U8.F32 in the SASS: the scale's low byte
  // came out 0 on an H100), and LLVM drops any plain integer op between the
  // multiplication and the byte store (only the low byte is demanded). So
  // the scale's bits pass an `or` with a value it cannot fold, also where
  // this kernel is inlined into a fused one: 1 only for a negative count of
  // output rows (read from the descriptor), which no memref has.
  Value never = arith::ExtUIOp::create(
      b, e.loc, e.i32(),
      e.cmp(arith::CmpIPredicate::slt,
            arith::IndexCastOp::create(b, e.loc, b.getI64Type(),
                                       memref::DimOp::create(b, e.loc, out, e.idx(0))),
            arith::ConstantIntOp::create(b, e.loc, b.getI64Type(), 0)));
  forLoop(e, memref::DimOp::create(b, e.loc, x, e.idx(0)), [&](Value r) {
    // The row's amax (NaN ignored, +-inf as FLT_MAX), floored at 1e-4, times
    // fp32(1/448): an fp32 scale, stored little-endian after the values.
    Value amax = scaleAmax(e, rowAmax(e, x, r, e.idx(0), dim), nx::kFp8AmaxFloor);
    Value scale = arith::MulFOp::create(b, e.loc, amax, e.f(nx::kFp8MaxInv));
    Value scaleBits = e.bor(e.bits(scale), never);
    for (int i = 0; i < 4; ++i)
      e.storeByte(e.lshr(scaleBits, e.c32(8 * i)), out, {r, e.idx(dim + i)});
    forLoop(e, e.idx(dim), [&](Value c) {
      Value v = arith::DivFOp::create(b, e.loc, e.loadF32(x, {r, c}), scale);
      e.storeByte(e.encodeE4M3(v), out, {r, c});
    });
  });
  func::ReturnOp::create(b, e.loc);
  return fn;
}

func::FuncOp buildDequantizeIndexKeyFp8Kernel(ModuleOp module, const std::string &name,
                                              int64_t dim, Type valueType) {
  if (!checkFp8Row(module, name, dim, 0, valueType))
    return nullptr;
  OpBuilder b(module.getContext());
  Emitter e{b, module.getLoc()};
  func::FuncOp fn = startRowKernel(b, module, name, dim,
                                   int64_t(nx::indexKeyFp8RowBytes(size_t(dim))), valueType,
                                   /*quantizer=*/false);
  Value rows = fn.getArgument(0), y = fn.getArgument(1);
  forLoop(e, memref::DimOp::create(b, e.loc, rows, e.idx(0)), [&](Value r) {
    Value bits = e.c32(0);
    for (int i = 0; i < 4; ++i)
      bits = e.bor(bits, e.shl(e.loadByte(rows, {r, e.idx(dim + i)}), e.c32(8 * i)));
    Value scale = e.fromBits(bits);
    forLoop(e, e.idx(dim), [&](Value c) {
      Value v = e.decodeE4M3(e.loadByte(rows, {r, c}));
      e.storeF32(arith::MulFOp::create(b, e.loc, v, scale), y, {r, c});
    });
  });
  func::ReturnOp::create(b, e.loc);
  return fn;
}

func::FuncOp buildCacheAppendKernel(ModuleOp module, const std::string &name,
                                    nx::RowFormat format, int64_t dim,
                                    int64_t window) {
  if (!checkRow(module, name, format, dim, {}))
    return nullptr;
  return buildCacheAppendKernel(module, name, int64_t(nx::rowBytes(format, dim)), window);
}

func::FuncOp buildCacheAppendKernel(ModuleOp module, const std::string &name,
                                    int64_t rowBytes, int64_t window) {
  if (rowBytes <= 0) {
    emitError(module.getLoc()) << name << ": rows of " << rowBytes << " bytes";
    return nullptr;
  }
  if (window < 0) {
    emitError(module.getLoc()) << name << ": negative window " << window;
    return nullptr;
  }
  OpBuilder b(module.getContext());
  Emitter e{b, module.getLoc()};
  Type i64 = b.getI64Type();
  MemRefType srcType =
      MemRefType::get({ShapedType::kDynamic, rowBytes}, b.getI8Type());
  auto cacheType = MemRefType::get(
      srcType.getShape(), srcType.getElementType(),
      StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic,
                             {ShapedType::kDynamic, 1}));
  func::FuncOp fn =
      startKernel(b, module, name, {srcType, cacheType, i64}, {e.i32()});
  Value rows = fn.getArgument(0), cache = fn.getArgument(1),
        start = fn.getArgument(2);
  Value n = memref::DimOp::create(b, e.loc, rows, e.idx(0));
  Value capacity = arith::IndexCastOp::create(
      b, e.loc, i64, memref::DimOp::create(b, e.loc, cache, e.idx(0)));
  Value zero64 = arith::ConstantIntOp::create(b, e.loc, i64, 0);

  auto rowLoop = scf::ForOp::create(b, e.loc, e.idx(0), n, e.idx(1),
                                    ValueRange{e.c32(0)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(rowLoop.getBody());
    Value i = rowLoop.getInductionVar();
    Value dropped = rowLoop.getRegionIterArg(0);
    Value pos = arith::AddIOp::create(
        b, e.loc, start, arith::IndexCastOp::create(b, e.loc, i64, i));
    Value slot = pos;
    if (window > 0)
      slot = arith::RemSIOp::create(
          b, e.loc, pos, arith::ConstantIntOp::create(b, e.loc, i64, window));
    Value inRange = arith::AndIOp::create(
        b, e.loc, e.cmp(arith::CmpIPredicate::sge, pos, zero64),
        e.cmp(arith::CmpIPredicate::slt, slot, capacity));
    auto ifOp = scf::IfOp::create(b, e.loc, TypeRange{e.i32()}, inRange,
                                  /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard inner(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      Value dst = arith::IndexCastOp::create(b, e.loc, b.getIndexType(), slot);
      forLoop(e, e.idx(rowBytes), [&](Value c) {
        Value byte = memref::LoadOp::create(b, e.loc, rows, ValueRange{i, c});
        memref::StoreOp::create(b, e.loc, byte, cache, ValueRange{dst, c});
      });
      scf::YieldOp::create(b, e.loc, dropped);
      b.setInsertionPointToStart(ifOp.elseBlock());
      scf::YieldOp::create(b, e.loc, e.add(dropped, e.c32(1)));
    }
    scf::YieldOp::create(b, e.loc, ifOp.getResult(0));
  }
  func::ReturnOp::create(b, e.loc, rowLoop.getResult(0));
  fn->setAttr(kCacheAppendAttr,
              b.getDictionaryAttr({b.getNamedAttr("row_bytes", b.getI64IntegerAttr(rowBytes)),
                                   b.getNamedAttr("window", b.getI64IntegerAttr(window))}));
  return fn;
}

void buildCacheAppendBlockBody(func::FuncOp fn, int64_t rowBytes, int64_t window,
                               const std::function<Value(OpBuilder &, Location)> &row,
                               const std::function<Value(OpBuilder &, Location)> &thread,
                               int64_t threads) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Block *entry = freshBody(fn, {});
  fn.setType(FunctionType::get(fn.getContext(), fn.getFunctionType().getInputs(),
                               {b.getI32Type()}));
  b.setInsertionPointToStart(entry);
  Emitter e{b, loc};
  Value rows = entry->getArgument(0), cache = entry->getArgument(1),
        start = entry->getArgument(2);
  Value n = memref::DimOp::create(b, loc, rows, e.idx(0));
  Value i = row(b, loc), tid = thread(b, loc);
  const CacheStoreSlot store = emitCacheStoreSlot(b, loc, cache, start, n, i, window);
  Value slot = store.slot, write = store.write, missed = store.missed;
  auto guard = scf::IfOp::create(b, loc, write, /*withElse=*/false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(guard.thenBlock()->getTerminator());
    Value dst = arith::IndexCastOp::create(b, loc, b.getIndexType(), slot);
    SmallVector<std::pair<Value, Value>> bytes; // (column, byte)
    for (int64_t c0 = 0; c0 < rowBytes; c0 += threads) {
      Value c = e.add(tid, e.idx(c0));
      Value clamped = arith::MinUIOp::create(b, loc, c, e.idx(rowBytes - 1));
      bytes.push_back({c, memref::LoadOp::create(b, loc, rows, ValueRange{i, clamped})});
    }
    for (auto [c, byte] : bytes) {
      auto own = scf::IfOp::create(b, loc, e.cmp(arith::CmpIPredicate::ult, c, e.idx(rowBytes)),
                                   /*withElse=*/false);
      OpBuilder::InsertionGuard g2(b);
      b.setInsertionPoint(own.thenBlock()->getTerminator());
      memref::StoreOp::create(b, loc, byte, cache, ValueRange{dst, c});
    }
  }
  func::ReturnOp::create(b, loc, missed);
}

CacheStoreSlot emitCacheStoreSlot(OpBuilder &b, Location loc, Value cache, Value start, Value n,
                                  Value row, int64_t window) {
  Emitter e{b, loc};
  Type i64 = b.getI64Type();
  Value capacity = arith::IndexCastOp::create(
      b, loc, i64, memref::DimOp::create(b, loc, cache, e.idx(0)));
  Value zero64 = arith::ConstantIntOp::create(b, loc, i64, 0);
  // Row i's slot and whether it exists (the host kernel's test).
  auto slotOf = [&](Value i) -> std::pair<Value, Value> {
    Value pos = e.add(start, arith::IndexCastOp::create(b, loc, i64, i));
    Value slot = window > 0 ? arith::RemSIOp::create(
                                  b, loc, pos, arith::ConstantIntOp::create(b, loc, i64, window))
                                  .getResult()
                            : pos;
    Value inRange = e.band(e.cmp(arith::CmpIPredicate::sge, pos, zero64),
                           e.cmp(arith::CmpIPredicate::slt, slot, capacity));
    return {slot, inRange};
  };
  // The rows not written, as the host kernel counts them.
  auto count = scf::ForOp::create(b, loc, e.idx(0), n, e.idx(1), ValueRange{e.c32(0)});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(count.getBody());
    Value missed = arith::ExtUIOp::create(
        b, loc, e.i32(),
        arith::XOrIOp::create(b, loc, slotOf(count.getInductionVar()).second,
                              arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1)));
    scf::YieldOp::create(b, loc, ValueRange{e.add(count.getRegionIterArg(0), missed)});
  }
  auto [slot, inRange] = slotOf(row);
  Value write = e.band(inRange, e.cmp(arith::CmpIPredicate::ult, row, n));
  if (window > 0) // a later row takes the same slot: it wins
    write = e.band(write, e.cmp(arith::CmpIPredicate::uge, e.add(row, e.idx(window)), n));
  return {slot, write, count.getResult(0)};
}

} // namespace csa::codegen

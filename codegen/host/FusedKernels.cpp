//===- FusedKernels.cpp - Host kernels of csa.fusion regions --------------===//
#include "codegen/host/FusedKernels.h"

#include "codegen/host/KernelBuilder.h"
#include "codegen/host/HostKernels.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace csa::codegen {

func::FuncOp buildRopeQuantizeStoreKernel(ModuleOp module,
                                          const std::string &name,
                                          const std::string &rope,
                                          const std::string &quantize,
                                          const std::string &append,
                                          int64_t stride, bool inverse) {
  auto ropeFn = module.lookupSymbol<func::FuncOp>(rope);
  auto quantizeFn = module.lookupSymbol<func::FuncOp>(quantize);
  auto appendFn = module.lookupSymbol<func::FuncOp>(append);
  if (!ropeFn || !quantizeFn || !appendFn) {
    emitError(module.getLoc()) << "fused kernel '" << name
                               << "': a part kernel is missing";
    return nullptr;
  }
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type i64 = b.getI64Type();
  auto xType = cast<MemRefType>(quantizeFn.getArgumentTypes()[0]);
  Type rowsType = appendFn.getArgumentTypes()[0];
  Type cacheType = appendFn.getArgumentTypes()[1];
  func::FuncOp fn = startKernel(b, module, name,
                                {xType, i64, i64, cacheType, rowsType},
                                appendFn.getResultTypes());
  KernelBuilder k(b, loc);
  Value x = fn.getArgument(0), ropePosition = fn.getArgument(1),
        storePosition = fn.getArgument(2), cache = fn.getArgument(3),
        rows = fn.getArgument(4);
  // The rotated copy of x stays inside the kernel. A call with no rows (a
  // decode step that completes no group) does nothing: no allocation of zero
  // bytes (a device-side malloc(0) may return null).
  Value n = k.dim(x, 0);
  Value any = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, n,
                                    k.idx(0));
  Type resultType = appendFn.getResultTypes()[0];
  auto guard = scf::IfOp::create(b, loc, TypeRange{resultType}, any,
                                 /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(guard.thenBlock());
    Value rotated = memref::AllocOp::create(b, loc, xType, ValueRange{n});
    memref::CopyOp::create(b, loc, x, rotated);
    Value view = memref::CastOp::create(b, loc, ropeFn.getArgumentTypes()[0],
                                        rotated);
    func::CallOp::create(b, loc, ropeFn,
                         ValueRange{view, ropePosition,
                                    intConst(b, loc, i64, stride),
                                    intConst(b, loc, i64, 1)});
    func::CallOp::create(b, loc, quantizeFn, ValueRange{rotated, rows});
    auto missed = func::CallOp::create(b, loc, appendFn,
                                       ValueRange{rows, cache, storePosition});
    memref::DeallocOp::create(b, loc, rotated);
    scf::YieldOp::create(b, loc, missed.getResults());
    b.setInsertionPointToStart(guard.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{intConst(b, loc, resultType, 0)});
  }
  func::ReturnOp::create(b, loc, guard.getResults());
  // The block form's spec, where the quantizer has one (its format) and the
  // parts are the released kernels (the append's window, RoPE's table).
  auto quantized = quantizeFn->getAttrOfType<DictionaryAttr>(kQuantizeRowsAttr);
  auto appended = appendFn->getAttrOfType<DictionaryAttr>(kCacheAppendAttr);
  auto table = module.lookupSymbol<memref::GlobalOp>(rope + "_freqs");
  if (quantized && appended && table) {
    fn->setAttr(kRopeQuantizeStoreAttr,
                b.getDictionaryAttr(
                    {b.getNamedAttr("format", quantized.get("format")),
                     b.getNamedAttr("dim", quantized.get("dim")),
                     b.getNamedAttr("window", appended.get("window")),
                     b.getNamedAttr("stride", b.getI64IntegerAttr(stride)),
                     b.getNamedAttr("pairs", b.getI64IntegerAttr(table.getType().getNumElements())),
                     b.getNamedAttr("inverse", b.getBoolAttr(inverse)),
                     b.getNamedAttr("table", b.getStringAttr(table.getSymName()))}));
  }
  return fn;
}

std::optional<RopeQuantizeStoreSpec> ropeQuantizeStoreSpecOf(func::FuncOp fn) {
  auto attr = fn->getAttrOfType<DictionaryAttr>(kRopeQuantizeStoreAttr);
  if (!attr)
    return std::nullopt;
  auto integer = [&](const char *key) -> std::optional<int64_t> {
    if (auto v = attr.getAs<IntegerAttr>(key))
      return v.getInt();
    return std::nullopt;
  };
  auto format = integer("format"), dim = integer("dim"), window = integer("window"),
       stride = integer("stride"), pairs = integer("pairs");
  auto inverse = attr.getAs<BoolAttr>("inverse");
  auto table = attr.getAs<StringAttr>("table");
  if (!format || !dim || !window || !stride || !pairs || !inverse || !table)
    return std::nullopt;
  return RopeQuantizeStoreSpec{numerics::RowFormat(*format), *dim, *window, *stride, *pairs,
                               inverse.getValue(), table.getValue().str()};
}

void buildRopeQuantizeStoreBlockBody(func::FuncOp fn, const RopeQuantizeStoreSpec &spec,
                                     const QuantizeRowsBlockLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Block *entry = freshBody(fn, {});
  fn.setType(FunctionType::get(fn.getContext(), fn.getFunctionType().getInputs(),
                               {b.getI32Type()}));
  b.setInsertionPointToStart(entry);
  Type i64 = b.getI64Type(), f32 = b.getF32Type(), bf16 = b.getBF16Type();
  Value x = entry->getArgument(0), ropePosition = entry->getArgument(1),
        storePosition = entry->getArgument(2), cache = entry->getArgument(3),
        rows = entry->getArgument(4);
  auto idx = [&](int64_t v) { return indexConst(b, loc, v); };
  auto i64c = [&](int64_t v) { return intConst(b, loc, i64, v); };
  auto cmp = [&](arith::CmpIPredicate p, Value l, Value r) {
    return arith::CmpIOp::create(b, loc, p, l, r).getResult();
  };
  Value n = memref::DimOp::create(b, loc, x, idx(0));
  Value r = lanes.row(b, loc);
  const CacheStoreSlot store = emitCacheStoreSlot(b, loc, cache, storePosition, n, r, spec.window);
  Value write = store.write, missed = store.missed;
  Value slotIndex = arith::IndexCastOp::create(b, loc, b.getIndexType(), store.slot);
  // A block past the rows (a launch of no rows still has one) does nothing.
  auto inRows = scf::IfOp::create(b, loc, cmp(arith::CmpIPredicate::ult, r, n), /*withElse=*/false);
  b.setInsertionPoint(inRows.thenBlock()->getTerminator());
  QuantizeRowsBlockLanes fused = lanes;
  const int64_t tail = spec.dim - 2 * spec.pairs;
  auto tableType = MemRefType::get({spec.pairs}, f32);
  fused.loadValue = [&](OpBuilder &b, Location loc, Value x, Value r, Value column) -> Value {
    auto widen = [&](Value v) { return arith::ExtFOp::create(b, loc, f32, v).getResult(); };
    auto rotated = scf::IfOp::create(b, loc, TypeRange{f32},
                                     cmp(arith::CmpIPredicate::uge, column, idx(tail)),
                                     /*withElse=*/true);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(rotated.thenBlock());
      // The RoPE kernel's arithmetic for the pair of `column`.
      Value pair = arith::DivUIOp::create(b, loc, arith::SubIOp::create(b, loc, column, idx(tail)),
                                          idx(2));
      Value even = arith::AddIOp::create(b, loc, idx(tail),
                                         arith::MulIOp::create(b, loc, pair, idx(2)));
      Value odd = arith::AddIOp::create(b, loc, even, idx(1));
      Value a = widen(memref::LoadOp::create(b, loc, x, ValueRange{r, even}));
      Value bv = widen(memref::LoadOp::create(b, loc, x, ValueRange{r, odd}));
      Value pos = arith::AddIOp::create(
          b, loc, ropePosition,
          arith::MulIOp::create(b, loc, arith::IndexCastOp::create(b, loc, i64, r),
                                i64c(spec.stride)));
      Value table = memref::GetGlobalOp::create(b, loc, tableType, spec.table);
      auto [sn, cs] = emitRopeSinCos(b, loc, arith::SIToFPOp::create(b, loc, f32, pos),
                                     memref::LoadOp::create(b, loc, table, pair), spec.inverse);
      auto [re, im] = emitRopeRotate(b, loc, a, bv, sn, cs);
      Value v = arith::SelectOp::create(b, loc, cmp(arith::CmpIPredicate::eq, column, even), re, im);
      scf::YieldOp::create(b, loc, widen(arith::TruncFOp::create(b, loc, bf16, v)));
      b.setInsertionPointToStart(rotated.elseBlock());
      scf::YieldOp::create(b, loc, widen(memref::LoadOp::create(b, loc, x, ValueRange{r, column})));
    }
    return rotated.getResult(0);
  };
  fused.alsoStore = [&](OpBuilder &b, Location loc, Value, Value column, Value byte) {
    auto guard = scf::IfOp::create(b, loc, write, /*withElse=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(guard.thenBlock()->getTerminator());
    memref::StoreOp::create(b, loc, byte, cache, ValueRange{slotIndex, column});
  };
  emitQuantizeRowsBlock(b, loc, x, rows, spec.format, spec.dim, fused);
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc, missed);
}

func::FuncOp buildHcCollapseNormKernel(ModuleOp module, const std::string &name,
                                       const std::string &collapse, const std::string &norm,
                                       int64_t hc, int64_t dim, double eps) {
  auto collapseFn = module.lookupSymbol<func::FuncOp>(collapse);
  auto normFn = module.lookupSymbol<func::FuncOp>(norm);
  if (!collapseFn || !normFn) {
    emitError(module.getLoc()) << "fused kernel '" << name << "': a part kernel is missing";
    return nullptr;
  }
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type();
  auto rowsType = MemRefType::get({ShapedType::kDynamic, dim}, bf16);
  func::FuncOp fn = startKernel(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, hc, dim}, bf16),
       MemRefType::get({ShapedType::kDynamic, hc}, f32), MemRefType::get({dim}, bf16), rowsType});
  KernelBuilder k(b, loc);
  Value streams = fn.getArgument(0), pre = fn.getArgument(1), w = fn.getArgument(2),
        y = fn.getArgument(3);
  // A call with no rows does nothing (no allocation of zero bytes).
  Value n = k.dim(streams, 0);
  auto any = scf::IfOp::create(
      b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, n, k.idx(0)),
      /*withElse=*/false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(any.thenBlock()->getTerminator());
    Value collapsed = memref::AllocOp::create(b, loc, rowsType, ValueRange{n});
    auto cast = [&](Value v, Type t) -> Value {
      return v.getType() == t ? v : memref::CastOp::create(b, loc, t, v).getResult();
    };
    func::CallOp::create(b, loc, collapseFn,
                         ValueRange{cast(streams, collapseFn.getArgumentTypes()[0]),
                                    cast(pre, collapseFn.getArgumentTypes()[1]),
                                    cast(collapsed, collapseFn.getArgumentTypes()[2])});
    func::CallOp::create(b, loc, normFn,
                         ValueRange{cast(collapsed, normFn.getArgumentTypes()[0]),
                                    cast(w, normFn.getArgumentTypes()[1]),
                                    cast(y, normFn.getArgumentTypes()[2])});
    memref::DeallocOp::create(b, loc, collapsed);
  }
  func::ReturnOp::create(b, loc);
  fn->setAttr(kHcCollapseNormAttr,
              b.getDictionaryAttr({b.getNamedAttr("hc", b.getI64IntegerAttr(hc)),
                                   b.getNamedAttr("dim", b.getI64IntegerAttr(dim)),
                                   b.getNamedAttr("eps", b.getF64FloatAttr(eps))}));
  return fn;
}

void buildHcCollapseNormWordBody(func::FuncOp fn, int64_t hc, int64_t dim, double eps,
                                 const RmsNormBlockLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Block *entry = freshBody(fn, {lanes.sharedRowType, lanes.sharedScaleType});
  b.setInsertionPointToStart(entry);
  Type f32 = b.getF32Type(), bf16 = b.getBF16Type(), i64 = b.getI64Type();
  Value streams = entry->getArgument(0), pre = entry->getArgument(1),
        w = entry->getArgument(2), y = entry->getArgument(3), warpSums = entry->getArgument(4);
  RmsNormWordFn collapsedWord = [&](OpBuilder &b, Location loc, Value r,
                                    Value first) -> SmallVector<Value> {
    KernelBuilder k(b, loc);
    // The HC streams' words of the row: 16-byte loads where the streams lie
    // on 16 bytes, elements otherwise.
    auto [base, aligned] = bytePointer(b, loc, streams, lanes.addressSpace);
    auto loads = scf::IfOp::create(b, loc, SmallVector<Type>(size_t(hc * 8), f32), aligned,
                                   /*withElse=*/true);
    {
      OpBuilder vb = OpBuilder::atBlockBegin(loads.thenBlock());
      SmallVector<Value> values;
      for (int64_t i = 0; i < hc; ++i) {
        // Element ((r * HC + i) * D + first), 2 bytes each.
        Value element = arith::AddIOp::create(
            vb, loc,
            arith::MulIOp::create(
                vb, loc,
                arith::AddIOp::create(vb, loc,
                                      arith::MulIOp::create(vb, loc, r, indexConst(vb, loc, hc)),
                                      indexConst(vb, loc, i)),
                indexConst(vb, loc, dim)),
            first);
        Value offset = arith::IndexCastUIOp::create(
            vb, loc, i64, arith::MulIOp::create(vb, loc, element, indexConst(vb, loc, 2)));
        llvm::append_range(values, load16BytesAsF32(vb, loc, base, offset));
      }
      scf::YieldOp::create(vb, loc, values);
      OpBuilder eb = OpBuilder::atBlockBegin(loads.elseBlock());
      SmallVector<Value> elements;
      for (int64_t i = 0; i < hc; ++i)
        for (int64_t e = 0; e < 8; ++e)
          elements.push_back(loadF32(
              eb, loc, streams,
              ValueRange{r, indexConst(eb, loc, i),
                         arith::AddIOp::create(eb, loc, first, indexConst(eb, loc, e))}));
      scf::YieldOp::create(eb, loc, elements);
    }
    SmallVector<Value> weights;
    for (int64_t i = 0; i < hc; ++i)
      weights.push_back(k.load(pre, {r, k.idx(i)}));
    // The collapse kernel's sum (from 0, stream 0 first), rounded to bf16 as
    // its output holds it.
    SmallVector<Value> values;
    for (int64_t e = 0; e < 8; ++e) {
      Value acc = k.f32(0.f);
      for (int64_t i = 0; i < hc; ++i)
        acc = k.add(acc, k.mul(weights[size_t(i)], loads.getResult(size_t(i * 8 + e))));
      values.push_back(
          arith::ExtFOp::create(b, loc, f32, arith::TruncFOp::create(b, loc, bf16, acc).getResult())
              .getResult());
    }
    return values;
  };
  emitRmsNormWords(b, loc, streams, Value(), w, y, warpSums, dim, eps, lanes, collapsedWord);
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

} // namespace csa::codegen

//===- AttentionIndexLists.cpp - Sparse attention's rows and lists --------===//
//
// See AttentionIndexLists.h. Integer index arithmetic only: the CPU and the
// GPU build the same lists.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/AttentionIndexLists.h"

#include "codegen/host/KernelBuilder.h"
#include "codegen/host/ScalarOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

namespace csa::codegen {

using namespace scalar;

func::FuncOp buildGatherCacheEntriesKernel(ModuleOp module, const std::string &name) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type i8 = b.getI8Type(), i64 = b.getI64Type(), indexType = b.getIndexType();
  const int64_t dyn = ShapedType::kDynamic;
  func::FuncOp fn = startKernel(b, module, name,
                                {MemRefType::get({dyn}, i8),
                                 MemRefType::get({dyn}, b.getI32Type()),
                                 MemRefType::get({dyn, dyn}, i8), i64, i64});
  Value cache = fn.getArgument(0), which = fn.getArgument(1), out = fn.getArgument(2);
  Value entryBytes = arith::IndexCastOp::create(b, loc, indexType, fn.getArgument(3));
  Value offset = arith::IndexCastOp::create(b, loc, indexType, fn.getArgument(4));
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1);
  Value n = memref::DimOp::create(b, loc, out, zero);
  Value rowBytes = memref::DimOp::create(b, loc, out, one);
  Value cacheBytes = memref::DimOp::create(b, loc, cache, zero);
  Value zeroByte = arith::ConstantOp::create(b, loc, b.getI8IntegerAttr(0));
  loop(b, loc, zero, n, one, {}, [&](Value r, ValueRange) -> SmallVector<Value> {
    Value entry = arith::IndexCastOp::create(b, loc, indexType,
                                             memref::LoadOp::create(b, loc, which, r));
    Value first = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, entry, entryBytes), offset);
    // A top-k set passed as `which` as it is (a decode step's) holds -1 for
    // "nothing selected": such a row, and one past the cache, becomes zeros.
    Value valid = arith::AndIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, entry, zero),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle,
                              arith::AddIOp::create(b, loc, first, rowBytes),
                              cacheBytes));
    Value start = arith::SelectOp::create(b, loc, valid, first, zero);
    loop(b, loc, zero, rowBytes, one, {}, [&](Value c, ValueRange) -> SmallVector<Value> {
      Value at = arith::SelectOp::create(
          b, loc, valid, arith::AddIOp::create(b, loc, start, c), zero);
      Value byte = memref::LoadOp::create(b, loc, cache, ValueRange{at});
      memref::StoreOp::create(b, loc, arith::SelectOp::create(b, loc, valid, byte, zeroByte),
                              out, ValueRange{r, c});
      return {};
    });
    return {};
  });
  func::ReturnOp::create(b, loc);
  return fn;
}

namespace {

/// The selected part of an index list from top-k sets: idx[i, column + j]
/// is -1 where selected[i, j] names nothing (< 0; in entry order also an
/// entry the cache does not hold, >= held), else firstRow + i x k + j (set
/// order: the sets' rows gathered as they are) or firstRow + selected[i, j]
/// (entry order: the held entries gathered in order). Arguments (selected,
/// idx, column, firstRow[, held]).
func::FuncOp buildIndexFromSets(ModuleOp module, const std::string &name, bool entryOrder) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type i32 = b.getI32Type(), i64 = b.getI64Type(), indexType = b.getIndexType();
  const int64_t dyn = ShapedType::kDynamic;
  auto setType = MemRefType::get({dyn, dyn}, i32);
  SmallVector<Type> args{setType, setType, i64, i64};
  if (entryOrder)
    args.push_back(i64);
  func::FuncOp fn = startKernel(b, module, name, args);
  Value selected = fn.getArgument(0), idx = fn.getArgument(1);
  Value column = arith::IndexCastOp::create(b, loc, indexType, fn.getArgument(2));
  Value firstRow = arith::TruncIOp::create(b, loc, i32, fn.getArgument(3));
  Value held = entryOrder ? arith::TruncIOp::create(b, loc, i32, fn.getArgument(4)).getResult()
                          : Value();
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1);
  Value zeroI32 = intConst(b, loc, i32, 0), minusOne = intConst(b, loc, i32, -1);
  Value n = memref::DimOp::create(b, loc, selected, zero);
  Value k = memref::DimOp::create(b, loc, selected, one);
  Value kI32 = arith::IndexCastOp::create(b, loc, i32, k);
  loop(b, loc, zero, n, one, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
    loop(b, loc, zero, k, one, {}, [&](Value j, ValueRange) -> SmallVector<Value> {
      Value entry = memref::LoadOp::create(b, loc, selected, ValueRange{i, j});
      Value none = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, entry, zeroI32);
      Value row;
      if (entryOrder) {
        none = arith::OrIOp::create(
            b, loc, none, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, entry, held));
        row = arith::AddIOp::create(b, loc, firstRow, entry);
      } else {
        Value iI32 = arith::IndexCastOp::create(b, loc, i32, i);
        row = arith::AddIOp::create(
            b, loc, arith::AddIOp::create(b, loc, firstRow, arith::MulIOp::create(b, loc, iI32, kI32)),
            arith::IndexCastOp::create(b, loc, i32, j));
      }
      memref::StoreOp::create(b, loc, arith::SelectOp::create(b, loc, none, minusOne, row),
                              idx, ValueRange{i, arith::AddIOp::create(b, loc, column, j)});
      return {};
    });
    return {};
  });
  func::ReturnOp::create(b, loc);
  return fn;
}

} // namespace

func::FuncOp buildSelectedIndexKernel(ModuleOp module, const std::string &name) {
  return buildIndexFromSets(module, name, /*entryOrder=*/false);
}

func::FuncOp buildWindowIndexKernel(ModuleOp module, const std::string &name) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type i32 = b.getI32Type(), i64 = b.getI64Type();
  const int64_t dyn = ShapedType::kDynamic;
  func::FuncOp fn = startKernel(b, module, name,
                                {MemRefType::get({dyn, dyn}, i32), i64, i64});
  Value idx = fn.getArgument(0), position = fn.getArgument(1),
        ringStart = fn.getArgument(2);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1);
  Value oneI64 = intConst(b, loc, i64, 1), minusOne = intConst(b, loc, i32, -1);
  Value n = memref::DimOp::create(b, loc, idx, zero);
  Value width = memref::DimOp::create(b, loc, idx, one);
  Value window = arith::IndexCastOp::create(b, loc, i64, width);
  // The oldest slot: the one after the newest (position % W).
  Value oldest = arith::AddIOp::create(
      b, loc, arith::RemSIOp::create(b, loc, position, window), oneI64);
  Value firstHeld = arith::AddIOp::create(
      b, loc, arith::SubIOp::create(b, loc, position, window), oneI64);
  loop(b, loc, zero, n, one, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
    loop(b, loc, zero, width, one, {}, [&](Value j, ValueRange) -> SmallVector<Value> {
      Value jI64 = arith::IndexCastOp::create(b, loc, i64, j);
      Value slot = arith::RemSIOp::create(
          b, loc, arith::AddIOp::create(b, loc, oldest, jI64), window);
      Value p = arith::AddIOp::create(b, loc, firstHeld, jI64);
      Value empty = arith::OrIOp::create(
          b, loc,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, slot, position),
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, p, ringStart));
      Value entry = arith::SelectOp::create(
          b, loc, empty, minusOne, arith::TruncIOp::create(b, loc, i32, slot));
      memref::StoreOp::create(b, loc, entry, idx, ValueRange{i, j});
      return {};
    });
    return {};
  });
  func::ReturnOp::create(b, loc);
  return fn;
}

func::FuncOp buildRowsWindowIndexKernel(ModuleOp module, const std::string &name) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type i32 = b.getI32Type(), i64 = b.getI64Type();
  const int64_t dyn = ShapedType::kDynamic;
  func::FuncOp fn = startKernel(b, module, name,
                                {MemRefType::get({dyn, dyn}, i32), i64, i64, i64, i64});
  Value idx = fn.getArgument(0);
  Value position = fn.getArgument(1), ringStart = fn.getArgument(2),
        window = fn.getArgument(3);
  Value chunk = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, fn.getArgument(4),
                                      intConst(b, loc, i64, 0));
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1);
  Value zeroI64 = intConst(b, loc, i64, 0), oneI64 = intConst(b, loc, i64, 1);
  Value minusOne = intConst(b, loc, i64, -1);
  Value n = memref::DimOp::create(b, loc, idx, zero);
  Value columns = memref::DimOp::create(b, loc, idx, one);
  // Positions before this are not in the ring (nor before 0).
  Value firstHeld = arith::MaxSIOp::create(b, loc, ringStart, zeroI64);
  // A perfect nest (all work in the inner body): a thread per element on
  // the GPU.
  loop(b, loc, zero, n, one, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
    loop(b, loc, zero, columns, one, {}, [&](Value j, ValueRange) -> SmallVector<Value> {
      Value iI64 = arith::IndexCastOp::create(b, loc, i64, i);
      // The call's own rows: the window ending at row i.
      Value first = arith::MaxSIOp::create(
          b, loc, zeroI64,
          arith::AddIOp::create(b, loc, arith::SubIOp::create(b, loc, iI64, window), oneI64));
      // A chunk: the oldest position in row i's window.
      Value oldest = arith::AddIOp::create(
          b, loc,
          arith::SubIOp::create(b, loc, arith::AddIOp::create(b, loc, position, iI64), window),
          oneI64);
      Value jI64 = arith::IndexCastOp::create(b, loc, i64, j);
      Value r = arith::AddIOp::create(b, loc, first, jI64);
      Value own = arith::SelectOp::create(
          b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, r, iI64), minusOne, r);
      Value p = arith::AddIOp::create(b, loc, oldest, jI64);
      Value before = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, p, position);
      // p % window only where p >= firstHeld >= 0 (the select below).
      Value slot = arith::RemSIOp::create(
          b, loc, arith::MaxSIOp::create(b, loc, p, zeroI64), window);
      Value fresh = arith::AddIOp::create(b, loc, window,
                                          arith::SubIOp::create(b, loc, p, position));
      Value kept = arith::SelectOp::create(
          b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, p, firstHeld),
          minusOne, arith::SelectOp::create(b, loc, before, slot, fresh));
      Value entry = arith::SelectOp::create(b, loc, chunk, kept, own);
      memref::StoreOp::create(b, loc, arith::TruncIOp::create(b, loc, i32, entry), idx,
                              ValueRange{i, j});
      return {};
    });
    return {};
  });
  func::ReturnOp::create(b, loc);
  return fn;
}

func::FuncOp buildEntryIndexKernel(ModuleOp module, const std::string &name) {
  return buildIndexFromSets(module, name, /*entryOrder=*/true);
}

} // namespace csa::codegen

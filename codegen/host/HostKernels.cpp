//===- HostKernels.cpp - Host (CPU) kernels generated as IR ---------------===//
#include "codegen/host/HostKernels.h"

#include "codegen/host/KernelBuilder.h"
#include "codegen/host/Transcendental.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;

namespace csa::codegen {

void loadHostKernelDialects(MLIRContext &context) {
  context.loadDialect<arith::ArithDialect, func::FuncDialect,
                      math::MathDialect, memref::MemRefDialect,
                      scf::SCFDialect, LLVM::LLVMDialect>();
}

namespace {
/// 1 / sqrt(mean(x^2) + eps) of a row whose element c `at(c)` loads (as
/// f32): the sum of squares in element order, kChainUnroll elements a loop
/// trip when they divide the row.
Value rmsNormScaleOfSum(KernelBuilder &k, int64_t dim, double eps, Value sumOfSquares) {
  Value var = k.add(k.div(sumOfSquares, k.f32(float(dim))), k.f32(float(eps)));
  return k.div(k.f32(1.f), k.sqrt(var));
}
Value rmsNormScale(KernelBuilder &k, int64_t dim, double eps,
                   const std::function<Value(Value)> &at) {
  Value sum = k.reduceUnrolled(dim, kChainUnroll, k.f32(0.f), [&](Value c, Value acc) {
    Value v = at(c);
    return k.add(acc, k.mul(v, v));
  });
  return rmsNormScaleOfSum(k, dim, eps, sum);
}
} // namespace

func::FuncOp buildRmsNormKernel(ModuleOp module, const std::string &name,
                                int64_t dim, double eps) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type bf16 = b.getBF16Type();
  auto rowsType = MemRefType::get({ShapedType::kDynamic, dim}, bf16);
  auto weightType = MemRefType::get({dim}, bf16);
  func::FuncOp fn = startKernel(b, module, name, {rowsType, weightType, rowsType});
  Value x = fn.getArgument(0), w = fn.getArgument(1), y = fn.getArgument(2);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1),
        cols = indexConst(b, loc, dim);
  Value rows = memref::DimOp::create(b, loc, x, zero);
  auto rowLoop = scf::ForOp::create(b, loc, zero, rows, one);
  b.setInsertionPointToStart(rowLoop.getBody());
  Value r = rowLoop.getInductionVar();
  KernelBuilder k(b, loc);
  Value inv = rmsNormScale(k, dim, eps, [&](Value c) { return loadF32(b, loc, x, ValueRange{r, c}); });
  auto outLoop = scf::ForOp::create(b, loc, zero, cols, one);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(outLoop.getBody());
    Value c = outLoop.getInductionVar();
    Value v = loadF32(b, loc, x, ValueRange{r, c});
    Value wv = loadF32(b, loc, w, c);
    Value scaled = arith::MulFOp::create(b, loc, wv,
                                         arith::MulFOp::create(b, loc, v, inv));
    Value out = arith::TruncFOp::create(b, loc, bf16, scaled);
    memref::StoreOp::create(b, loc, out, y, ValueRange{r, c});
  }
  b.setInsertionPointAfter(rowLoop);
  func::ReturnOp::create(b, loc);
  fn->setAttr(kRmsNormAttr,
              b.getDictionaryAttr({b.getNamedAttr("dim", b.getI64IntegerAttr(dim)),
                                   b.getNamedAttr("eps", b.getF64FloatAttr(eps))}));
  return fn;
}

namespace {
/// RmsNormBlockLanes's word form: a thread a 16-byte word of the row.
void buildRmsNormWordBody(func::FuncOp fn, int64_t dim, double eps,
                          const RmsNormBlockLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Block *entry = freshBody(fn, {lanes.sharedRowType, lanes.sharedScaleType});
  b.setInsertionPointToStart(entry);
  Value x = entry->getArgument(0), w = entry->getArgument(1), y = entry->getArgument(2),
        warpSums = entry->getArgument(3);
  emitRmsNormWords(b, loc, x, x, w, y, warpSums, dim, eps, lanes, {});
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}
} // namespace

void emitRmsNormWords(OpBuilder &b, Location loc, Value rows, Value x, Value w, Value y,
                      Value warpSums, int64_t dim, double eps, const RmsNormBlockLanes &lanes,
                      const RmsNormWordFn &xWord) {
  KernelBuilder k(b, loc);
  Type f32 = b.getF32Type(), i32 = b.getI32Type(), i64 = b.getI64Type();
  const int64_t words = dim / 8, warps = lanes.threads / 32;
  auto ult = [&](Value a, Value c) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, a, c).getResult();
  };
  Value r = lanes.row(b, loc), tid = lanes.thread(b, loc);
  auto active = scf::IfOp::create(b, loc, ult(r, k.dim(rows, 0)), /*withElse=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  // Threads past the words load the last word and add nothing.
  Value owns = ult(tid, k.idx(words));
  Value first = k.muli(arith::MinUIOp::create(b, loc, tid, k.idx(words - 1)), k.idx(8));
  Value xBase, xAligned;
  if (!xWord)
    std::tie(xBase, xAligned) = bytePointer(b, loc, x, lanes.addressSpace);
  auto [wBase, wAligned] = bytePointer(b, loc, w, lanes.addressSpace);
  auto [yBase, yAligned] = bytePointer(b, loc, y, lanes.addressSpace);
  Value aligned =
      xWord ? arith::AndIOp::create(b, loc, wAligned, yAligned).getResult()
            : arith::AndIOp::create(b, loc, arith::AndIOp::create(b, loc, xAligned, wAligned),
                                    yAligned)
                  .getResult();
  Value rowElement = k.addi(k.muli(r, k.idx(dim)), first);
  auto byteOffset = [&](OpBuilder &nb, Value element) -> Value {
    return arith::IndexCastUIOp::create(
        nb, loc, i64, arith::MulIOp::create(nb, loc, element, indexConst(nb, loc, 2)));
  };
  // The thread's 8 x (from xWord where given) then 8 weights, as f32.
  SmallVector<Value> computed = xWord ? xWord(b, loc, r, first) : SmallVector<Value>();
  const int64_t loaded = xWord ? 8 : 16;
  auto loads = scf::IfOp::create(b, loc, SmallVector<Type>(loaded, f32), aligned, /*withElse=*/true);
  {
    OpBuilder vb = OpBuilder::atBlockBegin(loads.thenBlock());
    SmallVector<Value> values;
    if (!xWord)
      llvm::append_range(values, load16BytesAsF32(vb, loc, xBase, byteOffset(vb, rowElement)));
    llvm::append_range(values, load16BytesAsF32(vb, loc, wBase, byteOffset(vb, first)));
    scf::YieldOp::create(vb, loc, values);
    OpBuilder eb = OpBuilder::atBlockBegin(loads.elseBlock());
    SmallVector<Value> elements;
    for (int64_t e = 0; e < 8 && !xWord; ++e)
      elements.push_back(loadF32(eb, loc, x, ValueRange{r, arith::AddIOp::create(eb, loc, first, indexConst(eb, loc, e))}));
    for (int64_t e = 0; e < 8; ++e)
      elements.push_back(loadF32(eb, loc, w, ValueRange{arith::AddIOp::create(eb, loc, first, indexConst(eb, loc, e))}));
    scf::YieldOp::create(eb, loc, elements);
  }
  ValueRange xs = xWord ? ValueRange(computed) : loads.getResults().take_front(8),
             ws = xWord ? loads.getResults() : loads.getResults().drop_front(8);
  Value own = k.f32(0.f);
  for (Value v : xs)
    own = k.add(own, k.mul(v, v));
  own = arith::SelectOp::create(b, loc, owns, own, k.f32(0.f));
  emitWarpSumsToShared(b, loc, own, tid, warpSums, lanes.shuffleXor, lanes.barrier);
  // Every thread adds the warps' sums in the same order (the same bits).
  Value total = emitWarpSumsInOrder(b, loc, warpSums, warps);
  Value inv = rmsNormScaleOfSum(k, dim, eps, total);
  SmallVector<Value> outs; // f32; each branch below rounds them to bf16 in
  // its own block (a bf16 value live across blocks makes a host's
  // instruction selection call __truncsfbf2)
  for (int64_t e = 0; e < 8; ++e)
    outs.push_back(k.mul(ws[size_t(e)], k.mul(xs[size_t(e)], inv)));
  auto store = scf::IfOp::create(b, loc, owns, /*withElse=*/false);
  b.setInsertionPoint(store.thenBlock()->getTerminator());
  auto ifAligned = scf::IfOp::create(b, loc, aligned, /*withElse=*/true);
  {
    OpBuilder vb = OpBuilder::atBlockTerminator(ifAligned.thenBlock());
    Value vec = LLVM::UndefOp::create(vb, loc, VectorType::get({4}, i32));
    for (int64_t q = 0; q < 4; ++q) {
      auto half = [&](int64_t e) -> Value {
        Value h = arith::TruncFOp::create(vb, loc, vb.getBF16Type(), outs[size_t(e)]);
        return arith::ExtUIOp::create(vb, loc, i32,
                                      arith::BitcastOp::create(vb, loc, vb.getI16Type(), h));
      };
      Value word = arith::OrIOp::create(
          vb, loc, half(2 * q),
          arith::ShLIOp::create(vb, loc, half(2 * q + 1),
                                arith::ConstantOp::create(vb, loc, vb.getI32IntegerAttr(16))));
      vec = LLVM::InsertElementOp::create(vb, loc, vec, word,
                                          LLVM::ConstantOp::create(vb, loc, i32, int32_t(q)));
    }
    Value ptr = LLVM::GEPOp::create(vb, loc, yBase.getType(), vb.getI8Type(), yBase,
                                    ValueRange{byteOffset(vb, rowElement)});
    LLVM::StoreOp::create(vb, loc, vec, ptr, /*alignment=*/16);
    OpBuilder eb = OpBuilder::atBlockTerminator(ifAligned.elseBlock());
    for (int64_t e = 0; e < 8; ++e)
      memref::StoreOp::create(eb, loc, arith::TruncFOp::create(eb, loc, eb.getBF16Type(), outs[size_t(e)]), y,
                              ValueRange{r, arith::AddIOp::create(eb, loc, first, indexConst(eb, loc, e))});
  }
}

void buildRmsNormBlockBody(func::FuncOp fn, int64_t dim, double eps,
                           const RmsNormBlockLanes &lanes) {
  if (lanes.shuffleXor) {
    assert(rmsNormWordFormFits(dim, lanes.threads) && lanes.threads * 8 >= dim &&
           "the word form needs whole words and a thread a word");
    buildRmsNormWordBody(fn, dim, eps, lanes);
    return;
  }
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Block *entry = freshBody(fn, {lanes.sharedRowType, lanes.sharedScaleType});
  b.setInsertionPointToStart(entry);
  KernelBuilder k(b, loc);
  Value x = entry->getArgument(0), w = entry->getArgument(1), y = entry->getArgument(2),
        sharedRow = entry->getArgument(3), sharedScale = entry->getArgument(4);
  const int64_t threads = lanes.threads;
  auto ult = [&](Value a, Value c) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, a, c).getResult();
  };
  Value r = lanes.row(b, loc), tid = lanes.thread(b, loc);
  // A block past the rows (the grid has at least one) skips everything.
  auto active = scf::IfOp::create(b, loc, ult(r, k.dim(x, 0)), /*withElse=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  // Element tid + s * threads of the row is this thread's s-th; its loads
  // come first (from a clamped column), then the stores that exist.
  SmallVector<std::pair<Value, Value>> staged; // (column, valid)
  SmallVector<Value> values;
  for (int64_t s = 0; s * threads < dim; ++s) {
    Value c = k.addi(tid, k.idx(s * threads));
    staged.push_back({c, ult(c, k.idx(dim))});
    values.push_back(k.loadF32(x, {r, arith::MinUIOp::create(b, loc, c, k.idx(dim - 1))}));
  }
  auto forEachOwn = [&](const std::function<void(size_t)> &body) {
    for (size_t s = 0; s < staged.size(); ++s) {
      auto ifValid = scf::IfOp::create(b, loc, staged[s].second, /*withElse=*/false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(ifValid.thenBlock()->getTerminator());
      body(s);
    }
  };
  if (lanes.treeSum) {
    // Each thread's squares, added as a tree in the first `threads` floats
    // of the row buffer.
    Value own = k.f32(0.f);
    for (size_t s = 0; s < staged.size(); ++s)
      own = k.add(own, arith::SelectOp::create(b, loc, staged[s].second,
                                               k.mul(values[s], values[s]), k.f32(0.f)));
    k.store(own, sharedRow, {tid});
    lanes.barrier(b, loc);
    emitBlockTreeSum(b, loc, sharedRow, tid, threads, lanes.barrier);
  } else {
    forEachOwn([&](size_t s) { k.store(values[s], sharedRow, {staged[s].first}); });
    lanes.barrier(b, loc);
  }
  // Thread 0: the host kernel's mean and 1 / sqrt (of the tree's sum, or of
  // the host kernel's sum of squares walked in its order).
  auto first = scf::IfOp::create(
      b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, k.idx(0)),
      /*withElse=*/false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(first.thenBlock()->getTerminator());
    Value inv = lanes.treeSum
                    ? rmsNormScaleOfSum(k, dim, eps, k.load(sharedRow, {k.idx(0)}))
                    : rmsNormScale(k, dim, eps, [&](Value c) { return k.load(sharedRow, {c}); });
    k.store(inv, sharedScale, {k.idx(0)});
  }
  lanes.barrier(b, loc);
  Value inv = k.load(sharedScale, {k.idx(0)});
  forEachOwn([&](size_t s) {
    Value c = staged[s].first;
    k.storeBf16(k.mul(k.loadF32(w, {c}), k.mul(values[s], inv)), y, {r, c});
  });
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

std::pair<Value, Value> emitRopeSinCos(OpBuilder &b, Location loc, Value position, Value freq,
                                       bool inverse) {
  auto [s, c] = emitSinCos32(b, loc, arith::MulFOp::create(b, loc, position, freq));
  if (inverse)
    s = arith::NegFOp::create(b, loc, s);
  return {s, c};
}

std::pair<Value, Value> emitRopeRotate(OpBuilder &b, Location loc, Value a, Value bv, Value s,
                                       Value c) {
  // (a + ib)(c + is), rounded once per component.
  Value re = arith::SubFOp::create(b, loc, arith::MulFOp::create(b, loc, a, c),
                                   arith::MulFOp::create(b, loc, bv, s));
  Value im = arith::AddFOp::create(b, loc, arith::MulFOp::create(b, loc, a, s),
                                   arith::MulFOp::create(b, loc, bv, c));
  return {re, im};
}

func::FuncOp buildRopeKernel(ModuleOp module, const std::string &name,
                             const std::vector<float> &freqs, bool inverse) {
  OpBuilder b(module.getContext());
  Location loc = module.getLoc();
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type(), i64 = b.getI64Type();
  const int64_t pairs = int64_t(freqs.size());

  // The frequency table is part of the generated code.
  b.setInsertionPointToEnd(module.getBody());
  auto tableType = MemRefType::get({pairs}, f32);
  std::string tableName = name + "_freqs";
  memref::GlobalOp::create(
      b, loc, tableName, b.getStringAttr("private"), tableType,
      DenseElementsAttr::get(RankedTensorType::get({pairs}, f32),
                             ArrayRef<float>(freqs)),
      /*constant=*/true, /*alignment=*/nullptr);

  auto rowsType =
      MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic}, bf16);
  func::FuncOp fn = startKernel(b, module, name, {rowsType, i64, i64, i64});
  Value x = fn.getArgument(0);
  Value position = fn.getArgument(1), stride = fn.getArgument(2),
        rowsPerPosition = fn.getArgument(3);
  Value table = memref::GetGlobalOp::create(b, loc, tableType, tableName);
  Value zero = indexConst(b, loc, 0), one = indexConst(b, loc, 1),
        two = indexConst(b, loc, 2);
  Value rows = memref::DimOp::create(b, loc, x, zero);
  Value width = memref::DimOp::create(b, loc, x, one);
  Value tail = arith::SubIOp::create(b, loc, width, indexConst(b, loc, 2 * pairs));
  auto rowLoop = scf::ForOp::create(b, loc, zero, rows, one);
  b.setInsertionPointToStart(rowLoop.getBody());
  Value r = rowLoop.getInductionVar();
  Value rowI64 = arith::IndexCastOp::create(b, loc, i64, r);
  Value step = arith::DivSIOp::create(b, loc, rowI64, rowsPerPosition);
  Value pos = arith::AddIOp::create(
      b, loc, position, arith::MulIOp::create(b, loc, step, stride));
  Value posF = arith::SIToFPOp::create(b, loc, f32, pos);
  auto pairLoop = scf::ForOp::create(b, loc, zero, indexConst(b, loc, pairs), one);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(pairLoop.getBody());
    Value i = pairLoop.getInductionVar();
    auto [s, c] = emitRopeSinCos(b, loc, posF, memref::LoadOp::create(b, loc, table, i),
                                 inverse);
    Value even = arith::AddIOp::create(b, loc, tail,
                                       arith::MulIOp::create(b, loc, i, two));
    Value odd = arith::AddIOp::create(b, loc, even, one);
    Value a = loadF32(b, loc, x, ValueRange{r, even});
    Value bv = loadF32(b, loc, x, ValueRange{r, odd});
    auto [re, im] = emitRopeRotate(b, loc, a, bv, s, c);
    memref::StoreOp::create(b, loc, arith::TruncFOp::create(b, loc, bf16, re),
                            x, ValueRange{r, even});
    memref::StoreOp::create(b, loc, arith::TruncFOp::create(b, loc, bf16, im),
                            x, ValueRange{r, odd});
  }
  b.setInsertionPointAfter(rowLoop);
  func::ReturnOp::create(b, loc);
  return fn;
}

} // namespace csa::codegen

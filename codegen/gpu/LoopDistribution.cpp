//===- LoopDistribution.cpp - Kernels' loops over GPU threads ------------===//
#include "codegen/gpu/LoopDistribution.h"

#include "codegen/gpu/NvvmLanes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

using namespace mlir;

namespace csa::codegen::nvvm {

namespace {
/// The single top-level scf.for of `fn` that walks rows: no results, from 0
/// by a constant step to dim 0 of an argument (`rowsArg`), or null.
scf::ForOp findRowLoop(func::FuncOp fn, int64_t &rowsArg, int64_t &step) {
  Block &entry = fn.getBody().front();
  scf::ForOp loop;
  for (Operation &op : entry) {
    if (auto f = dyn_cast<scf::ForOp>(op)) {
      if (loop)
        return {}; // two top-level loops
      loop = f;
    }
  }
  if (!loop || loop.getNumResults() != 0)
    return {};
  auto lb = getConstantIntValue(loop.getLowerBound());
  auto constStep = getConstantIntValue(loop.getStep());
  auto dim = loop.getUpperBound().getDefiningOp<memref::DimOp>();
  if (!lb || *lb != 0 || !constStep || !dim)
    return {};
  auto source = dyn_cast<BlockArgument>(dim.getSource());
  auto index = dim.getConstantIndex();
  if (!source || source.getOwner() != &entry || !index || *index != 0)
    return {};
  rowsArg = source.getArgNumber();
  step = *constStep;
  return loop;
}

} // namespace

/// Distributes the single top-level scf.for of `fn` over threads; returns the
/// argument whose dimension 0 bounds it (-1 if the loop does not have the
/// shape that allows it: the function is then left alone).
int64_t distributeRows(func::FuncOp fn, int64_t &rowsPerThread) {
  Block &entry = fn.getBody().front();
  int64_t rowsArg = -1;
  scf::ForOp loop = findRowLoop(fn, rowsArg, rowsPerThread);
  if (!loop)
    return -1;

  // Scratch buffers become per thread: allocations and deallocations at the
  // top level move into the iteration.
  SmallVector<Operation *> allocs, deallocs;
  for (Operation &op : entry) {
    if (isa<memref::AllocOp, memref::AllocaOp>(op)) {
      // Only the loop and its deallocation may use a scratch buffer.
      for (Operation *user : op.getUsers())
        if (!isa<memref::DeallocOp>(user) && !loop->isAncestor(user))
          return -1;
      allocs.push_back(&op);
    }
    if (isa<memref::DeallocOp>(op))
      deallocs.push_back(&op);
  }
  OpBuilder b(loop);
  Location loc = loop.getLoc();
  Value gid = globalThreadId(b, loc);
  Value iv = arith::MulIOp::create(b, loc, gid, loop.getStep());
  Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, iv,
                                        loop.getUpperBound());
  auto guard = scf::IfOp::create(b, loc, inRange, /*withElse=*/false);
  Block *body = guard.thenBlock();
  OpBuilder inner = OpBuilder::atBlockBegin(body);
  for (Operation *alloc : allocs)
    alloc->moveBefore(body, body->begin());
  inner.setInsertionPoint(body->getTerminator());
  IRMapping map;
  map.map(loop.getInductionVar(), iv);
  for (Operation &op : loop.getBody()->without_terminator())
    inner.clone(op, map);
  for (Operation *dealloc : deallocs)
    dealloc->moveBefore(body->getTerminator());
  loop->erase();
  return rowsArg;
}

/// Gives each iteration of the single top-level loop of `fn` (from 0 by 1 to
/// a constant, no results, nothing else in the entry block but constants and
/// the return) a thread. Returns the trip count, or -1 (fn untouched).
int64_t distributeChannels(func::FuncOp fn) {
  Block &entry = fn.getBody().front();
  scf::ForOp loop;
  for (Operation &op : entry) {
    if (auto f = dyn_cast<scf::ForOp>(op)) {
      if (loop)
        return -1;
      loop = f;
    } else if (!isa<arith::ConstantOp, func::ReturnOp>(op)) {
      return -1;
    }
  }
  if (!loop || loop.getNumResults() != 0)
    return -1;
  auto lb = getConstantIntValue(loop.getLowerBound());
  auto ub = getConstantIntValue(loop.getUpperBound());
  auto step = getConstantIntValue(loop.getStep());
  if (!lb || *lb != 0 || !ub || *ub < 1 || !step || *step != 1)
    return -1;
  OpBuilder b(loop);
  Location loc = loop.getLoc();
  Value gid = globalThreadId(b, loc);
  Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, gid,
                                        loop.getUpperBound());
  auto guard = scf::IfOp::create(b, loc, inRange, /*withElse=*/false);
  OpBuilder inner = OpBuilder::atBlockTerminator(guard.thenBlock());
  IRMapping map;
  map.map(loop.getInductionVar(), gid);
  for (Operation &op : loop.getBody()->without_terminator())
    inner.clone(op, map);
  loop->erase();
  return *ub;
}

/// Distributes the whole perfect nest under the top-level row loop of `fn`
/// (loops from 0 by 1 with no results, each the only loop of its parent's
/// body and its last op but the yield; trip counts constant or a dimension of
/// an argument, such as the keys an index score row covers): one thread per
/// (row, inner iterations), the innermost loop fastest so neighbouring threads
/// touch neighbouring elements. Returns the argument whose dimension 0 bounds
/// the rows and sets `elementsPerRow` (the constant trip counts' product) and
/// `elementDims` ((argument, dimension) of each dynamic one), or -1 (fn
/// untouched) when the nest has no inner loop or another shape.
int64_t distributeElements(func::FuncOp fn, int64_t &elementsPerRow,
                           std::vector<std::pair<int64_t, int64_t>> &elementDims) {
  Block &entry = fn.getBody().front();
  int64_t rowsArg = -1, step = 0;
  scf::ForOp rowLoop = findRowLoop(fn, rowsArg, step);
  if (!rowLoop || step != 1)
    return -1;
  for (Operation &op : entry) {
    if (isa<memref::AllocOp, memref::DeallocOp>(op))
      return -1; // heap scratch: the rows rule handles it
    // Stack scratch becomes per thread: only the nest may use it.
    if (isa<memref::AllocaOp>(op))
      for (Operation *user : op.getUsers())
        if (!rowLoop->isAncestor(user))
          return -1;
  }
  // The nest: each next loop is its parent's last op but the yield, constant
  // bounds, no results; the ops before it only read memory.
  SmallVector<scf::ForOp> nest{rowLoop};
  SmallVector<Value> trips; ///< constants, or memref.dim ops of the entry
  std::vector<std::pair<int64_t, int64_t>> dynamicDims;
  elementsPerRow = 1;
  while (true) {
    Block *body = nest.back().getBody();
    Operation *last = body->getTerminator()->getPrevNode();
    auto inner = dyn_cast_or_null<scf::ForOp>(last);
    if (!inner || inner.getNumResults() != 0)
      break;
    auto ilb = getConstantIntValue(inner.getLowerBound());
    auto iub = getConstantIntValue(inner.getUpperBound());
    auto istep = getConstantIntValue(inner.getStep());
    if (!ilb || *ilb != 0 || !istep || *istep != 1)
      break;
    // A dynamic trip count: a dimension of an argument, read in the entry
    // block (so it dominates the thread index arithmetic).
    std::optional<std::pair<int64_t, int64_t>> dynamic;
    if (auto dim = inner.getUpperBound().getDefiningOp<memref::DimOp>()) {
      auto source = dyn_cast<BlockArgument>(dim.getSource());
      auto index = dim.getConstantIndex();
      if (source && source.getOwner() == &entry && index &&
          dim->getBlock() == &entry && dim->isBeforeInBlock(rowLoop))
        dynamic = std::make_pair(int64_t(source.getArgNumber()), *index);
    }
    if (!dynamic && (!iub || *iub < 1))
      break;
    bool readOnly = true;
    for (Operation &op : body->without_terminator())
      if (&op != last && !isMemoryEffectFree(&op) &&
          !isa<memref::LoadOp, memref::DimOp>(op))
        readOnly = false;
    if (!readOnly)
      break;
    nest.push_back(inner);
    trips.push_back(dynamic ? inner.getUpperBound() : Value());
    if (dynamic)
      dynamicDims.push_back(*dynamic);
    else
      elementsPerRow *= *iub;
  }
  if (trips.empty())
    return -1;
  elementDims = dynamicDims;

  SmallVector<Operation *> allocas;
  for (Operation &op : entry)
    if (isa<memref::AllocaOp>(op))
      allocas.push_back(&op);
  OpBuilder b(rowLoop);
  Location loc = rowLoop.getLoc();
  auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
  // Constant trip counts are materialized here: the loops' own constants
  // may live inside the nest, which goes away.
  for (size_t k = 0; k < trips.size(); ++k)
    if (!trips[k])
      trips[k] = c(*getConstantIntValue(nest[k + 1].getUpperBound()));
  Value gid = globalThreadId(b, loc);
  Value total = rowLoop.getUpperBound();
  for (Value t : trips)
    total = arith::MulIOp::create(b, loc, total, t);
  Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, gid, total);
  auto guard = scf::IfOp::create(b, loc, inRange, /*withElse=*/false);
  Block *then = guard.thenBlock();
  for (Operation *alloca : allocas)
    alloca->moveBefore(then, then->begin());
  OpBuilder inner = OpBuilder::atBlockTerminator(then);
  // gid = ((r * t1 + i1) * t2 + i2) ...: the innermost index fastest.
  SmallVector<Value> ivs(nest.size());
  Value rest = gid;
  for (size_t k = nest.size(); k-- > 1;) {
    ivs[k] = arith::RemUIOp::create(inner, loc, rest, trips[k - 1]);
    rest = arith::DivUIOp::create(inner, loc, rest, trips[k - 1]);
  }
  ivs[0] = rest;
  IRMapping map;
  for (size_t k = 0; k < nest.size(); ++k) {
    map.map(nest[k].getInductionVar(), ivs[k]);
    for (Operation &op : nest[k].getBody()->without_terminator()) {
      if (k + 1 < nest.size() && &op == nest[k + 1].getOperation())
        break;
      inner.clone(op, map);
    }
  }
  rowLoop->erase();
  return rowsArg;
}

/// Runs all of `fn` on thread 0 only; results (if any) are 0 elsewhere.
void singleThread(func::FuncOp fn) {
  Block &entry = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  OpBuilder b(&entry, entry.begin());
  Location loc = fn.getLoc();
  Value gid = globalThreadId(b, loc);
  Value first = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::eq, gid,
      arith::ConstantIndexOp::create(b, loc, 0));
  auto guard = scf::IfOp::create(b, loc, fn.getResultTypes(), first,
                                 /*withElse=*/true);
  // Move every op after the guard (but the return) into its then-branch.
  Block *then = guard.thenBlock();
  SmallVector<Operation *> toMove;
  for (Operation *op = guard->getNextNode(); op != ret; op = op->getNextNode())
    toMove.push_back(op);
  OpBuilder thenBuilder = OpBuilder::atBlockEnd(then);
  if (!fn.getResultTypes().empty()) {
    for (Operation *op : toMove)
      op->moveBefore(then, then->end());
    scf::YieldOp::create(thenBuilder, loc, ret.getOperands());
    OpBuilder elseBuilder = OpBuilder::atBlockEnd(guard.elseBlock());
    SmallVector<Value> zeros;
    for (Type t : fn.getResultTypes())
      zeros.push_back(arith::ConstantOp::create(elseBuilder, loc, t,
                                                elseBuilder.getZeroAttr(t)));
    scf::YieldOp::create(elseBuilder, loc, zeros);
    ret->setOperands(guard.getResults());
  } else {
    for (Operation *op : toMove)
      op->moveBefore(then->getTerminator());
  }
}

} // namespace csa::codegen::nvvm

//===- MhcKernels.cpp - Generated kernels for embedding and mHC ----------===//
//
// Each loop nest follows the reference's order of fp32 operations
// (models/reference/Kernels.cpp) so that results agree bit for bit.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/MhcKernels.h"

#include "codegen/host/GpuFormLanes.h"
#include "codegen/host/KernelBuilder.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <cmath>

using namespace mlir;

namespace csa::codegen {

func::FuncOp buildEmbedKernel(ModuleOp module, const std::string &name,
                              int64_t vocab, int64_t dim) {
  OpBuilder b(module.getContext());
  Type bf16 = b.getBF16Type();
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic}, b.getI32Type()),
       MemRefType::get({vocab, dim}, bf16),
       MemRefType::get({ShapedType::kDynamic, dim}, bf16)});
  KernelBuilder k(b, module.getLoc());
  Value tokens = fn.getArgument(0), table = fn.getArgument(1),
        out = fn.getArgument(2);
  k.loop(k.idx(0), k.dim(tokens, 0), [&](Value i) {
    Value id = arith::IndexCastOp::create(b, k.loc, b.getIndexType(),
                                          k.load(tokens, i));
    k.loop(dim, [&](Value e) { k.store(k.load(table, {id, e}), out, {i, e}); });
  });
  k.finish();
  return fn;
}

func::FuncOp buildHcExpandKernel(ModuleOp module, const std::string &name,
                                 int64_t hc, int64_t dim) {
  OpBuilder b(module.getContext());
  Type bf16 = b.getBF16Type();
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, dim}, bf16),
       MemRefType::get({ShapedType::kDynamic, hc, dim}, bf16)});
  KernelBuilder k(b, module.getLoc());
  Value h = fn.getArgument(0), streams = fn.getArgument(1);
  k.loop(k.idx(0), k.dim(h, 0), [&](Value n) {
    k.loop(hc, [&](Value j) {
      k.loop(dim, [&](Value e) { k.store(k.load(h, {n, e}), streams, {n, j, e}); });
    });
  });
  k.finish();
  return fn;
}

func::FuncOp buildHcMixSumsKernel(ModuleOp module, const std::string &name,
                                  int64_t hc, int64_t dim) {
  OpBuilder b(module.getContext());
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type();
  const int64_t mix = (2 + hc) * hc, width = hc * dim;
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, hc, dim}, bf16),
       MemRefType::get({mix, width}, f32),
       MemRefType::get({ShapedType::kDynamic, mix + 1}, f32)});
  KernelBuilder k(b, module.getLoc());
  Value x = fn.getArgument(0), fnW = fn.getArgument(1), sums = fn.getArgument(2);
  // Each sum is one sequential chain, in the reference's order; the mix+1
  // of a row are independent (a GPU thread each).
  k.loop(k.idx(0), k.dim(x, 0), [&](Value n) {
    k.loop(mix + 1, [&](Value j) {
      Value isDot = arith::CmpIOp::create(b, k.loc, arith::CmpIPredicate::ult, j,
                                          k.idx(mix));
      auto branch = scf::IfOp::create(b, k.loc, isDot, /*withElse=*/true);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(branch.thenBlock()->getTerminator());
        Value dot = k.reduce(hc, k.f32(0.f), [&](Value i, Value acc) {
          return k.reduceUnrolled(dim, kChainUnroll, acc, [&](Value e, Value a) {
            Value col = k.addi(k.muli(i, k.idx(dim)), e);
            return k.add(a, k.mul(k.loadF32(x, {n, i, e}), k.load(fnW, {j, col})));
          });
        });
        k.store(dot, sums, {n, j});
        b.setInsertionPoint(branch.elseBlock()->getTerminator());
        Value sq = k.reduce(hc, k.f32(0.f), [&](Value i, Value acc) {
          return k.reduceUnrolled(dim, kChainUnroll, acc, [&](Value e, Value a) {
            Value v = k.loadF32(x, {n, i, e});
            return k.add(a, k.mul(v, v));
          });
        });
        k.store(sq, sums, {n, j});
      }
    });
  });
  k.finish();
  fn->setAttr(kHcMixSumsAttr,
              b.getDictionaryAttr({b.getNamedAttr("hc", b.getI64IntegerAttr(hc)),
                                   b.getNamedAttr("dim", b.getI64IntegerAttr(dim))}));
  return fn;
}

int64_t hcMixSumsChunk(int64_t hc, int64_t dim, int64_t rowsPerTile,
                       int64_t chainsPerBlock, int64_t maxSharedBytes) {
  const int64_t width = hc * dim;
  for (int64_t chunk = 4096; chunk >= 32; chunk /= 2)
    if (width % chunk == 0 &&
        (rowsPerTile + chainsPerBlock) * (chunk + kHcMixSumsRowPad) * 4 <= maxSharedBytes)
      return chunk;
  return 0;
}

void buildHcMixSumsBlockBody(func::FuncOp fn, int64_t hc, int64_t dim,
                             const HcMixSumsBlockLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Block *entry = freshBody(fn, {lanes.sharedWeightType, lanes.sharedStreamsType});
  b.setInsertionPointToStart(entry);
  KernelBuilder k(b, loc);
  const int64_t mix = (2 + hc) * hc, width = hc * dim;
  const int64_t rows = lanes.rowsPerTile, chains = lanes.chainsPerBlock,
                chunk = lanes.chunk, threads = lanes.threads;
  Value x = entry->getArgument(0), fnW = entry->getArgument(1),
        sums = entry->getArgument(2), sharedW = entry->getArgument(3),
        sharedX = entry->getArgument(4);
  auto divu = [&](Value a, int64_t d) {
    return arith::DivUIOp::create(b, loc, a, k.idx(d)).getResult();
  };
  auto remu = [&](Value a, int64_t d) {
    return arith::RemUIOp::create(b, loc, a, k.idx(d)).getResult();
  };
  auto ult = [&](Value a, Value c) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, a, c).getResult();
  };
  auto minu = [&](Value a, Value c) {
    return arith::MinUIOp::create(b, loc, a, c).getResult();
  };
  auto andI = [&](Value a, Value c) {
    return arith::AndIOp::create(b, loc, a, c).getResult();
  };
  Value n = k.dim(x, 0), tid = lanes.thread(b, loc);
  Value row0 = k.muli(lanes.rowTile(b, loc), k.idx(rows));
  Value chain0 = k.muli(lanes.chainGroup(b, loc), k.idx(chains));
  // Every thread of a block has the same tile: a block past the rows (the
  // grid has at least one) skips everything, barriers included.
  auto active = scf::IfOp::create(b, loc, ult(row0, n), /*withElse=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  Value lastRow = arith::SubIOp::create(b, loc, n, k.idx(1));
  // This thread's sum: (row r of the tile, sum j of the group).
  Value r = divu(tid, chains), jl = remu(tid, chains);
  Value row = k.addi(row0, r), j = k.addi(chain0, jl);
  Value isChain = andI(andI(ult(tid, k.idx(rows * chains)), ult(row, n)),
                       ult(j, k.idx(mix + 1)));
  Value isSquares = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, j,
                                          k.idx(mix));
  auto chunks = scf::ForOp::create(b, loc, k.idx(0), k.idx(width), k.idx(chunk),
                                   ValueRange{k.f32(0.f)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(chunks.getBody());
    Value c = chunks.getInductionVar();
    // The stage: element `slot` of `total` is thread (slot mod threads)'s.
    // Every load comes first, from a clamped (in-bounds) place; the stores
    // after, for the elements that exist.
    struct Staged {
      Value valid, value, sharedRow, column;
    };
    SmallVector<Staged> staged;
    auto stage = [&](int64_t total, const std::function<Staged(Value)> &at) {
      for (int64_t s = 0; s * threads < total; ++s) {
        Value slot = k.addi(tid, k.idx(s * threads));
        Staged st = at(minu(slot, k.idx(total - 1)));
        st.valid = ult(slot, k.idx(total));
        staged.push_back(st);
      }
    };
    stage(chains * chunk, [&](Value slot) {
      Value jr = divu(slot, chunk), e = remu(slot, chunk);
      // The group's rows past fn's (the sum of squares) load fn's last.
      Value wRow = minu(k.addi(chain0, jr), k.idx(mix - 1));
      return Staged{{}, k.load(fnW, {wRow, k.addi(c, e)}), jr, e};
    });
    const size_t weightSlots = staged.size();
    stage(rows * chunk, [&](Value slot) {
      Value rr = divu(slot, chunk), e = remu(slot, chunk);
      Value col = k.addi(c, e);
      Value v = k.loadF32(x, {minu(k.addi(row0, rr), lastRow), divu(col, dim),
                              remu(col, dim)});
      return Staged{{}, v, rr, e};
    });
    for (size_t s = 0; s < staged.size(); ++s) {
      auto ifValid = scf::IfOp::create(b, loc, staged[s].valid, /*withElse=*/false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(ifValid.thenBlock()->getTerminator());
      k.store(staged[s].value, s < weightSlots ? sharedW : sharedX,
              {staged[s].sharedRow, staged[s].column});
    }
    lanes.barrier(b, loc);
    Value acc = chunks.getRegionIterArg(0);
    auto walk = scf::IfOp::create(b, loc, TypeRange{b.getF32Type()}, isChain,
                                  /*withElse=*/true);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(walk.thenBlock());
      // The host kernel's operations: acc + x * fn (or x * x), in order.
      Value sum = k.reduceUnrolled(chunk, kChainUnroll, acc, [&](Value e, Value a) {
        Value v = k.load(sharedX, {r, e});
        Value m = arith::SelectOp::create(b, loc, isSquares, v, k.load(sharedW, {jl, e}));
        return k.add(a, k.mul(v, m));
      });
      scf::YieldOp::create(b, loc, sum);
      b.setInsertionPointToStart(walk.elseBlock());
      scf::YieldOp::create(b, loc, acc);
    }
    // The next stage overwrites what the chains read.
    lanes.barrier(b, loc);
    scf::YieldOp::create(b, loc, walk.getResult(0));
  }
  auto write = scf::IfOp::create(b, loc, isChain, /*withElse=*/false);
  b.setInsertionPoint(write.thenBlock()->getTerminator());
  k.store(chunks.getResult(0), sums, {row, j});
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

void buildHcMixSumsSplitBody(func::FuncOp fn, int64_t hc, int64_t dim,
                             const HcMixSumsSplitLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Block *entry = freshBody(fn, {lanes.sharedPartialsType});
  b.setInsertionPointToStart(entry);
  KernelBuilder k(b, loc);
  const int64_t mix = (2 + hc) * hc, width = hc * dim, threads = lanes.threads;
  Value x = entry->getArgument(0), fnW = entry->getArgument(1),
        sums = entry->getArgument(2), partials = entry->getArgument(3);
  auto ult = [&](Value a, Value c) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, a, c).getResult();
  };
  Value row = lanes.row(b, loc), j = lanes.sum(b, loc), tid = lanes.thread(b, loc);
  // Every thread of a block has the same (row, sum): a block past the rows
  // skips everything, barriers included.
  auto active = scf::IfOp::create(b, loc, ult(row, k.dim(x, 0)), /*withElse=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  Value isSquares = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, j, k.idx(mix));
  Value wRow = arith::MinUIOp::create(b, loc, j, k.idx(mix - 1));
  // The thread's elements: loads from clamped places first, then the
  // products of those that exist.
  auto elementPartial = [&](OpBuilder &b) -> Value {
    KernelBuilder k(b, loc);
    auto ult = [&](Value a, Value c) {
      return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, a, c).getResult();
    };
    SmallVector<std::pair<Value, Value>> loaded; // (x, fn or x)
    SmallVector<Value> valid;
    for (int64_t s = 0; s * threads < width; ++s) {
      Value col = k.addi(tid, k.idx(s * threads));
      valid.push_back(ult(col, k.idx(width)));
      Value c = arith::MinUIOp::create(b, loc, col, k.idx(width - 1));
      Value i = arith::DivUIOp::create(b, loc, c, k.idx(dim));
      Value e = arith::RemUIOp::create(b, loc, c, k.idx(dim));
      Value v = k.loadF32(x, {row, i, e});
      Value w = k.load(fnW, {wRow, c});
      loaded.push_back({v, arith::SelectOp::create(b, loc, isSquares, v, w)});
    }
    Value acc = k.f32(0.f);
    for (size_t s = 0; s < loaded.size(); ++s) {
      Value product = k.mul(loaded[s].first, loaded[s].second);
      acc = k.add(acc, arith::SelectOp::create(b, loc, valid[s], product, k.f32(0.f)));
    }
    return acc;
  };
  auto xType = cast<MemRefType>(x.getType()), fnType = cast<MemRefType>(fnW.getType());
  const bool words = lanes.shuffleXor && width % 8 == 0 && xType.getLayout().isIdentity() &&
                     fnType.getLayout().isIdentity();
  if (!words) {
    k.store(elementPartial(b), partials, {tid});
    lanes.barrier(b, loc);
    emitBlockTreeSum(b, loc, partials, tid, threads, lanes.barrier);
    auto first = scf::IfOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, k.idx(0)),
        /*withElse=*/false);
    b.setInsertionPoint(first.thenBlock()->getTerminator());
    k.store(k.load(partials, {k.idx(0)}), sums, {row, j});
    b.setInsertionPointToEnd(entry);
    func::ReturnOp::create(b, loc);
    return;
  }
  // The word form: 16-byte loads of x's row and fn's row, every load of the
  // thread issued before its products.
  Type f32 = b.getF32Type(), i64 = b.getI64Type();
  auto [xBase, xAligned] = bytePointer(b, loc, x, lanes.addressSpace);
  auto [wBase, wAligned] = bytePointer(b, loc, fnW, lanes.addressSpace);
  Value aligned = arith::AndIOp::create(b, loc, xAligned, wAligned);
  const int64_t wordCount = width / 8;
  auto partial = scf::IfOp::create(b, loc, TypeRange{f32}, aligned, /*withElse=*/true);
  {
    OpBuilder vb = OpBuilder::atBlockBegin(partial.thenBlock());
    KernelBuilder vk(vb, loc);
    auto bytes = [&](Value element, int64_t size) -> Value {
      return arith::IndexCastUIOp::create(vb, loc, i64, vk.muli(element, vk.idx(size)));
    };
    SmallVector<std::pair<SmallVector<Value>, SmallVector<Value>>> loaded;
    SmallVector<Value> valid;
    for (int64_t s = 0; s * threads < wordCount; ++s) {
      Value word = vk.addi(tid, vk.idx(s * threads));
      valid.push_back(
          arith::CmpIOp::create(vb, loc, arith::CmpIPredicate::ult, word, vk.idx(wordCount)));
      Value first = vk.muli(arith::MinUIOp::create(vb, loc, word, vk.idx(wordCount - 1)), vk.idx(8));
      SmallVector<Value> xs =
          load16BytesAsF32(vb, loc, xBase, bytes(vk.addi(vk.muli(row, vk.idx(width)), first), 2));
      SmallVector<Value> ws;
      Value wFirst = vk.addi(vk.muli(wRow, vk.idx(width)), first);
      for (int64_t half = 0; half < 2; ++half)
        llvm::append_range(ws, load16BytesAsF32(vb, loc, wBase,
                                                bytes(vk.addi(wFirst, vk.idx(4 * half)), 4),
                                                /*f32Elements=*/true));
      loaded.push_back({xs, ws});
    }
    Value acc = vk.f32(0.f);
    for (size_t s = 0; s < loaded.size(); ++s) {
      Value wordSum = vk.f32(0.f);
      for (size_t e = 0; e < 8; ++e) {
        Value v = loaded[s].first[e];
        Value w = arith::SelectOp::create(vb, loc, isSquares, v, loaded[s].second[e]);
        wordSum = math::FmaOp::create(vb, loc, v, w, wordSum);
      }
      acc = vk.add(acc, arith::SelectOp::create(vb, loc, valid[s], wordSum, vk.f32(0.f)));
    }
    scf::YieldOp::create(vb, loc, acc);
    OpBuilder eb = OpBuilder::atBlockBegin(partial.elseBlock());
    scf::YieldOp::create(eb, loc, elementPartial(eb));
  }
  emitWarpSumsToShared(b, loc, partial.getResult(0), tid, partials, lanes.shuffleXor,
                       lanes.barrier);
  auto first = scf::IfOp::create(
      b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, k.idx(0)),
      /*withElse=*/false);
  b.setInsertionPoint(first.thenBlock()->getTerminator());
  k.store(emitWarpSumsInOrder(b, loc, partials, (threads + 31) / 32), sums, {row, j});
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

func::FuncOp buildHcMixKernel(ModuleOp module, const std::string &name,
                              int64_t hc, int64_t dim, int64_t iters,
                              float eps, float normEps) {
  OpBuilder b(module.getContext());
  Type f32 = b.getF32Type();
  const int64_t mix = (2 + hc) * hc, width = hc * dim;
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, mix + 1}, f32),
       MemRefType::get({mix}, f32), MemRefType::get({3}, f32),
       MemRefType::get({ShapedType::kDynamic, hc}, f32),
       MemRefType::get({ShapedType::kDynamic, hc}, f32),
       MemRefType::get({ShapedType::kDynamic, hc, hc}, f32)});
  KernelBuilder k(b, module.getLoc());
  Value sums = fn.getArgument(0), base = fn.getArgument(1),
        scale = fn.getArgument(2), pre = fn.getArgument(3),
        post = fn.getArgument(4), comb = fn.getArgument(5);
  Value m = memref::AllocaOp::create(b, k.loc, MemRefType::get({mix}, f32));
  Value c = memref::AllocaOp::create(b, k.loc, MemRefType::get({hc, hc}, f32));
  Value s0 = k.load(scale, k.idx(0)), s1 = k.load(scale, k.idx(1)),
        s2 = k.load(scale, k.idx(2));
  Value epsV = k.f32(eps);

  k.loop(k.idx(0), k.dim(sums, 0), [&](Value n) {
    // rsqrt(mean(X^2) + normEps) over the flattened streams.
    Value sq = k.load(sums, {n, k.idx(mix)});
    Value rs = k.div(k.f32(1.f),
                     k.sqrt(k.add(k.div(sq, k.f32(float(width))), k.f32(normEps))));
    k.loop(mix, [&](Value row) { k.store(k.mul(k.load(sums, {n, row}), rs), m, row); });
    k.loop(hc, [&](Value i) {
      Value hi = k.addi(i, k.idx(hc));
      k.store(k.add(k.sigmoid(k.add(k.mul(k.load(m, i), s0), k.load(base, i))),
                    epsV),
              pre, {n, i});
      k.store(k.mul(k.f32(2.f),
                    k.sigmoid(k.add(k.mul(k.load(m, hi), s1), k.load(base, hi)))),
              post, {n, i});
    });
    k.loop(hc, [&](Value i) {
      k.loop(hc, [&](Value j) {
        Value at = k.addi(k.idx(2 * hc), k.addi(k.muli(i, k.idx(hc)), j));
        k.store(k.add(k.mul(k.load(m, at), s2), k.load(base, at)), c, {i, j});
      });
    });
    // Row softmax (+ eps), then column normalisation; then iters - 1 more
    // row/column normalisations (Sinkhorn).
    auto rowNormalize = [&](bool softmax) {
      k.loop(hc, [&](Value i) {
        if (softmax) {
          Value mx = k.reduce(hc, k.f32(-INFINITY), [&](Value j, Value acc) {
            return k.max(acc, k.load(c, {i, j}));
          });
          k.loop(hc, [&](Value j) {
            k.store(k.exp(k.sub(k.load(c, {i, j}), mx)), c, {i, j});
          });
        }
        Value sum = k.reduce(hc, k.f32(0.f), [&](Value j, Value acc) {
          return k.add(acc, k.load(c, {i, j}));
        });
        k.loop(hc, [&](Value j) {
          Value v = k.load(c, {i, j});
          k.store(softmax ? k.add(k.div(v, sum), epsV)
                          : k.div(v, k.add(sum, epsV)),
                  c, {i, j});
        });
      });
    };
    auto colNormalize = [&]() {
      k.loop(hc, [&](Value j) {
        Value sum = k.reduce(hc, k.f32(0.f), [&](Value i, Value acc) {
          return k.add(acc, k.load(c, {i, j}));
        });
        k.loop(hc, [&](Value i) {
          k.store(k.div(k.load(c, {i, j}), k.add(sum, epsV)), c, {i, j});
        });
      });
    };
    rowNormalize(true);
    colNormalize();
    k.loop(std::max<int64_t>(iters - 1, 0), [&](Value) {
      rowNormalize(false);
      colNormalize();
    });
    k.loop(hc, [&](Value i) {
      k.loop(hc, [&](Value j) { k.store(k.load(c, {i, j}), comb, {n, i, j}); });
    });
  });
  k.finish();
  fn->setAttr(kHcMixAttr,
              b.getDictionaryAttr({b.getNamedAttr("hc", b.getI64IntegerAttr(hc)),
                                   b.getNamedAttr("dim", b.getI64IntegerAttr(dim)),
                                   b.getNamedAttr("iters", b.getI64IntegerAttr(iters)),
                                   b.getNamedAttr("eps", b.getF32FloatAttr(eps)),
                                   b.getNamedAttr("norm_eps", b.getF32FloatAttr(normEps))}));
  return fn;
}

void buildHcMixWarpBody(func::FuncOp fn, int64_t hc, int64_t dim, int64_t iters,
                        float eps, float normEps, const HcMixWarpLanes &lanes) {
  OpBuilder b(fn.getContext());
  Location loc = fn.getLoc();
  Block *entry = freshBody(fn, {});
  b.setInsertionPointToStart(entry);
  KernelBuilder k(b, loc);
  const int64_t mix = (2 + hc) * hc, width = hc * dim;
  Value sums = entry->getArgument(0), base = entry->getArgument(1),
        scale = entry->getArgument(2), pre = entry->getArgument(3),
        post = entry->getArgument(4), comb = entry->getArgument(5);
  Type i32 = b.getI32Type();
  auto ult = [&](Value a, Value c) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, a, c).getResult();
  };
  Value n = lanes.row(b, loc), lane = lanes.lane(b, loc);
  auto active = scf::IfOp::create(b, loc, ult(n, k.dim(sums, 0)), /*withElse=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  // This lane's entry (i, j); the lanes past HC x HC repeat the last one.
  Value cell = arith::MinUIOp::create(b, loc, lane, k.idx(hc * hc - 1));
  Value i = arith::DivUIOp::create(b, loc, cell, k.idx(hc));
  Value j = arith::RemUIOp::create(b, loc, cell, k.idx(hc));
  Value owner = ult(lane, k.idx(hc * hc));
  Value s0 = k.load(scale, k.idx(0)), s1 = k.load(scale, k.idx(1)), s2 = k.load(scale, k.idx(2));
  Value epsV = k.f32(eps);
  // The host kernel's rsqrt(mean(X^2) + normEps) and scaled sums, per lane.
  Value sq = k.load(sums, {n, k.idx(mix)});
  Value rs = k.div(k.f32(1.f), k.sqrt(k.add(k.div(sq, k.f32(float(width))), k.f32(normEps))));
  auto m = [&](Value row) { return k.mul(k.load(sums, {n, row}), rs); };
  // pre and post: lanes 0 .. HC-1, entry `lane`.
  {
    auto first = scf::IfOp::create(b, loc, ult(lane, k.idx(hc)), /*withElse=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(first.thenBlock()->getTerminator());
    Value hi = k.addi(lane, k.idx(hc));
    k.store(k.add(k.sigmoid(k.add(k.mul(m(lane), s0), k.load(base, lane))), epsV), pre, {n, lane});
    k.store(k.mul(k.f32(2.f), k.sigmoid(k.add(k.mul(m(hi), s1), k.load(base, hi)))), post,
            {n, lane});
  }
  Value at = k.addi(k.idx(2 * hc), k.addi(k.muli(i, k.idx(hc)), j));
  Value c = k.add(k.mul(m(at), s2), k.load(base, at));
  // Entry (r, q)'s value from its lane, for every lane.
  auto from = [&](Value v, Value r, Value q) {
    Value src = arith::IndexCastOp::create(b, loc, i32, k.addi(k.muli(r, k.idx(hc)), q));
    return lanes.shuffle(b, loc, v, src);
  };
  auto rowNormalize = [&](bool softmax) {
    if (softmax) {
      Value mx = k.f32(-INFINITY);
      for (int64_t q = 0; q < hc; ++q)
        mx = k.max(mx, from(c, i, k.idx(q)));
      c = k.exp(k.sub(c, mx));
    }
    Value sum = k.f32(0.f);
    for (int64_t q = 0; q < hc; ++q)
      sum = k.add(sum, from(c, i, k.idx(q)));
    c = softmax ? k.add(k.div(c, sum), epsV) : k.div(c, k.add(sum, epsV));
  };
  auto colNormalize = [&]() {
    Value sum = k.f32(0.f);
    for (int64_t r = 0; r < hc; ++r)
      sum = k.add(sum, from(c, k.idx(r), j));
    c = k.div(c, k.add(sum, epsV));
  };
  rowNormalize(true);
  colNormalize();
  // The Sinkhorn iterations as a loop carrying the entry.
  auto loop = scf::ForOp::create(b, loc, k.idx(0), k.idx(std::max<int64_t>(iters - 1, 0)),
                                 k.idx(1), ValueRange{c});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    c = loop.getRegionIterArg(0);
    rowNormalize(false);
    colNormalize();
    scf::YieldOp::create(b, loc, c);
  }
  c = loop.getResult(0);
  auto store = scf::IfOp::create(b, loc, owner, /*withElse=*/false);
  b.setInsertionPoint(store.thenBlock()->getTerminator());
  k.store(c, comb, {n, i, j});
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

func::FuncOp buildHcCollapseKernel(ModuleOp module, const std::string &name,
                                   int64_t hc, int64_t dim) {
  OpBuilder b(module.getContext());
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type();
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, hc, dim}, bf16),
       MemRefType::get({ShapedType::kDynamic, hc}, f32),
       MemRefType::get({ShapedType::kDynamic, dim}, bf16)});
  KernelBuilder k(b, module.getLoc());
  Value x = fn.getArgument(0), pre = fn.getArgument(1), out = fn.getArgument(2);
  k.loop(k.idx(0), k.dim(x, 0), [&](Value n) {
    k.loop(dim, [&](Value e) {
      Value acc = k.reduce(hc, k.f32(0.f), [&](Value i, Value a) {
        return k.add(a, k.mul(k.load(pre, {n, i}), k.loadF32(x, {n, i, e})));
      });
      k.storeBf16(acc, out, {n, e});
    });
  });
  k.finish();
  return fn;
}

func::FuncOp buildHcUpdateKernel(ModuleOp module, const std::string &name,
                                 int64_t hc, int64_t dim) {
  OpBuilder b(module.getContext());
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type();
  func::FuncOp fn = KernelBuilder::start(
      b, module, name,
      {MemRefType::get({ShapedType::kDynamic, hc, dim}, bf16),
       MemRefType::get({ShapedType::kDynamic, dim}, bf16),
       MemRefType::get({ShapedType::kDynamic, hc}, f32),
       MemRefType::get({ShapedType::kDynamic, hc, hc}, f32),
       MemRefType::get({ShapedType::kDynamic, hc, dim}, bf16)});
  KernelBuilder k(b, module.getLoc());
  Value x = fn.getArgument(0), y = fn.getArgument(1), post = fn.getArgument(2),
        comb = fn.getArgument(3), out = fn.getArgument(4);
  k.loop(k.idx(0), k.dim(x, 0), [&](Value n) {
    k.loop(hc, [&](Value j) {
      k.loop(dim, [&](Value e) {
        Value acc = k.mul(k.load(post, {n, j}), k.loadF32(y, {n, e}));
        Value mixed = k.reduce(hc, k.f32(0.f), [&](Value i, Value a) {
          return k.add(a, k.mul(k.load(comb, {n, i, j}), k.loadF32(x, {n, i, e})));
        });
        k.storeBf16(k.add(acc, mixed), out, {n, j, e});
      });
    });
  });
  k.finish();
  return fn;
}

} // namespace csa::codegen

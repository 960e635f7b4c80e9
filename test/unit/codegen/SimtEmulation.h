//===- SimtEmulation.h - GPU forms' lanes on host threads ------*- C++ -*-===//
//
// The GPU forms of the kernels (the bodies the NVPTX back end gives a thread
// per lane) built for the host instead: their lane indices, barriers,
// shuffles and mma are calls into the test binary (SimtEmulation.cpp), and
// a "launch" runs one host thread per GPU thread of a block, with real
// barriers, one block after another. The GpuForm*EmulationTest files use
// it to check each form against its host kernel without a GPU (the device
// runs them for real: tools/scripts/gpu-check.sh).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TEST_UNIT_CODEGEN_SIMTEMULATION_H
#define CSA_TEST_UNIT_CODEGEN_SIMTEMULATION_H

#include "codegen/host/GpuFormLanes.h"
#include "codegen/host/LinearMma.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

// What the forms' lane callbacks call (the test binary exports them).
extern "C" {
int64_t csa_simt_thread();
int64_t csa_simt_block_x();
int64_t csa_simt_block_y();
void csa_simt_barrier();
float csa_simt_shuffle_xor(float v, int32_t mask);
float csa_simt_mma_bf16(int32_t a0, int32_t a1, int32_t a2, int32_t a3, int32_t b0, int32_t b1,
                        float c, int32_t e);
float csa_simt_mma_e4m3(int32_t a0, int32_t a1, int32_t a2, int32_t a3, int32_t b0, int32_t b1,
                        float c, int32_t e);
void csa_simt_prefetch_l2(const void *address);
void csa_simt_dependency_wait();
}

namespace csa::codegen::testing {

using namespace mlir;

/// A grid of gridX x gridY blocks of `threads` threads: `call(shared)` on
/// each, every block with its own zeroed `sharedBytes` of shared memory.
/// The blocks run one after another, the last first with `lastFirst` (a GPU
/// promises no order: a form must not depend on it).
void launch(int64_t gridX, int64_t gridY, int64_t threads, size_t sharedBytes,
            const std::function<void(void *)> &call, bool lastFirst = false);

/// What the lanes Simt::prefetchL2 and Simt::dependencyWait were called
/// with, each thread's calls in its order: a prefetched address, or a wait
/// (address null).
struct SimtMemoryEvent {
  int64_t blockX = 0, blockY = 0, thread = 0;
  const void *address = nullptr;
};
/// The events since the last call (and forgets them).
std::vector<SimtMemoryEvent> takeSimtMemoryEvents();

/// The lane callbacks: calls of the exported functions above.
struct Simt {
  func::FuncOp thread, blockX, blockY, barrier, shuffle, mma, mmaFp8, prefetch, wait;
  explicit Simt(ModuleOp m) {
    OpBuilder b(m.getBodyRegion());
    Type index = b.getIndexType();
    auto declare = [&](const char *name, TypeRange results) {
      auto f = func::FuncOp::create(b, m.getLoc(), name, b.getFunctionType({}, results));
      f.setPrivate();
      return f;
    };
    thread = declare("csa_simt_thread", index);
    blockX = declare("csa_simt_block_x", index);
    blockY = declare("csa_simt_block_y", index);
    barrier = declare("csa_simt_barrier", {});
    Type f32 = b.getF32Type();
    shuffle = func::FuncOp::create(b, m.getLoc(), "csa_simt_shuffle_xor",
                                   b.getFunctionType({f32, b.getI32Type()}, {f32}));
    shuffle.setPrivate();
    Type i32 = b.getI32Type();
    mma = func::FuncOp::create(
        b, m.getLoc(), "csa_simt_mma_bf16",
        b.getFunctionType({i32, i32, i32, i32, i32, i32, f32, i32}, {f32}));
    mma.setPrivate();
    mmaFp8 = func::FuncOp::create(
        b, m.getLoc(), "csa_simt_mma_e4m3",
        b.getFunctionType({i32, i32, i32, i32, i32, i32, f32, i32}, {f32}));
    mmaFp8.setPrivate();
    prefetch = func::FuncOp::create(
        b, m.getLoc(), "csa_simt_prefetch_l2",
        b.getFunctionType({LLVM::LLVMPointerType::get(b.getContext())}, {}));
    prefetch.setPrivate();
    wait = declare("csa_simt_dependency_wait", {});
  }
  /// LinearSplitKLanes::prefetchL2 (an address-space-0 pointer) and
  /// dependencyWait, recorded (takeSimtMemoryEvents).
  std::function<void(OpBuilder &, Location, Value)> prefetchL2() const {
    return [f = prefetch](OpBuilder &b, Location loc, Value ptr) {
      func::CallOp::create(b, loc, f, ValueRange{ptr});
    };
  }
  std::function<void(OpBuilder &, Location)> dependencyWait() const { return call(wait); }
  MmaBf16 mmaBf16() const { return mmaOf(mma); }
  /// mma.m16n8k32 with E4M3 operands (LinearMmaLanes::mmaE4m3).
  MmaE4m3 mmaE4m3() const { return mmaOf(mmaFp8); }
  static MmaBf16 mmaOf(func::FuncOp fn) {
    return [f = fn](OpBuilder &b, Location loc, ValueRange a, ValueRange bw,
                     ValueRange c) -> SmallVector<Value> {
      SmallVector<Value> d;
      for (int32_t e = 0; e < 4; ++e) {
        Value which = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(e));
        SmallVector<Value> args(a.begin(), a.end());
        args.append(bw.begin(), bw.end());
        args.push_back(c[size_t(e)]);
        args.push_back(which);
        d.push_back(func::CallOp::create(b, loc, f, args).getResult(0));
      }
      return d;
    };
  }
  std::function<Value(OpBuilder &, Location, Value, int32_t)> shuffleXor() const {
    return [f = shuffle](OpBuilder &b, Location loc, Value v, int32_t mask) -> Value {
      Value m = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(mask));
      return func::CallOp::create(b, loc, f, ValueRange{v, m}).getResult(0);
    };
  }
  std::function<Value(OpBuilder &, Location)> value(func::FuncOp f) const {
    return [f](OpBuilder &b, Location loc) -> Value {
      return func::CallOp::create(b, loc, f, ValueRange{}).getResult(0);
    };
  }
  /// A call of `f`, a function of no arguments and results.
  static std::function<void(OpBuilder &, Location)> call(func::FuncOp f) {
    return [f](OpBuilder &b, Location loc) { func::CallOp::create(b, loc, f, ValueRange{}); };
  }
  std::function<void(OpBuilder &, Location)> sync() const { return call(barrier); }
  /// A block of `threads` per row (block x).
  BlockRowLanes blockRow(int64_t threads) const {
    BlockRowLanes lanes;
    lanes.row = value(blockX);
    lanes.thread = value(thread);
    lanes.threads = threads;
    lanes.barrier = sync();
    return lanes;
  }
};

inline uint32_t bits(uint16_t v) { return v; }
inline uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

} // namespace csa::codegen::testing

#endif // CSA_TEST_UNIT_CODEGEN_SIMTEMULATION_H

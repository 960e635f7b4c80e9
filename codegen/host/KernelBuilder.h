//===- KernelBuilder.h - Terse IR building for loop kernels ------*- C++ -*-===//
//
// A thin layer over OpBuilder for the scalar loop nests of the host kernels,
// so a kernel reads like the reference code it must match.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_KERNELBUILDER_H
#define CSA_CODEGEN_HOST_KERNELBUILDER_H

#include "codegen/host/Transcendental.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

#include <functional>
#include <tuple>
#include <utility>

namespace csa::codegen {

/// Starts a public kernel with the C interface (`_mlir_ciface_<name>`); the
/// builder is placed in its entry block.
inline mlir::func::FuncOp startKernel(mlir::OpBuilder &b, mlir::ModuleOp module,
                                      const std::string &name,
                                      mlir::TypeRange args,
                                      mlir::TypeRange results = {}) {
  b.setInsertionPointToEnd(module.getBody());
  auto fn = mlir::func::FuncOp::create(b, module.getLoc(), name,
                                       b.getFunctionType(args, results));
  fn->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  b.setInsertionPointToStart(fn.addEntryBlock());
  return fn;
}

/// Replaces the body of kernel `fn` with an empty entry block over its
/// arguments followed by `extra` (a GPU form's shared buffers).
inline mlir::Block *freshBody(mlir::func::FuncOp fn, llvm::ArrayRef<mlir::Type> extra) {
  fn.getBody().dropAllReferences();
  fn.getBody().getBlocks().clear();
  llvm::SmallVector<mlir::Type> inputs(fn.getFunctionType().getInputs());
  inputs.append(extra.begin(), extra.end());
  fn.setType(mlir::FunctionType::get(fn.getContext(), inputs, {}));
  return fn.addEntryBlock();
}

inline mlir::Value f32Const(mlir::OpBuilder &b, mlir::Location loc, float v) {
  return mlir::arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}

inline mlir::Value indexConst(mlir::OpBuilder &b, mlir::Location loc,
                              int64_t v) {
  return mlir::arith::ConstantIndexOp::create(b, loc, v);
}

inline mlir::Value intConst(mlir::OpBuilder &b, mlir::Location loc,
                            mlir::Type type, int64_t v) {
  return mlir::arith::ConstantOp::create(b, loc, b.getIntegerAttr(type, v));
}

/// Emits `body` under `if (cond)` at b's insertion point (the GPU forms'
/// guarded stores: a lane, a thread or a block that has the work).
inline void emitWhen(mlir::OpBuilder &b, mlir::Location loc, mlir::Value cond,
                     llvm::function_ref<void()> body) {
  auto guard = mlir::scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
  mlir::OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(guard.thenBlock()->getTerminator());
  body();
}

/// `cond ? then() : otherwise()` as an scf.if with results of `types` (the
/// branches may load: only the taken one runs).
inline mlir::scf::IfOp
emitSelect(mlir::OpBuilder &b, mlir::Location loc, mlir::Value cond, mlir::TypeRange types,
           llvm::function_ref<llvm::SmallVector<mlir::Value>()> then,
           llvm::function_ref<llvm::SmallVector<mlir::Value>()> otherwise) {
  auto op = mlir::scf::IfOp::create(b, loc, types, cond, /*withElseRegion=*/true);
  mlir::OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(op.thenBlock());
  mlir::scf::YieldOp::create(b, loc, then());
  b.setInsertionPointToStart(op.elseBlock());
  mlir::scf::YieldOp::create(b, loc, otherwise());
  return op;
}

/// Loads an element and widens it to fp32 (f32 elements as they are).
inline mlir::Value loadF32(mlir::OpBuilder &b, mlir::Location loc,
                           mlir::Value memref, mlir::ValueRange indices) {
  mlir::Value v = mlir::memref::LoadOp::create(b, loc, memref, indices);
  if (v.getType().isF32())
    return v;
  return mlir::arith::ExtFOp::create(b, loc, b.getF32Type(), v);
}

/// A memref's first element as an LLVM pointer in `addressSpace` (for the
/// GPU forms' 16-byte loads), and whether it lies on 16 bytes (device
/// allocations do; the forms fall back to element loads otherwise).
inline std::pair<mlir::Value, mlir::Value>
bytePointer(mlir::OpBuilder &b, mlir::Location loc, mlir::Value memref,
            unsigned addressSpace) {
  auto type = mlir::cast<mlir::MemRefType>(memref.getType());
  const int64_t elementBytes = type.getElementTypeBitWidth() / 8;
  auto meta = mlir::memref::ExtractStridedMetadataOp::create(b, loc, memref);
  mlir::Value offset = meta.getOffset();
  if (elementBytes != 1)
    offset = mlir::arith::MulIOp::create(b, loc, offset,
                                         indexConst(b, loc, elementBytes));
  mlir::Value start = mlir::arith::AddIOp::create(
      b, loc, mlir::memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref),
      offset);
  mlir::Value base = mlir::LLVM::IntToPtrOp::create(
      b, loc, mlir::LLVM::LLVMPointerType::get(b.getContext(), addressSpace),
      mlir::arith::IndexCastUIOp::create(b, loc, b.getI64Type(), start).getResult(),
      mlir::LLVM::DereferenceableAttr());
  mlir::Value aligned = mlir::arith::CmpIOp::create(
      b, loc, mlir::arith::CmpIPredicate::eq,
      mlir::arith::RemUIOp::create(b, loc, start, indexConst(b, loc, 16)),
      indexConst(b, loc, 0));
  return {base, aligned};
}

/// The two bf16 of an i32 word as f32 (exact): element 2w of a little-endian
/// load is the low half.
inline std::pair<mlir::Value, mlir::Value> bf16PairToF32(mlir::OpBuilder &b, mlir::Location loc,
                                                         mlir::Value word) {
  mlir::Type f32 = b.getF32Type(), i32 = b.getI32Type();
  mlir::Value low = mlir::arith::ShLIOp::create(
      b, loc, word, mlir::arith::ConstantOp::create(b, loc, b.getIntegerAttr(i32, 16)));
  mlir::Value high = mlir::arith::AndIOp::create(
      b, loc, word,
      mlir::arith::ConstantOp::create(b, loc, b.getIntegerAttr(i32, int32_t(0xFFFF0000u))));
  return {mlir::arith::BitcastOp::create(b, loc, f32, low),
          mlir::arith::BitcastOp::create(b, loc, f32, high)};
}

/// The four i32 of a 16-byte load at `byteOffset` from `base` (an LLVM
/// pointer from bytePointer; the address a multiple of 16). The bytes are
/// not written while the kernel runs.
inline llvm::SmallVector<mlir::Value, 4> load16Bytes(mlir::OpBuilder &b, mlir::Location loc,
                                                     mlir::Value base, mlir::Value byteOffset) {
  mlir::Type i32 = b.getI32Type();
  mlir::Value ptr = mlir::LLVM::GEPOp::create(b, loc, base.getType(), b.getI8Type(), base,
                                              mlir::ValueRange{byteOffset});
  mlir::Value vec = mlir::LLVM::LoadOp::create(b, loc, mlir::VectorType::get({4}, i32), ptr,
                                               /*alignment=*/16, /*isVolatile=*/false,
                                               /*isNonTemporal=*/false, /*isInvariant=*/true);
  llvm::SmallVector<mlir::Value, 4> words;
  for (int32_t e = 0; e < 4; ++e)
    words.push_back(mlir::LLVM::ExtractElementOp::create(
        b, loc, vec, mlir::LLVM::ConstantOp::create(b, loc, i32, e)));
  return words;
}

/// A 16-byte load's elements as f32 (exact): 8 bf16 or, with `f32Elements`,
/// 4 f32, in memory order.
inline llvm::SmallVector<mlir::Value, 8> load16BytesAsF32(mlir::OpBuilder &b, mlir::Location loc,
                                                          mlir::Value base, mlir::Value byteOffset,
                                                          bool f32Elements = false) {
  llvm::SmallVector<mlir::Value, 8> values;
  for (mlir::Value q : load16Bytes(b, loc, base, byteOffset)) {
    if (f32Elements) {
      values.push_back(mlir::arith::BitcastOp::create(b, loc, b.getF32Type(), q));
      continue;
    }
    auto [low, high] = bf16PairToF32(b, loc, q);
    values.push_back(low);
    values.push_back(high);
  }
  return values;
}

/// Elements of a long sequential fp32 sum (a dot product, a sum of squares)
/// walked per loop trip, in the same order: a GPU thread then keeps a trip's
/// loads in flight instead of waiting for each before its add.
inline constexpr int64_t kChainUnroll = 8;

class KernelBuilder {
public:
  KernelBuilder(mlir::OpBuilder &b, mlir::Location loc) : b(b), loc(loc) {}

  static mlir::func::FuncOp start(mlir::OpBuilder &b, mlir::ModuleOp module,
                                  const std::string &name,
                                  mlir::TypeRange args) {
    return startKernel(b, module, name, args);
  }
  void finish() { mlir::func::ReturnOp::create(b, loc); }

  mlir::Value idx(int64_t v) {
    return mlir::arith::ConstantIndexOp::create(b, loc, v);
  }
  mlir::Value f32(float v) {
    return mlir::arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  mlir::Value dim(mlir::Value memref, int64_t i) {
    return mlir::memref::DimOp::create(b, loc, memref, i);
  }
  mlir::Value load(mlir::Value memref, mlir::ValueRange indices) {
    return mlir::memref::LoadOp::create(b, loc, memref, indices);
  }
  /// Loads and widens a bf16 element to f32.
  mlir::Value loadF32(mlir::Value memref, mlir::ValueRange indices) {
    return csa::codegen::loadF32(b, loc, memref, indices);
  }
  void store(mlir::Value v, mlir::Value memref, mlir::ValueRange indices) {
    mlir::memref::StoreOp::create(b, loc, v, memref, indices);
  }
  /// Rounds f32 to bf16 (nearest even) and stores.
  void storeBf16(mlir::Value v, mlir::Value memref, mlir::ValueRange indices) {
    store(mlir::arith::TruncFOp::create(b, loc, b.getBF16Type(), v), memref,
          indices);
  }

  mlir::Value add(mlir::Value a, mlir::Value c) {
    return mlir::arith::AddFOp::create(b, loc, a, c);
  }
  mlir::Value sub(mlir::Value a, mlir::Value c) {
    return mlir::arith::SubFOp::create(b, loc, a, c);
  }
  mlir::Value mul(mlir::Value a, mlir::Value c) {
    return mlir::arith::MulFOp::create(b, loc, a, c);
  }
  mlir::Value div(mlir::Value a, mlir::Value c) {
    return mlir::arith::DivFOp::create(b, loc, a, c);
  }
  mlir::Value max(mlir::Value a, mlir::Value c) {
    // std::max(a, c): a unless c > a (NaN-free inputs).
    mlir::Value greater = mlir::arith::CmpFOp::create(
        b, loc, mlir::arith::CmpFPredicate::OGT, c, a);
    return mlir::arith::SelectOp::create(b, loc, greater, c, a);
  }
  /// numerics::exp32 (not libm's or libdevice's expf: see Transcendental.h).
  mlir::Value exp(mlir::Value a) { return emitExp32(b, loc, a); }
  mlir::Value sqrt(mlir::Value a) {
    return mlir::math::SqrtOp::create(b, loc, a);
  }
  /// 1 / (1 + exp(-x)), as the reference writes it.
  mlir::Value sigmoid(mlir::Value x) {
    mlir::Value neg = mlir::arith::NegFOp::create(b, loc, x);
    return div(f32(1.f), add(f32(1.f), exp(neg)));
  }
  mlir::Value addi(mlir::Value a, mlir::Value c) {
    return mlir::arith::AddIOp::create(b, loc, a, c);
  }
  mlir::Value muli(mlir::Value a, mlir::Value c) {
    return mlir::arith::MulIOp::create(b, loc, a, c);
  }

  /// for (iv = lo; iv < hi; ++iv) body(iv).
  void loop(mlir::Value lo, mlir::Value hi,
            const std::function<void(mlir::Value)> &body) {
    auto op = mlir::scf::ForOp::create(b, loc, lo, hi, idx(1));
    mlir::OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(op.getBody());
    body(op.getInductionVar());
  }
  void loop(int64_t hi, const std::function<void(mlir::Value)> &body) {
    loop(idx(0), idx(hi), body);
  }
  /// acc = init; for (...) acc = body(iv, acc); returns acc.
  mlir::Value reduce(mlir::Value lo, mlir::Value hi, mlir::Value init,
                     const std::function<mlir::Value(mlir::Value, mlir::Value)>
                         &body) {
    auto op = mlir::scf::ForOp::create(b, loc, lo, hi, idx(1),
                                       mlir::ValueRange{init});
    {
      mlir::OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(op.getBody());
      mlir::Value next = body(op.getInductionVar(), op.getRegionIterArg(0));
      mlir::scf::YieldOp::create(b, loc, next);
    }
    return op.getResult(0);
  }
  mlir::Value reduce(int64_t hi, mlir::Value init,
                     const std::function<mlir::Value(mlir::Value, mlir::Value)>
                         &body) {
    return reduce(idx(0), idx(hi), init, body);
  }

  /// reduce(hi, init, body) with `unroll` iterations per loop trip, in the
  /// same order (the same sum): a trip's loads do not wait for its adds, so a
  /// GPU thread walking a long chain keeps `unroll` loads in flight. A plain
  /// reduce when `unroll` does not divide `hi`.
  mlir::Value reduceUnrolled(int64_t hi, int64_t unroll, mlir::Value init,
                             const std::function<mlir::Value(mlir::Value, mlir::Value)>
                                 &body) {
    if (unroll <= 1 || hi % unroll != 0)
      return reduce(hi, init, body);
    auto op = mlir::scf::ForOp::create(b, loc, idx(0), idx(hi), idx(unroll),
                                       mlir::ValueRange{init});
    {
      mlir::OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(op.getBody());
      mlir::Value acc = op.getRegionIterArg(0);
      for (int64_t u = 0; u < unroll; ++u)
        acc = body(addi(op.getInductionVar(), idx(u)), acc);
      mlir::scf::YieldOp::create(b, loc, acc);
    }
    return op.getResult(0);
  }

  mlir::OpBuilder &b;
  mlir::Location loc;
};

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_KERNELBUILDER_H

//===- FusedKernels.cpp - Host kernels of csa.fusion regions --------------===//
#include "codegen/host/FusedKernels.h"

#include "codegen/host/KernelBuilder.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace csa::codegen {

func::FuncOp buildRopeQuantizeStoreKernel(ModuleOp module,
                                          const std::string &name,
                                          const std::string &rope,
                                          const std::string &quantize,
                                          const std::string &append,
                                          int64_t stride) {
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
  return fn;
}

} // namespace csa::codegen

//===- InputIr.cpp - Verifying IR that a user wrote or edited -------------===//
#include "passes/InputIr.h"
#include "passes/Passes.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Verifier.h"

namespace csa {
#define GEN_PASS_DEF_VERIFYINPUTIR
#include "passes/Passes.h.inc"
} // namespace csa

using namespace mlir;

namespace csa {

LogicalResult verifyInputIr(Operation *op) {
  // By name and attribute, before any op's verifier runs: the ops are not
  // known to be well formed yet.
  WalkResult walk = op->walk([](Operation *o) {
    StringRef name = o->getName().getStringRef();
    if (name != "tensor.expand_shape" && name != "memref.expand_shape")
      return WalkResult::advance();
    auto groups = o->getAttrOfType<ArrayAttr>("reassociation");
    if (!groups)
      return WalkResult::advance(); // the verifier reports it
    for (Attribute group : groups) {
      auto indices = dyn_cast<ArrayAttr>(group);
      if (indices && indices.empty()) {
        o->emitOpError("reassociation indices must not be empty");
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  return verify(op);
}

} // namespace csa

namespace {

struct VerifyInputIrPass
    : public csa::impl::VerifyInputIrBase<VerifyInputIrPass> {
  void runOnOperation() override {
    if (failed(csa::verifyInputIr(getOperation())))
      return signalPassFailure();
    // Nothing changed and the IR was just verified: spare the pass manager's
    // verification after this pass.
    markAllAnalysesPreserved();
  }
};

} // namespace

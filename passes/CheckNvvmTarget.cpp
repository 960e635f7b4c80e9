//===- CheckNvvmTarget.cpp - NVVM ops the target chip has -----------------===//
#include "passes/Passes.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace csa {
#define GEN_PASS_DEF_CHECKNVVMTARGET
#include "passes/Passes.h.inc"
} // namespace csa

using namespace mlir;

std::optional<int> csa::nvptxChipNumber(llvm::StringRef chip) {
  int number = 0;
  llvm::StringRef digits = chip.drop_front(3).take_while(
      [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (!chip.starts_with("sm_") || digits.getAsInteger(10, number))
    return std::nullopt;
  return number;
}

namespace {

struct CheckNvvmTargetPass
    : public csa::impl::CheckNvvmTargetBase<CheckNvvmTargetPass> {
  using Base::Base;

  void runOnOperation() override {
    Operation *root = getOperation();
    const std::string name = chip;
    std::optional<int> number = csa::nvptxChipNumber(name);
    if (!number) {
      root->emitError() << "unknown NVPTX chip '" << name
                        << "' (expected sm_<number>[a], e.g. sm_90a)";
      return signalPassFailure();
    }
    if (*number >= 100) // sm_100 and later convert to FP4 natively
      return;
    WalkResult result = root->walk([&](NVVM::ConvertF32x2ToF4x2Op op) {
      op.emitError() << "native FP4 conversion (cvt ... e2m1x2) needs sm_100 "
                        "or later; "
                     << name
                     << " has none (dequantize E2M1 through a table, as the "
                        "csa kernels do)";
      return WalkResult::interrupt();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace

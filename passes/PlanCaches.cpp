//===- PlanCaches.cpp - Bytes of every per-sequence cache ------------------===//
#include "dialects/csa/CsaDialect.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <map>
#include <tuple>

namespace csa {
#define GEN_PASS_DEF_PLANCACHES
#include "passes/Passes.h.inc"
} // namespace csa

using namespace mlir;
using namespace csa;

namespace {

struct PlanCachesPass : public csa::impl::PlanCachesBase<PlanCachesPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t context = maxContext;
    if (context == 0) {
      auto attr = module->getAttrOfType<IntegerAttr>("csa.max_context");
      context = attr ? attr.getInt() : 131072;
    }
    if (context < 1) {
      module.emitError() << "csa-plan-caches: max-context must be >= 1, got "
                         << context;
      return signalPassFailure();
    }
    OpBuilder b(module.getContext());
    // (layer, kind) -> type: each cache is one storage however many
    // functions allocate it.
    std::map<std::pair<int64_t, int>, Type> caches;
    bool conflict = false;
    module.walk([&](CacheAllocOp op) {
      Type type = op.getCache().getType();
      int kind = isa<GlobalCacheType>(type)  ? 0
                 : isa<SwaRingType>(type)    ? 1
                                             : 2;
      if (auto global = dyn_cast<GlobalCacheType>(type)) {
        op->setAttr("csa.bytes_per_token",
                    b.getF64FloatAttr(global.getBytesPerToken()));
        op->setAttr("csa.entry_bytes", b.getI64IntegerAttr(global.getEntryBytes()));
      } else if (auto ring = dyn_cast<SwaRingType>(type)) {
        op->setAttr("csa.bytes", b.getI64IntegerAttr(ring.getBytes()));
      } else if (auto state = dyn_cast<CompressorStateType>(type)) {
        op->setAttr("csa.bytes", b.getI64IntegerAttr(state.getBytes()));
      }
      auto key = std::make_pair(int64_t(op.getLayerAttr().getInt()), kind);
      auto [it, inserted] = caches.try_emplace(key, type);
      if (!inserted && it->second != type) {
        op.emitOpError() << "layer " << key.first
                         << " allocates this cache as " << type
                         << " here but as " << it->second
                         << " elsewhere; a layer's cache is one storage";
        conflict = true;
      }
    });
    if (conflict)
      return signalPassFailure();

    double perToken = 0;
    int64_t fixed = 0, atMax = 0;
    for (auto &[key, type] : caches) {
      if (auto global = dyn_cast<GlobalCacheType>(type)) {
        perToken += global.getBytesPerToken();
        atMax += (context / global.getRatio()) * global.getEntryBytes();
      } else if (auto ring = dyn_cast<SwaRingType>(type)) {
        fixed += ring.getBytes();
      } else {
        fixed += cast<CompressorStateType>(type).getBytes();
      }
    }
    NamedAttrList plan;
    plan.append("global_kv_bytes_per_token", b.getF64FloatAttr(perToken));
    plan.append("fixed_bytes_per_sequence", b.getI64IntegerAttr(fixed));
    plan.append("max_context", b.getI64IntegerAttr(context));
    plan.append("bytes_per_sequence", b.getI64IntegerAttr(atMax + fixed));
    plan.append("caches", b.getI64IntegerAttr(int64_t(caches.size())));
    module->setAttr("csa.cache_plan", plan.getDictionary(module.getContext()));
  }
};

} // namespace

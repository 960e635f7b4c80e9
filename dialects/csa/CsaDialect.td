//===- CsaDialect.td - The csa dialect ---------------------*- tablegen -*-===//
//
// The `csa` dialect expresses DeepSeek-V4.1-Flash's new ideas as IR: CSA2
// attention layer modes with cross-layer sharing, Hierarchical Sparse Indexer
// block selection, FP4/FP8 cache row formats and the CED KV projection.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_DIALECTS_CSA_CSADIALECT_TD
#define CSA_DIALECTS_CSA_CSADIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Csa_Dialect : Dialect {
  let name = "csa";
  let summary = "Compressed sparse attention models (DeepSeek-V4.1-Flash family)";
  let description = [{
    The `csa` dialect describes a DeepSeek-V4.1-Flash model variant at two
    levels:

    * **Graph level**: one op per model block (`csa.embed`, `csa.attention`,
      `csa.moe`, `csa.engram`, the mHC ops, `csa.lm_head`). A `csa.attention`
      op carries its CSA2 mode (`full`, `reindex`, `reuse`, `swa_only`), its
      compression ratio and the earlier layers it reads from; verifiers reject
      an invalid schedule with a message naming the layer and the rule.
    * **Primitives**: the pieces a mode expands into: the CED KV projection
      (`csa.compress`), indexer scoring (`csa.index_score`), HSI block selection
      (`csa.hsi_select`), `csa.topk`, FP4/FP8 `csa.quantize`/`csa.dequantize`,
      cache allocation and append, and `csa.sparse_attention`.

    Cache contents are typed by their released byte formats: `!csa.fp4_row`
    (E2M1 values with E4M3 or UE8M0 group scales: 288 B main-KV rows, 68 B
    index-key rows) and `!csa.fp8_row` (E4M3 with UE8M0 scales: 528 B SWA
    rows). Handles (`!csa.global_cache`, `!csa.swa_ring`,
    `!csa.compressor_state`, `!csa.topk`, `!csa.candidate_pool`) name the state
    that kernels read and write.

    Model semantics are in `docs/semantics.md`; row byte layouts in
    `docs/cache-formats.md`; schedules in `docs/schedules.md`.
  }];
  let cppNamespace = "::csa";
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
  let extraClassDeclaration = [{
    void registerTypes();
    void registerAttributes();
  }];
}

class Csa_Op<string mnemonic, list<Trait> traits = []>
    : Op<Csa_Dialect, mnemonic, traits>;

class Csa_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Csa_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

class Csa_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Csa_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

#endif // CSA_DIALECTS_CSA_CSADIALECT_TD

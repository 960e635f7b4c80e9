//===- Passes.td - csa passes ------------------------------*- tablegen -*-===//
//
// Passes are listed in alphabetical order.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_PASSES_PASSES_TD
#define CSA_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def BoundedReplay : Pass<"csa-bounded-replay", "::mlir::ModuleOp"> {
  let summary = "CED bounded replay: late layers of prefill see only the last "
                "tokens";
  let description = [{
    Splits the prefill function at the first op of layer `start-layer`
    (default: the layer after the last Full layer, i.e. after the last KV
    source): from there on every per-token value (the mHC streams, the
    pending pre-mix, the token ids) is cut to its last `tail` rows with
    `tensor.extract_slice`, and the position operand of every later
    `csa.attention` moves forward by the rows dropped. With fewer prompt
    tokens than `tail` nothing is dropped, so the result equals the full
    prefill. Layers from the start on must not write a global cache (no Full
    layer) and must have no Engram (its n-gram hash needs the earlier
    tokens); either is an error naming the layer, and so is a tail shorter
    than the window (decode would find the late layers' rings partly
    empty). Decode is not changed. The late layers read their sources'
    top-k sets and candidate pools at their own positions (`!csa.topk`),
    and their rings hold only the tail (`csa.sparse_attention`).
    This is the reference forward's `boundedReplay` option (docs/semantics.md).
    Example:
    ```
    csa-opt graph.mlir --csa-bounded-replay='start-layer=21 tail=128'
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
  let options = [
    Option<"startLayer", "start-layer", "int64_t", /*default=*/"-1",
           "First layer that runs on the tail only; -1: the layer after the "
           "last Full layer">,
    Option<"tail", "tail", "int64_t", /*default=*/"-1",
           "Prompt tokens the late layers keep; -1: the attention window">,
    Option<"function", "function", "std::string", /*default=*/"\"prefill\"",
           "The prefill function">,
  ];
}

def CostReport : Pass<"csa-cost-report", "::mlir::ModuleOp"> {
  let summary = "Print what a model graph costs: cache bytes, rows read, "
                "FLOPs, parameters";
  let description = [{
    Sums the graph-level ops of one function (by default `decode`, else the
    first function holding csa ops) through `CostOpInterface` and the
    attention layers' cache types, and prints:

    * global KV bytes per token, derived per Full (source) layer as entry
      bytes (main-KV row + index-key row) x entries per token (1/ratio);
    * SWA ring bytes and compressor-state bytes per sequence;
    * parameters, total and read per decode token;
    * per decode token at each context length: index-key rows scored,
      attention rows gathered (window + selected), the bytes they occupy,
      and precision-weighted FLOPs (BF16 = 1, FP8 = 0.5, FP4 = 0.25).

    Works on any graph-stage IR, including hand-edited IR. The IR is not
    changed.

    Example:
    ```
    csa-opt model.mlir --csa-cost-report='context=4096,131072 format=json'
    ```
  }];
  let options = [
    ListOption<"contexts", "context", "int64_t",
               "Context lengths (tokens) to report decode costs at">,
    Option<"format", "format", "std::string", /*default=*/"\"text\"",
           "Output format: text or json">,
    Option<"function", "function", "std::string", /*default=*/"\"\"",
           "Function to analyse (default: decode, else the first with csa ops)">,
  ];
}

def ExpandModes : Pass<"csa-expand-modes", "::mlir::func::FuncOp"> {
  let summary = "Expand each CSA2 attention layer into the primitives of its mode";
  let description = [{
    Rewrites every `csa.attention` of a function into primitives, in the
    order the released model runs them:

    * every layer: the Q path (`wq_a`, `q_norm`, `wq_b`, RoPE), its SWA KV
      (`wkv`, `kv_norm`, RoPE, FP8 rows appended to its ring);
    * `full`: `csa.compress` (with the partial-group state at ratio > 1),
      index keys (`indexer.wk`, `k_norm`, RoPE at the group positions, FP4
      rows appended), then the indexer and top-k (and `csa.hsi_select` on the
      candidate source), then the RoPE'd latent as FP4 main-KV rows;
    * `reindex`: indexer queries scored against the KV source's keys,
      `csa.topk ... within` the candidate source's pool;
    * `reuse`: the KV source's cache at the index source's top-k;
    * then `csa.sparse_attention`, inverse RoPE and the grouped output
      projection (`wo_a` as a block-diagonal `csa.linear`, `wo_b`).

    Caches are created once per function with `csa.cache_alloc` (a layer's
    SWA ring; a Full layer's global cache and compressor state); sources'
    caches, top-k sets and pools are passed to their readers as SSA values,
    so sharing is explicit use-def.

    `index-publication=release` builds the released model.py's index-key
    publication (spec §10.1) in `@decode`: a ratio > 1 Full layer whose
    group a step does not complete, and a Reindex layer, score against the
    keys of the last layer that published some (an earlier Full layer of
    the step, else the last Full layer, which must have ratio 1 so that
    every step and prefill end with its keys published): `csa.index_score`
    gets those caches as `published` with a table by position residue.
    `owner` (the default) scores against the layer's own keys (Reindex: its
    KV source's), as the engines do.

    Example: `csa-opt --csa-expand-modes='dense-format=fp8_block32'`.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
  let options = [
    Option<"denseFormat", "dense-format", "std::string", /*default=*/"\"\"",
           "Storage format of the dense attention projections: fp8_block32 "
           "(as released) or bf16; default: the module's csa.dense_format, "
           "else fp8_block32">,
    Option<"indexPublication", "index-publication", "std::string",
           /*default=*/"\"\"",
           "Whose index keys a decode step scores against: owner or release "
           "(the released model.py's last-published keys); default: the "
           "module's csa.index_publication, else owner">,
  ];
  let statistics = [
    Statistic<"numLayers", "layers", "Attention layers expanded">,
    Statistic<"numCaches", "caches", "Caches allocated">,
  ];
}

def PlanCaches : Pass<"csa-plan-caches", "::mlir::ModuleOp"> {
  let summary = "Record the bytes of every per-sequence cache";
  let description = [{
    Annotates each `csa.cache_alloc` with its bytes (`csa.bytes_per_token`
    for a global cache: entry bytes / ratio; `csa.bytes` for an SWA ring or
    a compressor state), and the module with `csa.cache_plan`: the global
    KV bytes per token, the fixed bytes per sequence, and, for
    `max-context` tokens, the bytes one sequence holds. A layer's caches are
    the same storage in every function (prefill and decode share them), so
    each (layer, kind) is counted once.
  }];
  let options = [
    Option<"maxContext", "max-context", "int64_t", /*default=*/"0",
           "Context length (tokens) the plan is sized for; default: the "
           "module's csa.max_context, else 131072">,
  ];
}

def FuseKernels : Pass<"csa-fuse-kernels", "::mlir::func::FuncOp"> {
  let summary = "Choose kernel boundaries: group ops into csa.fusion regions";
  let description = [{
    Moves chains of expanded-stage ops that a back end runs as one kernel
    into `csa.fusion` regions (the fused stage). Patterns:

    - `rope_quantize_store`: `csa.rope` -> `csa.quantize` -> `csa.cache_append`
      (a layer's SWA row, a compressed main-KV row or an index-key row: RoPE,
      quantize to the cache's row format, store), when the RoPE result has no
      other use and every other user of the quantized rows comes after the
      store; the region yields the quantized rows.
    - `hc_collapse_norm`: `csa.hc_collapse` -> `csa.rms_norm` (mHC's collapse
      of the streams and the next sub-layer's input norm), when the collapsed
      rows have no other use; the region yields the normed rows. In a decode
      step this is 79 launches of `h200-full` fewer, each a few microseconds
      of a block per row.

    The ops keep their semantics inside the region; only the kernel boundary
    changes, so a back end without the fused kernel could still run the body
    op by op.

    Example: see `csa.fusion`.
  }];
  let options = [
    ListOption<"patterns", "patterns", "std::string",
               "Patterns to apply (default: all): rope_quantize_store, "
               "hc_collapse_norm; none: no regions">,
  ];
  let statistics = [
    Statistic<"numFused", "num-fused", "csa.fusion regions formed">,
  ];
}

def CheckNvvmTarget : Pass<"csa-check-nvvm-target"> {
  let summary = "Reject NVVM ops the target chip does not have";
  let description = [{
    The native FP4 (E2M1) conversions (`nvvm.convert.f32x2.to.f4x2`) exist
    from sm_100 on. For sm_90 LLVM's NVPTX back end aborts on them ("Cannot
    select: intrinsic llvm.nvvm.ff.to.e2m1x2.rn.satfinite") instead of
    reporting an error, so the NVPTX pipeline runs this check first and a
    kernel researcher who adds one to sm_90a IR gets a diagnostic naming the
    op. The csa kernels dequantize E2M1 through a table on Hopper.

    Example: `csa-opt k.mlir --csa-check-nvvm-target=chip=sm_90a`.
  }];
  let dependentDialects = ["::mlir::NVVM::NVVMDialect"];
  let options = [
    Option<"chip", "chip", "std::string", /*default=*/"\"sm_90a\"",
           "The NVPTX chip (sm_<number>[a])">,
  ];
}

def VerifyInputIr : Pass<"csa-verify-input-ir"> {
  let summary = "Verify IR a user wrote or edited, rejecting what upstream "
                "verifiers crash on";
  let description = [{
    Upstream MLIR 22's verifiers crash on some malformed ops instead of
    reporting them: `tensor.expand_shape` / `memref.expand_shape` with an
    empty reassociation group (the verifier reads the group's first
    expression; found by fuzz-ir). This pass rejects such an op with a
    diagnostic naming it, then runs MLIR's verifier. It changes nothing.

    `csa-opt` parses its input without the parser's verification and runs
    this pass first, so no input crashes it; `csa-compile --compile-from`
    does the same through `csa::verifyInputIr`.

    Example: `csa-opt edited.mlir --csa-verify-input-ir`.
  }];
}

def TileKernels : Pass<"csa-tile-kernels", "::mlir::ModuleOp"> {
  let summary = "Record the row tile of every op that runs a matrix product";
  let description = [{
    Attaches `csa.row_tile = #csa.row_tile<N>` to each `csa.linear`,
    `csa.compress`, `csa.moe`, `csa.engram` and `csa.lm_head`, and
    `csa.target` to the module. The op's host linear kernels process the rows
    of a call in tiles of N (the quantized ones decode each weight block once
    per tile; the accumulation order of every output is unchanged, so results
    are bit-identical for any tile) and are named for it. An op whose input
    has one static row (a decode step) gets 1. The host kernels are the
    artifact's for every target (the NVPTX back end maps them to threads and
    checks its forms against them), so `sm_90a` records the same tile; the
    GPU's own tiles belong to the op's `#csa.linear_form` and the back end's
    forms.

    An op that already carries `csa.row_tile` (set by hand in the IR of an
    earlier stage, say) keeps it, so a kernel researcher can try a tile on
    one op and finish the build with `csa-compile --compile-from`. The
    dialect rejects a row tile below 1, one on an op without linear kernels,
    and the dictionary `csa.tile` that this attribute replaced.

    Example:
    ```mlir
    %y = csa.linear %x weight "layers.2.attn.wq_a" fp8_block32 {csa.row_tile = #csa.row_tile<8>}
        : tensor<?x5120xbf16> -> tensor<?x1024xbf16>
    ```
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"host\"",
           "Target recorded on the module: host or sm_90a">,
    Option<"rows", "rows", "int64_t", /*default=*/"0",
           "Rows per tile (0: the default, 8)">,
  ];
  let statistics = [
    Statistic<"numTiled", "num-tiled", "Ops given a tile">,
  ];
}

def SelectLinearForms : Pass<"csa-select-linear-forms", "::mlir::ModuleOp"> {
  let summary = "Choose the GPU form of every op's linear kernels";
  let description = [{
    The linears' lowering strategy: attaches `csa.linear_form`
    (`#csa.linear_form<split_k|per_output>`, see its description) to every
    op with linear kernels (`csa.linear`, `csa.compress`, `csa.moe`,
    `csa.engram`, `csa.lm_head`). The kernel selection names
    and builds each op's kernels after it and the NVPTX back end lowers
    them in that form, so a new GPU form of a linear is one more value of
    the attribute and one more builder behind it.

    An op that already carries the attribute keeps it: a kernel researcher
    sets another form on one op in `tiled.mlir` and finishes the build with
    `csa-compile --compile-from=tiled`; the compile fails naming the op when
    the op's shape does not allow its form.

    Example:
    ```
    csa-opt fused.mlir --csa-select-linear-forms='form=per_output'
    ```
  }];
  let options = [
    Option<"form", "form", "std::string", /*default=*/"\"split_k\"",
           "The form given to ops without one: split_k or per_output">,
  ];
  let statistics = [
    Statistic<"numChosen", "num-chosen", "Ops given a form">,
  ];
}

def SelectAttentionForms : Pass<"csa-select-attention-forms", "::mlir::ModuleOp"> {
  let summary = "Choose the GPU form of every sparse attention's kernel";
  let description = [{
    Sparse attention's lowering strategy: attaches `csa.attention_form`
    (`#csa.attention_form<warp|head|split|mma>`, see its description) to
    every `csa.sparse_attention`; `mma` goes only where its tiles fit the
    op's heads and channels (`csa::sparseAttentionMmaFits`), the other ops
    get `split`. The kernel selection names and builds the op's
    attention kernel after it and the NVPTX back end lowers it in that form,
    so a new GPU form of the attention is one more value of the attribute
    and one more builder behind it.

    An op that already carries the attribute keeps it: a kernel researcher
    sets another form on one layer's attention in `tiled.mlir` and finishes
    the build with `csa-compile --compile-from=tiled`.

    Example:
    ```
    csa-opt fused.mlir --csa-select-attention-forms='form=head'
    ```
  }];
  let options = [
    Option<"form", "form", "std::string", /*default=*/"\"mma\"",
           "The form given to ops without one: warp, head, split or mma (split where mma does not fit)">,
  ];
  let statistics = [
    Statistic<"numChosen", "num-chosen", "Ops given a form">,
  ];
}

#endif // CSA_PASSES_PASSES_TD

//===- CsaAttrs.td - csa enums and attributes --------------*- tablegen -*-===//
#ifndef CSA_DIALECTS_CSA_CSAATTRS_TD
#define CSA_DIALECTS_CSA_CSAATTRS_TD

include "dialects/csa/CsaDialect.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

// The numeric values match csa::LayerMode in ScheduleRules.h.
def Csa_AttentionModeEnum : I32EnumAttr<"AttentionMode", "CSA2 attention mode", [
    I32EnumAttrCase<"Full", 0, "full">,
    I32EnumAttrCase<"Reindex", 1, "reindex">,
    I32EnumAttrCase<"Reuse", 2, "reuse">,
    I32EnumAttrCase<"SwaOnly", 3, "swa_only">]> {
  let cppNamespace = "::csa";
  let genSpecializedAttr = 0;
}
def Csa_AttentionModeAttr : EnumAttr<Csa_Dialect, Csa_AttentionModeEnum, "mode"> {
  let summary = "CSA2 mode of an attention layer";
  let assemblyFormat = "$value";
}

def Csa_ScaleFormatEnum : I32EnumAttr<"ScaleFormat", "format of a group scale", [
    I32EnumAttrCase<"E4M3", 0, "e4m3">,
    I32EnumAttrCase<"UE8M0", 1, "ue8m0">,
    I32EnumAttrCase<"F32", 2, "f32">]> {
  let cppNamespace = "::csa";
  let genSpecializedAttr = 0;
}

def Csa_WeightFormatEnum : I32EnumAttr<"WeightFormat", "storage format of a weight", [
    I32EnumAttrCase<"BF16", 0, "bf16">,
    I32EnumAttrCase<"F32", 1, "f32">,
    I32EnumAttrCase<"FP8Block32", 2, "fp8_block32">,
    I32EnumAttrCase<"FP4E2M1", 3, "fp4_e2m1">,
    I32EnumAttrCase<"FP8AsBF16", 4, "fp8_as_bf16">]> {
  let cppNamespace = "::csa";
  let genSpecializedAttr = 0;
}
def Csa_WeightFormatAttr : EnumAttr<Csa_Dialect, Csa_WeightFormatEnum, "weight_format"> {
  let summary = "storage format of a weight: bf16, f32, FP8 E4M3 with 32x32 "
                "UE8M0 block scales, FP4 E2M1 with a UE8M0 scale per 32, or "
                "FP8 blocks computed as bf16 (fp8_as_bf16: the weight is "
                "dequantized exactly, as convert.py does for wo_a, and the "
                "activations are not quantized)";
  let assemblyFormat = "$value";
}

def Csa_KernelParallelismEnum : I32EnumAttr<"KernelParallelism",
    "which loops of a kernel have independent iterations", [
    I32EnumAttrCase<"Serial", 0, "serial">,
    I32EnumAttrCase<"Rows", 1, "rows">,
    I32EnumAttrCase<"Nest", 2, "nest">,
    I32EnumAttrCase<"Channels", 3, "channels">]> {
  let cppNamespace = "::csa";
  let genSpecializedAttr = 0;
}
def Csa_KernelParallelismAttr
    : EnumAttr<Csa_Dialect, Csa_KernelParallelismEnum, "parallelism"> {
  let summary = "the independent loops of a generated kernel, for its "
                "thread mapping";
  let description = [{
    Set by the kernel selection on every host kernel (`csa.parallelism` on
    the `func.func`) and read by the NVPTX back end
    (`csa-lower-kernels-to-nvvm`) to map a kernel that has no dedicated GPU
    form to threads:

    * `serial`: the kernel's loops carry state (ordered ring stores, the
      compressor state, fused regions holding a store): one thread.
    * `rows`: the iterations of the top-level row loop are independent: a
      thread per row (or tile of rows).
    * `nest`: the row loop and every loop perfectly nested in it are
      independent: a thread per iteration of the whole nest when the nest
      has that shape, else as `rows`.
    * `channels`: the body is one loop over a constant number of
      independent channels, each walking the rows in order: a thread per
      channel.

    A kernel researcher can change it in `host.mlir` and finish with
    `csa-opt --csa-lower-kernels-to-nvvm`. Kernels with a dedicated form
    (linears, sparse attention's head form, the block forms) are recognized
    by their own attributes first.

    Example:
    ```mlir
    func.func @swiglu_32_l10(...) attributes {csa.parallelism = #csa.parallelism<nest>, ...}
    ```
  }];
  let assemblyFormat = "`<` $value `>`";
}

def Csa_AttentionFormEnum : I32EnumAttr<"AttentionForm",
    "the GPU form of a sparse attention's kernel", [
    I32EnumAttrCase<"Warp", 0, "warp">,
    I32EnumAttrCase<"Head", 1, "head">,
    I32EnumAttrCase<"Split", 2, "split">,
    I32EnumAttrCase<"Mma", 3, "mma">]> {
  let cppNamespace = "::csa";
  let genSpecializedAttr = 0;
}
def Csa_AttentionFormAttr : Csa_Attr<"AttentionForm", "attention_form"> {
  let summary = "the GPU form of the attention kernel of one csa.sparse_attention";
  let description = [{
    The lowering strategy of a `csa.sparse_attention` on the GPU, attached
    as `csa.attention_form` by `csa-select-attention-forms` (in
    `csa-fused-to-tiled`) and read by the kernel selection, which names and
    builds the op's attention kernel after it, and by the NVPTX back end,
    which lowers the kernel in it:

    * `warp`: a block per (row, head), a warp per selected row of a chunk,
      the query's channels split over the lanes, the dot's partials added by
      `shfl.sync.bfly`, one online-softmax step a chunk
      (`buildSparseAttentionWarpBody`); within the tolerance contract of
      docs/semantics.md.
    * `head`: a block per (row, head) walking the entries in the host
      kernel's order (the CPU's bits); its kernel is named
      `<kernel>_head`.
    * `split`: the warp form's walk over slices of the indices, several
      blocks per (row, head) (enough for the GPU at one row) when the query
      has at most 2 rows (a decode step; more rows run as `warp`); the last
      block of a (row, head) to finish combines the slices' partials (flash
      decoding in one launch, its partials in a module global). Named
      `<kernel>_split`; within the same tolerance as `warp`.
    * `mma` (the default where it fits): tensor cores for prefill. From 3
      query rows on, the op's kernel `<kernel>_mma` is replaced by
      `<kernel>_mma_tc`: a block per (row, 16 heads, slice of at most 256
      channels) stages a chunk of 32 selected rows in shared memory once
      for its 16 heads and computes the scores and P.V with warp-wide
      `mma.m16n8k16` (bf16 operands, fp32 sums), one online-softmax step a
      chunk (`buildSparseAttentionMmaBody`). At decode (1 or 2 rows)
      `<kernel>_mma` runs the split form's walk, faster there (a decode
      row's 8 tensor-core blocks walk 20 chunks one after another: 4x
      slower than the split form, measured). Needs heads a multiple of 16
      and a head dimension of at most 256 or 512, a multiple of 32
      (`csa::sparseAttentionMmaFits`; the verifier says so);
      `csa-select-attention-forms` gives the other ops `split`. Within the
      same tolerance as `warp`.

    `splits` (1 to 16; 0 or absent: the back end's choice, `csa-compile
    --attention-splits`) fixes the blocks a decode row's walk is split
    among in the `split` and `mma` forms (a head's in `split`, a 16-head
    tile's in `mma`); the kernel is named with `_x<N>`. The other forms
    have no split walk, and giving them `splits` is an error.

    The host target ignores it (one host kernel for both). A user edits it
    in `tiled.mlir` and finishes with `csa-compile --compile-from=tiled`.

    Example:
    ```mlir
    %o = csa.sparse_attention %q, %ring, %window ... {csa.attention_form = #csa.attention_form<head>} ...
    %p = csa.sparse_attention %q, %ring, %window ... {csa.attention_form = #csa.attention_form<split, splits = 4>} ...
    ```
  }];
  let parameters = (ins EnumParameter<Csa_AttentionFormEnum>:$value,
                        DefaultValuedParameter<"int64_t", "0">:$splits);
  let builders = [
    AttrBuilder<(ins "::csa::AttentionForm":$value), [{
      return $_get($_ctxt, value, 0);
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Csa_LinearFormEnum : I32EnumAttr<"LinearForm",
    "the GPU form of an op's matrix-vector products", [
    I32EnumAttrCase<"SplitK", 0, "split_k">,
    I32EnumAttrCase<"PerOutput", 1, "per_output">]> {
  let cppNamespace = "::csa";
  let genSpecializedAttr = 0;
}
def Csa_LinearFormAttr : Csa_Attr<"LinearForm", "linear_form"> {
  let summary = "the GPU form of the linear kernels of one op, with its "
                "block shape";
  let description = [{
    The lowering strategy of an op's linears on the GPU, attached as
    `csa.linear_form` to every `csa.linear`, `csa.compress`, `csa.moe`,
    `csa.engram` and `csa.lm_head` by
    `csa-select-linear-forms` (in `csa-fused-to-tiled`) and read by the
    kernel selection, which names and builds the op's kernels after it, and
    by the NVPTX back end, which lowers each kernel in it:

    * `split_k`: K split over a block's threads, the activations in
      registers, 16-byte weight loads (codegen/host/LinearSplitK.h): weight
      bandwidth, within the dot-product tolerance of docs/semantics.md. K
      must be a whole number of 16-byte words (FP8/FP4 K % 32, bf16 K % 8,
      f32 weights K % 4); otherwise the compile fails naming the op.
    * `per_output`: a warp per output in the host kernel's order (the CPU's
      bits); its kernels are named `<kernel>_per_output`.

    The split-K block's shape, for a kernel researcher to tune one op
    (0 or absent: the back end's choice, `csa-compile
    --linear-outputs-per-block` / `--linear-outputs-in-flight`):

    * `outputs_per_block` (1 to 64): the outputs a block computes; they must
      lie in one group, and the block's partials (outputs x threads x 4
      bytes) must fit 48 KiB of shared memory, or the compile fails naming
      the op. The kernels are named with `_o<N>`.
    * `outputs_in_flight` (1 to 16): the outputs whose weight loads a
      thread issues before their products. Named with `_f<N>`.

    They also shape the op's routed experts' grouped kernels (a `csa.moe`'s
    form is otherwise theirs alone: they are always split-K). The host
    target ignores the attribute; the row-tiled prefill form (from 2 rows)
    is the same for both. A user edits it in `tiled.mlir` and finishes with
    `csa-compile --compile-from=tiled`.

    Example:
    ```mlir
    %y = csa.linear %x, "layers.0.attn.wq_a" {csa.linear_form = #csa.linear_form<per_output>, ...}
    %z = csa.linear %y, "layers.0.attn.wq_b"
        {csa.linear_form = #csa.linear_form<split_k, outputs_per_block = 8, outputs_in_flight = 4>, ...}
    ```
  }];
  let parameters = (ins EnumParameter<Csa_LinearFormEnum>:$value,
                        DefaultValuedParameter<"int64_t", "0">:$outputs_per_block,
                        DefaultValuedParameter<"int64_t", "0">:$outputs_in_flight);
  let builders = [
    AttrBuilder<(ins "::csa::LinearForm":$value), [{
      return $_get($_ctxt, value, 0, 0);
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Csa_FusionKindEnum : I32EnumAttr<"FusionKind",
    "what a csa.fusion region computes", [
    I32EnumAttrCase<"RopeQuantizeStore", 0, "rope_quantize_store">,
    I32EnumAttrCase<"HcCollapseNorm", 1, "hc_collapse_norm">]> {
  let cppNamespace = "::csa";
  let genSpecializedAttr = 0;
}
def Csa_FusionKindAttr : EnumAttr<Csa_Dialect, Csa_FusionKindEnum, "fusion_kind"> {
  let summary = "the kind of a kernel region: rope_quantize_store (csa.rope, "
                "csa.quantize to the cache's row format, csa.cache_append), "
                "hc_collapse_norm (csa.hc_collapse, csa.rms_norm of its rows)";
  let assemblyFormat = "$value";
}

def Csa_TieBreakEnum : I32EnumAttr<"TieBreak", "top-k tie rule", [
    I32EnumAttrCase<"LowestPosition", 0, "lowest_position">]> {
  let cppNamespace = "::csa";
  let genSpecializedAttr = 0;
}
def Csa_TieBreakAttr : EnumAttr<Csa_Dialect, Csa_TieBreakEnum, "tie_break"> {
  let summary = "how top-k breaks equal scores";
  let assemblyFormat = "$value";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

def Csa_RopeTableAttr : Csa_Attr<"RopeTable", "rope"> {
  let summary = "a RoPE frequency table, optionally with YaRN scaling";
  let description = [{
    `theta` is the base. With `factor` > 1 the table is YaRN-scaled: pair
    frequencies are left alone above `beta_fast` rotations over
    `original_seq_len`, divided by `factor` below `beta_slow`, with a linear
    ramp between (no attention mscale, as in the released model). `factor` =
    1 means plain RoPE. The rotation is GPT-J style (adjacent pairs) on the
    last `dim` channels of a head.

    Example (the compressed layers' table of the released model):
    ```mlir
    #csa.rope<dim = 64, theta = 160000.0, factor = 16.0,
              original_seq_len = 65536, beta_fast = 32.0, beta_slow = 1.0>
    ```
  }];
  let parameters = (ins "int64_t":$dim, APFloatParameter<"base">:$theta,
                        APFloatParameter<"YaRN factor">:$factor,
                        "int64_t":$original_seq_len,
                        APFloatParameter<"YaRN beta_fast">:$beta_fast,
                        APFloatParameter<"YaRN beta_slow">:$beta_slow);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Csa_AttentionConfigAttr : Csa_Attr<"AttentionConfig", "attention_config"> {
  let summary = "dimensions and cache row formats of a CSA2 attention layer";
  let description = [{
    The shape facts shared by the attention layers of a model: `heads` query
    heads over one shared latent of `head_dim` channels (K = V, MQA) whose
    last `rope_dim` channels are rotated; the query LoRA rank `q_rank`; the
    sliding `window`; the indexer (`index_heads` x `index_dim`, `topk`
    selected entries); the grouped output projection (`o_groups` groups to
    `o_rank` each); and the row formats of the main KV, index-key and SWA
    caches (the main row is `!csa.fp4_row` or, as a variant, V4's
    `!csa.fp8_nope_row`; the index row `!csa.fp4_row` or, as a variant,
    `!csa.fp8_row<dim, f32, dim>`).

    Example (released DeepSeek-V4.1-Flash):
    ```mlir
    #csa.attention_config<heads = 64, head_dim = 512, rope_dim = 64,
      q_rank = 1280, window = 128, index_heads = 32, index_dim = 128,
      index_rope_dim = 64, topk = 512, o_groups = 8, o_rank = 1024,
      main_row = !csa.fp4_row<512, e4m3, 16>,
      index_row = !csa.fp4_row<128, ue8m0, 32>,
      swa_row = !csa.fp8_row<512, ue8m0, 32>>
    ```
  }];
  let parameters = (ins "int64_t":$heads, "int64_t":$head_dim,
                        "int64_t":$rope_dim, "int64_t":$q_rank,
                        "int64_t":$window, "int64_t":$index_heads,
                        "int64_t":$index_dim, "int64_t":$index_rope_dim,
                        "int64_t":$topk, "int64_t":$o_groups,
                        "int64_t":$o_rank, "::csa::CacheRowTypeInterface":$main_row,
                        "::csa::CacheRowTypeInterface":$index_row,
                        "::csa::Fp8RowType":$swa_row);
  // Row formats are printed qualified (`!csa.fp4_row<...>`) so they read as
  // the types they are.
  let assemblyFormat = [{
    `<` `heads` `=` $heads `,` `head_dim` `=` $head_dim `,` `rope_dim` `=`
    $rope_dim `,` `q_rank` `=` $q_rank `,` `window` `=` $window `,`
    `index_heads` `=` $index_heads `,` `index_dim` `=` $index_dim `,`
    `index_rope_dim` `=` $index_rope_dim `,` `topk` `=` $topk `,`
    `o_groups` `=` $o_groups `,` `o_rank` `=` $o_rank `,`
    `main_row` `=` qualified($main_row) `,`
    `index_row` `=` qualified($index_row) `,`
    `swa_row` `=` qualified($swa_row) `>`
  }];
  let genVerifyDecl = 1;
}

def Csa_HsiConfigAttr : Csa_Attr<"HsiConfig", "hsi"> {
  let summary = "Hierarchical Sparse Indexer pool shape";
  let description = [{
    The candidate pool a candidate-source layer builds: the top `blocks`
    blocks of `block_size` consecutive compressed positions (the block score
    is the max over its positions; the block holding the newest visible
    position is always kept).

    Example: `#csa.hsi<blocks = 2048, block_size = 8>` (a pool of at most
    16384 positions).
  }];
  let parameters = (ins "int64_t":$blocks, "int64_t":$block_size);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Csa_RowTileAttr : Csa_Attr<"RowTile", "row_tile"> {
  let summary = "rows per tile of an op's host linear kernels";
  let description = [{
    The lowering strategy's row tile, attached as `csa.row_tile` to every
    `csa.linear`, `csa.compress`, `csa.moe`, `csa.engram` and `csa.lm_head` by
    `csa-tile-kernels` (in `csa-fused-to-tiled`). The op's host linear kernels
    process the rows of a call in tiles of `rows` (the quantized ones decode
    each weight block once a tile; every output's accumulation order is the
    same for any tile, so the bits are too) and are named for it (`_t8`); an
    op whose input has one static row (a decode step) gets 1, the untiled
    kernel. The GPU's own tiles belong to the op's `#csa.linear_form` and the
    NVPTX back end's forms. A user edits it in `tiled.mlir` and finishes with
    `csa-compile --compile-from=tiled`; `rows` must be at least 1.

    Example:
    ```mlir
    %y = csa.linear %x weight "layers.2.attn.wq_a" fp8_block32 {csa.row_tile = #csa.row_tile<8>}
        : tensor<?x5120xbf16> -> tensor<?x1024xbf16>
    ```
  }];
  let parameters = (ins "int64_t":$rows);
  let assemblyFormat = "`<` $rows `>`";
  let genVerifyDecl = 1;
}

#endif // CSA_DIALECTS_CSA_CSAATTRS_TD

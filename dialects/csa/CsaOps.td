//===- CsaOps.td - csa operations --------------------------*- tablegen -*-===//
//
// Graph-level ops (one per model block) come first, then the primitives that
// the CSA2 modes expand into. Every op has a verifier; the schedule rules that
// relate attention layers to each other are in ScheduleRules.h.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_DIALECTS_CSA_CSAOPS_TD
#define CSA_DIALECTS_CSA_CSAOPS_TD

include "dialects/csa/CsaTypes.td"
include "dialects/csa/CsaInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

// Layer numbers, sizes and counts: signless i64 read back as int64_t, so that
// verifiers see a negative value as negative.
def Csa_I64Attr : TypedSignlessIntegerAttrBase<I64, "int64_t",
                                               "64-bit integer attribute"> {
  let convertFromStorage = "$_self.getValue().getSExtValue()";
}

def Csa_Tokens : TensorRankOf<[I32], [1]>;
def Csa_Hidden : TensorRankOf<[BF16], [2]>;
def Csa_Streams : TensorRankOf<[BF16], [3]>;
def Csa_Heads : TensorRankOf<[BF16], [3]>;
def Csa_F32Matrix : TensorRankOf<[F32], [2]>;

class Csa_GraphOp<string mnemonic, list<Trait> traits = []>
    : Csa_Op<mnemonic, !listconcat(traits,
        [DeclareOpInterfaceMethods<Csa_CostOpInterface>])> {
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Graph level
//===----------------------------------------------------------------------===//

def Csa_EmbedOp : Csa_GraphOp<"embed", [Pure]> {
  let summary = "token embedding lookup";
  let description = [{
    Looks up one bf16 row of `weight` ([vocab, dim]) per token id.

    Example:
    ```mlir
    %h = csa.embed %tokens vocab 129280 weight "embed.weight"
        : tensor<?xi32> -> tensor<?x5120xbf16>
    ```
  }];
  let arguments = (ins Csa_Tokens:$tokens, Csa_I64Attr:$vocab, StrAttr:$weight);
  let results = (outs Csa_Hidden:$result);
  let assemblyFormat = [{
    $tokens `vocab` $vocab `weight` $weight attr-dict `:` type($tokens) `->` type($result)
  }];
}

def Csa_HcExpandOp : Csa_GraphOp<"hc_expand", [Pure]> {
  let summary = "copy the embedding into the mHC residual streams";
  let description = [{
    The mHC residual has `hc` identical streams at the start of the model.

    Example:
    ```mlir
    %X = csa.hc_expand %h : tensor<?x5120xbf16> -> tensor<?x4x5120xbf16>
    ```
  }];
  let arguments = (ins Csa_Hidden:$input);
  let results = (outs Csa_Streams:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Csa_HcMixOp : Csa_GraphOp<"hc_mix", [Pure]> {
  let summary = "mHC mixing coefficients with Sinkhorn normalisation";
  let description = [{
    From the flattened streams X ([N, hc*dim], fp32), computes
    m = (X @ fn^T) * rsqrt(mean(X^2) + eps_rms) with `fn` of shape
    [hc*(2+hc), hc*dim], then:
    `pre = sigmoid(m[0:hc]*s0 + b) + eps`, `post = 2*sigmoid(m[hc:2hc]*s1 + b)`,
    and `comb` = a softmax over the hc x hc block followed by `iters`
    alternating row/column normalisations (Sinkhorn), each adding `eps`.
    `weights` is the name prefix of `<prefix>_fn`, `<prefix>_base` and
    `<prefix>_scale`. All arithmetic is fp32.

    Example:
    ```mlir
    %pre, %post, %comb = csa.hc_mix %X iters 20 eps 1.0e-06
        weights "layers.2.hc_attn"
        : tensor<?x4x5120xbf16> -> tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>
    ```
  }];
  let arguments = (ins Csa_Streams:$streams, Csa_I64Attr:$iters, F64Attr:$eps,
                       StrAttr:$weights);
  let results = (outs Csa_F32Matrix:$pre, Csa_F32Matrix:$post,
                      TensorRankOf<[F32], [3]>:$comb);
  let assemblyFormat = [{
    $streams `iters` $iters `eps` $eps `weights` $weights attr-dict `:`
    type($streams) `->` type($pre) `,` type($post) `,` type($comb)
  }];
}

def Csa_HcCollapseOp : Csa_GraphOp<"hc_collapse", [Pure]> {
  let summary = "weighted sum of the mHC streams";
  let description = [{
    `result[n] = sum_i pre[n, i] * streams[n, i]`: the input of a sub-layer
    (before its RMSNorm), or the model output before the final norm.

    Example:
    ```mlir
    %x = csa.hc_collapse %X, %pre
        : tensor<?x4x5120xbf16>, tensor<?x4xf32> -> tensor<?x5120xbf16>
    ```
  }];
  let arguments = (ins Csa_Streams:$streams, Csa_F32Matrix:$pre);
  let results = (outs Csa_Hidden:$result);
  let assemblyFormat = [{
    $streams `,` $pre attr-dict `:` type($streams) `,` type($pre) `->` type($result)
  }];
}

def Csa_HcUpdateOp : Csa_GraphOp<"hc_update",
    [Pure, AllTypesMatch<["streams", "result"]>]> {
  let summary = "mHC residual update";
  let description = [{
    `result[n, j] = post[n, j] * update[n] + sum_i comb[n, i, j] * streams[n, i]`
    (i the source stream, j the destination).

    Example:
    ```mlir
    %X2 = csa.hc_update %X, %y, %post, %comb
        : tensor<?x4x5120xbf16>, tensor<?x5120xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>
    ```
  }];
  let arguments = (ins Csa_Streams:$streams, Csa_Hidden:$update,
                       Csa_F32Matrix:$post, TensorRankOf<[F32], [3]>:$comb);
  let results = (outs Csa_Streams:$result);
  let assemblyFormat = [{
    $streams `,` $update `,` $post `,` $comb attr-dict `:` type($streams) `,`
    type($update) `,` type($post) `,` type($comb)
  }];
}

def Csa_RmsNormOp : Csa_GraphOp<"rms_norm",
    [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "RMSNorm over the last dimension";
  let description = [{
    `x * rsqrt(mean(x^2) + eps) * weight`, computed in fp32. The released
    model uses eps = 1e-20 everywhere.

    Example:
    ```mlir
    %n = csa.rms_norm %x eps 1.0e-20 weight "layers.2.attn_norm" : tensor<?x5120xbf16>
    ```
  }];
  let arguments = (ins TensorRankOf<[BF16], [2, 3]>:$input, F64Attr:$eps,
                       StrAttr:$weight);
  let results = (outs TensorRankOf<[BF16], [2, 3]>:$result);
  let assemblyFormat = [{
    $input `eps` $eps `weight` $weight attr-dict `:` type($input)
  }];
}

def Csa_EngramOp : Csa_GraphOp<"engram",
    [Pure, AllTypesMatch<["streams", "result"]>]> {
  let summary = "Engram n-gram memory lookup and gated update of the streams";
  let description = [{
    Hashes the last `max_ngram` token ids (orders 2..max_ngram, `heads` hash
    heads each; token ids mapped to `compressed_vocab` classes, positions
    before the sequence taking `pad_id`'s class; bucket sizes are the primes
    searched from `hash_vocab`, as engram.py does) into a table of `rows` FP8
    rows of `head_dim` (UE8M0 scale per 32), projects the gathered rows to one key per stream plus one value
    (`wkv`, FP8), and adds `sigmoid(signed sqrt(<q, k>)) * value` to every
    stream. `position` is the position of the first token (the hash reaches
    back before it through the per-sequence id history).

    Example:
    ```mlir
    %X2 = csa.engram %X, %tokens, %pos layer 1 max_ngram 4 heads 8 head_dim 256
        rows 384006168 hash_vocab 16000000 compressed_vocab 99092 pad_id 2
        weights "layers.1.engram"
        : tensor<?x4x5120xbf16>, tensor<?xi32>
    ```
  }];
  let arguments = (ins Csa_Streams:$streams, Csa_Tokens:$tokens,
                       Index:$position, Csa_I64Attr:$layer, Csa_I64Attr:$max_ngram,
                       Csa_I64Attr:$heads, Csa_I64Attr:$head_dim, Csa_I64Attr:$rows,
                       Csa_I64Attr:$hash_vocab, Csa_I64Attr:$compressed_vocab,
                       Csa_I64Attr:$pad_id, StrAttr:$weights);
  let results = (outs Csa_Streams:$result);
  let assemblyFormat = [{
    $streams `,` $tokens `,` $position `layer` $layer `max_ngram` $max_ngram
    `heads` $heads `head_dim` $head_dim `rows` $rows `hash_vocab` $hash_vocab
    `compressed_vocab` $compressed_vocab `pad_id` $pad_id `weights` $weights
    attr-dict `:` type($streams) `,` type($tokens)
  }];
  let extraClassDeclaration = [{
    /// Width of the gathered rows: (max_ngram - 1) * heads * head_dim.
    int64_t getGatherWidth() {
      return (getMaxNgram() - 1) * getHeads() * getHeadDim();
    }
  }];
}

def Csa_AttentionOp : Csa_GraphOp<"attention",
    [AllTypesMatch<["input", "result"]>]> {
  let summary = "a CSA2 attention layer (graph level)";
  let description = [{
    One attention layer of DeepSeek-V4.1: the query path (LoRA `q_rank`, no
    per-head norm), the layer's own sliding-window KV (FP8 rows in an SWA
    ring), and, for ratio > 0, the compressed branch selected by `mode`:

    * `full`: owns a compressor (ratio 2: per-channel softmax pooling with a
      partial-group state; ratio 1: no gate) writing FP4 main-KV rows, and an
      indexer (keys published as FP4 index rows) selecting its own top-k.
      `candidate_pool` makes it the HSI candidate source.
    * `reindex`: its own indexer queries scored against `kv_source`'s index
      keys, only inside `candidate_source`'s pool; its own top-k.
    * `reuse`: attends `kv_source`'s cache at `index_source`'s top-k.
    * `swa_only`: window only (ratio 0).

    The op is stateful: its caches live for the sequence. Attention is one
    softmax over window rows plus selected rows, with a per-head sink logit in
    the denominator. `position` is the position of the first input token;
    `weights` is the checkpoint name prefix of the layer's attention tensors.

    Example (layer 24 of the released model):
    ```mlir
    %y = csa.attention %x, %pos layer 24 reindex ratio 1 kv_source 20
        candidate_source 20 rope #rope config #cfg weights "layers.24.attn"
        : tensor<?x5120xbf16>
    ```
  }];
  let arguments = (ins Csa_Hidden:$input, Index:$position, Csa_I64Attr:$layer,
                       Csa_AttentionModeAttr:$mode, Csa_I64Attr:$ratio,
                       OptionalAttr<Csa_I64Attr>:$kv_source,
                       OptionalAttr<Csa_I64Attr>:$index_source,
                       OptionalAttr<Csa_I64Attr>:$candidate_source,
                       OptionalAttr<Csa_HsiConfigAttr>:$candidate_pool,
                       Csa_RopeTableAttr:$rope,
                       Csa_AttentionConfigAttr:$config, StrAttr:$weights);
  let results = (outs Csa_Hidden:$result);
  let assemblyFormat = [{
    $input `,` $position `layer` $layer `` $mode `ratio` $ratio
    (`kv_source` $kv_source^)? (`index_source` $index_source^)?
    (`candidate_source` $candidate_source^)?
    (`candidate_pool` $candidate_pool^)?
    `rope` $rope `config` $config `weights` $weights attr-dict `:` type($input)
  }];
  let extraClassDeclaration = [{
    /// The layer's role in the schedule, for the rules in ScheduleRules.h.
    ::csa::LayerRole getRole();
    /// Whether the layer writes a global cache (Full mode).
    bool ownsGlobalCache() { return getMode() == AttentionMode::Full; }
    /// Whether the layer runs an indexer (Full and Reindex).
    bool isIndexSource() {
      return getMode() == AttentionMode::Full ||
             getMode() == AttentionMode::Reindex;
    }
    /// The global cache a Full layer owns.
    GlobalCacheType getGlobalCacheType();
    /// The SWA ring every layer owns.
    SwaRingType getSwaRingType();
    /// Compressed entries visible to a decode token at `context` tokens.
    int64_t getVisibleEntries(int64_t context);
    /// Rows gathered by sparse attention for one decode token: window rows
    /// plus selected compressed rows.
    int64_t getAttendedRows(int64_t context);
    /// Index-key rows scored for one decode token (0 unless an index
    /// source); a Reindex layer scores at most its candidate pool.
    int64_t getScoredRows(int64_t context);
  }];
}

def Csa_MoeOp : Csa_GraphOp<"moe",
    [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "mixture of experts with sqrt-softplus routing";
  let description = [{
    `s = sqrt(softplus(x @ gate^T))` over `experts` routed experts; the top
    `top_k` of `s + bias` are selected (the bias only selects), their weights
    `s / sum(s) * route_scale`; each expert is a SwiGLU with `up` clamped to
    +-`swiglu_limit` and `gate` clamped above at `swiglu_limit`; `shared`
    always-on experts are added. Routed experts are stored in
    `expert_format`, shared ones in `shared_format`.

    Example:
    ```mlir
    %y = csa.moe %x layer 2 experts 384 top_k 6 shared 1 inter 2304
        route_scale 1.5 swiglu_limit 10.0 expert_format fp4_e2m1
        shared_format fp8_block32 weights "layers.2.ffn" : tensor<?x5120xbf16>
    ```
  }];
  let arguments = (ins Csa_Hidden:$input, Csa_I64Attr:$layer, Csa_I64Attr:$experts,
                       Csa_I64Attr:$top_k, Csa_I64Attr:$shared, Csa_I64Attr:$inter,
                       F64Attr:$route_scale, F64Attr:$swiglu_limit,
                       Csa_WeightFormatAttr:$expert_format,
                       Csa_WeightFormatAttr:$shared_format, StrAttr:$weights);
  let results = (outs Csa_Hidden:$result);
  let assemblyFormat = [{
    $input `layer` $layer `experts` $experts `top_k` $top_k `shared` $shared
    `inter` $inter `route_scale` $route_scale `swiglu_limit` $swiglu_limit
    `expert_format` `` $expert_format `shared_format` `` $shared_format
    `weights` $weights attr-dict `:` type($input)
  }];
}

def Csa_LmHeadOp : Csa_GraphOp<"lm_head", [Pure]> {
  let summary = "output projection to fp32 logits";
  let description = [{
    `logits = x @ weight^T` in fp32 (the head is stored bf16). With
    `last_only`, only the last row's logits are produced (prefill).

    Example:
    ```mlir
    %logits = csa.lm_head %y vocab 129280 weight "head.weight" last_only
        : tensor<?x5120xbf16> -> tensor<1x129280xf32>
    ```
  }];
  let arguments = (ins Csa_Hidden:$input, Csa_I64Attr:$vocab, StrAttr:$weight,
                       UnitAttr:$last_only);
  let results = (outs Csa_F32Matrix:$result);
  let assemblyFormat = [{
    $input `vocab` $vocab `weight` $weight (`last_only` $last_only^)? attr-dict
    `:` type($input) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Primitives
//===----------------------------------------------------------------------===//

def Csa_LinearOp : Csa_Op<"linear", [Pure]> {
  let summary = "y = x @ W^T with a weight in one of the released formats";
  let description = [{
    FP8 weights use 32x32 UE8M0 block scales and take activations quantized
    to FP8 per 32 channels (UE8M0); FP4 weights (E2M1, UE8M0 per 32 along K)
    take the same FP8 activations; bf16/f32 weights are applied in the
    activation's precision. `fp8_as_bf16` weights are stored as FP8 blocks
    but computed as the bf16 weight they dequantize to exactly (E4M3 times a
    power of two), with unquantized activations: what the released model
    does with `wo_a` after convert.py. Accumulation is fp32.

    With `groups` = g > 1 (bf16, f32 and fp8_as_bf16 only) the weight is
    block-diagonal: group i maps input channels [i*K/g, (i+1)*K/g) to output
    rows [i*N/g, (i+1)*N/g) (the grouped low-rank output projection `wo_a`).

    Examples:
    ```mlir
    %q = csa.linear %x weight "layers.2.attn.wq_a" fp8_block32
        : tensor<?x5120xbf16> -> tensor<?x1280xbf16>
    %u = csa.linear %o weight "layers.2.attn.wo_a" fp8_as_bf16 groups 8
        : tensor<?x32768xbf16> -> tensor<?x8192xbf16>
    ```
  }];
  let arguments = (ins TensorRankOf<[BF16, F32], [2]>:$input, StrAttr:$weight,
                       Csa_WeightFormatAttr:$format,
                       DefaultValuedAttr<Csa_I64Attr, "1">:$groups);
  let results = (outs TensorRankOf<[BF16, F32], [2]>:$result);
  let assemblyFormat = [{
    $input `weight` $weight `` $format (`groups` $groups^)? attr-dict `:`
    type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Csa_RopeOp : Csa_Op<"rope", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "rotary embedding of the last `table.dim` channels";
  let description = [{
    Row i (the second-to-last dimension indexes heads where present) is
    rotated at position `position + i * stride`: stride 1 for tokens, stride
    r for ratio-r compressed entries (rotated at their group's first token).
    `inverse` conjugates the rotation (removes the query rotation from the
    attention output).

    Example:
    ```mlir
    %q2 = csa.rope %q, %pos stride 1 table #csa.rope<dim = 64, theta = 1.0e+04,
        factor = 1.0, original_seq_len = 65536, beta_fast = 32.0,
        beta_slow = 1.0> : tensor<?x64x512xbf16>
    ```
  }];
  let arguments = (ins TensorRankOf<[BF16, F32], [2, 3]>:$input,
                       Index:$position, Csa_I64Attr:$stride,
                       Csa_RopeTableAttr:$table, UnitAttr:$inverse);
  let results = (outs TensorRankOf<[BF16, F32], [2, 3]>:$result);
  let assemblyFormat = [{
    $input `,` $position `stride` $stride `table` $table
    (`inverse` $inverse^)? attr-dict `:` type($input)
  }];
  let hasVerifier = 1;
}

def Csa_CompressOp : Csa_Op<"compress"> {
  let summary = "CED KV projection / compressor of a Full layer";
  let description = [{
    Projects the layer input to the latent (`<weights>.wkv`) and, for
    `ratio` > 1, pools each group of `ratio` consecutive tokens with a
    per-channel softmax over the gate scores (`<weights>.wgate`, hence
    `gated`), carrying an incomplete trailing group in `state`. Ratio 1 (the
    CED decoder source) has neither gate nor state: one entry per token.
    The result holds one pre-RoPE, RMS-normalised latent row per completed
    group.

    Example:
    ```mlir
    %lat = csa.compress %x, %pos ratio 2 state(%st : !csa.compressor_state<2, 512>)
        gated weights "layers.2.attn.compressor"
        : tensor<?x5120xbf16> -> tensor<?x512xbf16>
    ```
  }];
  let arguments = (ins Csa_Hidden:$input, Index:$position, Csa_I64Attr:$ratio,
                       Optional<Csa_CompressorStateType>:$state,
                       UnitAttr:$gated, StrAttr:$weights);
  let results = (outs Csa_Hidden:$result);
  let assemblyFormat = [{
    $input `,` $position `ratio` $ratio
    (`state` `(` $state^ `:` qualified(type($state)) `)`)? (`gated` $gated^)?
    `weights` $weights attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

// Reads the index keys stored in `cache`, so not Pure: it must not move across
// the cache_append that publishes them.
def Csa_IndexScoreOp : Csa_Op<"index_score", [MemoryEffects<[MemRead]>]> {
  let summary = "indexer scores: multi-head ReLU, weighted sum over heads";
  let description = [{
    `score[n, t] = sum_h relu(q[n, h] . key[t]) * w'[n, h]` against the
    index keys of `cache` (dequantized FP4 rows), where
    `w' = bf16(w * (H * D)^-1/2)` (H heads of D channels). The queries are
    quantized to FP4 (E2M1, UE8M0 per 32) first, as the released indexer
    does. Query row n is at position `p` (rows answer by position, as the
    top-k sets do): it sees the `(p + 1) / ratio` entries whose groups are
    complete; later positions, and entries not yet written, score -inf. The
    result has `(p_last + 1) / ratio` columns.

    With `published` (the released model's index-key publication, spec
    §10.1; `csa-compile --index-publication=release`): on a decode step at
    position `p` the keys are those of `published[published_at[p % N]]`
    (N entries), or of `cache` where that entry is -1: the last layer that
    published index keys, which for a Full layer whose group this step does
    not complete is an earlier layer's (or the previous step's). The
    entries read are still the first `(p + 1) / ratio` of this layer's
    ratio. Prefill rows always read `cache`.

    Example:
    ```mlir
    %s = csa.index_score %q, %w, %cache
        : tensor<?x32x128xbf16>, tensor<?x32xbf16>,
          !csa.global_cache<1, !csa.fp4_row<512, e4m3, 16>, !csa.fp4_row<128, ue8m0, 32>>
        -> tensor<?x?xf32>
    // Release publication: odd positions read %c20's keys, even ones its own.
    %r = csa.index_score %q, %w, %c2 published(%c20 : !csa.global_cache<1, ...>) at [0, -1]
        : ...
    ```
  }];
  let arguments = (ins Csa_Heads:$query, Csa_Hidden:$head_weights,
                       Csa_GlobalCacheType:$cache,
                       Variadic<Csa_GlobalCacheType>:$published,
                       OptionalAttr<DenseI64ArrayAttr>:$published_at);
  let results = (outs Csa_F32Matrix:$scores);
  let assemblyFormat = [{
    $query `,` $head_weights `,` $cache
    (`published` `(` $published^ `:` qualified(type($published)) `)` `at` $published_at)?
    attr-dict `:` type($query) `,`
    type($head_weights) `,` qualified(type($cache)) `->` type($scores)
  }];
  let hasVerifier = 1;
}

def Csa_HsiSelectOp : Csa_Op<"hsi_select", [Pure]> {
  let summary = "HSI level 1: select the best blocks of compressed positions";
  let description = [{
    Per query row: pads the scores to a multiple of the block size with
    -inf, scores each block by its max, forces the block holding the newest
    visible position to +inf, keeps the top `blocks` blocks (dropping -inf
    ones). The result type gives the pool shape.

    Example:
    ```mlir
    %pool = csa.hsi_select %s : tensor<?x?xf32> -> !csa.candidate_pool<2048, 8>
    ```
  }];
  let arguments = (ins Csa_F32Matrix:$scores);
  let results = (outs Csa_CandidatePoolType:$pool);
  let assemblyFormat = "$scores attr-dict `:` type($scores) `->` qualified(type($pool))";
  let hasVerifier = 1;
}

def Csa_TopKOp : Csa_Op<"topk", [Pure]> {
  let summary = "top-k positions per row with deterministic ties";
  let description = [{
    Selects the k = `result.k` highest scores per row (fewer if fewer are
    visible, padded with -1), optionally only inside a candidate pool, and
    returns them sorted by position. Equal scores are broken by `ties`:
    `lowest_position` (the default) keeps the lower position, so the same
    inputs always give the same bits.

    Example:
    ```mlir
    %sel = csa.topk %s within %pool : !csa.candidate_pool<2048, 8>
        : tensor<?x?xf32> -> !csa.topk<512>
    ```
  }];
  let arguments = (ins Csa_F32Matrix:$scores,
                       Optional<Csa_CandidatePoolType>:$pool,
                       DefaultValuedAttr<Csa_TieBreakAttr,
                           "::csa::TieBreak::LowestPosition">:$ties);
  let results = (outs Csa_TopKType:$result);
  let assemblyFormat = [{
    $scores (`within` $pool^ `:` qualified(type($pool)))? (`ties` `` $ties^)?
    attr-dict `:` type($scores) `->` qualified(type($result))
  }];
  let hasVerifier = 1;
}

def Csa_QuantizeOp : Csa_Op<"quantize", [Pure]> {
  let summary = "quantize rows into a released cache row format";
  let description = [{
    Each row of `dim` channels becomes one `!csa.fp4_row` or `!csa.fp8_row`
    with the rounding of the released kernels (see the row types).

    Example:
    ```mlir
    %rows = csa.quantize %lat : tensor<?x512xbf16> -> tensor<?x!csa.fp4_row<512, e4m3, 16>>
    ```
  }];
  let arguments = (ins TensorRankOf<[BF16, F32], [2]>:$input);
  let results = (outs TensorRankOf<[Csa_Fp4RowType, Csa_Fp8RowType, Csa_Fp8NopeRowType], [1]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Csa_DequantizeOp : Csa_Op<"dequantize", [Pure]> {
  let summary = "expand cache rows back to values";
  let description = [{
    The inverse of `csa.quantize` up to rounding: value times its group scale
    (an E2M1 value times an E4M3 scale is exact in bf16).

    Example:
    ```mlir
    %v = csa.dequantize %rows : tensor<?x!csa.fp4_row<512, e4m3, 16>> -> tensor<?x512xbf16>
    ```
  }];
  let arguments = (ins TensorRankOf<[Csa_Fp4RowType, Csa_Fp8RowType, Csa_Fp8NopeRowType], [1]>:$input);
  let results = (outs TensorRankOf<[BF16, F32], [2]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Csa_CacheAllocOp : Csa_Op<"cache_alloc", [MemoryEffects<[MemAlloc]>]> {
  let summary = "allocate a layer's per-sequence cache or state";
  let description = [{
    Creates the global cache of a Full layer, the SWA ring of any layer, or
    the compressor state of a ratio > 1 Full layer. The cache planner turns
    these into offsets of the runtime's memory plan.

    Example:
    ```mlir
    %ring = csa.cache_alloc layer 2 : !csa.swa_ring<128, !csa.fp8_row<512, ue8m0, 32>>
    ```
  }];
  let arguments = (ins Csa_I64Attr:$layer);
  let results = (outs Csa_CacheHandle:$cache);
  let assemblyFormat = "`layer` $layer attr-dict `:` qualified(type($cache))";
  let hasVerifier = 1;
}

def Csa_CacheAppendOp : Csa_Op<"cache_append",
    [MemoryEffects<[MemWrite]>]> {
  let summary = "store quantized rows into a cache at a position";
  let description = [{
    Writes `rows` at entry `position` onwards: into the SWA ring (slot
    p % window), or into a global cache's main-KV or index-key part (chosen
    by the row type).

    Example:
    ```mlir
    csa.cache_append %rows, %ring[%pos]
        : tensor<?x!csa.fp8_row<512, ue8m0, 32>>, !csa.swa_ring<128, !csa.fp8_row<512, ue8m0, 32>>
    ```
  }];
  let arguments = (ins TensorRankOf<[Csa_Fp4RowType, Csa_Fp8RowType, Csa_Fp8NopeRowType], [1]>:$rows,
                       Csa_CacheHandle:$cache, Index:$position);
  let assemblyFormat = [{
    $rows `,` $cache `[` $position `]` attr-dict `:` type($rows) `,` qualified(type($cache))
  }];
  let hasVerifier = 1;
}

def Csa_SparseAttentionOp : Csa_Op<"sparse_attention",
    [MemoryEffects<[MemRead]>, AttrSizedOperandSegments]> {
  let summary = "one softmax over window rows and selected compressed rows";
  let description = [{
    For the query rows of this call (positions `position` ..): each query at
    position p attends the window positions max(0, p - window + 1) .. p and,
    when given, the rows of `cache` listed in `selected` (K = V = the
    dequantized row); one softmax over their union with the head's sink logit
    (`<sink>`, fp32 [heads]) added unscaled to the denominator only; -1
    indices contribute nothing and a row with no valid index gives 0.

    Window rows at positions of this call come from `fresh` (the call's own
    SWA rows, one per query row), older ones from the `window` ring when it
    holds them: a ring holds the positions appended to it, so a fresh
    sequence's ring, or that of a layer bounded replay starts late, holds
    none before the call and those window positions are absent. So a
    prefill longer than the window (whose ring keeps only the last `window`
    rows), a decode step and a chunk of a chunked prefill mean the same thing.

    Example:
    ```mlir
    %o = csa.sparse_attention %q, %ring[%rows] at %pos global(%cache, %sel
          : !csa.global_cache<1, !csa.fp4_row<512, e4m3, 16>, !csa.fp4_row<128, ue8m0, 32>>,
            !csa.topk<512>)
        sink "layers.24.attn.attn_sink" scale 0.044194173824159216
        : tensor<?x64x512xbf16>, !csa.swa_ring<128, !csa.fp8_row<512, ue8m0, 32>>,
          tensor<?x!csa.fp8_row<512, ue8m0, 32>>
        -> tensor<?x64x512xbf16>
    ```
  }];
  let arguments = (ins Csa_Heads:$query, Csa_SwaRingType:$window,
                       TensorRankOf<[Csa_Fp8RowType], [1]>:$fresh,
                       Index:$position,
                       Optional<Csa_GlobalCacheType>:$cache,
                       Optional<Csa_TopKType>:$selected, StrAttr:$sink,
                       F64Attr:$scale);
  let results = (outs Csa_Heads:$result);
  let assemblyFormat = [{
    $query `,` $window `[` $fresh `]` `at` $position
    (`global` `(` $cache^ `,` $selected `:` qualified(type($cache)) `,` qualified(type($selected)) `)`)?
    `sink` $sink `scale` $scale attr-dict `:` type($query) `,` qualified(type($window))
    `,` type($fresh) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Csa_MoeRouteOp : Csa_Op<"moe_route", [Pure]> {
  let summary = "sqrt-softplus routing with a selection-only bias";
  let description = [{
    `s = sqrt(softplus(x @ gate^T))` in fp32; selects the `top_k` experts of
    `s + <weights>.bias`; returns their ids and weights
    `s / (sum(s) + 1e-20) * route_scale`.

    Example:
    ```mlir
    %w, %ids = csa.moe_route %x experts 384 top_k 6 route_scale 1.5
        weights "layers.2.ffn.gate"
        : tensor<?x5120xbf16> -> tensor<?x6xf32>, tensor<?x6xi32>
    ```
  }];
  let arguments = (ins Csa_Hidden:$input, Csa_I64Attr:$experts, Csa_I64Attr:$top_k,
                       F64Attr:$route_scale, StrAttr:$weights);
  let results = (outs Csa_F32Matrix:$expert_weights,
                      TensorRankOf<[I32], [2]>:$expert_ids);
  let assemblyFormat = [{
    $input `experts` $experts `top_k` $top_k `route_scale` $route_scale
    `weights` $weights attr-dict `:` type($input) `->` type($expert_weights)
    `,` type($expert_ids)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Kernel regions (the fused stage)
//===----------------------------------------------------------------------===//

def Csa_FusionOp : Csa_Op<"fusion", [IsolatedFromAbove, RecursiveMemoryEffects,
    SingleBlockImplicitTerminator<"::csa::YieldOp">]> {
  let summary = "ops that run as one kernel";
  let description = [{
    A kernel boundary chosen by `csa-fuse-kernels`: the ops of the body run
    as one generated kernel, one call of the runtime. The body is isolated
    from above: its block arguments are the region's inputs, in order, and
    `csa.yield` gives the results (the values later ops still read). `kind`
    says what the region computes, and the verifier checks the body is that
    computation: `rope_quantize_store` is `csa.rope`, `csa.quantize` of its
    result and `csa.cache_append` of the quantized rows, in that order;
    `hc_collapse_norm` is `csa.hc_collapse` of mHC's streams and `csa.rms_norm`
    of its rows (the sub-layer's input norm).

    Example (the rope + quantize + store of a layer's SWA row, whose rows
    attention also reads):
    ```mlir
    %rows = csa.fusion rope_quantize_store (%kv, %pos, %pos, %ring)
        : (tensor<?x512xbf16>, index, index, !csa.swa_ring<128, !csa.fp8_row<512, ue8m0, 32>>)
        -> tensor<?x!csa.fp8_row<512, ue8m0, 32>> {
    ^bb0(%x: tensor<?x512xbf16>, %p: index, %s: index,
         %c: !csa.swa_ring<128, !csa.fp8_row<512, ue8m0, 32>>):
      %r = csa.rope %x, %p stride 1 table #rope
          : tensor<?x512xbf16>
      %q = csa.quantize %r : tensor<?x512xbf16> -> tensor<?x!csa.fp8_row<512, ue8m0, 32>>
      csa.cache_append %q, %c[%s]
          : tensor<?x!csa.fp8_row<512, ue8m0, 32>>, !csa.swa_ring<128, !csa.fp8_row<512, ue8m0, 32>>
      csa.yield %q : tensor<?x!csa.fp8_row<512, ue8m0, 32>>
    }
    ```

    Example (mHC's collapse of the streams and the FFN's input norm):
    ```mlir
    %normed = csa.fusion hc_collapse_norm (%streams, %pre)
        : (tensor<?x4x5120xbf16>, tensor<?x4xf32>) -> tensor<?x5120xbf16> {
    ^bb0(%s: tensor<?x4x5120xbf16>, %p: tensor<?x4xf32>):
      %c = csa.hc_collapse %s, %p : tensor<?x4x5120xbf16>, tensor<?x4xf32> -> tensor<?x5120xbf16>
      %n = csa.rms_norm %c eps 1.0E-6 weight "layers.3.ffn_norm" : tensor<?x5120xbf16>
      csa.yield %n : tensor<?x5120xbf16>
    }
    ```
  }];
  let arguments = (ins Csa_FusionKindAttr:$kind, Variadic<AnyType>:$inputs);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind ` ` `(` $inputs `)` attr-dict `:` functional-type($inputs, $results)
    $body
  }];
  let skipDefaultBuilders = 1;
  let builders = [
    OpBuilder<(ins "::csa::FusionKind":$kind, "::mlir::TypeRange":$results,
                   "::mlir::ValueRange":$inputs)>,
  ];
  let hasVerifier = 1;
}

def Csa_YieldOp : Csa_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"::csa::FusionOp">]> {
  let summary = "the results of a csa.fusion region";
  let description = [{
    Ends a `csa.fusion` body; its operands become the region's results.

    Example:
    ```mlir
    csa.yield %q : tensor<?x!csa.fp8_row<512, ue8m0, 32>>
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
  let builders = [OpBuilder<(ins), [{ /* no values */ }]>];
}

#endif // CSA_DIALECTS_CSA_CSAOPS_TD

// RUN: csa-opt %s -split-input-file -verify-diagnostics
// One case per op verifier rule (schedule rules: invalid-schedule.mlir).

func.func @f(%t: tensor<?xi32>) {
  // expected-error @+1 {{'csa.embed' op vocab must be positive}}
  %h = csa.embed %t vocab 0 weight "embed.weight" : tensor<?xi32> -> tensor<?x64xbf16>
  return
}

// -----

func.func @f(%t: tensor<4xi32>) {
  // expected-error @+1 {{'csa.embed' op produces 5 rows for 4 tokens}}
  %h = csa.embed %t vocab 16 weight "embed.weight" : tensor<4xi32> -> tensor<5x64xbf16>
  return
}

// -----

func.func @f(%h: tensor<?x64xbf16>) {
  // expected-error @+1 {{'csa.hc_expand' op result must be [tokens, streams, dim] of the input's tokens and dim}}
  %X = csa.hc_expand %h : tensor<?x64xbf16> -> tensor<?x4x32xbf16>
  return
}

// -----

func.func @f(%X: tensor<?x4x64xbf16>) {
  // expected-error @+1 {{'csa.hc_mix' op Sinkhorn iterations must be >= 0}}
  %a, %b, %c = csa.hc_mix %X iters -1 eps 1.0e-06 weights "w" : tensor<?x4x64xbf16> -> tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>
  return
}

// -----

func.func @f(%X: tensor<?x4x64xbf16>) {
  // expected-error @+1 {{'csa.hc_mix' op comb must have one coefficient per token and stream (4 streams), got 'tensor<?x4x3xf32>'}}
  %a, %b, %c = csa.hc_mix %X iters 20 eps 1.0e-06 weights "w" : tensor<?x4x64xbf16> -> tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x3xf32>
  return
}

// -----

func.func @f(%X: tensor<?x4x64xbf16>, %pre: tensor<?x2xf32>) {
  // expected-error @+1 {{'csa.hc_collapse' op pre must have one coefficient per token and stream (4 streams), got 'tensor<?x2xf32>'}}
  %x = csa.hc_collapse %X, %pre : tensor<?x4x64xbf16>, tensor<?x2xf32> -> tensor<?x64xbf16>
  return
}

// -----

func.func @f(%X: tensor<?x4x64xbf16>, %y: tensor<?x32xbf16>, %post: tensor<?x4xf32>, %comb: tensor<?x4x4xf32>) {
  // expected-error @+1 {{'csa.hc_update' op update must be [tokens, dim] of the streams}}
  %X2 = csa.hc_update %X, %y, %post, %comb : tensor<?x4x64xbf16>, tensor<?x32xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>) {
  // expected-error @+1 {{'csa.rms_norm' op eps must be >= 0}}
  %n = csa.rms_norm %x eps -1.0 weight "w" : tensor<?x64xbf16>
  return
}

// -----

func.func @f(%X: tensor<?x4x64xbf16>, %t: tensor<?xi32>, %p: index) {
  // expected-error @+1 {{'csa.engram' op max_ngram must be >= 2 (orders 2..max_ngram), got 1}}
  %Y = csa.engram %X, %t, %p layer 1 max_ngram 1 heads 8 head_dim 16 rows 1000 hash_vocab 100 compressed_vocab 50 pad_id 2 weights "w" : tensor<?x4x64xbf16>, tensor<?xi32>
  return
}

// -----

func.func @f(%X: tensor<?x4x64xbf16>, %t: tensor<?xi32>, %p: index) {
  // expected-error @+1 {{'csa.engram' op table of 10 rows cannot hold one bucket per order and head (24)}}
  %Y = csa.engram %X, %t, %p layer 1 max_ngram 4 heads 8 head_dim 16 rows 10 hash_vocab 100 compressed_vocab 50 pad_id 2 weights "w" : tensor<?x4x64xbf16>, tensor<?xi32>
  return
}

// -----

func.func @f(%X: tensor<?x4x64xbf16>, %t: tensor<?xi32>, %p: index) {
  // expected-error @+1 {{'csa.engram' op pad_id must be >= 0, got -1}}
  %Y = csa.engram %X, %t, %p layer 1 max_ngram 3 heads 2 head_dim 32 rows 1000 hash_vocab 100 compressed_vocab 50 pad_id -1 weights "w" : tensor<?x4x64xbf16>, tensor<?xi32>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>) {
  // expected-error @+1 {{'csa.moe' op top_k 9 must be in [1, experts = 8]}}
  %y = csa.moe %x layer 2 experts 8 top_k 9 shared 1 inter 32 route_scale 1.5 swiglu_limit 10.0 expert_format fp4_e2m1 shared_format fp8_block32 weights "w" : tensor<?x64xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>) {
  // expected-error @+1 {{'csa.moe' op route_scale must be positive}}
  %y = csa.moe %x layer 2 experts 8 top_k 2 shared 1 inter 32 route_scale 0.0 swiglu_limit 10.0 expert_format fp4_e2m1 shared_format fp8_block32 weights "w" : tensor<?x64xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>) {
  // expected-error @+1 {{'csa.moe' op swiglu_limit must be positive}}
  %y = csa.moe %x layer 2 experts 8 top_k 2 shared 1 inter 32 route_scale 1.5 swiglu_limit 0.0 expert_format fp4_e2m1 shared_format fp8_block32 weights "w" : tensor<?x64xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>) {
  // expected-error @+1 {{'csa.lm_head' op result has 100 logits per row but vocab is 512}}
  %l = csa.lm_head %x vocab 512 weight "head.weight" : tensor<?x64xbf16> -> tensor<?x100xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>) {
  // expected-error @+1 {{'csa.lm_head' op with last_only produces exactly one row}}
  %l = csa.lm_head %x vocab 512 weight "head.weight" last_only : tensor<?x64xbf16> -> tensor<2x512xf32>
  return
}

// -----

func.func @f(%x: tensor<3x64xbf16>) {
  // expected-error @+1 {{'csa.linear' op produces one output row per input row}}
  %y = csa.linear %x weight "w" fp8_block32 : tensor<3x64xbf16> -> tensor<4x32xbf16>
  return
}

// -----

#r = #csa.rope<dim = 64, theta = 10000.0, factor = 1.0, original_seq_len = 0, beta_fast = 0.0, beta_slow = 0.0>
func.func @f(%x: tensor<?x32xbf16>, %p: index) {
  // expected-error @+1 {{'csa.rope' op rotates 64 channels of a 32-channel row}}
  %y = csa.rope %x, %p stride 1 table #r : tensor<?x32xbf16>
  return
}

// -----

#r = #csa.rope<dim = 8, theta = 10000.0, factor = 1.0, original_seq_len = 0, beta_fast = 0.0, beta_slow = 0.0>
func.func @f(%x: tensor<?x32xbf16>, %p: index) {
  // expected-error @+1 {{'csa.rope' op stride must be >= 1, got 0}}
  %y = csa.rope %x, %p stride 0 table #r : tensor<?x32xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>, %p: index, %s: !csa.compressor_state<2, 32>) {
  // expected-error @+1 {{'csa.compress' op ratio 1 emits one entry per token; it keeps no compressor state}}
  %l = csa.compress %x, %p ratio 1 state(%s : !csa.compressor_state<2, 32>) weights "w" : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  // expected-error @+1 {{'csa.compress' op ratio 1 has no gate (there is nothing to pool)}}
  %l = csa.compress %x, %p ratio 1 gated weights "w" : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  // expected-error @+1 {{'csa.compress' op ratio 2 needs a compressor state for the partial group}}
  %l = csa.compress %x, %p ratio 2 gated weights "w" : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>, %p: index, %s: !csa.compressor_state<2, 32>) {
  // expected-error @+1 {{'csa.compress' op ratio 2 pools each group with a softmax gate: mark it gated}}
  %l = csa.compress %x, %p ratio 2 state(%s : !csa.compressor_state<2, 32>) weights "w" : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>, %p: index, %s: !csa.compressor_state<4, 32>) {
  // expected-error @+1 {{'csa.compress' op state has ratio 4 but the compressor has ratio 2}}
  %l = csa.compress %x, %p ratio 2 state(%s : !csa.compressor_state<4, 32>) gated weights "w" : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>, %p: index, %s: !csa.compressor_state<2, 16>) {
  // expected-error @+1 {{'csa.compress' op state holds 16 channels but the latent has 32}}
  %l = csa.compress %x, %p ratio 2 state(%s : !csa.compressor_state<2, 16>) gated weights "w" : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return
}

// -----

!cache = !csa.global_cache<1, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<32, ue8m0, 32>>
func.func @f(%q: tensor<?x2x64xbf16>, %w: tensor<?x2xbf16>, %c: !cache) {
  // expected-error @+1 {{'csa.index_score' op query heads have 64 channels but index keys have 32}}
  %s = csa.index_score %q, %w, %c : tensor<?x2x64xbf16>, tensor<?x2xbf16>, !cache -> tensor<?x?xf32>
  return
}

// -----

!cache = !csa.global_cache<1, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<32, ue8m0, 32>>
func.func @f(%q: tensor<?x2x32xbf16>, %w: tensor<?x3xbf16>, %c: !cache) {
  // expected-error @+1 {{'csa.index_score' op needs one weight per query row and head}}
  %s = csa.index_score %q, %w, %c : tensor<?x2x32xbf16>, tensor<?x3xbf16>, !cache -> tensor<?x?xf32>
  return
}

// -----

// Release publication: a residue table entry names no published cache.
!cache = !csa.global_cache<1, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<32, ue8m0, 32>>
func.func @f(%q: tensor<1x2x32xbf16>, %w: tensor<1x2xbf16>, %c: !cache, %p: !cache) {
  // expected-error @+1 {{'csa.index_score' op `at` entry 1 is 1; it names the own cache (-1) or one of the 1 published caches}}
  %s = csa.index_score %q, %w, %c published(%p : !cache) at [0, 1] : tensor<1x2x32xbf16>, tensor<1x2xbf16>, !cache -> tensor<1x?xf32>
  return
}

// -----

// Release publication: the published keys must be rows of the own format.
!cache = !csa.global_cache<1, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<32, ue8m0, 32>>
!other = !csa.global_cache<1, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<64, ue8m0, 32>>
func.func @f(%q: tensor<1x2x32xbf16>, %w: tensor<1x2xbf16>, %c: !cache, %p: !other) {
  // expected-error @+1 {{'csa.index_score' op reads published index keys of type '!csa.fp4_row<64, ue8m0, 32>', not its own '!csa.fp4_row<32, ue8m0, 32>'}}
  %s = csa.index_score %q, %w, %c published(%p : !other) at [0, -1] : tensor<1x2x32xbf16>, tensor<1x2xbf16>, !cache -> tensor<1x?xf32>
  return
}

// -----

// Release publication: caches without their table.
!cache = !csa.global_cache<1, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<32, ue8m0, 32>>
func.func @f(%q: tensor<1x2x32xbf16>, %w: tensor<1x2xbf16>, %c: !cache, %p: !cache) {
  // expected-error @+1 {{'csa.index_score' op has an empty `at` table (one entry per position residue)}}
  %s = csa.index_score %q, %w, %c published(%p : !cache) at [] : tensor<1x2x32xbf16>, tensor<1x2xbf16>, !cache -> tensor<1x?xf32>
  return
}

// -----

func.func @f(%s: tensor<?x?xf32>) {
  // expected-error @+1 {{'csa.hsi_select' op pool of 1073741824 x 8 positions does not fit 32-bit indices}}
  %p = csa.hsi_select %s : tensor<?x?xf32> -> !csa.candidate_pool<1073741824, 8>
  return
}

// -----

func.func @f(%s: tensor<?x?xf32>, %p: !csa.candidate_pool<2, 4>) {
  // expected-error @+1 {{'csa.topk' op selects 16 positions from a candidate pool of only 8}}
  %t = csa.topk %s within %p : !csa.candidate_pool<2, 4> : tensor<?x?xf32> -> !csa.topk<16>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>) {
  // expected-error @+1 {{'csa.quantize' op rows of 32 channels do not match values of 64 channels}}
  %r = csa.quantize %x : tensor<?x64xbf16> -> tensor<?x!csa.fp4_row<32, e4m3, 16>>
  return
}

// -----

func.func @f(%r: tensor<3x!csa.fp8_row<32, ue8m0, 32>>) {
  // expected-error @+1 {{'csa.dequantize' op needs one row per value row}}
  %x = csa.dequantize %r : tensor<3x!csa.fp8_row<32, ue8m0, 32>> -> tensor<4x32xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'csa.cache_alloc' op layer must be >= 0}}
  %c = csa.cache_alloc layer -1 : !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
  return
}

// -----

func.func @f(%r: tensor<?x!csa.fp8_row<32, ue8m0, 32>>, %s: !csa.compressor_state<2, 32>, %p: index) {
  // expected-error @+1 {{'csa.cache_append' op cannot append rows to a compressor state}}
  csa.cache_append %r, %s[%p] : tensor<?x!csa.fp8_row<32, ue8m0, 32>>, !csa.compressor_state<2, 32>
  return
}

// -----

func.func @f(%r: tensor<?x!csa.fp8_row<64, ue8m0, 32>>, %s: !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>, %p: index) {
  // expected-error @+1 {{'csa.cache_append' op rows of type '!csa.fp8_row<64, ue8m0, 32>' do not match the ring's '!csa.fp8_row<32, ue8m0, 32>'}}
  csa.cache_append %r, %s[%p] : tensor<?x!csa.fp8_row<64, ue8m0, 32>>, !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
  return
}

// -----

!cache = !csa.global_cache<1, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<32, ue8m0, 32>>
func.func @f(%r: tensor<?x!csa.fp4_row<64, e4m3, 16>>, %c: !cache, %p: index) {
  // expected-error @+1 {{'csa.cache_append' op rows of type '!csa.fp4_row<64, e4m3, 16>' are neither the cache's main rows}}
  csa.cache_append %r, %c[%p] : tensor<?x!csa.fp4_row<64, e4m3, 16>>, !cache
  return
}

// -----

!ring = !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
!rows = tensor<?x!csa.fp8_row<32, ue8m0, 32>>
func.func @f(%q: tensor<?x4x64xbf16>, %w: !ring, %r: !rows, %p: index) {
  // expected-error @+1 {{'csa.sparse_attention' op query has 64 channels per head but window rows have 32}}
  %o = csa.sparse_attention %q, %w[%r] at %p sink "s" scale 0.125 : tensor<?x4x64xbf16>, !ring, !rows -> tensor<?x4x64xbf16>
  return
}

// -----

!ring = !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
!rows = tensor<?x!csa.fp8_row<64, ue8m0, 32>>
func.func @f(%q: tensor<?x4x32xbf16>, %w: !ring, %r: !rows, %p: index) {
  // expected-error @+1 {{'csa.sparse_attention' op fresh rows of type '!csa.fp8_row<64, ue8m0, 32>' do not match the ring's '!csa.fp8_row<32, ue8m0, 32>'}}
  %o = csa.sparse_attention %q, %w[%r] at %p sink "s" scale 0.125 : tensor<?x4x32xbf16>, !ring, !rows -> tensor<?x4x32xbf16>
  return
}

// -----

!ring = !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
!rows = tensor<3x!csa.fp8_row<32, ue8m0, 32>>
func.func @f(%q: tensor<2x4x32xbf16>, %w: !ring, %r: !rows, %p: index) {
  // expected-error @+1 {{'csa.sparse_attention' op needs one fresh window row per query row}}
  %o = csa.sparse_attention %q, %w[%r] at %p sink "s" scale 0.125 : tensor<2x4x32xbf16>, !ring, !rows -> tensor<2x4x32xbf16>
  return
}

// -----

!ring = !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
!cache = !csa.global_cache<1, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<32, ue8m0, 32>>
func.func @f(%q: tensor<?x4x32xbf16>, %w: !ring, %c: !cache, %r: tensor<?x!csa.fp8_row<32, ue8m0, 32>>, %p: index) {
  // A cache without its selected positions (only expressible in generic form).
  // expected-error @+1 {{'csa.sparse_attention' op a global cache and its selected positions come together}}
  %o = "csa.sparse_attention"(%q, %w, %r, %p, %c) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0>, sink = "s", scale = 0.125 : f64}> : (tensor<?x4x32xbf16>, !ring, tensor<?x!csa.fp8_row<32, ue8m0, 32>>, index, !cache) -> tensor<?x4x32xbf16>
  return
}

// -----

!ring = !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
!rows = tensor<?x!csa.fp8_row<32, ue8m0, 32>>
func.func @f(%q: tensor<?x4x32xbf16>, %w: !ring, %r: !rows, %p: index) {
  // expected-error @+1 {{'csa.sparse_attention' op scale must be positive}}
  %o = csa.sparse_attention %q, %w[%r] at %p sink "s" scale 0.0 : tensor<?x4x32xbf16>, !ring, !rows -> tensor<?x4x32xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>) {
  // expected-error @+1 {{'csa.moe_route' op results must be [tokens, top_k]}}
  %w, %i = csa.moe_route %x experts 8 top_k 2 route_scale 1.5 weights "g" : tensor<?x64xbf16> -> tensor<?x3xf32>, tensor<?x2xi32>
  return
}

// -----

func.func @f(%x: tensor<?x64xbf16>) {
  // expected-error @+1 {{'csa.moe_route' op top_k 0 must be in [1, experts = 8]}}
  %w, %i = csa.moe_route %x experts 8 top_k 0 route_scale 1.5 weights "g" : tensor<?x64xbf16> -> tensor<?x0xf32>, tensor<?x0xi32>
  return
}

// -----

func.func @f(%x: tensor<?x32xbf16>) {
  // expected-error @+1 {{'csa.fusion' op body argument #0 has type 'tensor<?x16xbf16>', input #0 has type 'tensor<?x32xbf16>'}}
  %r = csa.fusion rope_quantize_store (%x) : (tensor<?x32xbf16>) -> tensor<?x32xbf16> {
  ^bb0(%a: tensor<?x16xbf16>):
    csa.yield %x : tensor<?x32xbf16>
  }
  return
}

// -----

func.func @f(%x: tensor<?x32xbf16>) {
  // expected-error @+1 {{'csa.fusion' op yields 0 values of types  for results of types 'tensor<?x32xbf16>'}}
  %r = csa.fusion rope_quantize_store (%x) : (tensor<?x32xbf16>) -> tensor<?x32xbf16> {
  ^bb0(%a: tensor<?x32xbf16>):
    %n = csa.rms_norm %a eps 1.0e-6 weight "n" : tensor<?x32xbf16>
    csa.yield
  }
  return
}

// -----

func.func @f(%x: tensor<?x32xbf16>) {
  // expected-error @+1 {{'csa.fusion' op body is empty (a kernel region holds at least one op)}}
  %r = csa.fusion rope_quantize_store (%x) : (tensor<?x32xbf16>) -> tensor<?x32xbf16> {
  ^bb0(%a: tensor<?x32xbf16>):
    csa.yield %a : tensor<?x32xbf16>
  }
  return
}

// -----

func.func @f(%x: tensor<?x32xbf16>) {
  // expected-error @+1 {{'csa.fusion' op a rope_quantize_store body is csa.rope, csa.quantize of its result and csa.cache_append of the quantized rows, in that order}}
  %r = csa.fusion rope_quantize_store (%x) : (tensor<?x32xbf16>) -> tensor<?x32xbf16> {
  ^bb0(%a: tensor<?x32xbf16>):
    %n = csa.rms_norm %a eps 1.0e-6 weight "n" : tensor<?x32xbf16>
    csa.yield %n : tensor<?x32xbf16>
  }
  return
}

// -----

// A hc_collapse_norm region must norm the collapsed rows (here the norm's
// input is the region's other value).
func.func @f(%s: tensor<?x4x32xbf16>, %p: tensor<?x4xf32>, %y: tensor<?x32xbf16>) {
  // expected-error @+1 {{'csa.fusion' op a hc_collapse_norm body is csa.hc_collapse and csa.rms_norm of its rows, in that order, yielding the norm}}
  %r = csa.fusion hc_collapse_norm (%s, %p, %y) : (tensor<?x4x32xbf16>, tensor<?x4xf32>, tensor<?x32xbf16>) -> tensor<?x32xbf16> {
  ^bb0(%a: tensor<?x4x32xbf16>, %b: tensor<?x4xf32>, %c: tensor<?x32xbf16>):
    %x = csa.hc_collapse %a, %b : tensor<?x4x32xbf16>, tensor<?x4xf32> -> tensor<?x32xbf16>
    %n = csa.rms_norm %c eps 1.0e-6 weight "n" : tensor<?x32xbf16>
    csa.yield %n : tensor<?x32xbf16>
  }
  return
}

// -----

func.func @f(%x: tensor<?x32xbf16>) {
  // expected-error @+2 {{expected ::csa::FusionKind to be one of: rope_quantize_store, hc_collapse_norm}}
  // expected-error @+1 {{failed to parse Csa_FusionKindAttr parameter 'value' which is to be a `::csa::FusionKind`}}
  %r = csa.fusion rope_norm (%x) : (tensor<?x32xbf16>) -> tensor<?x32xbf16> {
  ^bb0(%a: tensor<?x32xbf16>):
    csa.yield %a : tensor<?x32xbf16>
  }
  return
}

// -----

func.func @f(%x: tensor<?x32xbf16>) {
  // expected-error @+1 {{'csa.yield' op expects parent op 'csa.fusion'}}
  csa.yield %x : tensor<?x32xbf16>
}

// -----

func.func @row_tile_zero(%x: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  // expected-error @below {{a row tile needs rows >= 1, got 0}}
  %a = csa.linear %x weight "a" bf16 {csa.row_tile = #csa.row_tile<0>} : tensor<?x64xbf16> -> tensor<?x64xbf16>
  return %a : tensor<?x64xbf16>
}

// -----

func.func @row_tile_without_linears(%x: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  // expected-error @below {{has no linear kernels: 'csa.row_tile' belongs on csa.linear}}
  %n = csa.rms_norm %x eps 1.0e-6 weight "n" {csa.row_tile = #csa.row_tile<8>} : tensor<?x64xbf16>
  return %n : tensor<?x64xbf16>
}

// -----

func.func @old_tile_dictionary(%x: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  // expected-error @below {{carries 'csa.tile', which #csa.row_tile replaced}}
  %a = csa.linear %x weight "a" bf16 {csa.tile = {rows = 8 : i64}} : tensor<?x64xbf16> -> tensor<?x64xbf16>
  return %a : tensor<?x64xbf16>
}

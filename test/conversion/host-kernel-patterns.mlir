// The host target's kernel patterns (codegen/host/KernelPatterns.h), one op
// family at a time: expanded-stage IR in, the kernels module out. Each op's
// pattern names its kernels from the op's types and lowering attributes.
// RUN: csa-opt %s --split-input-file --csa-select-host-kernels --verify-diagnostics | FileCheck %s

// A linear: one kernel, named by format, shape and row tile.
// CHECK-LABEL: func.func @linear_fp8_block32_64x32_t8(
// CHECK-SAME:    memref<?x64xbf16>
// CHECK-SAME:    csa.linear_form = #csa.linear_form<split_k>
// CHECK-SAME:    csa.parallelism = #csa.parallelism<rows>
func.func @f(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16> {
  %y = csa.linear %x weight "w" fp8_block32 {csa.linear_form = #csa.linear_form<split_k>, csa.row_tile = #csa.row_tile<8>} : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

// The per-output form is a kernel of its own; without a row tile the kernel
// is untiled; two ops of one shape share one kernel.
// CHECK-LABEL: func.func @linear_bf16_64x32_per_output(
// CHECK-SAME:    csa.linear_form = #csa.linear_form<per_output>
// CHECK-NOT:   func.func @linear_bf16_64x32_per_output(
func.func @f(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16> {
  %y = csa.linear %x weight "a" bf16 {csa.linear_form = #csa.linear_form<per_output>} : tensor<?x64xbf16> -> tensor<?x32xbf16>
  %z = csa.linear %x weight "b" bf16 {csa.linear_form = #csa.linear_form<per_output>} : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return %z : tensor<?x32xbf16>
}

// -----

// A split-K form on a K that does not split into 16-byte words is refused,
// naming the op.
func.func @f(%x: tensor<?x20xbf16>) -> tensor<?x32xbf16> {
  // expected-error @below {{csa.linear_form split_k: the bf16 linear 20 -> 32 cannot be split over K}}
  %y = csa.linear %x weight "w" bf16 {csa.linear_form = #csa.linear_form<split_k>} : tensor<?x20xbf16> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

// RMS norm: a kernel per width, the graph's epsilon.
// CHECK-LABEL: func.func @rms_norm_64(
// CHECK-SAME:    csa.parallelism = #csa.parallelism<rows>
func.func @f(%x: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %y = csa.rms_norm %x eps 1.0E-6 weight "n" : tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Norms of two epsilons cannot share the graph's one.
func.func @f(%x: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  // expected-error @below {{has eps 1.000000e-05 but the graph's norms use 1.000000e-06}}
  %y = csa.rms_norm %x eps 1.0E-5 weight "a" : tensor<?x64xbf16>
  %z = csa.rms_norm %y eps 1.0E-6 weight "b" : tensor<?x64xbf16>
  return %z : tensor<?x64xbf16>
}

// -----

// An op of the csa dialect that the host target must lower and no pattern
// takes is an error naming it (csa.moe_route lowers as part of csa.moe).
func.func @f(%x: tensor<?x64xbf16>) -> tensor<?x2xi32> {
  // expected-error @below {{'csa.moe_route' op has no host kernel pattern}}
  %w, %ids = csa.moe_route %x experts 8 top_k 2 route_scale 1.5 weights "g" : tensor<?x64xbf16> -> tensor<?x2xf32>, tensor<?x2xi32>
  return %ids : tensor<?x2xi32>
}

// -----

// Top-k: the rank kernel (masked when a pool limits the candidates) and the
// compaction.
// CHECK-LABEL: func.func @topk_rank_4(
// CHECK-SAME:    csa.parallelism = #csa.parallelism<nest>
// CHECK-LABEL: func.func @topk_compact_4(
// CHECK-SAME:    csa.parallelism = #csa.parallelism<rows>
func.func @f(%s: tensor<?x?xf32>) -> !csa.topk<4> {
  %k = csa.topk %s : tensor<?x?xf32> -> !csa.topk<4>
  return %k : !csa.topk<4>
}

// -----

// Sparse attention: the window's dequantizer and index list, and the
// attention kernel named for its form, which it carries.
// CHECK-LABEL: func.func @dequantize_swa_kv_fp8_32(
// CHECK-LABEL: func.func @attention_window_index(
// CHECK-LABEL: func.func @sparse_attention_4x32_head(
// CHECK-SAME:    csa.attention_form = #csa.attention_form<head>
func.func @f(%q: tensor<?x4x32xbf16>, %rows: tensor<?x!csa.fp8_row<32, ue8m0, 32>>) -> tensor<?x4x32xbf16> {
  %c0 = arith.constant 0 : index
  %ring = csa.cache_alloc layer 0 : !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
  %o = csa.sparse_attention %q, %ring[%rows] at %c0 sink "s" scale 0.17677669529663687 {csa.attention_form = #csa.attention_form<head>} : tensor<?x4x32xbf16>, !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>, tensor<?x!csa.fp8_row<32, ue8m0, 32>> -> tensor<?x4x32xbf16>
  return %o : tensor<?x4x32xbf16>
}

// -----

// MoE: the gate, the routing, the per-expert path's kernels, and the routed
// experts' grouped linears (an expert id a slot) with their combine.
// CHECK-LABEL: func.func @linear_f32_64x8_t8(
// CHECK-LABEL: func.func @moe_route_8_top2(
// CHECK-LABEL: func.func @linear_fp4_e2m1_64x32_t8(
// CHECK-LABEL: func.func @linear_fp8_block32_64x32_t8(
// CHECK-LABEL: func.func @swiglu_32_l10p00(
// CHECK-LABEL: func.func @linear_fp4_e2m1_64x32_e8_s2(
// CHECK-SAME:    memref<?x64xbf16>, %{{.*}}: memref<?xi32>
// CHECK-LABEL: func.func @linear_fp4_e2m1_32x64_e8(
// CHECK-LABEL: func.func @moe_combine_64_top2_e8(
func.func @f(%x: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %y = csa.moe %x layer 0 experts 8 top_k 2 shared 1 inter 32 route_scale 1.500000e+00 swiglu_limit 1.000000e+01 expert_format fp4_e2m1 shared_format fp8_block32 weights "ffn" {csa.row_tile = #csa.row_tile<8>} : tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Embedding and the mHC ops: a kernel each, named by their shapes; the mix
// has its row sums as a kernel of their own.
// CHECK-LABEL: func.func @embed_512x64(
// CHECK-LABEL: func.func @hc_expand_4x64(
// CHECK-LABEL: func.func @hc_mix_sums_4x64(
// CHECK-LABEL: func.func @hc_mix_4x64_i20(
// CHECK-LABEL: func.func @hc_update_4x64(
// CHECK-LABEL: func.func @hc_collapse_4x64(
func.func @f(%t: tensor<?xi32>, %y: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %e = csa.embed %t vocab 512 weight "embed.weight" : tensor<?xi32> -> tensor<?x64xbf16>
  %s = csa.hc_expand %e : tensor<?x64xbf16> -> tensor<?x4x64xbf16>
  %pre, %post, %comb = csa.hc_mix %s iters 20 eps 1.0E-6 weights "hc" : tensor<?x4x64xbf16> -> tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>
  %u = csa.hc_update %s, %y, %post, %comb : tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>
  %c = csa.hc_collapse %u, %pre : tensor<?x4x64xbf16>, tensor<?x4xf32> -> tensor<?x64xbf16>
  return %c : tensor<?x64xbf16>
}

// -----

// RoPE: a kernel per table (its frequencies baked in), the inverse its own.
// CHECK-LABEL: func.func @rope_8_t10000_f1_o32(
// CHECK-LABEL: func.func @rope_8_t10000_f1_o32_inverse(
#rope_base = #csa.rope<dim = 8, theta = 1.000000e+04, factor = 1.000000e+00, original_seq_len = 32, beta_fast = 3.200000e+01, beta_slow = 1.000000e+00>
func.func @f(%q: tensor<?x4x32xbf16>, %p: index) -> tensor<?x4x32xbf16> {
  %r = csa.rope %q, %p stride 1 table #rope_base : tensor<?x4x32xbf16>
  %i = csa.rope %r, %p stride 1 table #rope_base inverse : tensor<?x4x32xbf16>
  return %i : tensor<?x4x32xbf16>
}

// -----

// RoPE + quantize + cache store as one fusion region: one kernel calling the
// three ops' kernels, named after them, which stay for a runtime that runs
// them apart.
// CHECK-LABEL: func.func @rope_8_t10000_f1_o32(
// CHECK-LABEL: func.func @quantize_swa_kv_fp8_32(
// CHECK-LABEL: func.func @cache_append_swa_kv_fp8_32_ring8(
// CHECK-LABEL: func.func @fused_cache_append_swa_kv_fp8_32_ring8__rope_8_t10000_f1_o32_s1(
// CHECK:         call @rope_8_t10000_f1_o32(
// CHECK:         call @quantize_swa_kv_fp8_32(
// CHECK:         call @cache_append_swa_kv_fp8_32_ring8(
#rope_base = #csa.rope<dim = 8, theta = 1.000000e+04, factor = 1.000000e+00, original_seq_len = 32, beta_fast = 3.200000e+01, beta_slow = 1.000000e+00>
func.func @f(%kv: tensor<?x32xbf16>, %p: index) -> tensor<?x!csa.fp8_row<32, ue8m0, 32>> {
  %ring = csa.cache_alloc layer 0 : !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
  %rows = csa.fusion rope_quantize_store (%kv, %p, %p, %ring) : (tensor<?x32xbf16>, index, index, !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>) -> tensor<?x!csa.fp8_row<32, ue8m0, 32>> {
  ^bb0(%a: tensor<?x32xbf16>, %b: index, %c: index, %d: !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>):
    %r = csa.rope %a, %b stride 1 table #rope_base : tensor<?x32xbf16>
    %q = csa.quantize %r : tensor<?x32xbf16> -> tensor<?x!csa.fp8_row<32, ue8m0, 32>>
    csa.cache_append %q, %d[%c] : tensor<?x!csa.fp8_row<32, ue8m0, 32>>, !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
    csa.yield %q : tensor<?x!csa.fp8_row<32, ue8m0, 32>>
  }
  return %rows : tensor<?x!csa.fp8_row<32, ue8m0, 32>>
}

// -----

// The indexer: the query's FP4 round trip, the head weights' scale, the
// scores; HSI: the block scores and the selection.
// CHECK-LABEL: func.func @quantize_index_key_fp4_32(
// CHECK-LABEL: func.func @dequantize_index_key_fp4_32(
// CHECK-LABEL: func.func @index_weights_scale_2x32(
// CHECK-LABEL: func.func @index_score_2x32(
// CHECK-LABEL: func.func @hsi_block_scores_4(
// CHECK-LABEL: func.func @topk_rank_2(
// CHECK-LABEL: func.func @hsi_expand_4(
func.func @f(%q: tensor<?x2x32xbf16>, %w: tensor<?x2xbf16>) -> !csa.candidate_pool<2, 4> {
  %cache = csa.cache_alloc layer 2 : !csa.global_cache<2, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<32, ue8m0, 32>>
  %s = csa.index_score %q, %w, %cache : tensor<?x2x32xbf16>, tensor<?x2xbf16>, !csa.global_cache<2, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<32, ue8m0, 32>> -> tensor<?x?xf32>
  %p = csa.hsi_select %s : tensor<?x?xf32> -> !csa.candidate_pool<2, 4>
  return %p : !csa.candidate_pool<2, 4>
}

// -----

// The LM head: an f32 linear of the vocabulary's width.
// CHECK-LABEL: func.func @linear_f32_64x512_t8(
func.func @f(%x: tensor<?x64xbf16>) -> tensor<1x512xf32> {
  %l = csa.lm_head %x vocab 512 weight "head.weight" last_only {csa.row_tile = #csa.row_tile<8>} : tensor<?x64xbf16> -> tensor<1x512xf32>
  return %l : tensor<1x512xf32>
}

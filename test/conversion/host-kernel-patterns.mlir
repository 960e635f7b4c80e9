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

// RUN: csa-opt %s --split-input-file --pass-pipeline='builtin.module(csa-plan-caches{max-context=64})' -verify-diagnostics | FileCheck %s

// Each cache is counted once however many functions allocate it; a global
// cache is sized per token (entry bytes / ratio) and for max-context tokens.
// Ring: 8 x 33 B. State: 2 x 2 x 32 x 4 B. Layer 2: 35 B per 2 tokens,
// layer 4: 35 B per token; at 64 tokens 32 x 35 + 64 x 35 = 3360 B.
// CHECK:      module attributes {csa.cache_plan = {bytes_per_sequence = 4136 : i64, caches = 4 : i64, fixed_bytes_per_sequence = 776 : i64, global_kv_bytes_per_token = 5.250000e+01 : f64, max_context = 64 : i64}}
// CHECK-LABEL: func.func @prefill
// CHECK:        csa.cache_alloc layer 2 {csa.bytes = 264 : i64} : !csa.swa_ring
// CHECK:        csa.cache_alloc layer 2 {csa.bytes_per_token = 1.750000e+01 : f64, csa.entry_bytes = 35 : i64} : !csa.global_cache<2
// CHECK:        csa.cache_alloc layer 2 {csa.bytes = 512 : i64} : !csa.compressor_state<2, 32>
// CHECK:        csa.cache_alloc layer 4 {csa.bytes_per_token = 3.500000e+01 : f64, csa.entry_bytes = 35 : i64} : !csa.global_cache<1
// CHECK-LABEL: func.func @decode
// CHECK:        csa.cache_alloc layer 2 {csa.bytes = 264 : i64}
!ring = !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
!c2 = !csa.global_cache<2, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<32, ue8m0, 32>>
!c1 = !csa.global_cache<1, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<32, ue8m0, 32>>
func.func @prefill() {
  %0 = csa.cache_alloc layer 2 : !ring
  %1 = csa.cache_alloc layer 2 : !c2
  %2 = csa.cache_alloc layer 2 : !csa.compressor_state<2, 32>
  %3 = csa.cache_alloc layer 4 : !c1
  return
}
func.func @decode() {
  %0 = csa.cache_alloc layer 2 : !ring
  %1 = csa.cache_alloc layer 2 : !c2
  return
}

// -----

// A layer's cache is one storage: two shapes for it is an error.
func.func @prefill() {
  %0 = csa.cache_alloc layer 2 : !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
  return
}
func.func @decode() {
  // expected-error @+1 {{layer 2 allocates this cache as '!csa.swa_ring<16, !csa.fp8_row<32, ue8m0, 32>>' here but as '!csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>' elsewhere; a layer's cache is one storage}}
  %0 = csa.cache_alloc layer 2 : !csa.swa_ring<16, !csa.fp8_row<32, ue8m0, 32>>
  return
}

// RUN: csa-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(csa-fuse-kernels))' | FileCheck %s
// RUN: not csa-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(csa-fuse-kernels{patterns=gemm_epilogue}))' 2>&1 | FileCheck %s --check-prefix=BADPATTERN
// RUN: csa-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(csa-fuse-kernels{patterns=rope_quantize_store}))' | FileCheck %s --check-prefix=ROPEONLY
// BADPATTERN: error: csa-fuse-kernels: unknown pattern 'gemm_epilogue' (known: rope_quantize_store, hc_collapse_norm; or none alone)

#rope = #csa.rope<dim = 8, theta = 1.000000e+04, factor = 1.000000e+00, original_seq_len = 32, beta_fast = 3.200000e+01, beta_slow = 1.000000e+00>

// RoPE, quantize and store become one region; attention still reads the
// quantized rows, now the region's result. Each op reads its own position.
// CHECK-LABEL: func.func @swa_row
// CHECK-SAME: (%[[X:.+]]: tensor<?x32xbf16>, %[[P:.+]]: index, %[[S:.+]]: index)
// CHECK:      %[[RING:.+]] = csa.cache_alloc layer 0
// CHECK:      %[[ROWS:.+]] = csa.fusion rope_quantize_store (%[[X]], %[[P]], %[[S]], %[[RING]])
// CHECK-NEXT: ^bb0(%[[A:.+]]: tensor<?x32xbf16>, %[[AP:.+]]: index, %[[AS:.+]]: index, %[[C:.+]]: !csa.swa_ring
// CHECK-NEXT:   %[[R:.+]] = csa.rope %[[A]], %[[AP]] stride 1
// CHECK-NEXT:   %[[Q:.+]] = csa.quantize %[[R]]
// CHECK-NEXT:   csa.cache_append %[[Q]], %[[C]][%[[AS]]]
// CHECK-NEXT:   csa.yield %[[Q]]
// CHECK:      return %[[ROWS]]
// ROPEONLY-LABEL: func.func @swa_row
// ROPEONLY: csa.fusion rope_quantize_store
func.func @swa_row(%x: tensor<?x32xbf16>, %p: index, %s: index) -> tensor<?x!csa.fp8_row<32, ue8m0, 32>> {
  %ring = csa.cache_alloc layer 0 : !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
  %r = csa.rope %x, %p stride 1 table #rope : tensor<?x32xbf16>
  %q = csa.quantize %r : tensor<?x32xbf16> -> tensor<?x!csa.fp8_row<32, ue8m0, 32>>
  csa.cache_append %q, %ring[%s] : tensor<?x!csa.fp8_row<32, ue8m0, 32>>, !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
  return %q : tensor<?x!csa.fp8_row<32, ue8m0, 32>>
}

// -----

#rope = #csa.rope<dim = 8, theta = 1.000000e+04, factor = 1.000000e+00, original_seq_len = 32, beta_fast = 3.200000e+01, beta_slow = 1.000000e+00>

// The rotated rows are read elsewhere too: no region.
// CHECK-LABEL: func.func @rope_used_twice
// CHECK-NOT: csa.fusion
func.func @rope_used_twice(%x: tensor<?x32xbf16>, %p: index) -> tensor<?x32xbf16> {
  %ring = csa.cache_alloc layer 0 : !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
  %r = csa.rope %x, %p stride 1 table #rope : tensor<?x32xbf16>
  %q = csa.quantize %r : tensor<?x32xbf16> -> tensor<?x!csa.fp8_row<32, ue8m0, 32>>
  csa.cache_append %q, %ring[%p] : tensor<?x!csa.fp8_row<32, ue8m0, 32>>, !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
  return %r : tensor<?x32xbf16>
}

// -----

#rope = #csa.rope<dim = 8, theta = 1.000000e+04, factor = 1.000000e+00, original_seq_len = 32, beta_fast = 3.200000e+01, beta_slow = 1.000000e+00>

// The quantized rows are read before the store: the store cannot move into
// a region ahead of that reader, so no region.
// CHECK-LABEL: func.func @read_before_store
// CHECK-NOT: csa.fusion
func.func @read_before_store(%x: tensor<?x32xbf16>, %p: index) -> tensor<?x32xbf16> {
  %ring = csa.cache_alloc layer 0 : !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
  %r = csa.rope %x, %p stride 1 table #rope : tensor<?x32xbf16>
  %q = csa.quantize %r : tensor<?x32xbf16> -> tensor<?x!csa.fp8_row<32, ue8m0, 32>>
  %d = csa.dequantize %q : tensor<?x!csa.fp8_row<32, ue8m0, 32>> -> tensor<?x32xbf16>
  csa.cache_append %q, %ring[%p] : tensor<?x!csa.fp8_row<32, ue8m0, 32>>, !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
  return %d : tensor<?x32xbf16>
}

// -----

// mHC's collapse and the sub-layer's input norm become one region, where
// the norm was; the streams still feed the mix.
// CHECK-LABEL: func.func @collapse_norm
// CHECK-SAME: (%[[S:.+]]: tensor<?x4x32xbf16>, %[[P:.+]]: tensor<?x4xf32>)
// CHECK:      %[[N:.+]] = csa.fusion hc_collapse_norm (%[[S]], %[[P]])
// CHECK-NEXT: ^bb0(%[[A:.+]]: tensor<?x4x32xbf16>, %[[B:.+]]: tensor<?x4xf32>):
// CHECK-NEXT:   %[[C:.+]] = csa.hc_collapse %[[A]], %[[B]]
// CHECK-NEXT:   %[[M:.+]] = csa.rms_norm %[[C]] eps {{.*}} weight "layers.0.ffn_norm"
// CHECK-NEXT:   csa.yield %[[M]]
// CHECK:      return %[[N]]
// ROPEONLY-LABEL: func.func @collapse_norm
// ROPEONLY-NOT: csa.fusion
func.func @collapse_norm(%s: tensor<?x4x32xbf16>, %p: tensor<?x4xf32>) -> tensor<?x32xbf16> {
  %c = csa.hc_collapse %s, %p : tensor<?x4x32xbf16>, tensor<?x4xf32> -> tensor<?x32xbf16>
  %n = csa.rms_norm %c eps 1.0e-6 weight "layers.0.ffn_norm" : tensor<?x32xbf16>
  return %n : tensor<?x32xbf16>
}

// -----

// The collapsed rows are read elsewhere too: no region.
// CHECK-LABEL: func.func @collapse_used_twice
// CHECK-NOT: csa.fusion
func.func @collapse_used_twice(%s: tensor<?x4x32xbf16>, %p: tensor<?x4xf32>) -> (tensor<?x32xbf16>, tensor<?x32xbf16>) {
  %c = csa.hc_collapse %s, %p : tensor<?x4x32xbf16>, tensor<?x4xf32> -> tensor<?x32xbf16>
  %n = csa.rms_norm %c eps 1.0e-6 weight "norm" : tensor<?x32xbf16>
  return %n, %c : tensor<?x32xbf16>, tensor<?x32xbf16>
}

// RUN: csa-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(csa-expand-modes))' | FileCheck %s
// RUN: csa-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(csa-expand-modes{dense-format=bf16}))' | FileCheck %s --check-prefix=BF16
// RUN: not csa-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(csa-expand-modes{dense-format=fp4_e2m1}))' 2>&1 | FileCheck %s --check-prefix=BAD

#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>

// A SWA-only layer: the Q path, its own FP8 SWA rows into its ring, window
// attention only, inverse RoPE and the grouped output projection.
// CHECK-LABEL: func.func @swa_only(
// CHECK-SAME:      %[[X:.+]]: tensor<?x64xbf16>, %[[P:.+]]: index)
// CHECK:         %[[RING:.+]] = csa.cache_alloc layer 0 : !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
// CHECK:         %[[QA:.+]] = csa.linear %[[X]] weight "l0.wq_a" fp8_block32 : tensor<?x64xbf16> -> tensor<?x32xbf16>
// CHECK:         %[[QR:.+]] = csa.rms_norm %[[QA]] eps {{.*}} weight "l0.q_norm.weight"
// CHECK:         %[[QB:.+]] = csa.linear %[[QR]] weight "l0.wq_b" fp8_block32 : tensor<?x32xbf16> -> tensor<?x128xbf16>
// CHECK:         %[[Q3:.+]] = tensor.expand_shape %[[QB]] {{\[\[}}0], [1, 2]]
// CHECK:         %[[Q:.+]] = csa.rope %[[Q3]], %[[P]] stride 1 table {{.*}} : tensor<?x4x32xbf16>
// CHECK:         %[[KV:.+]] = csa.linear %[[X]] weight "l0.wkv" fp8_block32
// CHECK:         %[[KVN:.+]] = csa.rms_norm %[[KV]] eps {{.*}} weight "l0.kv_norm.weight"
// CHECK:         %[[KVR:.+]] = csa.rope %[[KVN]], %[[P]] stride 1
// CHECK:         %[[ROWS:.+]] = csa.quantize %[[KVR]] : tensor<?x32xbf16> -> tensor<?x!csa.fp8_row<32, ue8m0, 32>>
// CHECK:         csa.cache_append %[[ROWS]], %[[RING]][%[[P]]]
// CHECK:         %[[O:.+]] = csa.sparse_attention %[[Q]], %[[RING]][%[[ROWS]]] at %[[P]] sink "l0.attn_sink" scale 0.1767{{[0-9]*}} :
// CHECK:         %[[OI:.+]] = csa.rope %[[O]], %[[P]] stride 1 table {{.*}} inverse
// CHECK:         %[[OF:.+]] = tensor.collapse_shape %[[OI]] {{\[\[}}0], [1, 2]] : tensor<?x4x32xbf16> into tensor<?x128xbf16>
// CHECK:         %[[U:.+]] = csa.linear %[[OF]] weight "l0.wo_a" fp8_as_bf16 groups 2 : tensor<?x128xbf16> -> tensor<?x32xbf16>
// CHECK:         %[[Y:.+]] = csa.linear %[[U]] weight "l0.wo_b" fp8_block32 : tensor<?x32xbf16> -> tensor<?x64xbf16>
// CHECK:         return %[[Y]]
// BF16-LABEL: func.func @swa_only
// BF16:         csa.linear %{{.*}} weight "l0.wq_a" bf16
// BF16:         csa.linear %{{.*}} weight "l0.wo_b" bf16
// BAD: csa-expand-modes: dense-format must be fp8_block32 or bf16, got 'fp4_e2m1'
func.func @swa_only(%x: tensor<?x64xbf16>, %p: index) -> tensor<?x64xbf16> {
  %0 = csa.attention %x, %p layer 0 swa_only ratio 0 rope #r config #c weights "l0" : tensor<?x64xbf16>
  return %0 : tensor<?x64xbf16>
}

// -----

#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>

// A ratio-2 Full layer and its Reuse layer: the compressor with its state,
// index keys published before scoring, the latent stored after; the Reuse
// layer attends the same cache at the same top-k.
// CHECK-LABEL: func.func @full_and_reuse(
// CHECK-SAME:      %[[X:.+]]: tensor<?x64xbf16>, %[[P:.+]]: index)
// CHECK-DAG:     %[[RING2:.+]] = csa.cache_alloc layer 2 : !csa.swa_ring
// CHECK-DAG:     %[[CACHE:.+]] = csa.cache_alloc layer 2 : !csa.global_cache<2, !csa.fp4_row<32, e4m3, 16>, !csa.fp4_row<32, ue8m0, 32>>
// CHECK-DAG:     %[[STATE:.+]] = csa.cache_alloc layer 2 : !csa.compressor_state<2, 32>
// CHECK-DAG:     %[[RING3:.+]] = csa.cache_alloc layer 3 : !csa.swa_ring
// CHECK:         csa.cache_append %{{.*}}, %[[RING2]][%[[P]]]
// CHECK:         %[[LAT:.+]] = csa.compress %[[X]], %[[P]] ratio 2 state(%[[STATE]] : !csa.compressor_state<2, 32>) gated weights "l2.compressor" : tensor<?x64xbf16> -> tensor<?x32xbf16>
// The first entry this call writes is pos / 2; it is rotated at 2 * that.
// CHECK:         %[[ENTRY:.+]] = arith.divui %[[P]], %[[TWO:.+]] : index
// CHECK:         %[[EPOS:.+]] = arith.muli %[[ENTRY]], %{{.+}} : index
// CHECK:         %[[K:.+]] = csa.linear %[[LAT]] weight "l2.indexer.wk" bf16
// CHECK:         %[[KN:.+]] = csa.rms_norm %[[K]] eps {{.*}} weight "l2.indexer.k_norm.weight"
// CHECK:         %[[KR:.+]] = csa.rope %[[KN]], %[[EPOS]] stride 2
// CHECK:         %[[KROWS:.+]] = csa.quantize %[[KR]] : tensor<?x32xbf16> -> tensor<?x!csa.fp4_row<32, ue8m0, 32>>
// CHECK:         csa.cache_append %[[KROWS]], %[[CACHE]][%[[ENTRY]]]
// CHECK:         csa.linear %{{.*}} weight "l2.indexer.wq_b" fp8_block32
// CHECK:         %[[W:.+]] = csa.linear %[[X]] weight "l2.indexer.weights_proj" bf16 : tensor<?x64xbf16> -> tensor<?x2xbf16>
// CHECK:         %[[S:.+]] = csa.index_score %{{.*}}, %[[W]], %[[CACHE]]
// CHECK:         %[[SEL:.+]] = csa.topk %[[S]] : tensor<?x?xf32> -> !csa.topk<4>
// CHECK:         %[[LR:.+]] = csa.rope %[[LAT]], %[[EPOS]] stride 2
// CHECK:         %[[MROWS:.+]] = csa.quantize %[[LR]] : tensor<?x32xbf16> -> tensor<?x!csa.fp4_row<32, e4m3, 16>>
// CHECK:         csa.cache_append %[[MROWS]], %[[CACHE]][%[[ENTRY]]]
// CHECK:         csa.sparse_attention %{{.*}}, %[[RING2]][%{{.*}}] at %[[P]] global(%[[CACHE]], %[[SEL]] :
// Layer 3 (Reuse): no compressor, no indexer of its own.
// CHECK:         csa.linear %{{.*}} weight "l3.wq_a"
// CHECK-NOT:     csa.compress
// CHECK-NOT:     csa.index_score
// CHECK:         csa.sparse_attention %{{.*}}, %[[RING3]][%{{.*}}] at %[[P]] global(%[[CACHE]], %[[SEL]] :
// CHECK:         csa.linear %{{.*}} weight "l3.wo_b"
func.func @full_and_reuse(%x: tensor<?x64xbf16>, %p: index) -> tensor<?x64xbf16> {
  %0 = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  %1 = csa.attention %0, %p layer 3 reuse ratio 2 kv_source 2 index_source 2 rope #r config #c weights "l3" : tensor<?x64xbf16>
  return %1 : tensor<?x64xbf16>
}

// -----

#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>

// Ratio 1 with the HSI pool, then a Reindex layer: no compressor state, no
// gate; the pool is built from the source's scores; the Reindex layer scores
// the source's keys and selects within the pool.
// CHECK-LABEL: func.func @pool_and_reindex(
// CHECK-NOT:     compressor_state
// CHECK:         %[[CACHE:.+]] = csa.cache_alloc layer 4 : !csa.global_cache<1,
// CHECK:         %[[LAT:.+]] = csa.compress %{{.*}}, %[[P:.+]] ratio 1 weights "l4.compressor"
// CHECK:         %[[K:.+]] = csa.linear %[[LAT]] weight "l4.indexer.wk" bf16
// CHECK:         csa.rope %{{.*}}, %[[P]] stride 1
// CHECK:         %[[S4:.+]] = csa.index_score %{{.*}}, %{{.*}}, %[[CACHE]]
// CHECK:         %[[POOL:.+]] = csa.hsi_select %[[S4]] : tensor<?x?xf32> -> !csa.candidate_pool<2, 4>
// CHECK:         csa.topk %[[S4]] : tensor<?x?xf32> -> !csa.topk<4>
// CHECK:         csa.linear %{{.*}} weight "l6.indexer.wq_b"
// CHECK-NOT:     "l6.indexer.wk"
// CHECK:         %[[S6:.+]] = csa.index_score %{{.*}}, %{{.*}}, %[[CACHE]]
// CHECK:         %[[SEL6:.+]] = csa.topk %[[S6]] within %[[POOL]] : !csa.candidate_pool<2, 4> : tensor<?x?xf32> -> !csa.topk<4>
// CHECK:         csa.sparse_attention %{{.*}} global(%[[CACHE]], %[[SEL6]] :
func.func @pool_and_reindex(%x: tensor<?x64xbf16>, %p: index) -> tensor<?x64xbf16> {
  %0 = csa.attention %x, %p layer 4 full ratio 1 candidate_pool #csa.hsi<blocks = 2, block_size = 4> rope #r config #c weights "l4" : tensor<?x64xbf16>
  %1 = csa.attention %0, %p layer 6 reindex ratio 1 kv_source 4 candidate_source 4 rope #r config #c weights "l6" : tensor<?x64xbf16>
  return %1 : tensor<?x64xbf16>
}

// RUN: csa-opt %s | csa-opt | FileCheck %s
// RUN: csa-opt %s --mlir-print-op-generic | csa-opt | FileCheck %s
// Every csa op, type and attribute prints and parses back to itself.

#rope_base = #csa.rope<dim = 64, theta = 10000.0, factor = 1.0, original_seq_len = 65536, beta_fast = 32.0, beta_slow = 1.0>
#rope_yarn = #csa.rope<dim = 64, theta = 160000.0, factor = 16.0, original_seq_len = 65536, beta_fast = 32.0, beta_slow = 1.0>
#rope8 = #csa.rope<dim = 8, theta = 10000.0, factor = 1.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#cfg = #csa.attention_config<heads = 64, head_dim = 512, rope_dim = 64, q_rank = 1280, window = 128, index_heads = 32, index_dim = 128, index_rope_dim = 64, topk = 512, o_groups = 8, o_rank = 1024, main_row = !csa.fp4_row<512, e4m3, 16>, index_row = !csa.fp4_row<128, ue8m0, 32>, swa_row = !csa.fp8_row<512, ue8m0, 32>>

// CHECK-DAG: #csa_attn = #csa.attention_config<heads = 64, head_dim = 512, rope_dim = 64, q_rank = 1280, window = 128, index_heads = 32, index_dim = 128, index_rope_dim = 64, topk = 512, o_groups = 8, o_rank = 1024, main_row = !csa.fp4_row<512, e4m3, 16>, index_row = !csa.fp4_row<128, ue8m0, 32>, swa_row = !csa.fp8_row<512, ue8m0, 32>>
// CHECK-DAG: #hsi = #csa.hsi<blocks = 2048, block_size = 8>
// CHECK-DAG: #rope_base = #csa.rope<dim = 64, theta = 1.000000e+04, factor = 1.000000e+00, original_seq_len = 65536, beta_fast = 3.200000e+01, beta_slow = 1.000000e+00>
// CHECK-DAG: #rope_yarn = #csa.rope<dim = 64, theta = 1.600000e+05, factor = 1.600000e+01, original_seq_len = 65536, beta_fast = 3.200000e+01, beta_slow = 1.000000e+00>

// CHECK-LABEL: func.func @graph
func.func @graph(%tokens: tensor<?xi32>, %pos: index) -> tensor<1x129280xf32> {
  // CHECK: csa.embed %{{.*}} vocab 129280 weight "embed.weight" : tensor<?xi32> -> tensor<?x5120xbf16>
  %h = csa.embed %tokens vocab 129280 weight "embed.weight" : tensor<?xi32> -> tensor<?x5120xbf16>
  // CHECK: csa.hc_expand %{{.*}} : tensor<?x5120xbf16> -> tensor<?x4x5120xbf16>
  %X = csa.hc_expand %h : tensor<?x5120xbf16> -> tensor<?x4x5120xbf16>
  // CHECK: csa.engram %{{.*}}, %{{.*}}, %{{.*}} layer 1 max_ngram 4 heads 8 head_dim 256 rows 384006168 hash_vocab 16000000 compressed_vocab 99092 pad_id 2 weights "layers.1.engram" : tensor<?x4x5120xbf16>, tensor<?xi32>
  %X1 = csa.engram %X, %tokens, %pos layer 1 max_ngram 4 heads 8 head_dim 256 rows 384006168 hash_vocab 16000000 compressed_vocab 99092 pad_id 2 weights "layers.1.engram" : tensor<?x4x5120xbf16>, tensor<?xi32>
  // CHECK: csa.hc_mix %{{.*}} iters 20 eps {{.*}} weights "layers.2.hc_attn" : tensor<?x4x5120xbf16> -> tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>
  %pre, %post, %comb = csa.hc_mix %X1 iters 20 eps 1.0e-06 weights "layers.2.hc_attn" : tensor<?x4x5120xbf16> -> tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>
  // CHECK: csa.hc_collapse %{{.*}}, %{{.*}} : tensor<?x4x5120xbf16>, tensor<?x4xf32> -> tensor<?x5120xbf16>
  %x = csa.hc_collapse %X1, %pre : tensor<?x4x5120xbf16>, tensor<?x4xf32> -> tensor<?x5120xbf16>
  // CHECK: csa.rms_norm %{{.*}} eps {{.*}}E-21 weight "layers.2.attn_norm" : tensor<?x5120xbf16>
  %n = csa.rms_norm %x eps 1.0e-20 weight "layers.2.attn_norm" : tensor<?x5120xbf16>
  // CHECK: csa.attention %{{.*}}, %{{.*}} layer 0 swa_only ratio 0 rope #rope_base config #csa_attn weights "layers.0.attn" : tensor<?x5120xbf16>
  %a0 = csa.attention %n, %pos layer 0 swa_only ratio 0 rope #rope_base config #cfg weights "layers.0.attn" : tensor<?x5120xbf16>
  // CHECK: csa.attention %{{.*}}, %{{.*}} layer 2 full ratio 2 rope #rope_yarn config #csa_attn weights "layers.2.attn" : tensor<?x5120xbf16>
  %a2 = csa.attention %a0, %pos layer 2 full ratio 2 rope #rope_yarn config #cfg weights "layers.2.attn" : tensor<?x5120xbf16>
  // CHECK: csa.attention %{{.*}}, %{{.*}} layer 3 reuse ratio 2 kv_source 2 index_source 2 rope #rope_yarn
  %a3 = csa.attention %a2, %pos layer 3 reuse ratio 2 kv_source 2 index_source 2 rope #rope_yarn config #cfg weights "layers.3.attn" : tensor<?x5120xbf16>
  // CHECK: csa.attention %{{.*}}, %{{.*}} layer 20 full ratio 1 candidate_pool #hsi rope #rope_yarn
  %a20 = csa.attention %a3, %pos layer 20 full ratio 1 candidate_pool #csa.hsi<blocks = 2048, block_size = 8> rope #rope_yarn config #cfg weights "layers.20.attn" : tensor<?x5120xbf16>
  // CHECK: csa.attention %{{.*}}, %{{.*}} layer 24 reindex ratio 1 kv_source 20 candidate_source 20 rope #rope_yarn
  %a24 = csa.attention %a20, %pos layer 24 reindex ratio 1 kv_source 20 candidate_source 20 rope #rope_yarn config #cfg weights "layers.24.attn" : tensor<?x5120xbf16>
  // CHECK: csa.attention %{{.*}}, %{{.*}} layer 25 reuse ratio 1 kv_source 20 index_source 24 rope #rope_yarn
  %a25 = csa.attention %a24, %pos layer 25 reuse ratio 1 kv_source 20 index_source 24 rope #rope_yarn config #cfg weights "layers.25.attn" : tensor<?x5120xbf16>
  // CHECK: csa.hc_update %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<?x4x5120xbf16>, tensor<?x5120xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>
  %X2 = csa.hc_update %X1, %a25, %post, %comb : tensor<?x4x5120xbf16>, tensor<?x5120xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>
  // CHECK: csa.moe %{{.*}} layer 2 experts 384 top_k 6 shared 1 inter 2304 route_scale 1.500000e+00 swiglu_limit 1.000000e+01 expert_format fp4_e2m1 shared_format fp8_block32 weights "layers.2.ffn" : tensor<?x5120xbf16>
  %m = csa.moe %n layer 2 experts 384 top_k 6 shared 1 inter 2304 route_scale 1.5 swiglu_limit 10.0 expert_format fp4_e2m1 shared_format fp8_block32 weights "layers.2.ffn" : tensor<?x5120xbf16>
  // CHECK: csa.lm_head %{{.*}} vocab 129280 weight "head.weight" last_only : tensor<?x5120xbf16> -> tensor<1x129280xf32>
  %logits = csa.lm_head %m vocab 129280 weight "head.weight" last_only : tensor<?x5120xbf16> -> tensor<1x129280xf32>
  return %logits : tensor<1x129280xf32>
}

!main = !csa.fp4_row<512, e4m3, 16>
!index = !csa.fp4_row<128, ue8m0, 32>
!swa = !csa.fp8_row<512, ue8m0, 32>
!cache2 = !csa.global_cache<2, !main, !index>
!cache1 = !csa.global_cache<1, !main, !index>
!ring = !csa.swa_ring<128, !swa>
!state = !csa.compressor_state<2, 512>

// CHECK-LABEL: func.func @primitives
func.func @primitives(%x: tensor<?x5120xbf16>, %pos: index, %q: tensor<?x64x512xbf16>, %iq: tensor<?x32x128xbf16>, %iw: tensor<?x32xbf16>) -> tensor<?x64x512xbf16> {
  // CHECK: %[[CACHE:.+]] = csa.cache_alloc layer 2 : !csa.global_cache<2, !csa.fp4_row<512, e4m3, 16>, !csa.fp4_row<128, ue8m0, 32>>
  %cache = csa.cache_alloc layer 2 : !cache2
  // CHECK: %[[RING:.+]] = csa.cache_alloc layer 2 : !csa.swa_ring<128, !csa.fp8_row<512, ue8m0, 32>>
  %ring = csa.cache_alloc layer 2 : !ring
  // CHECK: %[[STATE:.+]] = csa.cache_alloc layer 2 : !csa.compressor_state<2, 512>
  %state = csa.cache_alloc layer 2 : !state
  // CHECK: csa.linear %{{.*}} weight "layers.2.attn.wkv" fp8_block32 : tensor<?x5120xbf16> -> tensor<?x512xbf16>
  %kv = csa.linear %x weight "layers.2.attn.wkv" fp8_block32 : tensor<?x5120xbf16> -> tensor<?x512xbf16>
  // CHECK: csa.rope %{{.*}}, %{{.*}} stride 1 table #{{.*}} : tensor<?x512xbf16>
  %kvr = csa.rope %kv, %pos stride 1 table #rope_yarn : tensor<?x512xbf16>
  // CHECK: csa.rope %{{.*}}, %{{.*}} stride 1 table #{{.*}} inverse : tensor<?x64x512xbf16>
  %qi = csa.rope %q, %pos stride 1 table #rope_yarn inverse : tensor<?x64x512xbf16>
  // CHECK: csa.quantize %{{.*}} : tensor<?x512xbf16> -> tensor<?x!csa.fp8_row<512, ue8m0, 32>>
  %swa_rows = csa.quantize %kvr : tensor<?x512xbf16> -> tensor<?x!swa>
  // CHECK: csa.cache_append %{{.*}}, %[[RING]][%{{.*}}] : tensor<?x!csa.fp8_row<512, ue8m0, 32>>, !csa.swa_ring<128, !csa.fp8_row<512, ue8m0, 32>>
  csa.cache_append %swa_rows, %ring[%pos] : tensor<?x!swa>, !ring
  // CHECK: csa.compress %{{.*}}, %{{.*}} ratio 2 state(%[[STATE]] : !csa.compressor_state<2, 512>) gated weights "layers.2.attn.compressor" : tensor<?x5120xbf16> -> tensor<?x512xbf16>
  %lat = csa.compress %x, %pos ratio 2 state(%state : !state) gated weights "layers.2.attn.compressor" : tensor<?x5120xbf16> -> tensor<?x512xbf16>
  // CHECK: csa.compress %{{.*}}, %{{.*}} ratio 1 weights "layers.20.attn.compressor" : tensor<?x5120xbf16> -> tensor<?x512xbf16>
  %lat1 = csa.compress %x, %pos ratio 1 weights "layers.20.attn.compressor" : tensor<?x5120xbf16> -> tensor<?x512xbf16>
  // CHECK: csa.rope %{{.*}}, %{{.*}} stride 2 table
  %latr = csa.rope %lat, %pos stride 2 table #rope_yarn : tensor<?x512xbf16>
  // CHECK: csa.quantize %{{.*}} : tensor<?x512xbf16> -> tensor<?x!csa.fp4_row<512, e4m3, 16>>
  %main_rows = csa.quantize %latr : tensor<?x512xbf16> -> tensor<?x!main>
  // CHECK: csa.cache_append %{{.*}}, %[[CACHE]][%{{.*}}] : tensor<?x!csa.fp4_row<512, e4m3, 16>>, !csa.global_cache
  csa.cache_append %main_rows, %cache[%pos] : tensor<?x!main>, !cache2
  // CHECK: csa.dequantize %{{.*}} : tensor<?x!csa.fp4_row<512, e4m3, 16>> -> tensor<?x512xf32>
  %back = csa.dequantize %main_rows : tensor<?x!main> -> tensor<?x512xf32>
  // CHECK: csa.index_score %{{.*}}, %{{.*}}, %[[CACHE]] : tensor<?x32x128xbf16>, tensor<?x32xbf16>, !csa.global_cache<{{.*}}> -> tensor<?x?xf32>
  %scores = csa.index_score %iq, %iw, %cache : tensor<?x32x128xbf16>, tensor<?x32xbf16>, !cache2 -> tensor<?x?xf32>
  // Release publication: even positions read layer 20's keys, odd ones its own.
  %source = csa.cache_alloc layer 20 : !cache1
  // CHECK: csa.index_score %{{.*}}, %{{.*}}, %[[CACHE]] published(%{{.*}} : !csa.global_cache<1, {{.*}}>) at [0, -1] :
  %released = csa.index_score %iq, %iw, %cache published(%source : !cache1) at [0, -1] : tensor<?x32x128xbf16>, tensor<?x32xbf16>, !cache2 -> tensor<?x?xf32>
  // CHECK: %[[POOL:.+]] = csa.hsi_select %{{.*}} : tensor<?x?xf32> -> !csa.candidate_pool<2048, 8>
  %pool = csa.hsi_select %scores : tensor<?x?xf32> -> !csa.candidate_pool<2048, 8>
  // CHECK: csa.topk %{{.*}} : tensor<?x?xf32> -> !csa.topk<512>
  %sel = csa.topk %scores : tensor<?x?xf32> -> !csa.topk<512>
  // CHECK: csa.topk %{{.*}} within %[[POOL]] : !csa.candidate_pool<2048, 8> : tensor<?x?xf32> -> !csa.topk<512>
  %sel2 = csa.topk %scores within %pool : !csa.candidate_pool<2048, 8> ties lowest_position : tensor<?x?xf32> -> !csa.topk<512>
  // CHECK: csa.sparse_attention %{{.*}}, %[[RING]][%{{.*}}] at %{{.*}} global(%[[CACHE]], %{{.*}} : !csa.global_cache<{{.*}}>, !csa.topk<512>) sink "layers.2.attn.attn_sink" scale 0.04419{{[0-9]*}} : tensor<?x64x512xbf16>, !csa.swa_ring<{{.*}}>, tensor<?x!csa.fp8_row<512, ue8m0, 32>> -> tensor<?x64x512xbf16>
  %o = csa.sparse_attention %qi, %ring[%swa_rows] at %pos global(%cache, %sel : !cache2, !csa.topk<512>) sink "layers.2.attn.attn_sink" scale 0.044194173824159216 : tensor<?x64x512xbf16>, !ring, tensor<?x!swa> -> tensor<?x64x512xbf16>
  // CHECK: csa.sparse_attention %{{.*}}, %[[RING]][%{{.*}}] at %{{.*}} sink "layers.0.attn.attn_sink" scale
  %o0 = csa.sparse_attention %o, %ring[%swa_rows] at %pos sink "layers.0.attn.attn_sink" scale 0.044194173824159216 : tensor<?x64x512xbf16>, !ring, tensor<?x!swa> -> tensor<?x64x512xbf16>
  // CHECK: csa.moe_route %{{.*}} experts 384 top_k 6 route_scale 1.500000e+00 weights "layers.2.ffn.gate" : tensor<?x5120xbf16> -> tensor<?x6xf32>, tensor<?x6xi32>
  %w, %ids = csa.moe_route %x experts 384 top_k 6 route_scale 1.5 weights "layers.2.ffn.gate" : tensor<?x5120xbf16> -> tensor<?x6xf32>, tensor<?x6xi32>
  return %o0 : tensor<?x64x512xbf16>
}

// CHECK-LABEL: func.func @fusion
// CHECK: %[[R:.+]] = csa.fusion rope_quantize_store (%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (tensor<?x32xbf16>, index, index, !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>) -> tensor<?x!csa.fp8_row<32, ue8m0, 32>> {
// CHECK: ^bb0(%{{.*}}: tensor<?x32xbf16>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>):
// CHECK:   csa.rope
// CHECK:   csa.quantize
// CHECK:   csa.cache_append
// CHECK:   csa.yield %{{.*}} : tensor<?x!csa.fp8_row<32, ue8m0, 32>>
func.func @fusion(%x: tensor<?x32xbf16>, %p: index) -> tensor<?x!csa.fp8_row<32, ue8m0, 32>> {
  %ring = csa.cache_alloc layer 0 : !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
  %r = csa.fusion rope_quantize_store (%x, %p, %p, %ring) : (tensor<?x32xbf16>, index, index, !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>) -> tensor<?x!csa.fp8_row<32, ue8m0, 32>> {
  ^bb0(%a: tensor<?x32xbf16>, %rp: index, %sp: index, %c: !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>):
    %e = csa.rope %a, %rp stride 1 table #rope8 : tensor<?x32xbf16>
    %q = csa.quantize %e : tensor<?x32xbf16> -> tensor<?x!csa.fp8_row<32, ue8m0, 32>>
    csa.cache_append %q, %c[%sp] : tensor<?x!csa.fp8_row<32, ue8m0, 32>>, !csa.swa_ring<8, !csa.fp8_row<32, ue8m0, 32>>
    csa.yield %q : tensor<?x!csa.fp8_row<32, ue8m0, 32>>
  }
  return %r : tensor<?x!csa.fp8_row<32, ue8m0, 32>>
}

// CHECK-LABEL: func.func @collapse_norm
// CHECK: %[[N:.+]] = csa.fusion hc_collapse_norm (%{{.*}}, %{{.*}}) : (tensor<?x4x32xbf16>, tensor<?x4xf32>) -> tensor<?x32xbf16> {
// CHECK:   csa.hc_collapse
// CHECK:   csa.rms_norm
// CHECK:   csa.yield %{{.*}} : tensor<?x32xbf16>
func.func @collapse_norm(%s: tensor<?x4x32xbf16>, %p: tensor<?x4xf32>) -> tensor<?x32xbf16> {
  %r = csa.fusion hc_collapse_norm (%s, %p) : (tensor<?x4x32xbf16>, tensor<?x4xf32>) -> tensor<?x32xbf16> {
  ^bb0(%a: tensor<?x4x32xbf16>, %b: tensor<?x4xf32>):
    %c = csa.hc_collapse %a, %b : tensor<?x4x32xbf16>, tensor<?x4xf32> -> tensor<?x32xbf16>
    %n = csa.rms_norm %c eps 1.0e-6 weight "layers.0.ffn_norm" : tensor<?x32xbf16>
    csa.yield %n : tensor<?x32xbf16>
  }
  return %r : tensor<?x32xbf16>
}

// V4's FP8 main-KV rows (--main-kv-format=fp8) in a global cache.
!v4 = !csa.fp8_nope_row<512, rope 64, ue8m0, 64>
// CHECK-LABEL: func.func @fp8_main_kv
// CHECK: csa.cache_alloc layer 2 : !csa.global_cache<2, !csa.fp8_nope_row<512, rope 64, ue8m0, 64>, !csa.fp4_row<128, ue8m0, 32>>
// CHECK: csa.quantize %{{.*}} : tensor<?x512xbf16> -> tensor<?x!csa.fp8_nope_row<512, rope 64, ue8m0, 64>>
// CHECK: csa.cache_append %{{.*}}, %{{.*}}[%{{.*}}] : tensor<?x!csa.fp8_nope_row<512, rope 64, ue8m0, 64>>, !csa.global_cache
// CHECK: csa.dequantize %{{.*}} : tensor<?x!csa.fp8_nope_row<512, rope 64, ue8m0, 64>> -> tensor<?x512xf32>
func.func @fp8_main_kv(%x: tensor<?x512xbf16>, %pos: index) -> tensor<?x512xf32> {
  %cache = csa.cache_alloc layer 2 : !csa.global_cache<2, !v4, !csa.fp4_row<128, ue8m0, 32>>
  %rows = csa.quantize %x : tensor<?x512xbf16> -> tensor<?x!v4>
  csa.cache_append %rows, %cache[%pos] : tensor<?x!v4>, !csa.global_cache<2, !v4, !csa.fp4_row<128, ue8m0, 32>>
  %back = csa.dequantize %rows : tensor<?x!v4> -> tensor<?x512xf32>
  return %back : tensor<?x512xf32>
}

// FP8 index keys (--index-key-format=fp8): one fp32 scale a row.
!k8 = !csa.fp8_row<128, f32, 128>
// CHECK-LABEL: func.func @fp8_index_keys
// CHECK: csa.cache_alloc layer 20 : !csa.global_cache<1, !csa.fp4_row<512, e4m3, 16>, !csa.fp8_row<128, f32, 128>>
// CHECK: csa.quantize %{{.*}} : tensor<?x128xbf16> -> tensor<?x!csa.fp8_row<128, f32, 128>>
// CHECK: csa.index_score %{{.*}}, %{{.*}}, %{{.*}} : tensor<?x32x128xbf16>, tensor<?x32xbf16>, !csa.global_cache<1, !csa.fp4_row<512, e4m3, 16>, !csa.fp8_row<128, f32, 128>> -> tensor<?x?xf32>
func.func @fp8_index_keys(%k: tensor<?x128xbf16>, %pos: index, %q: tensor<?x32x128xbf16>, %w: tensor<?x32xbf16>) -> tensor<?x?xf32> {
  %cache = csa.cache_alloc layer 20 : !csa.global_cache<1, !csa.fp4_row<512, e4m3, 16>, !k8>
  %rows = csa.quantize %k : tensor<?x128xbf16> -> tensor<?x!k8>
  csa.cache_append %rows, %cache[%pos] : tensor<?x!k8>, !csa.global_cache<1, !csa.fp4_row<512, e4m3, 16>, !k8>
  %s = csa.index_score %q, %w, %cache : tensor<?x32x128xbf16>, tensor<?x32xbf16>, !csa.global_cache<1, !csa.fp4_row<512, e4m3, 16>, !k8> -> tensor<?x?xf32>
  return %s : tensor<?x?xf32>
}

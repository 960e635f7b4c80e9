// RUN: csa-opt %s -split-input-file -verify-diagnostics
// One case per schedule rule of ScheduleRules.h, as the attention verifier
// reports it (the front end reports the same messages; see test/tools).

// SWA-only layers have ratio 0.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  // expected-error @+1 {{layer 0 (swa_only): a SWA-only layer has compression ratio 0, got 2}}
  %l0 = csa.attention %x, %p layer 0 swa_only ratio 2 rope #r config #c weights "l0" : tensor<?x64xbf16>
  return
}

// -----

// SWA-only layers read nothing.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 3 (swa_only): a SWA-only layer reads no kv_source, index_source or candidate_source}}
  %l3 = csa.attention %x, %p layer 3 swa_only ratio 0 kv_source 2 rope #r config #c weights "l3" : tensor<?x64xbf16>
  return
}

// -----

// Compressed modes need a ratio.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  // expected-error @+1 {{layer 2 (full): a compressed mode needs a compression ratio >= 1, got 0}}
  %l2 = csa.attention %x, %p layer 2 full ratio 0 rope #r config #c weights "l2" : tensor<?x64xbf16>
  return
}

// -----

// Only Full layers build the HSI pool.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 1 rope #r config #c weights "l2" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 3 (reuse): only a Full layer can build the HSI candidate pool}}
  %l3 = csa.attention %x, %p layer 3 reuse ratio 1 kv_source 2 index_source 2 candidate_pool #csa.hsi<blocks = 2, block_size = 4> rope #r config #c weights "l3" : tensor<?x64xbf16>
  return
}

// -----

// A Full layer owns its KV cache.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 3 (full): a Full layer owns its KV cache; kv_source 2 must be absent or the layer itself}}
  %l3 = csa.attention %x, %p layer 3 full ratio 2 kv_source 2 rope #r config #c weights "l3" : tensor<?x64xbf16>
  return
}

// -----

// A Full layer owns its indexer.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 3 (full): a Full layer owns its indexer; index_source 2 must be absent or the layer itself}}
  %l3 = csa.attention %x, %p layer 3 full ratio 2 index_source 2 rope #r config #c weights "l3" : tensor<?x64xbf16>
  return
}

// -----

// A Full layer takes no candidate source.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 1 candidate_pool #csa.hsi<blocks = 2, block_size = 4> rope #r config #c weights "l2" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 3 (full): a Full layer scores every position; it takes no candidate_source}}
  %l3 = csa.attention %x, %p layer 3 full ratio 1 candidate_source 2 rope #r config #c weights "l3" : tensor<?x64xbf16>
  return
}

// -----

// A Reindex layer without a KV source.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l4 = csa.attention %x, %p layer 4 full ratio 1 candidate_pool #csa.hsi<blocks = 2, block_size = 4> rope #r config #c weights "l4" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 6 (reindex): a Reindex layer needs an earlier Full layer as kv_source (it stores no KV of its own)}}
  %l6 = csa.attention %x, %p layer 6 reindex ratio 1 candidate_source 4 rope #r config #c weights "l6" : tensor<?x64xbf16>
  return
}

// -----

// A Reindex layer selects its own top-k.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l4 = csa.attention %x, %p layer 4 full ratio 1 candidate_pool #csa.hsi<blocks = 2, block_size = 4> rope #r config #c weights "l4" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 6 (reindex): a Reindex layer selects its own top-k; index_source 4 must be absent or the layer itself}}
  %l6 = csa.attention %x, %p layer 6 reindex ratio 1 kv_source 4 index_source 4 candidate_source 4 rope #r config #c weights "l6" : tensor<?x64xbf16>
  return
}

// -----

// A Reindex layer without a candidate pool.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l4 = csa.attention %x, %p layer 4 full ratio 1 rope #r config #c weights "l4" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 6 (reindex): a Reindex layer needs a candidate_source (a Full layer that builds the HSI candidate pool)}}
  %l6 = csa.attention %x, %p layer 6 reindex ratio 1 kv_source 4 rope #r config #c weights "l6" : tensor<?x64xbf16>
  return
}

// -----

// A Reuse layer without a KV source.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 3 (reuse): a Reuse layer needs an earlier Full layer as kv_source}}
  %l3 = csa.attention %x, %p layer 3 reuse ratio 2 index_source 2 rope #r config #c weights "l3" : tensor<?x64xbf16>
  return
}

// -----

// A Reuse layer with no earlier index source.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 3 (reuse): a Reuse layer needs an earlier Full or Reindex layer as index_source}}
  %l3 = csa.attention %x, %p layer 3 reuse ratio 2 kv_source 2 rope #r config #c weights "l3" : tensor<?x64xbf16>
  return
}

// -----

// A Reuse layer takes no candidate source.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l4 = csa.attention %x, %p layer 4 full ratio 1 candidate_pool #csa.hsi<blocks = 2, block_size = 4> rope #r config #c weights "l4" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 5 (reuse): a Reuse layer reuses top-k indices; it takes no candidate_source}}
  %l5 = csa.attention %x, %p layer 5 reuse ratio 1 kv_source 4 index_source 4 candidate_source 4 rope #r config #c weights "l5" : tensor<?x64xbf16>
  return
}

// -----

// Sources point backwards.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  // expected-error @+1 {{layer 3 (reuse): kv_source 7 points forward; a layer can only read from an earlier layer}}
  %l3 = csa.attention %x, %p layer 3 reuse ratio 2 kv_source 7 index_source 7 rope #r config #c weights "l3" : tensor<?x64xbf16>
  %l7 = csa.attention %x, %p layer 7 full ratio 2 rope #r config #c weights "l7" : tensor<?x64xbf16>
  return
}

// -----

// Sources name existing layers.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 5 (reuse): kv_source 3 does not name an attention layer of this model}}
  %l5 = csa.attention %x, %p layer 5 reuse ratio 2 kv_source 3 index_source 2 rope #r config #c weights "l5" : tensor<?x64xbf16>
  return
}

// -----

// A KV source is a Full layer.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  %l3 = csa.attention %x, %p layer 3 reuse ratio 2 kv_source 2 index_source 2 rope #r config #c weights "l3" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 4 (reuse): kv_source layer 3 (reuse) is not a Full layer; only Full layers own a compressed KV cache}}
  %l4 = csa.attention %x, %p layer 4 reuse ratio 2 kv_source 3 index_source 2 rope #r config #c weights "l4" : tensor<?x64xbf16>
  return
}

// -----

// A layer reads a cache at the cache's ratio.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 3 (reuse): compression ratio 1 differs from its kv_source layer 2's ratio 2; a cache is read at its own ratio}}
  %l3 = csa.attention %x, %p layer 3 reuse ratio 1 kv_source 2 index_source 2 rope #r config #c weights "l3" : tensor<?x64xbf16>
  return
}

// -----

// An index source is a Full or Reindex layer.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  %l3 = csa.attention %x, %p layer 3 reuse ratio 2 kv_source 2 index_source 2 rope #r config #c weights "l3" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 4 (reuse): index_source layer 3 (reuse) selects no top-k; only Full and Reindex layers are index sources}}
  %l4 = csa.attention %x, %p layer 4 reuse ratio 2 kv_source 2 index_source 3 rope #r config #c weights "l4" : tensor<?x64xbf16>
  return
}

// -----

// Top-k indices address the cache the layer reads.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  %l8 = csa.attention %x, %p layer 8 full ratio 2 rope #r config #c weights "l8" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 9 (reuse): index_source 8 selects positions of layer 8's cache, but this layer reads layer 2's cache}}
  %l9 = csa.attention %x, %p layer 9 reuse ratio 2 kv_source 2 index_source 8 rope #r config #c weights "l9" : tensor<?x64xbf16>
  return
}

// -----

// A candidate source builds a pool.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l4 = csa.attention %x, %p layer 4 full ratio 1 rope #r config #c weights "l4" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 6 (reindex): candidate_source layer 4 (full) does not build an HSI candidate pool}}
  %l6 = csa.attention %x, %p layer 6 reindex ratio 1 kv_source 4 candidate_source 4 rope #r config #c weights "l6" : tensor<?x64xbf16>
  return
}

// -----

// The pool covers the cache the layer scores.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l4 = csa.attention %x, %p layer 4 full ratio 1 candidate_pool #csa.hsi<blocks = 2, block_size = 4> rope #r config #c weights "l4" : tensor<?x64xbf16>
  %l5 = csa.attention %x, %p layer 5 full ratio 1 rope #r config #c weights "l5" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 6 (reindex): candidate_source 4 builds its pool over its own cache, but this layer reads layer 5's cache}}
  %l6 = csa.attention %x, %p layer 6 reindex ratio 1 kv_source 5 candidate_source 4 rope #r config #c weights "l6" : tensor<?x64xbf16>
  return
}

// -----

// Layer numbers are unique.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  %l2 = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  // expected-error @+1 {{layer 2 (full): layer number appears twice in the graph}}
  %dup = csa.attention %x, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<?x64xbf16>
  return
}

// -----

// The rope table rotates the config's rope_dim channels.
#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>
#r16 = #csa.rope<dim = 16, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
func.func @f(%x: tensor<?x64xbf16>, %p: index) {
  // expected-error @+1 {{layer 2 (full): rope table rotates 16 channels but the config's rope_dim is 8}}
  %l2 = csa.attention %x, %p layer 2 full ratio 2 rope #r16 config #c weights "l2" : tensor<?x64xbf16>
  return
}

// RUN: csa-opt %s --csa-cost-report='context=64 format=json' -o /dev/null | FileCheck %s --check-prefix=JSON
// RUN: csa-opt %s --csa-cost-report='context=64,4096' -o /dev/null | FileCheck %s --check-prefix=TEXT
// RUN: not csa-opt %s --csa-cost-report='format=xml' -o /dev/null 2>&1 | FileCheck %s --check-prefix=FORMAT
// RUN: not csa-opt %s --csa-cost-report='function=prefill' -o /dev/null 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not csa-opt %s --csa-cost-report='context=0' -o /dev/null 2>&1 | FileCheck %s --check-prefix=ZERO

// A five-layer graph with hand-computed costs. Row bytes: main 32/2 + 32/16
// = 18, index 32/2 + 32/32 = 17, SWA 32 + 32/32 = 33.

#r = #csa.rope<dim = 8, theta = 160000.0, factor = 4.0, original_seq_len = 32, beta_fast = 32.0, beta_slow = 1.0>
#c = #csa.attention_config<heads = 4, head_dim = 32, rope_dim = 8, q_rank = 32, window = 8, index_heads = 2, index_dim = 32, index_rope_dim = 8, topk = 4, o_groups = 2, o_rank = 16, main_row = !csa.fp4_row<32, e4m3, 16>, index_row = !csa.fp4_row<32, ue8m0, 32>, swa_row = !csa.fp8_row<32, ue8m0, 32>>

func.func @decode(%x: tensor<1x64xbf16>, %p: index) -> tensor<1x64xbf16> {
  %0 = csa.attention %x, %p layer 0 swa_only ratio 0 rope #r config #c weights "l0" : tensor<1x64xbf16>
  %2 = csa.attention %0, %p layer 2 full ratio 2 rope #r config #c weights "l2" : tensor<1x64xbf16>
  %3 = csa.attention %2, %p layer 3 reuse ratio 2 kv_source 2 index_source 2 rope #r config #c weights "l3" : tensor<1x64xbf16>
  %4 = csa.attention %3, %p layer 4 full ratio 1 candidate_pool #csa.hsi<blocks = 2, block_size = 4> rope #r config #c weights "l4" : tensor<1x64xbf16>
  %6 = csa.attention %4, %p layer 6 reindex ratio 1 kv_source 4 candidate_source 4 rope #r config #c weights "l6" : tensor<1x64xbf16>
  %m = csa.moe %6 layer 6 experts 8 top_k 2 shared 1 inter 32 route_scale 1.5 swiglu_limit 10.0 expert_format fp4_e2m1 shared_format fp8_block32 weights "f" : tensor<1x64xbf16>
  return %m : tensor<1x64xbf16>
}

// (llvm::json prints keys in sorted order.)
// Compressor state only for the ratio-2 source: 2 x 2 slots x 32 ch x 4 B.
// JSON:        "compressor_state": {
// JSON-NEXT:     "bytes_per_sequence": 512,
// JSON-NEXT:     "layers": 1
// At 64 tokens: attention gathers 5 x 8 window rows (5 x 8 x 33 B) plus
// 4 layers x min(topk 4, visible) selected rows (16 x 18 B).
// JSON:        "decode": [
// JSON:          "attention_bytes": 1608,
// JSON-NEXT:     "attention_rows": 56,
// JSON-NEXT:     "context": 64,
// Layer 4 keeps 64 x 35 B, layer 2 keeps 32 x 35 B.
// JSON-NEXT:     "global_kv_bytes": 3360,
// Index rows: 32 (layer 2) + 64 (layer 4) + 8 (layer 6, pool of 2 x 4).
// JSON-NEXT:     "indexer_bytes": 1768,
// JSON-NEXT:     "indexer_rows": 104,
// Global KV: layer 2 holds a 35 B entry per 2 tokens, layer 4 one per token.
// JSON:        "global_kv": {
// JSON-NEXT:     "bytes_per_token": 52.5,
// JSON-NEXT:     "entries_per_token": 1.5,
// JSON:            "bytes_per_token": 17.5,
// JSON-NEXT:       "entries_per_token": 0.5,
// JSON-NEXT:       "entry_bytes": 35,
// JSON-NEXT:       "index_row_bytes": 17,
// JSON-NEXT:       "layer": 2,
// JSON-NEXT:       "main_row_bytes": 18,
// JSON-NEXT:       "ratio": 2
// JSON:            "bytes_per_token": 35,
// JSON:            "layer": 4,
// JSON:        "modes": {
// JSON-NEXT:     "full": 2,
// JSON-NEXT:     "reindex": 1,
// JSON-NEXT:     "reuse": 1,
// JSON-NEXT:     "swa_only": 1
// JSON:        "persistent_bytes_per_token": 52.5,
// JSON-NEXT:   "prefill": [],
// JSON-NEXT:   "schedule": "WF.CR",
// JSON-NEXT:   "swa": {
// JSON-NEXT:     "bytes_per_sequence": 1320,
// JSON-NEXT:     "layers": 5

// TEXT: schedule   WF.CR
// TEXT: layers     5: 2 full, 1 reindex, 1 reuse, 1 swa_only
// TEXT: total: 1.50 entries/token -> 52.50 B/token
// TEXT: context 64 4K
// TEXT: index-key rows scored 104 6152

// FORMAT: csa-cost-report: format must be 'text' or 'json', got 'xml'
// MISSING: csa-cost-report: no function named 'prefill'
// ZERO: csa-cost-report: context lengths must be >= 1, got 0

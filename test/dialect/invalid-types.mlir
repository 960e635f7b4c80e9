// RUN: csa-opt %s -split-input-file -verify-diagnostics
// One case per type and attribute verifier rule.

// Rows hold whole scale groups.
// expected-error @+1 {{fp4_row dim 500 is not a multiple of its scale group 16}}
func.func private @f(!csa.fp4_row<500, e4m3, 16>)

// -----

// expected-error @+1 {{fp4_row needs dim > 0 and group > 0, got 0 and 16}}
func.func private @f(!csa.fp4_row<0, e4m3, 16>)

// -----

// Two E2M1 values per byte.
// expected-error @+1 {{fp4_row dim 15 must be even}}
func.func private @f(!csa.fp4_row<15, ue8m0, 5>)

// -----

// expected-error @+1 {{fp8_row dim 100 is not a multiple of its scale group 32}}
func.func private @f(!csa.fp8_row<100, ue8m0, 32>)

// -----

// V4's FP8 main-KV row: the NoPE part holds whole scale groups.
// expected-error @+1 {{fp8_nope_row NoPE part dim 448 is not a multiple of its scale group 60}}
func.func private @f(!csa.fp8_nope_row<512, rope 64, ue8m0, 60>)

// -----

// expected-error @+1 {{fp8_nope_row needs 0 <= rope < dim, got rope 512 of 512}}
func.func private @f(!csa.fp8_nope_row<512, rope 512, ue8m0, 64>)

// -----

// expected-error @+1 {{fp8_nope_row scales are ue8m0, not e4m3}}
func.func private @f(!csa.fp8_nope_row<512, rope 64, e4m3, 64>)

// -----

// A global cache's main rows are FP4 or V4's FP8 rows, not SWA rows.
// expected-error @+1 {{global_cache main rows are !csa.fp4_row or !csa.fp8_nope_row, not '!csa.fp8_row<512, ue8m0, 32>'}}
func.func private @f(!csa.global_cache<1, !csa.fp8_row<512, ue8m0, 32>, !csa.fp4_row<128, ue8m0, 32>>)

// -----

// Scale formats per row kind.
// expected-error @+1 {{fp4_row scales are e4m3 or ue8m0, not f32}}
func.func private @f(!csa.fp4_row<128, f32, 32>)

// -----

// expected-error @+1 {{fp8_row scales are ue8m0 or f32, not e4m3}}
func.func private @f(!csa.fp8_row<128, e4m3, 32>)

// -----

// expected-error @+1 {{swa_ring rows have ue8m0 scales, not f32}}
func.func private @f(!csa.swa_ring<8, !csa.fp8_row<512, f32, 512>>)

// -----

// FP8 index rows have one fp32 scale for the whole row.
// expected-error @+1 {{global_cache index rows are !csa.fp4_row or !csa.fp8_row with one f32 scale a row, not '!csa.fp8_row<128, ue8m0, 32>'}}
func.func private @f(!csa.global_cache<1, !csa.fp4_row<512, e4m3, 16>, !csa.fp8_row<128, ue8m0, 32>>)

// -----

// expected-error @+1 {{global_cache ratio must be >= 1, got 0}}
func.func private @f(!csa.global_cache<0, !csa.fp4_row<512, e4m3, 16>, !csa.fp4_row<128, ue8m0, 32>>)

// -----

// expected-error @+1 {{swa_ring window must be >= 1, got 0}}
func.func private @f(!csa.swa_ring<0, !csa.fp8_row<512, ue8m0, 32>>)

// -----

// A ratio-1 compressor keeps no partial group.
// expected-error @+1 {{compressor_state is only needed for ratio >= 2, got 1}}
func.func private @f(!csa.compressor_state<1, 512>)

// -----

// expected-error @+1 {{compressor_state dim must be >= 1, got 0}}
func.func private @f(!csa.compressor_state<2, 0>)

// -----

// expected-error @+1 {{topk k must be >= 1, got 0}}
func.func private @f(!csa.topk<0>)

// -----

// expected-error @+1 {{candidate_pool needs blocks >= 1 and block_size >= 1, got 2048 and 0}}
func.func private @f(!csa.candidate_pool<2048, 0>)

// -----

// expected-error @+1 {{rope dim must be positive and even, got 7}}
func.func private @f() attributes {r = #csa.rope<dim = 7, theta = 10000.0, factor = 1.0, original_seq_len = 0, beta_fast = 0.0, beta_slow = 0.0>}

// -----

// expected-error @+1 {{rope theta must be > 1, got 1.000000e+00}}
func.func private @f() attributes {r = #csa.rope<dim = 64, theta = 1.0, factor = 1.0, original_seq_len = 0, beta_fast = 0.0, beta_slow = 0.0>}

// -----

// expected-error @+1 {{rope factor must be >= 1 (1 = no YaRN), got 5.000000e-01}}
func.func private @f() attributes {r = #csa.rope<dim = 64, theta = 10000.0, factor = 0.5, original_seq_len = 0, beta_fast = 0.0, beta_slow = 0.0>}

// -----

// expected-error @+1 {{YaRN needs original_seq_len > 0}}
func.func private @f() attributes {r = #csa.rope<dim = 64, theta = 160000.0, factor = 16.0, original_seq_len = 0, beta_fast = 32.0, beta_slow = 1.0>}

// -----

// expected-error @+1 {{YaRN needs beta_fast > beta_slow > 0, got 1.000000e+00 and 3.200000e+01}}
func.func private @f() attributes {r = #csa.rope<dim = 64, theta = 160000.0, factor = 16.0, original_seq_len = 65536, beta_fast = 1.0, beta_slow = 32.0>}

// -----

// expected-error @+1 {{HSI pool needs blocks > 0 and block_size > 0, got 0 and 8}}
func.func private @f() attributes {h = #csa.hsi<blocks = 0, block_size = 8>}

// -----

// expected-error @+1 {{attention config: o_groups must be positive, got 0}}
func.func private @f() attributes {c = #csa.attention_config<heads = 64, head_dim = 512, rope_dim = 64, q_rank = 1280, window = 128, index_heads = 32, index_dim = 128, index_rope_dim = 64, topk = 512, o_groups = 0, o_rank = 1024, main_row = !csa.fp4_row<512, e4m3, 16>, index_row = !csa.fp4_row<128, ue8m0, 32>, swa_row = !csa.fp8_row<512, ue8m0, 32>>}

// -----

// expected-error @+1 {{attention config: rope_dim 640 must be even and at most head_dim 512}}
func.func private @f() attributes {c = #csa.attention_config<heads = 64, head_dim = 512, rope_dim = 640, q_rank = 1280, window = 128, index_heads = 32, index_dim = 128, index_rope_dim = 64, topk = 512, o_groups = 8, o_rank = 1024, main_row = !csa.fp4_row<512, e4m3, 16>, index_row = !csa.fp4_row<128, ue8m0, 32>, swa_row = !csa.fp8_row<512, ue8m0, 32>>}

// -----

// expected-error @+1 {{attention config: index_rope_dim 256 must be even and at most index_dim 128}}
func.func private @f() attributes {c = #csa.attention_config<heads = 64, head_dim = 512, rope_dim = 64, q_rank = 1280, window = 128, index_heads = 32, index_dim = 128, index_rope_dim = 256, topk = 512, o_groups = 8, o_rank = 1024, main_row = !csa.fp4_row<512, e4m3, 16>, index_row = !csa.fp4_row<128, ue8m0, 32>, swa_row = !csa.fp8_row<512, ue8m0, 32>>}

// -----

// expected-error @+1 {{attention config: heads 64 must be a multiple of o_groups 6}}
func.func private @f() attributes {c = #csa.attention_config<heads = 64, head_dim = 512, rope_dim = 64, q_rank = 1280, window = 128, index_heads = 32, index_dim = 128, index_rope_dim = 64, topk = 512, o_groups = 6, o_rank = 1024, main_row = !csa.fp4_row<512, e4m3, 16>, index_row = !csa.fp4_row<128, ue8m0, 32>, swa_row = !csa.fp8_row<512, ue8m0, 32>>}

// -----

// expected-error @+1 {{attention config: main_row holds 256 channels but head_dim is 512}}
func.func private @f() attributes {c = #csa.attention_config<heads = 64, head_dim = 512, rope_dim = 64, q_rank = 1280, window = 128, index_heads = 32, index_dim = 128, index_rope_dim = 64, topk = 512, o_groups = 8, o_rank = 1024, main_row = !csa.fp4_row<256, e4m3, 16>, index_row = !csa.fp4_row<128, ue8m0, 32>, swa_row = !csa.fp8_row<512, ue8m0, 32>>}

// -----

// V4's FP8 main rows keep exactly the RoPE channels in bf16.
// expected-error @+1 {{attention config: main_row keeps 32 channels in bf16 but rope_dim is 64}}
func.func private @f() attributes {c = #csa.attention_config<heads = 64, head_dim = 512, rope_dim = 64, q_rank = 1280, window = 128, index_heads = 32, index_dim = 128, index_rope_dim = 64, topk = 512, o_groups = 8, o_rank = 1024, main_row = !csa.fp8_nope_row<512, rope 32, ue8m0, 32>, index_row = !csa.fp4_row<128, ue8m0, 32>, swa_row = !csa.fp8_row<512, ue8m0, 32>>}

// -----

// expected-error @+1 {{attention config: main_row is !csa.fp4_row or !csa.fp8_nope_row, not '!csa.fp8_row<512, ue8m0, 32>'}}
func.func private @f() attributes {c = #csa.attention_config<heads = 64, head_dim = 512, rope_dim = 64, q_rank = 1280, window = 128, index_heads = 32, index_dim = 128, index_rope_dim = 64, topk = 512, o_groups = 8, o_rank = 1024, main_row = !csa.fp8_row<512, ue8m0, 32>, index_row = !csa.fp4_row<128, ue8m0, 32>, swa_row = !csa.fp8_row<512, ue8m0, 32>>}

// -----

// expected-error @+1 {{attention config: swa_row holds 448 channels but head_dim is 512}}
func.func private @f() attributes {c = #csa.attention_config<heads = 64, head_dim = 512, rope_dim = 64, q_rank = 1280, window = 128, index_heads = 32, index_dim = 128, index_rope_dim = 64, topk = 512, o_groups = 8, o_rank = 1024, main_row = !csa.fp4_row<512, e4m3, 16>, index_row = !csa.fp4_row<128, ue8m0, 32>, swa_row = !csa.fp8_row<448, ue8m0, 32>>}

// -----

// expected-error @+1 {{attention config: index_row holds 64 channels but index_dim is 128}}
func.func private @f() attributes {c = #csa.attention_config<heads = 64, head_dim = 512, rope_dim = 64, q_rank = 1280, window = 128, index_heads = 32, index_dim = 128, index_rope_dim = 64, topk = 512, o_groups = 8, o_rank = 1024, main_row = !csa.fp4_row<512, e4m3, 16>, index_row = !csa.fp4_row<64, ue8m0, 32>, swa_row = !csa.fp8_row<512, ue8m0, 32>>}

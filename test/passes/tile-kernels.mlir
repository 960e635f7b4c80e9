// RUN: csa-opt %s --split-input-file --csa-tile-kernels | FileCheck %s --check-prefix=HOST
// RUN: csa-opt %s --split-input-file --csa-tile-kernels='target=sm_90a' | FileCheck %s --check-prefix=GPU
// RUN: csa-opt %s --split-input-file --csa-tile-kernels='rows=4' | FileCheck %s --check-prefix=ROWS
// RUN: not csa-opt %s --split-input-file --csa-tile-kernels='target=sm_80' 2>&1 | FileCheck %s --check-prefix=BADTARGET
// RUN: not csa-opt %s --split-input-file --csa-tile-kernels='rows=-1' 2>&1 | FileCheck %s --check-prefix=BADROWS
// BADTARGET: error: csa-tile-kernels: unknown target 'sm_80' (host or sm_90a)
// BADROWS: error: csa-tile-kernels: rows must be >= 1 (or 0 for the default, 8), got -1

// Every matrix-product op gets the row tile; other ops get none; a tile
// already on an op (set by hand) is kept.

// HOST: module attributes {csa.target = "host"}
// HOST-LABEL: func.func @f
// HOST: csa.linear %{{.*}} weight "a" fp8_block32 {csa.row_tile = #csa.row_tile<8>}
// HOST: csa.rms_norm
// HOST-NOT: csa.row_tile
// HOST: csa.linear %{{.*}} weight "b" bf16 {csa.row_tile = #csa.row_tile<2>}
// HOST: csa.lm_head %{{.*}} vocab 16 weight "head.weight" last_only {csa.row_tile = #csa.row_tile<8>}
// The host kernels are every target's: sm_90a records the same tile.
// GPU: module attributes {csa.target = "sm_90a"}
// GPU: csa.linear %{{.*}} weight "a" fp8_block32 {csa.row_tile = #csa.row_tile<8>}
// ROWS: csa.linear %{{.*}} weight "a" fp8_block32 {csa.row_tile = #csa.row_tile<4>}
func.func @f(%x: tensor<?x64xbf16>) -> tensor<1x16xf32> {
  %a = csa.linear %x weight "a" fp8_block32 : tensor<?x64xbf16> -> tensor<?x64xbf16>
  %n = csa.rms_norm %a eps 1.0e-6 weight "n" : tensor<?x64xbf16>
  %b = csa.linear %n weight "b" bf16 {csa.row_tile = #csa.row_tile<2>} : tensor<?x64xbf16> -> tensor<?x64xbf16>
  %l = csa.lm_head %b vocab 16 weight "head.weight" last_only : tensor<?x64xbf16> -> tensor<1x16xf32>
  return %l : tensor<1x16xf32>
}

// -----

// A call with one static row (decode) keeps the untiled kernel.
// HOST-LABEL: func.func @decode_row
// HOST: csa.linear %{{.*}} weight "d" fp8_block32 {csa.row_tile = #csa.row_tile<1>}
// GPU-LABEL: func.func @decode_row
// GPU: csa.linear %{{.*}} weight "d" fp8_block32 {csa.row_tile = #csa.row_tile<1>}
func.func @decode_row(%x: tensor<1x64xbf16>) -> tensor<1x64xbf16> {
  %a = csa.linear %x weight "d" fp8_block32 : tensor<1x64xbf16> -> tensor<1x64xbf16>
  return %a : tensor<1x64xbf16>
}

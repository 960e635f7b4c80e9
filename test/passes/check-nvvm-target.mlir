// RUN: csa-opt %s --csa-check-nvvm-target --split-input-file --verify-diagnostics
// RUN: csa-opt %s --csa-check-nvvm-target=chip=sm_100a --split-input-file | FileCheck %s --check-prefix=SM100
// RUN: not csa-opt %s --csa-check-nvvm-target=chip=hopper --split-input-file 2>&1 | FileCheck %s --check-prefix=BADCHIP

// The native FP4 conversion does not exist on sm_90a (LLVM would abort).
llvm.func @pack(%a: f32, %b: f32) -> i8 {
  // expected-error @+1 {{native FP4 conversion (cvt ... e2m1x2) needs sm_100 or later; sm_90a has none (dequantize E2M1 through a table, as the csa kernels do)}}
  %r = nvvm.convert.f32x2.to.f4x2 %a, %b : i8 (f4E2M1FN)
  llvm.return %r : i8
}

// -----

// Table-based code passes on sm_90a.
llvm.func @ok(%a: f32) -> f32 {
  llvm.return %a : f32
}

// SM100: nvvm.convert.f32x2.to.f4x2
// BADCHIP: error: unknown NVPTX chip 'hopper' (expected sm_<number>[a], e.g. sm_90a)

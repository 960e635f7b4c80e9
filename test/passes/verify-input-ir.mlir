// csa-opt parses without the parser's verification and runs
// csa-verify-input-ir first: an expand_shape with an empty reassociation
// group (upstream MLIR 22's verifier crashes on it; found by fuzz-ir) is a
// diagnostic on the op, and every other op is still verified.
// RUN: csa-opt %s -split-input-file -verify-diagnostics
// RUN: csa-opt %s -split-input-file -verify-diagnostics --canonicalize
// RUN: csa-opt %s -split-input-file -verify-diagnostics --csa-verify-input-ir

func.func @tensor_empty_group(%arg0: tensor<1x128xbf16>) -> tensor<1x4x32xbf16> {
  // expected-error @+1 {{reassociation indices must not be empty}}
  %0 = tensor.expand_shape %arg0 [[0], []] output_shape [1, 4, 32] : tensor<1x128xbf16> into tensor<1x4x32xbf16>
  return %0 : tensor<1x4x32xbf16>
}

// -----

func.func @memref_empty_group(%arg0: memref<1x128xbf16>) -> memref<1x4x32xbf16> {
  // expected-error @+1 {{reassociation indices must not be empty}}
  %0 = memref.expand_shape %arg0 [[], [0, 1, 2]] output_shape [1, 4, 32] : memref<1x128xbf16> into memref<1x4x32xbf16>
  return %0 : memref<1x4x32xbf16>
}

// -----

// The op verifiers still run (here func.return's).
func.func @still_verified(%arg0: tensor<1x128xbf16>) -> tensor<1x4x32xbf16> {
  // expected-error @+1 {{type of return operand 0 ('tensor<1x128xbf16>') doesn't match function result type}}
  return %arg0 : tensor<1x128xbf16>
}

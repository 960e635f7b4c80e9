// An expand_shape whose reassociation has an empty group: upstream MLIR 22's
// verifier crashes on it (fuzz-ir); csa-compile --compile-from reports it
// (emit.test).
module {
  func.func @f(%x: tensor<1x128xbf16>) -> tensor<1x4x32xbf16> {
    %e = tensor.expand_shape %x [[0], []] output_shape [1, 4, 32] : tensor<1x128xbf16> into tensor<1x4x32xbf16>
    return %e : tensor<1x4x32xbf16>
  }
}

// The cost report reads the graph stage: IR without csa.attention ops (the
// expanded stage and later) is refused, not reported as zeros (issue 22).
// RUN: not csa-opt %s --csa-cost-report -o /dev/null 2>&1 | FileCheck %s
// CHECK: error: csa-cost-report: no csa.attention ops: the report reads the graph stage (csa-compile --emit=graph); expanded and later stages have none left

func.func @decode(%x: tensor<1x64xbf16>) -> tensor<1x64xbf16> {
  return %x : tensor<1x64xbf16>
}

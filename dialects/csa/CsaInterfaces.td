//===- CsaInterfaces.td - csa op interfaces ----------------*- tablegen -*-===//
#ifndef CSA_DIALECTS_CSA_CSAINTERFACES_TD
#define CSA_DIALECTS_CSA_CSAINTERFACES_TD

include "mlir/IR/OpBase.td"

def Csa_CostOpInterface : OpInterface<"CostOpInterface"> {
  let description = [{
    What a graph-level op costs, so that the cost analysis can sum a model
    from its IR (including hand-edited IR) rather than from its config.

    FLOPs are precision-weighted as the DeepSeek tech report counts them: a
    multiply-add is 2 FLOPs, times 1 for BF16/FP32 operands, 0.5 for FP8 and
    0.25 for FP4 (the narrower operand decides).
  }];
  let cppNamespace = "::csa";
  let methods = [
    InterfaceMethod<"Number of parameters held by this op's weights.",
      "int64_t", "getParameterCount">,
    InterfaceMethod<[{Number of parameters one decode token reads
      (for MoE: the activated experts only; for embeddings: one row).}],
      "int64_t", "getActiveParameterCount">,
    InterfaceMethod<[{Precision-weighted FLOPs of one decode token at
      `context` tokens of context (the new token included).}],
      "double", "getWeightedDecodeFlops", (ins "int64_t":$context)>,
  ];
}

#endif // CSA_DIALECTS_CSA_CSAINTERFACES_TD

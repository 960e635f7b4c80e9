//===- Passes.td - csa passes ------------------------------*- tablegen -*-===//
//
// Passes are listed in alphabetical order.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_PASSES_PASSES_TD
#define CSA_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def CostReport : Pass<"csa-cost-report", "::mlir::ModuleOp"> {
  let summary = "Print what a model graph costs: cache bytes, rows read, "
                "FLOPs, parameters";
  let description = [{
    Sums the graph-level ops of one function (by default `decode`, else the
    first function holding csa ops) through `CostOpInterface` and the
    attention layers' cache types, and prints:

    * global KV bytes per token, derived per Full (source) layer as entry
      bytes (main-KV row + index-key row) x entries per token (1/ratio);
    * SWA ring bytes and compressor-state bytes per sequence;
    * parameters, total and read per decode token;
    * per decode token at each context length: index-key rows scored,
      attention rows gathered (window + selected), the bytes they occupy,
      and precision-weighted FLOPs (BF16 = 1, FP8 = 0.5, FP4 = 0.25).

    Works on any graph-stage IR, including hand-edited IR. The IR is not
    changed.

    Example:
    ```
    csa-opt model.mlir --csa-cost-report='context=4096,131072 format=json'
    ```
  }];
  let options = [
    ListOption<"contexts", "context", "int64_t",
               "Context lengths (tokens) to report decode costs at">,
    Option<"format", "format", "std::string", /*default=*/"\"text\"",
           "Output format: text or json">,
    Option<"function", "function", "std::string", /*default=*/"\"\"",
           "Function to analyse (default: decode, else the first with csa ops)">,
  ];
}

#endif // CSA_PASSES_PASSES_TD

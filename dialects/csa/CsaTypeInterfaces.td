//===- CsaTypeInterfaces.td - csa type interfaces ----------*- tablegen -*-===//
#ifndef CSA_DIALECTS_CSA_CSATYPEINTERFACES_TD
#define CSA_DIALECTS_CSA_CSATYPEINTERFACES_TD

include "mlir/IR/OpBase.td"

def Csa_CacheRowTypeInterface : TypeInterface<"CacheRowTypeInterface"> {
  let description = [{
    A cache row format: a fixed number of bytes that encode `dim` channels
    (values, then scales). The row types implement it so that caches, the
    cost report and the plan read a row's size without knowing its format.
  }];
  let cppNamespace = "::csa";
  let methods = [
    InterfaceMethod<"Channels one row encodes.", "int64_t", "getDim">,
    InterfaceMethod<"Bytes of one row.", "int64_t", "getBytes">,
  ];
}

#endif // CSA_DIALECTS_CSA_CSATYPEINTERFACES_TD

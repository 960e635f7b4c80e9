//===- Numerics.h - csa number-format library -------------------*- C++ -*-===//
//
// Umbrella header of csa_numerics: the scalar codecs (Formats.h) and the
// block quantizers, cache rows and weight dequantizers (Quantize.h) of
// DeepSeek-V4.1-Flash. Plain C++17, no LLVM/MLIR, shared by the compiler, the
// CPU runtime and the reference forward.
//
//===----------------------------------------------------------------------===//

#ifndef CSA_RUNTIME_NUMERICS_NUMERICS_H
#define CSA_RUNTIME_NUMERICS_NUMERICS_H

#include "runtime/numerics/Formats.h"
#include "runtime/numerics/Quantize.h"
#include "runtime/numerics/Transcendental.h"

#endif // CSA_RUNTIME_NUMERICS_NUMERICS_H

//===- DType.h - Element types of safetensors checkpoints -------*- C++ -*-===//
//
// The element types a DeepSeek-V4.1 checkpoint (and csa's own files) can
// hold, spelled as the safetensors header spells them. The released
// checkpoint uses BF16, F32, F8_E4M3, F8_E8M0 and I8 (packed E2M1 pairs);
// the others are accepted so any well-formed file can be read.
// Plain C++17: shared by the runtime, the weight manifest and the tools.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_CHECKPOINT_DTYPE_H
#define CSA_RUNTIME_CHECKPOINT_DTYPE_H

#include <cstdint>
#include <optional>
#include <string_view>

namespace csa {
namespace checkpoint {

enum class DType : uint8_t {
  BF16,
  F16,
  F32,
  F64,
  I8,
  I16,
  I32,
  I64,
  U8,
  Bool,
  F8E4M3, ///< "F8_E4M3" (OCP E4M3FN, torch.float8_e4m3fn)
  F8E8M0, ///< "F8_E8M0" (UE8M0 scales, torch.float8_e8m0fnu)
};

/// Every dtype, in enum order (for tests and listings).
inline constexpr DType kAllDTypes[] = {
    DType::BF16, DType::F16,  DType::F32,    DType::F64,
    DType::I8,   DType::I16,  DType::I32,    DType::I64,
    DType::U8,   DType::Bool, DType::F8E4M3, DType::F8E8M0};

/// The safetensors spelling ("BF16", "F8_E4M3", "BOOL", ...).
const char *dtypeName(DType dtype);

/// Parses a safetensors spelling (exact, case-sensitive as the format is).
std::optional<DType> parseDType(std::string_view name);

/// Bytes per element.
uint64_t dtypeSize(DType dtype);

} // namespace checkpoint
} // namespace csa

#endif // CSA_RUNTIME_CHECKPOINT_DTYPE_H

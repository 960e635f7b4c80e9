//===- DType.cpp - Element types of safetensors checkpoints ---------------===//
#include "runtime/checkpoint/DType.h"

namespace csa {
namespace checkpoint {
namespace {

struct DTypeInfo {
  DType dtype;
  const char *name;
  uint64_t size;
};

constexpr DTypeInfo kInfos[] = {
    {DType::BF16, "BF16", 2},      {DType::F16, "F16", 2},
    {DType::F32, "F32", 4},        {DType::F64, "F64", 8},
    {DType::I8, "I8", 1},          {DType::I16, "I16", 2},
    {DType::I32, "I32", 4},        {DType::I64, "I64", 8},
    {DType::U8, "U8", 1},          {DType::Bool, "BOOL", 1},
    {DType::F8E4M3, "F8_E4M3", 1}, {DType::F8E8M0, "F8_E8M0", 1},
};

const DTypeInfo &info(DType dtype) {
  for (const DTypeInfo &i : kInfos)
    if (i.dtype == dtype)
      return i;
  return kInfos[0]; // unreachable: every enumerator has an entry
}

} // namespace

const char *dtypeName(DType dtype) { return info(dtype).name; }

std::optional<DType> parseDType(std::string_view name) {
  for (const DTypeInfo &i : kInfos)
    if (name == i.name)
      return i.dtype;
  return std::nullopt;
}

uint64_t dtypeSize(DType dtype) { return info(dtype).size; }

} // namespace checkpoint
} // namespace csa

//===- SafetensorsFuzz.cpp - libFuzzer target: safetensors files ----------===//
//
// The input is a whole safetensors file image (8-byte header length, JSON
// header, data); it must validate or be refused, and every view of a valid
// one must lie inside the image.
//
//===----------------------------------------------------------------------===//
#include "runtime/checkpoint/Safetensors.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto file = csa::checkpoint::SafetensorsFile::parse(data, size, "fuzz.safetensors");
  if (!file.ok())
    return 0;
  for (const csa::checkpoint::TensorView &view : (*file)->tensors())
    if (view.data < data || view.data + view.bytes > data + size)
      __builtin_trap();
  return 0;
}

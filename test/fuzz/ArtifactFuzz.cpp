//===- ArtifactFuzz.cpp - libFuzzer target: an artifact's JSON files ------===//
//
// The input is read as manifest.json, plan.json and weights.json in turn:
// each must parse and check, or be refused with an error.
//
//===----------------------------------------------------------------------===//
#include "runtime/artifact/Manifest.h"
#include "runtime/artifact/Plan.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  (void)csa::artifact::parseManifestText(text);
  (void)csa::artifact::parsePlanText(text);
  (void)csa::artifact::parseWeightsText(text);
  return 0;
}

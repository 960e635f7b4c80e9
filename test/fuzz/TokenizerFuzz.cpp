//===- TokenizerFuzz.cpp - libFuzzer target: tokenizer files and text -----===//
//
// The input is read two ways: as a tokenizer.json (when it loads: encode and
// decode a fixed text, and build the Engram map of a small one), and as
// text for the fixture tokenizer (test/fixtures/tokenizer), repaired UTF-8
// first, whose decode must give the repaired text back; and as an Engram
// token map file.
//
//===----------------------------------------------------------------------===//
#include "runtime/tokenizer/EngramTokenMap.h"
#include "runtime/tokenizer/Tokenizer.h"
#include "runtime/tokenizer/Unicode.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace {
const csa::tokenizer::Tokenizer &fixture() {
  static const csa::tokenizer::Tokenizer *tokenizer = [] {
    auto t = csa::tokenizer::Tokenizer::fromFile(CSA_TOKENIZER_FIXTURE);
    if (!t.ok())
      __builtin_trap();
    return new csa::tokenizer::Tokenizer(std::move(*t));
  }();
  return *tokenizer;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string bytes(reinterpret_cast<const char *>(data), size);
  if (auto t = csa::tokenizer::Tokenizer::fromJson(bytes, "fuzz.json"); t.ok()) {
    auto ids = t->encode("Hello world, 中文 café 12345 <｜User｜>  \n", true);
    if (ids.ok())
      (void)t->decode(*ids);
    if (t->size() <= 4096)
      (void)csa::tokenizer::compressTokens(*t);
  }
  const std::string text = csa::tokenizer::repairUtf8(bytes);
  auto ids = fixture().encode(text, false);
  if (!ids.ok() || fixture().decode(*ids) != text)
    __builtin_trap(); // byte-level BPE encodes every text and decodes it back
  (void)csa::tokenizer::engramNormalize(text);
  (void)csa::tokenizer::engramMapFromText(bytes, "fuzz-map.json", {4, 3, 2});
  return 0;
}

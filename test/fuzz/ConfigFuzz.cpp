//===- ConfigFuzz.cpp - libFuzzer target: configs and schedules -----------===//
//
// The input is a config.json (flat or Hugging Face layout); when it parses,
// its schedule is derived and, if the input holds a line "#schedule S", S is
// parsed against it too. Any crash, leak or undefined behaviour is a bug: a
// bad config must be an error.
//
//===----------------------------------------------------------------------===//
#include "models/config/ModelConfig.h"
#include "models/schedule/Schedule.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  auto config = csa::parseModelConfig(text, "fuzz.json");
  if (!config.ok())
    return 0;
  auto schedule = csa::scheduleFromConfig(*config);
  const size_t at = text.find("\n#schedule ");
  if (at != std::string::npos) {
    std::string letters = text.substr(at + 11);
    letters = letters.substr(0, letters.find('\n'));
    auto parsed = csa::scheduleFromString(*config, letters);
    (void)parsed;
  }
  (void)schedule;
  return 0;
}

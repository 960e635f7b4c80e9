//===- ScheduleJsonFuzz.cpp - libFuzzer target: schedule overrides --------===//
//
// The input is a --schedule-json file applied to the tiny and released
// variants' configs and schedules.
//
//===----------------------------------------------------------------------===//
#include "models/schedule/Schedule.h"
#include "models/variants/Variants.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  for (const char *name : {"tiny", "released"}) {
    auto variant = csa::loadVariant(name);
    if (!variant.ok())
      __builtin_trap(); // the named variants always load
    auto status = csa::applyScheduleOverrides(variant->config, variant->schedule, text,
                                              "fuzz.json");
    (void)status;
  }
  return 0;
}

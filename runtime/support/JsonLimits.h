//===- JsonLimits.h - Limits on untrusted JSON --------------------*- C++ -*-===//
//
// Every JSON file csa reads (configs, schedules, safetensors headers and
// indexes, the artifact's manifest and plan) comes from outside. nlohmann's
// parser does not recurse, but dump() and the code that walks a value do, so
// a document nested 10^5 deep would overflow the stack: readers reject any
// deeper than kMaxJsonDepth right after parsing (docs/semantics.md, "Input
// limits").
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_SUPPORT_JSONLIMITS_H
#define CSA_RUNTIME_SUPPORT_JSONLIMITS_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <utility>
#include <vector>

namespace csa::support {

/// The deepest nesting csa's files have is 4 (a plan step's argument); 64
/// leaves room and bounds every recursive walk.
inline constexpr int64_t kMaxJsonDepth = 64;

/// The nesting depth of `value` (0: a scalar, 1: a flat array or object),
/// counted with an explicit stack.
inline int64_t jsonDepth(const nlohmann::json &value) {
  int64_t deepest = 0;
  std::vector<std::pair<const nlohmann::json *, int64_t>> pending{{&value, 0}};
  while (!pending.empty()) {
    auto [node, depth] = pending.back();
    pending.pop_back();
    if (!node->is_array() && !node->is_object())
      continue;
    deepest = std::max(deepest, depth + 1);
    if (deepest > kMaxJsonDepth)
      return deepest; // deep enough to refuse; no need to see the rest
    for (const nlohmann::json &child : *node)
      pending.push_back({&child, depth + 1});
  }
  return deepest;
}

} // namespace csa::support

#endif // CSA_RUNTIME_SUPPORT_JSONLIMITS_H

//===- ModelsTestSupport.h - Helpers of the csa_models tests -----*- C++ -*-===//
//
// Loading the embedded configs, editing them as JSON, and checking that a
// status is an error whose message contains given pieces.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TEST_UNIT_MODELS_MODELSTESTSUPPORT_H
#define CSA_TEST_UNIT_MODELS_MODELSTESTSUPPORT_H

#include "models/config/ModelConfig.h"
#include "models/schedule/Schedule.h"
#include "models/variants/Variants.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <initializer_list>
#include <string>

namespace csa::test {

using nlohmann::json;

/// The text of an embedded config; fails the test if it is missing.
inline std::string configText(const std::string &name) {
  auto text = embeddedConfig(name);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string("{}");
}

inline json configJson(const std::string &name) {
  return json::parse(configText(name));
}

/// The embedded config `name`, parsed; fails the test on error.
inline ModelConfig parsedConfig(const std::string &name) {
  auto config = parseModelConfig(configText(name), name);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : ModelConfig{};
}

inline ModelConfig releasedConfig() {
  return parsedConfig("deepseek-v4.1-flash");
}
inline ModelConfig tinyConfig() { return parsedConfig("tiny"); }

/// The schedule of a config; fails the test on error.
inline Schedule scheduleOf(const ModelConfig &config) {
  auto schedule = scheduleFromConfig(config);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *schedule : Schedule{};
}

/// Parses the embedded config `name` after `edit` changed its JSON.
inline absl::StatusOr<ModelConfig>
parseEdited(const std::string &name, const std::function<void(json &)> &edit,
            const std::string &source = "bad.json") {
  json root = configJson(name);
  edit(root);
  return parseModelConfig(root.dump(), source);
}

inline absl::StatusOr<ModelConfig>
parseEditedFlat(const std::function<void(json &)> &edit) {
  return parseEdited("deepseek-v4.1-flash", edit);
}
inline absl::StatusOr<ModelConfig>
parseEditedHf(const std::function<void(json &)> &edit) {
  return parseEdited("deepseek-v4.1-flash-hf", edit);
}

/// Success if `status` is an InvalidArgument (or `code`) error whose message
/// contains every piece.
inline ::testing::AssertionResult
failsWith(const absl::Status &status, std::initializer_list<std::string> pieces,
          absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  if (status.ok())
    return ::testing::AssertionFailure() << "status is OK";
  if (status.code() != code)
    return ::testing::AssertionFailure()
           << "code " << absl::StatusCodeToString(status.code())
           << ", expected " << absl::StatusCodeToString(code) << ": "
           << status.message();
  const std::string message(status.message());
  for (const std::string &piece : pieces)
    if (message.find(piece) == std::string::npos)
      return ::testing::AssertionFailure()
             << "message lacks \"" << piece << "\": " << message;
  return ::testing::AssertionSuccess();
}

template <typename T>
::testing::AssertionResult failsWith(const absl::StatusOr<T> &result,
                                     std::initializer_list<std::string> pieces,
                                     absl::StatusCode code =
                                         absl::StatusCode::kInvalidArgument) {
  return failsWith(result.status(), pieces, code);
}

/// Success if the message of `status` starts with `prefix`.
inline ::testing::AssertionResult messageStartsWith(const absl::Status &status,
                                                    const std::string &prefix) {
  const std::string message(status.message());
  if (message.rfind(prefix, 0) == 0)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "message does not start with \"" << prefix << "\": " << message;
}

/// Success if two roles agree in every field.
inline ::testing::AssertionResult sameRole(const LayerRole &a,
                                           const LayerRole &b) {
  if (a.layer == b.layer && a.mode == b.mode && a.ratio == b.ratio &&
      a.kvSource == b.kvSource && a.indexSource == b.indexSource &&
      a.candidateSource == b.candidateSource &&
      a.candidatePool == b.candidatePool)
    return ::testing::AssertionSuccess();
  auto show = [](const LayerRole &r) {
    return describeLayer(r) + " ratio " + std::to_string(r.ratio) + " kv " +
           std::to_string(r.kvSource) + " index " +
           std::to_string(r.indexSource) + " candidates " +
           std::to_string(r.candidateSource) + " pool " +
           (r.candidatePool ? "yes" : "no");
  };
  return ::testing::AssertionFailure() << show(a) << " vs " << show(b);
}

/// Success if two schedules agree layer by layer in every field.
inline ::testing::AssertionResult sameSchedule(const Schedule &a,
                                               const Schedule &b) {
  if (a.layers.size() != b.layers.size())
    return ::testing::AssertionFailure()
           << a.layers.size() << " vs " << b.layers.size() << " layers";
  for (size_t i = 0; i < a.layers.size(); ++i)
    if (auto same = sameRole(a.layers[i], b.layers[i]); !same)
      return same;
  return ::testing::AssertionSuccess();
}

} // namespace csa::test

#endif // CSA_TEST_UNIT_MODELS_MODELSTESTSUPPORT_H

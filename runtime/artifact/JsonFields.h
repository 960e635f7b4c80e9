//===- JsonFields.h - Field-path errors for the artifact's JSON -*- C++ -*-===//
//
// Internal to csa_artifact: typed access to the members of a JSON object
// where every error names the file and the field path ("plan.json:
// entry_points.decode[2].args[0].cache: ..."), and unknown members are
// rejected (a misspelt field is an error, not a silently ignored one).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_ARTIFACT_JSONFIELDS_H
#define CSA_RUNTIME_ARTIFACT_JSONFIELDS_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include <nlohmann/json.hpp>
#include "runtime/support/JsonLimits.h"

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>

namespace csa {
namespace artifact {
namespace detail {

/// "a.b" / "a[3]" / "b" when `base` is empty.
inline std::string joinPath(const std::string &base, const std::string &key) {
  return base.empty() ? key : base + "." + key;
}
inline std::string indexPath(const std::string &base, size_t i) {
  return absl::StrCat(base, "[", i, "]");
}

/// Parses `text`; the error carries nlohmann's position message.
inline absl::StatusOr<nlohmann::json> parseJsonText(const std::string &text,
                                                    const std::string &source) {
  try {
    nlohmann::json value = nlohmann::json::parse(text);
    if (support::jsonDepth(value) > support::kMaxJsonDepth)
      return absl::DataLossError(absl::StrCat(source, ": JSON nested deeper than ",
                                              support::kMaxJsonDepth, " levels"));
    return value;
  } catch (const nlohmann::json::exception &e) {
    return absl::DataLossError(
        absl::StrCat(source, ": not valid JSON: ", e.what()));
  }
}

/// One JSON object being read at `path` of `source`.
class Fields {
public:
  Fields(const nlohmann::json &object, std::string source, std::string path)
      : object_(object), source_(std::move(source)), path_(std::move(path)) {}

  const std::string &path() const { return path_; }
  std::string pathOf(const std::string &key) const {
    return joinPath(path_, key);
  }

  /// InvalidArgument "SOURCE: PATH: what" (PATH is `at`, or the object's own
  /// path when `at` is empty).
  absl::Status errorAt(const std::string &at, const std::string &what) const {
    const std::string &where = at.empty() ? path_ : at;
    return absl::InvalidArgumentError(absl::StrCat(
        source_, ": ", where.empty() ? std::string("(top level)") : where, ": ",
        what));
  }
  absl::Status error(const std::string &key, const std::string &what) const {
    return errorAt(pathOf(key), what);
  }

  bool has(const char *key) const { return object_.contains(key); }
  const nlohmann::json *find(const char *key) const {
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }

  absl::StatusOr<const nlohmann::json *> require(const char *key) const {
    const nlohmann::json *value = find(key);
    if (!value)
      return error(key, "missing (required)");
    return value;
  }

  absl::StatusOr<std::string> string(const char *key,
                                     bool allowEmpty = false) const {
    auto value = require(key);
    if (!value.ok())
      return value.status();
    if (!(*value)->is_string())
      return error(
          key, absl::StrCat("must be a string, got ", (*value)->type_name()));
    std::string s = (*value)->get<std::string>();
    if (s.empty() && !allowEmpty)
      return error(key, "must not be empty");
    return s;
  }

  /// A JSON integer in [min, max] (a float such as 4.0 is not an integer).
  static absl::StatusOr<int64_t>
  integerValue(const nlohmann::json &value, int64_t min, int64_t max,
               const std::function<absl::Status(const std::string &)> &fail) {
    if (value.is_number_unsigned()) {
      uint64_t u = value.get<uint64_t>();
      if (u > uint64_t(std::numeric_limits<int64_t>::max()) || int64_t(u) > max)
        return fail(absl::StrCat("must be at most ", max, ", got ", u));
      if (int64_t(u) < min)
        return fail(absl::StrCat("must be at least ", min, ", got ", u));
      return int64_t(u);
    }
    if (!value.is_number_integer())
      return fail(
          absl::StrCat("must be an integer, got ",
                       value.is_number() ? value.dump() : value.type_name()));
    int64_t v = value.get<int64_t>();
    if (v < min)
      return fail(absl::StrCat("must be at least ", min, ", got ", v));
    if (v > max)
      return fail(absl::StrCat("must be at most ", max, ", got ", v));
    return v;
  }

  absl::StatusOr<int64_t>
  integer(const char *key, int64_t min,
          int64_t max = std::numeric_limits<int64_t>::max()) const {
    auto value = require(key);
    if (!value.ok())
      return value.status();
    return integerValue(**value, min, max, [&](const std::string &what) {
      return error(key, what);
    });
  }

  /// The member if present (0 otherwise): for optional integers.
  absl::StatusOr<int64_t>
  optionalInteger(const char *key, int64_t min, int64_t fallback,
                  int64_t max = std::numeric_limits<int64_t>::max()) const {
    if (!has(key))
      return fallback;
    return integer(key, min, max);
  }

  absl::StatusOr<const nlohmann::json *> array(const char *key) const {
    auto value = require(key);
    if (!value.ok())
      return value.status();
    if (!(*value)->is_array())
      return error(
          key, absl::StrCat("must be an array, got ", (*value)->type_name()));
    return value;
  }

  absl::StatusOr<const nlohmann::json *> object(const char *key) const {
    auto value = require(key);
    if (!value.ok())
      return value.status();
    if (!(*value)->is_object())
      return error(
          key, absl::StrCat("must be an object, got ", (*value)->type_name()));
    return value;
  }

  /// Rejects members not in `allowed`.
  absl::Status onlyKnown(std::initializer_list<const char *> allowed) const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      bool known = false;
      for (const char *name : allowed)
        known |= it.key() == name;
      if (!known) {
        std::string list;
        for (const char *name : allowed)
          absl::StrAppend(&list, list.empty() ? "" : ", ", name);
        return error(it.key(), absl::StrCat("unknown field (expected one of: ",
                                            list, ")"));
      }
    }
    return absl::OkStatus();
  }

private:
  const nlohmann::json &object_;
  std::string source_;
  std::string path_;
};

/// A JSON object at `path`, or an error naming it.
inline absl::Status expectObject(const nlohmann::json &value,
                                 const std::string &source,
                                 const std::string &path) {
  if (value.is_object())
    return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": ", path.empty() ? "(top level)" : path,
                   ": must be an object, got ", value.type_name()));
}

} // namespace detail
} // namespace artifact
} // namespace csa

#define CSA_ARTIFACT_ASSIGN_IMPL(var, tmp, expr)                               \
  auto tmp = (expr);                                                           \
  if (!tmp.ok())                                                               \
    return tmp.status();                                                       \
  var = std::move(*tmp)
#define CSA_ARTIFACT_CONCAT2(a, b) a##b
#define CSA_ARTIFACT_CONCAT(a, b) CSA_ARTIFACT_CONCAT2(a, b)
/// `CSA_ARTIFACT_TRY(auto x, expr);` for StatusOr;
/// `CSA_ARTIFACT_TRY_STATUS(expr);` for Status.
#define CSA_ARTIFACT_TRY(var, expr)                                            \
  CSA_ARTIFACT_ASSIGN_IMPL(var, CSA_ARTIFACT_CONCAT(csa_try_, __LINE__), expr)
#define CSA_ARTIFACT_TRY_STATUS(expr)                                          \
  do {                                                                         \
    absl::Status csa_try_status = (expr);                                      \
    if (!csa_try_status.ok())                                                  \
      return csa_try_status;                                                   \
  } while (false)

#endif // CSA_RUNTIME_ARTIFACT_JSONFIELDS_H

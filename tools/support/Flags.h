//===- Flags.h - Every runtime tool's command line --------------*- C++ -*-===//
//
// The runtime tools (no LLVM) define their flags with ABSL_FLAG and read the
// command line through CommandLine, so that every tool follows one set of
// conventions (issue 22):
//
//   --flag=value and --flag value (a bool flag: --flag, or --flag=false);
//   the flag names use dashes (ABSL_FLAG(int64_t, max_new_tokens, ...) is
//   --max-new-tokens); arguments that do not start with '-' are positional,
//   and everything after "--" is ("-" alone too);
//   --help (or -h): the tool's usage text and its flags on stdout, status 0;
//   --version: csa's version and commit on stdout, status 0;
//   an unknown flag, a missing or unparsable value, or a value out of its
//   range: "TOOL: error: --flag needs WHAT, got 'VALUE'", status 2 (and a
//   tool's own checks of a value say the same through error()).
//
// Abseil parses and holds the values (no exceptions; integers out of their
// type's range are refused); CommandLine only walks argv, which Abseil's own
// ParseCommandLine cannot do the tools' way (it wants underscores, exits 1
// after --help and prints its errors as "ERROR: ...").
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_SUPPORT_FLAGS_H
#define CSA_TOOLS_SUPPORT_FLAGS_H

#include "absl/flags/flag.h"
#include "absl/strings/string_view.h"

#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

namespace csa::tools {

class CommandLine {
public:
  /// `usage` is the tool's text for --help, before the list of its flags.
  CommandLine(const char *tool, std::string usage);

  /// A bare `--flag` means `--flag=value` (for a flag such as
  /// --random-weights[=SEED]: its value can then only follow a '=').
  template <typename T>
  CommandLine &implicitValue(const absl::Flag<T> &flag, std::string value) {
    implicit_[nameOf(flag)] = std::move(value);
    return *this;
  }

  /// The good values of a numeric flag: from `lo` to `hi`, which errors
  /// describe by `rule` ("--batch " + rule + ", got '0'", e.g. "needs a
  /// count from 1 to 4096"; for a value that does not parse too).
  template <typename T>
  CommandLine &range(const absl::Flag<T> &flag, T lo, T hi, std::string rule) {
    addRule(nameOf(flag), std::move(rule), [&flag, lo, hi] {
      const T v = absl::GetFlag(flag);
      return lo <= v && v <= hi;
    });
    return *this;
  }
  template <typename T>
  CommandLine &range(const absl::Flag<std::optional<T>> &flag, T lo, T hi,
                     std::string rule) {
    addRule(nameOf(flag), std::move(rule), [&flag, lo, hi] {
      const std::optional<T> v = absl::GetFlag(flag);
      return !v || (lo <= *v && *v <= hi);
    });
    return *this;
  }
  /// How errors describe a good value of `flag` ("needs an integer seed"),
  /// without a range check.
  template <typename T>
  CommandLine &describe(const absl::Flag<T> &flag, std::string rule) {
    addRule(nameOf(flag), std::move(rule), nullptr);
    return *this;
  }

  /// Only these flags are accepted (a command's own, as csa-checkpoint's);
  /// the others are "unknown option '--x' for 'COMMAND'".
  CommandLine &only(std::string command, std::vector<std::string> dashedNames);

  /// Also called with each error's message (csa-diff --json prints it as
  /// JSON too).
  CommandLine &onError(std::function<void(const std::string &)> report) {
    onError_ = std::move(report);
    return *this;
  }

  /// Reads argv[first..argc). False when the tool is to exit at once with
  /// exitCode(): 0 after --help or --version, 2 after an error (printed).
  bool parse(int argc, char **argv, int first = 1);
  int exitCode() const { return exitCode_; }
  /// The arguments that are not flags, in order.
  const std::vector<std::string> &positional() const { return positional_; }
  /// The tool's one positional argument ("" when there is none); with more,
  /// prints "one WHAT, got 'A' and 'B'" and returns nothing (status 2).
  std::optional<std::string> singlePositional(const std::string &what) const;
  /// Whether `flag` was on the command line (even as --flag= with nothing).
  template <typename T> bool given(const absl::Flag<T> &flag) const {
    return given_.count(nameOf(flag)) != 0;
  }

  /// The usage text on stderr, status 2 (an incomplete command line).
  int usage() const;
  /// "TOOL: error: MESSAGE" on stderr, status 2: a command line the tool
  /// cannot run.
  int error(const std::string &message) const;
  /// The usage text and the tool's flags (name, help, default).
  void printHelp(std::ostream &os) const;

  /// "max_new_tokens" -> "--max-new-tokens".
  static std::string dashed(absl::string_view name);

private:
  template <typename T> static std::string nameOf(const absl::Flag<T> &flag) {
    return std::string(absl::GetFlagReflectionHandle(flag).Name());
  }
  void addRule(std::string name, std::string rule, std::function<bool()> inRange);
  bool fail(const std::string &message);

  struct Rule {
    std::string rule;
    std::function<bool()> inRange; ///< null: no range
  };
  const char *tool_;
  std::string usage_;
  std::map<std::string, std::string> implicit_;
  std::map<std::string, Rule> rules_;
  std::optional<std::string> command_;
  std::set<std::string> allowed_;
  std::vector<std::string> positional_;
  std::set<std::string> given_;
  std::map<std::string, std::string> text_; ///< each flag's value as given
  std::function<void(const std::string &)> onError_;
  int exitCode_ = 0;
};

} // namespace csa::tools

#endif // CSA_TOOLS_SUPPORT_FLAGS_H

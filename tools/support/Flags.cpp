//===- Flags.cpp - Every runtime tool's command line ----------------------===//
#include "tools/support/Flags.h"

#include "tools/support/Version.h"

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>

namespace csa::tools {

namespace {

/// The tool's flags, not those Abseil's own libraries may register.
bool isToolFlag(const absl::CommandLineFlag &flag) {
  return !flag.IsRetired() && !absl::StrContains(flag.Filename(), "absl/");
}

/// What a value of the flag's type is, for a flag without a rule.
std::string defaultRule(const absl::CommandLineFlag &flag) {
  if (flag.IsOfType<bool>())
    return "is true or false";
  if (flag.IsOfType<int32_t>() || flag.IsOfType<int64_t>() ||
      flag.IsOfType<std::optional<int64_t>>())
    return "needs an integer";
  if (flag.IsOfType<uint32_t>() || flag.IsOfType<uint64_t>() ||
      flag.IsOfType<std::optional<uint64_t>>())
    return "needs an integer >= 0";
  if (flag.IsOfType<float>() || flag.IsOfType<double>() ||
      flag.IsOfType<std::optional<double>>())
    return "needs a number";
  return "needs a valid value";
}

/// `text` wrapped at 78 columns, each line indented by `indent`.
std::string wrap(const std::string &text, size_t indent) {
  std::string out, line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > 78) {
      out += std::string(indent, ' ') + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + std::string(word);
  }
  if (!line.empty())
    out += std::string(indent, ' ') + line + "\n";
  return out;
}

} // namespace

CommandLine::CommandLine(const char *tool, std::string usage)
    : tool_(tool), usage_(std::move(usage)) {}

std::string CommandLine::dashed(absl::string_view name) {
  return "--" + absl::StrReplaceAll(name, {{"_", "-"}});
}

void CommandLine::addRule(std::string name, std::string rule,
                          std::function<bool()> inRange) {
  rules_[std::move(name)] = Rule{std::move(rule), std::move(inRange)};
}

CommandLine &CommandLine::only(std::string command, std::vector<std::string> dashedNames) {
  command_ = std::move(command);
  allowed_.clear();
  for (const std::string &name : dashedNames)
    allowed_.insert(absl::StrReplaceAll(name, {{"-", "_"}}));
  return *this;
}

int CommandLine::usage() const {
  std::cerr << usage_;
  return 2;
}

std::optional<std::string> CommandLine::singlePositional(const std::string &what) const {
  if (positional_.size() > 1) {
    error("one " + what + ", got '" + positional_[0] + "' and '" + positional_[1] + "'");
    return std::nullopt;
  }
  return positional_.empty() ? std::string() : positional_[0];
}

int CommandLine::error(const std::string &message) const {
  std::cerr << tool_ << ": error: " << message << "\n";
  if (onError_)
    onError_(message);
  return 2;
}

bool CommandLine::fail(const std::string &message) {
  exitCode_ = error(message);
  return false;
}

void CommandLine::printHelp(std::ostream &os) const {
  os << usage_;
  std::vector<const absl::CommandLineFlag *> flags;
  for (const auto &[name, flag] : absl::GetAllFlags())
    if (isToolFlag(*flag))
      flags.push_back(flag);
  if (flags.empty())
    return;
  std::sort(flags.begin(), flags.end(),
            [](const auto *a, const auto *b) { return a->Name() < b->Name(); });
  os << "\nFlags (--flag=value or --flag value; a switch: --flag or --flag=false):\n";
  for (const absl::CommandLineFlag *flag : flags) {
    std::string name = dashed(flag->Name());
    const std::string value = flag->DefaultValue();
    if (!value.empty() && value != "false")
      name += " (default " + value + ")";
    if (auto it = implicit_.find(std::string(flag->Name())); it != implicit_.end())
      name += it->second.empty() ? " (or alone)" : " (alone: " + it->second + ")";
    os << "  " << name << "\n" << wrap(flag->Help(), 6);
  }
}

bool CommandLine::parse(int argc, char **argv, int first) {
  // --version and --help win wherever they are.
  if (answerVersion(argc, argv, tool_)) {
    exitCode_ = 0;
    return false;
  }
  for (int i = first; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      printHelp(std::cout);
      exitCode_ = 0;
      return false;
    }
  bool flagsEnd = false;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!flagsEnd && arg == "--") {
      flagsEnd = true;
      continue;
    }
    if (flagsEnd || arg.size() < 2 || arg[0] != '-') {
      positional_.push_back(arg);
      continue;
    }
    if (arg.size() < 3 || arg[1] != '-') // "-x": no short flags
      return fail("unknown flag '" + arg + "' (see --help)");
    std::string name = arg.substr(2), value;
    bool hasValue = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      hasValue = true;
    }
    name = absl::StrReplaceAll(name, {{"-", "_"}});
    absl::CommandLineFlag *flag = absl::FindCommandLineFlag(name);
    const std::string shown = dashed(name);
    if (command_ && (!flag || !allowed_.count(name)))
      return fail("unknown option '" + shown + "' for '" + *command_ + "' (see " +
                  tool_ + " --help)");
    if (!flag || !isToolFlag(*flag))
      return fail("unknown flag '" + arg + "' (see --help)");
    if (!hasValue) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (auto it = implicit_.find(name); it != implicit_.end()) {
        value = it->second;
      } else if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) {
        value = argv[++i];
      } else {
        return fail(shown + " needs a value (" + shown +
                    "=VALUE for one that starts with --)");
      }
    }
    given_.insert(name);
    text_[name] = value;
    // An optional number given as nothing (--max-abs=) is an error, not
    // Abseil's "unset".
    const bool optionalNumber = flag->IsOfType<std::optional<int64_t>>() ||
                                flag->IsOfType<std::optional<uint64_t>>() ||
                                flag->IsOfType<std::optional<double>>();
    std::string abseilError;
    if ((optionalNumber && value.empty()) || !flag->ParseFrom(value, &abseilError)) {
      auto rule = rules_.find(name);
      return fail(shown + " " + (rule != rules_.end() ? rule->second.rule : defaultRule(*flag)) +
                  ", got '" + value + "'");
    }
  }
  for (const auto &[name, rule] : rules_)
    if (given_.count(name) && rule.inRange && !rule.inRange())
      return fail(dashed(name) + " " + rule.rule + ", got '" + text_[name] + "'");
  return true;
}

} // namespace csa::tools

//===- TokenIds.h - Token id lists as users type them ------------*- C++ -*-===//
//
// "1,2,3", "1 2 3" or one id per line: the prompts of csa-run and
// csa-reference. Header-only, plain C++17 with Abseil.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_SAMPLING_TOKENIDS_H
#define CSA_RUNTIME_SAMPLING_TOKENIDS_H

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace csa::sampling {

/// Appends the ids of `text` (separated by commas, spaces, tabs or newlines)
/// to `ids`. False, with `error` set, on a word that is not an int32 or on an
/// empty list.
inline bool parseTokenIds(const std::string &text, std::vector<int32_t> &ids,
                          std::string &error) {
  for (absl::string_view part :
       absl::StrSplit(text, absl::ByAnyChar(", \n\t"), absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      error = "'" + std::string(part) + "' is not a token id";
      return false;
    }
    ids.push_back(id);
  }
  if (ids.empty()) {
    error = "the prompt is empty";
    return false;
  }
  return true;
}

/// The largest prompt file read: 64 MiB (about 9 M ids of up to 6 digits,
/// far past any context the model has).
inline constexpr size_t kMaxPromptFileBytes = size_t(64) << 20;

/// The prompt text of a tool that takes exactly one of --prompt=TEXT and
/// --prompt-file=FILE (the file read whole). False, with `error` set, when
/// both or neither are given, the file cannot be read or it is larger than
/// kMaxPromptFileBytes (/dev/zero included: read in chunks, never whole).
inline bool promptText(const std::string &text, const std::string &file,
                       std::string &out, std::string &error) {
  if (text.empty() == file.empty()) {
    error = "give exactly one of --prompt and --prompt-file";
    return false;
  }
  if (file.empty()) {
    out = text;
    return true;
  }
  std::ifstream in(file);
  if (!in) {
    error = file + ": cannot open prompt file";
    return false;
  }
  out.clear();
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    out.append(chunk, size_t(in.gcount()));
    if (out.size() > kMaxPromptFileBytes) {
      error = file + ": the prompt file is larger than " +
              std::to_string(kMaxPromptFileBytes >> 20) + " MiB";
      out.clear();
      return false;
    }
  }
  if (in.bad()) {
    error = file + ": cannot read the prompt file";
    return false;
  }
  return true;
}

} // namespace csa::sampling

#endif // CSA_RUNTIME_SAMPLING_TOKENIDS_H

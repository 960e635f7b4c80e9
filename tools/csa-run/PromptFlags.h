//===- PromptFlags.h - csa-run's prompt and teacher-forcing flags -*- C++ -*-===//
//
// The flags that say what the sequences read: token ids (--prompt,
// --prompt-file), text through the tokenizer (--prompt-text,
// --prompt-text-file), a prompt a sequence (--prompts-file), and the ids
// teacher forcing feeds the decode steps (--forced-tokens,
// --forced-tokens-file); and the prefix cache's sizing flags. Errors name the
// flag, the file and the line. Plain C++ (no LLVM).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_CSA_RUN_PROMPTFLAGS_H
#define CSA_TOOLS_CSA_RUN_PROMPTFLAGS_H

#include "runtime/prefix/PrefixCache.h"
#include "runtime/tokenizer/ModelTokenizer.h"
#include "tools/support/Flags.h"

#include "absl/flags/declare.h"

#include <cstdint>
#include <string>
#include <vector>

ABSL_DECLARE_FLAG(std::string, prompt);
ABSL_DECLARE_FLAG(std::string, prompt_file);
ABSL_DECLARE_FLAG(std::string, prompts_file);
ABSL_DECLARE_FLAG(std::string, prompt_text);
ABSL_DECLARE_FLAG(std::string, prompt_text_file);
ABSL_DECLARE_FLAG(std::string, forced_tokens);
ABSL_DECLARE_FLAG(std::string, forced_tokens_file);
ABSL_DECLARE_FLAG(std::string, prefix_cache_size);
ABSL_DECLARE_FLAG(std::string, local_state_ttl);
ABSL_DECLARE_FLAG(std::string, prefix_cache_policy);

namespace csa::tools {

/// What the run's sequences read.
struct RunPrompts {
  /// Every sequence's prompt, or (--prompts-file) the first sequence's.
  std::vector<int32_t> prompt;
  /// --prompts-file: sequence b's prompt (empty: each runs `prompt`).
  std::vector<std::vector<int32_t>> each;
  /// Teacher forcing: decode step i is fed forced[i] (forcedGiven: a flag
  /// gave them, perhaps none).
  std::vector<int32_t> forced;
  bool forcedGiven = false;

  const std::vector<int32_t> &of(int64_t b) const {
    return each.empty() ? prompt : each[size_t(b)];
  }
  /// The most tokens of any sequence's prompt.
  size_t longest() const;
};

/// How many of --prompt, --prompt-file, --prompts-file, --prompt-text and
/// --prompt-text-file were given.
int promptSourcesGiven(const CommandLine &flags);

/// --forced-tokens=ID,... or --forced-tokens-file into prompts.forced (an
/// empty --forced-tokens= gives no ids, for --max-new-tokens of 0 or 1).
/// Returns 0, or the exit status after printing what is wrong.
int forcedTokensFromFlags(const CommandLine &flags, RunPrompts &prompts);

/// The prompt flags (exactly one given) into `prompts`: ids as they are,
/// text encoded by `text` (ill-formed UTF-8 replaced by U+FFFD with a
/// warning; no tokenizer is an error naming where one was looked for:
/// `weightsDir`), or --prompts-file's lines, a sequence each (then `batch`
/// becomes their count; a different --batch given, `batchGiven`, is an
/// error). Returns 0, or the exit status after printing what is wrong.
int promptsFromFlags(const CommandLine &flags, const tokenizer::ModelTokenizer *text,
                     const std::string &weightsDir, bool batchGiven, int64_t &batch,
                     RunPrompts &prompts);

/// --prefix-cache-size (a byte count: 500M, 16G), --local-state-ttl (30s,
/// 10m, 1h or minutes) and --prefix-cache-policy (global, global+local) into
/// `options`. Returns 0, or the exit status after printing what is wrong.
int prefixCacheOptionsFromFlags(const CommandLine &flags,
                                runtime::prefix::PrefixCacheOptions &options);

} // namespace csa::tools

#endif // CSA_TOOLS_CSA_RUN_PROMPTFLAGS_H

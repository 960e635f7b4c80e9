//===- PromptFlags.cpp - csa-run's prompt and teacher-forcing flags -------===//
//
// See PromptFlags.h.
//
//===----------------------------------------------------------------------===//
#include "tools/csa-run/PromptFlags.h"

#include "runtime/sampling/TokenIds.h"
#include "runtime/tokenizer/Unicode.h"

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <iostream>

ABSL_FLAG(std::string, prompt, "", "the prompt's token ids, comma-separated");
ABSL_FLAG(std::string, prompt_file, "", "a file of the prompt's token ids");
ABSL_FLAG(std::string, prompts_file, "",
          "a file of prompts' token ids, one a line: a sequence each, decoded together");
ABSL_FLAG(std::string, prompt_text, "", "the prompt as text (needs a tokenizer)");
ABSL_FLAG(std::string, prompt_text_file, "", "a file of the prompt's text");
ABSL_FLAG(std::string, forced_tokens, "",
          "teacher forcing: the ids decode steps are fed, comma-separated");
ABSL_FLAG(std::string, forced_tokens_file, "", "a file of the forced ids");
ABSL_FLAG(std::string, prefix_cache_size, "16G",
          "the prefix cache's disk budget in bytes (K, M, G, T suffixes)");
ABSL_FLAG(std::string, local_state_ttl, "10m",
          "how long a turn's local state stays in memory (30s, 10m, 1h; a bare number: minutes)");
ABSL_FLAG(std::string, prefix_cache_policy, "global",
          "what goes to disk: global (the released design) or global+local (SWA state too)");

namespace csa::tools {

namespace {
int fail(const std::string &message) {
  std::cerr << "csa-run: error: " << message << "\n";
  return 1;
}
} // namespace

size_t RunPrompts::longest() const {
  size_t most = prompt.size();
  for (const std::vector<int32_t> &p : each)
    most = std::max(most, p.size());
  return most;
}

int promptSourcesGiven(const CommandLine &flags) {
  return !absl::GetFlag(FLAGS_prompt).empty() + !absl::GetFlag(FLAGS_prompt_file).empty() +
         flags.given(FLAGS_prompt_text) + !absl::GetFlag(FLAGS_prompt_text_file).empty() +
         !absl::GetFlag(FLAGS_prompts_file).empty();
}

int forcedTokensFromFlags(const CommandLine &flags, RunPrompts &prompts) {
  prompts.forcedGiven = flags.given(FLAGS_forced_tokens) || flags.given(FLAGS_forced_tokens_file);
  if (flags.given(FLAGS_forced_tokens) && flags.given(FLAGS_forced_tokens_file))
    return fail("give one of --forced-tokens and --forced-tokens-file");
  if (flags.given(FLAGS_forced_tokens_file)) {
    const std::string file = absl::GetFlag(FLAGS_forced_tokens_file);
    std::string ids, error;
    if (!sampling::promptText("", file, ids, error))
      return fail("--forced-tokens-file: " + error);
    if (!sampling::parseTokenIds(ids, prompts.forced, error))
      return fail("--forced-tokens-file: " + file + ": " + error);
  } else if (const std::string ids = absl::GetFlag(FLAGS_forced_tokens); !ids.empty()) {
    std::string error;
    if (!sampling::parseTokenIds(ids, prompts.forced, error))
      return fail("--forced-tokens: " + error);
  }
  return 0;
}

int promptsFromFlags(const CommandLine &flags, const tokenizer::ModelTokenizer *text,
                     const std::string &weightsDir, bool batchGiven, int64_t &batch,
                     RunPrompts &prompts) {
  std::string promptText = absl::GetFlag(FLAGS_prompt);
  const std::string promptFile = absl::GetFlag(FLAGS_prompt_file);
  const std::string promptsFile = absl::GetFlag(FLAGS_prompts_file);
  const bool textPromptGiven = flags.given(FLAGS_prompt_text);
  const std::string textPromptFile = absl::GetFlag(FLAGS_prompt_text_file);
  std::string error;
  if (textPromptGiven || !textPromptFile.empty()) {
    if (!text)
      return fail(absl::StrCat(
          textPromptGiven ? "--prompt-text" : "--prompt-text-file",
          " needs a tokenizer: ",
          weightsDir.empty() ? std::string("--random-weights has none")
                             : weightsDir + " has no tokenizer.json",
          "; give --tokenizer=DIR|tokenizer.json"));
    std::string raw = absl::GetFlag(FLAGS_prompt_text);
    if (!textPromptFile.empty() && !sampling::promptText("", textPromptFile, raw, error))
      return fail(error);
    if (auto bad = tokenizer::firstInvalidUtf8(raw)) {
      std::cerr << "csa-run: warning: the prompt text is not valid UTF-8 at byte " << *bad
                << "; ill-formed bytes are read as U+FFFD\n";
      raw = tokenizer::repairUtf8(raw);
    }
    auto ids = text->encodePrompt(raw);
    if (!ids.ok())
      return fail(std::string(ids.status().message()));
    if (ids->empty())
      return fail("the prompt text encodes to no tokens");
    for (int64_t id : *ids)
      prompts.prompt.push_back(int32_t(id));
  } else if (!promptsFile.empty()) {
    std::string all;
    if (!sampling::promptText("", promptsFile, all, error))
      return fail(error);
    int64_t line = 0;
    for (absl::string_view ids : absl::StrSplit(all, '\n')) {
      ++line;
      if (absl::StripAsciiWhitespace(ids).empty())
        continue; // blank lines separate nothing
      prompts.each.emplace_back();
      if (!sampling::parseTokenIds(std::string(ids), prompts.each.back(), error))
        return fail(absl::StrCat(promptsFile, ":", line, ": ", error));
    }
    if (prompts.each.empty())
      return fail(promptsFile + ": no prompt (one prompt of ids a line)");
    if (batchGiven && batch != int64_t(prompts.each.size()))
      return fail(absl::StrCat("--batch=", batch, " but ", promptsFile, " holds ",
                               prompts.each.size(),
                               " prompts (a sequence each; leave --batch out)"));
    if (prompts.each.size() > 4096)
      return fail(absl::StrCat(promptsFile, ": ", prompts.each.size(),
                               " prompts; at most 4096 sequences run together"));
    batch = int64_t(prompts.each.size());
    prompts.prompt = prompts.each.front();
  } else if (promptSourcesGiven(flags) == 1) {
    if (!sampling::promptText(promptText, promptFile, promptText, error))
      return fail(error);
    if (!sampling::parseTokenIds(promptText, prompts.prompt, error))
      return fail((promptFile.empty() ? "--prompt: " : promptFile + ": ") + error);
  }
  return 0;
}

int prefixCacheOptionsFromFlags(const CommandLine &flags,
                                runtime::prefix::PrefixCacheOptions &options) {
  {
    const std::string v = absl::GetFlag(FLAGS_prefix_cache_size);
    uint64_t scale = 1, size = 0;
    std::string digits = v;
    if (!digits.empty() && std::string("KMGTkmgt").find(digits.back()) != std::string::npos) {
      scale = uint64_t(1) << (10 * (1 + std::string("KMGT").find(char(std::toupper(digits.back())))));
      digits.pop_back();
    }
    if (!absl::SimpleAtoi(digits, &size) || size == 0 || size > (uint64_t(1) << 50) / scale)
      return fail("--prefix-cache-size needs a byte count such as 500M or 16G, got '" + v + "'");
    options.diskBytes = size * scale;
  }
  {
    const std::string v = absl::GetFlag(FLAGS_local_state_ttl);
    absl::Duration ttl;
    int64_t minutes = 0;
    if (absl::SimpleAtoi(v, &minutes) && minutes >= 0 && minutes <= 100000)
      ttl = absl::Minutes(minutes);
    else if (!absl::ParseDuration(v, &ttl) || ttl < absl::ZeroDuration() || ttl > absl::Hours(2000))
      return fail("--local-state-ttl needs a duration such as 30s, 10m or 1h, got '" + v + "'");
    options.localTtl = std::chrono::duration<double>(absl::ToDoubleSeconds(ttl));
  }
  if (const std::string v = absl::GetFlag(FLAGS_prefix_cache_policy); v == "global+local")
    options.persistLocal = true;
  else if (v != "global")
    return fail("--prefix-cache-policy needs global or global+local, got '" + v + "'");
  return 0;
}

} // namespace csa::tools

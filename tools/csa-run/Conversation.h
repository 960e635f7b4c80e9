//===- Conversation.h - csa-run --turns: an agent loop turn by turn -*- C++ -*-===//
//
// A conversation is a list of turns, each appending tokens (ids or text) to
// the history and generating some. With a prefix cache (--prefix-cache)
// every turn's request (the whole history) is restored from the cache and
// saved back after it, so the turns reuse it within one process and across
// processes; without one the sequence is kept in memory (the exact run).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_CSA_RUN_CONVERSATION_H
#define CSA_TOOLS_CSA_RUN_CONVERSATION_H

#include "runtime/executor/Executor.h"
#include "runtime/prefix/PrefixCache.h"
#include "runtime/sampling/Sampling.h"
#include "runtime/tokenizer/ModelTokenizer.h"

#include "absl/status/statusor.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace csa::tools {

struct Turn {
  std::vector<int32_t> tokens; ///< appended to the history
  int64_t generate = 0;        ///< tokens to generate
  std::string where;           ///< "FILE:LINE", for messages
};

/// Reads a turns file: one turn a line, either comma-separated token ids or
/// a JSON object {"tokens": [ids]} or {"text": "..."} (needs `text`; the
/// first turn's text gets the tokenizer's prompt prefix) with an optional
/// "generate": N (default `defaultGenerate`). Blank lines and lines starting
/// with '#' are skipped. Errors name the file and line.
absl::StatusOr<std::vector<Turn>> readTurns(const std::string &path,
                                            const tokenizer::ModelTokenizer *text,
                                            int64_t defaultGenerate, int64_t vocabSize);

struct ConversationOptions {
  runtime::prefix::PrefixCache *cache = nullptr; ///< null: the sequence kept
  sampling::SamplingParams params;
  uint64_t seed = 0;
  const tokenizer::ModelTokenizer *text = nullptr; ///< prints text, stops at EOS
  bool stopAtEos = false;
  bool json = false; ///< no text lines (the caller prints `doc`)
};

/// Runs `turns` in order; prints a line per turn (unless json) and fills
/// doc["turns"] (and doc["prefix_cache"] with a cache).
absl::Status runConversation(runtime::Executor &executor, const std::vector<Turn> &turns,
                             const ConversationOptions &options, nlohmann::ordered_json &doc);

} // namespace csa::tools

#endif // CSA_TOOLS_CSA_RUN_CONVERSATION_H

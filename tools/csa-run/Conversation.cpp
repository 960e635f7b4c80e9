//===- Conversation.cpp - csa-run --turns: an agent loop turn by turn -----===//
#include "tools/csa-run/Conversation.h"

#include "runtime/sampling/TokenIds.h"
#include "runtime/tokenizer/Unicode.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

#include <chrono>
#include <cstdio>
#include <fstream>

namespace csa::tools {
namespace {
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
} // namespace

absl::StatusOr<std::vector<Turn>> readTurns(const std::string &path,
                                            const tokenizer::ModelTokenizer *text,
                                            int64_t defaultGenerate, int64_t vocabSize) {
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError(absl::StrCat("--turns: cannot read ", path));
  std::vector<Turn> turns;
  std::string line;
  int64_t lineNo = 0;
  size_t bytes = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    bytes += line.size() + 1;
    if (bytes > sampling::kMaxPromptFileBytes)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": longer than ", sampling::kMaxPromptFileBytes, " bytes"));
    const std::string where = absl::StrCat(path, ":", lineNo);
    absl::string_view body = absl::StripAsciiWhitespace(line);
    if (body.empty() || body.front() == '#')
      continue;
    Turn turn;
    turn.where = where;
    turn.generate = defaultGenerate;
    std::string error;
    if (body.front() != '{') {
      if (!sampling::parseTokenIds(std::string(body), turn.tokens, error))
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", error));
    } else {
      Json j = Json::parse(body.begin(), body.end(), nullptr, false);
      if (j.is_discarded() || !j.is_object())
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": not a JSON object (a turn is {\"tokens\": [...]} or "
                                "{\"text\": \"...\"}, with \"generate\": N)"));
      for (const auto &[key, value] : j.items())
        if (key != "tokens" && key != "text" && key != "generate")
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": unknown field \"", key, "\" (tokens, text, generate)"));
      if (j.contains("tokens") == j.contains("text"))
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": a turn has either \"tokens\" or \"text\""));
      if (j.contains("generate")) {
        const Json &g = j["generate"];
        if (!g.is_number_integer() || g.get<int64_t>() < 0 || g.get<int64_t>() > (int64_t(1) << 30))
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": \"generate\" needs a count >= 0"));
        turn.generate = g.get<int64_t>();
      }
      if (j.contains("tokens")) {
        const Json &t = j["tokens"];
        if (!t.is_array())
          return absl::InvalidArgumentError(absl::StrCat(where, ": \"tokens\" is a list of ids"));
        for (const Json &id : t) {
          if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN ||
              id.get<int64_t>() > INT32_MAX)
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": \"tokens\" holds ", id.dump(), ", not a token id"));
          turn.tokens.push_back(int32_t(id.get<int64_t>()));
        }
      } else {
        if (!j["text"].is_string())
          return absl::InvalidArgumentError(absl::StrCat(where, ": \"text\" is a string"));
        if (!text)
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": a text turn needs a tokenizer (--tokenizer=DIR|tokenizer.json)"));
        std::string raw = tokenizer::repairUtf8(j["text"].get<std::string>());
        auto ids = turns.empty() ? text->encodePrompt(raw) : text->tokenizer.encode(raw, false);
        if (!ids.ok())
          return absl::InvalidArgumentError(absl::StrCat(where, ": ", ids.status().message()));
        for (int64_t id : *ids)
          turn.tokens.push_back(int32_t(id));
      }
    }
    if (turn.tokens.empty())
      return absl::InvalidArgumentError(absl::StrCat(where, ": the turn appends no tokens"));
    for (int32_t id : turn.tokens)
      if (id < 0 || id >= vocabSize)
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": token id ", id, " is outside the vocabulary [0, ", vocabSize, ")"));
    turns.push_back(std::move(turn));
  }
  if (in.bad())
    return absl::DataLossError(absl::StrCat("--turns: error reading ", path));
  if (turns.empty())
    return absl::InvalidArgumentError(absl::StrCat(path, ": no turns"));
  return turns;
}

absl::Status runConversation(runtime::Executor &ex, const std::vector<Turn> &turns,
                             const ConversationOptions &options, Json &doc) {
  sampling::Sampler sampler(options.params, options.seed);
  runtime::Sequence kept = ex.newSequence();
  std::vector<int32_t> history; // every token so far, the generated ones too
  Json rows = Json::array();
  for (size_t index = 0; index < turns.size(); ++index) {
    const Turn &turn = turns[index];
    std::vector<int32_t> request = history;
    request.insert(request.end(), turn.tokens.begin(), turn.tokens.end());
    Json row = {{"turn", index + 1}, {"appended_tokens", turn.tokens.size()},
                {"request_tokens", request.size()}};

    // The sequence to run the request's new tokens on.
    runtime::Sequence restoredSequence;
    runtime::Sequence *seq = &kept;
    std::vector<int32_t> suffix(request.begin() + kept.position, request.end());
    std::string kind = index == 0 ? "cold" : "kept";
    int64_t restored = kept.position, replayed = 0;
    double restoreSeconds = 0;
    if (options.cache) {
      auto r = options.cache->restore(ex, request);
      if (!r.ok())
        return absl::Status(r.status().code(),
                            absl::StrCat(turn.where, ": ", r.status().message()));
      kind = runtime::prefix::restoreCaseName(r->kind);
      restored = r->restoredTokens;
      replayed = r->replayedTokens;
      restoreSeconds = r->seconds;
      restoredSequence = std::move(r->sequence);
      suffix = std::move(r->suffix);
      seq = &restoredSequence;
    }
    auto start = Clock::now();
    auto logits = seq->position == 0 ? ex.prefill(*seq, suffix) : ex.extend(*seq, suffix);
    const double prefillSeconds = since(start);
    if (!logits.ok())
      return absl::Status(logits.status().code(),
                          absl::StrCat(turn.where, ": ", logits.status().message()));

    std::vector<int32_t> generated;
    start = Clock::now();
    for (int64_t i = 0; i < turn.generate; ++i) {
      auto token = sampler.next(*logits);
      if (!token.ok())
        return token.status();
      generated.push_back(*token);
      if (options.stopAtEos && options.text->isEos(*token))
        break;
      if (i + 1 == turn.generate)
        break; // the last token needs no forward (the next turn runs it)
      logits = ex.decode(*seq, *token);
      if (!logits.ok())
        return absl::Status(logits.status().code(),
                            absl::StrCat(turn.where, ": decode step ", i, ": ",
                                         logits.status().message()));
    }
    const double decodeSeconds = since(start);
    history = request;
    history.insert(history.end(), generated.begin(), generated.end());

    double saveSeconds = 0;
    if (options.cache) {
      start = Clock::now();
      if (absl::Status st = ex.syncToHost(*seq); !st.ok())
        return st;
      if (absl::Status st = options.cache->save(*seq); !st.ok())
        return absl::Status(st.code(), absl::StrCat(turn.where, ": saving to the prefix cache: ",
                                                    st.message()));
      saveSeconds = since(start);
    }
    row["case"] = kind;
    row["restored_tokens"] = restored;
    row["replayed_tokens"] = replayed;
    row["prefill_tokens"] = suffix.size();
    row["restore_seconds"] = restoreSeconds;
    row["prefill_seconds"] = prefillSeconds;
    row["decode_seconds"] = decodeSeconds;
    row["save_seconds"] = saveSeconds;
    row["generated"] = generated;
    std::string text;
    if (options.text) {
      std::vector<int64_t> ids(generated.begin(), generated.end());
      text = options.text->tokenizer.decode(ids);
      row["text"] = tokenizer::repairUtf8(text);
    }
    rows.push_back(row);
    if (!options.json) {
      std::printf("turn %zu: %s, %lld of %zu tokens restored", index + 1, kind.c_str(),
                  static_cast<long long>(restored), request.size());
      if (options.cache)
        std::printf(" in %.3f ms (%lld replayed)", restoreSeconds * 1e3,
                    static_cast<long long>(replayed));
      std::printf("; %zu run in %.3f ms; %zu generated in %.3f ms\n", suffix.size(),
                  prefillSeconds * 1e3, generated.size(), decodeSeconds * 1e3);
      std::printf("  ids: %s\n", absl::StrJoin(generated, ",").c_str());
      if (options.text)
        std::printf("  text: %s\n", tokenizer::repairUtf8(text).c_str());
    }
  }
  doc["turns"] = rows;
  if (options.cache) {
    const runtime::prefix::PrefixCacheStats &s = options.cache->stats();
    doc["prefix_cache"] = {{"block_tokens", s.blockTokens},
                           {"global_bytes_per_token", s.globalBytesPerToken},
                           {"local_snapshot_bytes", s.localSnapshotBytes},
                           {"blocks_written", s.blocksWritten},
                           {"blocks_read", s.blocksRead},
                           {"blocks_evicted", s.blocksEvicted},
                           {"snapshots_saved", s.snapshotsSaved},
                           {"snapshots_expired", s.snapshotsExpired},
                           {"corrupt_removed", s.corruptRemoved},
                           {"memory_bytes", s.memoryBytes},
                           {"disk_bytes", s.diskBytes},
                           {"local_bytes", s.localBytes},
                           {"bytes_written_to_disk", s.bytesWrittenToDisk}};
    if (!options.json)
      std::printf("prefix cache: %lld B/token global (blocks of %lld tokens), local state "
                  "%lld B a snapshot; %lld blocks written, %lld read; %llu B on disk\n",
                  static_cast<long long>(s.globalBytesPerToken),
                  static_cast<long long>(s.blockTokens),
                  static_cast<long long>(s.localSnapshotBytes),
                  static_cast<long long>(s.blocksWritten), static_cast<long long>(s.blocksRead),
                  static_cast<unsigned long long>(s.diskBytes));
  }
  return absl::OkStatus();
}

} // namespace csa::tools

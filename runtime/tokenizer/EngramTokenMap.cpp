//===- EngramTokenMap.cpp - The released compressed-token map -------------===//

#include "runtime/tokenizer/EngramTokenMap.h"

#include "runtime/support/JsonLimits.h"
#include "runtime/tokenizer/Unicode.h"

#include "absl/strings/str_cat.h"
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace csa::tokenizer {

CompressedTokens compressTokens(const Tokenizer &tokenizer) {
  CompressedTokens out;
  std::unordered_map<std::string, int64_t> classOf;
  out.ids.reserve(size_t(tokenizer.size()));
  for (int64_t id = 0; id < tokenizer.size(); ++id) {
    const std::string text = tokenizer.decode({id});
    std::string key;
    if (containsReplacementCharacter(text)) {
      key = tokenizer.tokenString(id).value_or("");
    } else {
      key = engramNormalize(text);
      if (key.empty())
        key = text;
    }
    auto [it, fresh] = classOf.emplace(key, out.classes);
    if (fresh)
      ++out.classes;
    out.ids.push_back(it->second);
  }
  return out;
}

absl::StatusOr<EngramTokenMap> engramMapFromTokenizer(const Tokenizer &tokenizer,
                                                      const EngramVocab &vocab,
                                                      const std::string &source) {
  if (tokenizer.size() > vocab.vocabSize)
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the tokenizer has ", tokenizer.size(),
        " token ids, more than the model's vocab_size ", vocab.vocabSize));
  if (vocab.padId < 0 || vocab.padId >= tokenizer.size())
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": engram_pad_id ", vocab.padId, " names no token of the tokenizer (",
        tokenizer.size(), " ids)"));
  CompressedTokens compressed = compressTokens(tokenizer);
  if (compressed.classes != vocab.compressedVocab)
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the tokenizer's normalized tokens form ", compressed.classes,
        " classes but the config's engram_compressed_vocab_size is ",
        vocab.compressedVocab, " (another model's tokenizer?)"));
  EngramTokenMap out;
  out.map = std::move(compressed.ids);
  out.map.resize(size_t(vocab.vocabSize), out.map[size_t(vocab.padId)]);
  out.source = absl::StrCat("tokenizer ", source, " (", compressed.classes,
                            " classes over ", tokenizer.size(), " ids");
  if (tokenizer.size() < vocab.vocabSize)
    absl::StrAppend(&out.source, "; ", vocab.vocabSize - tokenizer.size(),
                    " ids without a token take the pad's class");
  out.source += ")";
  return out;
}

absl::StatusOr<EngramTokenMap> engramMapFromFile(const std::string &path,
                                                 const EngramVocab &vocab) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open the Engram token map"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    return absl::DataLossError(absl::StrCat(path, ": cannot read the Engram token map"));
  auto map = engramMapFromText(text.str(), path, vocab);
  if (map.ok())
    map->source = absl::StrCat("file ", path);
  return map;
}

absl::StatusOr<EngramTokenMap> engramMapFromText(const std::string &text,
                                                 const std::string &path,
                                                 const EngramVocab &vocab) {
  nlohmann::json list;
  try {
    list = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception &e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  if (support::jsonDepth(list) > 1 || !list.is_array())
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": must be a JSON list of compressed token ids, one per token id"));
  if (int64_t(list.size()) != vocab.vocabSize)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": holds ", list.size(), " ids; the model's vocab_size is ", vocab.vocabSize));
  EngramTokenMap out;
  out.map.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json &v = list[i];
    const bool integer = v.is_number_integer() || v.is_number_unsigned();
    if (!integer || (v.is_number_unsigned() ? v.get<uint64_t>() >= uint64_t(vocab.compressedVocab)
                                            : (v.get<int64_t>() < 0 ||
                                               v.get<int64_t>() >= vocab.compressedVocab)))
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": [", i, "]: ", v.dump(), " is not a compressed id in [0, ",
          vocab.compressedVocab, ") (engram_compressed_vocab_size)"));
    out.map.push_back(v.get<int64_t>());
  }
  out.source = path;
  return out;
}

EngramTokenMap moduloEngramMap(const EngramVocab &vocab) {
  EngramTokenMap out;
  out.map.resize(size_t(vocab.vocabSize));
  for (int64_t t = 0; t < vocab.vocabSize; ++t)
    out.map[size_t(t)] = t % vocab.compressedVocab;
  out.source = "modulo (token id mod engram_compressed_vocab_size; no tokenizer)";
  return out;
}

absl::StatusOr<EngramTokenMap> chooseEngramTokenMap(const EngramVocab &vocab,
                                                    const std::string &flag,
                                                    const Tokenizer *tokenizer,
                                                    const std::string &tokenizerPath,
                                                    const std::string &weightsDir) {
  if (vocab.vocabSize < 1 || vocab.compressedVocab < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "an Engram token map needs vocab_size and engram_compressed_vocab_size >= 1, got ",
        vocab.vocabSize, " and ", vocab.compressedVocab));
  if (flag == "modulo")
    return moduloEngramMap(vocab);
  if (!flag.empty())
    return engramMapFromFile(flag, vocab);
  if (tokenizer)
    return engramMapFromTokenizer(*tokenizer, vocab, tokenizerPath);
  const std::string carried =
      (std::filesystem::path(weightsDir) / "engram_token_map.json").string();
  std::error_code ec;
  if (!weightsDir.empty() && std::filesystem::is_regular_file(carried, ec)) {
    auto map = engramMapFromFile(carried, vocab);
    if (map.ok()) // named without the folder, which may be a temporary one
      map->source = "the checkpoint's engram_token_map.json";
    return map;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the model has Engram layers, which hash the tokenizer's compressed token ids, and ",
      weightsDir.empty() ? std::string("no checkpoint folder") : weightsDir,
      " has no tokenizer.json: give --tokenizer=DIR|tokenizer.json, "
      "--engram-token-map=FILE (a JSON list of ", vocab.vocabSize,
      " ids), or --engram-token-map=modulo for random-weight experiments"));
}

} // namespace csa::tokenizer

//===- Tokenizer.h - Hugging Face tokenizer.json: byte-level BPE -*- C++ -*-===//
//
// Reads the `tokenizer.json` DeepSeek ships (and other byte-level BPE
// tokenizers in Hugging Face's format) and encodes and decodes text as the
// `tokenizers` library does:
//
//   added tokens    matched first in the raw text, longest at each place,
//                   with their lstrip / rstrip / single_word rules;
//   pre-tokenizer   Sequence, Split (a regex, on PCRE2 with Unicode
//                   properties, or a string; every behavior; invert) and
//                   ByteLevel (GPT-2's byte alphabet, its regex if use_regex,
//                   add_prefix_space);
//   model           BPE (merges by rank, ignore_merges, unk_token);
//   post-processor  TemplateProcessing (single), ByteLevel, Sequence;
//   decoder         ByteLevel (a token of byte-alphabet characters gives its
//                   bytes, any other its UTF-8; the whole is UTF-8-repaired).
//
// Anything else (a normalizer, a WordPiece model, a Metaspace pre-tokenizer,
// BPE dropout or byte fallback, ...) is refused by name at load, never
// approximated. Every error names the file and the field.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_TOKENIZER_TOKENIZER_H
#define CSA_RUNTIME_TOKENIZER_TOKENIZER_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace csa::tokenizer {

/// One of tokenizer.json's `added_tokens`.
struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool singleWord = false, lstrip = false, rstrip = false, normalized = false,
       special = false;
};

class Tokenizer {
public:
  /// Parses `path` (a tokenizer.json).
  static absl::StatusOr<Tokenizer> fromFile(const std::string &path);
  /// Parses `text`; errors name `source`.
  static absl::StatusOr<Tokenizer> fromJson(std::string_view text,
                                            const std::string &source);

  Tokenizer(Tokenizer &&) noexcept;
  Tokenizer &operator=(Tokenizer &&) noexcept;
  ~Tokenizer();

  /// The ids of `text`, which must be valid UTF-8 (repairUtf8 first).
  /// `addSpecialTokens` applies the post-processor's template (BOS).
  absl::StatusOr<std::vector<int64_t>> encode(std::string_view text,
                                              bool addSpecialTokens) const;

  /// The raw text of `ids` (no cleanup of spaces): the decoder's bytes of
  /// each token, concatenated, ill-formed UTF-8 as U+FFFD. Ids that name no
  /// token give nothing, as in the tokenizers library.
  std::string decode(const std::vector<int64_t> &ids,
                     bool skipSpecialTokens = false) const;
  /// The decoder's bytes of one token, not repaired (a character may be
  /// split over several tokens): what a streamed decode feeds Utf8Stream.
  std::string tokenBytes(int64_t id) const;

  /// The token's string as the vocabulary spells it (byte-alphabet text for
  /// model tokens): `convert_ids_to_tokens`.
  std::optional<std::string> tokenString(int64_t id) const;
  std::optional<int64_t> tokenId(std::string_view token) const;
  bool isSpecial(int64_t id) const;

  /// The largest id of the vocabulary and the added tokens, plus one.
  int64_t size() const;
  const std::vector<AddedToken> &addedTokens() const;
  /// The ids the post-processor puts before and after a single sequence.
  const std::vector<int64_t> &templatePrefix() const;
  const std::vector<int64_t> &templateSuffix() const;

private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace csa::tokenizer

#endif // CSA_RUNTIME_TOKENIZER_TOKENIZER_H

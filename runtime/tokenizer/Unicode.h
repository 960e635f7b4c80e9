//===- Unicode.h - UTF-8 repair and the Engram token normalizer -*- C++ -*-===//
//
// The Unicode the tokenizer needs, on ICU: ill-formed UTF-8 replaced by
// U+FFFD (one for each maximal ill-formed subpart, the rule of WHATWG's
// decoder and of Python's errors="replace"), also as a stream whose pieces
// may split a character; code point properties; and the normalizer of the
// released Engram token map (NFKC, NFD, marks dropped, lowercase, runs of
// [ \t\r\n] as one space, stripped).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_TOKENIZER_UNICODE_H
#define CSA_RUNTIME_TOKENIZER_UNICODE_H

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace csa::tokenizer {

/// `bytes` with every ill-formed subsequence replaced by U+FFFD.
std::string repairUtf8(std::string_view bytes);

/// The byte offset of the first ill-formed subsequence, if any.
std::optional<size_t> firstInvalidUtf8(std::string_view bytes);

/// True if `text` contains U+FFFD.
bool containsReplacementCharacter(std::string_view text);

/// Unicode White_Space / alphanumeric-or-underscore (the added tokens'
/// lstrip, rstrip and single_word rules) for the code point at `text[i]`;
/// `length` receives its byte length. `text` is valid UTF-8.
bool isWhiteSpaceAt(std::string_view text, size_t i, size_t *length);
bool isWordCharacterAt(std::string_view text, size_t i, size_t *length);
/// The start of the code point that ends at byte `end` (end > 0).
size_t previousCodePointStart(std::string_view text, size_t end);

/// The released Engram key normalizer (`normalizers.Sequence([NFKC, NFD,
/// StripAccents, Lowercase, Replace("[ \t\r\n]+", " "), Replace("^ $",
/// SENTINEL), Strip, Replace(SENTINEL, " ")])`): marks are General_Category
/// M, lowercase is each code point's full lowercase mapping, Strip removes
/// White_Space at both ends. `text` is valid UTF-8.
std::string engramNormalize(std::string_view text);

/// Decodes a byte stream in pieces: feed() returns the text of the complete
/// characters seen so far (ill-formed parts as U+FFFD), keeping a character
/// split across pieces for the next call; finish() returns what is left.
class Utf8Stream {
public:
  Utf8Stream();
  ~Utf8Stream();
  Utf8Stream(Utf8Stream &&) noexcept;
  Utf8Stream &operator=(Utf8Stream &&) noexcept;
  std::string feed(std::string_view bytes);
  std::string finish();

private:
  struct State;
  std::unique_ptr<State> state_;
};

} // namespace csa::tokenizer

#endif // CSA_RUNTIME_TOKENIZER_UNICODE_H

//===- Unicode.cpp - UTF-8 repair and the Engram token normalizer ---------===//

#include "runtime/tokenizer/Unicode.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/ucnv.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <stdexcept>

namespace csa::tokenizer {
namespace {

/// ICU's UTF-8 converter substitutes U+FFFD for each maximal ill-formed
/// subpart (ICU >= 60), the WHATWG rule.
UConverter *openUtf8Converter() {
  UErrorCode status = U_ZERO_ERROR;
  UConverter *converter = ucnv_open("UTF-8", &status);
  if (U_FAILURE(status))
    throw std::runtime_error(std::string("ICU cannot open its UTF-8 converter: ") +
                             u_errorName(status));
  return converter;
}

/// Converts `bytes` (flush: the end of the stream) and appends the UTF-8 of
/// what came out to `out`.
void convert(UConverter *converter, std::string_view bytes, bool flush,
             std::string &out) {
  const char *source = bytes.data(), *sourceEnd = bytes.data() + bytes.size();
  UChar buffer[1024];
  icu::UnicodeString text;
  for (;;) {
    UErrorCode status = U_ZERO_ERROR;
    UChar *target = buffer;
    ucnv_toUnicode(converter, &target, buffer + 1024, &source, sourceEnd,
                   nullptr, flush, &status);
    text.append(buffer, int32_t(target - buffer));
    if (status == U_BUFFER_OVERFLOW_ERROR)
      continue;
    if (U_FAILURE(status))
      throw std::runtime_error(std::string("ICU's UTF-8 conversion failed: ") +
                               u_errorName(status));
    break;
  }
  text.toUTF8String(out);
}

bool isMark(UChar32 c) {
  switch (u_charType(c)) {
  case U_NON_SPACING_MARK:
  case U_ENCLOSING_MARK:
  case U_COMBINING_SPACING_MARK:
    return true;
  default:
    return false;
  }
}

UChar32 codePointAt(std::string_view text, size_t i, size_t *length) {
  int32_t offset = int32_t(i);
  UChar32 c;
  U8_NEXT(reinterpret_cast<const uint8_t *>(text.data()), offset,
          int32_t(text.size()), c);
  *length = size_t(offset) - i;
  return c;
}

} // namespace

std::string repairUtf8(std::string_view bytes) {
  if (!firstInvalidUtf8(bytes))
    return std::string(bytes);
  UConverter *converter = openUtf8Converter();
  std::string out;
  convert(converter, bytes, /*flush=*/true, out);
  ucnv_close(converter);
  return out;
}

std::optional<size_t> firstInvalidUtf8(std::string_view bytes) {
  const auto *s = reinterpret_cast<const uint8_t *>(bytes.data());
  int32_t i = 0;
  const int32_t n = int32_t(bytes.size());
  while (i < n) {
    const int32_t start = i;
    UChar32 c;
    U8_NEXT(s, i, n, c);
    if (c < 0)
      return size_t(start);
  }
  return std::nullopt;
}

bool containsReplacementCharacter(std::string_view text) {
  return text.find("\xEF\xBF\xBD") != std::string_view::npos;
}

bool isWhiteSpaceAt(std::string_view text, size_t i, size_t *length) {
  return u_isUWhiteSpace(codePointAt(text, i, length));
}

bool isWordCharacterAt(std::string_view text, size_t i, size_t *length) {
  const UChar32 c = codePointAt(text, i, length);
  return c == '_' || u_isalnum(c);
}

size_t previousCodePointStart(std::string_view text, size_t end) {
  int32_t offset = int32_t(end);
  UChar32 c;
  U8_PREV(reinterpret_cast<const uint8_t *>(text.data()), 0, offset, c);
  (void)c;
  return size_t(offset);
}

std::string engramNormalize(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2 *nfkc = icu::Normalizer2::getNFKCInstance(status);
  const icu::Normalizer2 *nfd = icu::Normalizer2::getNFDInstance(status);
  if (U_FAILURE(status))
    throw std::runtime_error(std::string("ICU has no NFKC/NFD data: ") +
                             u_errorName(status));
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), int32_t(text.size())));
  s = nfd->normalize(nfkc->normalize(s, status), status);
  if (U_FAILURE(status))
    throw std::runtime_error(std::string("ICU normalization failed: ") +
                             u_errorName(status));
  // Marks dropped, then each code point's own full lowercase mapping (no
  // context: the released normalizer lowercases character by character).
  icu::UnicodeString lowered;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    i += U16_LENGTH(c);
    if (isMark(c))
      continue;
    icu::UnicodeString one(c);
    lowered.append(one.toLower(icu::Locale::getRoot()));
  }
  std::string utf8;
  lowered.toUTF8String(utf8);
  // Runs of [ \t\r\n] as one space.
  std::string collapsed;
  collapsed.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size(); ++i) {
    const char c = utf8[i];
    const bool blank = c == ' ' || c == '\t' || c == '\r' || c == '\n';
    if (!blank) {
      collapsed.push_back(c);
      continue;
    }
    const char before = i == 0 ? 'x' : utf8[i - 1];
    if (!(before == ' ' || before == '\t' || before == '\r' || before == '\n'))
      collapsed.push_back(' ');
  }
  // A text that is exactly one space stays a space; otherwise White_Space is
  // stripped at both ends.
  if (collapsed == " ")
    return collapsed;
  size_t begin = 0, end = collapsed.size();
  while (begin < end) {
    size_t length;
    if (!isWhiteSpaceAt(collapsed, begin, &length))
      break;
    begin += length;
  }
  while (end > begin) {
    const size_t start = previousCodePointStart(collapsed, end);
    size_t length;
    if (!isWhiteSpaceAt(collapsed, start, &length))
      break;
    end = start;
  }
  return collapsed.substr(begin, end - begin);
}

struct Utf8Stream::State {
  UConverter *converter = openUtf8Converter();
  ~State() { ucnv_close(converter); }
};

Utf8Stream::Utf8Stream() : state_(std::make_unique<State>()) {}
Utf8Stream::~Utf8Stream() = default;
Utf8Stream::Utf8Stream(Utf8Stream &&) noexcept = default;
Utf8Stream &Utf8Stream::operator=(Utf8Stream &&) noexcept = default;

std::string Utf8Stream::feed(std::string_view bytes) {
  std::string out;
  convert(state_->converter, bytes, /*flush=*/false, out);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out;
  convert(state_->converter, {}, /*flush=*/true, out);
  ucnv_reset(state_->converter);
  return out;
}

} // namespace csa::tokenizer

//===- Tokenizer.cpp - Hugging Face tokenizer.json: byte-level BPE --------===//

#include "runtime/tokenizer/Tokenizer.h"

#include "runtime/support/JsonLimits.h"
#include "runtime/tokenizer/Unicode.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <nlohmann/json.hpp>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <queue>
#include <sstream>
#include <unordered_map>

namespace csa::tokenizer {
namespace {

using nlohmann::json;

/// Errors "SOURCE: PATH: what".
struct Where {
  std::string source, path;
  Where at(const std::string &key) const {
    return {source, path.empty() ? key : path + "." + key};
  }
  Where index(size_t i) const { return {source, absl::StrCat(path, "[", i, "]")}; }
  absl::Status error(const std::string &what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", path.empty() ? "(top level)" : path, ": ", what));
  }
};

#define CSA_TOK_TRY(lhs, expr)                                                 \
  auto CSA_TOK_CAT(csa_tok_, __LINE__) = (expr);                               \
  if (!CSA_TOK_CAT(csa_tok_, __LINE__).ok())                                   \
    return CSA_TOK_CAT(csa_tok_, __LINE__).status();                           \
  lhs = std::move(*CSA_TOK_CAT(csa_tok_, __LINE__))
#define CSA_TOK_CAT(a, b) CSA_TOK_CAT2(a, b)
#define CSA_TOK_CAT2(a, b) a##b
#define CSA_TOK_TRY_STATUS(expr)                                               \
  do {                                                                         \
    absl::Status csa_tok_status = (expr);                                      \
    if (!csa_tok_status.ok())                                                  \
      return csa_tok_status;                                                   \
  } while (false)

const json *member(const json &object, const char *key) {
  if (!object.is_object())
    return nullptr;
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<std::string> stringOf(const json *value, const Where &w) {
  if (!value)
    return w.error("missing (required)");
  if (!value->is_string())
    return w.error(absl::StrCat("must be a string, got ", value->type_name()));
  return value->get<std::string>();
}

absl::StatusOr<bool> boolOr(const json &object, const char *key, bool otherwise,
                            const Where &w) {
  const json *value = member(object, key);
  if (!value)
    return otherwise;
  if (!value->is_boolean())
    return w.at(key).error(absl::StrCat("must be true or false, got ", value->dump()));
  return value->get<bool>();
}

absl::StatusOr<int64_t> idOf(const json *value, const Where &w) {
  if (!value)
    return w.error("missing (required)");
  if (!value->is_number_integer() && !value->is_number_unsigned())
    return w.error(absl::StrCat("must be a token id, got ", value->dump()));
  if (value->is_number_unsigned() ? value->get<uint64_t>() >= (uint64_t(1) << 31)
                                  : (value->get<int64_t>() < 0 ||
                                     value->get<int64_t>() >= (int64_t(1) << 31)))
    return w.error(absl::StrCat("token id ", value->dump(), " is out of range [0, 2^31)"));
  return value->get<int64_t>();
}

/// GPT-2's byte alphabet: the printable Latin-1 bytes stand for themselves,
/// the others for U+0100 + n in byte order.
struct ByteAlphabet {
  std::array<std::string, 256> charOf;
  std::unordered_map<std::string, uint8_t> byteOf;
  ByteAlphabet() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
                             (b >= 0xae && b <= 0xff);
      const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n++);
      std::string s;
      if (cp < 0x80) {
        s.push_back(char(cp));
      } else {
        s.push_back(char(0xC0 | (cp >> 6)));
        s.push_back(char(0x80 | (cp & 0x3F)));
      }
      charOf[size_t(b)] = s;
      byteOf.emplace(s, uint8_t(b));
    }
  }
};
const ByteAlphabet &byteAlphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

std::string toByteAlphabet(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes)
    out += byteAlphabet().charOf[b];
  return out;
}

/// The byte length of the UTF-8 character at `text[i]` (valid UTF-8: its
/// lead byte and the continuation bytes after it).
size_t charLength(std::string_view text, size_t i) {
  size_t length = 1;
  while (i + length < text.size() &&
         (static_cast<unsigned char>(text[i + length]) & 0xC0) == 0x80)
    ++length;
  return length;
}

/// A compiled Split pattern: a PCRE2 regex (UTF, Unicode properties) or a
/// literal string.
class Pattern {
public:
  static absl::StatusOr<std::shared_ptr<Pattern>> regex(const std::string &text,
                                                        const Where &w) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code *compiled = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
        PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
    if (!compiled) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(code, message, sizeof message);
      return w.error(absl::StrCat("regex does not compile at offset ", offset, ": ",
                                  reinterpret_cast<const char *>(message)));
    }
    pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE); // falls back to the interpreter
    auto p = std::shared_ptr<Pattern>(new Pattern);
    p->regex_ = compiled;
    return p;
  }
  static std::shared_ptr<Pattern> literal(std::string text) {
    auto p = std::shared_ptr<Pattern>(new Pattern);
    p->literal_ = std::move(text);
    return p;
  }
  ~Pattern() {
    if (regex_)
      pcre2_code_free(regex_);
  }

  /// The non-empty matches in `text`, left to right.
  absl::StatusOr<std::vector<std::pair<size_t, size_t>>>
  find(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> matches;
    if (!regex_) {
      if (literal_.empty())
        return matches;
      for (size_t at = text.find(literal_); at != std::string_view::npos;
           at = text.find(literal_, at + literal_.size()))
        matches.push_back({at, at + literal_.size()});
      return matches;
    }
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data *)> data(
        pcre2_match_data_create_from_pattern(regex_, nullptr), pcre2_match_data_free);
    const auto *subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0;
    while (offset < text.size()) {
      const int rc = pcre2_match(regex_, subject, text.size(), offset,
                                 PCRE2_NO_UTF_CHECK, data.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH)
        break;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof message);
        return absl::ResourceExhaustedError(
            absl::StrCat("the pre-tokenizer's regex failed on the text: ",
                         reinterpret_cast<const char *>(message)));
      }
      const PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(data.get());
      const size_t start = ovector[0], end = ovector[1];
      if (end == start) { // an empty match: go on after this character
        offset = start + charLength(text, start);
        continue;
      }
      matches.push_back({start, end});
      offset = end;
    }
    return matches;
  }

private:
  Pattern() = default;
  pcre2_code *regex_ = nullptr;
  std::string literal_;
};

enum class Behavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum Kind { Split, ByteLevel } kind = Split;
  std::shared_ptr<Pattern> pattern;
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  bool addPrefixSpace = false; // ByteLevel
  bool useRegex = false;       // ByteLevel: GPT-2's regex first
};

const char *kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/// Splits `piece` by `pattern` with `behavior` (the tokenizers library's
/// SplitDelimiterBehavior); empty pieces are dropped.
absl::Status splitPiece(const std::string &piece, const Pattern &pattern,
                        Behavior behavior, bool invert,
                        std::vector<std::string> &out) {
  CSA_TOK_TRY(auto matches, pattern.find(piece));
  struct Part { size_t begin, end; bool match; };
  std::vector<Part> parts;
  size_t last = 0;
  for (auto [b, e] : matches) {
    if (b > last)
      parts.push_back({last, b, false});
    parts.push_back({b, e, true});
    last = e;
  }
  if (last < piece.size())
    parts.push_back({last, piece.size(), false});
  if (invert)
    for (Part &p : parts)
      p.match = !p.match;
  std::vector<std::string> pieces;
  bool lastWasMatch = false;
  for (const Part &p : parts) {
    std::string text = piece.substr(p.begin, p.end - p.begin);
    switch (behavior) {
    case Behavior::Isolated:
      pieces.push_back(std::move(text));
      break;
    case Behavior::Removed:
      if (!p.match)
        pieces.push_back(std::move(text));
      break;
    case Behavior::MergedWithPrevious:
      if (p.match && !pieces.empty() && !lastWasMatch)
        pieces.back() += text;
      else
        pieces.push_back(std::move(text));
      break;
    case Behavior::MergedWithNext:
      break; // below, from the right
    case Behavior::Contiguous:
      if (p.match && lastWasMatch)
        pieces.back() += text;
      else
        pieces.push_back(std::move(text));
      break;
    }
    lastWasMatch = p.match;
  }
  if (behavior == Behavior::MergedWithNext) {
    // A match joins the piece after it unless that piece is a match too (the
    // library folds from the right).
    bool nextWasMatch = false;
    for (size_t k = parts.size(); k-- > 0;) {
      std::string text = piece.substr(parts[k].begin, parts[k].end - parts[k].begin);
      if (parts[k].match && !nextWasMatch && !pieces.empty())
        pieces.back() = text + pieces.back();
      else
        pieces.push_back(std::move(text));
      nextWasMatch = parts[k].match;
    }
    std::reverse(pieces.begin(), pieces.end());
  }
  for (std::string &p : pieces)
    if (!p.empty())
      out.push_back(std::move(p));
  return absl::OkStatus();
}

struct Symbol {
  int64_t id;
  int64_t prev, next;
  bool alive;
};

} // namespace

struct Tokenizer::Impl {
  std::string source;
  std::unordered_map<std::string, int64_t> vocab;
  std::map<int64_t, std::string> idToToken; // model and added tokens
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges; // (a,b) -> (rank, merged)
  bool ignoreMerges = false;
  std::optional<int64_t> unkId;
  bool fuseUnk = false;
  std::vector<PreTokenizerStep> preTokenizer;
  std::vector<AddedToken> added;
  std::unordered_map<int64_t, size_t> addedById;
  std::vector<int64_t> prefix, suffix;
  int64_t size = 0;

  static uint64_t pairKey(int64_t a, int64_t b) {
    return (uint64_t(a) << 32) | uint64_t(uint32_t(b));
  }

  absl::Status loadModel(const json &model, const Where &w);
  absl::Status loadPreTokenizer(const json &node, const Where &w);
  absl::Status loadAddedTokens(const json &list, const Where &w);
  absl::Status loadPostProcessor(const json &node, const Where &w);
  absl::Status checkDecoder(const json &node, const Where &w);

  absl::Status bpe(const std::string &word, std::vector<int64_t> &ids) const;
  absl::Status encodePlain(std::string_view text, std::vector<int64_t> &ids) const;
};

absl::Status Tokenizer::Impl::loadModel(const json &model, const Where &w) {
  if (!model.is_object())
    return w.error("must be an object");
  CSA_TOK_TRY(std::string type, stringOf(member(model, "type"), w.at("type")));
  if (type != "BPE")
    return w.at("type").error(absl::StrCat("'", type, "' is not supported (csa reads BPE models)"));
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json *v = member(model, key); v && !(v->is_string() && v->get<std::string>().empty()))
      return w.at(key).error(absl::StrCat("is ", v->dump(), "; csa supports only null"));
  CSA_TOK_TRY(bool byteFallback, boolOr(model, "byte_fallback", false, w));
  if (byteFallback)
    return w.at("byte_fallback").error("true is not supported (csa reads byte-level BPE)");
  if (const json *d = member(model, "dropout");
      d && !(d->is_number() && d->get<double>() == 0.0))
    return w.at("dropout").error(absl::StrCat("is ", d->dump(), "; csa encodes deterministically (null or 0)"));
  CSA_TOK_TRY(ignoreMerges, boolOr(model, "ignore_merges", false, w));
  CSA_TOK_TRY(fuseUnk, boolOr(model, "fuse_unk", false, w));

  const json *v = member(model, "vocab");
  if (!v || !v->is_object())
    return w.at("vocab").error("must be an object of token -> id");
  for (auto it = v->begin(); it != v->end(); ++it) {
    CSA_TOK_TRY(int64_t id, idOf(&it.value(), w.at("vocab").at(it.key())));
    if (!idToToken.emplace(id, it.key()).second)
      return w.at("vocab").at(it.key()).error(absl::StrCat(
          "id ", id, " is also token '", idToToken[id], "'"));
    vocab.emplace(it.key(), id);
  }
  if (const json *u = member(model, "unk_token")) {
    CSA_TOK_TRY(std::string unk, stringOf(u, w.at("unk_token")));
    auto it = vocab.find(unk);
    if (it == vocab.end())
      return w.at("unk_token").error(absl::StrCat("'", unk, "' is not in the vocabulary"));
    unkId = it->second;
  }
  const json *m = member(model, "merges");
  if (!m || !m->is_array())
    return w.at("merges").error("must be an array");
  for (size_t i = 0; i < m->size(); ++i) {
    const Where at = w.at("merges").index(i);
    const json &entry = (*m)[i];
    std::string a, b;
    if (entry.is_string()) {
      const std::string s = entry.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        return at.error(absl::StrCat("'", s, "' is not two tokens separated by one space"));
      a = s.substr(0, space), b = s.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      a = entry[0].get<std::string>(), b = entry[1].get<std::string>();
    } else {
      return at.error("must be \"a b\" or [\"a\", \"b\"]");
    }
    auto ia = vocab.find(a), ib = vocab.find(b), im = vocab.find(a + b);
    for (auto [found, name] : {std::pair{ia, a}, std::pair{ib, b}, std::pair{im, a + b}})
      if (found == vocab.end())
        return at.error(absl::StrCat("names '", name, "', which is not in the vocabulary"));
    merges.emplace(pairKey(ia->second, ib->second), std::pair{int64_t(i), im->second});
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::Impl::loadPreTokenizer(const json &node, const Where &w) {
  if (!node.is_object())
    return w.error("must be an object");
  CSA_TOK_TRY(std::string type, stringOf(member(node, "type"), w.at("type")));
  if (type == "Sequence") {
    const json *list = member(node, "pretokenizers");
    if (!list || !list->is_array())
      return w.at("pretokenizers").error("must be an array");
    for (size_t i = 0; i < list->size(); ++i)
      CSA_TOK_TRY_STATUS(loadPreTokenizer((*list)[i], w.at("pretokenizers").index(i)));
    return absl::OkStatus();
  }
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::ByteLevel;
    CSA_TOK_TRY(step.addPrefixSpace, boolOr(node, "add_prefix_space", true, w));
    CSA_TOK_TRY(step.useRegex, boolOr(node, "use_regex", true, w));
    if (step.useRegex) {
      CSA_TOK_TRY(step.pattern, Pattern::regex(kGpt2Pattern, w));
    }
    preTokenizer.push_back(std::move(step));
    return absl::OkStatus();
  }
  if (type != "Split")
    return w.at("type").error(absl::StrCat(
        "'", type, "' is not supported (csa reads Sequence, Split and ByteLevel pre-tokenizers)"));
  const json *pattern = member(node, "pattern");
  if (!pattern || !pattern->is_object())
    return w.at("pattern").error("must be {\"Regex\": ...} or {\"String\": ...}");
  if (const json *r = member(*pattern, "Regex")) {
    CSA_TOK_TRY(std::string text, stringOf(r, w.at("pattern.Regex")));
    CSA_TOK_TRY(step.pattern, Pattern::regex(text, w.at("pattern.Regex")));
  } else if (const json *s = member(*pattern, "String")) {
    CSA_TOK_TRY(std::string text, stringOf(s, w.at("pattern.String")));
    step.pattern = Pattern::literal(text);
  } else {
    return w.at("pattern").error("must be {\"Regex\": ...} or {\"String\": ...}");
  }
  CSA_TOK_TRY(std::string behavior, stringOf(member(node, "behavior"), w.at("behavior")));
  static const std::pair<const char *, Behavior> kBehaviors[] = {
      {"Isolated", Behavior::Isolated}, {"Removed", Behavior::Removed},
      {"MergedWithPrevious", Behavior::MergedWithPrevious},
      {"MergedWithNext", Behavior::MergedWithNext}, {"Contiguous", Behavior::Contiguous}};
  bool known = false;
  for (auto [name, b] : kBehaviors)
    if (behavior == name)
      step.behavior = b, known = true;
  if (!known)
    return w.at("behavior").error(absl::StrCat("'", behavior, "' is not a split behavior"));
  CSA_TOK_TRY(step.invert, boolOr(node, "invert", false, w));
  preTokenizer.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status Tokenizer::Impl::loadAddedTokens(const json &list, const Where &w) {
  if (!list.is_array())
    return w.error("must be an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const Where at = w.index(i);
    const json &t = list[i];
    if (!t.is_object())
      return at.error("must be an object");
    AddedToken token;
    CSA_TOK_TRY(token.id, idOf(member(t, "id"), at.at("id")));
    CSA_TOK_TRY(token.content, stringOf(member(t, "content"), at.at("content")));
    if (token.content.empty())
      return at.at("content").error("must not be empty");
    if (firstInvalidUtf8(token.content))
      return at.at("content").error("is not valid UTF-8");
    CSA_TOK_TRY(token.singleWord, boolOr(t, "single_word", false, at));
    CSA_TOK_TRY(token.lstrip, boolOr(t, "lstrip", false, at));
    CSA_TOK_TRY(token.rstrip, boolOr(t, "rstrip", false, at));
    CSA_TOK_TRY(token.normalized, boolOr(t, "normalized", false, at));
    CSA_TOK_TRY(token.special, boolOr(t, "special", false, at));
    auto known = idToToken.find(token.id);
    if (known != idToToken.end() && known->second != token.content &&
        !addedById.count(token.id) && vocab.count(known->second))
      return at.at("id").error(absl::StrCat("id ", token.id, " is the vocabulary's '",
                                            known->second, "', not '", token.content, "'"));
    if (addedById.count(token.id))
      return at.at("id").error(absl::StrCat("id ", token.id, " is added twice"));
    idToToken[token.id] = token.content;
    addedById.emplace(token.id, added.size());
    added.push_back(std::move(token));
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::Impl::loadPostProcessor(const json &node, const Where &w) {
  if (!node.is_object())
    return w.error("must be an object");
  CSA_TOK_TRY(std::string type, stringOf(member(node, "type"), w.at("type")));
  if (type == "ByteLevel" || type == "ByteLevelPostProcessor")
    return absl::OkStatus(); // offsets only
  if (type == "Sequence") {
    const json *list = member(node, "processors");
    if (!list || !list->is_array())
      return w.at("processors").error("must be an array");
    for (size_t i = 0; i < list->size(); ++i)
      CSA_TOK_TRY_STATUS(loadPostProcessor((*list)[i], w.at("processors").index(i)));
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing")
    return w.at("type").error(absl::StrCat(
        "'", type, "' is not supported (csa reads TemplateProcessing, ByteLevel and Sequence)"));
  const json *single = member(node, "single");
  if (!single || !single->is_array())
    return w.at("single").error("must be an array");
  const json *specials = member(node, "special_tokens");
  bool seenSequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Where at = w.at("single").index(i);
    const json &item = (*single)[i];
    if (const json *seq = member(item, "Sequence")) {
      CSA_TOK_TRY(std::string id, stringOf(member(*seq, "id"), at.at("Sequence.id")));
      if (id != "A" || seenSequence)
        return at.error("a single sequence's template holds sequence A once");
      seenSequence = true;
      continue;
    }
    const json *special = member(item, "SpecialToken");
    if (!special)
      return at.error("must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    CSA_TOK_TRY(std::string name, stringOf(member(*special, "id"), at.at("SpecialToken.id")));
    const json *entry = specials ? member(*specials, name.c_str()) : nullptr;
    const json *ids = entry ? member(*entry, "ids") : nullptr;
    if (!ids || !ids->is_array())
      return w.at("special_tokens").error(absl::StrCat("has no ids for '", name, "'"));
    for (size_t k = 0; k < ids->size(); ++k) {
      CSA_TOK_TRY(int64_t id, idOf(&(*ids)[k], w.at("special_tokens").at(name).at("ids").index(k)));
      (seenSequence ? suffix : prefix).push_back(id);
    }
  }
  if (!seenSequence)
    return w.at("single").error("has no {\"Sequence\": {\"id\": \"A\"}}");
  return absl::OkStatus();
}

absl::Status Tokenizer::Impl::checkDecoder(const json &node, const Where &w) {
  if (!node.is_object())
    return w.error("must be an object");
  CSA_TOK_TRY(std::string type, stringOf(member(node, "type"), w.at("type")));
  if (type == "ByteLevel")
    return absl::OkStatus();
  if (type == "Sequence") {
    const json *list = member(node, "decoders");
    if (!list || !list->is_array() || list->size() != 1)
      return w.at("decoders").error("csa reads a Sequence of one ByteLevel decoder");
    return checkDecoder((*list)[0], w.at("decoders").index(0));
  }
  return w.at("type").error(absl::StrCat("'", type, "' is not supported (csa reads the ByteLevel decoder)"));
}

absl::Status Tokenizer::Impl::bpe(const std::string &word,
                                  std::vector<int64_t> &ids) const {
  if (ignoreMerges)
    if (auto it = vocab.find(word); it != vocab.end()) {
      ids.push_back(it->second);
      return absl::OkStatus();
    }
  // The word's characters as symbols; then the lowest-ranked adjacent pair
  // is merged first (leftmost among equals), as the library's queue does.
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < word.size();) {
    const size_t length = charLength(word, i);
    auto it = vocab.find(word.substr(i, length));
    if (it == vocab.end()) {
      if (!unkId)
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": the vocabulary has no symbol '", word.substr(i, length),
            "' and the model no unk_token"));
      if (!(fuseUnk && !symbols.empty() && symbols.back().id == *unkId))
        symbols.push_back({*unkId, int64_t(symbols.size()) - 1, int64_t(symbols.size()) + 1, true});
    } else {
      symbols.push_back({it->second, int64_t(symbols.size()) - 1, int64_t(symbols.size()) + 1, true});
    }
    i += length;
  }
  if (symbols.empty())
    return absl::OkStatus();
  symbols.back().next = -1;
  struct Candidate {
    int64_t rank, pos, merged;
    bool operator>(const Candidate &o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int64_t pos) {
    if (pos < 0 || symbols[size_t(pos)].next < 0)
      return;
    auto it = merges.find(pairKey(symbols[size_t(pos)].id,
                                  symbols[size_t(symbols[size_t(pos)].next)].id));
    if (it != merges.end())
      queue.push({it->second.first, pos, it->second.second});
  };
  for (int64_t i = 0; i < int64_t(symbols.size()); ++i)
    consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol &left = symbols[size_t(top.pos)];
    if (!left.alive || left.next < 0)
      continue;
    Symbol &right = symbols[size_t(left.next)];
    auto it = merges.find(pairKey(left.id, right.id));
    if (it == merges.end() || it->second.second != top.merged ||
        it->second.first != top.rank)
      continue; // this pair changed since it was queued
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0)
      symbols[size_t(left.next)].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }
  for (int64_t i = 0; i >= 0; i = symbols[size_t(i)].next)
    ids.push_back(symbols[size_t(i)].id);
  return absl::OkStatus();
}

absl::Status Tokenizer::Impl::encodePlain(std::string_view text,
                                          std::vector<int64_t> &ids) const {
  std::vector<std::string> pieces{std::string(text)};
  for (const PreTokenizerStep &step : preTokenizer) {
    std::vector<std::string> next;
    for (std::string &piece : pieces) {
      if (step.kind == PreTokenizerStep::Split) {
        CSA_TOK_TRY_STATUS(splitPiece(piece, *step.pattern, step.behavior, step.invert, next));
        continue;
      }
      if (step.addPrefixSpace && piece.rfind(' ', 0) != 0)
        piece.insert(piece.begin(), ' ');
      std::vector<std::string> parts;
      if (step.useRegex)
        CSA_TOK_TRY_STATUS(splitPiece(piece, *step.pattern, Behavior::Isolated, false, parts));
      else
        parts.push_back(std::move(piece));
      for (const std::string &part : parts)
        next.push_back(toByteAlphabet(part));
    }
    pieces = std::move(next);
  }
  for (const std::string &piece : pieces)
    CSA_TOK_TRY_STATUS(bpe(piece, ids));
  return absl::OkStatus();
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer &&) noexcept = default;
Tokenizer &Tokenizer::operator=(Tokenizer &&) noexcept = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<Tokenizer> Tokenizer::fromFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open the tokenizer"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    return absl::DataLossError(absl::StrCat(path, ": cannot read the tokenizer"));
  return fromJson(text.str(), path);
}

absl::StatusOr<Tokenizer> Tokenizer::fromJson(std::string_view text,
                                              const std::string &source) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception &e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON: ", e.what()));
  }
  if (support::jsonDepth(root) > support::kMaxJsonDepth)
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": JSON nested deeper than ", support::kMaxJsonDepth, " levels"));
  const Where top{source, ""};
  if (!root.is_object())
    return top.error("must be a JSON object (a Hugging Face tokenizer.json)");
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  try {
    if (const json *n = member(root, "normalizer")) {
      const json *list = member(*n, "normalizers");
      const bool emptySequence = member(*n, "type") && (*n)["type"] == "Sequence" &&
                                 list && list->is_array() && list->empty();
      if (!emptySequence)
        return top.at("normalizer").error(absl::StrCat(
            "'", n->is_object() && member(*n, "type") ? (*n)["type"].dump() : n->dump(),
            "' is not supported (csa reads tokenizers without a normalizer, as DeepSeek's)"));
    }
    const json *model = member(root, "model");
    if (!model)
      return top.at("model").error("missing (required)");
    CSA_TOK_TRY_STATUS(impl->loadModel(*model, top.at("model")));
    if (const json *p = member(root, "pre_tokenizer"))
      CSA_TOK_TRY_STATUS(impl->loadPreTokenizer(*p, top.at("pre_tokenizer")));
    if (const json *a = member(root, "added_tokens"))
      CSA_TOK_TRY_STATUS(impl->loadAddedTokens(*a, top.at("added_tokens")));
    if (const json *p = member(root, "post_processor"))
      CSA_TOK_TRY_STATUS(impl->loadPostProcessor(*p, top.at("post_processor")));
    const json *decoder = member(root, "decoder");
    if (!decoder)
      return top.at("decoder").error("missing: csa decodes with the ByteLevel decoder");
    CSA_TOK_TRY_STATUS(impl->checkDecoder(*decoder, top.at("decoder")));
  } catch (const json::exception &e) { // a value of an unexpected JSON type
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  for (int64_t id : impl->prefix)
    if (!impl->idToToken.count(id))
      return top.at("post_processor").error(absl::StrCat("names token id ", id, ", which no token has"));
  for (int64_t id : impl->suffix)
    if (!impl->idToToken.count(id))
      return top.at("post_processor").error(absl::StrCat("names token id ", id, ", which no token has"));
  impl->size = impl->idToToken.empty() ? 0 : impl->idToToken.rbegin()->first + 1;
  return Tokenizer(std::move(impl));
}

absl::StatusOr<std::vector<int64_t>> Tokenizer::encode(std::string_view text,
                                                       bool addSpecialTokens) const {
  if (auto bad = firstInvalidUtf8(text))
    return absl::InvalidArgumentError(absl::StrCat(
        "the text is not valid UTF-8 at byte ", *bad));
  const Impl &m = *impl_;
  // The added tokens split the text first: the non-normalized ones, then the
  // normalized ones in what is left (both on the raw text here: there is no
  // normalizer). At each place the longest token wins.
  struct Segment { std::string_view text; int64_t added; };
  std::vector<Segment> segments{{text, -1}};
  for (bool normalizedPass : {false, true}) {
    std::vector<const AddedToken *> tokens;
    for (const AddedToken &t : m.added)
      if (t.normalized == normalizedPass)
        tokens.push_back(&t);
    if (tokens.empty())
      continue;
    std::sort(tokens.begin(), tokens.end(), [](const AddedToken *a, const AddedToken *b) {
      return a->content.size() > b->content.size();
    });
    std::vector<Segment> next;
    for (const Segment &segment : segments) {
      if (segment.added >= 0) {
        next.push_back(segment);
        continue;
      }
      std::string_view s = segment.text;
      size_t plainStart = 0;
      for (size_t i = 0; i < s.size();) {
        const AddedToken *found = nullptr;
        for (const AddedToken *t : tokens) {
          if (s.compare(i, t->content.size(), t->content) != 0)
            continue;
          if (t->singleWord) {
            size_t length;
            const size_t end = i + t->content.size();
            if ((i > 0 && isWordCharacterAt(s, previousCodePointStart(s, i), &length)) ||
                (end < s.size() && isWordCharacterAt(s, end, &length)))
              continue;
          }
          found = t;
          break;
        }
        if (!found) {
          i += charLength(s, i);
          continue;
        }
        size_t begin = i, end = i + found->content.size(), length;
        if (found->lstrip)
          while (begin > plainStart) {
            const size_t before = previousCodePointStart(s, begin);
            if (!isWhiteSpaceAt(s, before, &length))
              break;
            begin = before;
          }
        if (found->rstrip)
          while (end < s.size() && isWhiteSpaceAt(s, end, &length))
            end += length;
        if (begin > plainStart)
          next.push_back({s.substr(plainStart, begin - plainStart), -1});
        next.push_back({s.substr(begin, end - begin), found->id});
        plainStart = i = end;
      }
      if (plainStart < s.size())
        next.push_back({s.substr(plainStart), -1});
    }
    segments = std::move(next);
  }
  std::vector<int64_t> ids;
  if (addSpecialTokens)
    ids = m.prefix;
  for (const Segment &segment : segments) {
    if (segment.added >= 0)
      ids.push_back(segment.added);
    else
      CSA_TOK_TRY_STATUS(m.encodePlain(segment.text, ids));
  }
  if (addSpecialTokens)
    ids.insert(ids.end(), m.suffix.begin(), m.suffix.end());
  return ids;
}

std::string Tokenizer::tokenBytes(int64_t id) const {
  auto it = impl_->idToToken.find(id);
  if (it == impl_->idToToken.end())
    return {};
  const std::string &token = it->second;
  // A token wholly of byte-alphabet characters gives those bytes; any other
  // (an added token such as "<｜User｜>") its own UTF-8.
  std::string bytes;
  for (size_t i = 0; i < token.size();) {
    const size_t length = charLength(token, i);
    auto b = byteAlphabet().byteOf.find(token.substr(i, length));
    if (b == byteAlphabet().byteOf.end())
      return token;
    bytes.push_back(char(b->second));
    i += length;
  }
  return bytes;
}

std::string Tokenizer::decode(const std::vector<int64_t> &ids,
                              bool skipSpecialTokens) const {
  std::string bytes;
  for (int64_t id : ids)
    if (!(skipSpecialTokens && isSpecial(id)))
      bytes += tokenBytes(id);
  return repairUtf8(bytes);
}

std::optional<std::string> Tokenizer::tokenString(int64_t id) const {
  auto it = impl_->idToToken.find(id);
  if (it == impl_->idToToken.end())
    return std::nullopt;
  return it->second;
}

std::optional<int64_t> Tokenizer::tokenId(std::string_view token) const {
  for (const AddedToken &t : impl_->added)
    if (t.content == token)
      return t.id;
  auto it = impl_->vocab.find(std::string(token));
  if (it == impl_->vocab.end())
    return std::nullopt;
  return it->second;
}

bool Tokenizer::isSpecial(int64_t id) const {
  auto it = impl_->addedById.find(id);
  return it != impl_->addedById.end() && impl_->added[it->second].special;
}

int64_t Tokenizer::size() const { return impl_->size; }
const std::vector<AddedToken> &Tokenizer::addedTokens() const { return impl_->added; }
const std::vector<int64_t> &Tokenizer::templatePrefix() const { return impl_->prefix; }
const std::vector<int64_t> &Tokenizer::templateSuffix() const { return impl_->suffix; }

} // namespace csa::tokenizer

//===- TokenizerTest.cpp - tokenizer.json encode/decode ------------------===//
//
// The encoder against Hugging Face's JavaScript implementation on the
// fixture's strings (make-fixture.mjs), small tokenizers for the split
// behaviors and the added-token rules, streamed decoding, and bad files.
//
//===----------------------------------------------------------------------===//
#include "runtime/tokenizer/ModelTokenizer.h"
#include "runtime/tokenizer/Tokenizer.h"
#include "runtime/tokenizer/Unicode.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace csa::tokenizer {
namespace {

using nlohmann::json;
const std::string kFixture = CSA_TOKENIZER_FIXTURE_DIR;

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string fromHex(const std::string &hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(char(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

TEST(Tokenizer, EncodesTheFixtureAsHuggingFaceDoes) {
  auto tokenizer = Tokenizer::fromFile(kFixture + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const json cases = json::parse(readFile(kFixture + "/encode-cases.json"))["cases"];
  ASSERT_GE(cases.size(), 300u);
  int invalid = 0;
  for (const json &c : cases) {
    const std::string bytes = fromHex(c["bytes"].get<std::string>());
    if (firstInvalidUtf8(bytes))
      ++invalid;
    const std::string text = repairUtf8(bytes);
    auto ids = tokenizer->encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int64_t>>()) << "bytes " << c["bytes"];
    auto withSpecial = tokenizer->encode(text, true);
    ASSERT_TRUE(withSpecial.ok());
    EXPECT_EQ(*withSpecial, c["ids_with_special"].get<std::vector<int64_t>>())
        << "bytes " << c["bytes"];
    EXPECT_EQ(tokenizer->decode(*ids), c["decoded"].get<std::string>())
        << "bytes " << c["bytes"];
  }
  EXPECT_GE(invalid, 10) << "the fixture keeps its ill-formed UTF-8 cases";
}

TEST(Tokenizer, StreamedDecodeEqualsTheWholeDecode) {
  auto tokenizer = Tokenizer::fromFile(kFixture + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok());
  const std::string text = "中文文本 🙂 👨‍👩‍👧 café\n<｜User｜>ok";
  auto ids = tokenizer->encode(text, false);
  ASSERT_TRUE(ids.ok());
  Utf8Stream stream;
  std::string streamed;
  for (int64_t id : *ids)
    streamed += stream.feed(tokenizer->tokenBytes(id));
  streamed += stream.finish();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(tokenizer->decode(*ids), text);
  // A byte fragment at the end is repaired when the stream finishes.
  Utf8Stream cut;
  EXPECT_EQ(cut.feed("a\xE4\xB8"), "a");
  EXPECT_EQ(cut.finish(), "\xEF\xBF\xBD");
}

TEST(Tokenizer, RepairsIllFormedUtf8PerMaximalSubpart) {
  EXPECT_EQ(repairUtf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  // E4 B8 is one maximal subpart (a truncated 3-byte sequence): one U+FFFD.
  EXPECT_EQ(repairUtf8("\xE4\xB8 x"), "\xEF\xBF\xBD x");
  EXPECT_EQ(firstInvalidUtf8("ok\xC3"), 2u);
  EXPECT_FALSE(firstInvalidUtf8("ok \xC3\xA9"));
}

TEST(Tokenizer, ReadsTheFolderBosAndEos) {
  auto model = ModelTokenizer::load(kFixture);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->prefix, std::vector<int64_t>{0});
  EXPECT_TRUE(model->suffix.empty());
  EXPECT_EQ(model->eos, std::vector<int64_t>{1});
  EXPECT_TRUE(model->isEos(1));
  auto ids = model->encodePrompt("Hello world");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), 0);
  auto bad = model->encodePrompt("x\xFF");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not valid UTF-8 at byte 1"), std::string::npos);
}

/// A tokenizer of single-byte tokens "a".."z" and "Ġ" with `extra` merged
/// tokens, the given pre-tokenizer and added tokens.
json smallTokenizer(const json &preTokenizer, const json &added = json::array(),
                    const std::vector<std::string> &merges = {}) {
  json vocab = json::object();
  int64_t id = 0;
  for (char c = 'a'; c <= 'z'; ++c)
    vocab[std::string(1, c)] = id++;
  vocab["Ġ"] = id++;
  for (const std::string &m : merges) {
    std::string merged = m;
    merged.erase(merged.find(' '), 1);
    vocab[merged] = id++;
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", preTokenizer},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

json split(const std::string &regex, const std::string &behavior, bool invert = false) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", behavior},
             {"invert", invert}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
}

TEST(Tokenizer, SplitBehaviorsAsTheLibraryDefinesThem) {
  // With merges "a b" the pieces show where the splits fell: "ab" merges only
  // inside one piece.
  const std::vector<std::string> merges{"a b", "b a", "ab a", "b b"};
  auto run = [&](const std::string &behavior, bool invert = false) {
    auto ids = Tokenizer::fromJson(smallTokenizer(split("b", behavior, invert), json::array(),
                                                  merges).dump(),
                                   "small.json");
    EXPECT_TRUE(ids.ok()) << ids.status();
    auto encoded = ids->encode("abba", false);
    std::vector<std::string> out;
    for (int64_t id : *encoded)
      out.push_back(ids->decode({id}));
    return out;
  };
  EXPECT_EQ(run("Isolated"), (std::vector<std::string>{"a", "b", "b", "a"}));
  EXPECT_EQ(run("Removed"), (std::vector<std::string>{"a", "a"}));
  EXPECT_EQ(run("MergedWithPrevious"), (std::vector<std::string>{"ab", "b", "a"}));
  EXPECT_EQ(run("MergedWithNext"), (std::vector<std::string>{"a", "b", "ba"}));
  EXPECT_EQ(run("Contiguous"), (std::vector<std::string>{"a", "bb", "a"}));
  // Inverted, the b's are the gaps: Removed keeps them, each the part it was
  // (two matches side by side are two parts, so no "bb").
  EXPECT_EQ(run("Removed", /*invert=*/true), (std::vector<std::string>{"b", "b"}));
}

TEST(Tokenizer, AddedTokensStripAndSingleWord) {
  const json pre = split("\\s+", "Isolated");
  json added = json::array({{{"id", 100}, {"content", "xy"}, {"lstrip", true}, {"rstrip", true},
                             {"special", true}},
                            {{"id", 101}, {"content", "qq"}, {"single_word", true}}});
  auto tokenizer = Tokenizer::fromJson(smallTokenizer(pre, added).dump(), "small.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto ids = tokenizer->encode("a xy b", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int64_t>{0, 100, 1})); // the spaces went with "xy"
  ids = tokenizer->encode("aqq qq", false);
  ASSERT_TRUE(ids.ok());
  // "qq" inside "aqq" is not a word; the second one is.
  EXPECT_EQ(ids->back(), 101);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 101), 1);
  EXPECT_TRUE(tokenizer->isSpecial(100));
  EXPECT_EQ(tokenizer->decode(*tokenizer->encode("a xy", false), /*skipSpecialTokens=*/true), "a");
}

TEST(Tokenizer, BadFilesAreErrorsNamingTheField) {
  auto expectError = [](const std::string &text, const std::string &needle) {
    auto t = Tokenizer::fromJson(text, "bad.json");
    ASSERT_FALSE(t.ok()) << "accepted: " << text.substr(0, 80);
    EXPECT_NE(std::string(t.status().message()).find(needle), std::string::npos)
        << t.status();
    EXPECT_NE(std::string(t.status().message()).find("bad.json"), std::string::npos);
  };
  const json good = smallTokenizer(split("\\s+", "Isolated"), json::array(), {"a b"});
  const std::string text = good.dump();
  expectError(text.substr(0, text.size() / 2), "not valid JSON");
  json t = good;
  t["model"]["type"] = "WordPiece";
  expectError(t.dump(), "model.type: 'WordPiece' is not supported");
  t = good;
  t["model"]["merges"] = {"a zz"};
  expectError(t.dump(), "model.merges[0]: names 'zz', which is not in the vocabulary");
  t = good;
  t["pre_tokenizer"] = {{"type", "Metaspace"}};
  expectError(t.dump(), "pre_tokenizer.type: 'Metaspace' is not supported");
  t = good;
  t["normalizer"] = {{"type", "NFC"}};
  expectError(t.dump(), "normalizer");
  t = good;
  t["pre_tokenizer"] = split("(", "Isolated");
  expectError(t.dump(), "pre_tokenizer.pretokenizers[0].pattern.Regex: regex does not compile");
  t = good;
  t["model"]["byte_fallback"] = true;
  expectError(t.dump(), "model.byte_fallback");
  t = good;
  t["model"]["vocab"]["b"] = 0;
  expectError(t.dump(), "model.vocab.b: id 0 is also token 'a'");
  t = good;
  t["decoder"] = {{"type", "WordPiece"}};
  expectError(t.dump(), "decoder.type: 'WordPiece' is not supported");
  auto missing = Tokenizer::fromFile("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("/nonexistent/tokenizer.json"),
            std::string::npos);
}

} // namespace
} // namespace csa::tokenizer

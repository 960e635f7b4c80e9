//===- EngramTokenMapTest.cpp - The released compressed-token map --------===//
//
// The map of the fixture tokenizer against an independent build of it in
// Python's unicodedata (test/fixtures/tokenizer/engram_map.py), a tokenizer
// built for the purpose (tokens that normalize alike, accents, whitespace
// tokens, byte fragments, ligatures, a lone mark), and bad maps.
//
//===----------------------------------------------------------------------===//
#include "runtime/tokenizer/EngramTokenMap.h"
#include "runtime/tokenizer/Unicode.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace csa::tokenizer {
namespace {

using nlohmann::json;
const std::string kFixture = CSA_TOKENIZER_FIXTURE_DIR;

/// UTF-8 text spelt in GPT-2's byte alphabet (as vocabularies store it).
std::string byteLevel(const std::string &utf8) {
  std::string out;
  for (unsigned char b : utf8) {
    uint32_t cp = b;
    const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    if (!printable) {
      int n = 0;
      for (int c = 0; c < b; ++c)
        if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || c >= 0xae))
          ++n;
      cp = 256 + uint32_t(n);
    }
    if (cp < 0x80) {
      out.push_back(char(cp));
    } else {
      out.push_back(char(0xC0 | (cp >> 6)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

TEST(EngramTokenMap, FixtureEqualsAnIndependentBuild) {
  auto tokenizer = Tokenizer::fromFile(kFixture + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::ifstream in(kFixture + "/engram-map.json");
  const json expected = json::parse(in);
  const CompressedTokens got = compressTokens(*tokenizer);
  EXPECT_EQ(got.classes, expected["classes"].get<int64_t>());
  EXPECT_EQ(got.ids, expected["map"].get<std::vector<int64_t>>());
  EXPECT_LT(got.classes, tokenizer->size()) << "the fixture has tokens that normalize alike";
}

TEST(EngramTokenMap, NormalizesAsTheReleasedCode) {
  // Ids in order; the comment gives each one's key.
  const std::vector<std::string> utf8 = {
      "the",          // 0: "the"
      "The",          // 1: "the"
      " The",         // 2: "the" (stripped)
      "THE",          // 3: "the"
      "\xC3\xA9",     // 4: "é" -> "e" (NFD, the accent dropped)
      "e",            // 5: "e"
      " ",            // 6: " " (a lone space stays)
      "  ",           // 7: " "
      "\n",           // 8: " "
      "\t ",          // 9: " "
      "\xE3\x80\x80", // 10: U+3000 -> NFKC " " -> " "
      "\xEF\xAC\x81", // 11: U+FB01 (fi ligature) -> "fi"
      "fi",           // 12: "fi"
      " .",           // 13: "."
      "\xC4\xB0",     // 14: U+0130 -> "I" + U+0307, the mark dropped -> "i"
      "i",            // 15: "i"
      "\xCE\xA3",     // 16: U+03A3 -> "σ"
      "\xCF\x82",     // 17: U+03C2 (final sigma) stays itself
      "   x",         // 18: "x"
      "\xCC\x81",     // 19: a lone U+0301 normalizes to "": keyed by its text
  };
  json vocab = json::object();
  for (size_t i = 0; i < utf8.size(); ++i)
    vocab[byteLevel(utf8[i])] = i;
  const int64_t fragment = int64_t(utf8.size()); // 20: byte C3 alone: U+FFFD
  vocab[byteLevel("\xC3")] = fragment;
  json added = json::array({{{"id", fragment + 1}, {"content", "<｜begin▁of▁sentence｜>"},
                             {"special", true}}});
  json spec = {{"added_tokens", added},
               {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                  {"use_regex", false}}},
               {"decoder", {{"type", "ByteLevel"}}},
               {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  auto tokenizer = Tokenizer::fromJson(spec.dump(), "purpose.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const CompressedTokens got = compressTokens(*tokenizer);
  const std::vector<int64_t> expected = {0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 3, 3,
                                         4, 5, 5, 6, 7, 8, 9, 10, 11};
  EXPECT_EQ(got.ids, expected);
  EXPECT_EQ(got.classes, 12);
  EXPECT_EQ(engramNormalize("<｜begin▁of▁sentence｜>"), "<|begin▁of▁sentence|>");

  // Fitted to a model: the class count must be the config's; ids past the
  // tokenizer take the pad's class.
  auto map = engramMapFromTokenizer(*tokenizer, {30, 12, 5}, "purpose.json");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->map.size(), 30u);
  EXPECT_EQ(map->map[29], got.ids[5]);
  EXPECT_NE(map->source.find("8 ids without a token"), std::string::npos) << map->source;
  auto wrongCount = engramMapFromTokenizer(*tokenizer, {30, 99092, 2}, "purpose.json");
  ASSERT_FALSE(wrongCount.ok());
  EXPECT_NE(std::string(wrongCount.status().message()).find("form 12 classes"), std::string::npos);
  EXPECT_NE(std::string(wrongCount.status().message()).find("99092"), std::string::npos);
  auto tooSmall = engramMapFromTokenizer(*tokenizer, {10, 12, 2}, "purpose.json");
  ASSERT_FALSE(tooSmall.ok());
  EXPECT_NE(std::string(tooSmall.status().message()).find("vocab_size 10"), std::string::npos);
}

TEST(EngramTokenMap, MapFilesAreChecked) {
  char path[] = "/tmp/csa-engram-map-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  auto write = [&](const std::string &text) { std::ofstream(path) << text; };
  const EngramVocab vocab{4, 3, 2};
  write("[0, 1, 2, 0]");
  auto ok = engramMapFromFile(path, vocab);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->map, (std::vector<int64_t>{0, 1, 2, 0}));
  write("[0, 1, 2]");
  auto shortMap = engramMapFromFile(path, vocab);
  ASSERT_FALSE(shortMap.ok());
  EXPECT_NE(std::string(shortMap.status().message()).find("holds 3 ids; the model's vocab_size is 4"),
            std::string::npos);
  write("[0, 1, 3, 0]");
  auto outOfRange = engramMapFromFile(path, vocab);
  ASSERT_FALSE(outOfRange.ok());
  EXPECT_NE(std::string(outOfRange.status().message()).find("[2]: 3 is not a compressed id"),
            std::string::npos);
  write("{\"a\": 1}");
  EXPECT_FALSE(engramMapFromFile(path, vocab).ok());
  write("[0, 1,");
  EXPECT_FALSE(engramMapFromFile(path, vocab).ok());
  std::remove(path);
  EXPECT_EQ(moduloEngramMap(vocab).map, (std::vector<int64_t>{0, 1, 2, 0}));
}

} // namespace
} // namespace csa::tokenizer

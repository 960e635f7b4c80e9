//===- Sha256Test.cpp - SHA-256 test vectors ------------------------------===//
//
// The FIPS 180-4 / NIST CAVS example messages, streaming in every split, and
// the file helper.
//
//===----------------------------------------------------------------------===//
#include "ArtifactTestSupport.h"

#include "runtime/artifact/Sha256.h"

#include <gtest/gtest.h>

namespace csa::artifact {
namespace {

TEST(Sha256, EmptyMessage) {
  EXPECT_EQ(sha256Hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, Abc) {
  EXPECT_EQ(sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, TwoBlockMessage448Bits) {
  EXPECT_EQ(
      sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, Message896Bits) {
  EXPECT_EQ(
      sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, OneMillionA) {
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Messages of 55, 56 and 64 bytes sit at the padding boundaries (checked
// against Python hashlib).
TEST(Sha256, PaddingBoundaries) {
  EXPECT_EQ(sha256Hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256Hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256Hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256, StreamingEqualsOneShot) {
  std::string message;
  for (int i = 0; i < 1000; ++i)
    message.push_back(char(i * 7 + 3));
  const std::string expected = sha256Hex(message);
  for (size_t chunk : {1, 3, 55, 63, 64, 65, 127, 999}) {
    Sha256 hash;
    for (size_t at = 0; at < message.size(); at += chunk)
      hash.update(std::string_view(message).substr(at, chunk));
    EXPECT_EQ(toHex(hash.finish()), expected) << "chunk " << chunk;
  }
  Sha256 reused;
  reused.update("xyz");
  reused.finish();
  reused.reset();
  reused.update(message);
  EXPECT_EQ(toHex(reused.finish()), expected);
}

// An empty span from an empty container has a null data pointer; hashing it
// is a no-op (UBSan flagged the memcpy it used to reach).
TEST(Sha256, EmptyUpdateWithNullPointerIsANoOp) {
  Sha256 hash;
  hash.update("ab");
  hash.update(nullptr, 0);
  hash.update("c");
  hash.update(nullptr, 0);
  EXPECT_EQ(toHex(hash.finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, File) {
  test::TempDir dir;
  test::writeText(dir / "f", std::string(3 << 20, 'a') + "tail");
  auto digest = sha256File(dir / "f");
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ(*digest, sha256Hex(std::string(3 << 20, 'a') + "tail"));
  auto missing = sha256File(dir / "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope: cannot open"),
            std::string::npos);
}

TEST(Sha256, IsHex) {
  EXPECT_TRUE(isSha256Hex(sha256Hex("abc")));
  EXPECT_FALSE(isSha256Hex(std::string(63, 'a')));
  EXPECT_FALSE(isSha256Hex(std::string(64, 'A')));
  EXPECT_FALSE(isSha256Hex(std::string(63, 'a') + "g"));
}

} // namespace
} // namespace csa::artifact

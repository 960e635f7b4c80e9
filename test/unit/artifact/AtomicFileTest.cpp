//===- AtomicFileTest.cpp - Outputs written whole or not at all ----------===//
#include "runtime/support/AtomicFile.h"

#include "test/unit/support/TempDir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace {

namespace fs = std::filesystem;
using csa::test::TempDir;
namespace support = csa::support;

std::string read(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> entries(const std::string &dir) {
  std::vector<std::string> names;
  for (const auto &entry : fs::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(AtomicFile, ReplacesAFileWholeAndLeavesNothingBeside) {
  TempDir tmp;
  const std::string path = tmp / "out.mlir";
  ASSERT_TRUE(support::writeFileAtomically(path, "first").ok());
  EXPECT_EQ(read(path), "first");
  ASSERT_TRUE(support::writeFileAtomically(path, "second, longer").ok());
  EXPECT_EQ(read(path), "second, longer");
  EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{"out.mlir"});
  // A new file gets the permissions the umask gives (not mkstemp's 0600).
  const auto perms = fs::status(path).permissions();
  EXPECT_NE(perms & fs::perms::others_read, fs::perms::none);
}

TEST(AtomicFile, KeepsAFilesPermissions) {
  TempDir tmp;
  const std::string path = tmp / "run.sh";
  ASSERT_TRUE(support::writeFileAtomically(path, "a").ok());
  fs::permissions(path, fs::perms::owner_all);
  ASSERT_TRUE(support::writeFileAtomically(path, "b").ok());
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms::owner_all);
}

TEST(AtomicFile, AFailedWriteNamesThePathAndChangesNothing) {
  TempDir tmp;
  // No directory to put the temporary file in.
  absl::Status st = support::writeFileAtomically(tmp / "missing/out.txt", "x");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("missing/out.txt: cannot create a temporary file beside it"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE(entries(tmp.path()).empty());
  // A directory is not replaced by a file.
  fs::create_directories(tmp / "dir");
  st = support::writeFileAtomically(tmp / "dir", "x");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("is a directory"), std::string::npos) << st.message();
  EXPECT_TRUE(fs::is_directory(tmp / "dir"));
}

TEST(AtomicFile, AFullDeviceIsAnError) {
  absl::Status st = support::writeFileAtomically("/dev/full", "bytes");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/dev/full: cannot write"), std::string::npos) << st.message();
  // A device is written in place: /dev/null takes the bytes.
  EXPECT_TRUE(support::writeFileAtomically("/dev/null", "bytes").ok());
}

TEST(AtomicFile, ADirectoryIsSwappedInWhole) {
  TempDir tmp;
  const std::string target = tmp / "a.csa";
  auto fill = [&](const std::string &text) {
    auto staging = support::makeStagingDirectory(target);
    EXPECT_TRUE(staging.ok()) << staging.status();
    EXPECT_TRUE(support::writeStagedFile(*staging + "/file", text).ok());
    // Not visible under the target's name until committed.
    EXPECT_NE(read(target + "/file"), text);
    return *staging;
  };
  ASSERT_TRUE(support::commitDirectory(fill("one"), target).ok());
  EXPECT_EQ(read(target + "/file"), "one");
  // An old file of the target that the new directory lacks goes with it.
  std::ofstream(target + "/stale") << "old";
  ASSERT_TRUE(support::commitDirectory(fill("two"), target).ok());
  EXPECT_EQ(read(target + "/file"), "two");
  EXPECT_FALSE(fs::exists(target + "/stale"));
  EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{"a.csa"});
}

TEST(AtomicFile, TwoStagingDirectoriesOfOneTargetDiffer) {
  TempDir tmp;
  auto a = support::makeStagingDirectory(tmp / "x");
  auto b = support::makeStagingDirectory(tmp / "x");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  support::discardStagingDirectory(*a);
  support::discardStagingDirectory(*b);
  EXPECT_TRUE(entries(tmp.path()).empty());
  EXPECT_FALSE(support::makeStagingDirectory(tmp / "missing/x").ok());
}

} // namespace

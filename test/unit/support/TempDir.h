//===- TempDir.h - A scratch directory per test ------------------*- C++ -*-===//
//
// Shared by the GoogleTest suites that write files (checkpoints, artifacts).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TEST_UNIT_SUPPORT_TEMPDIR_H
#define CSA_TEST_UNIT_SUPPORT_TEMPDIR_H

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace csa::test {

/// A fresh directory under the test temp dir, named after the process and the
/// running test (so parallel ctest runs do not collide), removed at scope exit.
class TempDir {
public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("csa-" + std::to_string(::getpid()) + "-" +
             (info ? std::string(info->name()) : "x") + "-" +
             std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;

  std::string path() const { return path_.string(); }
  std::string operator/(const std::string &name) const {
    return (path_ / name).string();
  }

private:
  std::filesystem::path path_;
};

} // namespace csa::test

#endif // CSA_TEST_UNIT_SUPPORT_TEMPDIR_H

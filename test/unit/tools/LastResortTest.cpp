//===- LastResortTest.cpp - An escaping exception ends a tool cleanly -----===//
#include "tools/support/LastResort.h"

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

namespace {
void raise(bool memory) {
  if (memory)
    throw std::bad_alloc();
  throw std::out_of_range("a library's exception");
}
// noexcept: the exception cannot reach gtest's own handler, as it cannot
// leave a tool's main (std::terminate runs with it current).
void escape(bool memory) noexcept {
  csa::tools::installLastResortHandler("csa-test");
  raise(memory);
}
} // namespace

TEST(LastResortDeathTest, AnEscapingExceptionExitsOneWithItsMessage) {
  EXPECT_EXIT(escape(false), testing::ExitedWithCode(1),
              "csa-test: internal error: a library's exception");
  EXPECT_EXIT(escape(true), testing::ExitedWithCode(1), "csa-test: error: out of memory");
}

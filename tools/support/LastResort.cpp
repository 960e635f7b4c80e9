//===- LastResort.cpp - No exception leaves a csa tool --------------------===//
#include "tools/support/LastResort.h"

#include <cstdio>
#include <exception>
#include <new>
#include <unistd.h>

namespace csa::tools {

namespace {
const char *toolName = "csa";

[[noreturn]] void lastResort() {
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc &) {
      std::fprintf(stderr, "%s: error: out of memory (does an input ask for more than this machine has?)\n",
                   toolName);
    } catch (const std::exception &error) {
      std::fprintf(stderr, "%s: internal error: %s (please report it with the input)\n", toolName,
                   error.what());
    } catch (...) {
      std::fprintf(stderr, "%s: internal error: an unknown exception (please report it)\n", toolName);
    }
  } else {
    std::fprintf(stderr, "%s: internal error: terminated (please report it)\n", toolName);
  }
  std::fflush(stderr);
  _exit(1);
}
} // namespace

void installLastResortHandler(const char *name) {
  toolName = name;
  std::set_terminate(lastResort);
}

} // namespace csa::tools

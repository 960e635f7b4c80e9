//===- csa-op-abi.cpp - Print the op ABI section of the artifact docs -----===//
//
//   csa-op-abi                  prints the section (markdown)
//   csa-op-abi --update FILE    rewrites the lines between FILE's markers
//
// The section is docs/artifact-format.md's "Step arguments": each op's
// argument slots as runtime/artifact/OpAbi.cpp defines them. `ninja csa-docs`
// updates the committed copy and test/docs-up-to-date.test fails when it is
// stale.
//
//===----------------------------------------------------------------------===//
#include "tools/support/LastResort.h"
#include "tools/support/Version.h"

#include <cstdio>
#include "runtime/artifact/OpAbi.h"

#include <fstream>
#include <iostream>
#include <string>

namespace {

constexpr const char *kBegin = "<!-- BEGIN csa-op-abi";
constexpr const char *kEnd = "<!-- END csa-op-abi";

int fail(const std::string &message) {
  std::cerr << "csa-op-abi: error: " << message << "\n";
  return 1;
}

/// Replaces what lies between the marker lines of `path` by the section.
int update(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return fail("cannot read " + path);
  std::string out, line;
  enum { Before, Inside, After } state = Before;
  while (std::getline(in, line)) {
    if (state == Before && line.rfind(kBegin, 0) == 0) {
      out += line + "\n\n" + csa::artifact::opAbiMarkdown() + "\n";
      state = Inside;
      continue;
    }
    if (state == Inside && line.rfind(kEnd, 0) != 0)
      continue;
    if (state == Inside)
      state = After;
    out += line + "\n";
  }
  if (state != After)
    return fail(path + " has no lines starting '" + kBegin + "' and '" +
                kEnd + "' (the section's markers)");
  in.close();
  std::ofstream file(path, std::ios::trunc);
  if (!(file << out) || !file.flush())
    return fail("cannot write " + path);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  csa::tools::installLastResortHandler("csa-op-abi");
  if (csa::tools::answerVersion(argc, argv, "csa-op-abi"))
    return 0;
  if (argc == 1) {
    std::cout << csa::artifact::opAbiMarkdown();
    return 0;
  }
  if (argc == 3 && std::string(argv[1]) == "--update")
    return update(argv[2]);
  std::cerr << "usage: csa-op-abi [--update FILE]\n"
               "Prints each op's plan-step arguments (runtime/artifact/"
               "OpAbi.cpp) as the\nmarkdown section of "
               "docs/artifact-format.md; --update rewrites the lines\n"
               "between FILE's '"
            << kBegin << "' and '" << kEnd << "' lines.\n";
  return 2;
}

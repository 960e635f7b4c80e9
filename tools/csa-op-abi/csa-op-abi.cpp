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
#include "tools/support/Flags.h"
#include "tools/support/LastResort.h"
#include "tools/support/Version.h"

#include <cstdio>
#include "runtime/artifact/OpAbi.h"

#include <fstream>
#include <iostream>
#include <string>

ABSL_FLAG(std::string, update, "",
          "rewrite the lines between this file's markers instead of printing");

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
  const std::string usage =
      std::string("usage: csa-op-abi [--update FILE]\n"
                  "Prints each op's plan-step arguments (runtime/artifact/OpAbi.cpp) as the\n"
                  "markdown section of docs/artifact-format.md; --update rewrites the lines\n"
                  "between FILE's '") +
      kBegin + "' and '" + kEnd + "' lines.\n";
  csa::tools::CommandLine flags("csa-op-abi", usage);
  if (!flags.parse(argc, argv))
    return flags.exitCode();
  if (!flags.positional().empty())
    return flags.error("no positional arguments, got '" + flags.positional()[0] +
                       "' (--update FILE rewrites FILE)");
  if (flags.given(FLAGS_update)) {
    if (absl::GetFlag(FLAGS_update).empty())
      return flags.error("--update needs a file name");
    return update(absl::GetFlag(FLAGS_update));
  }
  std::cout << csa::artifact::opAbiMarkdown();
  return 0;
}

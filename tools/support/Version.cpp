//===- Version.cpp - What every tool's --version prints --------------------===//
#include "tools/support/Version.h"

#include "tools/support/CommitId.inc" // generated: CSA_COMMIT_ID

#include <cstdio>
#include <cstring>

namespace csa::tools {

const char *csaVersion() { return "0.1.0"; }

const char *csaCommit() { return CSA_COMMIT_ID; }

std::string versionLine(const char *tool) {
  return std::string(tool) + " " + csaVersion() + " (commit " + csaCommit() + ")";
}

bool answerVersion(int argc, char **argv, const char *tool) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("%s\n", versionLine(tool).c_str());
      return true;
    }
  return false;
}

} // namespace csa::tools

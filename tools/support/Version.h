//===- Version.h - What every tool's --version prints ------------*- C++ -*-===//
//
// "csa-run 0.1.0 (commit 83381c2)": csa's version and the commit it was
// built from (`git describe --always --dirty`, "-dirty" for a checkout with
// changes, "unknown" outside one), the same line in every tool's --version
// and in an artifact's manifest (created_by).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_SUPPORT_VERSION_H
#define CSA_TOOLS_SUPPORT_VERSION_H

#include <string>

namespace csa::tools {

/// csa's version ("0.1.0").
const char *csaVersion();
/// The commit the build is from.
const char *csaCommit();
/// "TOOL VERSION (commit COMMIT)".
std::string versionLine(const char *tool);
/// When `--version` is among the arguments (argv[1..argc)), prints
/// versionLine(tool) on stdout and returns true (the tool then exits 0),
/// before any other argument is looked at.
bool answerVersion(int argc, char **argv, const char *tool);

} // namespace csa::tools

#endif // CSA_TOOLS_SUPPORT_VERSION_H

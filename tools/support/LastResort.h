//===- LastResort.h - No exception leaves a csa tool --------------*- C++ -*-===//
//
// Every tool reports bad input as an error of its own; an exception that
// still escapes (a library's, or memory running out) ends the tool with
// "TOOL: internal error: ..." (or "out of memory") and exit status 1 instead
// of std::terminate's abort (exit 134 and a core).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_SUPPORT_LASTRESORT_H
#define CSA_TOOLS_SUPPORT_LASTRESORT_H

namespace csa::tools {

/// Installs the terminate handler for tool `name` (a string literal).
void installLastResortHandler(const char *name);

} // namespace csa::tools

#endif // CSA_TOOLS_SUPPORT_LASTRESORT_H

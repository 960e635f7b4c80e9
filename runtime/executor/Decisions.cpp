//===- Decisions.cpp - A run's discrete decisions, dumped or forced -------===//
#include "runtime/executor/Decisions.h"

#include "runtime/support/Dumps.h"
#include "runtime/support/Npy.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>

namespace csa::runtime::detail {

namespace {
std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "(" + absl::StrJoin(shape, ", ");
  if (shape.size() == 1)
    s += ",";
  return s + ")";
}
} // namespace

std::string decisionPath(const std::string &dir, int64_t run, const std::string &where,
                         const std::string &what) {
  std::string step = where;
  for (char &c : step)
    if (c == '[')
      c = '-';
  step.erase(std::remove(step.begin(), step.end(), ']'), step.end());
  return absl::StrFormat("%s/r%03d_%s_%s.npy", dir, run, step, what);
}

absl::Status readDecision(const std::string &path, const std::string &descr,
                          const std::vector<int64_t> &shape, void *data, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat(
        "--force-decisions: ", path, " does not exist (was the dump made by the same artifact, "
        "prompt and flags?)"));
  const std::string expected = npy::header(descr, shape);
  std::string got(expected.size(), '\0');
  in.read(got.data(), std::streamsize(got.size()));
  if (!in || got != expected) {
    // Say what the file holds where it is a header of the same layout.
    std::string what = "not a .npy of the expected layout";
    if (got.compare(0, 6, "\x93NUMPY") == 0 && got.size() > 10) {
      const size_t end = got.find('}');
      what = got.substr(10, end == std::string::npos ? 80 : end - 9);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "--force-decisions: ", path, " holds ", what, "; this run needs dtype '", descr,
        "' and shape ", shapeText(shape)));
  }
  in.read(static_cast<char *>(data), std::streamsize(bytes));
  if (!in || in.gcount() != std::streamsize(bytes))
    return absl::InvalidArgumentError(
        absl::StrCat("--force-decisions: ", path, " is shorter than its shape says"));
  if (in.peek() != std::char_traits<char>::eof())
    return absl::InvalidArgumentError(
        absl::StrCat("--force-decisions: ", path, " has bytes after its array"));
  return absl::OkStatus();
}

} // namespace csa::runtime::detail

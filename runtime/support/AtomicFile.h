//===- AtomicFile.h - Outputs that replace what a user saved only whole ---*- C++ -*-===//
//
// How every csa tool writes an output, so that nothing a user saved is lost
// and no reader sees half a file (docs/files.md):
//
// - A file is written to a unique temporary name in its own directory
//   (mkstemp), every write and the close checked, flushed to the disk
//   (fsync), and renamed over the target only then; on any failure the
//   temporary file is removed and the target is untouched.
// - A directory (an artifact, a PTX directory) is built in a unique
//   staging directory beside it (mkdtemp) and swapped in atomically with
//   renameat2(RENAME_EXCHANGE); the old one is removed only after the swap.
//   Two writers of one target never mix their files: each swaps in a whole
//   directory of its own, and the last swap wins.
// - A target that exists and is not a regular file or directory (a device
//   such as /dev/null or /dev/full, a pipe) is written in place, with the
//   write errors checked.
//
// Plain C++17 and POSIX, no LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_SUPPORT_ATOMICFILE_H
#define CSA_RUNTIME_SUPPORT_ATOMICFILE_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <string>
#include <string_view>

namespace csa::support {

/// Writes `bytes` as the file `path` (see above). The error names the path
/// and the failing step (e.g. "out.mlir: cannot write: No space left on
/// device").
absl::Status writeFileAtomically(const std::string &path, std::string_view bytes);

/// Writes `bytes` as the new file `path` inside a staging directory (not
/// yet visible to readers, so no rename; commitDirectory flushes it).
/// Every write and the close are checked.
absl::Status writeStagedFile(const std::string &path, std::string_view bytes);

/// A new, empty, uniquely named directory beside `target`
/// (`<parent>/.<name>.XXXXXX`), to be filled and then given to
/// commitDirectory.
absl::StatusOr<std::string> makeStagingDirectory(const std::string &target);

/// fsyncs every file of `staging` and the directory, then makes it
/// `target`: renamed when `target` does not exist, exchanged with it
/// atomically when it does (the old directory is then removed). On failure
/// `target` is as it was and `staging` is removed.
absl::Status commitDirectory(const std::string &staging, const std::string &target);

/// Removes a staging directory that will not be committed (errors ignored).
void discardStagingDirectory(const std::string &staging);

} // namespace csa::support

#endif // CSA_RUNTIME_SUPPORT_ATOMICFILE_H

//===- AtomicFile.cpp - Outputs that replace what a user saved only whole -===//
#include "runtime/support/AtomicFile.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace csa::support {

namespace fs = std::filesystem;

namespace {

absl::Status ioError(const std::string &path, const char *what, int error) {
  return absl::InternalError(absl::StrCat(path, ": cannot ", what, ": ", std::strerror(error)));
}

/// Writes all of `bytes` to `fd` (short writes and EINTR retried).
bool writeAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    bytes.remove_prefix(size_t(n));
  }
  return true;
}

/// The directory `path` lies in ("." when it names none) and its last
/// component.
std::pair<std::string, std::string> splitPath(const std::string &path) {
  fs::path p(path);
  std::string parent = p.parent_path().string();
  return {parent.empty() ? std::string(".") : parent, p.filename().string()};
}

/// Opens `path` with `flags`, writes all of `bytes` and closes it, every
/// step checked (the error names `opening`, the step that opens it).
absl::Status writeThrough(const std::string &path, int flags, const char *opening,
                          std::string_view bytes) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0666);
  if (fd < 0)
    return ioError(path, opening, errno);
  const bool ok = writeAll(fd, bytes);
  const int error = errno;
  if (::close(fd) != 0 && ok)
    return ioError(path, "write", errno);
  return ok ? absl::OkStatus() : ioError(path, "write", error);
}

bool isSpecialFile(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return false;
  return !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

absl::Status syncPath(const std::string &path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0)
    return ioError(path, "open", errno);
  const bool ok = ::fsync(fd) == 0 || errno == EINVAL; // some filesystems cannot
  const int error = errno;
  ::close(fd);
  return ok ? absl::OkStatus() : ioError(path, "flush", error);
}

} // namespace

absl::Status writeFileAtomically(const std::string &path, std::string_view bytes) {
  if (path.empty())
    return absl::InvalidArgumentError("an output needs a file name");
  if (isSpecialFile(path)) // a device or a pipe: written in place
    return writeThrough(path, O_WRONLY, "open", bytes);
  if (fs::is_directory(path))
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": is a directory, not a file"));
  auto [parent, name] = splitPath(path);
  std::string temp = absl::StrCat(parent, "/.", name, ".XXXXXX");
  std::vector<char> buffer(temp.begin(), temp.end());
  buffer.push_back('\0');
  int fd = ::mkstemp(buffer.data());
  if (fd < 0)
    return ioError(path, "create a temporary file beside it", errno);
  temp = buffer.data();
  auto failWith = [&](const char *what, int error) {
    ::close(fd);
    ::unlink(temp.c_str());
    return ioError(path, what, error);
  };
  if (!writeAll(fd, bytes))
    return failWith("write", errno);
  // The permissions a newly created file would get (mkstemp gives 0600).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  struct stat old;
  const mode_t mode = ::stat(path.c_str(), &old) == 0 ? (old.st_mode & 07777) : (0666 & ~mask);
  if (::fchmod(fd, mode) != 0)
    return failWith("set the permissions of", errno);
  if (::fsync(fd) != 0 && errno != EINVAL)
    return failWith("flush", errno);
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    return ioError(path, "write", error);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    return ioError(path, "replace", error);
  }
  return absl::OkStatus();
}

absl::Status writeStagedFile(const std::string &path, std::string_view bytes) {
  return writeThrough(path, O_WRONLY | O_CREAT | O_TRUNC, "create", bytes);
}

absl::StatusOr<std::string> makeStagingDirectory(const std::string &target) {
  auto [parent, name] = splitPath(target);
  if (name.empty() || name == "." || name == "..")
    return absl::InvalidArgumentError(absl::StrCat("'", target, "' does not name a directory to write"));
  std::string pattern = absl::StrCat(parent, "/.", name, ".XXXXXX");
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (!::mkdtemp(buffer.data()))
    return ioError(target, "create a staging directory beside it", errno);
  // mkdtemp gives 0700; the directory gets what mkdir would give it.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::chmod(buffer.data(), 0777 & ~mask);
  return std::string(buffer.data());
}

void discardStagingDirectory(const std::string &staging) {
  std::error_code ec;
  fs::remove_all(staging, ec);
}

absl::Status commitDirectory(const std::string &staging, const std::string &target) {
  auto fail = [&](absl::Status st) {
    discardStagingDirectory(staging);
    return st;
  };
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(staging, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (absl::Status st = syncPath(it->path().string(), it->is_directory()); !st.ok())
      return fail(st);
  }
  if (ec)
    return fail(ioError(staging, "list", ec.value()));
  if (absl::Status st = syncPath(staging, /*directory=*/true); !st.ok())
    return fail(st);
  // A target that does not exist yet: a plain rename (which fails rather
  // than replace a directory another writer has put there meanwhile).
  if (::rename(staging.c_str(), target.c_str()) == 0)
    return syncPath(splitPath(target).first, /*directory=*/true);
  if (errno != EEXIST && errno != ENOTEMPTY && errno != EISDIR)
    return fail(ioError(target, "create", errno));
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
    return fail(ioError(target, "replace (exchange with the new directory)", errno));
  // `staging` now holds the old directory.
  discardStagingDirectory(staging);
  return syncPath(splitPath(target).first, /*directory=*/true);
}

} // namespace csa::support

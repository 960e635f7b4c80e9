//===- KernelLibrary.cpp - An artifact's host kernels, loaded as hashed ---===//
#include "runtime/executor/KernelLibrary.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace csa::runtime {

absl::StatusOr<std::unique_ptr<KernelLibrary>>
KernelLibrary::openVerified(const artifact::Artifact &artifact, const std::string &object) {
  const std::string where = absl::StrCat("artifact ", artifact.directory(), ": ", object);
  auto bytes = artifact.readVerified(object);
  if (!bytes.ok())
    return bytes.status();
  auto systemError = [&](const char *what) {
    return absl::InternalError(absl::StrCat(where, ": cannot load: ", what, ": ",
                                            std::strerror(errno)));
  };
  int fd = memfd_create("csa-kernels", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return systemError("memfd_create");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  for (size_t done = 0; done < bytes->size();) {
    const ssize_t n = ::write(fd, bytes->data() + done, bytes->size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return systemError("write");
    done += size_t(n);
  }
  // Sealed: nothing can change the bytes between here and dlopen.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return systemError("sealing");
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const std::string message = dlerror();
    // Kernels instrumented with AddressSanitizer need its runtime here.
    const bool sanitized = message.find("__asan_") != std::string::npos;
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": cannot load the kernels: ", message,
        sanitized ? " (the artifact was compiled with csa-compile --sanitize-kernels: run it "
                    "with a csa-run built with CSA_SANITIZE=ON, as tools/scripts/sanitize.sh "
                    "builds)"
                  : ""));
  }
  std::unique_ptr<KernelLibrary> library(new KernelLibrary(handle));
  if (absl::Status st = artifact.checkKernelRecord(
          object, static_cast<const char *>(library->symbol("csa_kernels_config")),
          static_cast<const char *>(library->symbol("csa_kernels_schedule")));
      !st.ok())
    return st;
  return library;
}

KernelLibrary::~KernelLibrary() {
  if (handle_)
    dlclose(handle_);
}

void *KernelLibrary::symbol(const std::string &name) const { return dlsym(handle_, name.c_str()); }

} // namespace csa::runtime

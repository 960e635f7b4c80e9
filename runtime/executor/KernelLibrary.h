//===- KernelLibrary.h - An artifact's host kernels, loaded as hashed -*- C++ -*-===//
//
// Internal to the executor. An artifact's kernels/host.so is native code: it
// is trusted like any shared library (docs/files.md, "The artifact's code").
// What the runtime enforces is that the code it runs is the code the
// manifest hashed and was built for this artifact's model:
//
// * the library's bytes are read once, checked against manifest.json's size
//   and SHA-256 (Artifact::readVerified), copied into a sealed memfd and
//   dlopen'ed from there (/proc/self/fd/N), so a file swapped between the
//   check and the load is never loaded;
// * the library records the config and schedule it was compiled for (the
//   C strings csa_kernels_config and csa_kernels_schedule, written by
//   csa-compile), and a library built for another model or schedule is
//   refused before any kernel runs (Artifact::checkKernelRecord).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_EXECUTOR_KERNELLIBRARY_H
#define CSA_RUNTIME_EXECUTOR_KERNELLIBRARY_H

#include "runtime/artifact/Artifact.h"

#include "absl/status/statusor.h"

#include <memory>
#include <string>

namespace csa::runtime {

class KernelLibrary {
public:
  /// Loads listed file `object` of `artifact` as described above; errors
  /// name the artifact and the file.
  static absl::StatusOr<std::unique_ptr<KernelLibrary>>
  openVerified(const artifact::Artifact &artifact, const std::string &object);

  KernelLibrary(const KernelLibrary &) = delete;
  KernelLibrary &operator=(const KernelLibrary &) = delete;
  ~KernelLibrary();

  /// The address of exported symbol `name`, or null.
  void *symbol(const std::string &name) const;

private:
  explicit KernelLibrary(void *handle) : handle_(handle) {}
  void *handle_ = nullptr;
};

} // namespace csa::runtime

#endif // CSA_RUNTIME_EXECUTOR_KERNELLIBRARY_H

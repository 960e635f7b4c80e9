//===- HostThreads.h - The CPU executor's worker threads ---------*- C++ -*-===//
//
// Internal to the executor: the threads the CPU path runs a step's
// independent kernel calls on (rows of a linear, the routed experts of a
// csa.moe). A oneTBB arena of a fixed size, kept for the executor's life;
// with one thread every call runs on the caller, in order. Only calls whose
// results do not depend on how they are split are handed here, so the CPU
// executor's bits are the same for every thread count.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_EXECUTOR_HOSTTHREADS_H
#define CSA_RUNTIME_EXECUTOR_HOSTTHREADS_H

#include <cstdint>
#include <functional>
#include <memory>

namespace csa::runtime::detail {

class HostThreads {
public:
  /// `threads` workers (>= 1); 0: as many as the machine lets this process
  /// use (its CPU affinity mask).
  explicit HostThreads(int64_t threads);
  ~HostThreads();
  HostThreads(const HostThreads &) = delete;
  HostThreads &operator=(const HostThreads &) = delete;

  int64_t count() const { return threads; }
  /// What 0 resolves to.
  static int64_t available();

  /// Calls body(i) for i in [0, n), on up to count() threads, and returns
  /// when every call did. An exception of a call is rethrown here (the
  /// first one; the calls not yet started are dropped).
  void forEach(int64_t n, const std::function<void(int64_t)> &body);
  /// Cuts [0, rows) into at most count() ranges of whole `granule`s (the
  /// last may be shorter) and calls body(begin, end) for each as forEach
  /// does; fewer than 2 x granule rows (0 too) are one call on the caller.
  void forRowRanges(int64_t rows, int64_t granule,
                    const std::function<void(int64_t, int64_t)> &body);

private:
  int64_t threads;
  struct Arena;
  std::unique_ptr<Arena> arena; ///< null with one thread
};

} // namespace csa::runtime::detail

#endif // CSA_RUNTIME_EXECUTOR_HOSTTHREADS_H

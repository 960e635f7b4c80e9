//===- HostThreads.cpp - The CPU executor's worker threads ----------------===//
#include "runtime/executor/HostThreads.h"

#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>

namespace csa::runtime::detail {

struct HostThreads::Arena {
  explicit Arena(int threads)
      : // More threads than cores were asked for: oneTBB's process-wide limit
        // (the cores) is raised to them, else it keeps the arena at the
        // cores and warns on stderr.
        limit(threads > tbb::info::default_concurrency()
                  ? std::make_unique<tbb::global_control>(
                        tbb::global_control::max_allowed_parallelism, size_t(threads))
                  : nullptr),
        arena(threads) {}
  std::unique_ptr<tbb::global_control> limit;
  tbb::task_arena arena;
};

int64_t HostThreads::available() {
  return std::max<int64_t>(1, tbb::info::default_concurrency());
}

HostThreads::HostThreads(int64_t requested)
    : threads(requested > 0 ? requested : available()) {
  if (threads > 1)
    arena = std::make_unique<Arena>(int(std::min<int64_t>(threads, 1 << 16)));
}

HostThreads::~HostThreads() = default;

void HostThreads::forEach(int64_t n, const std::function<void(int64_t)> &body) {
  if (!arena || n < 2) {
    for (int64_t i = 0; i < n; ++i)
      body(i);
    return;
  }
  // One task a call: the calls are few (ranges, experts) and long.
  arena->arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1),
                      [&](const tbb::blocked_range<int64_t> &r) {
                        for (int64_t i = r.begin(); i != r.end(); ++i)
                          body(i);
                      },
                      tbb::simple_partitioner());
  });
}

void HostThreads::forRowRanges(int64_t rows, int64_t granule,
                               const std::function<void(int64_t, int64_t)> &body) {
  granule = std::max<int64_t>(granule, 1);
  if (!arena || rows < 2 * granule) {
    body(0, rows);
    return;
  }
  const int64_t granules = (rows + granule - 1) / granule;
  const int64_t ranges = std::min(granules, threads);
  const int64_t per = (granules + ranges - 1) / ranges; // granules a range
  const int64_t count = (granules + per - 1) / per;
  forEach(count, [&](int64_t i) {
    const int64_t begin = i * per * granule;
    body(begin, std::min(rows, begin + per * granule));
  });
}

} // namespace csa::runtime::detail

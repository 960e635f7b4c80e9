//===- Recall.cpp - How much attention mass a selection captures ----------===//
//
// ExecutorOptions::analyzeRecall: after a sparse attention step with a
// global cache, every entry the cache holds is dequantized with the step's
// own kernel, and for each query row the dense softmax over its visible
// entries is computed on the host (fp64, an analysis, not a kernel) to see
// how much of that mass the row's top-k set holds (RecallEntry).
//
//===----------------------------------------------------------------------===//
#include "runtime/executor/ExecutorImpl.h"
#include "runtime/numerics/Formats.h"

#include <cmath>

namespace csa::runtime {

namespace {

/// One query row's shares.
struct RowRecall {
  int64_t visible = 0, selected = 0;
  double recall = 0, ceiling = 0;
};

} // namespace

absl::Status Executor::Impl::analyzeRecall(Step &s, Tensor &q, Tensor &selected) {
  const int64_t n = q.rows(), heads = attr(s, "heads"), dim = attr(s, "dim");
  const double scale = s.call->attrs.at("scale").get<double>();
  CacheState &c = cache(s, "cache");
  const CacheBuffer &b = cacheBuffer(s, "cache");
  if (b.ratio < 1)
    return absl::InternalError(absl::StrCat("the global cache '", b.id, "' has ratio ", b.ratio));
  const int64_t held = c.mainEntries, k = selected.dims.at(1);
  const int64_t selRow = q.base - selected.base;
  if (selRow < 0 || selRow + n > selected.rows())
    return absl::InternalError(absl::StrCat(
        "recall: the top-k set has no rows for positions ", q.base, "..", q.base + n - 1));

  // Every held entry, dequantized as the attention's kernels do.
  Tensor *kv = nullptr;
  if (held > 0) {
    Tensor &mainRows = gatherParts("recall.main_rows", c, b, 0, b.mainRowBytes, held);
    kv = &kernelScratch("recall.rows", 2, {held, dim});
    auto dm = desc<2>(mainRows.ptr(), {held, b.mainRowBytes});
    auto dv = desc<2>(kv->ptr(), {held, dim});
    invoke(s, "dequantize_selected", &dm, &dv);
    onHost(kv->ptr());
  }
  onHost(q.ptr());
  onHost(selected.ptr());

  std::vector<RowRecall> rows(static_cast<size_t>(n));
  auto analyzeRow = [&](int64_t i) {
    RowRecall &r = rows[size_t(i)];
    r.visible = std::min(held, (q.base + i + 1) / b.ratio);
    if (r.visible == 0)
      return;
    // Each entry's mass: its softmax probability, averaged over the heads.
    std::vector<double> mass(size_t(r.visible), 0.0), logit(size_t(r.visible));
    const uint16_t *queries = q.as<uint16_t>() + i * heads * dim;
    for (int64_t h = 0; h < heads; ++h) {
      const uint16_t *qh = queries + h * dim;
      double top = -INFINITY;
      for (int64_t e = 0; e < r.visible; ++e) {
        const uint16_t *ke = kv->as<uint16_t>() + e * dim;
        double dot = 0;
        for (int64_t d = 0; d < dim; ++d)
          dot += double(numerics::bf16ToFloat(qh[d])) * double(numerics::bf16ToFloat(ke[d]));
        logit[size_t(e)] = scale * dot;
        top = std::max(top, logit[size_t(e)]);
      }
      double sum = 0;
      for (int64_t e = 0; e < r.visible; ++e)
        sum += (logit[size_t(e)] = std::exp(logit[size_t(e)] - top));
      for (int64_t e = 0; e < r.visible; ++e)
        mass[size_t(e)] += logit[size_t(e)] / sum / double(heads);
    }
    const int32_t *set = selected.as<int32_t>() + (selRow + i) * k;
    std::vector<bool> taken(size_t(r.visible), false);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = set[j];
      if (e < 0 || e >= r.visible || taken[size_t(e)])
        continue;
      taken[size_t(e)] = true;
      ++r.selected;
      r.recall += mass[size_t(e)];
    }
    // The most mass as many entries hold: the largest `selected` masses.
    std::nth_element(mass.begin(), mass.begin() + r.selected, mass.end(),
                     std::greater<double>());
    for (int64_t j = 0; j < r.selected; ++j)
      r.ceiling += mass[size_t(j)];
    // Rounding may put the sums a few ulps apart where the set is the best.
    r.ceiling = std::max(r.ceiling, r.recall);
  };
  // Independent rows of host arithmetic: split among the CPU's threads
  // (load() made them).
  hostThreads->forEach(n, analyzeRow);

  RecallEntry entry;
  entry.run = calls;
  entry.entry = s.where.substr(0, s.where.find('['));
  entry.layer = s.layer;
  entry.firstPosition = q.base;
  entry.k = k;
  entry.recallMin = 1;
  for (const RowRecall &r : rows) {
    if (r.visible == 0)
      continue;
    ++entry.rows;
    entry.visible += double(r.visible);
    entry.selected += double(r.selected);
    entry.recall += r.recall;
    entry.ceiling += r.ceiling;
    entry.recallMin = std::min(entry.recallMin, r.recall);
  }
  if (entry.rows == 0)
    entry.recallMin = 0;
  else
    for (double *mean : {&entry.visible, &entry.selected, &entry.recall, &entry.ceiling})
      *mean /= double(entry.rows);
  recallEntries.push_back(std::move(entry));
  return absl::OkStatus();
}

} // namespace csa::runtime

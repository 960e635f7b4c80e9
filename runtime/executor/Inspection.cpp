//===- Inspection.cpp - A step's decisions and hidden states, dumped ------===//
//
// Executor::Impl::decision (a top-k set, HSI pool or MoE choice written to
// --dump-decisions' directory, or read from --force-decisions' in its
// place) and dump (--dump-hidden's blocks); the files' names and formats
// are Decisions.h's and runtime/support/Dumps.h's.
//
//===----------------------------------------------------------------------===//
#include "runtime/executor/Decisions.h"
#include "runtime/executor/ExecutorImpl.h"
#include "runtime/support/Dumps.h"

namespace csa::runtime {

absl::Status Executor::Impl::decision(Step &s, const char *what, Tensor &t,
                                      const char *descr) {
  const size_t bytes = size_t(t.numel() * t.elementBytes);
  if (!options.forceDecisions.empty()) {
    if (absl::Status st = detail::readDecision(
            detail::decisionPath(options.forceDecisions, calls, s.where, what), descr, t.dims,
            t.data.data(), bytes);
        !st.ok())
      return st;
    hostRefilled(t.ptr());
  }
  if (!options.dumpDecisions.empty()) {
    onHost(t.ptr());
    return dump(s, options.dumpDecisions, what, descr, t.dims, t.data.data(),
                size_t(t.elementBytes));
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::dump(Step &s, const std::string &dir, const char *what,
                                  const char *descr, const std::vector<int64_t> &dims,
                                  const void *data, size_t elementBytes) {
  if (!options.dumpLayers.empty()) {
    auto layer = s.call->attrs.find("layer");
    if (layer == s.call->attrs.end() || !layer->is_number_integer() ||
        std::find(options.dumpLayers.begin(), options.dumpLayers.end(),
                  layer->get<int64_t>()) == options.dumpLayers.end())
      return absl::OkStatus();
  }
  const int64_t rows = dims.empty() ? 1 : dims[0];
  auto clampRow = [rows](int64_t r) { return std::clamp<int64_t>(r < 0 ? r + rows : r, 0, rows); };
  const int64_t begin = clampRow(options.dumpRowsBegin),
                end = std::max(begin, options.dumpRowsEnd ? clampRow(*options.dumpRowsEnd) : rows);
  size_t rowBytes = elementBytes;
  for (size_t i = 1; i < dims.size(); ++i)
    rowBytes *= size_t(dims[i]);
  std::vector<int64_t> shape = dims;
  if (!shape.empty())
    shape[0] = end - begin;
  const std::string path = detail::decisionPath(dir, calls, s.where, what);
  if (absl::Status st =
          npy::writeArray(path, descr, shape,
                                static_cast<const uint8_t *>(data) + size_t(begin) * rowBytes,
                                size_t(end - begin) * rowBytes);
      !st.ok())
    return st;
  // The folder's index names the file's call, entry and layer block, so
  // that a folder another program wrote pairs with it (runtime/support/Dumps.h).
  npy::DumpEntry entry;
  entry.file = path.substr(dir.size() + 1);
  entry.call = calls;
  entry.entry = s.where.substr(0, s.where.find('['));
  if (auto block = s.call->attrs.find("block");
      block != s.call->attrs.end() && block->is_string())
    entry.block = block->get<std::string>();
  entry.what = what;
  return npy::appendDumpIndex(dir, entry);
}

} // namespace csa::runtime

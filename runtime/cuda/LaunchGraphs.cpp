//===- LaunchGraphs.cpp - Runs of kernel launches as CUDA graphs ----------===//
#include "runtime/cuda/LaunchGraphs.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <tuple>
#include <utility>

namespace csa::cuda {

LaunchGraphs::LaunchGraphs(GraphLauncher &gpu, const LaunchGraphOptions &options)
    : gpu_(gpu), options_(options) {
  options_.minLaunches = std::max<int64_t>(options_.minLaunches, 1);
  options_.maxLaunches = std::max(options_.maxLaunches, options_.minLaunches);
  options_.maxGraphs = std::max<int64_t>(options_.maxGraphs, 1);
}

LaunchGraphs::~LaunchGraphs() { dropAll(); }

void LaunchGraphs::dropAll() {
  for (auto &[name, entry] : entries_) {
    for (auto &[kernels, slots] : entry.graphs)
      for (Slot &slot : slots)
        if (slot.graph)
          gpu_.destroyGraph(slot.graph);
    entry.graphs.clear();
    entry.used.clear();
  }
  kept_ = 0;
}

absl::Status LaunchGraphs::begin(const std::string &entry) {
  absl::Status st = flush();
  if (current_)
    current_->mostLaunches = std::max(current_->mostLaunches, current_->launches);
  current_ = &entries_[entry];
  current_->used.clear();
  current_->launches = 0;
  current_->boundaries = false;
  lane_ = joins_ = 0;
  return st;
}

bool LaunchGraphs::equalParts() const {
  return options_.partsPerRun > 0 && current_ && current_->mostLaunches > 0;
}

absl::Status LaunchGraphs::boundary() {
  if (current_)
    current_->boundaries = true;
  // A piece holding a branch not joined yet runs on until maxLaunches more
  // launches are beside the branch: cut right after it, the branch would run
  // alone (the next piece waits for the whole of this one).
  if (!equalParts() && int64_t(pending_.size()) >= options_.maxLaunches &&
      (!openBranches_ || besideBranch_ >= options_.maxLaunches))
    return flush();
  return absl::OkStatus();
}

int64_t LaunchGraphs::launchesPerGraph() const {
  if (equalParts()) {
    const int64_t parts = options_.partsPerRun;
    return std::max((current_->mostLaunches + parts - 1) / parts, options_.minLaunches);
  }
  // Cut at boundaries, a piece may run past its size to the next one.
  return current_ && current_->boundaries ? 4 * options_.maxLaunches : options_.maxLaunches;
}

void LaunchGraphs::mark(BranchMark m, int lane) {
  switch (m) {
  case BranchMark::Begin:
    lane_ = uint8_t(std::clamp(lane, 0, kMaxBranches));
    break;
  case BranchMark::End:
    lane_ = 0;
    break;
  case BranchMark::Join:
    if (lane >= 1 && lane <= kMaxBranches)
      joins_ |= uint8_t(1u << (lane - 1));
    break;
  }
}

std::vector<GraphEdge> LaunchGraphs::graphEdges(const std::vector<KernelLaunch> &launches) {
  std::vector<GraphEdge> edges;
  // The last launch of the chain (lane 0) and of each branch in this graph.
  std::optional<size_t> last[kMaxBranches + 1];
  for (size_t i = 0; i < launches.size(); ++i) {
    const KernelLaunch &k = launches[i];
    const size_t lane = std::min<size_t>(k.lane, kMaxBranches);
    std::vector<GraphEdge> in;
    // The joined branches first: a branch joined by the first launch of a
    // new branch in its lane ends there, and the new one starts afresh.
    for (int b = 1; b <= kMaxBranches; ++b)
      if (((k.joins >> (b - 1)) & 1u) && last[b]) {
        in.push_back({*last[b], i, /*withinLane=*/false});
        last[b].reset();
      }
    if (last[lane])
      in.push_back({*last[lane], i, /*withinLane=*/true});
    else if (lane != 0 && last[0])
      in.push_back({*last[0], i, /*withinLane=*/false});
    std::sort(in.begin(), in.end(),
              [](const GraphEdge &x, const GraphEdge &y) { return x.from < y.from; });
    edges.insert(edges.end(), in.begin(), in.end());
    last[lane] = i;
  }
  return edges;
}

namespace {
using Ranges = std::vector<std::pair<DevicePtr, DevicePtr>>;
/// The first bytes two sorted, disjoint range lists share.
std::optional<std::pair<DevicePtr, DevicePtr>> firstShared(const Ranges &a, const Ranges &b) {
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    const DevicePtr lo = std::max(a[i].first, b[j].first),
                    hi = std::min(a[i].second, b[j].second);
    if (lo < hi)
      return std::make_pair(lo, hi);
    (a[i].second < b[j].second ? i : j)++;
  }
  return std::nullopt;
}
} // namespace

void normalizeRanges(std::vector<std::pair<DevicePtr, DevicePtr>> &ranges) {
  ranges.erase(std::remove_if(ranges.begin(), ranges.end(),
                              [](const auto &r) { return r.first >= r.second; }),
               ranges.end());
  std::sort(ranges.begin(), ranges.end());
  size_t kept = 0;
  for (const auto &r : ranges) {
    if (kept > 0 && r.first <= ranges[kept - 1].second)
      ranges[kept - 1].second = std::max(ranges[kept - 1].second, r.second);
    else
      ranges[kept++] = r;
  }
  ranges.resize(kept);
}

std::vector<GraphHazard> LaunchGraphs::hazards(const std::vector<KernelLaunch> &launches) {
  const size_t n = launches.size(), words = (n + 63) / 64;
  // before[i]: the launches with a path of edges to i (edges go from an
  // earlier launch to a later one, so one pass in order closes them).
  std::vector<std::vector<uint64_t>> before(n, std::vector<uint64_t>(words, 0));
  for (const GraphEdge &e : graphEdges(launches)) {
    for (size_t w = 0; w < words; ++w)
      before[e.to][w] |= before[e.from][w];
    before[e.to][e.from / 64] |= uint64_t(1) << (e.from % 64);
  }
  std::vector<GraphHazard> found;
  for (size_t j = 0; j < n; ++j) {
    const LaunchFootprint *b = launches[j].footprint.get();
    if (!b)
      continue;
    for (size_t i = 0; i < j; ++i) {
      const LaunchFootprint *a = launches[i].footprint.get();
      if (!a || ((before[j][i / 64] >> (i % 64)) & 1u))
        continue;
      std::optional<std::pair<DevicePtr, DevicePtr>> shared;
      for (auto [x, y] : {std::pair{&a->written, &b->written}, std::pair{&a->written, &b->read},
                          std::pair{&a->read, &b->written}})
        if (auto s = firstShared(*x, *y); s && (!shared || s->first < shared->first))
          shared = s;
      if (shared)
        found.push_back({i, j, shared->first, shared->second});
    }
  }
  std::sort(found.begin(), found.end(), [](const GraphHazard &x, const GraphHazard &y) {
    return std::tie(x.first, x.second) < std::tie(y.first, y.second);
  });
  return found;
}

std::string LaunchGraphs::describe(const std::vector<KernelLaunch> &launches,
                                   const GraphHazard &h) {
  auto name = [&](size_t i) {
    const KernelLaunch &k = launches[i];
    std::string kernel = k.footprint && !k.footprint->kernel.empty() ? k.footprint->kernel : "?";
    return "launch " + std::to_string(i) + " (" + kernel + ", lane " + std::to_string(k.lane) +
           ")";
  };
  auto written = [&](size_t i) {
    const LaunchFootprint *f = launches[i].footprint.get();
    return f && firstShared(f->written, {{h.begin, h.end}}).has_value();
  };
  char range[64];
  std::snprintf(range, sizeof range, "[0x%llx, 0x%llx)", static_cast<unsigned long long>(h.begin),
                static_cast<unsigned long long>(h.end));
  return name(h.first) + " and " + name(h.second) + " of a graph of " +
         std::to_string(launches.size()) + " launches both touch bytes " + range + ", " +
         (written(h.first) && written(h.second) ? "both writing"
          : written(h.first)                    ? "the first writing"
                                                : "the second writing") +
         ", with no dependency between them";
}

absl::Status LaunchGraphs::add(KernelLaunch k) {
  ++counters_.launches;
  k.lane = lane_;
  k.joins = joins_;
  joins_ = 0;
  openBranches_ &= uint8_t(~k.joins);
  if (k.lane != 0) {
    ++counters_.branchLaunches;
    if (!openBranches_)
      besideBranch_ = 0;
    openBranches_ |= uint8_t(1u << (k.lane - 1));
  } else if (openBranches_) {
    ++besideBranch_;
  }
  if (current_)
    ++current_->launches;
  pending_.push_back(std::move(k));
  // Branches with no chain launch beside them are a fan-out (a batch step's
  // sequences, each on its lane): cut into pieces of the usual size, each
  // lane would hold a launch or two, and every piece waits for the whole
  // piece before it; such a piece holds kMaxBranches times as many.
  const int64_t limit = launchesPerGraph() * (openBranches_ && !besideBranch_ && !equalParts()
                                                  ? kMaxBranches
                                                  : 1);
  if (int64_t(pending_.size()) >= limit)
    return flush();
  return absl::OkStatus();
}

absl::Status LaunchGraphs::flush() {
  std::vector<KernelLaunch> run = std::move(pending_);
  pending_.clear();
  openBranches_ = 0; // the graph ends with its branches
  if (run.empty())
    return absl::OkStatus();
  if (int64_t(run.size()) < options_.minLaunches) {
    for (const KernelLaunch &k : run) {
      ++counters_.direct;
      if (absl::Status st = gpu_.launchNow(k); !st.ok())
        return st;
    }
    return absl::OkStatus();
  }
  if (options_.checkHazards)
    if (std::vector<GraphHazard> found = hazards(run); !found.empty()) {
      std::string message = absl::StrCat("graph hazard (", found.size(), " in this graph",
                                         found.size() > 4 ? "; the first 4" : "", "): ");
      for (size_t h = 0; h < found.size() && h < 4; ++h)
        absl::StrAppend(&message, h ? "; " : "", describe(run, found[h]));
      return absl::InternalError(message);
    }
  if (!current_)
    current_ = &entries_[""];
  if (kept_ >= options_.maxGraphs) {
    counters_.graphsDropped += kept_;
    dropAll();
  }
  Kernels kernels(run.size());
  for (size_t i = 0; i < run.size(); ++i)
    kernels[i] = {run[i].fn, uint16_t(run[i].lane | run[i].joins << 8)};
  std::vector<Slot> &slots = current_->graphs[kernels];
  size_t &used = current_->used[kernels];
  if (used == slots.size())
    slots.emplace_back();
  Slot &slot = slots[used++];
  if (slot.graph) {
    for (size_t i = 0; i < run.size(); ++i) {
      if (run[i] == slot.launches[i])
        continue;
      if (absl::Status st = gpu_.updateGraphNode(slot.graph, i, run[i]); !st.ok()) {
        // The graph may be half updated: build it afresh next time.
        gpu_.destroyGraph(slot.graph);
        slot.graph = nullptr;
        slot.launches.clear();
        --kept_;
        return st;
      }
      ++counters_.nodesUpdated;
      slot.launches[i] = std::move(run[i]);
    }
  } else {
    auto graph = gpu_.createGraph(run);
    if (!graph.ok())
      return graph.status();
    ++counters_.graphsBuilt;
    ++kept_;
    slot.graph = *graph;
    slot.launches = std::move(run);
  }
  ++counters_.graphLaunches;
  return gpu_.launchGraph(slot.graph);
}

} // namespace csa::cuda

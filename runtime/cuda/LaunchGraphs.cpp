//===- LaunchGraphs.cpp - Runs of kernel launches as CUDA graphs ----------===//
#include "runtime/cuda/LaunchGraphs.h"

#include <algorithm>
#include <optional>
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
  order_ = KernelLaunch::Order::Chain;
  inBranch_ = false;
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
      (!branchAt_ || besideBranch_ >= options_.maxLaunches))
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

void LaunchGraphs::beginBranch() {
  inBranch_ = true;
  order_ = KernelLaunch::Order::Branch;
}

void LaunchGraphs::endBranch() {
  inBranch_ = false;
  if (order_ == KernelLaunch::Order::Branch)
    order_ = KernelLaunch::Order::Chain;
}

void LaunchGraphs::joinBranch() {
  if (!inBranch_)
    order_ = KernelLaunch::Order::Join;
}

std::vector<GraphEdge> LaunchGraphs::graphEdges(const std::vector<KernelLaunch> &launches) {
  using Order = KernelLaunch::Order;
  std::vector<GraphEdge> edges;
  std::optional<size_t> chain, branch; // the last launch of each
  for (size_t i = 0; i < launches.size(); ++i) {
    switch (launches[i].order) {
    case Order::Branch:
      if (branch)
        edges.push_back({*branch, i, /*withinLane=*/true});
      else if (chain)
        edges.push_back({*chain, i, /*withinLane=*/false});
      branch = i;
      break;
    case Order::Join: {
      GraphEdge in[2];
      size_t count = 0;
      if (chain)
        in[count++] = {*chain, i, /*withinLane=*/true};
      if (branch)
        in[count++] = {*branch, i, /*withinLane=*/false};
      if (count == 2 && in[1].from < in[0].from)
        std::swap(in[0], in[1]);
      edges.insert(edges.end(), in, in + count);
      branch.reset();
      chain = i;
      break;
    }
    case Order::Chain:
      if (chain)
        edges.push_back({*chain, i, /*withinLane=*/true});
      chain = i;
      break;
    }
  }
  return edges;
}

absl::Status LaunchGraphs::add(KernelLaunch k) {
  ++counters_.launches;
  k.order = order_;
  if (order_ == KernelLaunch::Order::Join) {
    order_ = KernelLaunch::Order::Chain;
    branchAt_.reset();
  } else if (order_ == KernelLaunch::Order::Branch && !branchAt_) {
    branchAt_ = pending_.size();
    besideBranch_ = 0;
  } else if (order_ == KernelLaunch::Order::Chain && branchAt_) {
    ++besideBranch_;
  }
  if (current_)
    ++current_->launches;
  pending_.push_back(std::move(k));
  if (int64_t(pending_.size()) >= launchesPerGraph())
    return flush();
  return absl::OkStatus();
}

absl::Status LaunchGraphs::flush() {
  std::vector<KernelLaunch> run = std::move(pending_);
  pending_.clear();
  branchAt_.reset(); // the graph ends with its branch
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
  if (!current_)
    current_ = &entries_[""];
  if (kept_ >= options_.maxGraphs) {
    counters_.graphsDropped += kept_;
    dropAll();
  }
  Kernels kernels(run.size());
  for (size_t i = 0; i < run.size(); ++i)
    kernels[i] = {run[i].fn, run[i].order};
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

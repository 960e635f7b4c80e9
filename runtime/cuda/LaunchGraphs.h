//===- LaunchGraphs.h - Runs of kernel launches as CUDA graphs ---*- C++ -*-===//
//
// A decode step cannot be one CUDA graph: the host reads results in the
// middle of it (a layer's top-k set, the MoE expert counts) and decides the
// next launches from them. What can be a graph is each run of launches
// between two such reads (vLLM's "piecewise" graphs). LaunchGraphs records
// launches, and when the run ends (any copy, fill, event or wait; or
// `maxLaunches` recorded) issues it as one graph launch.
//
// Graphs are kept per plan entry point and per sequence of kernels: the k-th
// run of kernels f, g, h in this decode step reuses the graph of the k-th
// run of f, g, h in an earlier step (steps differ in which runs they have:
// a compressor completes a group every `ratio` tokens, a cache grows).
// Launches that changed (a new position, more cache entries, another
// expert's weights) are updated in the instantiated graph node by node
// (cuGraphExecKernelNodeSetParams); only a sequence of kernels not seen
// before builds a graph. Runs shorter than `minLaunches` are launched
// directly. Where the run is cut into graphs is LaunchGraphOptions' choice:
// every maxLaunches launches, or a fixed number of graphs a run (partsPerRun).
//
// The CUDA calls are behind GraphLauncher, so that this bookkeeping is
// tested without a GPU. Plain C++17, no LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_CUDA_LAUNCHGRAPHS_H
#define CSA_RUNTIME_CUDA_LAUNCHGRAPHS_H

#include "runtime/cuda/CudaDriver.h"

#include "absl/status/status.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace csa::cuda {

struct LaunchGraphOptions {
  /// Runs of fewer launches go out one by one.
  int64_t minLaunches = 2;
  /// A run is issued once this many launches are recorded, so that the GPU
  /// starts on a long run while the host records the rest.
  int64_t maxLaunches = 8;
  /// When > 0, a run of an entry is cut into this many graphs of equal
  /// launches instead (sized from the most launches a run of that entry had:
  /// 1 makes a decode step one graph, independent of the layer count; more
  /// let the GPU start while the host records the rest). An entry's first
  /// run goes out in maxLaunches pieces.
  int64_t partsPerRun = 0;
  /// The launches of a graph depend on each other programmatically (CUDA's
  /// programmatic dependent launch): a kernel's blocks are scheduled while
  /// the one before still runs and wait for it at their first instruction
  /// (griddepcontrol.wait, which every kernel of the NVPTX back end and the
  /// device's builtins start with). Off: each launch starts when the one
  /// before has ended.
  bool programmatic = false;
  /// At most this many graphs are kept: past it, every kept graph is
  /// destroyed and the runs build theirs again (a long-lived process whose
  /// prompts keep bringing new sequences of kernels stays bounded).
  int64_t maxGraphs = 4096;
  /// Every graph is checked before it goes out (hazards()): two launches
  /// that touch the same bytes, one of them writing, with no path of edges
  /// between them fail the run, naming both. Needs the launches' footprints
  /// (the emulated device's; a launch without one is not checked).
  bool checkHazards = false;
};

struct LaunchGraphCounters {
  int64_t launches = 0;      ///< kernel launches recorded or issued
  int64_t direct = 0;        ///< of those, launched one by one
  int64_t graphLaunches = 0; ///< graphs launched
  int64_t graphsBuilt = 0;   ///< graphs created and instantiated
  int64_t nodesUpdated = 0;  ///< launches changed in an instantiated graph
  int64_t graphsDropped = 0; ///< destroyed at maxGraphs
  int64_t branchLaunches = 0; ///< launches recorded on a branch (lane > 0)
};

/// What LaunchGraphs::mark does: a branch begins, ends or is joined.
enum class BranchMark : uint8_t { Begin, End, Join };
/// Branches a graph may hold at once (lanes 1 .. kMaxBranches).
constexpr int kMaxBranches = 8;

/// An edge of a graph of launches (LaunchGraphs::graphEdges): node `to`
/// runs after node `from`. An edge within the chain or within a branch may
/// be programmatic (LaunchGraphOptions::programmatic); one between them
/// (where a branch leaves the chain, where it joins) is a full dependency.
struct GraphEdge {
  size_t from = 0, to = 0;
  bool withinLane = true;
  bool operator==(const GraphEdge &o) const {
    return from == o.from && to == o.to && withinLane == o.withinLane;
  }
};

/// Two launches of a graph that may run in either order (no path of edges
/// between them) and touch the same bytes, one of them writing: `first` <
/// `second`, and [begin, end) the first bytes they share.
struct GraphHazard {
  size_t first = 0, second = 0;
  DevicePtr begin = 0, end = 0;
};

/// Sorts `ranges` ([begin, end) pairs) and merges those that overlap or
/// touch, dropping empty ones (a LaunchFootprint's form).
void normalizeRanges(std::vector<std::pair<DevicePtr, DevicePtr>> &ranges);

/// What LaunchGraphs needs from the GPU (the Driver; a fake in tests).
class GraphLauncher {
public:
  using Graph = void *;
  virtual ~GraphLauncher() = default;
  virtual absl::Status launchNow(const KernelLaunch &k) = 0;
  /// A graph of `launches` with the edges graphEdges(launches) gives (a
  /// chain, each after the one before as on a stream, where no launch is
  /// on a branch), instantiated.
  virtual absl::StatusOr<Graph> createGraph(const std::vector<KernelLaunch> &launches) = 0;
  /// Node `node` of the instantiated graph launches `k` from now on.
  virtual absl::Status updateGraphNode(Graph graph, size_t node,
                                       const KernelLaunch &k) = 0;
  virtual absl::Status launchGraph(Graph graph) = 0;
  virtual void destroyGraph(Graph graph) = 0;
};

class LaunchGraphs {
public:
  LaunchGraphs(GraphLauncher &gpu, const LaunchGraphOptions &options);
  ~LaunchGraphs();
  LaunchGraphs(const LaunchGraphs &) = delete;
  LaunchGraphs &operator=(const LaunchGraphs &) = delete;

  /// Starts a run of `entry`: issues what is recorded, and matches the
  /// graphs that follow with those of `entry`'s last run, in order.
  absl::Status begin(const std::string &entry);
  /// Records `k`; issues the run once it holds maxLaunches (4 x maxLaunches
  /// in a run whose caller marks boundaries; kMaxBranches times that while
  /// branches are open with no launch of the chain beside them, a fan-out).
  absl::Status add(KernelLaunch k);
  /// A place where the caller would cut the run (the start of a plan step):
  /// in maxLaunches pieces, a piece is cut here once it holds maxLaunches,
  /// so that pieces start at the same plan steps in every step and a kept
  /// graph meets the same layer's launches again (fewer node updates than
  /// pieces cut at fixed counts, which an extra launch shifts). A piece
  /// with a branch not joined yet is cut only once maxLaunches launches are
  /// beside the branch.
  absl::Status boundary();
  /// Issues the launches recorded so far.
  absl::Status flush();
  /// The launches recorded from mark(Begin, lane) until mark(End) go on
  /// branch `lane` (1 .. kMaxBranches) beside the chain: after the chain's
  /// launch before the branch began, or the branch's launch before them, and
  /// running while the chain goes on; after mark(Join, lane) the next launch
  /// also waits for the branch's last. (Plan steps whose results are needed
  /// only some steps later, such as mHC's mix, leave the critical path.)
  /// Outside a graph, and across the graphs of a run, every launch is after
  /// the one before, so a branch is only a permission.
  void mark(BranchMark m, int lane);

  /// The edges of a graph of `launches`, by their lanes: a launch after the
  /// launch before it in its lane (the first of a branch after the chain's
  /// launch before it), and after the last launch of each branch it joins.
  /// Edges are listed by `to`, then `from`.
  static std::vector<GraphEdge> graphEdges(const std::vector<KernelLaunch> &launches);
  /// The hazards of a graph of `launches` (graphEdges' edges; their
  /// footprints), by `first`, then `second`.
  static std::vector<GraphHazard> hazards(const std::vector<KernelLaunch> &launches);
  /// "launch 3 (kernel_a, lane 1) and launch 7 (kernel_b, lane 2) ...": one
  /// hazard of `launches` as a message.
  static std::string describe(const std::vector<KernelLaunch> &launches, const GraphHazard &h);
  const LaunchGraphCounters &counters() const { return counters_; }

private:
  struct Slot {
    GraphLauncher::Graph graph = nullptr;
    std::vector<KernelLaunch> launches; ///< what the graph launches now
  };
  /// A run's kernels with their places in the graph (lane and joins): runs
  /// that differ in either are different graphs.
  using Kernels = std::vector<std::pair<Function, uint16_t>>;
  struct Entry {
    /// Graphs by sequence of kernels: the k-th is for the k-th run of that
    /// sequence in a run of the entry.
    std::map<Kernels, std::vector<Slot>> graphs;
    std::map<Kernels, size_t> used; ///< runs of each so far in this run
    int64_t launches = 0;     ///< launches in its current (or last) run
    bool boundaries = false;  ///< its current run's caller marks boundaries
    int64_t mostLaunches = 0; ///< the most launches of its runs before
  };
  GraphLauncher &gpu_;
  LaunchGraphOptions options_;
  std::map<std::string, Entry> entries_;
  Entry *current_ = nullptr; ///< the running entry's
  std::vector<KernelLaunch> pending_;
  uint8_t lane_ = 0, joins_ = 0; ///< of the next add()
  /// Branches with launches in pending_ not joined yet (bit L - 1), and the
  /// chain's launches recorded since the first of them began.
  uint8_t openBranches_ = 0;
  int64_t besideBranch_ = 0;
  int64_t kept_ = 0; ///< graphs kept, over all entries
  LaunchGraphCounters counters_;
  void dropAll();
  /// Launches a graph holds before it is issued.
  int64_t launchesPerGraph() const;
  /// Whether the run is cut into partsPerRun equal parts.
  bool equalParts() const;

};

} // namespace csa::cuda

#endif // CSA_RUNTIME_CUDA_LAUNCHGRAPHS_H

//===- LaunchGraphsTest.cpp - Runs of launches as graphs, without a GPU ---===//
//
// A fake GraphLauncher keeps what each graph would launch; the tests check
// that what runs (directly or through a graph) is exactly what was recorded,
// in order, and how much graph work that took.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/LaunchGraphs.h"

#include <gtest/gtest.h>

#include <memory>

namespace {

using csa::cuda::GraphLauncher;
using csa::cuda::KernelLaunch;
using csa::cuda::LaunchGraphOptions;
using csa::cuda::LaunchGraphs;

class FakeGpu : public GraphLauncher {
public:
  struct FakeGraph {
    std::vector<KernelLaunch> nodes;
  };
  std::vector<KernelLaunch> ran; ///< every launch, in the order it ran
  int created = 0, destroyed = 0, updates = 0, graphLaunches = 0;
  bool failUpdates = false;
  std::vector<std::unique_ptr<FakeGraph>> graphs;

  absl::Status launchNow(const KernelLaunch &k) override {
    ran.push_back(k);
    return absl::OkStatus();
  }
  absl::StatusOr<Graph> createGraph(const std::vector<KernelLaunch> &launches) override {
    ++created;
    graphs.push_back(std::make_unique<FakeGraph>(FakeGraph{launches}));
    return static_cast<Graph>(graphs.back().get());
  }
  absl::Status updateGraphNode(Graph graph, size_t node, const KernelLaunch &k) override {
    if (failUpdates)
      return absl::InternalError("update refused");
    ++updates;
    static_cast<FakeGraph *>(graph)->nodes.at(node) = k;
    return absl::OkStatus();
  }
  absl::Status launchGraph(Graph graph) override {
    ++graphLaunches;
    for (const KernelLaunch &k : static_cast<FakeGraph *>(graph)->nodes)
      ran.push_back(k);
    return absl::OkStatus();
  }
  void destroyGraph(Graph graph) override {
    ++destroyed;
    static_cast<FakeGraph *>(graph)->nodes.clear();
  }
};

KernelLaunch kernel(uintptr_t fn, std::vector<uint64_t> params, unsigned grid = 1) {
  KernelLaunch k;
  k.fn = reinterpret_cast<csa::cuda::Function>(fn);
  k.shape.gridX = grid;
  k.params = std::move(params);
  return k;
}

/// One "step": launches a, b, c (c's parameter is the position), then
/// flushes as a download would.
void step(LaunchGraphs &graphs, uint64_t position) {
  ASSERT_TRUE(graphs.begin("decode").ok());
  ASSERT_TRUE(graphs.add(kernel(1, {7})).ok());
  ASSERT_TRUE(graphs.add(kernel(2, {8, 9})).ok());
  ASSERT_TRUE(graphs.add(kernel(3, {position})).ok());
  ASSERT_TRUE(graphs.flush().ok());
}

TEST(LaunchGraphs, ARunIsOneGraphAndRunsWhatWasRecorded) {
  FakeGpu gpu;
  LaunchGraphs graphs(gpu, LaunchGraphOptions{});
  step(graphs, 5);
  ASSERT_EQ(gpu.ran.size(), 3u);
  EXPECT_EQ(gpu.ran[0], kernel(1, {7}));
  EXPECT_EQ(gpu.ran[1], kernel(2, {8, 9}));
  EXPECT_EQ(gpu.ran[2], kernel(3, {5}));
  EXPECT_EQ(gpu.created, 1);
  EXPECT_EQ(gpu.graphLaunches, 1);
  EXPECT_EQ(graphs.counters().launches, 3);
  EXPECT_EQ(graphs.counters().direct, 0);
}

TEST(LaunchGraphs, NothingRunsBeforeTheFlush) {
  FakeGpu gpu;
  LaunchGraphs graphs(gpu, LaunchGraphOptions{});
  ASSERT_TRUE(graphs.add(kernel(1, {1})).ok());
  ASSERT_TRUE(graphs.add(kernel(2, {2})).ok());
  EXPECT_TRUE(gpu.ran.empty());
  ASSERT_TRUE(graphs.flush().ok());
  EXPECT_EQ(gpu.ran.size(), 2u);
  ASSERT_TRUE(graphs.flush().ok()); // nothing recorded: nothing runs again
  EXPECT_EQ(gpu.ran.size(), 2u);
}

TEST(LaunchGraphs, TheNextStepUpdatesOnlyWhatChanged) {
  FakeGpu gpu;
  LaunchGraphs graphs(gpu, LaunchGraphOptions{});
  step(graphs, 5);
  step(graphs, 6);
  EXPECT_EQ(gpu.created, 1);
  EXPECT_EQ(gpu.updates, 1); // only c's position changed
  ASSERT_EQ(gpu.ran.size(), 6u);
  EXPECT_EQ(gpu.ran[5], kernel(3, {6}));
  step(graphs, 6); // the same again: no update at all
  EXPECT_EQ(gpu.updates, 1);
  EXPECT_EQ(gpu.graphLaunches, 3);
  EXPECT_EQ(graphs.counters().nodesUpdated, 1);
}

TEST(LaunchGraphs, AnUpdateMayChangeAGrid) {
  FakeGpu gpu;
  LaunchGraphs graphs(gpu, LaunchGraphOptions{});
  ASSERT_TRUE(graphs.begin("prefill").ok());
  ASSERT_TRUE(graphs.add(kernel(1, {1})).ok());
  ASSERT_TRUE(graphs.add(kernel(2, {2}, 4)).ok());
  ASSERT_TRUE(graphs.flush().ok());
  ASSERT_TRUE(graphs.begin("prefill").ok());
  ASSERT_TRUE(graphs.add(kernel(1, {1})).ok());
  ASSERT_TRUE(graphs.add(kernel(2, {2}, 40)).ok()); // a longer prompt
  ASSERT_TRUE(graphs.flush().ok());
  EXPECT_EQ(gpu.created, 1);
  EXPECT_EQ(gpu.updates, 1);
  EXPECT_EQ(gpu.ran.back(), kernel(2, {2}, 40));
}

TEST(LaunchGraphs, AnotherSequenceOfKernelsGetsItsOwnGraph) {
  FakeGpu gpu;
  LaunchGraphs graphs(gpu, LaunchGraphOptions{});
  step(graphs, 5);
  ASSERT_TRUE(graphs.begin("decode").ok());
  ASSERT_TRUE(graphs.add(kernel(1, {7})).ok());
  ASSERT_TRUE(graphs.add(kernel(9, {8, 9})).ok()); // a row-tiled form instead
  ASSERT_TRUE(graphs.add(kernel(3, {5})).ok());
  ASSERT_TRUE(graphs.flush().ok());
  EXPECT_EQ(gpu.created, 2);
  EXPECT_EQ(gpu.updates, 0);
  EXPECT_EQ(gpu.destroyed, 0);
  EXPECT_EQ(gpu.ran.back(), kernel(3, {5}));
  step(graphs, 6); // the first graph is still there
  EXPECT_EQ(gpu.created, 2);
  EXPECT_EQ(gpu.updates, 1);
}

TEST(LaunchGraphs, StepsWithOtherRunsKeepEachRunsGraph) {
  // Every other step has an extra run (a compressor's group completes):
  // the runs both kinds of step share keep their graphs.
  FakeGpu gpu;
  LaunchGraphs graphs(gpu, LaunchGraphOptions{});
  for (uint64_t position = 0; position < 6; ++position) {
    ASSERT_TRUE(graphs.begin("decode").ok());
    if (position % 2) {
      ASSERT_TRUE(graphs.add(kernel(4, {position})).ok());
      ASSERT_TRUE(graphs.add(kernel(5, {position})).ok());
      ASSERT_TRUE(graphs.flush().ok());
    }
    for (uint64_t run = 0; run < 2; ++run) { // the same kernels twice a step
      ASSERT_TRUE(graphs.add(kernel(1, {run})).ok());
      ASSERT_TRUE(graphs.add(kernel(2, {position})).ok());
      ASSERT_TRUE(graphs.flush().ok());
    }
  }
  // Built: (4, 5) once, (1, 2) once for each of its two runs a step.
  EXPECT_EQ(gpu.created, 3);
  // Updated: (4, 5) both nodes at positions 3 and 5; (1, 2) node 2 in both
  // runs at positions 1 to 5.
  EXPECT_EQ(gpu.updates, 2 * 2 + 2 * 5);
  EXPECT_EQ(gpu.ran.back(), kernel(2, {5}));
  EXPECT_EQ(gpu.ran[gpu.ran.size() - 2], kernel(1, {1}));
}

TEST(LaunchGraphs, ARunOfAnotherLengthGetsItsOwnGraph) {
  FakeGpu gpu;
  LaunchGraphs graphs(gpu, LaunchGraphOptions{});
  step(graphs, 5);
  ASSERT_TRUE(graphs.begin("decode").ok());
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_TRUE(graphs.add(kernel(1, {i})).ok());
  ASSERT_TRUE(graphs.flush().ok());
  EXPECT_EQ(gpu.created, 2);
  EXPECT_EQ(gpu.destroyed, 0);
  EXPECT_EQ(gpu.ran.size(), 7u);
  EXPECT_EQ(gpu.ran.back(), kernel(1, {3}));
}

TEST(LaunchGraphs, EntriesKeepTheirOwnGraphs) {
  FakeGpu gpu;
  LaunchGraphs graphs(gpu, LaunchGraphOptions{});
  step(graphs, 5);
  ASSERT_TRUE(graphs.begin("prefill").ok());
  for (uint64_t i = 0; i < 5; ++i)
    ASSERT_TRUE(graphs.add(kernel(4, {i})).ok());
  ASSERT_TRUE(graphs.flush().ok());
  step(graphs, 6); // decode's graph is still there
  EXPECT_EQ(gpu.created, 2);
  EXPECT_EQ(gpu.destroyed, 0);
  EXPECT_EQ(gpu.updates, 1);
}

TEST(LaunchGraphs, ShortRunsGoOutDirectly) {
  FakeGpu gpu;
  LaunchGraphs graphs(gpu, LaunchGraphOptions{/*minLaunches=*/3, /*maxLaunches=*/32});
  ASSERT_TRUE(graphs.add(kernel(1, {1})).ok());
  ASSERT_TRUE(graphs.add(kernel(2, {2})).ok());
  ASSERT_TRUE(graphs.flush().ok());
  EXPECT_EQ(gpu.created, 0);
  EXPECT_EQ(gpu.ran.size(), 2u);
  EXPECT_EQ(graphs.counters().direct, 2);
}

TEST(LaunchGraphs, ALongRunIsIssuedInPiecesOfMaxLaunches) {
  FakeGpu gpu;
  LaunchGraphs graphs(gpu, LaunchGraphOptions{/*minLaunches=*/2, /*maxLaunches=*/4});
  for (uint64_t i = 0; i < 10; ++i)
    ASSERT_TRUE(graphs.add(kernel(1, {i})).ok());
  EXPECT_EQ(gpu.ran.size(), 8u); // two pieces of 4 went out while recording
  ASSERT_TRUE(graphs.flush().ok());
  ASSERT_EQ(gpu.ran.size(), 10u);
  for (uint64_t i = 0; i < 10; ++i)
    EXPECT_EQ(gpu.ran[i], kernel(1, {i}));
  EXPECT_EQ(gpu.created, 3);
}

TEST(LaunchGraphs, AFailedUpdateIsReportedAndTheGraphRebuilt) {
  FakeGpu gpu;
  LaunchGraphs graphs(gpu, LaunchGraphOptions{});
  step(graphs, 5);
  gpu.failUpdates = true;
  ASSERT_TRUE(graphs.begin("decode").ok());
  ASSERT_TRUE(graphs.add(kernel(1, {7})).ok());
  ASSERT_TRUE(graphs.add(kernel(2, {8, 9})).ok());
  ASSERT_TRUE(graphs.add(kernel(3, {6})).ok());
  absl::Status st = graphs.flush();
  EXPECT_EQ(st.message(), "update refused");
  EXPECT_EQ(gpu.destroyed, 1);
  gpu.failUpdates = false;
  step(graphs, 7);
  EXPECT_EQ(gpu.created, 2);
  EXPECT_EQ(gpu.ran.back(), kernel(3, {7}));
}

TEST(LaunchGraphs, PastMaxGraphsEveryGraphIsDroppedAndBuiltAgain) {
  FakeGpu gpu;
  LaunchGraphOptions options;
  options.maxGraphs = 2;
  LaunchGraphs graphs(gpu, options);
  for (uintptr_t fn = 1; fn <= 3; ++fn) { // three sequences of kernels
    ASSERT_TRUE(graphs.add(kernel(fn, {1})).ok());
    ASSERT_TRUE(graphs.add(kernel(fn, {2})).ok());
    ASSERT_TRUE(graphs.flush().ok());
  }
  EXPECT_EQ(gpu.created, 3);
  EXPECT_EQ(gpu.destroyed, 2); // the first two, before the third was built
  EXPECT_EQ(graphs.counters().graphsDropped, 2);
  ASSERT_EQ(gpu.ran.size(), 6u);
  EXPECT_EQ(gpu.ran.back(), kernel(3, {2}));
  ASSERT_TRUE(graphs.add(kernel(1, {1})).ok()); // built again
  ASSERT_TRUE(graphs.add(kernel(1, {2})).ok());
  ASSERT_TRUE(graphs.flush().ok());
  EXPECT_EQ(gpu.created, 4);
  EXPECT_EQ(gpu.destroyed, 2);
}

TEST(LaunchGraphs, PartsPerRunMakesAStepOneGraphWhateverItsLength) {
  FakeGpu gpu;
  LaunchGraphOptions options;
  options.maxLaunches = 2;
  options.partsPerRun = 1;
  LaunchGraphs graphs(gpu, options);
  step(graphs, 5); // the entry's first run: pieces of maxLaunches
  EXPECT_EQ(gpu.graphLaunches, 1);  // a and b as a graph (c went directly)
  step(graphs, 6);
  step(graphs, 7);
  EXPECT_EQ(gpu.graphLaunches, 3);  // then one graph a step
  EXPECT_EQ(graphs.counters().nodesUpdated, 1); // c's position, once
  ASSERT_EQ(gpu.ran.size(), 9u);
  EXPECT_EQ(gpu.ran.back().params, std::vector<uint64_t>{7});
}

TEST(LaunchGraphs, PartsPerRunCutsARunIntoThatManyGraphs) {
  FakeGpu gpu;
  LaunchGraphOptions options;
  options.partsPerRun = 2;
  LaunchGraphs graphs(gpu, options);
  auto run = [&](uint64_t position) {
    ASSERT_TRUE(graphs.begin("decode").ok());
    for (uintptr_t fn = 1; fn <= 10; ++fn)
      ASSERT_TRUE(graphs.add(kernel(fn, {fn == 10 ? position : 0})).ok());
    ASSERT_TRUE(graphs.flush().ok());
  };
  run(1);
  const int before = gpu.graphLaunches;
  run(2);
  EXPECT_EQ(gpu.graphLaunches - before, 2); // 10 launches, 5 a graph
  ASSERT_EQ(gpu.ran.size(), 20u);
  EXPECT_EQ(gpu.ran.back().params, std::vector<uint64_t>{2});
}

TEST(LaunchGraphs, PiecesCutAtBoundariesMeetTheSameLaunchesAgain) {
  // Two plan steps (a b c | d e) a run; the second run has an extra launch
  // x in its first plan step. Cut at the boundaries, the second piece is
  // still d e and its graph is reused unchanged; cut every 2 launches, every
  // piece after x would shift.
  FakeGpu gpu;
  LaunchGraphOptions options;
  options.maxLaunches = 2;
  LaunchGraphs graphs(gpu, options);
  auto run = [&](bool extra) {
    ASSERT_TRUE(graphs.begin("decode").ok());
    ASSERT_TRUE(graphs.boundary().ok());
    for (uintptr_t fn : {1, 2, 3}) {
      ASSERT_TRUE(graphs.add(kernel(fn, {fn})).ok());
      if (extra && fn == 1) {
        ASSERT_TRUE(graphs.add(kernel(9, {9})).ok());
      }
    }
    ASSERT_TRUE(graphs.boundary().ok());
    for (uintptr_t fn : {4, 5})
      ASSERT_TRUE(graphs.add(kernel(fn, {fn})).ok());
    ASSERT_TRUE(graphs.flush().ok());
  };
  run(false);
  run(true);
  run(false);
  EXPECT_EQ(graphs.counters().graphsBuilt, 3); // a b c, a x b c, d e
  EXPECT_EQ(graphs.counters().nodesUpdated, 0);
  EXPECT_EQ(gpu.graphLaunches, 6);
  ASSERT_EQ(gpu.ran.size(), 16u);
  EXPECT_EQ(gpu.ran[6].fn, reinterpret_cast<csa::cuda::Function>(9));
}


using csa::cuda::BranchMark;
using csa::cuda::GraphEdge;

/// Launches 1, 2, ... each on (lane, joins).
std::vector<KernelLaunch> placed(std::initializer_list<std::pair<int, int>> places) {
  std::vector<KernelLaunch> launches;
  for (auto [lane, joins] : places) {
    launches.push_back(kernel(launches.size() + 1, {}));
    launches.back().lane = uint8_t(lane);
    launches.back().joins = uint8_t(joins);
  }
  return launches;
}

/// Whether launch `to` runs after launch `from` through `edges`.
bool after(const std::vector<GraphEdge> &edges, size_t from, size_t to) {
  std::vector<bool> reached(to + 1, false);
  reached[from] = true;
  for (const GraphEdge &e : edges) // listed by `to`: one pass suffices
    if (e.to <= to && reached[e.from])
      reached[e.to] = true;
  return reached[to];
}

/// A fan-out that reads a branch (a batch step's sequences on lanes 2 and 3
/// reading the query path on lane 1): joined by the first sequence's launch,
/// the branch ends there and the other lane does not wait for it; joined by
/// a chain launch before the fan-out (what Executor::runPerSequence does),
/// every lane does.
TEST(LaunchGraphs, AFanOutReadingABranchJoinsItOnTheChainFirst) {
  // 0 chain, 1 the branch (lane 1), then the fan-out: 2 on lane 2 joining
  // lane 1, 3 on lane 3.
  auto joinedByALane = LaunchGraphs::graphEdges(placed({{0, 0}, {1, 0}, {2, 0b1}, {3, 0}}));
  EXPECT_TRUE(after(joinedByALane, 1, 2));
  EXPECT_FALSE(after(joinedByALane, 1, 3));
  // 2 a chain launch joining lane 1, then 3 and 4 on lanes 2 and 3.
  auto joinedOnTheChain = LaunchGraphs::graphEdges(placed({{0, 0}, {1, 0}, {0, 0b1}, {2, 0}, {3, 0}}));
  EXPECT_TRUE(after(joinedOnTheChain, 1, 3));
  EXPECT_TRUE(after(joinedOnTheChain, 1, 4));
}

TEST(LaunchGraphs, AChainIsEachLaunchAfterTheOneBefore) {
  EXPECT_EQ(LaunchGraphs::graphEdges(placed({{0, 0}, {0, 0}, {0, 0}})),
            (std::vector<GraphEdge>{{0, 1, true}, {1, 2, true}}));
}

TEST(LaunchGraphs, ABranchLeavesTheChainAndJoinsItLater) {
  // 0 chain, 1-2 branch 1 (after 0), 3-4 the chain going on (after 0), 5
  // joins both: 1 and 2 are beside 3 and 4, not before them.
  EXPECT_EQ(LaunchGraphs::graphEdges(
                placed({{0, 0}, {1, 0}, {1, 0}, {0, 0}, {0, 0}, {0, 0b1}, {0, 0}})),
            (std::vector<GraphEdge>{{0, 1, false},
                                    {1, 2, true},
                                    {0, 3, true},
                                    {3, 4, true},
                                    {2, 5, false},
                                    {4, 5, true},
                                    {5, 6, true}}));
}

TEST(LaunchGraphs, BranchesRunBesideEachOtherAndJoinApart) {
  // Branch 1 (launch 1) from 0; the chain (2); branch 2 (3) from 2; the
  // chain (4) joins branch 1; 5 joins branch 2; a new branch 1 (6) from 5.
  EXPECT_EQ(LaunchGraphs::graphEdges(
                placed({{0, 0}, {1, 0}, {0, 0}, {2, 0}, {0, 0b01}, {0, 0b10}, {1, 0}})),
            (std::vector<GraphEdge>{{0, 1, false},
                                    {0, 2, true},
                                    {2, 3, false},
                                    {1, 4, false},
                                    {2, 4, true},
                                    {3, 5, false},
                                    {4, 5, true},
                                    {5, 6, false}}));
}

TEST(LaunchGraphs, ANewBranchJoiningTheOldOneInItsLaneStartsFromTheChain) {
  // Branch 1 (1), the chain (2), then a new branch in lane 1 whose first
  // launch joins the old one: after the old branch and after the chain.
  EXPECT_EQ(LaunchGraphs::graphEdges(placed({{0, 0}, {1, 0}, {0, 0}, {1, 0b1}, {1, 0}})),
            (std::vector<GraphEdge>{{0, 1, false}, {0, 2, true}, {1, 3, false}, {2, 3, false},
                                    {3, 4, true}}));
}

TEST(LaunchGraphs, ABranchCutFromItsForkOrItsJoinNeedsNoEdgeThere) {
  // A graph that starts inside a branch: the graph before it has ended.
  EXPECT_EQ(LaunchGraphs::graphEdges(placed({{1, 0}, {0, 0}, {0, 0b1}})),
            (std::vector<GraphEdge>{{0, 2, false}, {1, 2, true}}));
  // A join with no branch in its graph is a chain launch.
  EXPECT_EQ(LaunchGraphs::graphEdges(placed({{0, 0}, {0, 0b1}})),
            (std::vector<GraphEdge>{{0, 1, true}}));
  // A branch never joined in its graph ends with it.
  EXPECT_EQ(LaunchGraphs::graphEdges(placed({{0, 0}, {1, 0}, {0, 0}})),
            (std::vector<GraphEdge>{{0, 1, false}, {0, 2, true}}));
}

TEST(LaunchGraphs, MarksGiveTheLaunchesTheirPlaces) {
  FakeGpu gpu;
  LaunchGraphOptions options;
  options.maxLaunches = 16;
  LaunchGraphs graphs(gpu, options);
  ASSERT_TRUE(graphs.begin("decode").ok());
  ASSERT_TRUE(graphs.add(kernel(1, {})).ok());
  graphs.mark(BranchMark::Begin, 2);
  ASSERT_TRUE(graphs.add(kernel(2, {})).ok());
  ASSERT_TRUE(graphs.add(kernel(3, {})).ok());
  graphs.mark(BranchMark::End, 0);
  ASSERT_TRUE(graphs.add(kernel(4, {})).ok());
  graphs.mark(BranchMark::Join, 2);
  ASSERT_TRUE(graphs.add(kernel(5, {})).ok());
  ASSERT_TRUE(graphs.add(kernel(6, {})).ok());
  ASSERT_TRUE(graphs.flush().ok());
  ASSERT_EQ(gpu.graphs.size(), 1u);
  std::vector<std::pair<int, int>> places;
  for (const KernelLaunch &k : gpu.graphs[0]->nodes)
    places.push_back({k.lane, k.joins});
  EXPECT_EQ(places, (std::vector<std::pair<int, int>>{
                        {0, 0}, {2, 0}, {2, 0}, {0, 0}, {0, 0b10}, {0, 0}}));
}

TEST(LaunchGraphs, TheSameKernelsInOtherPlacesAreAnotherGraph) {
  FakeGpu gpu;
  LaunchGraphs graphs(gpu, LaunchGraphOptions{});
  for (bool branch : {false, true, false}) {
    ASSERT_TRUE(graphs.begin("decode").ok());
    ASSERT_TRUE(graphs.add(kernel(1, {})).ok());
    if (branch)
      graphs.mark(BranchMark::Begin, 1);
    ASSERT_TRUE(graphs.add(kernel(2, {})).ok());
    graphs.mark(BranchMark::End, 0);
    ASSERT_TRUE(graphs.add(kernel(3, {})).ok());
    ASSERT_TRUE(graphs.flush().ok());
  }
  // The run with a branch is not an update of the chain's graph (its edges
  // differ), and the third run finds the chain's graph again.
  EXPECT_EQ(gpu.created, 2);
  EXPECT_EQ(gpu.updates, 0);
  EXPECT_EQ(gpu.graphLaunches, 3);
}

/// A fan-out (launches on branches, none of the chain beside them: a batch
/// step's sequences each on a lane) goes out in pieces kMaxBranches times
/// the usual size, so that each lane holds more than a launch a piece.
TEST(LaunchGraphs, AFanOutIsCutInLargerPieces) {
  FakeGpu gpu;
  LaunchGraphOptions options;
  options.maxLaunches = 4;
  LaunchGraphs graphs(gpu, options);
  ASSERT_TRUE(graphs.begin("decode").ok());
  ASSERT_TRUE(graphs.add(kernel(1, {})).ok());
  const int64_t fanOut = 4 * csa::cuda::kMaxBranches;
  for (int64_t i = 0; i < fanOut - 2; ++i) {
    graphs.mark(BranchMark::Begin, int(i % csa::cuda::kMaxBranches) + 1);
    ASSERT_TRUE(graphs.add(kernel(2, {uint64_t(i)})).ok());
    graphs.mark(BranchMark::End, 0);
  }
  EXPECT_EQ(gpu.graphLaunches, 0); // 31 launches: not cut at 4
  graphs.mark(BranchMark::Begin, 1);
  ASSERT_TRUE(graphs.add(kernel(2, {99})).ok());
  graphs.mark(BranchMark::End, 0);
  ASSERT_EQ(gpu.graphs.size(), 1u);
  EXPECT_EQ(gpu.graphs[0]->nodes.size(), size_t(fanOut));
  // Joined, the chain is cut at the usual size again.
  for (int lane = 1; lane <= csa::cuda::kMaxBranches; ++lane)
    graphs.mark(BranchMark::Join, lane);
  for (uintptr_t fn = 3; fn < 7; ++fn)
    ASSERT_TRUE(graphs.add(kernel(fn, {})).ok());
  EXPECT_EQ(gpu.graphs.size(), 2u);
  EXPECT_EQ(gpu.graphs[1]->nodes.size(), 4u);
}

TEST(LaunchGraphs, APieceIsNotCutRightAfterABranch) {
  FakeGpu gpu;
  LaunchGraphOptions options;
  options.maxLaunches = 4;
  LaunchGraphs graphs(gpu, options);
  ASSERT_TRUE(graphs.begin("decode").ok());
  auto stepOf = [&](uintptr_t fn) {
    ASSERT_TRUE(graphs.boundary().ok());
    ASSERT_TRUE(graphs.add(kernel(fn, {})).ok());
  };
  stepOf(1);
  stepOf(2);
  stepOf(3);
  ASSERT_TRUE(graphs.boundary().ok());
  graphs.mark(BranchMark::Begin, 1);
  ASSERT_TRUE(graphs.add(kernel(4, {})).ok());
  graphs.mark(BranchMark::End, 0);
  // 4 launches recorded, but the branch would be alone at the piece's end:
  // the piece runs on until 4 launches are beside it.
  for (uintptr_t fn = 5; fn <= 8; ++fn)
    stepOf(fn);
  EXPECT_EQ(gpu.graphLaunches, 0);
  stepOf(9);
  ASSERT_EQ(gpu.graphs.size(), 1u);
  EXPECT_EQ(gpu.graphs[0]->nodes.size(), 8u);
  // Joined, a piece is cut as before.
  graphs.mark(BranchMark::Join, 1);
  for (uintptr_t fn = 10; fn <= 13; ++fn)
    stepOf(fn);
  EXPECT_EQ(gpu.graphs.size(), 2u);
}

/// Launch `fn` on `lane` (joining `joins`), reading `read` and writing
/// `written` ([begin, end) byte ranges).
KernelLaunch touching(uintptr_t fn, int lane, int joins,
                      std::vector<std::pair<csa::cuda::DevicePtr, csa::cuda::DevicePtr>> read,
                      std::vector<std::pair<csa::cuda::DevicePtr, csa::cuda::DevicePtr>> written) {
  KernelLaunch k = kernel(fn, {});
  k.lane = uint8_t(lane);
  k.joins = uint8_t(joins);
  auto f = std::make_shared<csa::cuda::LaunchFootprint>();
  f->kernel = "k" + std::to_string(fn);
  f->read = std::move(read);
  f->written = std::move(written);
  k.footprint = std::move(f);
  return k;
}

/// A write on one lane and a read or write of the same bytes on another,
/// with no path between them, is a hazard; reads alone, disjoint bytes, and
/// a join between them are not.
TEST(LaunchGraphs, HazardsAreSharedBytesOneWritingWithNoPathBetween) {
  using csa::cuda::GraphHazard;
  // 0 on the chain; 1 on lane 1 writes [100, 200); 2 on lane 2 reads
  // [150, 160): a hazard at [150, 160).
  std::vector<KernelLaunch> launches = {touching(1, 0, 0, {}, {{0, 8}}),
                                        touching(2, 1, 0, {}, {{100, 200}}),
                                        touching(3, 2, 0, {{150, 160}}, {})};
  std::vector<GraphHazard> found = LaunchGraphs::hazards(launches);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].first, 1u);
  EXPECT_EQ(found[0].second, 2u);
  EXPECT_EQ(found[0].begin, 150u);
  EXPECT_EQ(found[0].end, 160u);
  EXPECT_NE(LaunchGraphs::describe(launches, found[0])
                .find("launch 1 (k2, lane 1) and launch 2 (k3, lane 2)"),
            std::string::npos);
  // Both only reading: none.
  launches[1] = touching(2, 1, 0, {{100, 200}}, {});
  EXPECT_TRUE(LaunchGraphs::hazards(launches).empty());
  // Disjoint bytes: none.
  launches[1] = touching(2, 1, 0, {}, {{100, 150}});
  EXPECT_TRUE(LaunchGraphs::hazards(launches).empty());
  // The reader on the chain after a chain launch that joined lane 1: none.
  launches[1] = touching(2, 1, 0, {}, {{100, 200}});
  launches.insert(launches.begin() + 2, touching(4, 0, 0b1, {}, {}));
  launches[3] = touching(3, 2, 0, {{150, 160}}, {});
  EXPECT_TRUE(LaunchGraphs::hazards(launches).empty());
  // Without the join (the lane's first launch starts from the chain's
  // launch 0): the hazard again.
  launches[2].joins = 0;
  EXPECT_EQ(LaunchGraphs::hazards(launches).size(), 1u);
  // Launches without footprints are not checked.
  launches[1].footprint = nullptr;
  EXPECT_TRUE(LaunchGraphs::hazards(launches).empty());
}

/// With checkHazards, a graph with a hazard is not launched: the flush fails
/// naming both launches; one without goes out.
TEST(LaunchGraphs, CheckedGraphsWithAHazardFailNamingBothLaunches) {
  FakeGpu gpu;
  LaunchGraphOptions options;
  options.checkHazards = true;
  LaunchGraphs graphs(gpu, options);
  ASSERT_TRUE(graphs.begin("decode").ok());
  graphs.mark(BranchMark::Begin, 1);
  ASSERT_TRUE(graphs.add(touching(1, 0, 0, {}, {{0, 64}})).ok());
  graphs.mark(BranchMark::Begin, 2);
  ASSERT_TRUE(graphs.add(touching(2, 0, 0, {}, {{32, 96}})).ok());
  graphs.mark(BranchMark::End, 0);
  absl::Status st = graphs.flush();
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_NE(std::string(st.message()).find("graph hazard (1 in this graph): launch 0 (k1, lane 1) "
                                           "and launch 1 (k2, lane 2) of a graph of 2 launches "
                                           "both touch bytes [0x20, 0x40), both writing"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(gpu.graphLaunches, 0);
  // On one lane the second is after the first.
  graphs.mark(BranchMark::Begin, 1);
  ASSERT_TRUE(graphs.add(touching(1, 0, 0, {}, {{0, 64}})).ok());
  ASSERT_TRUE(graphs.add(touching(2, 0, 0, {}, {{32, 96}})).ok());
  graphs.mark(BranchMark::End, 0);
  EXPECT_TRUE(graphs.flush().ok());
  EXPECT_EQ(gpu.graphLaunches, 1);
}

TEST(LaunchGraphs, RangesAreSortedAndMerged) {
  std::vector<std::pair<csa::cuda::DevicePtr, csa::cuda::DevicePtr>> ranges = {
      {50, 60}, {10, 20}, {20, 30}, {5, 5}, {55, 70}, {80, 90}};
  csa::cuda::normalizeRanges(ranges);
  EXPECT_EQ(ranges, (std::vector<std::pair<csa::cuda::DevicePtr, csa::cuda::DevicePtr>>{
                        {10, 30}, {50, 70}, {80, 90}}));
}

} // namespace

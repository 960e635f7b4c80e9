//===- StepPlan.cpp - A plan entry's memory and graph lanes ---------------===//
//
// What the executor decides once per entry point when it loads a plan:
// where each transient's memory goes back to the pool (liveness, with the
// holds of branches), which operand may give its buffer to a result, and on
// which graph lane each branch of overlapping steps runs (overlaps_until,
// docs/artifact-format.md#overlapping-steps), and which lanes are free
// during each other step (a batch step's sequences spread over them).
//
//===----------------------------------------------------------------------===//
#include "runtime/executor/ExecutorImpl.h"

#include <algorithm>
#include <map>
#include <set>

namespace csa::runtime {

void Executor::Impl::planMemoryAndLanes(const std::vector<KernelCall> &calls,
                                        std::vector<Step> &steps) {
  // Branches exist only on a GPU path that runs them: elsewhere every step
  // is after the one before and a branch's holds would only cost memory.
  const bool branches = runner && options.overlapSteps;
  auto overlapsUntil = [&](size_t i) { return branches ? calls[i].overlapsUntil : int64_t(-1); };
  // Liveness: the last step that names each transient (as an argument or in
  // an index expression's ["rows", id]); a step that may overlap the ones
  // after it holds its transients until its join (a step in between must
  // not be handed their memory).
  // lastNamed: the last step that names it (holds aside), and heldBy: the
  // branches (by their first step) that hold it.
  std::map<std::string, size_t> lastUse, lastNamed;
  std::map<std::string, std::set<size_t>> heldBy;
  std::vector<size_t> branchHead(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const int64_t until = overlapsUntil(i);
    const size_t holdUntil =
        until < 0 ? i : std::min(size_t(until), steps.size() - 1);
    branchHead[i] = i > 0 && until >= 0 && overlapsUntil(i - 1) == until
                        ? branchHead[i - 1]
                        : i;
    auto use = [&](const std::string &id) {
      lastUse[id] = std::max(lastUse[id], holdUntil);
      lastNamed[id] = i;
      if (until >= 0)
        heldBy[id].insert(branchHead[i]);
    };
    for (const KernelArg &a : steps[i].call->args) {
      if (a.kind == ArgKind::Transient)
        use(a.name);
      if (a.kind == ArgKind::Index)
        for (const std::string &id : artifact::rowsReferences(a.expr))
          use(id);
    }
  }
  for (auto &[id, step] : lastUse)
    steps[step].release.push_back(&transients[id]);
  for (auto &[id, step] : lastNamed) {
    // A buffer no one uses after this step may go to its result, unless
    // another branch may still be reading it.
    const std::set<size_t> &holders = heldBy[id];
    const bool ownBranchOnly =
        holders.empty() ||
        (overlapsUntil(step) >= 0 && holders == std::set<size_t>{branchHead[step]});
    if (lastUse[id] == step || ownBranchOnly)
      steps[step].mayGiveBuffer.push_back(&transients[id]);
  }
  // Graph lanes: a branch (consecutive steps with one overlaps_until) takes
  // the lowest lane free at its first step and gives it back at its join; a
  // branch that finds none runs in the chain.
  {
    uint8_t busy = 0;
    std::map<size_t, uint8_t> freedAt;
    auto lowestFree = [&]() {
      for (int lane = 1; lane <= cuda::kMaxBranches; ++lane)
        if (!((busy >> (lane - 1)) & 1u))
          return lane;
      return 0;
    };
    for (size_t i = 0; i < steps.size(); ++i) {
      if (auto it = freedAt.find(i); it != freedAt.end()) {
        busy &= uint8_t(~it->second);
        steps[i].joinLanes = it->second;
      }
      const int64_t until = overlapsUntil(i);
      if (until < 0) {
        steps[i].spareLane = branches ? lowestFree() : 0;
        steps[i].freeLanes = runner ? uint8_t(~busy) : 0;
        continue;
      }
      if (i > 0 && overlapsUntil(i - 1) == until) {
        steps[i].lane = steps[i - 1].lane; // the same branch
        continue;
      }
      if (const int lane = lowestFree()) {
        steps[i].lane = lane;
        busy |= uint8_t(1u << (lane - 1));
        freedAt[size_t(until)] |= uint8_t(1u << (lane - 1));
      }
    }
  }
}

} // namespace csa::runtime

//===- Batch.cpp - Several sequences' decode step as one run of the plan --===//
//
// Executor::decodeBatch: the decode plan runs once for B sequences, row i of
// every value being sequence i's. A step that reads no sequence state runs
// once on all B rows (the weights are read once for all the sequences); a
// step that reads a cache, a position or the token history runs once a
// sequence, on that sequence's row, with `seq` and `position` set to it.
//
// Values move between the two kinds of steps by rows: a per-sequence step
// reads row i of a batch value where it lies (Tensor::view); what it makes
// stays the sequence's own value (per-sequence values
// may differ in shape: the index scores of sequences at other positions)
// until a batch step reads it, which puts the sequences' rows together.
//
//===----------------------------------------------------------------------===//
#include "runtime/executor/Executor.h"
#include "runtime/executor/ExecutorImpl.h"

#include "absl/cleanup/cleanup.h"

#include <algorithm>
#include <set>

namespace csa::runtime {

namespace {

/// Bytes of one row of `t` (its first dimension).
size_t bytesOfRow(const Tensor &t) {
  return t.rows() == 0 ? 0 : size_t(t.numel() / t.rows() * t.elementBytes);
}

} // namespace

absl::Status Executor::Impl::runPerSequence(Step &s) {
  // The driver runs as for one sequence (`batch` empty meanwhile).
  std::vector<Sequence *> members;
  std::swap(members, batch);
  const size_t n = members.size();
  Sequence *const batchSeq = seq;
  const int64_t batchPosition = position, batchTokens = numTokens;
  // The batch values the step names, set aside while the sequences run.
  std::vector<Tensor> aside(s.values.size());
  for (size_t v = 0; v < s.values.size(); ++v)
    std::swap(aside[v], *s.values[v]);
  // Sequence i's values in place of the batch's, and back. The way back
  // runs whatever the driver does (a driver may throw: a GPU error, a bad
  // attribute), so that no value is left a view or lost.
  size_t current = n; // the sequence whose values are in place (n: none)
  auto swapIn = [&](size_t i) -> absl::Status {
    current = i;
    absl::Status st;
    for (size_t v = 0; v < s.values.size(); ++v) {
      Tensor &value = *s.values[v];
      // The sequence's own value (made by an earlier per-sequence step), or
      // what the step makes (an empty one that knows its last buffer).
      std::swap(value, sequenceValues[i][s.values[v]]);
      const Tensor &all = aside[v];
      if (!value.dims.empty() || all.dims.empty())
        continue;
      // Row i of the batch value, read where it lies (on the device too:
      // a kernel's argument may point into a buffer).
      if (all.rows() != int64_t(n)) {
        st = absl::InternalError(absl::StrCat("a batch step's value has ", all.rows(),
                                              " rows, not one a sequence (", n, ")"));
        continue;
      }
      value.dims = all.dims;
      value.dims[0] = 1;
      value.elementBytes = all.elementBytes;
      value.base = members[i]->position;
      value.view = const_cast<uint8_t *>(all.data.data()) + i * bytesOfRow(all);
    }
    return st;
  };
  // What the step left in each value is the sequence's; a view of a row
  // goes.
  auto swapOut = [&]() {
    if (current == n)
      return;
    for (size_t v = 0; v < s.values.size(); ++v) {
      Tensor &value = *s.values[v];
      if (value.view) {
        value.view = nullptr;
        value.dims.clear();
      }
      std::swap(value, sequenceValues[current][s.values[v]]);
    }
    current = n;
  };
  absl::Cleanup restore = [&] {
    swapOut();
    for (size_t v = 0; v < s.values.size(); ++v)
      std::swap(aside[v], *s.values[v]);
    seq = batchSeq;
    position = batchPosition;
    numTokens = batchTokens;
    std::swap(members, batch);
  };
  // Sequence i on the (i mod L)-th of the L lanes free here: its launches
  // follow its own earlier ones on that lane, beside the other sequences'
  // (each lane its own scratch buffers), and a fill on the chain joins them
  // all before anything after the step (which reads what they made, or
  // reuses memory they used) is launched.
  // Not for a step with a kernel whose GPU form writes its module's own
  // memory (GpuKernel::moduleState): two sequences' launches of it side by
  // side would share that memory. (The split attention forms keep their
  // partials in state buffers instead, a set a lane: GpuKernel::state.)
  bool moduleState = false;
  for (const auto &[role, k] : s.kernels) {
    moduleState |= k.gpu && k.gpu->moduleState;
    if (k.gpu)
      for (const auto &form : k.gpu->forms)
        moduleState |= form.second->moduleState;
  }
  std::vector<int> lanes;
  if (runner && options.sequenceLanes && s.lane == 0 && n > 1 && !moduleState)
    for (int lane = 1; lane <= cuda::kMaxBranches; ++lane)
      if ((s.freeLanes >> (lane - 1)) & 1u)
        lanes.push_back(lane);
  if (lanes.size() < 2)
    lanes.clear();
  uint8_t used = 0;
  // (A driver that throws fails the run: the next run starts its graphs
  // afresh, so only the scratch names need restoring then.)
  absl::Cleanup lanesDone = [&] {
    scratchLane.clear();
    if (runner)
      runner->holdReleasedBlocks(false);
  };
  // A fill on the chain, where every lane's launches meet.
  auto chainFill = [&] {
    runner->zeroOnDevice(kernelScratch("sequence_lanes.join", 4, {1}).ptr());
  };
  if (!lanes.empty()) {
    // A block one sequence's launches let go (a growing cache's old one)
    // is another's only after the join (GpuRunner::holdReleasedBlocks).
    runner->holdReleasedBlocks(true);
    runner->zeroStatusSlotsAhead(n * 4 * std::max<size_t>(s.kernels.size(), 1));
    // The plan's branches this step joins (the query paths the attention
    // and the index scores read) are joined on the chain before the
    // fan-out: joined by the first sequence's launch alone, the others'
    // lanes would not wait for them (LaunchGraphs::graphEdges).
    if (s.joinLanes)
      chainFill();
  }
  absl::Status st;
  for (size_t i = 0; i < n && st.ok(); ++i) {
    seq = members[i];
    position = seq->position;
    numTokens = 1;
    st = swapIn(i);
    if (st.ok() && !lanes.empty()) {
      const int lane = lanes[i % lanes.size()];
      used |= uint8_t(1u << (lane - 1));
      scratchLane = absl::StrCat(".lane", lane);
      runner->markBranch(cuda::BranchMark::Begin, lane);
    }
    if (st.ok())
      st = s.driver(*this, s);
    swapOut();
  }
  if (used) {
    scratchLane.clear();
    runner->markBranch(cuda::BranchMark::End, 0);
    for (int lane = 1; lane <= cuda::kMaxBranches; ++lane)
      if ((used >> (lane - 1)) & 1u)
        runner->markBranch(cuda::BranchMark::Join, lane);
    chainFill();
    runner->holdReleasedBlocks(false);
  }
  return st;
}

absl::StatusOr<bool> Executor::Impl::gatherRows(Step &s) {
  const size_t n = batch.size();
  auto own = [&](Tensor *value, size_t i) -> Tensor * {
    auto it = sequenceValues[i].find(value);
    return it == sequenceValues[i].end() || it->second.dims.empty() ? nullptr : &it->second;
  };
  // Rows only where every sequence's value is one row of one shape; a
  // compressor's output, a row where a group completes and none elsewhere,
  // is not: then the step runs once a sequence too.
  std::vector<Tensor *> gather;
  for (Tensor *value : s.values) {
    Tensor *first = value->dims.empty() ? own(value, 0) : nullptr;
    if (!first)
      continue; // a batch value (its rows kept until its last use), or a result
    for (size_t i = 0; i < n; ++i) {
      Tensor *t = own(value, i);
      if (!t || t->rows() != 1 || t->elementBytes != first->elementBytes ||
          t->dims != first->dims)
        return false;
    }
    gather.push_back(value);
  }
  for (Tensor *value : gather) {
    Tensor *first = own(value, 0);
    std::vector<int64_t> dims = first->dims;
    dims[0] = int64_t(n);
    const size_t bytes = bytesOfRow(*first);
    allocate(*value, first->elementBytes, std::move(dims), 0);
    // On the device when the first row is there (then every row is: each
    // is a kernel's result), else on the host.
    const bool onDevice =
        runner && runner->copyRowOnDevice(value->ptr(), 0, first->ptr(), bytes);
    for (size_t i = 0; i < n; ++i) {
      Tensor &row = *own(value, i);
      if (onDevice && i > 0 && !runner->copyRowOnDevice(value->ptr(), i * bytes, row.ptr(), bytes))
        return absl::InternalError("a sequence's row of a batch value is not on the GPU");
      if (!onDevice) {
        onHost(row.ptr());
        std::memcpy(value->as<uint8_t>() + i * bytes, row.ptr(), bytes);
      }
      // The rows go back to the pool with the value (its last use, which the
      // plan holds until the join of a branch reading it): freed here, a
      // step on another graph lane could be handed a buffer the copy still
      // reads.
    }
    if (!onDevice)
      hostRefilled(value->ptr());
  }
  return true;
}

absl::StatusOr<std::vector<float>>
Executor::decodeBatch(const std::vector<Sequence *> &sequences,
                      const std::vector<int32_t> &tokens) {
  if (sequences.empty() || sequences.size() != tokens.size())
    return absl::InvalidArgumentError(absl::StrCat(
        "a batch step needs a token for each sequence, and at least one; got ",
        sequences.size(), " sequences and ", tokens.size(), " tokens"));
  std::set<const Sequence *> distinct;
  for (size_t i = 0; i < sequences.size(); ++i) {
    Sequence *s = sequences[i];
    if (!s || !distinct.insert(s).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", i, " of the batch is ", s ? "also an earlier one" : "null",
          " (each sequence of a batch step is a different one)"));
  }
  if (sequences.size() == 1)
    return decode(*sequences[0], tokens[0]);
  const ExecutorOptions &o = impl->options;
  if (!o.dumpDecisions.empty() || !o.forceDecisions.empty() || !o.dumpHidden.empty() ||
      o.analyzeRecall)
    return absl::FailedPreconditionError(
        "a batch step does not dump or force decisions, dump hidden states or analyze "
        "recall (their files are a sequence's): decode the sequences one by one");
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Sequence &s = *sequences[i];
    auto fail = [&](const absl::Status &st) {
      return absl::Status(st.code(), absl::StrCat("sequence ", i, ": ", st.message()));
    };
    if (s.position == 0)
      return fail(absl::FailedPreconditionError("decode needs a prefill first"));
    if (tokens[i] < 0 || tokens[i] >= impl->vocab)
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "token id ", tokens[i], " is outside the vocabulary of ", impl->vocab)));
    if (absl::Status st = artifact::checkContext(impl->artifact->plan(), s.position + 1);
        !st.ok())
      return fail(st);
    if (absl::Status st = impl->checkHeld(s); !st.ok())
      return fail(st);
  }
  BoundsScope scope(&impl->bounds);
  const size_t n = sequences.size();
  // A run that failed left its live values behind (a successful one
  // releases every value at its last use): the batch steps take a value's
  // shape for "written in this run", so they go first.
  impl->releaseStaleValues(impl->decodeSteps);
  impl->batch = sequences;
  impl->seq = sequences[0];
  impl->position = sequences[0]->position;
  impl->numTokens = int64_t(n);
  impl->sequenceValues.resize(std::max(impl->sequenceValues.size(), n));
  for (size_t i = 0; i < n; ++i)
    sequences[i]->history.push_back(tokens[i]);
  impl->tokens.elementBytes = 4;
  impl->tokens.resize({int64_t(n)});
  impl->tokens.base = 0;
  std::memcpy(impl->tokens.ptr(), tokens.data(), n * sizeof(int32_t));
  auto logits = impl->run(impl->decodeSteps);
  // A failed step leaves values of the sequences behind: they go.
  for (size_t i = 0; i < n; ++i)
    for (auto &[value, own] : impl->sequenceValues[i])
      if (!own.dims.empty())
        impl->releaseValue(own);
  impl->batch.clear();
  for (Sequence *s : sequences) {
    if (logits.ok())
      s->position += 1;
    else
      s->history.pop_back();
  }
  return logits;
}

} // namespace csa::runtime

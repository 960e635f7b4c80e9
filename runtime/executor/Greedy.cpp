//===- Greedy.cpp - A decode step that returns greedy tokens --------------===//
//
// Executor::decodeGreedy: a decode step (or a batch step) for a caller that
// samples greedily and needs no logits. On the GPU path the plan's head has
// a `greedy` kernel (codegen's buildGreedyTokenKernel): it picks each row's
// token where the logits are and only the ids come back (4 bytes a row in
// place of 4 x vocab). A row the kernel marks -1 (a NaN or +inf logit, or
// none above -inf) brings its logits back too, so that the error names the
// logit as sampling::greedyToken names it on the host.
//
//===----------------------------------------------------------------------===//
#include "runtime/executor/Executor.h"
#include "runtime/executor/ExecutorImpl.h"
#include "runtime/sampling/Sampling.h"

#include "absl/cleanup/cleanup.h"
#include "absl/types/span.h"

namespace csa::runtime {

absl::Status Executor::Impl::pickGreedy(std::vector<Step> &steps) {
  const int64_t rows = logits.rows();
  if (logits.elementBytes != 4 || rows < 1 || logits.numel() % rows != 0)
    return absl::InvalidArgumentError("the plan's logits output is not an f32 value");
  const int64_t vocabOut = logits.numel() / rows;
  Step *head = nullptr;
  for (auto it = steps.rbegin(); it != steps.rend() && !head; ++it)
    if (it->op == "csa.lm_head" && it->kernels.count("greedy"))
      head = &*it;
  std::vector<int32_t> &out = *greedyOut;
  out.assign(size_t(rows), -1);
  bool logitsOnHost = false;
  if (runner && head) {
    Tensor &ids = kernelScratch("greedy.ids", 4, {rows});
    auto dl = desc<2>(logits.as<float>(), {rows, vocabOut});
    auto di = desc<1>(ids.as<int32_t>(), {rows});
    invoke(*head, "greedy", &dl, &di);
    onHost(ids.ptr());
    std::memcpy(out.data(), ids.ptr(), size_t(rows) * 4);
  } else {
    // The CPU path and plans without the kernel: the host's pick.
    onHost(logits.ptr());
    logitsOnHost = true;
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (out[size_t(r)] >= 0)
      continue;
    if (!logitsOnHost) {
      onHost(logits.ptr());
      logitsOnHost = true;
    }
    auto token = sampling::greedyToken(
        absl::MakeConstSpan(logits.as<float>() + r * vocabOut, size_t(vocabOut)));
    if (!token.ok())
      return rows == 1 ? token.status()
                       : absl::Status(token.status().code(),
                                      absl::StrCat("row ", r, ": ", token.status().message()));
    out[size_t(r)] = *token;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>>
Executor::decodeGreedy(const std::vector<Sequence *> &sequences,
                       const std::vector<int32_t> &tokens) {
  if (sequences.empty() || sequences.size() != tokens.size() || !sequences[0])
    return absl::InvalidArgumentError(absl::StrCat(
        "a greedy step needs a token for each sequence, and at least one; got ",
        sequences.size(), " sequences and ", tokens.size(), " tokens"));
  std::vector<int32_t> picked;
  impl->greedyOut = &picked;
  absl::Cleanup done = [&] { impl->greedyOut = nullptr; };
  auto logits = sequences.size() == 1 ? decode(*sequences[0], tokens[0])
                                      : decodeBatch(sequences, tokens);
  if (!logits.ok())
    return logits.status();
  return picked;
}

} // namespace csa::runtime

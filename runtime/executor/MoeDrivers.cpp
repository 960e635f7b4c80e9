//===- MoeDrivers.cpp - The driver of csa.moe -----------------------------===//
//
// csa.moe on the executor: the routing (scores, the selection bias, the
// top-k experts and their weights), the routed experts and the shared
// expert. On the GPU path the routed experts run as grouped launches that
// read the expert ids on the device (moeGrouped: the split-K form below 64
// slots, the tensor-core expert_tiles form from 64 on where it exists);
// otherwise (the CPU, --gpu-per-expert-moe) one launch an expert from the
// token lists the host builds; grouped, the shared expert runs first, on a
// branch of the step's graph beside the routing and the routed experts
// (Step::spareLane). Where the plan has the fused gate/up kernel
// (experts_gate_up, an expert's w1 and w3 rows as one linear) the grouped
// path runs gate and up as one launch and SwiGLU on its paired halves.
//
//===----------------------------------------------------------------------===//
#include "runtime/executor/ExecutorImpl.h"

#include <numeric>

namespace csa::runtime {

absl::Status Executor::Impl::moe(Step &s) {
  Tensor &x = tensor(s, "input");
  const int64_t n = x.rows(), dim = attr(s, "dim"), experts = attr(s, "experts"),
                topK = attr(s, "top_k"), inter = attr(s, "inter");
  // Grouped, the shared expert (which reads only x) goes first, on a graph
  // lane of its own beside the routing and the routed experts; the combine
  // joins it.
  const bool grouped = groupedMoe(s, n);
  Tensor *sharedOut = nullptr;
  const int sharedLane = grouped ? s.spareLane : 0;
  if (grouped) {
    if (sharedLane)
      runner->markBranch(cuda::BranchMark::Begin, sharedLane);
    sharedOut = &sharedExpert(s, x);
    if (sharedLane)
      runner->markBranch(cuda::BranchMark::End, 0);
  }

  Tensor &logitsBuf = kernelScratch("moe.logits", 4, {n, experts});
  linear(s, "gate", x.ptr(), n, dim, "gate.", -1, logitsBuf.ptr(), experts);
  Tensor &ids = kernelScratch("moe.ids", 4, {n, topK});
  Tensor &wts = kernelScratch("moe.weights", 4, {n, topK});
  {
    auto dl = desc<2>(logitsBuf.ptr(), {n, experts});
    auto db = desc<1>(weight(s, "gate.bias").data, {experts});
    auto di = desc<2>(ids.ptr(), {n, topK});
    auto dw = desc<2>(wts.ptr(), {n, topK});
    invoke(s, "route", &dl, &db, &di, &dw);
  }
  if (grouped)
    return moeGrouped(s, x, ids, wts, *sharedOut, sharedLane);
  Tensor &y = kernelZeros("moe.y", 4, {n, dim});
  // Each expert's tokens in token order, with their routing weights: one
  // list per expert, ascending expert (a counting sort of the routing, once
  // per layer; the gather kernel copies the rows).
  onHost(ids.ptr());
  onHost(wts.ptr());
  if (absl::Status st = decision(s, "moe_ids", ids, "<i4"); !st.ok())
    return st;
  if (absl::Status st = decision(s, "moe_weights", wts, "<f4"); !st.ok())
    return st;
  std::vector<int64_t> first(size_t(experts) + 1, 0);
  const int32_t *idAt = ids.as<int32_t>();
  for (int64_t i = 0; i < n * topK; ++i)
    if (idAt[i] >= 0 && idAt[i] < experts)
      ++first[size_t(idAt[i]) + 1];
  for (int64_t e = 0; e < experts; ++e)
    first[size_t(e) + 1] += first[size_t(e)];
  Tensor &rowIndex = scratch("moe.row_index", 4, {std::max<int64_t>(first.back(), 1)});
  Tensor &rowWeight = scratch("moe.row_weight", 4, {std::max<int64_t>(first.back(), 1)});
  {
    std::vector<int64_t> next(first.begin(), first.end() - 1);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t slot = 0; slot < topK; ++slot) {
        const int32_t e = idAt[r * topK + slot];
        if (e < 0 || e >= experts)
          continue;
        const int64_t at = next[size_t(e)]++;
        rowIndex.as<int32_t>()[at] = int32_t(r);
        rowWeight.as<float>()[at] = wts.as<float>()[r * topK + slot];
      }
  }
  Tensor &ones = unitWeights(n);
  // Right after the routing came back nothing waits to launch: the lists go
  // to the GPU now, so the experts' launches below are one run.
  uploadNow(rowIndex.ptr());
  uploadNow(rowWeight.ptr());
  uploadNow(ones.ptr());
  // An expert has at most n rows unless the routing repeats it in a row.
  // Split among the CPU's threads, every expert has rows of its own in the
  // scratch (its slots' range), and the experts run at once; their outputs
  // are still added to y one expert after another, in ascending id.
  const bool concurrent = splitsHostCalls();
  int64_t capacity = n;
  for (int64_t e = 0; e < experts; ++e)
    capacity = std::max(capacity, first[size_t(e) + 1] - first[size_t(e)]);
  if (concurrent)
    capacity = std::max<int64_t>(first.back(), 1);
  Tensor &rows = kernelScratch("moe.rows", 2, {capacity, dim});
  Tensor &g = kernelScratch("moe.g", 2, {capacity, inter});
  Tensor &up = kernelScratch("moe.up", 2, {capacity, inter});
  Tensor &h = kernelScratch("moe.h", 2, {capacity, inter});
  Tensor &o = kernelScratch("moe.o", 2, {capacity, dim});
  auto dx = desc<2>(x.ptr(), {n, dim});
  auto dy = desc<2>(y.ptr(), {n, dim});
  // Expert e's rows of a scratch of `width` bf16 columns.
  auto rowsOf = [&](Tensor &t, int64_t e, int64_t width) {
    return t.as<uint16_t>() + (concurrent ? first[size_t(e)] * width : 0);
  };
  // Each expert's linears, resolved here: the experts may run on other
  // threads (resolving a slot changes the step).
  std::vector<std::array<LinearWeights, 3>> expertWeights(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e)
    if (first[size_t(e) + 1] > first[size_t(e)])
      expertWeights[size_t(e)] = {linearWeights(s, "expert_in", "w1.", e),
                                  linearWeights(s, "expert_in", "w3.", e),
                                  linearWeights(s, "expert_out", "w2.", e)};
  const KernelRef &gather = kernel(s, "gather"), &swiglu = kernel(s, "swiglu");
  // The expert's gather, projections and SwiGLU: its output rows in `o`.
  auto expertOutput = [&](int64_t e) {
    const int64_t c = first[size_t(e) + 1] - first[size_t(e)];
    if (c == 0)
      return;
    int32_t *index = rowIndex.as<int32_t>() + first[size_t(e)];
    float *weightOf = rowWeight.as<float>() + first[size_t(e)];
    uint16_t *er = rowsOf(rows, e, dim), *eg = rowsOf(g, e, inter),
             *eu = rowsOf(up, e, inter), *eh = rowsOf(h, e, inter);
    auto drows = desc<2>(er, {c, dim});
    auto dri = desc<1>(index, {c});
    const std::array<LinearWeights, 3> &w = expertWeights[size_t(e)];
    invokeAs<void>(gather, &dx, &dri, &drows);
    linear(w[0], er, c, dim, eg, inter);
    linear(w[1], er, c, dim, eu, inter);
    auto dg = desc<2>(eg, {c, inter});
    auto du = desc<2>(eu, {c, inter});
    auto dcw = desc<1>(weightOf, {c});
    auto dh = desc<2>(eh, {c, inter});
    invokeAs<void>(swiglu, &dg, &du, &dcw, &dh);
    linear(w[2], eh, c, inter, rowsOf(o, e, dim), dim);
  };
  auto accumulate = [&](int64_t e) {
    const int64_t c = first[size_t(e) + 1] - first[size_t(e)];
    if (c == 0)
      return;
    auto dout = desc<2>(rowsOf(o, e, dim), {c, dim});
    auto dci = desc<1>(rowIndex.as<int32_t>() + first[size_t(e)], {c});
    invoke(s, "accumulate", &dy, &dout, &dci);
  };
  // Routed experts in ascending id, as model.py accumulates them.
  if (concurrent) {
    Bounds *caller = currentBounds;
    hostThreads->forEach(experts, [&](int64_t e) {
      BoundsScope scope(caller);
      expertOutput(e);
    });
    for (int64_t e = 0; e < experts; ++e)
      accumulate(e);
  } else {
    for (int64_t e = 0; e < experts; ++e) {
      expertOutput(e);
      accumulate(e);
    }
  }
  Tensor &shared = sharedExpert(s, x);
  Tensor &out = kernelResult(s, "result", 2, {n, dim}, x.base);
  auto dsh = desc<2>(shared.ptr(), {n, dim});
  auto dout = desc<2>(out.ptr(), {n, dim});
  invoke(s, "finish", &dy, &dsh, &dout);
  return absl::OkStatus();
}

Tensor &Executor::Impl::sharedExpert(Step &s, Tensor &x) {
  const int64_t n = x.rows(), dim = attr(s, "dim"), inter = attr(s, "inter");
  Tensor &ones = unitWeights(n);
  Tensor &h = kernelScratch("moe.shared_h", 2, {n, inter});
  Tensor &o = kernelScratch("moe.shared_o", 2, {n, dim});
  auto d1 = desc<1>(ones.ptr(), {n});
  auto dh = desc<2>(h.ptr(), {n, inter});
  if (s.layout.has("shared.w1.weight") &&
      gateUpPlaced.count(weight(s, "shared.w1.weight").data)) {
    // w1's rows then w3's as one weight (placeGroupedExperts): a row of
    // gu holds the gate outputs, then the up outputs.
    LinearWeights lw = linearWeights(s, "shared_gate_up", "shared.w1.", -1);
    lw.weight.sizes[0] *= 2;
    if (lw.scaled)
      lw.scale.sizes[0] *= 2;
    Tensor &gu = kernelScratch("moe.shared_gate_up", 2, {n, 2 * inter});
    linear(lw, x.ptr(), n, dim, gu.ptr(), 2 * inter);
    auto dgu = desc<2>(gu.ptr(), {n, 2 * inter});
    invoke(s, "swiglu_paired", &dgu, &d1, &dh);
  } else {
    Tensor &g = kernelScratch("moe.shared_g", 2, {n, inter});
    Tensor &up = kernelScratch("moe.shared_up", 2, {n, inter});
    linear(s, "shared_in", x.ptr(), n, dim, "shared.w1.", -1, g.ptr(), inter);
    linear(s, "shared_in", x.ptr(), n, dim, "shared.w3.", -1, up.ptr(), inter);
    auto dg = desc<2>(g.ptr(), {n, inter});
    auto du = desc<2>(up.ptr(), {n, inter});
    invoke(s, "swiglu", &dg, &du, &d1, &dh);
  }
  linear(s, "shared_out", h.ptr(), n, inter, "shared.w2.", -1, o.ptr(), dim);
  return o;
}

bool Executor::Impl::groupedMoe(Step &s, int64_t rows) {
  if (!runner || !s.kernels.count("experts_in") || !s.kernels.count("experts_out") ||
      !s.kernels.count("combine") || !s.layout.has("w1.weight", 0))
    return false;
  const bool paired = gateUpPlaced.count(weight(s, "w1.weight", 0).data) != 0;
  const char *in = paired ? "experts_gate_up" : "experts_in";
  // Its kernels on the device (the grouped linears in their split-K form,
  // not a slot a thread), and its experts' weights placed as arrays.
  for (const char *role : {in, "experts_out", "combine"})
    if (!kernel(s, role).runner)
      return false;
  // Past decode's few rows only where the grouped tensor-core form exists
  // (a block per expert gathering its slots on the device): it replaces the
  // split-K kernels at launch from its min_rows slots on (its rows argument
  // is the expert ids; GpuRunner::launch), and below them the split-K form,
  // which reads an expert's weights once a slot, runs few enough slots. So
  // every prefill's MoE runs from the device routing, with no host read.
  bool tensorCores = true;
  for (const char *role : {in, "experts_out"}) {
    const GpuKernel *g = kernel(s, role).gpu;
    if (g && g->launch.rule != "row_tiles")
      return false;
    tensorCores = tensorCores && g &&
                  std::any_of(g->forms.begin(), g->forms.end(), [](const auto &form) {
                    return form.second->launch.rule == "expert_tiles" &&
                           form.second->launch.rowsArgument == 1;
                  });
  }
  if (rows > kGroupedMoeMaxRows && (!tensorCores || !options.groupedPrefillMoe))
    return false;
  return expertsPlaced.count(weight(s, "w1.weight", 0).data) != 0;
}

bool Executor::Impl::placeArrays(Step &s, const std::vector<std::vector<const char *>> &arrays,
                                 const std::vector<int64_t> &instances) {
  for (const std::vector<const char *> &slots : arrays) {
    std::vector<const void *> parts;
    for (int64_t e : instances)
      for (const char *slot : slots) {
        if (!s.layout.has(slot, e))
          return false;
        parts.push_back(weight(s, slot, e).data);
      }
    if (!runner->placeTogether(parts))
      return false;
    bounds.addDeviceSpan(parts[0], parts.size() * weight(s, slots[0], instances[0]).bytes);
  }
  return true;
}

void Executor::Impl::placeGroupedExperts() {
  using Arrays = std::vector<std::vector<const char *>>;
  for (std::vector<Step> *steps : {&prefillSteps, &decodeSteps})
    for (Step &s : *steps) {
      const bool pairedKernels = s.kernels.count("swiglu_paired") != 0;
      // The shared expert's w1 then w3 (their scales likewise), for
      // shared_gate_up on the device (a host kernel reads the host's
      // weights, where w1 and w3 are apart).
      if (pairedKernels && s.kernels.count("shared_gate_up") &&
          kernel(s, "shared_gate_up").runner && s.layout.has("shared.w1.weight")) {
        Arrays shared = {{"shared.w1.weight", "shared.w3.weight"}};
        if (s.layout.has("shared.w1.scale"))
          shared.push_back({"shared.w1.scale", "shared.w3.scale"});
        if (placeArrays(s, shared, {-1}))
          gateUpPlaced.insert(weight(s, "shared.w1.weight").data);
      }
      if (!s.kernels.count("experts_in") || !s.layout.has("w1.weight", 0))
        continue;
      // With the fused gate/up kernel, an expert's w1 and w3 (and their
      // scales) lie one after the other: expert e's [w1; w3] rows are the
      // e-th block of one array, as that grouped linear reads its weights.
      const bool paired = pairedKernels && s.kernels.count("experts_gate_up") &&
                          kernel(s, "experts_gate_up").runner;
      const Arrays arrays =
          paired ? Arrays{{"w1.weight", "w3.weight"}, {"w1.scale", "w3.scale"},
                          {"w2.weight"}, {"w2.scale"}}
                 : Arrays{{"w1.weight"}, {"w1.scale"}, {"w3.weight"}, {"w3.scale"},
                          {"w2.weight"}, {"w2.scale"}};
      std::vector<int64_t> experts(size_t(attr(s, "experts")));
      std::iota(experts.begin(), experts.end(), int64_t(0));
      if (!placeArrays(s, arrays, experts))
        continue;
      expertsPlaced.insert(weight(s, "w1.weight", 0).data);
      if (paired)
        gateUpPlaced.insert(weight(s, "w1.weight", 0).data);
    }
}

absl::Status Executor::Impl::moeGrouped(Step &s, Tensor &x, Tensor &ids, Tensor &wts,
                                        Tensor &so, int sharedLane) {
  const int64_t n = x.rows(), dim = attr(s, "dim"), experts = attr(s, "experts"),
                topK = attr(s, "top_k"), inter = attr(s, "inter"), slots = n * topK;
  // The routing stays on the device; it comes back only to be written out
  // or replaced (the decisions' options).
  if (absl::Status st = decision(s, "moe_ids", ids, "<i4"); !st.ok())
    return st;
  if (absl::Status st = decision(s, "moe_weights", wts, "<f4"); !st.ok())
    return st;
  auto dids = desc<1>(ids.ptr(), {slots});
  // y[slot] = x[slot / slotsPerRow] @ W[ids[slot]]^T over the experts'
  // weights (and scales) as one array (placeGroupedExperts).
  // `parts` weights an expert (placeGroupedExperts: w1 and w3 together).
  auto grouped = [&](const char *role, const void *in, int64_t inRows, int64_t k,
                     const std::string &layer, void *out, int64_t outFeatures,
                     int64_t parts = 1) {
    const checkpoint::TensorView &w = weight(s, layer + "weight", 0);
    const checkpoint::TensorView &sc = weight(s, layer + "scale", 0);
    auto dx = desc<2>(in, {inRows, k});
    auto dw = desc<2>(w.data, {experts * parts * w.shape[0], w.shape.size() > 1 ? w.shape[1] : 1});
    auto ds = desc<2>(sc.data, {experts * parts * sc.shape[0], sc.shape.size() > 1 ? sc.shape[1] : 1});
    auto dy = desc<2>(out, {slots, outFeatures});
    invoke(s, role, &dx, &dids, &dw, &ds, &dy);
  };
  Tensor &h = kernelScratch("moe.slot_h", 2, {slots, inter});
  Tensor &o = kernelScratch("moe.slot_o", 2, {slots, dim});
  auto dw = desc<1>(wts.ptr(), {slots});
  auto dh = desc<2>(h.ptr(), {slots, inter});
  if (gateUpPlaced.count(weight(s, "w1.weight", 0).data)) {
    // A slot's row: its w1 outputs, then its w3 outputs.
    Tensor &gu = kernelScratch("moe.slot_gate_up", 2, {slots, 2 * inter});
    grouped("experts_gate_up", x.ptr(), n, dim, "w1.", gu.ptr(), 2 * inter, /*parts=*/2);
    auto dgu = desc<2>(gu.ptr(), {slots, 2 * inter});
    invoke(s, "swiglu_paired", &dgu, &dw, &dh);
  } else {
    Tensor &g = kernelScratch("moe.slot_g", 2, {slots, inter});
    Tensor &up = kernelScratch("moe.slot_up", 2, {slots, inter});
    grouped("experts_in", x.ptr(), n, dim, "w1.", g.ptr(), inter);
    grouped("experts_in", x.ptr(), n, dim, "w3.", up.ptr(), inter);
    auto dg = desc<2>(g.ptr(), {slots, inter});
    auto du = desc<2>(up.ptr(), {slots, inter});
    invoke(s, "swiglu", &dg, &du, &dw, &dh);
  }
  grouped("experts_out", h.ptr(), slots, inter, "w2.", o.ptr(), dim);
  if (sharedLane)
    runner->markBranch(cuda::BranchMark::Join, sharedLane);
  Tensor &out = kernelResult(s, "result", 2, {n, dim}, x.base);
  auto dO = desc<3>(o.ptr(), {n, topK, dim});
  auto dI = desc<2>(ids.ptr(), {n, topK});
  auto dS = desc<2>(so.ptr(), {n, dim});
  auto dOut = desc<2>(out.ptr(), {n, dim});
  invoke(s, "combine", &dO, &dI, &dS, &dOut);
  return absl::OkStatus();
}

} // namespace csa::runtime

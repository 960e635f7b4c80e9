//===- Profile.cpp - Where a run's time went: by op kind and by layer -----===//
//
// The profile of --profile (each plan step timed with the GPU synchronized):
// totals by op and kernels, rows by entry point and layer, and the layer a
// plan step belongs to. Split from Executor.cpp, which loads the plan and
// runs it (and fills Step::profiled).
//
//===----------------------------------------------------------------------===//
#include "runtime/executor/Executor.h"
#include "runtime/executor/ExecutorImpl.h"

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"

#include <algorithm>
#include <map>
#include <optional>

namespace csa::runtime {

std::optional<int64_t> namedLayer(const KernelCall &call, const artifact::Plan &plan) {
  bool otherWeights = false;
  for (const KernelArg &a : call.args) {
    if (a.kind == ArgKind::Weight) {
      absl::string_view name = a.name;
      int64_t layer = 0;
      if (absl::ConsumePrefix(&name, "layers.") &&
          absl::SimpleAtoi(name.substr(0, name.find('.')), &layer) && layer >= 0)
        return layer;
      otherWeights = true;
    } else if (a.kind == ArgKind::Cache) {
      if (const CacheBuffer *b = plan.findCache(a.name))
        return b->layer;
    }
  }
  if (otherWeights)
    return ProfileEntry::kBeforeLayers;
  return std::nullopt;
}

void Executor::resetProfile() {
  impl->profileTotals.clear();
  for (std::vector<Impl::Step> *steps : {&impl->prefillSteps, &impl->decodeSteps})
    for (Impl::Step &step : *steps)
      step.profiled = ProfileEntry{};
}

std::vector<ProfileEntry> Executor::layerProfile() const {
  std::vector<ProfileEntry> out;
  for (const std::vector<Impl::Step> *steps : {&impl->prefillSteps, &impl->decodeSteps}) {
    // Rows of this entry point by (layer, op and kernels).
    std::map<std::pair<int64_t, std::string>, size_t> rows;
    for (const Impl::Step &step : *steps) {
      const ProfileEntry &p = step.profiled;
      if (p.calls == 0)
        continue;
      auto [it, added] = rows.emplace(std::make_pair(p.layer, p.step), out.size());
      if (added) {
        out.push_back(p);
        continue;
      }
      ProfileEntry &row = out[it->second];
      row.calls += p.calls;
      row.seconds += p.seconds;
      row.hostSeconds += p.hostSeconds;
      row.bytesToDevice += p.bytesToDevice;
      row.bytesToHost += p.bytesToHost;
    }
  }
  return out;
}

int64_t Executor::stepLayer(bool decode, size_t index) const {
  const std::vector<Impl::Step> &steps = decode ? impl->decodeSteps : impl->prefillSteps;
  return index < steps.size() ? steps[index].layer : ProfileEntry::kBeforeLayers;
}

std::vector<ProfileEntry> Executor::profile() const {
  std::vector<ProfileEntry> out;
  for (const auto &[key, e] : impl->profileTotals)
    out.push_back(e);
  std::sort(out.begin(), out.end(), [](const ProfileEntry &a, const ProfileEntry &b) {
    return a.seconds > b.seconds || (a.seconds == b.seconds && a.step < b.step);
  });
  return out;
}

} // namespace csa::runtime

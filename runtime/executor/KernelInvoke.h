//===- KernelInvoke.h - A plan step's kernel call, on its side -*- C++ -*-===//
//
// Internal to the executor: invokeAs<R>(kernel, args...) calls a kernel of
// the plan with its memref descriptors and scalars, checked against the
// kernel's signature (checkArg), on the side the run is on: the host kernel
// directly (the CPU path), the host kernel on the device mirrors with its
// launch recorded (emulation; with graph hazards checked, what it touched:
// FootprintProbe), or the PTX kernel through GpuRunner::launch.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_EXECUTOR_KERNELINVOKE_H
#define CSA_RUNTIME_EXECUTOR_KERNELINVOKE_H

#include "runtime/executor/GpuRunner.h"

#include <array>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>

namespace csa::runtime::detail {

/// Checks one call argument against the kernel's signature.
template <int N>
void checkArg(const KernelRef &k, size_t i, Desc<N> *d) {
  if (i >= k.signature->size() || !(*k.signature)[i].memref)
    throw std::invalid_argument("argument " + std::to_string(i) + " of " +
                                k.name + " is not a memref in its signature");
  const ArgSignature &sig = (*k.signature)[i];
  if (sig.sizes.size() != size_t(N))
    throw std::invalid_argument("argument " + std::to_string(i) + " of " +
                                k.name + " has rank " +
                                std::to_string(sig.sizes.size()) +
                                "; the step passes rank " + std::to_string(N));
  for (int r = 0; r < N; ++r)
    if (sig.sizes[size_t(r)] >= 0 && sig.sizes[size_t(r)] != d->sizes[r])
      throw std::invalid_argument(
          "argument " + std::to_string(i) + " of " + k.name + ": dimension " +
          std::to_string(r) + " is " + std::to_string(sig.sizes[size_t(r)]) +
          " in the kernel, " + std::to_string(d->sizes[r]) +
          " in the step (a kernel of another shape?)");
  const int64_t span = elementSpan(d);
  const char *base = static_cast<const char *>(d->aligned) +
                     d->offset * sig.elementBytes;
  if (span > 0 && currentBounds &&
      !currentBounds->contains(base, size_t(span * sig.elementBytes)))
    throw std::out_of_range("argument " + std::to_string(i) + " of " + k.name +
                            " reaches past its buffer");
}
inline void checkArg(const KernelRef &k, size_t i, int64_t) {
  if (i >= k.signature->size() || (*k.signature)[i].memref)
    throw std::invalid_argument("argument " + std::to_string(i) + " of " +
                                k.name + " is not an integer in its signature");
}
inline void checkArg(const KernelRef &k, size_t i, int32_t v) {
  checkArg(k, i, int64_t(v));
}
inline void checkArg(const KernelRef &k, size_t i, float) {
  if (i >= k.signature->size() || (*k.signature)[i].memref)
    throw std::invalid_argument("argument " + std::to_string(i) + " of " +
                                k.name + " is not a float in its signature");
}

template <int N> void hostSide(Desc<N> *d) { currentRunner->toHost(d->aligned); }
template <typename T> void hostSide(T) {}

/// Emulation: a descriptor over the argument's mirror (kept alive by
/// `keep` for the call); scalars as they are.
template <int N>
Desc<N> *onMirror(GpuRunner &runner, Desc<N> *d,
                  std::vector<std::shared_ptr<void>> &keep) {
  auto copy = std::make_shared<Desc<N>>(*d);
  bool empty = false;
  for (int i = 0; i < N; ++i)
    empty |= d->sizes[i] == 0;
  copy->aligned = runner.emulatedArg(d->aligned, empty);
  copy->allocated = copy->aligned;
  keep.push_back(copy);
  return copy.get();
}
template <typename T>
T onMirror(GpuRunner &, T v, std::vector<std::shared_ptr<void>> &) {
  return v;
}

template <int N> bool isConstantArg(const GpuRunner &runner, Desc<N> *d) {
  return runner.isConstant(d->aligned);
}
template <typename T> bool isConstantArg(const GpuRunner &, T) { return false; }

/// Emulation with graph hazards checked: the bytes a host kernel's memref
/// arguments span, copied before the call and compared after it: what
/// changed is what it wrote (a write of the bytes already there goes
/// unseen), all of it what it may read.
class FootprintProbe {
public:
  template <int N> void add(Desc<N> *d, int64_t elementBytes, bool constant) {
    if (constant)
      return; // a weight: read by every launch, written by none
    int64_t runs = 1;
    for (int r = 0; r < N; ++r) {
      if (d->sizes[r] <= 0 || d->strides[r] < 0)
        return; // nothing, or a layout no kernel is given: not tracked
      if (r + 1 < N || d->strides[r] != 1)
        runs *= d->sizes[r];
    }
    const uintptr_t base = uintptr_t(d->aligned) + uintptr_t(d->offset * elementBytes);
    const bool innerRun = N > 0 && d->strides[N - 1] == 1;
    const int64_t runBytes = (innerRun ? d->sizes[N - 1] : 1) * elementBytes;
    if (runs > (int64_t(1) << 16)) { // its whole span
      spans.push_back({base, base + uintptr_t(elementSpan(d) * elementBytes)});
      return;
    }
    std::array<int64_t, N == 0 ? 1 : N> index{};
    const int outer = innerRun ? N - 1 : N;
    for (int64_t run = 0; run < runs; ++run) {
      int64_t element = 0;
      for (int r = 0; r < outer; ++r)
        element += index[size_t(r)] * d->strides[r];
      const uintptr_t at = base + uintptr_t(element * elementBytes);
      spans.push_back({at, at + uintptr_t(runBytes)});
      for (int r = outer - 1; r >= 0; --r) {
        if (++index[size_t(r)] < d->sizes[r])
          break;
        index[size_t(r)] = 0;
      }
    }
  }
  template <typename T> void add(T, int64_t, bool) {}
  /// Copies the spans' bytes (after every add).
  void snapshot() {
    cuda::normalizeRanges(spans);
    for (auto [b, e] : spans)
      before.insert(before.end(), reinterpret_cast<const uint8_t *>(b),
                    reinterpret_cast<const uint8_t *>(e));
  }
  /// After the call: its footprint. Where its GPU form writes memory no
  /// argument names, it also writes one byte standing for that memory, an
  /// address in the host code of `fn` (no buffer's): with module state
  /// (GpuKernel::moduleState, shared by every launch of it) `fn` itself, so
  /// that two launches of it side by side are a hazard; with state buffers
  /// (GpuKernel::state, a set a graph lane) `fn` + 1 + the lane, so that
  /// two launches on one lane's buffers are.
  std::shared_ptr<const cuda::LaunchFootprint> finish(const std::string &kernel, const void *fn,
                                                      const GpuKernel *gpu, int lane) const {
    auto f = std::make_shared<cuda::LaunchFootprint>();
    f->kernel = kernel;
    f->read = spans;
    size_t offset = 0;
    for (auto [b, e] : spans) {
      const uint8_t *now = reinterpret_cast<const uint8_t *>(b);
      for (size_t i = 0; i < e - b; ++i)
        if (now[i] != before[offset + i]) {
          if (!f->written.empty() && f->written.back().second == b + i)
            f->written.back().second += 1;
          else
            f->written.push_back({b + i, b + i + 1});
        }
      offset += e - b;
    }
    if (gpu && (gpu->moduleState || !gpu->state.empty())) {
      const uintptr_t at = uintptr_t(fn) + (gpu->moduleState ? 0 : uintptr_t(1 + lane));
      f->written.push_back({at, at + 1});
      cuda::normalizeRanges(f->written);
    }
    return f;
  }

private:
  std::vector<std::pair<cuda::DevicePtr, cuda::DevicePtr>> spans;
  std::vector<uint8_t> before;
};

template <typename R, typename... A> R invokeAs(const KernelRef &k, A... args) {
  if (sizeof...(A) != k.signature->size())
    throw std::invalid_argument(k.name + " takes " +
                                std::to_string(k.signature->size()) +
                                " arguments; the step passes " +
                                std::to_string(sizeof...(A)));
  size_t i = 0;
  (checkArg(k, i++, args), ...);
  struct Placing { // names the kernel in CSA_CUDA_TRACE lines
    GpuRunner *runner;
    Placing(GpuRunner *r, const std::string &name) : runner(r) {
      if (runner)
        runner->placing = &name;
    }
    ~Placing() {
      if (runner)
        runner->placing = nullptr;
    }
  } placing(k.runner, k.name);
  if (k.runner && k.runner->emulated()) {
    std::vector<std::shared_ptr<void>> keep;
    auto fn = reinterpret_cast<R (*)(A...)>(k.fn);
    auto mirrored = std::make_tuple(onMirror(*k.runner, args, keep)...);
    std::vector<uint64_t> params;
    std::apply(
        [&](auto... m) {
          for (const GpuArg &a : {gpuArg(m)...})
            appendSlots(params, a, uint64_t(uintptr_t(a.aligned)));
        },
        mirrored);
    ++k.runner->launches;
    // Recorded after the call (nothing is replayed), with what it touched
    // when graph hazards are checked.
    std::optional<FootprintProbe> probe;
    if (k.runner->recordsFootprints()) {
      probe.emplace();
      std::vector<bool> constant;
      (constant.push_back(isConstantArg(*k.runner, args)), ...);
      std::apply(
          [&](auto... m) {
            size_t arg = 0;
            ((probe->add(m, (*k.signature)[arg].elementBytes, constant[arg]), ++arg), ...);
          },
          mirrored);
      probe->snapshot();
    }
    auto done = [&] {
      k.runner->recordEmulated(k.fn, k.name, std::move(params),
                               probe ? probe->finish(k.name, k.fn, k.gpu, k.runner->currentLane())
                                     : nullptr);
      k.runner->emulatedCallDone();
    };
    if constexpr (std::is_void_v<R>) {
      std::apply(fn, mirrored);
      done();
      return;
    } else {
      R r = std::apply(fn, mirrored);
      done();
      return r;
    }
  }
  if (k.runner) {
    // Filled in place in vectors kept between launches: no allocation per
    // argument (a launch's host work is mostly such bookkeeping).
    thread_local std::vector<GpuArg> gpuArgs;
    gpuArgs.resize(sizeof...(A));
    size_t slot = 0;
    (setGpuArg(gpuArgs[slot++], args), ...);
    int32_t r = k.runner->launch(k, gpuArgs);
    if constexpr (std::is_void_v<R>)
      return;
    else
      return R(r);
  }
  if (currentRunner) // a host kernel in a GPU run: its buffers, current here
    (hostSide(args), ...);
  return reinterpret_cast<R (*)(A...)>(k.fn)(args...);
}

} // namespace csa::runtime::detail

#endif // CSA_RUNTIME_EXECUTOR_KERNELINVOKE_H

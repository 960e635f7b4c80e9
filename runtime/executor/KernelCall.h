//===- KernelCall.h - How a step calls a generated kernel -------*- C++ -*-===//
//
// Internal to the executor: how a step calls a generated kernel. Memref
// descriptors, the bounds every argument is checked against, the values
// (Tensor) a plan's steps pass, the host kernels' shared object, and a
// kernel reference with its GPU form (GpuKernel) for the device path.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_EXECUTOR_KERNELCALL_H
#define CSA_RUNTIME_EXECUTOR_KERNELCALL_H

#include "runtime/artifact/OpAbi.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/LaunchGraphs.h"
#include "runtime/cuda/LaunchRuleJson.h"
#include "runtime/executor/KernelLibrary.h"
#include "runtime/numerics/Quantize.h"

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#include <algorithm>
#include <atomic>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <unordered_map>

namespace csa::runtime {

using artifact::ArgKind;
using artifact::CacheBuffer;
using artifact::CacheKind;
using artifact::KernelArg;
using artifact::KernelCall;
using nlohmann::json;

namespace detail {


/// A ranked memref descriptor as `_mlir_ciface_` functions take it.
template <int N> struct Desc {
  const void *allocated;
  const void *aligned;
  int64_t offset;
  int64_t sizes[N];
  int64_t strides[N];
};

/// A row-major descriptor of `p` (element offsets and strides).
template <int N>
Desc<N> desc(const void *p, std::array<int64_t, N> sizes) {
  Desc<N> d{p, p, 0, {}, {}};
  int64_t stride = 1;
  for (int i = N - 1; i >= 0; --i) {
    d.sizes[i] = sizes[size_t(i)];
    d.strides[i] = stride;
    stride *= sizes[size_t(i)];
  }
  return d;
}

/// Elements from `d`'s first to one past its last (0 when it has none).
template <int N> int64_t elementSpan(const Desc<N> *d) {
  int64_t span = 1;
  for (int r = 0; r < N; ++r) {
    if (d->sizes[r] == 0)
      return 0;
    span += (d->sizes[r] - 1) * d->strides[r];
  }
  return span;
}

/// The memory the executor hands to kernels (transients, weights, caches):
/// every descriptor a kernel receives must lie inside one of these ranges,
/// so a damaged or edited plan is an error, not an out-of-bounds access.
class Bounds {
public:
  void add(const void *p, size_t bytes) {
    if (p && bytes)
      ranges[uintptr_t(p)] = uintptr_t(p) + bytes;
  }
  void remove(const void *p) { ranges.erase(uintptr_t(p)); }
  /// The registered range that holds p.
  bool range(const void *p, uintptr_t &start, uintptr_t &end) const {
    auto it = ranges.upper_bound(uintptr_t(p));
    if (it == ranges.begin())
      return false;
    --it;
    if (uintptr_t(p) >= it->second)
      return false;
    start = it->first;
    end = it->second;
    return true;
  }
  /// Registered ranges from `p` on that lie one after another on the device
  /// only (GpuRunner::placeTogether): a kernel run there may read
  /// [p, p + bytes) as one array.
  void addDeviceSpan(const void *p, size_t bytes) { deviceSpans[uintptr_t(p)] = bytes; }
  /// Whether [p, p + bytes) lies inside one registered range, or is the
  /// start of a device span that long.
  bool contains(const void *p, size_t bytes) const {
    if (auto s = deviceSpans.find(uintptr_t(p)); s != deviceSpans.end() && bytes <= s->second)
      return true;
    auto it = ranges.upper_bound(uintptr_t(p));
    if (it == ranges.begin())
      return false;
    --it;
    return uintptr_t(p) + bytes <= it->second;
  }

private:
  // Every argument of every launch is looked up here (a B-tree: a few cache
  // lines a lookup among the tens of thousands of weights, not a pointer
  // chase per level).
  absl::btree_map<uintptr_t, uintptr_t> ranges;
  absl::flat_hash_map<uintptr_t, size_t> deviceSpans;
};
inline thread_local Bounds *currentBounds = nullptr;

/// Makes `bounds` the current registry for the scope of an entry point.
class BoundsScope {
public:
  explicit BoundsScope(Bounds *bounds) : previous(currentBounds) {
    currentBounds = bounds;
  }
  ~BoundsScope() { currentBounds = previous; }

private:
  Bounds *previous;
};

/// A value a step produces: its bytes, its dimensions as last written and the
/// absolute position of row 0 (how top-k sets and pools answer by position).
class GpuRunner;
/// The runner of the entry point being run (null on the CPU); see GpuRunner.
inline thread_local GpuRunner *currentRunner = nullptr;
/// Frees the device copy of the host buffer at `p` (defined after GpuRunner).
inline void forgetDeviceCopy(const void *p);

/// An allocator whose resize leaves new bytes as they are (std::vector's
/// value-initializes them): Tensor::resize zeroes them only where the host
/// reads its buffers (the CPU path). On the GPU path a transient's host
/// bytes are written before they are read, or never read (its kernels'
/// results stay on the device), and zeroing them was half of a decode
/// step's host work.
template <typename T> struct DefaultInitAllocator : std::allocator<T> {
  template <typename U> struct rebind { using other = DefaultInitAllocator<U>; };
  DefaultInitAllocator() = default;
  template <typename U> DefaultInitAllocator(const DefaultInitAllocator<U> &) {}
  template <typename U> void construct(U *p) { ::new (static_cast<void *>(p)) U; }
  template <typename U, typename... A> void construct(U *p, A &&...args) {
    ::new (static_cast<void *>(p)) U(std::forward<A>(args)...);
  }
};
/// A transient's bytes.
using Bytes = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;

struct Tensor {
  Bytes data;
  std::vector<int64_t> dims;
  int64_t base = 0;
  int64_t elementBytes = 1;
  /// The pooled buffer this value held last (compared, never read): a value
  /// gets it again when it is free, so that from step to step every value
  /// keeps its address, and on the GPU its device copy and the launches of
  /// a kept graph stay as they were (one value that outgrows its buffer
  /// moves alone instead of shifting the others).
  const uint8_t *lastBuffer = nullptr;
  /// Not null: the value is these bytes of another value (a sequence's row
  /// of a batch value, Batch.cpp), not `data`; read-only, and resize()
  /// makes the value its own again.
  uint8_t *view = nullptr;

  int64_t rows() const { return dims.empty() ? 0 : dims[0]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims)
      n *= d;
    return n;
  }
  void resize(std::vector<int64_t> d) {
    view = nullptr;
    dims = std::move(d);
    if (currentBounds)
      currentBounds->remove(data.data());
    // Keep at least one byte so that a 0-row value still has an address.
    const void *before = data.data();
    const size_t bytes = size_t(std::max<int64_t>(numel() * elementBytes, 1));
    // A buffer that must grow gets 1/8 more than asked (std::vector's
    // resize grows to twice the bytes in use, which is exactly the request
    // when a small value held the buffer last): a value that grows a little
    // every few steps (a long context's index scores) does not move its
    // buffer, and with it the device copy, each time.
    // The bytes a buffer held are not the new value's (every caller writes
    // or zeroes what it reads), so a buffer that must grow is not copied:
    // copying a pooled buffer's old contents into the new one touched every
    // page of it (a 4096-token prefill's mHC streams: 168 MB a layer).
    if (bytes > data.capacity()) {
      data.clear();
      data.reserve(bytes + bytes / 8);
    }
    const size_t had = data.size();
    data.resize(bytes);
    if (!currentRunner && bytes > had)
      std::memset(data.data() + had, 0, bytes - had);
    if (before && before != data.data())
      forgetDeviceCopy(before); // the old bytes are freed: so is their copy
    if (currentBounds)
      currentBounds->add(data.data(), data.size());
  }
  template <typename T> T *as() { return reinterpret_cast<T *>(ptr()); }
  void *ptr() { return view ? view : data.data(); }
  /// The bytes the value may be read from (a view's: its shape's).
  size_t byteSize() const {
    return view ? size_t(std::max<int64_t>(numel(), 0) * elementBytes) : data.size();
  }
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// A kernel's argument as kernels/host.json declares it: a memref (rank,
/// static sizes with -1 for dynamic, element bytes) or a scalar.
struct ArgSignature {
  bool memref = false;
  std::vector<int64_t> sizes;
  int64_t elementBytes = 0;
};

/// Parses "memref<?x64xbf16>", "memref<?x33xi8, strided<[?, 1], offset: ?>>",
/// "i64", "f32"; false for anything else.
inline bool parseSignature(const std::string &type, ArgSignature &sig) {
  if (type.rfind("memref<", 0) != 0) {
    sig.memref = false;
    return type == "i64" || type == "i32" || type == "f32" || type == "index";
  }
  sig.memref = true;
  std::string body = type.substr(7);
  size_t end = body.find_first_of(",>");
  if (end == std::string::npos)
    return false;
  body = body.substr(0, end);
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    size_t x = body.find('x', start);
    if (x == std::string::npos) {
      items.push_back(body.substr(start));
      break;
    }
    items.push_back(body.substr(start, x - start));
    start = x + 1;
  }
  const std::string element = items.back();
  items.pop_back();
  static const std::map<std::string, int64_t> bytes = {
      {"bf16", 2}, {"f32", 4}, {"i8", 1}, {"i32", 4}, {"i64", 8}};
  auto it = bytes.find(element);
  if (it == bytes.end())
    return false;
  sig.elementBytes = it->second;
  for (const std::string &d : items) {
    if (d == "?") {
      sig.sizes.push_back(-1);
      continue;
    }
    char *endp = nullptr;
    long long v = std::strtoll(d.c_str(), &endp, 10);
    if (!endp || *endp != '\0' || v < 0)
      return false;
    sig.sizes.push_back(v);
  }
  return true;
}

/// One argument of a kernel launched on the GPU.
struct GpuArg {
  enum Kind { Memref, I64, I32, F32 } kind = I64;
  const void *aligned = nullptr;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
  int64_t i = 0;
  float f = 0;
};
template <int N> void setGpuArg(GpuArg &a, Desc<N> *d);
template <int N> GpuArg gpuArg(Desc<N> *d) {
  GpuArg a;
  setGpuArg(a, d);
  return a;
}
inline GpuArg gpuArg(int64_t v) {
  GpuArg a;
  a.kind = GpuArg::I64;
  a.i = v;
  return a;
}
inline GpuArg gpuArg(int32_t v) {
  GpuArg a;
  a.kind = GpuArg::I32;
  a.i = v;
  return a;
}
inline GpuArg gpuArg(float v) {
  GpuArg a;
  a.kind = GpuArg::F32;
  a.f = v;
  return a;
}
/// gpuArg into `a`, reusing its vectors' memory (a launch's host work is
/// mostly such bookkeeping: no allocation per argument).
template <int N> void setGpuArg(GpuArg &a, Desc<N> *d) {
  a.kind = GpuArg::Memref;
  a.aligned = d->aligned;
  a.offset = d->offset;
  a.sizes.assign(d->sizes, d->sizes + N);
  a.strides.assign(d->strides, d->strides + N);
}
template <typename T> void setGpuArg(GpuArg &a, T v) {
  GpuArg scalar = gpuArg(v);
  a.kind = scalar.kind;
  a.i = scalar.i;
  a.f = scalar.f;
  a.sizes.clear();
  a.strides.clear();
}

/// `a` as a launch's parameter slots (cuda::KernelLaunch): a memref as
/// (allocated, aligned, offset, sizes..., strides...) with both pointers
/// `pointer` (its device address); an i32 or f32 in its slot's first 4
/// bytes.
inline void appendSlots(std::vector<uint64_t> &slots, const GpuArg &a, uint64_t pointer) {
  switch (a.kind) {
  case GpuArg::Memref:
    slots.push_back(pointer);
    slots.push_back(pointer);
    slots.push_back(uint64_t(a.offset));
    for (int64_t v : a.sizes)
      slots.push_back(uint64_t(v));
    for (int64_t v : a.strides)
      slots.push_back(uint64_t(v));
    return;
  case GpuArg::F32: {
    uint32_t bits = 0;
    std::memcpy(&bits, &a.f, 4);
    slots.push_back(bits);
    return;
  }
  case GpuArg::I32:
    slots.push_back(uint64_t(uint32_t(int32_t(a.i))));
    return;
  case GpuArg::I64:
    slots.push_back(uint64_t(a.i));
    return;
  }
}

/// How kernels.json says to launch a kernel.
struct GpuKernel {
  cuda::Function fn = nullptr;
  cuda::LaunchRule launch;
  bool status = false;
  /// kernels.json "module_state": it writes its module's own memory, so two
  /// launches of it must not run side by side on graph lanes.
  bool moduleState = false;
  /// kernels.json "state": buffers it keeps between launches (the split
  /// attention forms' partials and counters), a set a graph lane
  /// (GpuRunner::stateBuffers), so that its launches may run side by side.
  std::vector<cuda::KernelStateBuffer> state;
  /// kernels.json "params": the 8-byte parameter slots a launch passes (the
  /// arguments' descriptors and scalars, the status, the state buffers), so
  /// that a launch the kernel's PTX does not take fails by name.
  size_t paramSlots = 0;
  std::vector<int64_t> elementBytes; ///< per argument (0 for scalars)
  /// The kernel's other forms (kernels.json "replaces": row-tiled, tensor
  /// cores, the split-K batch variant) with their min_rows, ascending: a
  /// launch with that many rows runs the last one it reaches instead (same
  /// arguments).
  std::vector<std::pair<int64_t, const GpuKernel *>> forms;
};

struct KernelRef {
  void *fn = nullptr;
  const std::vector<ArgSignature> *signature = nullptr;
  std::string name;
  const GpuKernel *gpu = nullptr; ///< set when the kernels run on the GPU
  GpuRunner *runner = nullptr;
};


} // namespace detail
} // namespace csa::runtime

#endif // CSA_RUNTIME_EXECUTOR_KERNELCALL_H

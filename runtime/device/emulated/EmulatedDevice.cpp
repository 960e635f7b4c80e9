//===- EmulatedDevice.cpp - Host memory as the device ---------------------===//
#include "runtime/device/emulated/EmulatedDevice.h"

#include "runtime/device/cuda/BuiltinKernels.h"

#include <cstdio>
#include <cstring>

namespace csa::device {

namespace {
void *at(DevicePtr p) { return reinterpret_cast<void *>(uintptr_t(p)); }
// Stand-ins for the CUDA device's builtin kernels (BuiltinKernels.h) in the
// graph bookkeeping: a small upload, fill or device copy is a launch in the
// run there, so it is one here.
char writeInlineId, fillId, copyId, copyRowsId;
} // namespace

/// LaunchGraphs' GPU side for launches that have already run: graphs are
/// tokens, and an updated node is named when tracing.
class EmulatedDevice::CountingLauncher final : public cuda::GraphLauncher {
public:
  explicit CountingLauncher(bool trace) : trace(trace) {}
  std::map<cuda::Function, std::string> names;
  absl::Status launchNow(const cuda::KernelLaunch &) override { return absl::OkStatus(); }
  absl::StatusOr<Graph> createGraph(const std::vector<cuda::KernelLaunch> &) override {
    return static_cast<Graph>(new int(0));
  }
  absl::Status updateGraphNode(Graph, size_t node, const cuda::KernelLaunch &k) override {
    if (trace) {
      auto it = names.find(k.fn);
      std::fprintf(stderr, "csa-cuda: graph node %zu updated (%s)\n", node,
                   it == names.end() ? "?" : it->second.c_str());
    }
    return absl::OkStatus();
  }
  absl::Status launchGraph(Graph) override { return absl::OkStatus(); }
  void destroyGraph(Graph graph) override { delete static_cast<int *>(graph); }

private:
  const bool trace;
};

EmulatedDevice::EmulatedDevice(const cuda::LaunchGraphOptions *options, bool trace) {
  if (options) {
    footprints = options->checkHazards;
    launcher = std::make_unique<CountingLauncher>(trace);
    graphs = std::make_unique<cuda::LaunchGraphs>(*launcher, *options);
  }
}

EmulatedDevice::~EmulatedDevice() = default;

absl::StatusOr<DevicePtr> EmulatedDevice::allocate(size_t bytes) {
  auto block = std::make_unique<uint8_t[]>(bytes);
  const DevicePtr ptr = DevicePtr(uintptr_t(block.get()));
  memory[ptr] = std::move(block);
  return ptr;
}

absl::Status EmulatedDevice::release(DevicePtr ptr) {
  if (memory.erase(ptr) == 0)
    return absl::InvalidArgumentError("emulated device: release of memory it did not allocate");
  return absl::OkStatus();
}

absl::Status EmulatedDevice::copyToDevice(DevicePtr dst, const void *src, size_t bytes) {
  absl::Status st = bytes <= kInlineBytes
                        ? builtin(&writeInlineId, "csa_write_inline", dst, bytes, {}, {{dst, bytes}})
                        : endRun();
  std::memcpy(at(dst), src, bytes);
  return st;
}

absl::Status EmulatedDevice::copyToHost(void *dst, DevicePtr src, size_t bytes) {
  absl::Status st = endRun();
  std::memcpy(dst, at(src), bytes);
  return st;
}

absl::Status EmulatedDevice::copyOnDevice(DevicePtr dst, DevicePtr src, size_t bytes) {
  std::memcpy(at(dst), at(src), bytes);
  return builtin(&copyId, "csa_copy", dst, bytes, {{src, bytes}}, {{dst, bytes}});
}

absl::Status EmulatedDevice::copyRowsOnDevice(DevicePtr dst, size_t dstPitch, DevicePtr src,
                                              size_t srcPitch, size_t width, size_t rows) {
  std::vector<std::pair<DevicePtr, size_t>> read, written;
  for (size_t r = 0; r < rows; ++r) {
    std::memcpy(at(dst + r * dstPitch), at(src + r * srcPitch), width);
    if (footprints) {
      read.push_back({src + r * srcPitch, width});
      written.push_back({dst + r * dstPitch, width});
    }
  }
  return builtin(&copyRowsId, "csa_copy_rows", dst, width * rows, read, written);
}

absl::Status EmulatedDevice::fill(DevicePtr dst, uint8_t byte, size_t bytes) {
  std::memset(at(dst), byte, bytes);
  return builtin(&fillId, "csa_fill", dst, bytes, {}, {{dst, bytes}});
}

absl::Status EmulatedDevice::builtin(const void *id, const char *name, DevicePtr dst,
                                     size_t bytes,
                                     const std::vector<std::pair<DevicePtr, size_t>> &read,
                                     const std::vector<std::pair<DevicePtr, size_t>> &written) {
  if (!graphs || bytes == 0)
    return absl::OkStatus();
  cuda::KernelLaunch k;
  k.fn = const_cast<void *>(id);
  k.params = {dst, bytes};
  nameKernel(k.fn, name);
  if (footprints) {
    auto f = std::make_shared<cuda::LaunchFootprint>();
    f->kernel = name;
    for (auto [list, out] : {std::pair{&read, &f->read}, std::pair{&written, &f->written}}) {
      for (auto [p, n] : *list)
        out->push_back({p, p + n});
      cuda::normalizeRanges(*out);
    }
    k.footprint = std::move(f);
  }
  return graphs->add(std::move(k));
}

absl::Status EmulatedDevice::dispatch(const cuda::KernelLaunch &k) {
  return graphs ? graphs->add(k) : absl::OkStatus();
}

absl::Status EmulatedDevice::endRun() { return graphs ? graphs->flush() : absl::OkStatus(); }

absl::Status EmulatedDevice::beginGraphRun(const std::string &entry) {
  return graphs ? graphs->begin(entry) : absl::OkStatus();
}

absl::Status EmulatedDevice::graphBoundary() {
  return graphs ? graphs->boundary() : absl::OkStatus();
}

void EmulatedDevice::markBranch(cuda::BranchMark m, int lane) {
  if (graphs)
    graphs->mark(m, lane);
}

cuda::LaunchGraphCounters EmulatedDevice::graphCounters() const {
  return graphs ? graphs->counters() : cuda::LaunchGraphCounters();
}

void EmulatedDevice::nameKernel(cuda::Function fn, const std::string &name) {
  if (launcher)
    launcher->names.emplace(fn, name);
}

} // namespace csa::device

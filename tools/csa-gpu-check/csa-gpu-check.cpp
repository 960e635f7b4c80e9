//===- csa-gpu-check.cpp - Generated GPU kernels against the CPU kernels --===//
//
// Runs each PTX kernel csa-compile generated (--emit=ptx) on the GPU and the
// same kernel's host build (--emit=object) on the CPU, on the same fresh
// random inputs, and compares every buffer afterwards. The host kernels are
// bit-exact against the reference forward (test/unit/codegen), so this
// checks the GPU route: thread mapping, NVVM lowering, libdevice, PTX.
//
//   csa-gpu-check --host=lib.so --ptx=DIR [--rows=37] [--seed=1] [--filter=linear_]
//
// Kernels whose arguments are all dense memrefs of bf16, f32 or i8 are run
// (inputs: normal bf16/f32 values, i8 codes in [100, 140], moderate E4M3 and
// UE8M0 values); kernels with scalar, index or strided arguments need inputs
// with meaning (positions, token ids, cache views) and are listed as not run.
// Every '?' dimension is --rows (37: not a multiple of the row tile).
//
// Exit status 0 when every run kernel matched (bf16 within one unit in the
// last place, f32 within 1e-5 relative), 1 otherwise; a table is printed.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaDriver.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Arg {
  std::string element; ///< bf16, f32, i8
  std::vector<int64_t> shape;
  int64_t elementBytes = 0;
  std::vector<uint8_t> host, gpu;
  csa::cuda::DevicePtr device = 0;
  int64_t count() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

/// "memref<?x64xbf16>" -> shape and element; false for anything else.
bool parseMemref(const std::string &type, int64_t rows, Arg &arg) {
  if (type.rfind("memref<", 0) != 0 || type.back() != '>' ||
      type.find("strided") != std::string::npos || type.find(',') != std::string::npos)
    return false;
  std::string body = type.substr(7, type.size() - 8);
  std::stringstream parts(body);
  std::string part;
  std::vector<std::string> items;
  while (std::getline(parts, part, 'x'))
    items.push_back(part);
  if (items.empty())
    return false;
  arg.element = items.back();
  items.pop_back();
  for (const std::string &d : items)
    arg.shape.push_back(d == "?" ? rows : std::stoll(d));
  if (arg.element == "bf16")
    arg.elementBytes = 2;
  else if (arg.element == "f32")
    arg.elementBytes = 4;
  else if (arg.element == "i8")
    arg.elementBytes = 1;
  else
    return false;
  return true;
}

uint16_t toBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return uint16_t(bits >> 16);
}
float fromBf16(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// Calls a host kernel whose arguments are all memref descriptors (each
/// passed as a pointer).
void callHost(void *fn, std::vector<void *> &a) {
  switch (a.size()) {
  case 2: reinterpret_cast<void (*)(void *, void *)>(fn)(a[0], a[1]); break;
  case 3: reinterpret_cast<void (*)(void *, void *, void *)>(fn)(a[0], a[1], a[2]); break;
  case 4: reinterpret_cast<void (*)(void *, void *, void *, void *)>(fn)(a[0], a[1], a[2], a[3]); break;
  case 5: reinterpret_cast<void (*)(void *, void *, void *, void *, void *)>(fn)(a[0], a[1], a[2], a[3], a[4]); break;
  case 6: reinterpret_cast<void (*)(void *, void *, void *, void *, void *, void *)>(fn)(a[0], a[1], a[2], a[3], a[4], a[5]); break;
  case 7: reinterpret_cast<void (*)(void *, void *, void *, void *, void *, void *, void *)>(fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6]); break;
  case 8: reinterpret_cast<void (*)(void *, void *, void *, void *, void *, void *, void *, void *)>(fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]); break;
  }
}

} // namespace

int main(int argc, char **argv) {
  std::string hostLib, ptxDir, filter;
  int64_t rows = 37;
  uint32_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char *flag) -> const char * {
      size_t n = std::strlen(flag);
      return a.compare(0, n, flag) == 0 && a.size() > n && a[n] == '='
                 ? argv[i] + n + 1
                 : nullptr;
    };
    if (const char *v = value("--host"))
      hostLib = v;
    else if (const char *v = value("--ptx"))
      ptxDir = v;
    else if (const char *v = value("--rows"))
      rows = std::stoll(v);
    else if (const char *v = value("--seed"))
      seed = uint32_t(std::stoul(v));
    else if (const char *v = value("--filter"))
      filter = v;
    else {
      std::cerr << "usage: csa-gpu-check --host=lib.so --ptx=DIR [--rows=N] "
                   "[--seed=N] [--filter=PREFIX]\n";
      return 2;
    }
  }
  if (hostLib.empty() || ptxDir.empty()) {
    std::cerr << "csa-gpu-check: error: give --host=lib.so and --ptx=DIR\n";
    return 2;
  }
  std::ifstream ptxFile(ptxDir + "/kernels.ptx"), jsonFile(ptxDir + "/kernels.json");
  if (!ptxFile || !jsonFile) {
    std::cerr << "csa-gpu-check: error: " << ptxDir
              << " has no kernels.ptx / kernels.json (csa-compile --emit=ptx -o DIR)\n";
    return 1;
  }
  std::stringstream ptx;
  ptx << ptxFile.rdbuf();
  nlohmann::json meta = nlohmann::json::parse(jsonFile);
  // A bare file name would be searched on the library path, not here.
  if (hostLib.find('/') == std::string::npos)
    hostLib = "./" + hostLib;
  void *host = dlopen(hostLib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!host) {
    std::cerr << "csa-gpu-check: error: " << dlerror() << "\n";
    return 1;
  }
  auto driver = csa::cuda::Driver::open();
  if (!driver.ok()) {
    std::cerr << "csa-gpu-check: error: " << driver.status().message() << "\n";
    return 1;
  }
  csa::cuda::Driver &gpu = **driver;
  auto module = gpu.loadPtx(ptx.str());
  if (!module.ok()) {
    std::cerr << "csa-gpu-check: error: " << module.status().message() << "\n";
    return 1;
  }
  std::printf("device: %s, chip %s, rows %lld, seed %u\n", gpu.deviceName().c_str(),
              meta["chip"].get<std::string>().c_str(), (long long)rows, seed);
  std::printf("%-64s %-7s %12s %12s %s\n", "kernel", "launch", "elements",
              "max_diff", "verdict");
  int run = 0, failed = 0;
  std::vector<std::string> notRun;
  std::mt19937 gen(seed);
  for (const auto &k : meta["kernels"]) {
    const std::string name = k["name"].get<std::string>();
    if (!filter.empty() && name.rfind(filter, 0) != 0)
      continue;
    std::vector<Arg> args;
    bool ok = !k["status_parameter"].get<bool>();
    for (const auto &t : k["arguments"]) {
      Arg arg;
      if (!ok || !parseMemref(t.get<std::string>(), rows, arg)) {
        ok = false;
        break;
      }
      args.push_back(std::move(arg));
    }
    void *hostFn = dlsym(host, ("_mlir_ciface_" + name).c_str());
    if (!ok || !hostFn || args.size() < 2 || args.size() > 8) {
      notRun.push_back(name);
      continue;
    }
    // Fresh inputs; every buffer starts with the same bytes on both sides.
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_int_distribution<int> code(100, 140);
    for (Arg &a : args) {
      a.host.resize(size_t(a.count() * a.elementBytes));
      for (int64_t i = 0; i < a.count(); ++i) {
        if (a.element == "bf16") {
          uint16_t v = toBf16(normal(gen));
          std::memcpy(&a.host[size_t(i) * 2], &v, 2);
        } else if (a.element == "f32") {
          float v = normal(gen);
          std::memcpy(&a.host[size_t(i) * 4], &v, 4);
        } else {
          a.host[size_t(i)] = uint8_t(code(gen));
        }
      }
      a.gpu = a.host;
    }
    // CPU: descriptors of the host buffers.
    std::vector<std::vector<int64_t>> descs;
    std::vector<void *> hostArgs;
    for (Arg &a : args) {
      std::vector<int64_t> d(3 + 2 * a.shape.size());
      void *p = a.host.data();
      std::memcpy(&d[0], &p, 8);
      std::memcpy(&d[1], &p, 8);
      d[2] = 0;
      int64_t stride = 1;
      for (int i = int(a.shape.size()) - 1; i >= 0; --i) {
        d[3 + size_t(i)] = a.shape[size_t(i)];
        d[3 + a.shape.size() + size_t(i)] = stride;
        stride *= a.shape[size_t(i)];
      }
      descs.push_back(std::move(d));
    }
    for (auto &d : descs)
      hostArgs.push_back(d.data());
    callHost(hostFn, hostArgs);
    // GPU: the same descriptors, expanded into parameters.
    auto fn = gpu.function(*module, name);
    if (!fn.ok()) {
      std::cerr << fn.status().message() << "\n";
      ++failed;
      continue;
    }
    std::vector<int64_t> values;
    for (Arg &a : args) {
      auto ptr = gpu.allocate(a.gpu.size());
      if (!ptr.ok() || !gpu.copyToDevice(*ptr, a.gpu.data(), a.gpu.size()).ok()) {
        std::cerr << "device allocation or copy failed\n";
        return 1;
      }
      a.device = *ptr;
      values.push_back(int64_t(a.device));
      values.push_back(int64_t(a.device));
      values.push_back(0);
      int64_t stride = 1;
      std::vector<int64_t> strides(a.shape.size());
      for (int i = int(a.shape.size()) - 1; i >= 0; --i) {
        strides[size_t(i)] = stride;
        stride *= a.shape[size_t(i)];
      }
      for (int64_t d : a.shape)
        values.push_back(d);
      for (int64_t s : strides)
        values.push_back(s);
    }
    std::vector<void *> params;
    for (int64_t &v : values)
      params.push_back(&v);
    const auto &launch = k["launch"];
    unsigned grid = 1, block = 1;
    if (launch["rule"] == "rows") {
      int64_t rowsOf = args[size_t(launch["rows_argument"].get<int64_t>())].shape[0];
      int64_t perThread = launch["rows_per_thread"].get<int64_t>();
      int64_t threads = (rowsOf + perThread - 1) / perThread;
      block = unsigned(launch["block"].get<int64_t>());
      grid = unsigned((threads + block - 1) / block);
      if (grid == 0)
        grid = 1;
    }
    absl::Status st = gpu.launch(*fn, grid, block, 0, params.data());
    if (st.ok())
      st = gpu.synchronize();
    if (!st.ok()) {
      std::printf("%-64s %-7s %12s %12s FAILED: %s\n", name.c_str(),
                  launch["rule"].get<std::string>().c_str(), "", "",
                  std::string(st.message()).c_str());
      ++failed;
      return 1; // a failed launch leaves the context unusable
    }
    int64_t elements = 0, bad = 0;
    double maxDiff = 0;
    for (Arg &a : args) {
      (void)gpu.copyToHost(a.gpu.data(), a.device, a.gpu.size());
      (void)gpu.release(a.device);
      for (int64_t i = 0; i < a.count(); ++i) {
        ++elements;
        double x = 0, y = 0, tolerance = 0;
        if (a.element == "bf16") {
          uint16_t u, v;
          std::memcpy(&u, &a.host[size_t(i) * 2], 2);
          std::memcpy(&v, &a.gpu[size_t(i) * 2], 2);
          x = fromBf16(u);
          y = fromBf16(v);
          tolerance = std::ldexp(std::fabs(x), -7); // one bf16 ulp
        } else if (a.element == "f32") {
          float u, v;
          std::memcpy(&u, &a.host[size_t(i) * 4], 4);
          std::memcpy(&v, &a.gpu[size_t(i) * 4], 4);
          x = u;
          y = v;
          tolerance = 1e-5 * std::fabs(x);
        } else {
          x = a.host[size_t(i)];
          y = a.gpu[size_t(i)];
        }
        if (std::isnan(x) && std::isnan(y))
          continue;
        double diff = std::fabs(x - y);
        if (!(diff <= tolerance))
          ++bad;
        if (diff > maxDiff || std::isnan(diff))
          maxDiff = diff;
      }
    }
    ++run;
    if (bad)
      ++failed;
    std::printf("%-64s %-7s %12lld %12.3g %s\n", name.c_str(),
                launch["rule"].get<std::string>().c_str(), (long long)elements,
                maxDiff,
                bad ? ("MISMATCH (" + std::to_string(bad) + " elements)").c_str()
                    : (maxDiff == 0 ? "exact" : "within tolerance"));
  }
  std::printf("not run (scalar, index or strided arguments): %zu kernels:",
              notRun.size());
  for (const std::string &n : notRun)
    std::printf(" %s", n.c_str());
  std::printf("\n%d kernels run, %d passed, %d failed\n", run, run - failed, failed);
  return failed ? 1 : 0;
}

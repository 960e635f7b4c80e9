//===- KernelTestSupport.h - Build, load and call generated kernels -*- C++ -*-===//
//
// The harness every generated-kernel test uses: build kernels as IR, lower
// them through LLVM to an object, link a shared object, dlopen it, and call
// `_mlir_ciface_<name>` with memref descriptors.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TEST_UNIT_CODEGEN_KERNELTESTSUPPORT_H
#define CSA_TEST_UNIT_CODEGEN_KERNELTESTSUPPORT_H

#include "codegen/host/HostBackend.h"
#include "codegen/host/HostKernels.h"
#include "models/reference/Kernels.h"
#include "runtime/numerics/Numerics.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

#include <array>
#include <dlfcn.h>
#include <filesystem>
#include <functional>
#include <random>
#include <unistd.h>

namespace csa::codegen::testing {

namespace nx = csa::numerics;
namespace fs = std::filesystem;

/// A ranked memref descriptor as the C interface passes it.
template <int N, typename T = uint16_t> struct Descriptor {
  T *allocated;
  T *aligned;
  int64_t offset;
  int64_t sizes[N];
  int64_t strides[N];
};

/// A descriptor of a row-major array.
template <int N, typename T>
Descriptor<N, T> describe(std::vector<T> &data, std::array<int64_t, N> sizes) {
  Descriptor<N, T> d{data.data(), data.data(), 0, {}, {}};
  int64_t stride = 1;
  for (int i = N - 1; i >= 0; --i) {
    d.sizes[i] = sizes[size_t(i)];
    d.strides[i] = stride;
    stride *= sizes[size_t(i)];
  }
  return d;
}

/// Builds, lowers, emits, links and loads a module of kernels.
class KernelLibrary {
public:
  explicit KernelLibrary(const std::function<void(mlir::ModuleOp)> &build) {
    loadHostKernelDialects(context);
    module = mlir::ModuleOp::create(mlir::UnknownLoc::get(&context));
    build(*module);
    EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
    EXPECT_TRUE(mlir::succeeded(lowerHostKernelsToLLVM(*module)));
    dir = fs::temp_directory_path() /
          ("csa-host-kernels-" + std::to_string(::getpid()) + "-" +
           std::to_string(counter++));
    fs::create_directories(dir);
    std::string object = (dir / "kernels.o").string();
    std::string shared = (dir / "kernels.so").string();
    if (llvm::Error e = emitHostObject(*module, object)) {
      ADD_FAILURE() << llvm::toString(std::move(e));
      return;
    }
    if (llvm::Error e = linkSharedObject({object}, shared)) {
      ADD_FAILURE() << llvm::toString(std::move(e));
      return;
    }
    handle = dlopen(shared.c_str(), RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(handle, nullptr) << dlerror();
  }
  ~KernelLibrary() {
    if (handle)
      dlclose(handle);
    fs::remove_all(dir);
  }
  void *symbol(const std::string &name) {
    void *fn = handle ? dlsym(handle, ("_mlir_ciface_" + name).c_str()) : nullptr;
    EXPECT_NE(fn, nullptr) << name;
    return fn;
  }

private:
  static inline int counter = 0;
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  fs::path dir;
  void *handle = nullptr;
};

/// Random bf16 values (normal, std `scale`), fixed seed.
inline std::vector<uint16_t> randomBf16(size_t n, uint32_t seed, float scale = 2.f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<uint16_t> out(n);
  for (uint16_t &v : out)
    v = nx::floatToBf16(dist(gen));
  return out;
}

/// bf16 bits to a reference matrix.
inline reference::Mat toMat(const std::vector<uint16_t> &data, int64_t rows,
                     int64_t cols) {
  reference::Mat m(rows, cols);
  for (size_t i = 0; i < data.size(); ++i)
    m.v[i] = nx::bf16ToFloat(data[i]);
  return m;
}

} // namespace csa::codegen::testing

#endif // CSA_TEST_UNIT_CODEGEN_KERNELTESTSUPPORT_H

//===- csa-gpu-check.cpp - Generated GPU kernels against the CPU kernels --===//
//
// Runs each PTX kernel csa-compile generated (--emit=ptx) on the GPU and the
// same kernel's host build (--emit=object) on the CPU, on the same fresh
// random inputs, and compares every buffer afterwards. The host kernels are
// bit-exact against the reference forward (test/unit/codegen), so this
// checks the GPU route: thread mapping, NVVM lowering, libdevice, PTX.
//
//   csa-gpu-check --host=lib.so --ptx=DIR [--rows=37] [--seed=1] [--filter=linear_]
//                 [--exclude=SUBSTRING]
//                 [--time=N [--csv=FILE]]
//
// Kernels whose arguments are all dense memrefs of bf16, f32 or i8 are run
// (inputs: normal bf16/f32 values, i8 codes in [100, 140], moderate E4M3 and
// UE8M0 values), and those whose i32 arguments are expert ids (a tolerance's
// "expert_id" operands: ids in [-1, index_limit), -1 naming no expert; the
// grouped linears, timed on the bytes of the experts named; or the argument
// a kernels.json "expert_ids" names, the MoE combine's); kernels with scalar, index or strided arguments need inputs
// with meaning (positions, token ids, cache views) and are listed as not run.
// Every '?' dimension is --rows (37: not a multiple of the row tile).
//
// Kernels that keep their host kernel's order must match it bit for bit (NaN
// matches NaN). Kernels whose kernels.json entry has a "tolerance" (the
// split-K linears: "dot", a sum of `terms` products) are held to the bound
// of docs/semantics.md instead: every element of the output within
// numerics::dotErrorBound of the host's, S taken from a second host run on
// the operands' magnitudes (RMS norms, "norm": numerics::normErrorBound of
// the host's output); the output is poisoned (NaN) before the GPU run,
// and the worst error is reported as a fraction of its bound. E4M3 NaN codes
// (0x7F) are left out of the random codes, so that outputs are finite.
//
// --exact-operands draws the operands of the kernels with a tolerance so
// that every partial sum is exact in fp32 (real operands multiples of 1/8 in
// [-2, 2], E4M3 codes of one binade, any E2M1 byte, UE8M0 scales 1): then
// any summation order gives the host kernel's bits, and those kernels must
// match bit for bit too. It catches a form that drops or misplaces products,
// which the bound, loose where block scales differ widely, can miss.
//
// Exit status 0 when every run kernel passed, 1 otherwise; a table is
// printed.
//
// --time=N then times each matched kernel: 5 batches of N back-to-back
// launches between two CUDA events (so the host's launch cost overlaps the
// GPU's work), the median batch's time per launch reported with the bytes its buffers hold (every argument
// read or written once: a lower bound on the traffic), its FLOPs where known
// (linear: 2 x rows x K x N / groups) and the fraction of the H200 roofline
// (4.3 TB/s copy, 790 TFLOP/s dense bf16, both as measured on the GPU).
// --csv=FILE writes the same figures as CSV.
//
//===----------------------------------------------------------------------===//
#include "tools/support/Flags.h"
#include "tools/support/LastResort.h"
#include "tools/support/Version.h"

#include "absl/strings/numbers.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/LaunchRuleJson.h"
#include "runtime/numerics/Tolerance.h"

#include <nlohmann/json.hpp>

#include <algorithm>
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

// The flags (tools/support/Flags.h: --flag=value or --flag value).
ABSL_FLAG(std::string, host, "", "the kernels' host build (csa-compile --emit=object, a .so)");
ABSL_FLAG(std::string, ptx, "", "the folder of csa-compile --emit=ptx");
ABSL_FLAG(int64_t, rows, 37, "every '?' dimension");
ABSL_FLAG(uint32_t, seed, 1, "the random inputs' seed");
ABSL_FLAG(std::string, filter, "", "run only the kernels whose names start so");
ABSL_FLAG(std::string, exclude, "", "skip the kernels whose names hold this");
ABSL_FLAG(bool, exact_operands, false,
          "operands whose partial sums are exact in fp32: every kernel bit for bit");
ABSL_FLAG(int64_t, time, 0, "then time each matched kernel over N launches a batch");
ABSL_FLAG(std::string, csv, "", "write the timings as CSV to this file");

namespace {

/// The usage text (--help: with the flags' list, on stdout).
constexpr const char *kUsage =
    "usage: csa-gpu-check --host=lib.so --ptx=DIR [--rows=N] [--seed=N]\n"
    "                     [--filter=PREFIX] [--exclude=SUBSTRING] [--exact-operands]\n"
    "                     [--time=N [--csv=FILE]]\n"
    "Runs each PTX kernel of DIR on the GPU and its host build on the CPU on\n"
    "the same random inputs and compares every buffer: bit for bit, or within\n"
    "the bound of the kernel's tolerance. Exit status 0 when every kernel run\n"
    "passed, 1 otherwise, 2 for a bad command line.\n";

} // namespace

namespace {

/// The value every i64 argument gets (a position, a stride or a step: 1 is
/// valid for each). Kernels with an i64 argument and a memref with two
/// dynamic dimensions are not run: the second has no value to synthesize
/// (RoPE's row width).
constexpr int64_t kScalarValue = 1;

struct Arg {
  std::string element; ///< bf16, f32, i8; i64: a scalar
  bool scalar = false;
  int64_t value = 0; ///< a scalar's value
  int dynamicDims = 0;
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

/// "memref<?x64xbf16>" -> shape and element; "i64" -> a scalar (see
/// kScalarValue); false for anything else.
bool parseArgument(const std::string &type, int64_t rows, Arg &arg) {
  if (type == "i64") {
    arg.element = type;
    arg.scalar = true;
    arg.value = kScalarValue;
    return true;
  }
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
  for (const std::string &d : items) {
    int64_t size = rows;
    if (d != "?" && (!absl::SimpleAtoi(d, &size) || size < 0))
      return false; // not a size: not a kernel this tool can feed
    arg.shape.push_back(size);
    arg.dynamicDims += d == "?";
  }
  if (arg.element == "bf16")
    arg.elementBytes = 2;
  else if (arg.element == "f32")
    arg.elementBytes = 4;
  else if (arg.element == "i8")
    arg.elementBytes = 1;
  else if (arg.element == "i32")
    arg.elementBytes = 4; // only as a tolerance's expert ids (below)
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
  csa::tools::installLastResortHandler("csa-gpu-check");
  csa::tools::CommandLine flags("csa-gpu-check", kUsage);
  flags.range<int64_t>(FLAGS_rows, 1, int64_t(1) << 20, "needs a row count from 1 to 1048576")
      .describe(FLAGS_seed, "needs an unsigned 32-bit seed")
      .range<int64_t>(FLAGS_time, 0, 100000, "needs a launch count from 0 to 100000");
  if (!flags.parse(argc, argv))
    return flags.exitCode();
  if (!flags.positional().empty())
    return flags.error("no positional arguments, got '" + flags.positional()[0] + "'");
  std::string hostLib = absl::GetFlag(FLAGS_host);
  const std::string ptxDir = absl::GetFlag(FLAGS_ptx);
  const std::string filter = absl::GetFlag(FLAGS_filter);
  const std::string exclude = absl::GetFlag(FLAGS_exclude);
  const std::string csvPath = absl::GetFlag(FLAGS_csv);
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int64_t timeIterations = absl::GetFlag(FLAGS_time);
  const uint32_t seed = absl::GetFlag(FLAGS_seed);
  const bool exactOperands = absl::GetFlag(FLAGS_exact_operands);
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
  std::printf("%-64s %-11s %12s %12s %s\n", "kernel", "launch", "elements",
              "max_diff", "verdict");
  std::FILE *csv = csvPath.empty() ? nullptr : std::fopen(csvPath.c_str(), "w");
  if (!csvPath.empty() && !csv) {
    std::cerr << "csa-gpu-check: error: cannot write " << csvPath << "\n";
    return 1;
  }
  if (csv)
    std::fprintf(csv, "kernel,launch,rows,median_us,bytes,flops,tb_per_s,"
                      "tflop_per_s,roofline_fraction,arguments\n");
  struct Timing {
    std::string name, line;
  };
  std::vector<Timing> timings;
  int run = 0, failed = 0;
  std::vector<std::string> notRun;
  std::mt19937 gen(seed);
  for (const auto &k : meta["kernels"]) {
    const std::string name = k["name"].get<std::string>();
    if (!filter.empty() && name.rfind(filter, 0) != 0)
      continue;
    if (!exclude.empty() && name.find(exclude) != std::string::npos)
      continue;
    std::vector<Arg> args;
    bool ok = !k["status_parameter"].get<bool>();
    for (const auto &t : k["arguments"]) {
      Arg arg;
      if (!ok || !parseArgument(t.get<std::string>(), rows, arg)) {
        ok = false;
        break;
      }
      args.push_back(std::move(arg));
    }
    const bool anyScalar = std::any_of(args.begin(), args.end(),
                                       [](const Arg &a) { return a.scalar; });
    for (const Arg &a : args)
      if (anyScalar && a.dynamicDims > 1)
        ok = false;
    // A row-tiled form is checked against the host kernel it replaces.
    const std::string hostName =
        k.contains("replaces") ? k["replaces"].get<std::string>() : name;
    void *hostFn = dlsym(host, ("_mlir_ciface_" + hostName).c_str());
    if (!ok || !hostFn || args.size() < 2 || args.size() > 8) {
      notRun.push_back(name);
      continue;
    }
    // A tolerance instead of bits: the output argument and the encodings.
    int64_t toleranceOutput = -1, toleranceTerms = 0, indexLimit = 0;
    std::string toleranceRule;
    std::vector<csa::numerics::OperandEncoding> encodings;
    if (k.contains("tolerance")) {
      const auto &t = k["tolerance"];
      toleranceRule = t.value("rule", "");
      bool valid = (toleranceRule == "dot" || toleranceRule == "norm") && t.contains("operands") &&
                   t["operands"].is_array() && t["operands"].size() == args.size();
      if (valid)
        for (const auto &o : t["operands"]) {
          auto e = o.is_string() ? csa::numerics::parseOperandEncoding(o.get<std::string>())
                                 : std::nullopt;
          valid = valid && e.has_value();
          if (e)
            encodings.push_back(*e);
        }
      toleranceOutput = valid ? t.value("output", int64_t(-1)) : -1;
      indexLimit = valid ? t.value("index_limit", int64_t(0)) : 0;
      toleranceTerms = valid ? t.value("terms", int64_t(0)) : 0;
      if (toleranceOutput < 0 || toleranceOutput >= int64_t(args.size()) || toleranceTerms <= 0) {
        std::cerr << "csa-gpu-check: error: kernels.json: kernel '" << name
                  << "' has a tolerance that is not {rule: dot or norm, terms > 0, output, "
                     "one operand encoding per argument}\n";
        return 1;
      }
    }
    // i32 arguments are run only as expert ids (values with meaning): a
    // tolerance's "expert_id" operands, or the one "expert_ids" names.
    int64_t idsArgument = -1;
    if (k.contains("expert_ids") && k["expert_ids"].is_object()) {
      idsArgument = k["expert_ids"].value("argument", int64_t(-1));
      indexLimit = k["expert_ids"].value("limit", int64_t(0));
    }
    bool idsKnown = true;
    for (size_t ai = 0; ai < args.size(); ++ai) {
      const bool isId = (ai < encodings.size() &&
                         encodings[ai] == csa::numerics::OperandEncoding::ExpertId) ||
                        int64_t(ai) == idsArgument;
      if ((args[ai].element == "i32") != isId || (isId && indexLimit < 1))
        idsKnown = false;
    }
    if (!idsKnown) {
      notRun.push_back(name);
      continue;
    }
    // Exact operands: no bound, the bits (the output still poisoned).
    const bool exact = exactOperands && toleranceOutput >= 0 && toleranceRule == "dot";
    const bool bounded = toleranceOutput >= 0 && !exact;
    // Fresh inputs; every buffer starts with the same bytes on both sides.
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_int_distribution<int> code(100, 140), eighths(-16, 16), anyByte(0, 255),
        mantissa(0, 15);
    // Expert ids: every expert, and -1 (a slot that routes nowhere: zeros).
    std::uniform_int_distribution<int32_t> expertId(-1, int32_t(std::max<int64_t>(indexLimit, 1) - 1));
    for (size_t ai = 0; ai < args.size(); ++ai) {
      Arg &a = args[ai];
      if (a.scalar)
        continue;
      a.host.resize(size_t(a.count() * a.elementBytes));
      for (int64_t i = 0; i < a.count(); ++i) {
        if (a.element == "i32") {
          const int32_t id = expertId(gen);
          std::memcpy(&a.host[size_t(i) * 4], &id, 4);
          continue;
        }
        if (exact) {
          using csa::numerics::OperandEncoding;
          const OperandEncoding e = encodings[ai];
          if (e == OperandEncoding::Real && a.element == "bf16") {
            uint16_t v = toBf16(float(eighths(gen)) / 8.f);
            std::memcpy(&a.host[size_t(i) * 2], &v, 2);
          } else if (e == OperandEncoding::Real && a.element == "f32") {
            float v = float(eighths(gen)) / 8.f;
            std::memcpy(&a.host[size_t(i) * 4], &v, 4);
          } else if (e == OperandEncoding::E4M3) {
            const int m = mantissa(gen); // sign and 3 mantissa bits, exponent field 7
            a.host[size_t(i)] = uint8_t(((m & 8) << 4) | (7 << 3) | (m & 7));
          } else if (e == OperandEncoding::UE8M0) {
            a.host[size_t(i)] = 127;
          } else if (e == OperandEncoding::E2M1x2) {
            a.host[size_t(i)] = uint8_t(anyByte(gen));
          } else {
            std::fill_n(&a.host[size_t(i) * size_t(a.elementBytes)], size_t(a.elementBytes), 0);
          }
          continue;
        }
        if (a.element == "bf16") {
          uint16_t v = toBf16(normal(gen));
          std::memcpy(&a.host[size_t(i) * 2], &v, 2);
        } else if (a.element == "f32") {
          float v = normal(gen);
          std::memcpy(&a.host[size_t(i) * 4], &v, 4);
        } else {
          const int c = code(gen);
          a.host[size_t(i)] = uint8_t(c == 0x7F ? 0x7E : c);
        }
      }
      a.gpu = a.host;
    }
    // The inputs as drawn, for the host run on their magnitudes.
    std::vector<std::vector<uint8_t>> drawn;
    if (bounded)
      for (const Arg &a : args)
        drawn.push_back(a.host);
    // Poison the output the GPU writes: an element it misses stays NaN.
    if (bounded || exact)
      std::fill(args[size_t(toleranceOutput)].gpu.begin(),
                args[size_t(toleranceOutput)].gpu.end(), uint8_t(0xFF));
    // CPU: descriptors of the host buffers.
    std::vector<std::vector<int64_t>> descs;
    std::vector<void *> hostArgs;
    for (Arg &a : args) {
      if (a.scalar) {
        descs.push_back({});
        continue;
      }
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
    // A scalar goes where a descriptor pointer would: both are INTEGER-class
    // 8-byte arguments in the x86-64 and AArch64 calling conventions.
    for (size_t i = 0; i < args.size(); ++i)
      hostArgs.push_back(args[i].scalar ? reinterpret_cast<void *>(args[i].value)
                                        : descs[i].data());
    callHost(hostFn, hostArgs);
    // S: the host kernel on the magnitudes of the operands.
    std::vector<uint8_t> magnitudeSums;
    if (bounded && toleranceRule == "dot") {
      std::vector<std::vector<uint8_t>> magnitudes = drawn;
      std::vector<std::vector<int64_t>> mdescs = descs;
      std::vector<void *> margs;
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i].scalar) {
          margs.push_back(reinterpret_cast<void *>(args[i].value));
          continue;
        }
        csa::numerics::takeMagnitudes(magnitudes[i].data(), size_t(args[i].count()),
                                      size_t(args[i].elementBytes), encodings[i]);
        void *p = magnitudes[i].data();
        std::memcpy(&mdescs[i][0], &p, 8);
        std::memcpy(&mdescs[i][1], &p, 8);
        margs.push_back(mdescs[i].data());
      }
      callHost(hostFn, margs);
      magnitudeSums = std::move(magnitudes[size_t(toleranceOutput)]);
    }
    // GPU: the same descriptors, expanded into parameters.
    auto fn = gpu.function(*module, name);
    if (!fn.ok()) {
      std::cerr << fn.status().message() << "\n";
      ++failed;
      continue;
    }
    std::vector<int64_t> values;
    for (Arg &a : args) {
      if (a.scalar) {
        values.push_back(a.value);
        continue;
      }
      auto ptr = gpu.allocate(a.gpu.size());
      if (!ptr.ok() || !gpu.copyToDevice(*ptr, a.gpu.data(), a.gpu.size()).ok()) {
        std::cerr << "device allocation or copy failed\n";
        return 1;
      }
      a.device = *ptr;
      std::vector<uint64_t> slots;
      csa::cuda::appendDenseMemrefSlots(slots, a.device, a.shape);
      values.insert(values.end(), slots.begin(), slots.end());
    }
    // Buffers the kernel keeps between launches (kernels.json "state"):
    // zeros before the first, as the runtime gives them.
    auto stateOf = csa::cuda::parseKernelState(k, name);
    if (!stateOf.ok()) {
      std::cerr << "csa-gpu-check: error: " << stateOf.status().message() << "\n";
      return 1;
    }
    std::vector<csa::cuda::DevicePtr> stateBuffers;
    for (const csa::cuda::KernelStateBuffer &buffer : *stateOf) {
      std::vector<uint8_t> zeros(buffer.bytes(), 0);
      auto ptr = gpu.allocate(zeros.size());
      if (!ptr.ok() || !gpu.copyToDevice(*ptr, zeros.data(), zeros.size()).ok()) {
        std::cerr << "device allocation or copy failed\n";
        return 1;
      }
      stateBuffers.push_back(*ptr);
      std::vector<uint64_t> slots;
      buffer.appendSlots(slots, *ptr);
      values.insert(values.end(), slots.begin(), slots.end());
    }
    std::vector<void *> params;
    for (int64_t &v : values)
      params.push_back(&v);
    auto rule = csa::cuda::parseLaunchRule(k["launch"], name, args.size());
    if (!rule.ok()) {
      std::cerr << "csa-gpu-check: error: " << rule.status().message() << "\n";
      return 1;
    }
    auto launchOf = csa::cuda::launchShapeFor(
        *rule, [&](int64_t i) -> const std::vector<int64_t> * {
          return args[size_t(i)].scalar ? nullptr : &args[size_t(i)].shape;
        });
    if (!launchOf.ok()) {
      std::cerr << "csa-gpu-check: error: kernel '" << name
                << "': " << launchOf.status().message() << "\n";
      return 1;
    }
    const csa::cuda::LaunchShape shape = *launchOf;
    absl::Status st = gpu.launch(*fn, shape, params.data());
    if (st.ok())
      st = gpu.synchronize();
    if (!st.ok()) {
      std::printf("%-64s %-11s %12s %12s FAILED: %s\n", name.c_str(),
                  rule->rule.c_str(), "", "",
                  std::string(st.message()).c_str());
      ++failed;
      return 1; // a failed launch leaves the context unusable
    }
    int64_t elements = 0, bad = 0;
    double maxDiff = 0, worstFraction = 0;
    std::string firstBad; // where a bit-for-bit comparison first failed
    for (size_t ai = 0; ai < args.size(); ++ai) {
      Arg &a = args[ai];
      if (a.scalar)
        continue;
      (void)gpu.copyToHost(a.gpu.data(), a.device, a.gpu.size());
      const bool boundedOutput = bounded && int64_t(ai) == toleranceOutput;
      for (int64_t i = 0; i < a.count(); ++i) {
        ++elements;
        double x = 0, y = 0;
        if (a.element == "bf16") {
          uint16_t u, v;
          std::memcpy(&u, &a.host[size_t(i) * 2], 2);
          std::memcpy(&v, &a.gpu[size_t(i) * 2], 2);
          x = fromBf16(u);
          y = fromBf16(v);
        } else if (a.element == "f32") {
          float u, v;
          std::memcpy(&u, &a.host[size_t(i) * 4], 4);
          std::memcpy(&v, &a.gpu[size_t(i) * 4], 4);
          x = u;
          y = v;
        } else {
          x = a.host[size_t(i)];
          y = a.gpu[size_t(i)];
        }
        // NaN matches NaN; an infinity matches itself (their difference
        // would be NaN).
        if ((std::isnan(x) && std::isnan(y)) || x == y)
          continue;
        double diff = std::fabs(x - y);
        if (boundedOutput) {
          const bool bf16Out = a.element == "bf16";
          double bound = 0;
          if (toleranceRule == "norm") {
            bound = csa::numerics::normErrorBound(toleranceTerms, x, bf16Out);
          } else {
            double sum = 0;
            if (bf16Out) {
              uint16_t u;
              std::memcpy(&u, &magnitudeSums[size_t(i) * 2], 2);
              sum = fromBf16(u);
            } else {
              float u;
              std::memcpy(&u, &magnitudeSums[size_t(i) * 4], 4);
              sum = u;
            }
            bound = csa::numerics::dotErrorBound(toleranceTerms, sum, x, bf16Out);
          }
          const bool within = x == y || diff <= bound;
          if (!within)
            ++bad;
          else if (x != y)
            worstFraction = std::max(worstFraction, diff / bound);
          if (diff > maxDiff || std::isnan(diff))
            maxDiff = diff;
          continue;
        }
        if (!(diff == 0)) {
          if (bad == 0 && firstBad.empty())
            firstBad = "first: argument " + std::to_string(ai) + " element " + std::to_string(i) +
                       ", host " + std::to_string(x) + ", gpu " + std::to_string(y);
          ++bad;
        }
        if (diff > maxDiff || std::isnan(diff))
          maxDiff = diff;
      }
    }
    ++run;
    if (bad)
      ++failed;
    char within[64];
    std::snprintf(within, sizeof within, "within bound (worst %.3f of it)", worstFraction);
    std::printf("%-64s %-11s %12lld %12.3g %s\n", name.c_str(),
                rule->rule.c_str(), (long long)elements, maxDiff,
                bad ? ("MISMATCH (" + std::to_string(bad) + " elements" +
                       (bounded ? " past the dot bound)" : ")"))
                          .c_str()
                    : bounded ? within
                              : "exact");
    if (!firstBad.empty())
      std::printf("  %s\n", firstBad.c_str());
    if (timeIterations > 0 && !bad) {
      std::vector<float> ms;
      auto start = gpu.createEvent(), end = gpu.createEvent();
      for (int batch = 0; batch < 5 && start.ok() && end.ok(); ++batch) {
        absl::Status ts = gpu.record(*start);
        for (int64_t it = 0; it < timeIterations && ts.ok(); ++it)
          ts = gpu.launch(*fn, shape, params.data());
        if (ts.ok())
          ts = gpu.record(*end);
        auto elapsed = ts.ok() ? gpu.elapsedMs(*start, *end)
                               : absl::StatusOr<float>(ts);
        if (!elapsed.ok()) {
          std::cerr << "csa-gpu-check: error: timing " << name << ": "
                    << elapsed.status().message() << "\n";
          return 1;
        }
        ms.push_back(*elapsed / float(timeIterations));
      }
      gpu.destroy(start.ok() ? *start : nullptr);
      gpu.destroy(end.ok() ? *end : nullptr);
      if (ms.empty()) {
        std::cerr << "csa-gpu-check: error: no CUDA event for timing " << name << "\n";
        return 1;
      }
      std::sort(ms.begin(), ms.end());
      const double seconds = ms[ms.size() / 2] * 1e-3;
      // A grouped linear reads the weights (and scales) of the experts its
      // ids name, once each, not every expert's.
      double expertShare = 1, validSlots = double(rows);
      for (size_t ai = 0; ai < args.size() && indexLimit > 0; ++ai)
        if (args[ai].element == "i32") {
          std::vector<bool> named(size_t(indexLimit), false);
          validSlots = 0;
          for (int64_t i = 0; i < args[ai].count(); ++i) {
            int32_t id;
            std::memcpy(&id, &args[ai].host[size_t(i) * 4], 4);
            if (id >= 0 && id < indexLimit) {
              named[size_t(id)] = true;
              ++validSlots;
            }
          }
          expertShare = double(std::count(named.begin(), named.end(), true)) / double(indexLimit);
        }
      double bytes = 0;
      std::string shapes;
      for (size_t ai = 0; ai < args.size(); ++ai) {
        const Arg &a = args[ai];
        if (a.scalar)
          continue;
        using csa::numerics::OperandEncoding;
        const bool expertWeights =
            indexLimit > 0 && ai < encodings.size() &&
            (encodings[ai] == OperandEncoding::E2M1x2 || encodings[ai] == OperandEncoding::E4M3 ||
             encodings[ai] == OperandEncoding::UE8M0);
        bytes += double(a.host.size()) * (expertWeights ? expertShare : 1.0);
        shapes += (shapes.empty() ? "" : " ") + std::to_string(a.count()) + "x" +
                  a.element;
      }
      // Linear: x [rows, K], y [rows, N]; a _g<G> suffix: G diagonal groups.
      double flops = 0;
      if (name.rfind("linear_", 0) == 0 && args.front().shape.size() == 2 &&
          args.back().shape.size() == 2) {
        double groups = 1;
        if (auto g = name.find("_g"); g != std::string::npos)
          groups = std::max(1.0, std::atof(name.c_str() + g + 2));
        flops = 2.0 * validSlots * double(args.front().shape[1]) *
                double(args.back().shape[1]) / groups;
      }
      constexpr double kCopyBytesPerSecond = 4.3e12, kBf16FlopsPerSecond = 790e12;
      const double roofline =
          std::max(bytes / kCopyBytesPerSecond, flops / kBf16FlopsPerSecond);
      char line[512];
      std::snprintf(line, sizeof line,
                    "%-64s %-11s %10.1f us %12.0f B %12.3g FLOP %8.3f TB/s %8.3f "
                    "TFLOP/s  %6.2f%% of roofline",
                    name.c_str(), rule->rule.c_str(), seconds * 1e6, bytes, flops,
                    bytes / seconds / 1e12, flops / seconds / 1e12,
                    100 * roofline / seconds);
      timings.push_back({name, line});
      if (csv)
        std::fprintf(csv, "%s,%s,%lld,%.2f,%.0f,%.0f,%.4f,%.4f,%.5f,%s\n",
                     name.c_str(), rule->rule.c_str(), (long long)rows,
                     seconds * 1e6, bytes, flops, bytes / seconds / 1e12,
                     flops / seconds / 1e12, roofline / seconds, shapes.c_str());
    }
    for (Arg &a : args)
      if (!a.scalar)
        (void)gpu.release(a.device);
    for (csa::cuda::DevicePtr buffer : stateBuffers)
      (void)gpu.release(buffer);
  }
  std::printf("not run (f32 or index arguments, a status, strided views, or "
              "an i64 with a [?, ?] memref): %zu kernels:",
              notRun.size());
  for (const std::string &n : notRun)
    std::printf(" %s", n.c_str());
  if (!timings.empty()) {
    std::printf("\ntimes (median of 5 batches of %lld launches, rows %lld):\n",
                (long long)timeIterations, (long long)rows);
    for (const Timing &t : timings)
      std::printf("%s\n", t.line.c_str());
  }
  if (csv)
    std::fclose(csv);
  std::printf("\n%d kernels run, %d passed, %d failed\n", run, run - failed, failed);
  return failed ? 1 : 0;
}

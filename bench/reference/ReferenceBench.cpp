//===- ReferenceBench.cpp - Speed of the reference forward ----------------===//
//
// The plain C++ reference forward (models/reference/) on the `tiny` variant
// with a random checkpoint generated once per process into a temporary
// directory: prefill of a 64-token prompt, and one decode step after a
// 64-token prefill. Model creation (and, for decode, the prefill) is setup
// and runs with the timer paused; only prefill() / decode() are timed, in
// wall-clock time (the reference's GEMMs are multi-threaded).
//
// The reference is written to be read, not to be fast; these figures are the
// baseline the compiled CPU path will be compared against.
//
//===----------------------------------------------------------------------===//
#include "models/reference/ReferenceModel.h"
#include "models/variants/Variants.h"
#include "models/weights/RandomCheckpoint.h"
#include "runtime/checkpoint/Checkpoint.h"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using csa::reference::ReferenceModel;
using csa::reference::TensorBytes;
using csa::reference::TensorSource;

constexpr uint64_t kCheckpointSeed = 1234;
constexpr int64_t kPromptTokens = 64;

/// The tiny variant and its random checkpoint, written once per process and
/// removed at exit.
struct Fixture {
  csa::ModelVariant variant;
  fs::path dir;
  std::unique_ptr<csa::checkpoint::Checkpoint> weights;
  TensorSource source;
  std::string error; ///< non-empty when setup failed

  ~Fixture() {
    weights.reset();
    std::error_code ec;
    if (!dir.empty())
      fs::remove_all(dir, ec);
  }
};

void setUp(Fixture &f) {
  auto variant = csa::loadVariant("tiny");
  if (!variant.ok()) {
    f.error = std::string(variant.status().message());
    return;
  }
  f.variant = *variant;
  f.dir = fs::temp_directory_path() /
          ("csa-bench-reference-tiny-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(f.dir, ec);
  csa::RandomCheckpointOptions options;
  options.seed = kCheckpointSeed;
  auto written = csa::writeRandomCheckpoint(f.variant.config, f.variant.schedule,
                                            f.dir.string(), options);
  if (!written.ok()) {
    f.error = std::string(written.status().message());
    return;
  }
  auto ckpt = csa::checkpoint::Checkpoint::open(f.dir.string());
  if (!ckpt.ok()) {
    f.error = std::string(ckpt.status().message());
    return;
  }
  f.weights = std::make_unique<csa::checkpoint::Checkpoint>(std::move(*ckpt));
  f.source = csa::reference::checkpointTensorSource(*f.weights);
}

const Fixture &tinyFixture() {
  static Fixture f;
  static const bool ready = (setUp(f), true);
  (void)ready;
  return f;
}

/// A fixed pseudo-random prompt (the generator of the reference tests).
std::vector<int32_t> prompt(int64_t n, int64_t vocab, uint32_t seed = 7) {
  std::vector<int32_t> ids;
  uint32_t x = seed;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    ids.push_back(int32_t((x >> 8) % uint32_t(vocab)));
  }
  return ids;
}

std::unique_ptr<ReferenceModel> makeModel(const Fixture &f, std::string &error) {
  auto model =
      ReferenceModel::create(f.variant.config, f.variant.schedule, f.source);
  if (!model.ok()) {
    error = std::string(model.status().message());
    return nullptr;
  }
  return std::move(*model);
}

void BM_TinyPrefill(benchmark::State &state) {
  const Fixture &f = tinyFixture();
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  const int64_t n = state.range(0);
  const std::vector<int32_t> ids = prompt(n, f.variant.config.vocabSize);
  std::unique_ptr<ReferenceModel> model; // destroyed with the timer paused
  std::string error;
  for (auto _ : state) {
    state.PauseTiming();
    model.reset();
    model = makeModel(f, error);
    if (!model) {
      state.SkipWithError(error.c_str());
      break;
    }
    state.ResumeTiming();
    auto logits = model->prefill(ids);
    if (!logits.ok()) {
      error = std::string(logits.status().message());
      state.SkipWithError(error.c_str());
      break;
    }
    benchmark::DoNotOptimize(logits->data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * n); // tokens
  state.counters["tokens"] = double(n);
}
// The reference runs its GEMMs on std::thread::hardware_concurrency() threads
// (models/reference/Kernels.cpp parallelFor), which the main thread's CPU
// time does not see: time and rates are wall-clock.
BENCHMARK(BM_TinyPrefill)->Arg(kPromptTokens)->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_TinyDecodeAfterPrefill(benchmark::State &state) {
  const Fixture &f = tinyFixture();
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  const int64_t n = state.range(0);
  // The prompt and the decoded token come from one sequence.
  std::vector<int32_t> ids = prompt(n + 1, f.variant.config.vocabSize);
  const int32_t next = ids.back();
  ids.pop_back();
  std::unique_ptr<ReferenceModel> model;
  std::string error;
  for (auto _ : state) {
    state.PauseTiming();
    model.reset();
    model = makeModel(f, error);
    if (!model) {
      state.SkipWithError(error.c_str());
      break;
    }
    auto first = model->prefill(ids);
    if (!first.ok()) {
      error = std::string(first.status().message());
      state.SkipWithError(error.c_str());
      break;
    }
    state.ResumeTiming();
    auto logits = model->decode(next);
    if (!logits.ok()) {
      error = std::string(logits.status().message());
      state.SkipWithError(error.c_str());
      break;
    }
    benchmark::DoNotOptimize(logits->data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(int64_t(state.iterations())); // tokens
  state.counters["context"] = double(n);
}
BENCHMARK(BM_TinyDecodeAfterPrefill)->Arg(kPromptTokens)->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

} // namespace

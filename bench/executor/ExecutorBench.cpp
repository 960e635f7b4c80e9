//===- ExecutorBench.cpp - Speed of the compiled model on the CPU ---------===//
//
// The `tiny` variant compiled by csa-compile (--emit=artifact; once with the
// host's default row tiles, once with --tile-rows=1) and run by the runtime's
// executor, against the reference forward on the same random checkpoint in
// the same process (the peer a user has today): prefill of a 64-token prompt
// and one decode step after it. Both with CED bounded replay (the compiler's
// default; the reference is told to do the same). Setup (compile, weights,
// model creation, the prefill before a decode step) runs untimed; only
// prefill() / decode() are timed, in wall-clock time (the reference's GEMMs
// are multi-threaded, the executor runs one thread).
//
// Counters: tokens/s (items), and for decode the bytes of the tensors a step
// reads (every tensor except the routed experts, plus top_k / n_experts of
// those, and one embedding row) per second, to compare with the memcpy of
// csa-bench-numerics.
//
//===----------------------------------------------------------------------===//
#include "models/reference/ReferenceModel.h"
#include "models/variants/Variants.h"
#include "models/weights/RandomCheckpoint.h"
#include "runtime/artifact/Artifact.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/executor/Executor.h"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using namespace csa;

constexpr uint64_t kCheckpointSeed = 1234;

struct Fixture {
  ModelVariant variant;
  fs::path dir;
  std::unique_ptr<checkpoint::Checkpoint> weights;
  std::unique_ptr<artifact::Artifact> tiled, untiled;
  double decodeBytes = 0; ///< tensor bytes one decode step reads
  std::string error;

  ~Fixture() {
    tiled.reset();
    untiled.reset();
    weights.reset();
    std::error_code ec;
    if (!dir.empty())
      fs::remove_all(dir, ec);
  }
};

std::unique_ptr<artifact::Artifact> compileTiny(const fs::path &out,
                                                const std::string &flags,
                                                std::string &error) {
  std::string command = std::string(CSA_COMPILE_PATH) +
                        " --variant=tiny --emit=artifact " + flags + " -o " +
                        out.string() + " > " + out.string() + ".log 2>&1";
  if (std::system(command.c_str()) != 0) {
    error = "csa-compile failed: " + command;
    return nullptr;
  }
  auto art = artifact::Artifact::open(out.string());
  if (!art.ok()) {
    error = std::string(art.status().message());
    return nullptr;
  }
  return std::make_unique<artifact::Artifact>(std::move(*art));
}

void setUp(Fixture &f) {
  auto variant = loadVariant("tiny");
  if (!variant.ok()) {
    f.error = std::string(variant.status().message());
    return;
  }
  f.variant = *variant;
  f.dir = fs::temp_directory_path() /
          ("csa-bench-executor-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(f.dir, ec);
  fs::create_directories(f.dir);
  RandomCheckpointOptions options;
  options.seed = kCheckpointSeed;
  auto written = writeRandomCheckpoint(f.variant.config, f.variant.schedule,
                                       (f.dir / "weights").string(), options);
  if (!written.ok()) {
    f.error = std::string(written.status().message());
    return;
  }
  auto ckpt = checkpoint::Checkpoint::open((f.dir / "weights").string());
  if (!ckpt.ok()) {
    f.error = std::string(ckpt.status().message());
    return;
  }
  f.weights = std::make_unique<checkpoint::Checkpoint>(std::move(*ckpt));
  f.tiled = compileTiny(f.dir / "tiled.csa", "", f.error);
  if (!f.tiled)
    return;
  f.untiled = compileTiny(f.dir / "untiled.csa", "--tile-rows=1", f.error);
  if (!f.untiled)
    return;
  const ModelConfig &c = f.variant.config;
  const double expertShare = double(c.nActivatedExperts) / double(c.nRoutedExperts);
  for (const std::string &name : f.weights->names()) {
    auto view = f.weights->tensor(name);
    if (!view.ok())
      continue;
    double bytes = double(view->bytes);
    if (name == "embed.weight")
      bytes /= double(c.vocabSize);
    else if (name.find(".ffn.experts.") != std::string::npos)
      bytes *= expertShare;
    f.decodeBytes += bytes;
  }
}

const Fixture &fixture() {
  static Fixture f;
  static const bool ready = (setUp(f), true);
  (void)ready;
  return f;
}

std::vector<int32_t> prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids;
  uint32_t x = 7;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    ids.push_back(int32_t((x >> 8) % uint32_t(vocab)));
  }
  return ids;
}

void runCompiled(benchmark::State &state, bool tiled, bool decode) {
  const Fixture &f = fixture();
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  auto executor = runtime::Executor::create(tiled ? *f.tiled : *f.untiled, *f.weights);
  if (!executor.ok()) {
    state.SkipWithError(std::string(executor.status().message()).c_str());
    return;
  }
  const auto ids = prompt(state.range(0), f.variant.config.vocabSize);
  for (auto _ : state) {
    state.PauseTiming();
    runtime::Sequence seq = (*executor)->newSequence();
    if (decode && !(*executor)->prefill(seq, ids).ok()) {
      state.SkipWithError("prefill failed");
      return;
    }
    state.ResumeTiming();
    auto logits = decode ? (*executor)->decode(seq, ids[0])
                         : (*executor)->prefill(seq, ids);
    if (!logits.ok()) {
      state.SkipWithError(std::string(logits.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(logits->data());
  }
  state.SetItemsProcessed(state.iterations() * (decode ? 1 : state.range(0)));
  if (decode)
    state.SetBytesProcessed(int64_t(double(state.iterations()) * f.decodeBytes));
}

void runReference(benchmark::State &state, bool decode) {
  const Fixture &f = fixture();
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  reference::ReferenceOptions options;
  options.boundedReplay = true;
  const auto ids = prompt(state.range(0), f.variant.config.vocabSize);
  for (auto _ : state) {
    state.PauseTiming();
    auto model = reference::ReferenceModel::create(
        f.variant.config, f.variant.schedule,
        reference::checkpointTensorSource(*f.weights), options);
    if (!model.ok() || (decode && !(*model)->prefill(ids).ok())) {
      state.SkipWithError("reference setup failed");
      return;
    }
    state.ResumeTiming();
    auto logits = decode ? (*model)->decode(ids[0]) : (*model)->prefill(ids);
    if (!logits.ok()) {
      state.SkipWithError(std::string(logits.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(logits->data());
  }
  state.SetItemsProcessed(state.iterations() * (decode ? 1 : state.range(0)));
  if (decode)
    state.SetBytesProcessed(int64_t(double(state.iterations()) * f.decodeBytes));
}

void BM_CompiledTinyPrefill(benchmark::State &s) { runCompiled(s, true, false); }
void BM_CompiledTinyPrefillUntiled(benchmark::State &s) { runCompiled(s, false, false); }
void BM_CompiledTinyDecode(benchmark::State &s) { runCompiled(s, true, true); }
void BM_ReferenceTinyPrefill(benchmark::State &s) { runReference(s, false); }
void BM_ReferenceTinyDecode(benchmark::State &s) { runReference(s, true); }

BENCHMARK(BM_CompiledTinyPrefill)->Arg(64)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompiledTinyPrefillUntiled)->Arg(64)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReferenceTinyPrefill)->Arg(64)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompiledTinyDecode)->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ReferenceTinyDecode)->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);

} // namespace

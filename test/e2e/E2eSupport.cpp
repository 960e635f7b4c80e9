//===- E2eSupport.cpp - What the end-to-end tests share -------------------===//
#include "test/e2e/E2eSupport.h"

#include "models/weights/RandomCheckpoint.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace csa {

/// Runs csa-compile; returns its exit status (output in `log`).
int compile(const std::string &args, const std::string &log) {
  std::string command = std::string(CSA_COMPILE_PATH) + " " + args + " > " +
                        log + " 2>&1";
  return std::system(command.c_str());
}

std::string readAll(const std::string &path) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return "";
  std::string text;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0)
    text.append(buffer, n);
  std::fclose(f);
  return text;
}

/// Position of the first difference of two logit vectors, or -1.
int64_t firstDifference(const std::vector<float> &a, const std::vector<float> &b) {
  if (a.size() != b.size())
    return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return int64_t(i);
  return -1;
}


/// Writes `variant`'s random weights (seed `seed`) to DIR/weights and opens
/// them with the artifact at `artifactDir`.
void loadModel(const ModelVariant &variant, const test::TempDir &dir,
               const std::string &artifactDir, uint64_t seed, LoadedModel &out,
               const runtime::ExecutorOptions &executorOptions) {
  RandomCheckpointOptions options;
  options.seed = seed;
  auto written = writeRandomCheckpoint(variant.config, variant.schedule,
                                       dir / "weights", options);
  ASSERT_TRUE(written.ok()) << written.status();
  auto ckpt = checkpoint::Checkpoint::open(dir / "weights");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  out.ckpt = std::make_unique<checkpoint::Checkpoint>(std::move(*ckpt));
  auto art = artifact::Artifact::open(artifactDir);
  ASSERT_TRUE(art.ok()) << art.status();
  out.art = std::make_unique<artifact::Artifact>(std::move(*art));
  auto executor = runtime::Executor::create(*out.art, *out.ckpt, executorOptions);
  ASSERT_TRUE(executor.ok()) << executor.status();
  out.executor = std::move(*executor);
}

/// Where two sequences' caches differ (the written part of each), or "".
std::string cacheDifference(const artifact::Plan &plan, const runtime::Sequence &a,
                            const runtime::Sequence &b) {
  for (const artifact::CacheBuffer &buf : plan.caches) {
    const runtime::CacheState &x = a.caches.at(buf.id), &y = b.caches.at(buf.id);
    size_t bytes = x.bytes.size();
    if (buf.kind == artifact::CacheKind::GlobalCache) {
      if (x.mainEntries != y.mainEntries || x.indexEntries != y.indexEntries)
        return buf.id + ": entries differ";
      bytes = size_t(x.mainEntries * buf.entryBytes);
    } else if (buf.kind == artifact::CacheKind::SwaRing &&
               (x.ringStart != y.ringStart || x.ringEnd != y.ringEnd)) {
      return buf.id + ": rings hold " + std::to_string(x.ringStart) + ".." +
             std::to_string(x.ringEnd) + " and " + std::to_string(y.ringStart) + ".." +
             std::to_string(y.ringEnd);
    }
    if (x.bytes.size() < bytes || y.bytes.size() < bytes ||
        std::memcmp(x.bytes.data(), y.bytes.data(), bytes) != 0)
      return buf.id + ": bytes differ";
  }
  return "";
}

} // namespace csa

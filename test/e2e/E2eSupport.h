//===- E2eSupport.h - What the end-to-end tests share ------------*- C++ -*-===//
//
// Compiling a variant with csa-compile, opening it with random weights, and
// comparing logits and caches bit for bit.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TEST_E2E_E2ESUPPORT_H
#define CSA_TEST_E2E_E2ESUPPORT_H

#include "models/variants/Variants.h"
#include "runtime/artifact/Artifact.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/executor/Executor.h"
#include "test/unit/support/TempDir.h"

#include <memory>
#include <string>
#include <vector>

namespace csa {

/// Runs csa-compile; returns its exit status (output in `log`).
int compile(const std::string &args, const std::string &log);

std::string readAll(const std::string &path);

/// Position of the first difference of two logit vectors, or -1.
int64_t firstDifference(const std::vector<float> &a, const std::vector<float> &b);

/// A compiled artifact with random weights and an executor over them (kept
/// on the heap: the executor points into the checkpoint and the artifact).
struct LoadedModel {
  std::unique_ptr<checkpoint::Checkpoint> ckpt;
  std::unique_ptr<artifact::Artifact> art;
  std::unique_ptr<runtime::Executor> executor;
};

/// Writes `variant`'s random weights (seed `seed`) to DIR/weights and opens
/// them with the artifact at `artifactDir` (gtest assertions on failure).
void loadModel(const ModelVariant &variant, const test::TempDir &dir,
               const std::string &artifactDir, uint64_t seed, LoadedModel &out,
               const runtime::ExecutorOptions &executorOptions = {});

/// Where two sequences' caches differ (the written part of each), or "".
std::string cacheDifference(const artifact::Plan &plan, const runtime::Sequence &a,
                            const runtime::Sequence &b);

} // namespace csa

#endif // CSA_TEST_E2E_E2ESUPPORT_H

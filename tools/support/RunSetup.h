//===- RunSetup.h - What csa-run and csa-score set up alike -----*- C++ -*-===//
//
// The steps between an artifact on disk and an executor that runs it, shared
// by the tools that run models: random weights for the artifact's config, the
// tokenizer of a checkpoint folder, and the Engram token map a run uses.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_SUPPORT_RUNSETUP_H
#define CSA_TOOLS_SUPPORT_RUNSETUP_H

#include "runtime/artifact/Artifact.h"
#include "runtime/tokenizer/EngramTokenMap.h"
#include "runtime/tokenizer/ModelTokenizer.h"
#include "tools/support/Progress.h"

#include "absl/status/statusor.h"

#include <optional>
#include <string>

namespace csa::tools {

/// A random checkpoint for the artifact's config (config.json of the
/// artifact), written to a fresh temporary directory (mkdtemp) under $TMPDIR,
/// with a progress line of the bytes written ("random weights: ...").
absl::StatusOr<std::string> makeRandomWeights(const artifact::Artifact &art, uint64_t seed,
                                              ProgressMode progressMode = ProgressMode::Never);

/// The tokenizer of a run: `flag` (--tokenizer: a folder or a
/// tokenizer.json), else `weightsDir`'s tokenizer.json when it has one, else
/// none.
absl::StatusOr<std::optional<tokenizer::ModelTokenizer>>
loadRunTokenizer(const std::string &flag, const std::string &weightsDir);

/// The Engram token map of a run (tokenizer::chooseEngramTokenMap on the
/// artifact's config), or nothing when the model has no Engram layers.
absl::StatusOr<std::optional<tokenizer::EngramTokenMap>>
runEngramTokenMap(const artifact::Artifact &art, const std::string &flag,
                  const tokenizer::ModelTokenizer *text, const std::string &weightsDir);

} // namespace csa::tools

#endif // CSA_TOOLS_SUPPORT_RUNSETUP_H

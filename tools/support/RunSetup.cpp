//===- RunSetup.cpp - What csa-run and csa-score set up alike -------------===//

#include "tools/support/RunSetup.h"

#include "models/config/ModelConfig.h"
#include "models/schedule/Schedule.h"
#include "models/weights/RandomCheckpoint.h"
#include "models/weights/WeightManifest.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdlib.h>
#include <vector>

namespace csa::tools {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::optional<ModelConfig>> artifactConfig(const artifact::Artifact &art) {
  std::ifstream in(art.pathOf("config.json"));
  if (!in)
    return std::optional<ModelConfig>();
  std::stringstream text;
  text << in.rdbuf();
  auto config = parseModelConfig(text.str(), art.pathOf("config.json"));
  if (!config.ok())
    return config.status();
  return std::optional<ModelConfig>(std::move(*config));
}

} // namespace

absl::StatusOr<std::string> makeRandomWeights(const artifact::Artifact &art, uint64_t seed,
                                              ProgressMode progressMode) {
  auto config = artifactConfig(art);
  if (!config.ok())
    return config.status();
  if (!*config)
    return absl::NotFoundError(absl::StrCat(
        "artifact ", art.directory(),
        " has no config.json, so --random-weights cannot make weights for it; "
        "give --weights=CKPT_DIR"));
  auto schedule = scheduleFromConfig(**config);
  if (!schedule.ok())
    return schedule.status();
  // A directory of our own (mkdtemp: unique, 0700, never a name another
  // user could have planted a link at).
  std::string pattern =
      (fs::temp_directory_path() / absl::StrCat("csa-run-weights-", seed, "-XXXXXX")).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  if (!::mkdtemp(name.data()))
    return absl::InternalError(absl::StrCat(pattern, ": cannot create a temporary directory: ",
                                            std::strerror(errno)));
  fs::path dir = name.data();
  RandomCheckpointOptions options;
  options.seed = seed;
  options.origin = art.pathOf("config.json");
  // The bytes written so far (a large variant's checkpoint takes a while).
  auto manifest = weightManifest(**config, *schedule, options.manifest);
  if (!manifest.ok())
    return manifest.status();
  Progress progress("random weights", manifestTotals(*manifest).bytes, "B", progressMode);
  options.writer.onWritten = [&progress](uint64_t bytes) { progress.add(bytes); };
  auto written = writeRandomCheckpoint(**config, *schedule, dir.string(), options);
  progress.finish();
  if (!written.ok())
    return written.status();
  return dir.string();
}

absl::StatusOr<std::optional<tokenizer::ModelTokenizer>>
loadRunTokenizer(const std::string &flag, const std::string &weightsDir) {
  const std::string at = !flag.empty() ? flag
                         : (!weightsDir.empty() && tokenizer::hasTokenizer(weightsDir))
                             ? weightsDir
                             : std::string();
  if (at.empty())
    return std::optional<tokenizer::ModelTokenizer>();
  auto loaded = tokenizer::ModelTokenizer::load(at);
  if (!loaded.ok())
    return loaded.status();
  return std::optional<tokenizer::ModelTokenizer>(std::move(*loaded));
}

absl::StatusOr<std::optional<tokenizer::EngramTokenMap>>
runEngramTokenMap(const artifact::Artifact &art, const std::string &flag,
                  const tokenizer::ModelTokenizer *text, const std::string &weightsDir) {
  auto config = artifactConfig(art);
  if (!config.ok())
    return config.status();
  if (!*config || (*config)->engramLayerIds.empty())
    return std::optional<tokenizer::EngramTokenMap>();
  auto map = tokenizer::chooseEngramTokenMap(
      {(*config)->vocabSize, (*config)->engramCompressedVocabSize, (*config)->engramPadId}, flag,
      text ? &text->tokenizer : nullptr, text ? text->path : "", weightsDir);
  if (!map.ok())
    return map.status();
  return std::optional<tokenizer::EngramTokenMap>(std::move(*map));
}

} // namespace csa::tools

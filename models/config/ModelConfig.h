//===- ModelConfig.h - DeepSeek-V4.1 model configuration ---------*- C++ -*-===//
//
// The model hyperparameters, read from the official `config.json` in either
// layout: the flat inference config (`dim`, `n_layers`, `kv_source_layers`,
// ...) or the Hugging Face layout with a `text_config` section
// (`hidden_size`, `num_hidden_layers`, `kv_source_layer_ids`, ...).
// Plain C++ (no LLVM) so that the runtime and the reference forward share it.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_MODELS_CONFIG_MODELCONFIG_H
#define CSA_MODELS_CONFIG_MODELCONFIG_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace csa {

enum class ConfigLayout { Flat, HuggingFace };

struct ModelConfig {
  /// Where the config came from ("released", a file path), for messages.
  std::string source;
  ConfigLayout layout = ConfigLayout::Flat;

  int64_t vocabSize = 0;
  int64_t dim = 0;
  int64_t nLayers = 0;
  int64_t nMtpLayers = 0; ///< DSpark draft layers (parsed, not compiled)

  // Attention.
  int64_t nHeads = 0;
  int64_t headDim = 0;
  int64_t ropeHeadDim = 0;
  int64_t qLoraRank = 0;
  int64_t oGroups = 0;
  int64_t oLoraRank = 0;
  int64_t windowSize = 0;
  double normEps = 0;

  // CSA2 schedule.
  std::vector<int64_t> compressRatios; ///< nLayers + nMtpLayers entries
  std::vector<int64_t> kvSourceLayers;
  std::vector<int64_t> indexSourceLayers;
  int64_t candidateSourceLayer = -1;
  int64_t candidateTopkBlocks = 0;
  int64_t candidateBlockSize = 0;

  // Indexer.
  int64_t indexNHeads = 0;
  int64_t indexHeadDim = 0;
  int64_t indexTopk = 0;

  // RoPE: base table for ratio-0 layers, YaRN-scaled table for the others.
  double ropeTheta = 0;
  double compressRopeTheta = 0;
  double ropeFactor = 1;
  int64_t originalSeqLen = 0;
  double betaFast = 0;
  double betaSlow = 0;
  int64_t maxPositionEmbeddings = 0;

  // MoE.
  int64_t nRoutedExperts = 0;
  int64_t nSharedExperts = 0;
  int64_t nActivatedExperts = 0;
  int64_t moeInterDim = 0;
  std::string scoreFunc;
  double routeScale = 1;
  double swigluLimit = 0;

  // mHC.
  int64_t hcMult = 1;
  int64_t hcSinkhornIters = 0;
  double hcEps = 0;

  // Engram.
  std::vector<int64_t> engramLayerIds;
  std::vector<int64_t> engramNumEmbeddings;
  int64_t engramVocabSize = 0;
  int64_t engramMaxNgramSize = 0;
  int64_t engramNHeads = 0;
  int64_t engramHeadDim = 0;
  int64_t engramPadId = 0;
  int64_t engramCompressedVocabSize = 0;

  // Weight formats.
  std::string dtype = "fp8";       ///< dense projections
  std::string expertDtype = "fp4"; ///< routed experts
  int64_t weightBlockSize = 32;

  /// Ratio of backbone layer `layer`.
  int64_t ratio(int64_t layer) const { return compressRatios.at(layer); }
};

/// Parses a config from JSON text. `source` names it in error messages.
/// Every error names the field (with its layout's name) and the source.
absl::StatusOr<ModelConfig> parseModelConfig(const std::string &json,
                                             const std::string &source);

/// Reads and parses a config file, or the config.json of a model folder
/// (files over 16 MiB are refused).
absl::StatusOr<ModelConfig> loadModelConfig(const std::string &location);

} // namespace csa

#endif // CSA_MODELS_CONFIG_MODELCONFIG_H

//===- RandomCheckpoint.h - Random checkpoints, official layout -*- C++ -*-===//
//
// Writes a checkpoint with every tensor of the weight manifest, in the
// released storage formats, filled with random values that keep the model
// numerically healthy, plus the config.json that describes it. These are the
// only weights this project has; the loading code that reads them is the real
// one.
//
// Values (x is unit-variance noise, bounded at +-3.46: a sum of 4 uniforms):
//   Linear [N, K]     std 1/sqrt(K), so a unit input gives a unit output
//                     (SwiGLU inputs stay ~10x below the clamp at 10)
//   Embedding         std 1;  Head std 1/sqrt(dim)
//   Norm, EngramGate  1 +- 0.05
//   AttnSink          +-0.5;  RouterBias +-0.02
//   HcFn              std 0.5/sqrt(hc*dim) (mixes of std ~0.5)
//   HcBase            pre = -ln(hc-1) (sigmoid 1/hc: an average of the
//                     streams), post = 0 (post 1), comb = identity + 0.1 noise
//   HcScale           0.5 .. 1
//   EngramTable       std 1
// FP8 and FP4 weights store those values as E4M3 / packed E2M1 codes with a
// UE8M0 scale per block: 2^ceil(log2(4 std / 448)) for FP8 and
// 2^ceil(log2(2.5 std / 6)) for FP4, doubled in a random quarter of the
// blocks so that dequantization is exercised with varying scales.
//
// Every element is a pure function of (seed, tensor name, element index), so
// a checkpoint does not depend on sharding or write order, any chunk of a
// tensor can be produced alone, and a scale and its weight agree without
// being generated together.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_MODELS_WEIGHTS_RANDOMCHECKPOINT_H
#define CSA_MODELS_WEIGHTS_RANDOMCHECKPOINT_H

#include "models/config/ModelConfig.h"
#include "models/schedule/Schedule.h"
#include "models/weights/WeightManifest.h"
#include "runtime/checkpoint/SafetensorsWriter.h"

#include "absl/status/statusor.h"
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace csa {

struct RandomCheckpointOptions {
  uint64_t seed = 0;
  checkpoint::CheckpointWriterOptions writer;
  ManifestOptions manifest;
  /// Where the config came from, for config.json's "_comment".
  std::string origin;
  /// The config file as read, when it has the flat layout: keys ModelConfig
  /// does not model (vision_*, dspark_*) are carried into config.json.
  nlohmann::json originalConfig;
};

struct RandomCheckpointResult {
  ManifestTotals totals;
  std::vector<std::string> files; ///< shards, index, config.json, Engram map
};

/// The Engram token map a random checkpoint carries (a JSON list of
/// vocab_size compressed ids: t mod engram_compressed_vocab_size), since it
/// has no tokenizer to build the released map from.
inline constexpr const char *kRandomEngramTokenMapFile = "engram_token_map.json";

/// Writes the random checkpoint of `config` + `schedule` into `directory`
/// (shards, index when sharded, config.json in the flat layout with the
/// schedule written back into its layer lists, and kRandomEngramTokenMapFile
/// when the model has Engram layers).
absl::StatusOr<RandomCheckpointResult>
writeRandomCheckpoint(const ModelConfig &config, const Schedule &schedule,
                      const std::string &directory,
                      const RandomCheckpointOptions &options = {});

/// The filler that produces the bytes of `spec` (see the file comment).
/// For a Scale, `scaled` is the manifest entry of the tensor it scales
/// (spec.scaleOf); nullptr otherwise.
checkpoint::TensorFiller randomTensorFiller(const ModelConfig &config,
                                            const TensorSpec &spec,
                                            const TensorSpec *scaled,
                                            uint64_t seed);

/// The config in the flat inference layout (the official
/// inference/config.json field names); parseModelConfig reads it back to the
/// same ModelConfig. Keys of `original` (a flat-layout config object) that
/// ModelConfig does not model (vision_*, dspark_*, ...) are carried over.
nlohmann::ordered_json flatConfigJson(const ModelConfig &config,
                                      const nlohmann::json *original = nullptr);

} // namespace csa

#endif // CSA_MODELS_WEIGHTS_RANDOMCHECKPOINT_H

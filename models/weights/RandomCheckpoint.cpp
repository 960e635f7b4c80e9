//===- RandomCheckpoint.cpp - Random checkpoints, official layout ---------===//
//
// A counter-based generator: element i of a tensor is mix(key + i), with the
// key hashed from the seed and the tensor name. Block scales use a key of the
// weight they scale, so the weight's filler can recompute the scale of any
// block it encodes.
//
//===----------------------------------------------------------------------===//
#include "models/weights/RandomCheckpoint.h"

#include "runtime/numerics/Formats.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <unordered_map>
#include <vector>

namespace csa {

namespace fs = std::filesystem;
using checkpoint::DType;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

uint64_t splitMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The i-th output of a SplitMix64 stream started at `key`.
uint64_t draw(uint64_t key, uint64_t i) {
  return splitMix(key + (i + 1) * 0x9E3779B97F4A7C15ull);
}

uint64_t keyOf(uint64_t seed, const std::string &text) {
  uint64_t h = 0xCBF29CE484222325ull; // FNV-1a
  for (unsigned char ch : text)
    h = (h ^ ch) * 0x100000001B3ull;
  return splitMix(seed ^ splitMix(h));
}

/// Unit-variance noise: a sum of four 16-bit uniforms (bounded at +-2 sqrt 3,
/// so no outlier saturates a format), summed exactly as integers.
float noise(uint64_t h) {
  const uint32_t sum = uint32_t(h & 0xFFFF) + uint32_t((h >> 16) & 0xFFFF) +
                       uint32_t((h >> 32) & 0xFFFF) + uint32_t(h >> 48);
  // (sum + 4 * 0.5) / 65536 - 2, scaled by sqrt(3) to unit variance.
  return (float(sum) + 2.0f - 131072.0f) * (1.7320508f / 65536.0f);
}

/// Uniform in [-1, 1).
float uniform(uint64_t h) {
  return float(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// The generator's hot loop over a run of elements: plain arithmetic over an
// array, so it vectorizes; on x86-64 it is also built for AVX2 and AVX-512
// and the loader picks the widest the CPU has (the machine that generates a
// checkpoint is not the one that built the tool). Same values as noise(draw).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CSA_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CSA_CPU_CLONES
#endif

/// out[i] = sigma * noise(draw(key, first + i)).
CSA_CPU_CLONES
void noiseRun(uint64_t key, uint64_t first, int64_t n, float sigma,
              float *out) {
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = key + (first + uint64_t(i) + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    const uint64_t h = z ^ (z >> 31);
    const int32_t sum = int32_t(h & 0xFFFF) + int32_t((h >> 16) & 0xFFFF) +
                        int32_t((h >> 32) & 0xFFFF) + int32_t(h >> 48);
    out[i] = sigma * ((float(sum) + 2.0f - 131072.0f) * (1.7320508f / 65536.0f));
  }
}

/// Everything a filler needs, captured by value.
struct Generator {
  TensorKind kind = TensorKind::Linear;
  WeightStorage storage = WeightStorage::Plain;
  DType dtype = DType::BF16;
  bool isScale = false;
  uint64_t valueKey = 0, scaleKey = 0;
  float sigma = 1;
  int64_t cols = 1; ///< logical K
  int64_t hc = 1;
  // Block scales: block sizes, block columns, exponent of the common scale.
  int64_t blockRows = 1, blockCols = 1, scaleCols = 1;
  int baseExp = 0;

  float value(uint64_t i) const {
    uint64_t h = draw(valueKey, i);
    switch (kind) {
    case TensorKind::Norm:
    case TensorKind::EngramGate:
      return 1.0f + 0.05f * uniform(h);
    case TensorKind::AttnSink:
      return 0.5f * uniform(h);
    case TensorKind::RouterBias:
      return 0.02f * uniform(h);
    case TensorKind::HcScale:
      return 0.75f + 0.25f * uniform(h);
    case TensorKind::HcBase: {
      const int64_t j = int64_t(i);
      if (j < hc) // pre: sigmoid(base) = 1/hc averages the streams
        return (hc > 1 ? -std::log(float(hc - 1)) : 0.0f) + 0.1f * uniform(h);
      if (j < 2 * hc) // post: 2 sigmoid(0) = 1
        return 0.1f * uniform(h);
      const int64_t r = (j - 2 * hc) / hc, c = (j - 2 * hc) % hc;
      return (r == c ? 1.0f : 0.0f) + 0.1f * uniform(h); // comb ~ identity
    }
    default:
      return sigma * noise(h);
    }
  }

  /// Exponent of the scale of block (row block R, column block C).
  int blockExp(int64_t R, int64_t C) const {
    return baseExp +
           ((draw(scaleKey, uint64_t(R * scaleCols + C)) & 3) == 0 ? 1 : 0);
  }

  /// 2^-exponent of the scale of every column block of row block R.
  void blockMultipliers(int64_t R, std::vector<float> &out) const {
    out.resize(size_t(scaleCols));
    for (int64_t C = 0; C < scaleCols; ++C)
      out[size_t(C)] = std::ldexp(1.0f, -blockExp(R, C));
  }

  /// Whether value() is sigma * noise (every kind but the small ones).
  bool isNoise() const {
    switch (kind) {
    case TensorKind::Norm:
    case TensorKind::EngramGate:
    case TensorKind::AttnSink:
    case TensorKind::RouterBias:
    case TensorKind::HcScale:
    case TensorKind::HcBase:
      return false;
    default:
      return true;
    }
  }

  /// out[i] = value(first + i) for i < n.
  void values(uint64_t first, int64_t n, float *out) const {
    if (isNoise()) {
      noiseRun(valueKey, first, n, sigma, out);
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      out[i] = value(first + uint64_t(i));
  }

  /// Elements per batch of values (kept on the stack, in the L1 cache).
  static constexpr int64_t kBatch = 2048;

  /// Bytes [offset, offset + size) of the tensor. Quantized data is walked
  /// row by row and block by block, so the scale of a block is computed
  /// once per row, not once per element; values come in batches.
  void fill(uint64_t offset, uint64_t size, uint8_t *dst) const {
    if (isScale) {
      for (uint64_t i = 0; i < size; ++i) {
        uint64_t e = offset + i;
        int code = numerics::kUe8m0Bias +
                   blockExp(int64_t(e) / scaleCols, int64_t(e) % scaleCols);
        dst[i] = uint8_t(code < 0 ? 0 : code > 254 ? 254 : code);
      }
      return;
    }
    alignas(64) float batch[kBatch];
    const uint64_t end = offset + size;
    std::vector<float> mult;
    int64_t cachedBlockRow = -1;
    switch (storage) {
    case WeightStorage::Fp8Block:
      // One byte per element.
      for (uint64_t e = offset; e < end;) {
        const int64_t r = int64_t(e) / cols, c0 = int64_t(e) % cols;
        if (r / blockRows != cachedBlockRow)
          blockMultipliers(cachedBlockRow = r / blockRows, mult);
        const int64_t stop = std::min<int64_t>(cols, c0 + int64_t(end - e));
        for (int64_t c = c0; c < stop;) {
          const int64_t block = c / blockCols;
          const int64_t n =
              std::min({stop, (block + 1) * blockCols, c + kBatch}) - c;
          values(e, n, batch);
          numerics::encodeE4M3Scaled(batch, mult[size_t(block)], n, dst + (e - offset));
          c += n;
          e += uint64_t(n);
        }
      }
      return;
    case WeightStorage::Fp4Packed: {
      // One byte per pair of elements along K.
      const int64_t bytesPerRow = cols / 2, bytesPerBlock = blockCols / 2;
      for (uint64_t b = offset; b < end;) {
        const int64_t r = int64_t(b) / bytesPerRow,
                      j0 = int64_t(b) % bytesPerRow;
        if (r != cachedBlockRow)
          blockMultipliers(cachedBlockRow = r, mult);
        const int64_t stop =
            std::min<int64_t>(bytesPerRow, j0 + int64_t(end - b));
        for (int64_t j = j0; j < stop;) {
          const int64_t block = j / bytesPerBlock;
          const int64_t n =
              std::min({stop, (block + 1) * bytesPerBlock, j + kBatch / 2}) - j;
          values(uint64_t(r * cols + 2 * j), 2 * n, batch);
          numerics::encodeE2M1PairsScaled(batch, mult[size_t(block)], n, dst + (b - offset));
          j += n;
          b += uint64_t(n);
        }
      }
      return;
    }
    case WeightStorage::Plain:
      break;
    }
    // Whole elements: a filler is called on element boundaries.
    const int64_t width = dtype == DType::F32 ? 4 : 2;
    for (uint64_t i = 0; i < size;) {
      const int64_t n = std::min<int64_t>(kBatch, int64_t(size - i) / width);
      if (n == 0)
        break; // (never: fillers split at element boundaries)
      values((offset + i) / uint64_t(width), n, batch);
      if (dtype == DType::F32)
        std::memcpy(dst + i, batch, size_t(n) * 4); // little-endian hosts only
      else
        numerics::floatToBf16Bytes(batch, n, dst + i);
      i += uint64_t(n * width);
    }
  }
};

float sigmaOf(const ModelConfig &config, const TensorSpec &spec) {
  const double k = spec.logicalShape.size() == 2 ? spec.logicalShape[1] : 1;
  switch (spec.kind) {
  case TensorKind::Linear:
    return float(1.0 / std::sqrt(k));
  case TensorKind::Head:
    return float(1.0 / std::sqrt(double(config.dim)));
  case TensorKind::HcFn:
    return float(0.5 / std::sqrt(k));
  default:
    return 1.0f;
  }
}

absl::Status writeText(const std::string &path, const std::string &text) {
  const std::string temp = path + ".partial";
  FILE *f = std::fopen(temp.c_str(), "wb");
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f)
    ok &= std::fclose(f) == 0;
  if (ok && std::rename(temp.c_str(), path.c_str()) == 0)
    return absl::OkStatus();
  int err = errno;
  std::remove(temp.c_str());
  return absl::InternalError(
      absl::StrCat(path, ": cannot write: ", std::strerror(err)));
}

} // namespace

checkpoint::TensorFiller randomTensorFiller(const ModelConfig &config,
                                            const TensorSpec &spec,
                                            const TensorSpec *scaled,
                                            uint64_t seed) {
  // A scale is generated from the description of the tensor it scales.
  const TensorSpec &values =
      spec.kind == TensorKind::Scale && scaled ? *scaled : spec;
  Generator g;
  g.kind = values.kind;
  g.storage = values.storage;
  g.dtype = spec.dtype;
  g.isScale = spec.kind == TensorKind::Scale;
  g.valueKey = keyOf(seed, values.name);
  g.scaleKey = keyOf(seed, values.name + "#scale");
  g.sigma = sigmaOf(config, values);
  g.cols = values.logicalShape.size() == 2 ? values.logicalShape[1] : 1;
  g.hc = config.hcMult;
  if (values.storage != WeightStorage::Plain) {
    g.blockRows = values.blockRows;
    g.blockCols = values.blockCols;
    g.scaleCols = (g.cols + g.blockCols - 1) / g.blockCols;
    const double headroom =
        values.storage == WeightStorage::Fp4Packed ? 2.5 / 6.0 : 4.0 / 448.0;
    g.baseExp = int(std::ceil(std::log2(double(g.sigma) * headroom)));
  }
  const uint64_t align = checkpoint::dtypeSize(spec.dtype);
  return [g, align](uint64_t offset, uint64_t size, uint8_t *dst) {
    // Elements are independent, so a chunk splits over threads freely.
    const unsigned threads =
        size < (1u << 20) ? 1u : checkpoint::fillerThreads();
    if (threads == 1) {
      g.fill(offset, size, dst);
      return;
    }
    const uint64_t piece = (size / threads + align - 1) / align * align;
    std::vector<std::thread> workers;
    for (uint64_t begin = 0; begin < size; begin += piece) {
      const uint64_t n = std::min(piece, size - begin);
      workers.emplace_back([&g, offset, begin, n, dst] {
        g.fill(offset + begin, n, dst + begin);
      });
    }
    for (std::thread &t : workers)
      t.join();
  };
}

ordered_json flatConfigJson(const ModelConfig &c, const json *original) {
  ordered_json j;
  j["vocab_size"] = c.vocabSize;
  j["dim"] = c.dim;
  j["moe_inter_dim"] = c.moeInterDim;
  j["n_layers"] = c.nLayers;
  j["n_mtp_layers"] = c.nMtpLayers;
  j["n_heads"] = c.nHeads;
  j["n_routed_experts"] = c.nRoutedExperts;
  j["n_shared_experts"] = c.nSharedExperts;
  j["n_activated_experts"] = c.nActivatedExperts;
  j["score_func"] = c.scoreFunc;
  j["route_scale"] = c.routeScale;
  j["swiglu_limit"] = c.swigluLimit;
  j["q_lora_rank"] = c.qLoraRank;
  j["head_dim"] = c.headDim;
  j["rope_head_dim"] = c.ropeHeadDim;
  j["norm_eps"] = c.normEps;
  j["o_groups"] = c.oGroups;
  j["o_lora_rank"] = c.oLoraRank;
  j["window_size"] = c.windowSize;
  j["kv_source_layers"] = c.kvSourceLayers;
  j["index_source_layers"] = c.indexSourceLayers;
  j["original_seq_len"] = c.originalSeqLen;
  j["max_position_embeddings"] = c.maxPositionEmbeddings;
  j["rope_theta"] = c.ropeTheta;
  j["rope_factor"] = c.ropeFactor;
  j["beta_fast"] = c.betaFast;
  j["beta_slow"] = c.betaSlow;
  j["index_n_heads"] = c.indexNHeads;
  j["index_head_dim"] = c.indexHeadDim;
  j["index_topk"] = c.indexTopk;
  j["candidate_source_layer"] = c.candidateSourceLayer;
  j["candidate_topk_blocks"] = c.candidateTopkBlocks;
  j["candidate_block_size"] = c.candidateBlockSize;
  j["hc_mult"] = c.hcMult;
  j["hc_sinkhorn_iters"] = c.hcSinkhornIters;
  j["hc_eps"] = c.hcEps;
  j["engram_layer_ids"] = c.engramLayerIds;
  j["engram_num_embeddings"] = c.engramNumEmbeddings;
  if (!c.engramLayerIds.empty()) {
    j["engram_vocab_size"] = c.engramVocabSize;
    j["engram_max_ngram_size"] = c.engramMaxNgramSize;
    j["engram_n_heads"] = c.engramNHeads;
    j["engram_head_dim"] = c.engramHeadDim;
    j["engram_pad_id"] = c.engramPadId;
    j["engram_compressed_vocab_size"] = c.engramCompressedVocabSize;
  }
  j["dtype"] = c.dtype;
  j["expert_dtype"] = c.expertDtype;
  j["compress_rope_theta"] = c.compressRopeTheta;
  j["compress_ratios"] = c.compressRatios;
  if (original && original->is_object() && !original->contains("text_config"))
    for (auto it = original->begin(); it != original->end(); ++it)
      if (!j.contains(it.key()) && it.key() != "_comment")
        j[it.key()] = it.value();
  return j;
}

absl::StatusOr<RandomCheckpointResult>
writeRandomCheckpoint(const ModelConfig &config, const Schedule &schedule,
                      const std::string &directory,
                      const RandomCheckpointOptions &options) {
  auto manifest = weightManifest(config, schedule, options.manifest);
  if (!manifest.ok())
    return manifest.status();
  std::unordered_map<std::string, const TensorSpec *> byName;
  for (const TensorSpec &spec : *manifest)
    byName.emplace(spec.name, &spec);

  checkpoint::CheckpointWriter writer(options.writer);
  writer.setMetadata("format", "pt"); // what Hugging Face loaders expect
  writer.setMetadata("csa.generator", "csa random checkpoint");
  writer.setMetadata("csa.seed", std::to_string(options.seed));
  writer.setMetadata("csa.schedule", schedule.letters());
  for (const TensorSpec &spec : *manifest) {
    const TensorSpec *scaled = nullptr;
    if (spec.kind == TensorKind::Scale) {
      auto it = byName.find(spec.scaleOf);
      scaled = it == byName.end() ? nullptr : it->second;
    }
    if (absl::Status s =
            writer.add(spec.name, spec.dtype, spec.shape,
                       randomTensorFiller(config, spec, scaled, options.seed));
        !s.ok())
      return s;
  }
  auto files = writer.write(directory);
  if (!files.ok())
    return files.status();

  // The config of the variant: the schedule goes into the layer lists.
  ModelConfig described = config;
  applyScheduleToConfig(schedule, described);
  ordered_json text;
  text["_comment"] = absl::StrCat(
      "Random weights written by csa (seed ", options.seed, ") for ",
      options.origin.empty() ? config.source : options.origin,
      " with schedule '", schedule.letters(), "'; not a trained model.");
  ordered_json body = flatConfigJson(
      described,
      options.originalConfig.is_object() ? &options.originalConfig : nullptr);
  for (auto it = body.begin(); it != body.end(); ++it)
    text[it.key()] = it.value();
  const std::string configPath = (fs::path(directory) / "config.json").string();
  if (absl::Status s = writeText(configPath, text.dump(4) + "\n"); !s.ok())
    return s;

  RandomCheckpointResult result;
  result.totals = manifestTotals(*manifest);
  result.files = std::move(*files);
  result.files.push_back(configPath);
  if (!config.engramLayerIds.empty()) {
    // Random weights have no tokenizer: their Engram layers hash t mod the
    // compressed vocabulary, written down so a run names the map it used
    // (runtime/tokenizer/EngramTokenMap.h).
    std::string map = "[";
    for (int64_t t = 0; t < config.vocabSize; ++t)
      absl::StrAppend(&map, t ? "," : "", t % config.engramCompressedVocabSize);
    map += "]\n";
    const std::string mapPath = (fs::path(directory) / kRandomEngramTokenMapFile).string();
    if (absl::Status s = writeText(mapPath, map); !s.ok())
      return s;
    result.files.push_back(mapPath);
  }
  return result;
}

} // namespace csa

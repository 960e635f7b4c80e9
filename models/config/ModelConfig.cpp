//===- ModelConfig.cpp - DeepSeek-V4.1 model configuration ----------------===//
//
// One table maps each field's flat-layout name to its Hugging Face name, so
// both layouts are read by the same code and every message can name the field
// as the user's file spells it.
//
//===----------------------------------------------------------------------===//
#include "models/config/ModelConfig.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include <nlohmann/json.hpp>
#include "runtime/support/JsonLimits.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace csa {
namespace {

using nlohmann::json;

/// Reads fields of one config, in its layout, with typed errors.
class FieldReader {
public:
  FieldReader(const json &root, std::string source, ConfigLayout layout)
      : root(root), source(std::move(source)), layout(layout) {}

  /// The dotted path of a field in this config's layout.
  std::string path(const char *flat, const char *hf) const {
    return layout == ConfigLayout::Flat ? flat : hf;
  }

  absl::Status error(const std::string &field, const std::string &what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": field '", field, "': ", what));
  }

  /// Finds a field by dotted path; nullptr if absent (or explicitly null).
  const json *find(const std::string &dotted) const {
    const json *node = &root;
    for (absl::string_view part : absl::StrSplit(dotted, '.')) {
      if (!node->is_object())
        return nullptr;
      auto it = node->find(std::string(part));
      if (it == node->end())
        return nullptr;
      node = &*it;
    }
    return node->is_null() ? nullptr : node;
  }

  /// The value for a message: a scalar as JSON (cut at 40 characters), an
  /// array or object by its size only (dump() recurses, and an untrusted
  /// file can nest 10^5 deep).
  static std::string describe(const json &value) {
    if (value.is_array() || value.is_object())
      return absl::StrCat(value.type_name(), " of ", value.size(),
                          value.is_array() ? " elements" : " members");
    std::string text = value.dump();
    if (text.size() > 40)
      text = text.substr(0, 37) + "...";
    return absl::StrCat(value.type_name(), " ", text);
  }

  absl::Status readInt(const char *flat, const char *hf, int64_t &out,
                       bool required = true) {
    std::string field = path(flat, hf);
    const json *value = find(field);
    if (!value)
      return required ? error(field, "missing required field")
                      : absl::OkStatus();
    if (value->is_number_unsigned() &&
        value->get<uint64_t>() > uint64_t(INT64_MAX))
      return error(field, "integer out of range, got " + describe(*value));
    if (value->is_number_integer()) {
      out = value->get<int64_t>();
      return absl::OkStatus();
    }
    // Some exporters write integral values as floats (16.0). Only values
    // inside int64's range are converted (a larger double's conversion is
    // undefined behaviour; found by fuzz-config).
    if (value->is_number_float()) {
      const double d = value->get<double>();
      if (!(d >= -9.2e18 && d <= 9.2e18))
        return error(field, "integer out of range, got " + describe(*value));
      if (d == std::floor(d)) {
        out = int64_t(d);
        return absl::OkStatus();
      }
    }
    return error(field, "expected an integer, got " + describe(*value));
  }

  absl::Status readDouble(const char *flat, const char *hf, double &out,
                          bool required = true) {
    std::string field = path(flat, hf);
    const json *value = find(field);
    if (!value)
      return required ? error(field, "missing required field")
                      : absl::OkStatus();
    if (!value->is_number())
      return error(field, "expected a number, got " + describe(*value));
    out = value->get<double>();
    return absl::OkStatus();
  }

  absl::Status readString(const char *flat, const char *hf, std::string &out,
                          bool required = true) {
    std::string field = path(flat, hf);
    const json *value = find(field);
    if (!value)
      return required ? error(field, "missing required field")
                      : absl::OkStatus();
    if (!value->is_string())
      return error(field, "expected a string, got " + describe(*value));
    out = value->get<std::string>();
    return absl::OkStatus();
  }

  absl::Status readIntList(const char *flat, const char *hf,
                           std::vector<int64_t> &out, bool required = true) {
    std::string field = path(flat, hf);
    const json *value = find(field);
    if (!value)
      return required ? error(field, "missing required field")
                      : absl::OkStatus();
    if (!value->is_array())
      return error(field, "expected a list of integers, got " +
                              describe(*value));
    out.clear();
    for (size_t i = 0; i < value->size(); ++i) {
      const json &item = (*value)[i];
      if (!item.is_number_integer() ||
          (item.is_number_unsigned() &&
           item.get<uint64_t>() > uint64_t(INT64_MAX)))
        return error(field, absl::StrCat("entry ", i,
                                         ": expected an integer, got ",
                                         describe(item)));
      out.push_back(item.get<int64_t>());
    }
    return absl::OkStatus();
  }

private:
  const json &root;
  std::string source;
  ConfigLayout layout;
};

#define CSA_RETURN_IF_ERROR(expr)                                              \
  do {                                                                         \
    absl::Status status_ = (expr);                                             \
    if (!status_.ok())                                                         \
      return status_;                                                          \
  } while (0)

absl::Status readFields(FieldReader &r, ModelConfig &c) {
  // Hugging Face names live under text_config; quantization_config is at the
  // root in both layouts' HF form; rope_scaling sits in text_config.
  CSA_RETURN_IF_ERROR(r.readInt("vocab_size", "text_config.vocab_size", c.vocabSize));
  CSA_RETURN_IF_ERROR(r.readInt("dim", "text_config.hidden_size", c.dim));
  CSA_RETURN_IF_ERROR(r.readInt("n_layers", "text_config.num_hidden_layers", c.nLayers));
  CSA_RETURN_IF_ERROR(r.readInt("n_mtp_layers", "text_config.num_nextn_predict_layers", c.nMtpLayers, false));
  CSA_RETURN_IF_ERROR(r.readInt("n_heads", "text_config.num_attention_heads", c.nHeads));
  CSA_RETURN_IF_ERROR(r.readInt("head_dim", "text_config.head_dim", c.headDim));
  CSA_RETURN_IF_ERROR(r.readInt("rope_head_dim", "text_config.qk_rope_head_dim", c.ropeHeadDim));
  CSA_RETURN_IF_ERROR(r.readInt("q_lora_rank", "text_config.q_lora_rank", c.qLoraRank));
  CSA_RETURN_IF_ERROR(r.readInt("o_groups", "text_config.o_groups", c.oGroups));
  CSA_RETURN_IF_ERROR(r.readInt("o_lora_rank", "text_config.o_lora_rank", c.oLoraRank));
  CSA_RETURN_IF_ERROR(r.readInt("window_size", "text_config.sliding_window", c.windowSize));
  CSA_RETURN_IF_ERROR(r.readDouble("norm_eps", "text_config.rms_norm_eps", c.normEps));

  CSA_RETURN_IF_ERROR(r.readIntList("compress_ratios", "text_config.compress_ratios", c.compressRatios));
  CSA_RETURN_IF_ERROR(r.readIntList("kv_source_layers", "text_config.kv_source_layer_ids", c.kvSourceLayers));
  CSA_RETURN_IF_ERROR(r.readIntList("index_source_layers", "text_config.index_source_layer_ids", c.indexSourceLayers));
  CSA_RETURN_IF_ERROR(r.readInt("candidate_source_layer", "text_config.candidate_source_layer_id", c.candidateSourceLayer, false));
  CSA_RETURN_IF_ERROR(r.readInt("candidate_topk_blocks", "text_config.candidate_topk_blocks", c.candidateTopkBlocks, false));
  CSA_RETURN_IF_ERROR(r.readInt("candidate_block_size", "text_config.candidate_block_size", c.candidateBlockSize, false));

  CSA_RETURN_IF_ERROR(r.readInt("index_n_heads", "text_config.index_n_heads", c.indexNHeads));
  CSA_RETURN_IF_ERROR(r.readInt("index_head_dim", "text_config.index_head_dim", c.indexHeadDim));
  CSA_RETURN_IF_ERROR(r.readInt("index_topk", "text_config.index_topk", c.indexTopk));

  CSA_RETURN_IF_ERROR(r.readDouble("rope_theta", "text_config.rope_theta", c.ropeTheta));
  CSA_RETURN_IF_ERROR(r.readDouble("compress_rope_theta", "text_config.compress_rope_theta", c.compressRopeTheta));
  CSA_RETURN_IF_ERROR(r.readDouble("rope_factor", "text_config.rope_scaling.factor", c.ropeFactor, false));
  CSA_RETURN_IF_ERROR(r.readInt("original_seq_len", "text_config.rope_scaling.original_max_position_embeddings", c.originalSeqLen, false));
  CSA_RETURN_IF_ERROR(r.readDouble("beta_fast", "text_config.rope_scaling.beta_fast", c.betaFast, false));
  CSA_RETURN_IF_ERROR(r.readDouble("beta_slow", "text_config.rope_scaling.beta_slow", c.betaSlow, false));
  CSA_RETURN_IF_ERROR(r.readInt("max_position_embeddings", "text_config.max_position_embeddings", c.maxPositionEmbeddings, false));

  CSA_RETURN_IF_ERROR(r.readInt("n_routed_experts", "text_config.n_routed_experts", c.nRoutedExperts));
  CSA_RETURN_IF_ERROR(r.readInt("n_shared_experts", "text_config.n_shared_experts", c.nSharedExperts));
  CSA_RETURN_IF_ERROR(r.readInt("n_activated_experts", "text_config.num_experts_per_tok", c.nActivatedExperts));
  CSA_RETURN_IF_ERROR(r.readInt("moe_inter_dim", "text_config.moe_intermediate_size", c.moeInterDim));
  CSA_RETURN_IF_ERROR(r.readString("score_func", "text_config.scoring_func", c.scoreFunc));
  CSA_RETURN_IF_ERROR(r.readDouble("route_scale", "text_config.routed_scaling_factor", c.routeScale));
  CSA_RETURN_IF_ERROR(r.readDouble("swiglu_limit", "text_config.swiglu_limit", c.swigluLimit));

  CSA_RETURN_IF_ERROR(r.readInt("hc_mult", "text_config.hc_mult", c.hcMult));
  CSA_RETURN_IF_ERROR(r.readInt("hc_sinkhorn_iters", "text_config.hc_sinkhorn_iters", c.hcSinkhornIters));
  CSA_RETURN_IF_ERROR(r.readDouble("hc_eps", "text_config.hc_eps", c.hcEps));

  CSA_RETURN_IF_ERROR(r.readIntList("engram_layer_ids", "text_config.engram_layer_ids", c.engramLayerIds, false));
  CSA_RETURN_IF_ERROR(r.readIntList("engram_num_embeddings", "text_config.engram_num_embeddings", c.engramNumEmbeddings, false));
  const bool engram = !c.engramLayerIds.empty();
  CSA_RETURN_IF_ERROR(r.readInt("engram_vocab_size", "text_config.engram_vocab_size", c.engramVocabSize, engram));
  CSA_RETURN_IF_ERROR(r.readInt("engram_max_ngram_size", "text_config.engram_max_ngram_size", c.engramMaxNgramSize, engram));
  CSA_RETURN_IF_ERROR(r.readInt("engram_n_heads", "text_config.engram_n_heads", c.engramNHeads, engram));
  CSA_RETURN_IF_ERROR(r.readInt("engram_head_dim", "text_config.engram_head_dim", c.engramHeadDim, engram));
  CSA_RETURN_IF_ERROR(r.readInt("engram_pad_id", "text_config.engram_pad_token_id", c.engramPadId, engram));
  CSA_RETURN_IF_ERROR(r.readInt("engram_compressed_vocab_size", "text_config.engram_compressed_vocab_size", c.engramCompressedVocabSize, engram));

  CSA_RETURN_IF_ERROR(r.readString("dtype", "quantization_config.quant_method", c.dtype, false));
  CSA_RETURN_IF_ERROR(r.readString("expert_dtype", "quantization_config.expert_dtype", c.expertDtype, false));
  return absl::OkStatus();
}

/// Range and consistency checks that do not depend on the schedule rules.
absl::Status checkFields(const FieldReader &r, const ModelConfig &c) {
  auto field = [&](const char *flat, const char *hf) {
    return r.path(flat, hf);
  };
  // Every size is positive and at most a limit (docs/semantics.md, "Input
  // limits"): every size the generated kernels index with stays in int64
  // and in a GPU block's shared memory, and compile time stays linear. The
  // released model is far below each (its values in the comments).
  struct Size {
    const char *flat, *hf;
    int64_t value, most;
  };
  constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
  for (const Size &p : {
           Size{"vocab_size", "text_config.vocab_size", c.vocabSize, int64_t(1) << 24}, // 129280
           {"dim", "text_config.hidden_size", c.dim, 65536},                             // 5120
           {"n_layers", "text_config.num_hidden_layers", c.nLayers, 1024},               // 40
           {"n_heads", "text_config.num_attention_heads", c.nHeads, 1024},               // 64
           {"head_dim", "text_config.head_dim", c.headDim, 4096},                        // 512
           {"rope_head_dim", "text_config.qk_rope_head_dim", c.ropeHeadDim, kNoLimit},   // below head_dim
           {"q_lora_rank", "text_config.q_lora_rank", c.qLoraRank, 65536},               // 1280
           {"o_groups", "text_config.o_groups", c.oGroups, kNoLimit},                    // divides n_heads
           {"o_lora_rank", "text_config.o_lora_rank", c.oLoraRank, 65536},               // 1024
           {"window_size", "text_config.sliding_window", c.windowSize, int64_t(1) << 20}, // 128
           {"index_n_heads", "text_config.index_n_heads", c.indexNHeads, 1024},          // 32
           {"index_head_dim", "text_config.index_head_dim", c.indexHeadDim, 4096},       // 128
           {"index_topk", "text_config.index_topk", c.indexTopk, 65536},                 // 512
           {"n_routed_experts", "text_config.n_routed_experts", c.nRoutedExperts, 4096}, // 384
           {"n_activated_experts", "text_config.num_experts_per_tok", c.nActivatedExperts,
            kNoLimit}, // at most n_routed_experts
           {"moe_inter_dim", "text_config.moe_intermediate_size", c.moeInterDim, 65536}, // 2304
           {"hc_mult", "text_config.hc_mult", c.hcMult, 16},                             // 4
       }) {
    if (p.value <= 0)
      return r.error(field(p.flat, p.hf),
                     absl::StrCat("must be positive, got ", p.value));
    if (p.value > p.most)
      return r.error(field(p.flat, p.hf),
                     absl::StrCat("is ", p.value, "; at most ", p.most,
                                  " is supported (docs/semantics.md, Input limits)"));
  }
  if (c.hcSinkhornIters > 1000) // 20
    return r.error(field("hc_sinkhorn_iters", "text_config.hc_sinkhorn_iters"),
                   absl::StrCat("is ", c.hcSinkhornIters,
                                "; at most 1000 is supported (docs/semantics.md, Input limits)"));
  if (c.nMtpLayers < 0)
    return r.error(field("n_mtp_layers", "text_config.num_nextn_predict_layers"),
                   "must be >= 0");
  if (c.nSharedExperts < 0)
    return r.error(field("n_shared_experts", "text_config.n_shared_experts"),
                   "must be >= 0");
  if (c.headDim % 32 != 0)
    return r.error(field("head_dim", "text_config.head_dim"),
                   absl::StrCat(c.headDim, " is not a multiple of 32 (FP4 "
                                           "rows scale per 16, FP8 SWA rows "
                                           "per 32 channels)"));
  if (c.indexHeadDim % 32 != 0)
    return r.error(field("index_head_dim", "text_config.index_head_dim"),
                   absl::StrCat(c.indexHeadDim, " is not a multiple of 32 "
                                                "(index rows scale per 32)"));
  if (c.ropeHeadDim % 2 != 0 || c.ropeHeadDim > c.headDim ||
      c.ropeHeadDim > c.indexHeadDim)
    return r.error(field("rope_head_dim", "text_config.qk_rope_head_dim"),
                   absl::StrCat(c.ropeHeadDim, " must be even and at most "
                                               "head_dim and index_head_dim"));
  if (c.nHeads % c.oGroups != 0)
    return r.error(field("o_groups", "text_config.o_groups"),
                   absl::StrCat(c.oGroups, " does not divide ",
                                field("n_heads", "text_config.num_attention_heads"),
                                " = ", c.nHeads));
  if (c.nActivatedExperts > c.nRoutedExperts)
    return r.error(field("n_activated_experts", "text_config.num_experts_per_tok"),
                   absl::StrCat(c.nActivatedExperts, " exceeds ",
                                c.nRoutedExperts, " routed experts"));
  if (c.scoreFunc != "sqrtsoftplus")
    return r.error(field("score_func", "text_config.scoring_func"),
                   "'" + c.scoreFunc +
                       "' is not supported; DeepSeek-V4.1 routes with "
                       "'sqrtsoftplus'");
  if (c.dtype != "fp8" && c.dtype != "bf16")
    return r.error(field("dtype", "quantization_config.quant_method"),
                   "'" + c.dtype + "' is not supported (fp8 or bf16)");
  if (c.expertDtype != "fp4" && c.expertDtype != "fp8" &&
      c.expertDtype != "bf16")
    return r.error(field("expert_dtype", "quantization_config.expert_dtype"),
                   "'" + c.expertDtype +
                       "' is not supported (fp4, fp8 or bf16)");
  if (c.ropeTheta <= 1 || c.compressRopeTheta <= 1)
    return r.error(field("rope_theta", "text_config.rope_theta"),
                   "rope_theta and compress_rope_theta must be > 1");
  if (c.ropeFactor < 1)
    return r.error(field("rope_factor", "text_config.rope_scaling.factor"),
                   "must be >= 1 (1 = no YaRN)");
  if (c.ropeFactor > 1 &&
      (c.originalSeqLen <= 0 || !(c.betaFast > c.betaSlow && c.betaSlow > 0)))
    return r.error(field("rope_factor", "text_config.rope_scaling.factor"),
                   "YaRN needs original_seq_len > 0 and beta_fast > "
                   "beta_slow > 0");
  if (c.hcSinkhornIters < 0 || c.hcEps < 0 || c.normEps < 0)
    return r.error(field("hc_sinkhorn_iters", "text_config.hc_sinkhorn_iters"),
                   "hc_sinkhorn_iters, hc_eps and norm_eps must be >= 0");

  // Layer lists.
  const std::string ratios = field("compress_ratios", "text_config.compress_ratios");
  if (int64_t(c.compressRatios.size()) != c.nLayers + c.nMtpLayers)
    return r.error(ratios, absl::StrCat("has ", c.compressRatios.size(),
                                        " entries; expected ",
                                        field("n_layers", "text_config.num_hidden_layers"),
                                        " + ",
                                        field("n_mtp_layers", "text_config.num_nextn_predict_layers"),
                                        " = ", c.nLayers, " + ", c.nMtpLayers));
  for (size_t l = 0; l < c.compressRatios.size(); ++l)
    if (c.compressRatios[l] < 0)
      return r.error(ratios, absl::StrCat("layer ", l, ": ratio ",
                                          c.compressRatios[l], " < 0"));
  auto checkLayers = [&](const std::vector<int64_t> &layers, const char *flat,
                         const char *hf) -> absl::Status {
    for (size_t i = 0; i < layers.size(); ++i) {
      int64_t l = layers[i];
      if (l < 0 || l >= c.nLayers)
        return r.error(field(flat, hf),
                       absl::StrCat("layer ", l, " is outside the ",
                                    c.nLayers, " backbone layers"));
      for (size_t j = 0; j < i; ++j)
        if (layers[j] == l)
          return r.error(field(flat, hf),
                         absl::StrCat("layer ", l, " is listed twice"));
    }
    return absl::OkStatus();
  };
  CSA_RETURN_IF_ERROR(checkLayers(c.kvSourceLayers, "kv_source_layers",
                                  "text_config.kv_source_layer_ids"));
  CSA_RETURN_IF_ERROR(checkLayers(c.indexSourceLayers, "index_source_layers",
                                  "text_config.index_source_layer_ids"));
  CSA_RETURN_IF_ERROR(checkLayers(c.engramLayerIds, "engram_layer_ids",
                                  "text_config.engram_layer_ids"));
  if (c.engramNumEmbeddings.size() != c.engramLayerIds.size())
    return r.error(field("engram_num_embeddings", "text_config.engram_num_embeddings"),
                   absl::StrCat("has ", c.engramNumEmbeddings.size(),
                                " entries for ", c.engramLayerIds.size(),
                                " engram layers"));
  if (!c.engramLayerIds.empty() &&
      (c.engramMaxNgramSize < 2 || c.engramNHeads < 1 || c.engramHeadDim < 1))
    return r.error(field("engram_max_ngram_size", "text_config.engram_max_ngram_size"),
                   "engram needs max_ngram_size >= 2, n_heads >= 1, "
                   "head_dim >= 1");
  if (!c.engramLayerIds.empty() &&
      (c.engramMaxNgramSize > 16 || c.engramNHeads > 64 || c.engramHeadDim > 4096))
    return r.error(field("engram_max_ngram_size", "text_config.engram_max_ngram_size"),
                   absl::StrCat("engram supports max_ngram_size <= 16, n_heads <= 64 and "
                                "head_dim <= 4096, got ",
                                c.engramMaxNgramSize, ", ", c.engramNHeads, " and ",
                                c.engramHeadDim));
  // The pad id is a token of the vocabulary: the hash kernels look it up in
  // the compressed-token map, which has one entry per token.
  if (!c.engramLayerIds.empty() && (c.engramPadId < 0 || c.engramPadId >= c.vocabSize))
    return r.error(field("engram_pad_id", "text_config.engram_pad_token_id"),
                   absl::StrCat(c.engramPadId, " is not a token id (vocab_size ",
                                c.vocabSize, ")"));
  if (!c.engramLayerIds.empty() && c.engramHeadDim % 32 != 0)
    return r.error(field("engram_head_dim", "text_config.engram_head_dim"),
                   absl::StrCat(c.engramHeadDim,
                                " is not a multiple of 32 (the Engram table "
                                "scales rows per 32 channels)"));
  if (c.candidateTopkBlocks < 0 || c.candidateBlockSize < 0)
    return r.error(field("candidate_topk_blocks", "text_config.candidate_topk_blocks"),
                   "candidate_topk_blocks and candidate_block_size must be "
                   ">= 0");
  if (c.candidateSourceLayer >= 0) {
    CSA_RETURN_IF_ERROR(checkLayers({c.candidateSourceLayer},
                                    "candidate_source_layer",
                                    "text_config.candidate_source_layer_id"));
    if (c.candidateTopkBlocks <= 0 || c.candidateBlockSize <= 0)
      return r.error(field("candidate_topk_blocks", "text_config.candidate_topk_blocks"),
                     "candidate_topk_blocks and candidate_block_size must be "
                     "positive when a candidate source is set");
  }
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<ModelConfig> parseModelConfig(const std::string &text,
                                             const std::string &source) {
  json root = json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    // Parse again with exceptions to recover the position of the error.
    try {
      (void)json::parse(text);
    } catch (const json::exception &e) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": not valid JSON: ", e.what()));
    }
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  }
  if (support::jsonDepth(root) > support::kMaxJsonDepth)
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": JSON nested deeper than ", support::kMaxJsonDepth, " levels"));
  if (!root.is_object())
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": a config is a JSON object, got ",
                     root.type_name()));
  ModelConfig config;
  config.source = source;
  config.layout = root.contains("text_config") ? ConfigLayout::HuggingFace
                                                : ConfigLayout::Flat;
  FieldReader reader(root, source, config.layout);
  CSA_RETURN_IF_ERROR(readFields(reader, config));
  // The flat inference config has no max_position_embeddings; the YaRN-
  // extended context is what the HF layout states (65536 x 16 = 1M).
  if (config.maxPositionEmbeddings == 0 && config.originalSeqLen > 0) {
    // (A factor past int64's range once multiplied is an error, not a wrap.)
    const double extended = double(config.originalSeqLen) * config.ropeFactor;
    if (!(extended < 0x1p62))
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": original_seq_len (", config.originalSeqLen, ") x rope_factor (",
          config.ropeFactor, ") is past 2^62 positions; give max_position_embeddings"));
    config.maxPositionEmbeddings = int64_t(extended);
  }
  CSA_RETURN_IF_ERROR(checkFields(reader, config));
  return config;
}

absl::StatusOr<ModelConfig> loadModelConfig(const std::string &location) {
  // A model folder as users receive it (config.json beside the shards and
  // the tokenizer) names its config.json.
  std::error_code ec;
  std::string path = location;
  if (std::filesystem::is_directory(location, ec)) {
    path = (std::filesystem::path(location) / "config.json").string();
    if (!std::filesystem::exists(path, ec))
      return absl::NotFoundError(absl::StrCat(
          location, ": a folder without config.json (give the model's folder or its config file)"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open config"));
  // Configs are a few KB; a larger file is not one (and /dev/zero never ends).
  constexpr size_t kMaxConfigBytes = size_t(16) << 20;
  std::string text;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    text.append(chunk, size_t(in.gcount()));
    if (text.size() > kMaxConfigBytes)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": larger than 16 MiB; not a model config"));
  }
  return parseModelConfig(text, path);
}

} // namespace csa

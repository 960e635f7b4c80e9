//===- Api.cpp - csa's C API over the runtime ------------------------------===//
//
// csa/csa.h implemented over runtime::Executor and runtime/sampling, the way
// csa-run drives them. Every entry point catches every exception and turns it
// into a status with the message kept per thread.
//
//===----------------------------------------------------------------------===//
#include "csa/csa.h"

#include "runtime/artifact/Artifact.h"
#include "runtime/artifact/Plan.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/executor/Executor.h"
#include "runtime/prefix/PrefixCache.h"
#include "runtime/sampling/Sampling.h"
#include "tools/support/RunSetup.h"
#include "tools/support/Version.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include <cmath>
#include <filesystem>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace csa;

thread_local std::string lastError;

csa_status toStatus(absl::StatusCode code) {
  switch (code) {
  case absl::StatusCode::kOk:
    return CSA_OK;
  case absl::StatusCode::kInvalidArgument:
    return CSA_ERROR_INVALID_ARGUMENT;
  case absl::StatusCode::kNotFound:
    return CSA_ERROR_NOT_FOUND;
  case absl::StatusCode::kOutOfRange:
    return CSA_ERROR_OUT_OF_RANGE;
  case absl::StatusCode::kFailedPrecondition:
    return CSA_ERROR_FAILED_PRECONDITION;
  case absl::StatusCode::kUnavailable:
    return CSA_ERROR_UNAVAILABLE;
  case absl::StatusCode::kResourceExhausted:
    return CSA_ERROR_RESOURCE_EXHAUSTED;
  case absl::StatusCode::kDataLoss:
    return CSA_ERROR_DATA_LOSS;
  default:
    return CSA_ERROR_INTERNAL;
  }
}

/// Runs `body` (returning absl::Status), records its message for
/// csa_last_error and returns its code; no exception gets out.
template <typename Body> csa_status guarded(Body &&body) noexcept {
  try {
    absl::Status st = body();
    lastError.assign(st.message().data(), st.message().size());
    return toStatus(st.code());
  } catch (const std::bad_alloc &) {
    lastError = "out of memory";
    return CSA_ERROR_RESOURCE_EXHAUSTED;
  } catch (const std::exception &e) {
    try {
      lastError = e.what();
    } catch (...) {
    }
    return CSA_ERROR_INTERNAL;
  } catch (...) {
    lastError = "an unknown exception";
    return CSA_ERROR_INTERNAL;
  }
}

absl::Status nullArgument(const char *function, const char *what) {
  return absl::InvalidArgumentError(absl::StrCat(function, ": ", what, " is NULL"));
}

/// What a model holds; shared by the model handle and its sequences, so
/// that either may be freed first.
struct ModelState {
  std::mutex mutex; ///< runs of the executor take turns
  std::string removeDir; ///< random weights' temporary directory
  std::optional<artifact::Artifact> artifact;
  std::optional<checkpoint::Checkpoint> checkpoint;
  std::unique_ptr<runtime::Executor> executor;
  std::string deviceNote;
  /// The executor's Engram token map (the prefix cache's fingerprint has it).
  std::vector<int64_t> engramTokenMap;

  ~ModelState() {
    // The executor refers to the checkpoint and the artifact.
    executor.reset();
    checkpoint.reset();
    artifact.reset();
    if (!removeDir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(removeDir, ec);
    }
  }
};

/// The caller's options, read up to the struct_size it was built with.
csa_model_options readOptions(const csa_model_options *given) {
  csa_model_options options;
  csa_model_options_init(&options);
  if (!given)
    return options;
  const size_t size = std::min<size_t>(given->struct_size, sizeof(options));
#define CSA_FIELD(f)                                                                   \
  if (offsetof(csa_model_options, f) + sizeof(options.f) <= size)                      \
    options.f = given->f;
  CSA_FIELD(device)
  CSA_FIELD(allow_unused_weights)
  CSA_FIELD(engram_token_map)
  CSA_FIELD(threads)
#undef CSA_FIELD
  return options;
}

absl::Status openModel(const char *function, const char *artifactDir, const char *weightsDir,
                       std::optional<uint64_t> seed, const csa_model_options *given,
                       csa_model **out);

} // namespace

struct csa_model {
  std::shared_ptr<ModelState> state;
};

struct csa_sequence {
  std::shared_ptr<ModelState> model;
  runtime::Sequence sequence;
};

struct csa_sampler {
  sampling::Sampler sampler;
};

struct csa_prefix_cache {
  std::shared_ptr<ModelState> model;
  std::unique_ptr<runtime::prefix::PrefixCache> cache;
};

namespace {

absl::Status openModel(const char *function, const char *artifactDir, const char *weightsDir,
                       std::optional<uint64_t> seed, const csa_model_options *given,
                       csa_model **out) {
  if (!out)
    return nullArgument(function, "the model pointer");
  *out = nullptr;
  if (!artifactDir)
    return nullArgument(function, "the artifact directory");
  if (!seed && !weightsDir)
    return nullArgument(function, "the weights directory");
  if (given && given->struct_size < sizeof(uint32_t))
    return absl::InvalidArgumentError(absl::StrCat(
        function, ": options.struct_size is ", given->struct_size,
        "; call csa_model_options_init first"));
  const csa_model_options options = readOptions(given);

  runtime::ExecutorOptions executorOptions = runtime::ExecutorOptions::fromEnvironment();
  switch (options.device) {
  case CSA_DEVICE_CPU:
    executorOptions.device = runtime::ExecutorOptions::Device::Cpu;
    break;
  case CSA_DEVICE_CUDA:
  case CSA_DEVICE_AUTO:
    executorOptions.device = options.device == CSA_DEVICE_CUDA
                                 ? runtime::ExecutorOptions::Device::Cuda
                                 : runtime::ExecutorOptions::Device::Auto;
    // Each sequence's caches stay on the GPU between its steps (csa-run's
    // choice); freeing or resetting a sequence frees them there.
    executorOptions.keepCachesOnDevice = true;
    break;
  default:
    return absl::InvalidArgumentError(absl::StrCat(
        function, ": device ", int(options.device),
        " is none of CSA_DEVICE_CPU, CSA_DEVICE_CUDA and CSA_DEVICE_AUTO"));
  }
  executorOptions.allowUnusedWeights = options.allow_unused_weights != 0;
  if (options.threads < 0 || options.threads > runtime::ExecutorOptions::kMaxThreads)
    return absl::InvalidArgumentError(absl::StrCat(
        function, ": threads is ", options.threads, "; 0 (every core) to ",
        runtime::ExecutorOptions::kMaxThreads));
  executorOptions.threads = options.threads;
  const std::string engramFlag = options.engram_token_map ? options.engram_token_map : "";
  if (options.engram_token_map && engramFlag.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": engram_token_map is empty (NULL: the checkpoint's)"));

  auto state = std::make_shared<ModelState>();
  auto art = artifact::Artifact::open(artifactDir);
  if (!art.ok())
    return art.status();
  state->artifact.emplace(std::move(*art));
  std::string weights = weightsDir ? weightsDir : "";
  if (seed) {
    auto dir = tools::makeRandomWeights(*state->artifact, *seed);
    if (!dir.ok())
      return dir.status();
    weights = *dir;
    state->removeDir = *dir;
  }
  auto ckpt = checkpoint::Checkpoint::open(weights);
  if (!ckpt.ok())
    return ckpt.status();
  state->checkpoint.emplace(std::move(*ckpt));
  {
    auto text = tools::loadRunTokenizer("", weights);
    if (!text.ok())
      return text.status();
    auto map = tools::runEngramTokenMap(*state->artifact, engramFlag,
                                        *text ? &**text : nullptr, weights);
    if (!map.ok())
      return map.status();
    if (*map)
      executorOptions.engramTokenMap = std::move((*map)->map);
    state->engramTokenMap = executorOptions.engramTokenMap;
  }
  auto executor =
      runtime::Executor::create(*state->artifact, *state->checkpoint, executorOptions);
  if (!executor.ok())
    return executor.status();
  state->executor = std::move(*executor);
  state->deviceNote = state->executor->deviceNote();
  *out = new csa_model{std::move(state)};
  return absl::OkStatus();
}

/// Copies `logits` into the caller's buffer (checked before the run).
void copyLogits(const std::vector<float> &logits, float *out, size_t capacity) {
  if (out)
    std::copy(logits.begin(), logits.begin() + std::min(logits.size(), capacity), out);
}

absl::Status checkBuffer(const char *function, const ModelState &model, const float *logits,
                         size_t capacity) {
  const int64_t vocab = model.executor->vocabSize();
  if (logits && capacity < size_t(vocab))
    return absl::InvalidArgumentError(absl::StrCat(function, ": the logits buffer holds ",
                                                   capacity, " floats, the vocabulary ",
                                                   vocab));
  return absl::OkStatus();
}

/// Brings a sequence's caches back from the GPU (and frees their device
/// copies) before it is dropped; nothing on the CPU.
void release(csa_sequence &s) {
  if (s.sequence.cachesHeldBy == 0)
    return;
  std::lock_guard<std::mutex> lock(s.model->mutex);
  (void)s.model->executor->syncToHost(s.sequence);
}

/// csa_sequence_prefill and csa_sequence_extend: the executor's call
/// `run` on the tokens (it checks the position, the ids and the context).
template <typename Run>
csa_status runTokens(const char *function, csa_sequence *sequence, const int32_t *tokens,
                     size_t count, float *logits, size_t capacity, Run run) {
  return guarded([&] {
    if (!sequence)
      return nullArgument(function, "the sequence");
    if (!tokens && count > 0)
      return nullArgument(function, "the token array");
    ModelState &model = *sequence->model;
    if (absl::Status st = checkBuffer(function, model, logits, capacity); !st.ok())
      return st;
    std::vector<int32_t> ids(tokens, tokens + count);
    std::lock_guard<std::mutex> lock(model.mutex);
    absl::StatusOr<std::vector<float>> out = run(*model.executor, sequence->sequence, ids);
    if (!out.ok())
      return out.status();
    copyLogits(*out, logits, capacity);
    return absl::OkStatus();
  });
}

/// csa_prefix_cache_restore and _save: the handles checked, the model's
/// lock held and the sequence's caches on the host while `run` runs.
template <typename Run>
csa_status withCacheAndSequence(const char *function, csa_prefix_cache *cache,
                                csa_sequence *sequence, Run run) {
  return guarded([&] {
    if (!cache)
      return nullArgument(function, "the cache");
    if (!sequence)
      return nullArgument(function, "the sequence");
    if (sequence->model != cache->model)
      return absl::InvalidArgumentError(
          absl::StrCat(function, ": the sequence belongs to another model than the cache"));
    ModelState &model = *cache->model;
    std::lock_guard<std::mutex> lock(model.mutex);
    if (absl::Status st = model.executor->syncToHost(sequence->sequence); !st.ok())
      return st;
    return run(*model.executor);
  });
}

} // namespace

extern "C" {

int csa_api_version(void) { return CSA_API_VERSION; }

const char *csa_version(void) {
  static const std::string line = [] {
    try {
      return absl::StrCat(tools::csaVersion(), " (commit ", tools::csaCommit(), ")");
    } catch (...) {
      return std::string();
    }
  }();
  return line.c_str();
}

const char *csa_last_error(void) { return lastError.c_str(); }

const char *csa_status_name(csa_status status) {
  switch (status) {
  case CSA_OK:
    return "CSA_OK";
  case CSA_ERROR_INVALID_ARGUMENT:
    return "CSA_ERROR_INVALID_ARGUMENT";
  case CSA_ERROR_NOT_FOUND:
    return "CSA_ERROR_NOT_FOUND";
  case CSA_ERROR_OUT_OF_RANGE:
    return "CSA_ERROR_OUT_OF_RANGE";
  case CSA_ERROR_FAILED_PRECONDITION:
    return "CSA_ERROR_FAILED_PRECONDITION";
  case CSA_ERROR_UNAVAILABLE:
    return "CSA_ERROR_UNAVAILABLE";
  case CSA_ERROR_RESOURCE_EXHAUSTED:
    return "CSA_ERROR_RESOURCE_EXHAUSTED";
  case CSA_ERROR_DATA_LOSS:
    return "CSA_ERROR_DATA_LOSS";
  case CSA_ERROR_INTERNAL:
    return "CSA_ERROR_INTERNAL";
  }
  return "CSA_ERROR_UNKNOWN";
}

void csa_model_options_init(csa_model_options *options) {
  if (!options)
    return;
  *options = csa_model_options{};
  options->struct_size = sizeof(csa_model_options);
  options->device = CSA_DEVICE_CPU;
  options->allow_unused_weights = 0;
  options->engram_token_map = nullptr;
  options->threads = 0;
}

csa_status csa_model_open(const char *artifact, const char *weights,
                          const csa_model_options *options, csa_model **model) {
  return guarded([&] {
    return openModel("csa_model_open", artifact, weights, std::nullopt, options, model);
  });
}

csa_status csa_model_open_random(const char *artifact, uint64_t seed,
                                 const csa_model_options *options, csa_model **model) {
  return guarded([&] {
    return openModel("csa_model_open_random", artifact, nullptr, seed, options, model);
  });
}

void csa_model_free(csa_model *model) {
  try {
    delete model;
  } catch (...) {
  }
}

int64_t csa_model_vocab_size(const csa_model *model) {
  return model ? model->state->executor->vocabSize() : 0;
}

int64_t csa_model_max_context(const csa_model *model) {
  return model ? model->state->executor->plan().maxContext : 0;
}

csa_device csa_model_device(const csa_model *model) {
  if (!model)
    return CSA_DEVICE_CPU;
  return model->state->executor->device() == runtime::ExecutorOptions::Device::Cuda
             ? CSA_DEVICE_CUDA
             : CSA_DEVICE_CPU;
}

const char *csa_model_device_note(const csa_model *model) {
  return model ? model->state->deviceNote.c_str() : "";
}

csa_status csa_model_check(csa_model *model) {
  return guarded([&] {
    if (!model)
      return nullArgument("csa_model_check", "the model");
    std::lock_guard<std::mutex> lock(model->state->mutex);
    return model->state->executor->checkDeviceStatuses();
  });
}

csa_status csa_sequence_new(csa_model *model, csa_sequence **sequence) {
  return guarded([&] {
    if (!sequence)
      return nullArgument("csa_sequence_new", "the sequence pointer");
    *sequence = nullptr;
    if (!model)
      return nullArgument("csa_sequence_new", "the model");
    auto made = std::make_unique<csa_sequence>();
    made->model = model->state;
    {
      std::lock_guard<std::mutex> lock(model->state->mutex);
      made->sequence = model->state->executor->newSequence();
    }
    *sequence = made.release();
    return absl::OkStatus();
  });
}

void csa_sequence_free(csa_sequence *sequence) {
  if (!sequence)
    return;
  try {
    release(*sequence);
  } catch (...) {
  }
  try {
    delete sequence;
  } catch (...) {
  }
}

csa_status csa_sequence_reset(csa_sequence *sequence) {
  return guarded([&] {
    if (!sequence)
      return nullArgument("csa_sequence_reset", "the sequence");
    release(*sequence);
    std::lock_guard<std::mutex> lock(sequence->model->mutex);
    sequence->sequence = sequence->model->executor->newSequence();
    return absl::OkStatus();
  });
}

int64_t csa_sequence_position(const csa_sequence *sequence) {
  return sequence ? sequence->sequence.position : 0;
}

uint64_t csa_sequence_cache_bytes(const csa_sequence *sequence) {
  try {
    return sequence ? sequence->sequence.cacheBytes() : 0;
  } catch (...) {
    return 0;
  }
}


csa_status csa_sequence_prefill(csa_sequence *sequence, const int32_t *tokens, size_t count,
                                float *logits, size_t capacity) {
  return runTokens("csa_sequence_prefill", sequence, tokens, count, logits, capacity,
                   [](runtime::Executor &ex, runtime::Sequence &seq,
                      const std::vector<int32_t> &ids) { return ex.prefill(seq, ids); });
}

csa_status csa_sequence_extend(csa_sequence *sequence, const int32_t *tokens, size_t count,
                               float *logits, size_t capacity) {
  return runTokens("csa_sequence_extend", sequence, tokens, count, logits, capacity,
                   [](runtime::Executor &ex, runtime::Sequence &seq,
                      const std::vector<int32_t> &ids) { return ex.extend(seq, ids); });
}

csa_status csa_prefix_cache_open(csa_model *model, const char *directory, uint64_t disk_bytes,
                                 double local_ttl_seconds, int persist_local,
                                 csa_prefix_cache **cache) {
  return guarded([&] {
    const char *function = "csa_prefix_cache_open";
    if (!model)
      return nullArgument(function, "the model");
    if (!cache)
      return nullArgument(function, "the output handle");
    *cache = nullptr;
    if (!(local_ttl_seconds < 1e9)) // NaN too
      return absl::InvalidArgumentError(
          absl::StrCat(function, ": local_ttl_seconds is not a number of seconds"));
    runtime::prefix::PrefixCacheOptions options;
    options.directory = directory ? directory : "";
    if (disk_bytes > 0)
      options.diskBytes = disk_bytes;
    if (local_ttl_seconds >= 0)
      options.localTtl = std::chrono::duration<double>(local_ttl_seconds);
    options.persistLocal = persist_local != 0;
    ModelState &state = *model->state;
    auto opened = runtime::prefix::PrefixCache::open(
        *state.artifact, runtime::prefix::weightsFingerprint(*state.checkpoint, state.engramTokenMap),
        options);
    if (!opened.ok())
      return opened.status();
    *cache = new csa_prefix_cache{model->state, std::move(*opened)};
    return absl::OkStatus();
  });
}

void csa_prefix_cache_free(csa_prefix_cache *cache) { delete cache; }

csa_status csa_prefix_cache_restore(csa_prefix_cache *cache, csa_sequence *sequence,
                                    const int32_t *tokens, size_t count, size_t *restored,
                                    csa_restore_case *kind) {
  const char *function = "csa_prefix_cache_restore";
  if (!tokens && count > 0)
    return guarded([&] { return nullArgument(function, "the token array"); });
  return withCacheAndSequence(function, cache, sequence, [&](runtime::Executor &ex) {
    auto r = cache->cache->restore(ex, std::vector<int32_t>(tokens, tokens + count));
    if (!r.ok())
      return r.status();
    sequence->sequence = std::move(r->sequence);
    if (restored)
      *restored = size_t(r->restoredTokens);
    if (kind)
      *kind = r->kind == runtime::prefix::RestoreCase::GlobalAndLocal ? CSA_RESTORE_GLOBAL_AND_LOCAL
              : r->kind == runtime::prefix::RestoreCase::GlobalOnly   ? CSA_RESTORE_GLOBAL_ONLY
                                                                      : CSA_RESTORE_COLD;
    return absl::OkStatus();
  });
}

csa_status csa_prefix_cache_save(csa_prefix_cache *cache, csa_sequence *sequence) {
  return withCacheAndSequence("csa_prefix_cache_save", cache, sequence,
                              [&](runtime::Executor &) { return cache->cache->save(sequence->sequence); });
}

csa_status csa_sequence_decode(csa_sequence *sequence, int32_t token, float *logits,
                               size_t capacity) {
  return guarded([&] {
    const char *function = "csa_sequence_decode";
    if (!sequence)
      return nullArgument(function, "the sequence");
    ModelState &model = *sequence->model;
    if (absl::Status st = checkBuffer(function, model, logits, capacity); !st.ok())
      return st;
    std::lock_guard<std::mutex> lock(model.mutex);
    auto out = model.executor->decode(sequence->sequence, token);
    if (!out.ok())
      return out.status();
    copyLogits(*out, logits, capacity);
    return absl::OkStatus();
  });
}

namespace {
/// The executor's sequences of a batch call, checked (count, NULLs, one
/// model), and their model.
absl::StatusOr<std::pair<ModelState *, std::vector<runtime::Sequence *>>>
batchOf(const char *function, csa_sequence *const *sequences, const int32_t *tokens,
        size_t count) {
  if (count == 0)
    return absl::InvalidArgumentError(absl::StrCat(function, ": no sequences (count 0)"));
  if (!sequences)
    return nullArgument(function, "the sequences");
  if (!tokens)
    return nullArgument(function, "the tokens");
  std::vector<runtime::Sequence *> batch;
  for (size_t i = 0; i < count; ++i) {
    if (!sequences[i])
      return absl::InvalidArgumentError(absl::StrCat(function, ": sequence ", i, " is NULL"));
    if (sequences[i]->model != sequences[0]->model)
      return absl::InvalidArgumentError(absl::StrCat(
          function, ": sequence ", i, " is of another model than sequence 0"));
    batch.push_back(&sequences[i]->sequence);
  }
  return std::make_pair(sequences[0]->model.get(), std::move(batch));
}
} // namespace

csa_status csa_sequences_decode(csa_sequence *const *sequences, const int32_t *tokens,
                                size_t count, float *logits, size_t capacity) {
  return guarded([&] {
    const char *function = "csa_sequences_decode";
    auto batch = batchOf(function, sequences, tokens, count);
    if (!batch.ok())
      return batch.status();
    ModelState &model = *batch->first;
    const uint64_t vocab = uint64_t(model.executor->vocabSize());
    if (logits && capacity / count < vocab)
      return absl::InvalidArgumentError(absl::StrCat(
          function, ": the logits buffer holds ", capacity, " floats, ", count,
          " sequences x the vocabulary ", vocab, " are ", uint64_t(count) * vocab));
    std::lock_guard<std::mutex> lock(model.mutex);
    auto out = model.executor->decodeBatch(batch->second,
                                           std::vector<int32_t>(tokens, tokens + count));
    if (!out.ok())
      return out.status();
    copyLogits(*out, logits, capacity);
    return absl::OkStatus();
  });
}

csa_status csa_sequences_decode_greedy(csa_sequence *const *sequences, const int32_t *tokens,
                                       size_t count, int32_t *next) {
  return guarded([&] {
    const char *function = "csa_sequences_decode_greedy";
    auto batch = batchOf(function, sequences, tokens, count);
    if (!batch.ok())
      return batch.status();
    if (!next)
      return nullArgument(function, "the next-token buffer");
    ModelState &model = *batch->first;
    std::lock_guard<std::mutex> lock(model.mutex);
    auto out = model.executor->decodeGreedy(batch->second,
                                            std::vector<int32_t>(tokens, tokens + count));
    if (!out.ok())
      return out.status();
    std::copy(out->begin(), out->end(), next);
    return absl::OkStatus();
  });
}

csa_status csa_sampler_new(float temperature, float top_p, uint64_t seed,
                           csa_sampler **sampler) {
  return guarded([&] {
    if (!sampler)
      return nullArgument("csa_sampler_new", "the sampler pointer");
    *sampler = nullptr;
    if (!std::isfinite(temperature) || temperature < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "csa_sampler_new: temperature ", temperature, " is not a finite number >= 0"));
    if (!std::isfinite(top_p) || !(top_p > 0) || top_p > 1)
      return absl::InvalidArgumentError(
          absl::StrCat("csa_sampler_new: top_p ", top_p, " is not in (0, 1]"));
    sampling::SamplingParams params;
    params.temperature = temperature;
    params.topP = top_p;
    *sampler = new csa_sampler{sampling::Sampler(params, seed)};
    return absl::OkStatus();
  });
}

void csa_sampler_free(csa_sampler *sampler) { delete sampler; }

csa_status csa_sampler_next(csa_sampler *sampler, const float *logits, size_t count,
                            int32_t *token) {
  return guarded([&] {
    if (!sampler)
      return nullArgument("csa_sampler_next", "the sampler");
    if (!token)
      return nullArgument("csa_sampler_next", "the token pointer");
    if (!logits && count > 0)
      return nullArgument("csa_sampler_next", "the logits");
    auto next = sampler->sampler.next(absl::MakeConstSpan(logits, count));
    if (!next.ok())
      return next.status();
    *token = *next;
    return absl::OkStatus();
  });
}

csa_status csa_greedy(const float *logits, size_t count, int32_t *token) {
  return guarded([&] {
    if (!token)
      return nullArgument("csa_greedy", "the token pointer");
    if (!logits && count > 0)
      return nullArgument("csa_greedy", "the logits");
    auto next = sampling::greedyToken(absl::MakeConstSpan(logits, count));
    if (!next.ok())
      return next.status();
    *token = *next;
    return absl::OkStatus();
  });
}

} // extern "C"

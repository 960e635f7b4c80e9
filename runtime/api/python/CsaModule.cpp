//===- CsaModule.cpp - The Python module csa over the C API ---------------===//
//
//   import csa
//   model = csa.Model("tiny.csa", random_weights=7)        # or weights="CKPT_DIR"
//   seq = model.new_sequence()
//   logits = seq.prefill([1, 2, 3])                       # numpy float32 [vocab]
//   token = csa.greedy(logits); logits = seq.decode(token)
//   model.generate([1, 2, 3], max_new_tokens=8, temperature=0.8, top_p=0.9, seed=5)
//
// Everything goes through csa/csa.h; a status other than CSA_OK is raised as
// csa.Error (a RuntimeError) with the C API's message and .status, its name
// ("CSA_ERROR_NOT_FOUND"). The GIL is released while a model opens or runs.
//
//===----------------------------------------------------------------------===//
#include "csa/csa.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

/// A failed call: its status and csa_last_error() at the time.
struct CsaError {
  csa_status status;
  std::string message;
};

void check(csa_status status) {
  if (status != CSA_OK)
    throw CsaError{status, csa_last_error()};
}

py::array_t<float> newLogits(int64_t vocab) { return py::array_t<float>(vocab); }

class Sequence {
public:
  explicit Sequence(csa_sequence *s, int64_t vocab) : s_(s), vocab_(vocab) {}
  Sequence(const Sequence &) = delete;
  Sequence &operator=(const Sequence &) = delete;
  ~Sequence() { csa_sequence_free(s_); }

  py::array_t<float> prefill(const std::vector<int32_t> &tokens) {
    return runTokens(csa_sequence_prefill, tokens);
  }
  py::array_t<float> extend(const std::vector<int32_t> &tokens) {
    return runTokens(csa_sequence_extend, tokens);
  }
  py::array_t<float> decode(int32_t token) {
    py::array_t<float> logits = newLogits(vocab_);
    float *out = logits.mutable_data();
    csa_status st;
    {
      py::gil_scoped_release release;
      st = csa_sequence_decode(s_, token, out, size_t(vocab_));
    }
    check(st);
    return logits;
  }
  void reset() { check(csa_sequence_reset(s_)); }
  int64_t position() const { return csa_sequence_position(s_); }
  csa_sequence *handle() const { return s_; }
  int64_t vocab() const { return vocab_; }
  uint64_t cacheBytes() const { return csa_sequence_cache_bytes(s_); }

private:
  using TokensCall = csa_status (*)(csa_sequence *, const int32_t *, size_t, float *, size_t);
  /// csa_sequence_prefill or csa_sequence_extend, the GIL released.
  py::array_t<float> runTokens(TokensCall call, const std::vector<int32_t> &tokens) {
    py::array_t<float> logits = newLogits(vocab_);
    float *out = logits.mutable_data();
    csa_status st;
    {
      py::gil_scoped_release release;
      st = call(s_, tokens.data(), tokens.size(), out, size_t(vocab_));
    }
    check(st);
    return logits;
  }

  csa_sequence *s_;
  int64_t vocab_;
};

class Sampler {
public:
  Sampler(float temperature, float topP, uint64_t seed) {
    check(csa_sampler_new(temperature, topP, seed, &s_));
  }
  Sampler(const Sampler &) = delete;
  Sampler &operator=(const Sampler &) = delete;
  ~Sampler() { csa_sampler_free(s_); }
  int32_t sample(py::array_t<float, py::array::c_style | py::array::forcecast> logits) {
    int32_t token = 0;
    check(next(logits.data(), size_t(logits.size()), token));
    return token;
  }
  /// Without the GIL.
  csa_status next(const float *logits, size_t count, int32_t &token) {
    return csa_sampler_next(s_, logits, count, &token);
  }

private:
  csa_sampler *s_ = nullptr;
};

csa_device parseDevice(const std::string &device) {
  if (device == "cpu")
    return CSA_DEVICE_CPU;
  if (device == "cuda")
    return CSA_DEVICE_CUDA;
  if (device == "auto")
    return CSA_DEVICE_AUTO;
  throw py::value_error("device is 'cpu', 'cuda' or 'auto', got '" + device + "'");
}

class Model {
public:
  Model(const std::string &artifact, std::optional<std::string> weights,
        std::optional<uint64_t> randomWeights, const std::string &device,
        bool allowUnusedWeights, std::optional<std::string> engramTokenMap,
        int32_t threads) {
    if (weights.has_value() == randomWeights.has_value())
      throw py::value_error("give exactly one of weights=CKPT_DIR and random_weights=SEED");
    csa_model_options options;
    csa_model_options_init(&options);
    options.device = parseDevice(device);
    options.allow_unused_weights = allowUnusedWeights;
    options.engram_token_map = engramTokenMap ? engramTokenMap->c_str() : nullptr;
    options.threads = threads;
    csa_status st;
    {
      py::gil_scoped_release release;
      st = weights ? csa_model_open(artifact.c_str(), weights->c_str(), &options, &m_)
                   : csa_model_open_random(artifact.c_str(), *randomWeights, &options, &m_);
    }
    check(st);
  }
  Model(const Model &) = delete;
  Model &operator=(const Model &) = delete;
  ~Model() { csa_model_free(m_); }

  int64_t vocabSize() const { return csa_model_vocab_size(m_); }
  int64_t maxContext() const { return csa_model_max_context(m_); }
  std::string device() const {
    return csa_model_device(m_) == CSA_DEVICE_CUDA ? "cuda" : "cpu";
  }
  std::string deviceNote() const { return csa_model_device_note(m_); }
  void checkDevice() { check(csa_model_check(m_)); }

  std::unique_ptr<Sequence> newSequence() {
    csa_sequence *s = nullptr;
    check(csa_sequence_new(m_, &s));
    return std::make_unique<Sequence>(s, vocabSize());
  }

  /// csa-run's loop: prefill, then each new token sampled and fed back;
  /// `maxNew` tokens (maxNew - 1 decode steps).
  std::vector<int32_t> generate(const std::vector<int32_t> &prompt, int64_t maxNew,
                                float temperature, float topP, uint64_t seed) {
    if (maxNew < 0)
      throw py::value_error("max_new_tokens must be >= 0");
    Sampler sampler(temperature, topP, seed);
    std::vector<int32_t> out;
    std::vector<float> logits(static_cast<size_t>(vocabSize()));
    csa_sequence *s = nullptr;
    check(csa_sequence_new(m_, &s));
    struct Free {
      csa_sequence *s;
      ~Free() { csa_sequence_free(s); }
    } freeIt{s};
    csa_status st;
    {
      py::gil_scoped_release release;
      st = csa_sequence_prefill(s, prompt.data(), prompt.size(), logits.data(), logits.size());
      for (int64_t i = 0; st == CSA_OK && i < maxNew; ++i) {
        int32_t token = 0;
        st = sampler.next(logits.data(), logits.size(), token);
        if (st != CSA_OK)
          break;
        out.push_back(token);
        if (i + 1 < maxNew) // the last token needs no forward
          st = csa_sequence_decode(s, token, logits.data(), logits.size());
      }
      if (st == CSA_OK)
        st = csa_model_check(m_);
    }
    check(st);
    return out;
  }

  csa_model *handle() const { return m_; }

private:
  csa_model *m_ = nullptr;
};

/// csa_prefix_cache: restore a conversation's history into a sequence, save
/// a sequence after a turn.
class PrefixCache {
public:
  PrefixCache(Model &model, std::optional<std::string> directory, uint64_t diskBytes,
              double localTtlSeconds, bool persistLocal) {
    check(csa_prefix_cache_open(model.handle(), directory ? directory->c_str() : nullptr,
                                diskBytes, localTtlSeconds, persistLocal ? 1 : 0, &c_));
  }
  PrefixCache(const PrefixCache &) = delete;
  PrefixCache &operator=(const PrefixCache &) = delete;
  ~PrefixCache() { csa_prefix_cache_free(c_); }

  std::pair<int64_t, std::string> restore(Sequence &sequence, const std::vector<int32_t> &tokens) {
    size_t restored = 0;
    csa_restore_case kind = CSA_RESTORE_COLD;
    csa_status st;
    {
      py::gil_scoped_release release;
      st = csa_prefix_cache_restore(c_, sequence.handle(), tokens.data(), tokens.size(),
                                    &restored, &kind);
    }
    check(st);
    return {int64_t(restored), kind == CSA_RESTORE_GLOBAL_AND_LOCAL ? "global+local"
                               : kind == CSA_RESTORE_GLOBAL_ONLY    ? "global-only"
                                                                    : "cold"};
  }
  void save(Sequence &sequence) {
    csa_status st;
    {
      py::gil_scoped_release release;
      st = csa_prefix_cache_save(c_, sequence.handle());
    }
    check(st);
  }

private:
  csa_prefix_cache *c_ = nullptr;
};

} // namespace

PYBIND11_MODULE(csa, m) {
  m.doc() = "csa: run a compiled csa artifact (the C API of csa/csa.h; "
            "docs/embedding.md)";
  static py::exception<CsaError> error(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const CsaError &e) {
      py::object type = py::reinterpret_borrow<py::object>(error.ptr());
      py::object instance = type(e.message);
      instance.attr("status") = csa_status_name(e.status);
      PyErr_SetObject(error.ptr(), instance.ptr());
    }
  });
  m.attr("API_VERSION") = csa_api_version();
  m.def("version", [] { return std::string(csa_version()); },
        "csa's version and the commit it was built from");

  py::class_<Sequence>(m, "Sequence",
                       "One sequence's caches (Model.new_sequence()).")
      .def("prefill", &Sequence::prefill, py::arg("tokens"),
           "Runs the prompt at position 0; returns its last token's logits "
           "(numpy float32 [vocab_size]).")
      .def("extend", &Sequence::extend, py::arg("tokens"),
           "Runs tokens after the sequence's last position (a chunk of a "
           "prompt, a new turn); returns the last one's logits.")
      .def("decode", &Sequence::decode, py::arg("token"),
           "Runs one token after the prefill; returns its logits.")
      .def("reset", &Sequence::reset, "Back to position 0 with empty caches.")
      .def_property_readonly("position", &Sequence::position,
                             "Tokens the sequence holds.")
      .def_property_readonly("cache_bytes", &Sequence::cacheBytes,
                             "Bytes its caches hold.");

  py::class_<Sampler>(m, "Sampler",
                      "Greedy (temperature 0) or temperature + top-p sampling "
                      "with a seeded generator (csa-run's).")
      .def(py::init<float, float, uint64_t>(), py::arg("temperature") = 0.0f,
           py::arg("top_p") = 1.0f, py::arg("seed") = 0)
      .def("sample", &Sampler::sample, py::arg("logits"),
           "The next token id for the logits.");

  // The C handles of a batch call's sequences, one token each, none None.
  auto handlesOf = [](const char *function, const std::vector<Sequence *> &sequences,
                      const std::vector<int32_t> &tokens) {
    if (sequences.size() != tokens.size())
      throw CsaError{CSA_ERROR_INVALID_ARGUMENT,
                     std::string(function) + ": " + std::to_string(sequences.size()) +
                         " sequences but " + std::to_string(tokens.size()) + " tokens"};
    std::vector<csa_sequence *> handles;
    for (Sequence *s : sequences) {
      if (!s)
        throw CsaError{CSA_ERROR_INVALID_ARGUMENT, std::string(function) + ": a sequence is None"};
      handles.push_back(s->handle());
    }
    return handles;
  };
  m.def(
      "decode_batch",
      [handlesOf](const std::vector<Sequence *> &sequences, const std::vector<int32_t> &tokens) {
        const std::vector<csa_sequence *> handles = handlesOf("decode_batch", sequences, tokens);
        const int64_t vocab = sequences.empty() ? 0 : sequences[0]->vocab();
        py::array_t<float> logits({int64_t(sequences.size()), vocab});
        float *out = logits.mutable_data();
        csa_status st;
        {
          py::gil_scoped_release release;
          st = csa_sequences_decode(handles.data(), tokens.data(), handles.size(), out,
                                    handles.size() * size_t(vocab));
        }
        check(st);
        return logits;
      },
      py::arg("sequences"), py::arg("tokens"),
      "One decode step of several sequences of one model (tokens[i] for "
      "sequences[i]), the weights read once for all; returns the logits "
      "(numpy float32 [len(sequences), vocab_size]).");

  m.def(
      "decode_greedy",
      [handlesOf](const std::vector<Sequence *> &sequences, const std::vector<int32_t> &tokens) {
        const std::vector<csa_sequence *> handles = handlesOf("decode_greedy", sequences, tokens);
        std::vector<int32_t> next(handles.size());
        csa_status st;
        {
          py::gil_scoped_release release;
          st = csa_sequences_decode_greedy(handles.data(), tokens.data(), handles.size(),
                                           next.data());
        }
        check(st);
        return next;
      },
      py::arg("sequences"), py::arg("tokens"),
      "decode_batch for a caller that samples greedily: each sequence's next "
      "token (greedy of its logits), picked where the logits are (on a GPU "
      "only the ids come back).");

  m.def(
      "greedy",
      [](py::array_t<float, py::array::c_style | py::array::forcecast> logits) {
        int32_t token = 0;
        check(csa_greedy(logits.data(), size_t(logits.size()), &token));
        return token;
      },
      py::arg("logits"), "The lowest id among the largest logits.");

  py::class_<Model>(m, "Model",
                    "An artifact (csa-compile --emit=artifact) bound to a "
                    "checkpoint directory or to random weights from a seed.")
      .def(py::init<const std::string &, std::optional<std::string>,
                    std::optional<uint64_t>, const std::string &, bool,
                    std::optional<std::string>, int32_t>(),
           py::arg("artifact"), py::arg("weights") = py::none(),
           py::arg("random_weights") = py::none(), py::arg("device") = "cpu",
           py::arg("allow_unused_weights") = false,
           py::arg("engram_token_map") = py::none(), py::arg("threads") = 0)
      .def_property_readonly("vocab_size", &Model::vocabSize)
      .def_property_readonly("max_context", &Model::maxContext)
      .def_property_readonly("device", &Model::device, "'cpu' or 'cuda'")
      .def_property_readonly("device_note", &Model::deviceNote,
                             "device='auto' on the CPU: why")
      .def("check", &Model::checkDevice,
           "On CUDA: reads the GPU launches' pending statuses (call when a "
           "generation ends).")
      .def("new_sequence", &Model::newSequence)
      .def("generate", &Model::generate, py::arg("prompt"),
           py::arg("max_new_tokens") = 16, py::arg("temperature") = 0.0f,
           py::arg("top_p") = 1.0f, py::arg("seed") = 0,
           "Prefills the prompt and returns max_new_tokens sampled ids, each "
           "fed back (csa-run's tokens for the same flags).");

  py::class_<PrefixCache>(m, "PrefixCache",
                          "An agent loop's prefix cache (docs/prefix-cache.md): global "
                          "KV blocks in memory and in `directory`, local state in memory "
                          "for local_ttl_seconds.")
      .def(py::init<Model &, std::optional<std::string>, uint64_t, double, bool>(),
           py::arg("model"), py::arg("directory") = py::none(), py::arg("disk_bytes") = 0,
           py::arg("local_ttl_seconds") = -1.0, py::arg("persist_local") = false,
           py::keep_alive<1, 2>())
      .def("restore", &PrefixCache::restore, py::arg("sequence"), py::arg("tokens"),
           "Makes the sequence the longest stored prefix of tokens; returns (tokens "
           "restored, 'cold' | 'global+local' | 'global-only'). Run the rest with "
           "prefill (0 restored) or extend.")
      .def("save", &PrefixCache::save, py::arg("sequence"),
           "Stores the sequence's global blocks and local state.");
}

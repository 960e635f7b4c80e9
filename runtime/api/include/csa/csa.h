/*===- csa/csa.h - csa's C API -------------------------------------*- C -*-===//
 *
 * Runs a compiled csa artifact from another program: open a model (an
 * artifact directory written by `csa-compile --emit=artifact` plus a
 * checkpoint directory, or random weights from a seed), make sequences,
 * prefill a prompt, decode one token at a time, read the logits and sample
 * the next token. Installed as <csa/csa.h> with libcsa.so; CMake:
 * find_package(csa) and target_link_libraries(app PRIVATE csa::csa).
 * docs/embedding.md has examples.
 *
 * Conventions:
 *  - Functions that can fail return a csa_status: CSA_OK (0) or an error
 *    code. The message of the last call on the calling thread that returned
 *    a status is csa_last_error() ("" after a success). No C++ exception
 *    crosses this interface.
 *  - Handles are opaque. Each *_new / *_open has a *_free; a free of NULL does
 *    nothing. Output handles are set only on success (NULL otherwise).
 *  - Logits are float32, one per token of the vocabulary
 *    (csa_model_vocab_size); the caller owns every buffer it passes.
 *  - A model and its sequences may be used from several threads: runs of one
 *    model take turns (a lock per model). A sequence or a sampler is used by
 *    one thread at a time.
 *  - Plain C99; the library itself is C++17 over csa's runtime (no LLVM).
 *
 *===----------------------------------------------------------------------===*/
#ifndef CSA_CSA_H
#define CSA_CSA_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define CSA_API __attribute__((visibility("default")))
#else
#define CSA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this interface; csa_api_version() returns the library's. */
#define CSA_API_VERSION 1

/* What a call returned. The codes follow the runtime's error kinds. */
typedef enum csa_status {
  CSA_OK = 0,
  /* A bad argument: a NULL handle or pointer, a token id outside the
   * vocabulary, a logits buffer smaller than the vocabulary, a temperature
   * or top_p out of range, an empty prompt. */
  CSA_ERROR_INVALID_ARGUMENT = 1,
  /* A file or directory that is not there (the artifact, the checkpoint, a
   * tensor the artifact needs). */
  CSA_ERROR_NOT_FOUND = 2,
  /* A context longer than the artifact was compiled for (max_context). */
  CSA_ERROR_OUT_OF_RANGE = 3,
  /* A call out of order: a second prefill of a sequence, a decode before
   * its prefill. */
  CSA_ERROR_FAILED_PRECONDITION = 4,
  /* The device asked for is not there (CSA_DEVICE_CUDA without a driver or
   * without PTX in the artifact). */
  CSA_ERROR_UNAVAILABLE = 5,
  /* Out of memory (host or device). */
  CSA_ERROR_RESOURCE_EXHAUSTED = 6,
  /* A file that is damaged (a checksum, a truncated tensor). */
  CSA_ERROR_DATA_LOSS = 7,
  /* Anything else. */
  CSA_ERROR_INTERNAL = 8
} csa_status;

/* Where a model's kernels run. */
typedef enum csa_device {
  CSA_DEVICE_CPU = 0,  /* the artifact's host kernels */
  CSA_DEVICE_CUDA = 1, /* its PTX (csa-compile --with-ptx) on an NVIDIA GPU */
  CSA_DEVICE_AUTO = 2  /* CUDA when there is a driver and PTX, else the CPU */
} csa_device;

typedef struct csa_model csa_model;       /* an artifact bound to weights */
typedef struct csa_sequence csa_sequence; /* one sequence's caches */
typedef struct csa_sampler csa_sampler;   /* sampling parameters + generator */

/* --- Library ------------------------------------------------------------ */

/* CSA_API_VERSION of the library loaded. */
CSA_API int csa_api_version(void);
/* "0.1.0 (commit 83381c2)": csa's version and the commit it was built from.
 * A static string. */
CSA_API const char *csa_version(void);
/* The message of the last call on this thread that returned a csa_status:
 * "" after CSA_OK. Owned by the library; valid until the next call into
 * the library on this thread. Never NULL. */
CSA_API const char *csa_last_error(void);
/* "CSA_OK", "CSA_ERROR_NOT_FOUND", ...; "CSA_ERROR_UNKNOWN" for a value that
 * is no csa_status. A static string. */
CSA_API const char *csa_status_name(csa_status status);

/* --- Models ------------------------------------------------------------- */

/* How a model is opened. Call csa_model_options_init first: it sets
 * struct_size and the defaults, so that a later library with more fields
 * reads only the ones this header has. */
typedef struct csa_model_options {
  uint32_t struct_size;     /* sizeof(csa_model_options), set by init */
  csa_device device;        /* default CSA_DEVICE_CPU */
  /* Non-zero: a checkpoint with tensors the artifact does not use (another
   * schedule's) is accepted; they are skipped. Default 0: refused. */
  int allow_unused_weights;
  /* The Engram layers' token map, as csa-run --engram-token-map: a JSON file
   * or "modulo". NULL (default): the checkpoint's (its tokenizer.json, or the
   * engram_token_map.json a random checkpoint carries). Copied by open. */
  const char *engram_token_map;
  /* The CPU path's worker threads, as csa-run --threads: 0 (default) every
   * core this process may use, else 1 to 1024. The logits are the same bits
   * for every count. */
  int32_t threads;
} csa_model_options;

/* Sets *options to the defaults. */
CSA_API void csa_model_options_init(csa_model_options *options);

/* Opens the artifact directory `artifact` and binds the checkpoint directory
 * `weights` (safetensors, as csa-run --weights). `options` may be NULL (the
 * defaults). On success *model is a new model (free it with
 * csa_model_free); on failure it is NULL and the message names the path or
 * tensor at fault. The checkpoint is memory-mapped and must not be modified
 * while the model is open (a truncated file ends the process with a message,
 * docs/files.md). The CSA_CUDA_* environment variables of csa-run apply. */
CSA_API csa_status csa_model_open(const char *artifact, const char *weights,
                                  const csa_model_options *options,
                                  csa_model **model);

/* As csa_model_open, with random weights for the artifact's config
 * (config.json of the artifact) made from `seed`, the same as
 * `csa-run --random-weights=SEED`. They are written to a fresh directory
 * under $TMPDIR, which csa_model_free removes. */
CSA_API csa_status csa_model_open_random(const char *artifact, uint64_t seed,
                                         const csa_model_options *options,
                                         csa_model **model);

/* Frees the model. Sequences made from it stay usable: the model's memory
 * goes with the last of them. NULL: nothing. */
CSA_API void csa_model_free(csa_model *model);

/* Token ids run from 0 to csa_model_vocab_size() - 1; every logits buffer
 * holds this many floats. 0 for NULL. */
CSA_API int64_t csa_model_vocab_size(const csa_model *model);
/* The most tokens a sequence may hold (the artifact's max_context): prompt
 * plus decoded tokens. 0 for NULL. */
CSA_API int64_t csa_model_max_context(const csa_model *model);
/* Where the model runs (CSA_DEVICE_AUTO resolved to CPU or CUDA). */
CSA_API csa_device csa_model_device(const csa_model *model);
/* CSA_DEVICE_AUTO that runs on the CPU: why ("no NVIDIA driver: ...");
 * "" otherwise. Owned by the model. */
CSA_API const char *csa_model_device_note(const csa_model *model);
/* On CUDA: reads the statuses of the GPU's launches that decode steps have
 * not read yet (each says whether the cache stores stayed in bounds); call it
 * when a generation ends. CSA_OK on the CPU. */
CSA_API csa_status csa_model_check(csa_model *model);

/* --- Sequences ---------------------------------------------------------- */

/* A fresh sequence of `model` (position 0, empty caches). It keeps the
 * model's memory alive; free it with csa_sequence_free. */
CSA_API csa_status csa_sequence_new(csa_model *model, csa_sequence **sequence);
/* Frees the sequence and its caches (on the GPU too). NULL: nothing. */
CSA_API void csa_sequence_free(csa_sequence *sequence);
/* Empties the caches and returns the sequence to position 0, for a new
 * prompt. Also the way on after an error from prefill or decode. */
CSA_API csa_status csa_sequence_reset(csa_sequence *sequence);
/* Tokens the sequence holds (its next token's position). 0 for NULL. */
CSA_API int64_t csa_sequence_position(const csa_sequence *sequence);
/* Bytes its caches hold (the global caches grow by doubling). 0 for NULL. */
CSA_API uint64_t csa_sequence_cache_bytes(const csa_sequence *sequence);

/* Runs the prompt tokens[0..count) at position 0 (once per sequence; reset
 * to run another) and writes the logits of its last token to
 * logits[0..vocab_size). `logits` may be NULL (capacity 0) when they are
 * not wanted; otherwise capacity must be at least the vocabulary size.
 * Errors: INVALID_ARGUMENT (count 0, an id outside the vocabulary, a
 * buffer too small), FAILED_PRECONDITION (not at position 0),
 * OUT_OF_RANGE (longer than max_context). */
CSA_API csa_status csa_sequence_prefill(csa_sequence *sequence,
                                        const int32_t *tokens, size_t count,
                                        float *logits, size_t capacity);
/* Runs tokens[0..count) after the sequence's last position (a chunk of a
 * long prompt, a new turn of a conversation) and writes the logits of the
 * last as csa_sequence_prefill does. Errors: INVALID_ARGUMENT,
 * FAILED_PRECONDITION (no prefill yet), OUT_OF_RANGE (past max_context);
 * after another error, reset the sequence. */
CSA_API csa_status csa_sequence_extend(csa_sequence *sequence,
                                       const int32_t *tokens, size_t count,
                                       float *logits, size_t capacity);
/* Runs one token at the sequence's position (after its prefill) and writes
 * its logits as csa_sequence_prefill does. Errors: INVALID_ARGUMENT,
 * FAILED_PRECONDITION (no prefill yet), OUT_OF_RANGE (past max_context). */
CSA_API csa_status csa_sequence_decode(csa_sequence *sequence, int32_t token,
                                       float *logits, size_t capacity);
/* One decode step of `count` sequences of one model at once: tokens[i] at
 * sequences[i]'s position. The weights are read once for all of them (the
 * steps that read no sequence state run on a row a sequence), so a batch
 * step costs far less than `count` single steps. Writes the logits
 * [count, vocab_size], row i sequence i's, when `logits` is not NULL
 * (capacity at least count x vocab_size). On the CPU each row equals
 * csa_sequence_decode of its sequence bit for bit. Errors: INVALID_ARGUMENT
 * (count 0, a NULL or repeated sequence, sequences of other models, an id
 * outside the vocabulary, a buffer too small), FAILED_PRECONDITION (a
 * sequence without a prefill; the model dumps decisions), OUT_OF_RANGE (past
 * max_context); the message names the sequence by its index. After an
 * error other than these, reset the sequences. */
CSA_API csa_status csa_sequences_decode(csa_sequence *const *sequences,
                                        const int32_t *tokens, size_t count,
                                        float *logits, size_t capacity);
/* csa_sequences_decode (count 1: csa_sequence_decode) for a caller that
 * samples greedily: writes next[i], csa_greedy of sequence i's logits, to
 * `next` (count ids). On a GPU the model's greedy kernel picks where the
 * logits are and only the ids come back. The same errors as
 * csa_sequences_decode, and csa_greedy's (INVALID_ARGUMENT naming the logit)
 * where a row's logits are NaN, +inf or all -inf; then the sequences have
 * not advanced. */
CSA_API csa_status csa_sequences_decode_greedy(csa_sequence *const *sequences,
                                               const int32_t *tokens, size_t count,
                                               int32_t *next);

/* --- Prefix cache ------------------------------------------------------- */

/* An agent loop's cache of conversation prefixes (docs/prefix-cache.md):
 * the global KV of every block of tokens in memory and in a directory, each
 * sequence's local state in memory for a while after it is saved. */
typedef struct csa_prefix_cache csa_prefix_cache;

/* Which stored state a restore found. */
typedef enum csa_restore_case {
  CSA_RESTORE_COLD = 0,             /* nothing: run the tokens from position 0 */
  CSA_RESTORE_GLOBAL_AND_LOCAL = 1, /* the saved sequence, exactly */
  CSA_RESTORE_GLOBAL_ONLY = 2,      /* global KV; local state rebuilt by replay */
} csa_restore_case;

/* Opens a cache for `model`'s artifact (model hash, schedule hash) in
 * `directory` (created if missing; NULL or "": host memory only).
 * disk_bytes: the directory's budget (0: 16 GiB); local_ttl_seconds: how
 * long a saved sequence's local state stays in memory (< 0: 600);
 * persist_local != 0 writes the local state to the directory too. It keeps
 * the model's memory alive; free it with csa_prefix_cache_free.
 * Errors: INVALID_ARGUMENT, FAILED_PRECONDITION (a directory that cannot be
 * made). */
CSA_API csa_status csa_prefix_cache_open(csa_model *model, const char *directory,
                                         uint64_t disk_bytes, double local_ttl_seconds,
                                         int persist_local, csa_prefix_cache **cache);
/* NULL: nothing. */
CSA_API void csa_prefix_cache_free(csa_prefix_cache *cache);
/* Makes `sequence` (of the cache's model; whatever it held is dropped) the
 * longest stored prefix of tokens[0..count), leaving at least one token to
 * run; a global-only hit replays the tokens before the last block boundary
 * first. *restored: the tokens the sequence now holds; *kind: the case
 * (either pointer may be NULL). Run tokens[*restored..count) next, with
 * csa_sequence_prefill when *restored is 0, else csa_sequence_extend. */
CSA_API csa_status csa_prefix_cache_restore(csa_prefix_cache *cache, csa_sequence *sequence,
                                            const int32_t *tokens, size_t count,
                                            size_t *restored, csa_restore_case *kind);
/* Stores what `sequence` holds: its global blocks not stored yet and its
 * local state. Errors: INVALID_ARGUMENT (another model's sequence, no
 * tokens), DATA_LOSS/INTERNAL (a write that failed: the cache stays usable). */
CSA_API csa_status csa_prefix_cache_save(csa_prefix_cache *cache, csa_sequence *sequence);

/* --- Sampling ----------------------------------------------------------- */

/* A sampler: temperature 0 is greedy (the largest logit, the lowest id on a
 * tie); otherwise softmax(logits / temperature) restricted to the top_p
 * nucleus, drawn from xoshiro256** seeded with `seed` (runtime/sampling:
 * the same tokens on every platform, and the same as csa-run
 * --temperature=T --top-p=P --seed=SEED for its first sequence).
 * INVALID_ARGUMENT: temperature not finite or < 0, top_p not in (0, 1]. */
CSA_API csa_status csa_sampler_new(float temperature, float top_p,
                                   uint64_t seed, csa_sampler **sampler);
/* NULL: nothing. */
CSA_API void csa_sampler_free(csa_sampler *sampler);
/* The next token for logits[0..count) into *token (one random draw unless
 * greedy). INVALID_ARGUMENT: count 0, a NaN or +inf logit, all -inf. */
CSA_API csa_status csa_sampler_next(csa_sampler *sampler, const float *logits,
                                    size_t count, int32_t *token);
/* Greedy without a sampler: the lowest id among the largest logits. */
CSA_API csa_status csa_greedy(const float *logits, size_t count,
                              int32_t *token);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CSA_CSA_H */

/*===- ApiTest.c - csa's C API from C --------------------------------------===//
 *
 * Compiled as C99 (the header must be plain C). Two modes, driven by
 * test/api/c-api.test:
 *
 *   csa-api-test run ARTIFACT WEIGHTS PROMPT N TEMPERATURE TOP_P SEED DEVICE [LOGITS.npy]
 *     WEIGHTS is a checkpoint directory or random:SEED; PROMPT ids are
 *     comma-separated; DEVICE cpu, cuda or auto. Prefills, then samples N
 *     tokens, each fed back (N - 1 decode steps), and prints
 *     "generated: ID ..." as csa-run does. With LOGITS.npy (csa-run
 *     --logits-out of the same run) every step's logits must equal the file's
 *     row bit for bit. Then resets the sequence and checks that a second
 *     prefill gives the same logits, and that a sequence outlives its model.
 *   csa-api-test errors ARTIFACT
 *     Every error path the API promises: status codes and messages.
 *
 * Exits 0 when every check holds; each failed check prints "FAIL: ...".
 *
 *===----------------------------------------------------------------------===*/
#include <csa/csa.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ++failures;                                                              \
      printf("FAIL: line %d: ", __LINE__);                                     \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
    }                                                                          \
  } while (0)

/* A call that must succeed; ends the program otherwise. */
static void must(csa_status st, const char *what) {
  if (st != CSA_OK) {
    printf("FAIL: %s: %s: %s\n", what, csa_status_name(st), csa_last_error());
    exit(1);
  }
  if (csa_last_error()[0] != '\0') {
    printf("FAIL: %s succeeded but csa_last_error() is '%s'\n", what,
           csa_last_error());
    exit(1);
  }
}

/* Prints "NAME: STATUS: MESSAGE" for FileCheck and checks the code. */
static void expect(csa_status st, csa_status want, const char *what) {
  printf("%s: %s: %s\n", what, csa_status_name(st), csa_last_error());
  CHECK(st == want, "%s: wanted %s", what, csa_status_name(want));
  CHECK(csa_last_error()[0] != '\0', "%s: no message", what);
}

/* The rows of a little-endian float32 .npy of shape [steps, vocab]. */
static float *read_npy(const char *path, long *steps, long *vocab) {
  FILE *f = fopen(path, "rb");
  unsigned char head[10];
  char *header;
  unsigned len;
  const char *shape;
  float *data;
  size_t count;
  if (!f || fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6) != 0 ||
      head[6] != 1) {
    printf("FAIL: %s is not a version 1 .npy file\n", path);
    exit(1);
  }
  len = head[8] | (unsigned)head[9] << 8;
  header = calloc(len + 1, 1);
  if (!header || fread(header, 1, len, f) != len) {
    printf("FAIL: %s: short header\n", path);
    exit(1);
  }
  shape = strstr(header, "'shape': (");
  if (!strstr(header, "'descr': '<f4'") || !shape ||
      sscanf(shape, "'shape': (%ld, %ld)", steps, vocab) != 2) {
    printf("FAIL: %s: not float32 [steps, vocab]: %s\n", path, header);
    exit(1);
  }
  count = (size_t)(*steps * *vocab);
  data = malloc(count * sizeof(float));
  if (!data || fread(data, sizeof(float), count, f) != count) {
    printf("FAIL: %s: short data\n", path);
    exit(1);
  }
  free(header);
  fclose(f);
  return data;
}

static csa_device parse_device(const char *name) {
  if (strcmp(name, "cuda") == 0)
    return CSA_DEVICE_CUDA;
  if (strcmp(name, "auto") == 0)
    return CSA_DEVICE_AUTO;
  return CSA_DEVICE_CPU;
}

static int run(int argc, char **argv) {
  const char *artifact = argv[2], *weights = argv[3];
  int32_t prompt[256];
  size_t prompt_len = 0;
  long n = atol(argv[5]), steps = 0, file_vocab = 0, step;
  float temperature = (float)atof(argv[6]), top_p = (float)atof(argv[7]);
  unsigned long long seed = strtoull(argv[8], NULL, 10);
  float *expected = NULL;
  csa_model_options options;
  csa_model *model = NULL;
  csa_sequence *seq = NULL;
  csa_sampler *sampler = NULL;
  float *logits, *first;
  int64_t vocab;
  char *ids = argv[4], *end;
  size_t v;

  while (*ids && prompt_len < 256) {
    prompt[prompt_len++] = (int32_t)strtol(ids, &end, 10);
    ids = *end == ',' ? end + 1 : end;
  }
  if (argc > 10)
    expected = read_npy(argv[10], &steps, &file_vocab);

  csa_model_options_init(&options);
  options.device = parse_device(argv[9]);
  if (strncmp(weights, "random:", 7) == 0)
    must(csa_model_open_random(artifact, strtoull(weights + 7, NULL, 10),
                               &options, &model),
         "csa_model_open_random");
  else
    must(csa_model_open(artifact, weights, &options, &model), "csa_model_open");
  vocab = csa_model_vocab_size(model);
  printf("model: vocab %lld, max_context %lld, device %s\n", (long long)vocab,
         (long long)csa_model_max_context(model),
         csa_model_device(model) == CSA_DEVICE_CUDA ? "cuda" : "cpu");
  CHECK(vocab > 0, "vocab %lld", (long long)vocab);
  CHECK(!expected || (file_vocab == vocab && steps == (n > 1 ? n : 1)),
        "%s holds [%ld, %ld], the run [%ld, %lld]", argv[10], steps,
        file_vocab, n > 1 ? n : 1, (long long)vocab);
  logits = malloc((size_t)vocab * sizeof(float));
  first = malloc((size_t)vocab * sizeof(float));

  must(csa_sequence_new(model, &seq), "csa_sequence_new");
  must(csa_sampler_new(temperature, top_p, seed, &sampler), "csa_sampler_new");
  must(csa_sequence_prefill(seq, prompt, prompt_len, logits, (size_t)vocab),
       "csa_sequence_prefill");
  memcpy(first, logits, (size_t)vocab * sizeof(float));
  CHECK(csa_sequence_position(seq) == (int64_t)prompt_len, "position %lld",
        (long long)csa_sequence_position(seq));
  CHECK(csa_sequence_cache_bytes(seq) > 0, "no cache bytes");
  printf("generated:");
  for (step = 0; step < n; ++step) {
    int32_t token;
    if (expected)
      CHECK(memcmp(logits, expected + step * vocab,
                   (size_t)vocab * sizeof(float)) == 0,
            "step %ld: the logits differ from %s", step, argv[10]);
    must(csa_sampler_next(sampler, logits, (size_t)vocab, &token),
         "csa_sampler_next");
    printf(" %d", (int)token);
    if (step + 1 < n)
      must(csa_sequence_decode(seq, token, logits, (size_t)vocab),
           "csa_sequence_decode");
  }
  printf("\n");
  must(csa_model_check(model), "csa_model_check");
  CHECK(csa_sequence_position(seq) == (int64_t)prompt_len + (n > 1 ? n - 1 : 0),
        "position %lld after %ld tokens", (long long)csa_sequence_position(seq),
        n);
  if (expected)
    printf("logits: %ld steps equal %s\n", steps, argv[10]);

  /* Reset: the same prompt gives the same logits again. */
  must(csa_sequence_reset(seq), "csa_sequence_reset");
  CHECK(csa_sequence_position(seq) == 0, "position %lld after reset",
        (long long)csa_sequence_position(seq));
  must(csa_sequence_prefill(seq, prompt, prompt_len, logits, (size_t)vocab),
       "prefill after reset");
  CHECK(memcmp(logits, first, (size_t)vocab * sizeof(float)) == 0,
        "the prefill after reset differs");
  /* No logits wanted. */
  must(csa_sequence_decode(seq, prompt[0], NULL, 0), "decode without logits");

  /* The sequence outlives its model. */
  csa_model_free(model);
  must(csa_sequence_decode(seq, prompt[0], logits, (size_t)vocab),
       "decode after csa_model_free");
  for (v = 0; v < (size_t)vocab; ++v)
    CHECK(isfinite(logits[v]), "logit %zu is %g", v, (double)logits[v]);
  csa_sequence_free(seq);
  csa_sampler_free(sampler);
  free(logits);
  free(first);
  free(expected);
  printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

static int errors(const char *artifact) {
  char missing[4096];
  csa_model *model = (csa_model *)1;
  csa_sequence *seq = NULL;
  csa_sampler *sampler = NULL;
  csa_model_options options;
  int32_t prompt[3] = {1, 2, 3}, token = -1, *long_prompt;
  float *logits, small[4], bad[3] = {0.0f, NAN, 1.0f};
  int64_t vocab, i;

  printf("api %d, %s\n", csa_api_version(), csa_version());
  CHECK(csa_api_version() == CSA_API_VERSION, "api version %d",
        csa_api_version());
  CHECK(strcmp(csa_status_name((csa_status)99), "CSA_ERROR_UNKNOWN") == 0,
        "status 99 is %s", csa_status_name((csa_status)99));

  /* A missing artifact: NOT_FOUND, the path named, no model. */
  snprintf(missing, sizeof missing, "%s.missing", artifact);
  expect(csa_model_open_random(missing, 0, NULL, &model), CSA_ERROR_NOT_FOUND,
         "missing artifact");
  CHECK(model == NULL, "a failed open left a model");
  CHECK(strstr(csa_last_error(), missing) != NULL,
        "the message does not name %s", missing);
  expect(csa_model_open(artifact, missing, NULL, &model), CSA_ERROR_NOT_FOUND,
         "missing weights");
  CHECK(strstr(csa_last_error(), missing) != NULL,
        "the message does not name %s", missing);
  expect(csa_model_open(NULL, "x", NULL, &model), CSA_ERROR_INVALID_ARGUMENT,
         "null artifact");
  expect(csa_model_open(artifact, NULL, NULL, &model),
         CSA_ERROR_INVALID_ARGUMENT, "null weights");
  csa_model_options_init(&options);
  options.device = (csa_device)7;
  expect(csa_model_open_random(artifact, 0, &options, &model),
         CSA_ERROR_INVALID_ARGUMENT, "bad device");
  csa_model_options_init(&options);
  options.threads = -1;
  expect(csa_model_open_random(artifact, 0, &options, &model),
         CSA_ERROR_INVALID_ARGUMENT, "bad thread count");
  csa_model_options_init(&options);
  options.struct_size = 0;
  expect(csa_model_open_random(artifact, 0, &options, &model),
         CSA_ERROR_INVALID_ARGUMENT, "options not initialized");

  /* A model, then the wrong calls on a sequence. */
  must(csa_model_open_random(artifact, 3, NULL, &model), "csa_model_open_random");
  vocab = csa_model_vocab_size(model);
  logits = malloc((size_t)vocab * sizeof(float));
  must(csa_sequence_new(model, &seq), "csa_sequence_new");
  expect(csa_sequence_decode(seq, 1, logits, (size_t)vocab),
         CSA_ERROR_FAILED_PRECONDITION, "decode before prefill");
  expect(csa_sequence_extend(seq, prompt, 3, logits, (size_t)vocab),
         CSA_ERROR_FAILED_PRECONDITION, "extend before prefill");
  expect(csa_sequence_prefill(seq, prompt, 0, logits, (size_t)vocab),
         CSA_ERROR_INVALID_ARGUMENT, "empty prompt");
  prompt[1] = (int32_t)vocab;
  expect(csa_sequence_prefill(seq, prompt, 3, logits, (size_t)vocab),
         CSA_ERROR_INVALID_ARGUMENT, "token outside the vocabulary");
  prompt[1] = 2;
  expect(csa_sequence_prefill(seq, prompt, 3, small, 4),
         CSA_ERROR_INVALID_ARGUMENT, "small buffer");
  CHECK(csa_sequence_position(seq) == 0, "a refused prefill ran");
  long_prompt = calloc((size_t)csa_model_max_context(model) + 1, sizeof(int32_t));
  expect(csa_sequence_prefill(seq, long_prompt,
                              (size_t)csa_model_max_context(model) + 1, logits,
                              (size_t)vocab),
         CSA_ERROR_OUT_OF_RANGE, "prompt past max_context");
  free(long_prompt);
  must(csa_sequence_prefill(seq, prompt, 3, logits, (size_t)vocab), "prefill");
  expect(csa_sequence_prefill(seq, prompt, 3, logits, (size_t)vocab),
         CSA_ERROR_FAILED_PRECONDITION, "second prefill");
  expect(csa_sequence_decode(seq, -1, logits, (size_t)vocab),
         CSA_ERROR_INVALID_ARGUMENT, "negative token");
  expect(csa_sequence_extend(seq, NULL, 2, logits, (size_t)vocab),
         CSA_ERROR_INVALID_ARGUMENT, "extend from NULL");
  must(csa_sequence_extend(seq, prompt, 3, logits, (size_t)vocab), "extend");
  CHECK(csa_sequence_position(seq) == 6, "extend by 3 did not reach position 6");
  for (i = csa_sequence_position(seq); i < csa_model_max_context(model); ++i)
    must(csa_sequence_decode(seq, 1, NULL, 0), "decode to max_context");
  expect(csa_sequence_decode(seq, 1, logits, (size_t)vocab),
         CSA_ERROR_OUT_OF_RANGE, "decode past max_context");
  csa_sequence_free(seq);
  seq = (csa_sequence *)1;
  expect(csa_sequence_new(NULL, &seq), CSA_ERROR_INVALID_ARGUMENT,
         "sequence of no model");
  CHECK(seq == NULL, "a failed csa_sequence_new left a sequence");

  /* Sampling. */
  expect(csa_sampler_new(-1.0f, 1.0f, 0, &sampler), CSA_ERROR_INVALID_ARGUMENT,
         "negative temperature");
  expect(csa_sampler_new(1.0f, 0.0f, 0, &sampler), CSA_ERROR_INVALID_ARGUMENT,
         "top_p 0");
  expect(csa_greedy(bad, 3, &token), CSA_ERROR_INVALID_ARGUMENT, "NaN logit");
  expect(csa_greedy(NULL, 0, &token), CSA_ERROR_INVALID_ARGUMENT,
         "no logits");
  bad[1] = 2.0f;
  must(csa_greedy(bad, 3, &token), "csa_greedy");
  CHECK(token == 1, "greedy chose %d", (int)token);

  /* Freeing NULL does nothing. */
  csa_model_free(NULL);
  csa_sequence_free(NULL);
  csa_sampler_free(NULL);
  csa_model_free(model);
  free(logits);
  printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

/* The prefix cache: a saved sequence restored for the next turn continues
 * bit for bit; another cache over the directory (another process) restores
 * the global blocks only. */
static int prefix(const char *artifact, const char *directory) {
  csa_model *model = NULL, *other = NULL;
  csa_sequence *kept = NULL, *restored_seq = NULL, *foreign = NULL;
  csa_prefix_cache *cache = NULL, *reopened = NULL;
  int32_t history[80];
  size_t restored = 99, i;
  csa_restore_case kind = CSA_RESTORE_COLD;
  float *want, *got;
  int64_t vocab;
  for (i = 0; i < 80; ++i)
    history[i] = (int32_t)((i * 37 + 5) % 500);
  must(csa_model_open_random(artifact, 3, NULL, &model), "csa_model_open_random");
  vocab = csa_model_vocab_size(model);
  want = malloc((size_t)vocab * sizeof(float));
  got = malloc((size_t)vocab * sizeof(float));
  must(csa_prefix_cache_open(model, directory, 0, -1, 0, &cache), "csa_prefix_cache_open");
  must(csa_sequence_new(model, &kept), "csa_sequence_new");
  must(csa_sequence_prefill(kept, history, 70, NULL, 0), "prefill");
  must(csa_prefix_cache_save(cache, kept), "csa_prefix_cache_save");

  must(csa_sequence_new(model, &restored_seq), "csa_sequence_new");
  must(csa_prefix_cache_restore(cache, restored_seq, history, 80, &restored, &kind),
       "csa_prefix_cache_restore");
  CHECK(kind == CSA_RESTORE_GLOBAL_AND_LOCAL && restored == 70,
        "restored case %d, %zu tokens; want global+local, 70", (int)kind, restored);
  CHECK(csa_sequence_position(restored_seq) == 70, "the restored sequence is at %lld",
        (long long)csa_sequence_position(restored_seq));
  must(csa_sequence_extend(kept, history + 70, 10, want, (size_t)vocab), "extend kept");
  must(csa_sequence_extend(restored_seq, history + 70, 10, got, (size_t)vocab),
       "extend restored");
  CHECK(memcmp(want, got, (size_t)vocab * sizeof(float)) == 0,
        "the restored sequence's logits differ from the kept one's");

  must(csa_prefix_cache_open(model, directory, 0, -1, 0, &reopened), "reopen");
  must(csa_prefix_cache_restore(reopened, restored_seq, history, 80, &restored, &kind),
       "restore from the directory");
  CHECK(kind == CSA_RESTORE_GLOBAL_ONLY && restored == 64,
        "reopened: case %d, %zu tokens; want global-only, 64", (int)kind, restored);
  must(csa_sequence_extend(restored_seq, history + 64, 16, got, (size_t)vocab),
       "extend after a global-only hit");

  /* Errors. */
  expect(csa_prefix_cache_restore(cache, NULL, history, 3, NULL, NULL),
         CSA_ERROR_INVALID_ARGUMENT, "restore into NULL");
  expect(csa_prefix_cache_restore(cache, kept, NULL, 3, NULL, NULL),
         CSA_ERROR_INVALID_ARGUMENT, "restore from NULL tokens");
  expect(csa_prefix_cache_open(model, directory, 0, 0.0 / 0.0, 0, &reopened),
         CSA_ERROR_INVALID_ARGUMENT, "NaN time-to-live");
  must(csa_model_open_random(artifact, 4, NULL, &other), "another model");
  must(csa_sequence_new(other, &foreign), "its sequence");
  expect(csa_prefix_cache_save(cache, foreign), CSA_ERROR_INVALID_ARGUMENT,
         "save another model's sequence");
  csa_sequence_free(foreign);
  csa_model_free(other);
  csa_prefix_cache_free(NULL);
  csa_prefix_cache_free(cache);
  csa_prefix_cache_free(reopened);
  csa_sequence_free(kept);
  csa_sequence_free(restored_seq);
  csa_model_free(model);
  free(want);
  free(got);
  printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

/* csa_sequences_decode: three sequences at other positions decoded in one
 * step equal each decoded alone, bit for bit (on the CPU); bad batches are
 * refused with the sequence named. */
static int batch(const char *artifact, const char *device) {
  enum { kSeqs = 3, kSteps = 6 };
  static const int32_t prompts[kSeqs][12] = {
      {1, 2, 3, 4, 5}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 11, 12, 13}, {42, 7, 19}};
  static const size_t lengths[kSeqs] = {5, 12, 3};
  csa_model_options options;
  csa_model *model = NULL, *other = NULL;
  csa_sequence *together[kSeqs], *alone[kSeqs], *greedy[kSeqs], *foreign = NULL, *pair[2];
  float *rows, *one;
  int32_t tokens[kSeqs], next[kSeqs], pick;
  int64_t vocab;
  int i, step;

  csa_model_options_init(&options);
  options.device = parse_device(device);
  must(csa_model_open_random(artifact, 7, &options, &model), "csa_model_open_random");
  vocab = csa_model_vocab_size(model);
  rows = malloc((size_t)(kSeqs * vocab) * sizeof(float));
  one = malloc((size_t)vocab * sizeof(float));
  for (i = 0; i < kSeqs; ++i) {
    must(csa_sequence_new(model, &together[i]), "csa_sequence_new");
    must(csa_sequence_new(model, &alone[i]), "csa_sequence_new");
    must(csa_sequence_new(model, &greedy[i]), "csa_sequence_new");
    must(csa_sequence_prefill(together[i], prompts[i], lengths[i], NULL, 0), "prefill");
    must(csa_sequence_prefill(alone[i], prompts[i], lengths[i], NULL, 0), "prefill");
    must(csa_sequence_prefill(greedy[i], prompts[i], lengths[i], NULL, 0), "prefill");
  }
  for (step = 0; step < kSteps; ++step) {
    for (i = 0; i < kSeqs; ++i)
      tokens[i] = (int32_t)((step * 31 + i * 17 + 1) % vocab);
    must(csa_sequences_decode(together, tokens, kSeqs, rows, (size_t)(kSeqs * vocab)),
         "csa_sequences_decode");
    /* The greedy step: all three, or the first alone on odd steps (its
     * others then decode alone too, to stay at the same positions). */
    if (step % 2 == 0) {
      must(csa_sequences_decode_greedy(greedy, tokens, kSeqs, next), "greedy step");
    } else {
      must(csa_sequences_decode_greedy(greedy, tokens, 1, next), "greedy step of one");
      must(csa_sequences_decode_greedy(greedy + 1, tokens + 1, kSeqs - 1, next + 1),
           "greedy step of two");
    }
    for (i = 0; i < kSeqs; ++i) {
      must(csa_greedy(rows + i * vocab, (size_t)vocab, &pick), "csa_greedy");
      CHECK(next[i] == pick, "step %d: sequence %d's greedy step gave %d, its logits %d", step,
            i, (int)next[i], (int)pick);
    }
    for (i = 0; i < kSeqs; ++i) {
      must(csa_sequence_decode(alone[i], tokens[i], one, (size_t)vocab), "decode");
      CHECK(memcmp(one, rows + i * vocab, (size_t)vocab * sizeof(float)) == 0,
            "step %d: sequence %d's row differs from its own decode", step, i);
      CHECK(csa_sequence_position(together[i]) == csa_sequence_position(alone[i]),
            "step %d: sequence %d at %lld, alone at %lld", step, i,
            (long long)csa_sequence_position(together[i]),
            (long long)csa_sequence_position(alone[i]));
    }
  }
  printf("batch: %d steps of %d sequences equal their own decodes\n", kSteps, kSeqs);
  expect(csa_sequences_decode_greedy(greedy, tokens, kSeqs, NULL), CSA_ERROR_INVALID_ARGUMENT,
         "greedy without a buffer");
  /* No logits wanted. */
  must(csa_sequences_decode(together, tokens, kSeqs, NULL, 0), "batch without logits");

  expect(csa_sequences_decode(together, tokens, 0, rows, (size_t)(kSeqs * vocab)),
         CSA_ERROR_INVALID_ARGUMENT, "no sequences");
  expect(csa_sequences_decode(together, tokens, kSeqs, rows, (size_t)vocab),
         CSA_ERROR_INVALID_ARGUMENT, "small buffer");
  pair[0] = together[0];
  pair[1] = together[0];
  expect(csa_sequences_decode(pair, tokens, 2, NULL, 0), CSA_ERROR_INVALID_ARGUMENT,
         "one sequence twice");
  must(csa_model_open_random(artifact, 7, &options, &other), "csa_model_open_random");
  must(csa_sequence_new(other, &foreign), "csa_sequence_new");
  pair[1] = foreign;
  expect(csa_sequences_decode(pair, tokens, 2, NULL, 0), CSA_ERROR_INVALID_ARGUMENT,
         "another model's sequence");
  must(csa_sequence_new(model, &pair[1]), "csa_sequence_new");
  expect(csa_sequences_decode(pair, tokens, 2, NULL, 0), CSA_ERROR_FAILED_PRECONDITION,
         "no prefill");
  csa_sequence_free(pair[1]);
  csa_sequence_free(foreign);
  csa_model_free(other);
  for (i = 0; i < kSeqs; ++i) {
    csa_sequence_free(together[i]);
    csa_sequence_free(alone[i]);
    csa_sequence_free(greedy[i]);
  }
  csa_model_free(model);
  free(rows);
  free(one);
  printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc >= 10 && strcmp(argv[1], "run") == 0)
    return run(argc, argv);
  if (argc == 3 && strcmp(argv[1], "errors") == 0)
    return errors(argv[2]);
  if (argc == 4 && strcmp(argv[1], "prefix") == 0)
    return prefix(argv[2], argv[3]);
  if (argc == 4 && strcmp(argv[1], "batch") == 0)
    return batch(argv[2], argv[3]);
  fprintf(stderr,
          "usage: csa-api-test run ARTIFACT WEIGHTS PROMPT N TEMPERATURE TOP_P "
          "SEED DEVICE [LOGITS.npy]\n"
          "       csa-api-test errors ARTIFACT\n"
          "       csa-api-test prefix ARTIFACT CACHE_DIR\n"
          "       csa-api-test batch ARTIFACT DEVICE\n");
  return 2;
}

/* generate ARTIFACT SEED N: greedy tokens of tiny on random weights through
 * the installed C API (docs/embedding.md). */
#include <csa/csa.h>

#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what, csa_status st) {
  fprintf(stderr, "%s: %s: %s\n", what, csa_status_name(st), csa_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const int32_t prompt[] = {1, 2, 3, 4, 5};
  csa_model *model = NULL;
  csa_sequence *seq = NULL;
  csa_status st;
  float *logits;
  int64_t vocab;
  int i, n;
  if (argc != 4) {
    fprintf(stderr, "usage: generate ARTIFACT SEED N\n");
    return 2;
  }
  n = atoi(argv[3]);
  st = csa_model_open_random(argv[1], strtoull(argv[2], NULL, 10), NULL, &model);
  if (st != CSA_OK)
    return fail("open", st);
  vocab = csa_model_vocab_size(model);
  logits = malloc((size_t)vocab * sizeof(float));
  if ((st = csa_sequence_new(model, &seq)) != CSA_OK)
    return fail("sequence", st);
  if ((st = csa_sequence_prefill(seq, prompt, 5, logits, (size_t)vocab)) != CSA_OK)
    return fail("prefill", st);
  printf("generated:");
  for (i = 0; i < n; ++i) {
    int32_t token;
    if ((st = csa_greedy(logits, (size_t)vocab, &token)) != CSA_OK)
      return fail("greedy", st);
    printf(" %d", (int)token);
    if (i + 1 < n &&
        (st = csa_sequence_decode(seq, token, logits, (size_t)vocab)) != CSA_OK)
      return fail("decode", st);
  }
  printf("\n");
  csa_sequence_free(seq);
  csa_model_free(model);
  free(logits);
  return 0;
}

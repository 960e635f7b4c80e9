//===- csa-run.cpp - Run a compiled artifact -------------------------------===//
//
// Token ids or text in, token ids and text out: loads an artifact written by
// `csa-compile --emit=artifact`, binds a checkpoint (or random weights made
// for the artifact's config), prefills the prompt and generates.
//
//   csa-run tiny.csa --random-weights --prompt=1,2,3 --max-new-tokens=32
//   csa-run model.csa --weights=CKPT_DIR --prompt-text="Hello"   # CKPT_DIR/tokenizer.json
//   csa-run model.csa --weights=CKPT_DIR --prompt-file=ids.txt --temperature=0.7
//   csa-run tiny.csa --random-weights --prompt=1,2,3 --max-new-tokens=4 \
//           --forced-tokens=7,8,9 --logits-out=gpu.npy    # then csa-diff cpu.npy gpu.npy
//   csa-run tiny.csa --random-weights --prompt=1,2,3 --warmup --repeat=5 --profile=json
//           # one JSON object (docs/run-json.md): medians over 5 runs, the profile by layer
//
// Plain C++ (no LLVM): the CPU backend of runtime/executor.
//
//===----------------------------------------------------------------------===//
#include "tools/support/Flags.h"
#include "tools/support/LastResort.h"
#include "tools/support/Progress.h"
#include "tools/support/Version.h"
#include "models/config/ModelConfig.h"
#include "models/schedule/Schedule.h"
#include "models/weights/RandomCheckpoint.h"
#include "runtime/support/AtomicFile.h"
#include "runtime/artifact/Artifact.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/executor/Executor.h"
#include "runtime/prefix/PrefixCache.h"
#include "runtime/sampling/Sampling.h"
#include "runtime/support/Npy.h"
#include "runtime/tokenizer/EngramTokenMap.h"
#include "runtime/tokenizer/ModelTokenizer.h"
#include "runtime/tokenizer/Unicode.h"
#include "tools/support/RunSetup.h"
#include "tools/csa-run/Conversation.h"
#include "tools/csa-run/ExecutorFlags.h"
#include "tools/csa-run/ProfileReport.h"
#include "tools/csa-run/PromptFlags.h"
#include "tools/csa-run/RecallReport.h"
#include "tools/csa-run/RunReport.h"

#include "absl/strings/str_cat.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <limits>
#include <optional>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unistd.h>


// The flags (tools/support/Flags.h: --flag=value or --flag value).
ABSL_FLAG(std::string, weights, "", "the checkpoint folder (CKPT_DIR)");
ABSL_FLAG(std::optional<uint64_t>, random_weights, std::nullopt,
          "random weights for the artifact's config with this seed (the seed "
          "only as --random-weights=SEED)");
ABSL_FLAG(std::string, tokenizer, "", "a tokenizer folder or tokenizer.json");
ABSL_FLAG(std::string, engram_token_map, "",
          "the Engram layers' token map: a JSON file or 'modulo'");
ABSL_FLAG(bool, ignore_eos, false, "generate past an EOS id");
ABSL_FLAG(int64_t, max_new_tokens, 16, "tokens to generate");
ABSL_FLAG(float, temperature, 0.0f, "sampling temperature (0: greedy)");
ABSL_FLAG(float, top_p, 1.0f, "nucleus sampling mass, in (0, 1]");
ABSL_FLAG(uint64_t, seed, 0, "the sampler's seed (sequence i: seed + i)");
ABSL_FLAG(int64_t, batch, 1, "sequences run, each a copy of the prompt");
ABSL_FLAG(bool, sequential_batch, false,
          "decode a batch's sequences one after another instead of in one step");
ABSL_FLAG(int64_t, context, 0,
          "start each sequence at this position with synthetic caches");
ABSL_FLAG(int64_t, prefill_chunk, 0,
          "run the prompt in chunks of N tokens (chunked prefill; 0: one prefill)");
ABSL_FLAG(std::string, turns, "",
          "a conversation file: one turn a line (ids, or JSON with tokens or text and generate)");
ABSL_FLAG(std::string, prefix_cache, "",
          "a prefix cache directory: global KV kept across turns and runs");
ABSL_FLAG(std::string, output, "", "write the generated ids to this file");
ABSL_FLAG(int64_t, print_logits, 0, "print the K largest logits of each step");
ABSL_FLAG(bool, greedy_on_host, false,
          "greedy decode steps bring their logits back and pick the token on the host, "
          "instead of the head's greedy kernel picking it where the logits are");
ABSL_FLAG(std::string, logits_out, "", "write every step's logits to this .npy");
ABSL_FLAG(bool, warmup, false, "run an untimed 1-token prefill first");
ABSL_FLAG(std::string, profile, "",
          "time every plan step: text, json (by layer too, in the --json "
          "object) or off");
ABSL_FLAG(std::string, gpu_profile_steps, "",
          "decode steps N or N-M (from 0) inside the profilers' capture range "
          "(cuProfilerStart/Stop; ncu --profile-from-start off records only them); "
          "--device=cuda, the first run");
ABSL_FLAG(bool, json, false,
          "print one JSON object on stdout instead of the text (docs/run-json.md)");
ABSL_FLAG(int64_t, repeat, 1,
          "run the prefill and decode N times: medians and spread");
ABSL_FLAG(bool, progress, false,
          "progress lines on stderr, always: random weights, the weights' upload, "
          "prefill steps, decode tokens");
ABSL_FLAG(bool, quiet, false, "no progress lines");

namespace {

using namespace csa;
namespace fs = std::filesystem;

/// The usage text: --help prints it on stdout (with the flags' list); an
/// incomplete command line, on stderr with status 2.
constexpr const char *kUsage =
"usage: csa-run ARTIFACT (--weights=CKPT_DIR | --random-weights[=SEED])\n"
         "              (--prompt=ID,ID,... | --prompt-file=FILE | --prompts-file=FILE |\n"
         "               --prompt-text=TEXT | --prompt-text-file=FILE)\n"
         "              [--tokenizer=DIR|FILE] [--engram-token-map=FILE|modulo]\n"
         "              [--ignore-eos] [--allow-unused-weights]\n"
         "              [--max-new-tokens=N] [--temperature=T] [--top-p=P]\n"
         "              [--seed=N] [--batch=B] [--sequential-batch] [--output=FILE]\n"
         "              [--print-logits=K]\n"
         "              [--logits-out=FILE.npy] [--forced-tokens=ID,ID,...]\n"
         "              [--forced-tokens-file=FILE]\n"
         "              [--dump-decisions=DIR] [--force-decisions=DIR] [--dump-hidden=DIR]\n"
         "              [--device=cpu|cuda|auto] [--cuda-graphs=on|off|N|step[:P]]\n"
         "              [--cuda-pdl=on|off] [--cuda-library=PATH] [--cuda-heap-mib=N]\n"
         "              [--context=P] [--prefill-chunk=N] [--threads=N] [--warmup]\n"
         "              [--turns=FILE] [--prefix-cache=DIR] [--prefix-cache-size=BYTES]\n"
         "              [--local-state-ttl=DURATION] [--prefix-cache-policy=global|global+local]\n"
         "              [--profile[=text|json]]\n"
         "              [--json] [--repeat=N] [--analyze=recall] [--progress | --quiet]\n"
         "              [--gpu-emulate] [--gpu-sync] [--gpu-trace]\n"
         "              [--gpu-host-kernels=PREFIX,...] [--gpu-no-row-tiles]\n"
         "              [--gpu-no-overlap]\n"
         "Prefills the prompt and generates N tokens (default 16) with the\n"
         "artifact's generated kernels on the CPU. --random-weights makes a\n"
         "checkpoint for the artifact's config (seeded, default 0) in a\n"
         "temporary directory. --batch runs B copies of the prompt as B\n"
         "sequences (each with its own caches and sampler seed + i);\n"
         "--prompts-file runs a sequence for each line's prompt. A batch's\n"
         "sequences decode together, one step a token for all of them (each\n"
         "weight read once), unless --sequential-batch.\n"
         "Prints the generated ids, prefill and decode times, tokens/s and the\n"
         "cache bytes the sequences hold.\n"
         "Text: the tokenizer is --tokenizer (a folder or a tokenizer.json) or\n"
         "CKPT_DIR/tokenizer.json, with BOS/EOS from tokenizer_config.json and\n"
         "generation_config.json beside it. --prompt-text encodes TEXT (ill-formed\n"
         "UTF-8 is replaced by U+FFFD, with a warning); with a tokenizer the\n"
         "generated text is printed as it is produced (--batch=1) and generation\n"
         "stops at an EOS id unless --ignore-eos (or --forced-tokens or\n"
         "--logits-out, which need every step).\n"
         "Engram layers hash the released compressed token map, built from the\n"
         "tokenizer; --engram-token-map=FILE gives one (a JSON list of vocab_size\n"
         "ids) and =modulo hashes t mod engram_compressed_vocab_size. Random\n"
         "checkpoints carry that modulo map (engram_token_map.json). A model with\n"
         "Engram layers and no map is refused. The map used is printed.\n"
         "--turns runs a conversation: each line of FILE appends tokens (ids, or\n"
         "JSON {\"tokens\": [...]} or {\"text\": \"...\"} with \"generate\": N) and\n"
         "generates; --prefix-cache=DIR restores each turn's history from DIR (global\n"
         "blocks on disk, local state in memory for --local-state-ttl) and saves it\n"
         "back; each turn prints which case it hit (docs/prefix-cache.md).\n"
         "--allow-unused-weights runs a checkpoint that holds more tensors than the\n"
         "artifact uses (the same weights under a schedule with more Reuse layers);\n"
         "one line says how many were skipped. Tensors the artifact needs and the\n"
         "checkpoint lacks are always an error that lists them.\n"
         "--logits-out writes the logits of every step (the prefill's last row,\n"
         "then each decode step) as a NumPy .npy of little-endian float32, shape\n"
         "[steps, vocab] (--batch=1) or [batch, steps, vocab]; steps is\n"
         "max(1, N): csa-diff compares two such files. It is written under a\n"
         "temporary name beside FILE and renamed when the run succeeds.\n"
         "--forced-tokens (teacher forcing) feeds decode step i the i-th id\n"
         "instead of the sampled token (every sequence of a batch the same ids);\n"
         "the sampled tokens are still what is printed and --output written.\n"
         "N new tokens take N - 1 decode steps, so at least N - 1 ids (more are\n"
         "not used: the N tokens of another run's output fit).\n"
         "--dump-decisions writes every top-k set, HSI pool and MoE routing\n"
         "(expert ids and weights) of the run to DIR as .npy files;\n"
         "--force-decisions reads them from such a DIR in place of the run's\n"
         "own (the same artifact, prompt and flags; with --forced-tokens, a GPU\n"
         "run then differs from the CPU's only in arithmetic). Files and\n"
         "shapes: docs/semantics.md.\n"
         "--dump-hidden writes every block's output (the hc streams each\n"
         "csa.hc_update leaves, float32 [rows, hc, dim]) to DIR, named like\n"
         "the decisions: two runs compare layer by layer with numpy.\n"
         "--dump-layers=0,3-5 and --dump-rows=BEGIN:END (a numpy slice of each\n"
         "step's rows, e.g. -1: for the last) limit both dumps.\n"
         "--threads=N: the CPU path's worker threads (default 0: every core\n"
         "this process may use); a linear's rows and a layer's routed experts\n"
         "are split among them, and the output is the same bits for every N.\n"
         "--device=cuda runs the artifact's\n"
         "PTX (csa-compile --with-ptx) on the GPU, within the tolerance contract\n"
         "of docs/semantics.md against --device=cpu\n"
         "(buffers stay on the device between kernels; docs/gpu.md); --device=auto\n"
         "does the same when there is an NVIDIA driver and the artifact has PTX,\n"
         "and otherwise runs on the CPU and says why on stderr.\n"
         "--cuda-graphs (cuda; default on) launches each run of kernels between\n"
         "two reads by the host as CUDA graphs, kept for the next step; N: at\n"
         "most N kernels per graph (default 8, cut where a plan step starts);\n"
         "step: each step one graph (the GPU waits until the host recorded\n"
         "it); step:P: P graphs; off: one launch per kernel. --cuda-pdl=on\n"
         "links a graph's kernels by programmatic dependent launch (each\n"
         "kernel's blocks resident before the one before ends). --cuda-library\n"
         "opens another CUDA driver (build/lib/libcsa-null-cuda.so runs the GPU\n"
         "path's host side without a GPU; CSA_CUDA_LIBRARY is an alias);\n"
         "--cuda-heap-mib sizes the kernels' device heap (default 1024;\n"
         "CSA_CUDA_MALLOC_HEAP_MB is an alias).\n"
         "--context=P starts each sequence at position P with synthetic caches\n"
         "(random rows in the released byte formats) and runs the prompt one\n"
         "token at a time: decode latency at long contexts; with\n"
         "--prefill-chunk=N the prompt runs in chunks of N tokens instead.\n"
         "--prefill-chunk=N prefills the prompt N tokens at a time (the first\n"
         "chunk as the prefill, each later one extending the sequence). The temporary\n"
         "directory of --random-weights is $TMPDIR (e.g. /dev/shm).\n"
         "On the GPU the weights are copied before anything is timed, on a\n"
         "line of their own (\"weights: ... GB to the GPU in ... s\").\n"
         "--warmup runs a 1-token prefill first, untimed (the kernels' first\n"
         "loads, the graphs' first builds), so prefill and decode times exclude\n"
         "one-time costs.\n"
         "--profile times every plan step (the GPU synchronized after each)\n"
         "and prints the time per op and kernel over the whole run (on the GPU,\n"
         "also the bytes each kind of step copied to and from the device).\n"
         "--json prints one JSON object on one line on stdout instead of the\n"
         "text lines (warnings stay on stderr): the artifact and device, the\n"
         "prompt, prefill and each decode step's time, the generated ids, cache\n"
         "bytes and the GPU's counters; with --profile (or --profile=json, which\n"
         "implies --json) also the profile by op and kernels and by layer.\n"
         "--repeat=N runs the whole generation (every sequence's prefill and\n"
         "decode steps) N times, after the --warmup if any, and prints a table\n"
         "of the median, min, max and standard deviation over the runs of the\n"
         "prefill's time and tokens/s and of the decode step's median time and\n"
         "tokens/s (in the JSON: \"repeat\"); the other lines describe the first\n"
         "run. Schema and plot script: docs/run-json.md, bench/plot_run.py.\n"
         "Progress (stderr only; stdout is the same): making --random-weights\n"
         "(bytes written), the weights' upload to the GPU (bytes), each prefill\n"
         "(the plan's steps done of its steps, steps/s, time left) and the decode\n"
         "(tokens generated of --max-new-tokens x --batch, tokens/s, time left).\n"
         "Shown when stderr is a terminal and the work has taken 2 s (not the\n"
         "decode's when text or logits are printed step by step); --progress:\n"
         "always, also into a file; --quiet: never.\n"
         "GPU checking knobs (--device=cuda; the CSA_CUDA_EMULATE=1, CSA_CUDA_SYNC,\n"
         "CSA_CUDA_TRACE, CSA_CUDA_HOST_KERNELS and CSA_CUDA_NO_TILES variables\n"
         "are aliases): --gpu-emulate runs the GPU path's bookkeeping on host\n"
         "memory with the host kernels (no GPU needed); --gpu-sync synchronizes\n"
         "after every launch; --gpu-trace prints every copy, allocation and\n"
         "changed graph launch; --gpu-host-kernels keeps kernels by name prefix\n"
         "on the CPU; --gpu-no-row-tiles always runs the per-output linears;\n"
         "--gpu-per-expert-moe runs prefill's routed experts (from 5 tokens) one\n"
         "launch an expert from lists the host builds (not grouped launches);\n"
         "--gpu-no-overlap puts the steps the plan lets overlap later ones\n"
         "(overlaps_until: mHC's mix) in the chain, not on a graph branch.\n";

/// The --json object keeps its members in the order they are written.
using Json = nlohmann::ordered_json;

int fail(const std::string &message) {
  std::cerr << "csa-run: error: " << message << "\n";
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  csa::tools::installLastResortHandler("csa-run");
  tools::CommandLine flags("csa-run", kUsage);
  const int64_t maxHeap = runtime::ExecutorOptions::kMaxDeviceHeapMiB;
  flags.implicitValue(FLAGS_random_weights, "0")
      .describe(FLAGS_random_weights, "needs an integer seed")
      .range<int64_t>(FLAGS_max_new_tokens, 0, INT64_MAX, "needs a count >= 0")
      .range<float>(FLAGS_temperature, 0, std::numeric_limits<float>::max(),
                    "needs a number >= 0 (0 is greedy)")
      .range<float>(FLAGS_top_p, std::numeric_limits<float>::denorm_min(), 1,
                    "needs a number in (0, 1]")
      .describe(FLAGS_seed, "needs an integer")
      .range<int64_t>(FLAGS_context, 1, INT64_MAX, "needs a position >= 1")
      .range<int64_t>(FLAGS_prefill_chunk, 0, INT64_MAX, "needs a count >= 0 (0: one prefill)")
      // Each sequence holds its own caches and buffers: beyond 4096 the
      // run would only end in an allocation failure.
      .range<int64_t>(FLAGS_batch, 1, 4096, "needs a count from 1 to 4096")
      .range<int64_t>(FLAGS_print_logits, 0, INT64_MAX, "needs a count >= 0")
      .range<int64_t>(FLAGS_repeat, 1, 1000000, "needs a count from 1 to 1000000")
      .range<int64_t>(FLAGS_threads, 0, runtime::ExecutorOptions::kMaxThreads,
                      absl::StrCat("needs a count from 0 (every core) to ",
                                   runtime::ExecutorOptions::kMaxThreads))
      .implicitValue(FLAGS_profile, "text")
      .describe(FLAGS_profile, "needs text, json or off")
      .range<int64_t>(FLAGS_cuda_heap_mib, 1, maxHeap,
                      absl::StrCat("needs a count from 1 to ", maxHeap));
  if (!flags.parse(argc, argv))
    return flags.exitCode();
  if (argc < 2)
    return flags.usage();
  const std::optional<std::string> artifactArg = flags.singlePositional("artifact directory");
  if (!artifactArg)
    return 2;
  const std::string artifactDir = *artifactArg;
  std::string weightsDir = absl::GetFlag(FLAGS_weights);
  const std::string promptsFile = absl::GetFlag(FLAGS_prompts_file);
  const std::string tokenizerFlag = absl::GetFlag(FLAGS_tokenizer);
  const std::string engramMapFlag = absl::GetFlag(FLAGS_engram_token_map);
  const std::string outputFile = absl::GetFlag(FLAGS_output);
  const std::string logitsOut = absl::GetFlag(FLAGS_logits_out);
  const bool ignoreEos = absl::GetFlag(FLAGS_ignore_eos);
  const bool warmup = absl::GetFlag(FLAGS_warmup);
  const bool randomWeights = absl::GetFlag(FLAGS_random_weights).has_value();
  const uint64_t weightSeed = absl::GetFlag(FLAGS_random_weights).value_or(0);
  const uint64_t samplerSeed = absl::GetFlag(FLAGS_seed);
  const int64_t maxNew = absl::GetFlag(FLAGS_max_new_tokens);
  int64_t batch = absl::GetFlag(FLAGS_batch);
  const int64_t printLogits = absl::GetFlag(FLAGS_print_logits);
  const bool greedyOnHost = absl::GetFlag(FLAGS_greedy_on_host);
  const int64_t context = absl::GetFlag(FLAGS_context);
  const int64_t prefillChunk = absl::GetFlag(FLAGS_prefill_chunk);
  const int64_t repeat = absl::GetFlag(FLAGS_repeat);
  // Progress lines on stderr (tools/support/Progress.h; --quiet wins).
  const tools::ProgressMode progressMode =
      tools::progressMode(absl::GetFlag(FLAGS_progress), absl::GetFlag(FLAGS_quiet));
  // --profile: bare, =text (or =true) prints a table; =json puts the
  // profile into the --json object (and implies --json).
  enum class ProfileMode { Off, Text, Json } profileMode = ProfileMode::Off;
  if (const std::string v = absl::GetFlag(FLAGS_profile); v == "text" || v == "true")
    profileMode = ProfileMode::Text;
  else if (v == "json")
    profileMode = ProfileMode::Json;
  else if (!v.empty() && v != "off" && v != "false")
    return flags.error("--profile needs text, json or off, got '" + v + "'");
  const bool json = absl::GetFlag(FLAGS_json) || profileMode == ProfileMode::Json;
  if (json && printLogits > 0)
    return flags.error("--print-logits prints text lines; it does not go with --json");
  if (repeat > 1)
    for (const auto &[given, name] :
         {std::pair<bool, const char *>{flags.given(FLAGS_logits_out), "--logits-out"},
          {flags.given(FLAGS_dump_decisions), "--dump-decisions"},
          {flags.given(FLAGS_force_decisions), "--force-decisions"},
          {flags.given(FLAGS_dump_hidden), "--dump-hidden"}})
      if (given)
        return flags.error(absl::StrCat(name, " records one run; it does not go with --repeat=",
                                        repeat));
  sampling::SamplingParams params;
  params.temperature = absl::GetFlag(FLAGS_temperature);
  params.topP = absl::GetFlag(FLAGS_top_p);
  if (flags.given(FLAGS_prompt_text_file) && absl::GetFlag(FLAGS_prompt_text_file).empty())
    return fail("--prompt-text-file needs a file name");
  if (flags.given(FLAGS_tokenizer) && tokenizerFlag.empty())
    return fail("--tokenizer needs a folder or a tokenizer.json");
  if (flags.given(FLAGS_engram_token_map) && engramMapFlag.empty())
    return fail("--engram-token-map needs a file or 'modulo'");
  if (flags.given(FLAGS_logits_out) && logitsOut.empty())
    return fail("--logits-out needs a file name");

  runtime::ExecutorOptions executorOptions;
  if (int code = executorOptionsFromFlags(flags, profileMode != ProfileMode::Off, executorOptions))
    return code;
  // What the sequences read: the prompt flags (PromptFlags.h), and teacher
  // forcing's ids.
  tools::RunPrompts prompts;
  if (int code = tools::forcedTokensFromFlags(flags, prompts))
    return code;
  const std::vector<int32_t> &forced = prompts.forced;
  const bool forcedGiven = prompts.forcedGiven;

  if (artifactDir.empty())
    return fail("give the artifact directory (csa-compile --emit=artifact -o DIR)");
  if (randomWeights == !weightsDir.empty())
    return fail("give exactly one of --weights=CKPT_DIR and --random-weights");
  // The tokenizer: --tokenizer, else the checkpoint folder's.
  auto loadedText = tools::loadRunTokenizer(tokenizerFlag, weightsDir);
  if (!loadedText.ok())
    return fail(std::string(loadedText.status().message()));
  std::optional<tokenizer::ModelTokenizer> text = std::move(*loadedText);
  std::vector<int32_t> &prompt = prompts.prompt;
  const int promptSources = tools::promptSourcesGiven(flags);
  // --turns holds the conversation, prompt included; --prefix-cache alone
  // runs the prompt as one turn through the cache.
  const std::string turnsFile = absl::GetFlag(FLAGS_turns);
  const std::string prefixCacheDir = absl::GetFlag(FLAGS_prefix_cache);
  const bool conversation = flags.given(FLAGS_turns) || flags.given(FLAGS_prefix_cache);
  if (flags.given(FLAGS_turns) && turnsFile.empty())
    return fail("--turns needs a file name");
  if (flags.given(FLAGS_prefix_cache) && prefixCacheDir.empty())
    return fail("--prefix-cache needs a directory");
  if (conversation) {
    for (const auto &[given, name] :
         {std::pair<bool, const char *>{batch > 1, "--batch"},
          {!promptsFile.empty(), "--prompts-file"},
          {flags.given(FLAGS_context), "--context"},
          {flags.given(FLAGS_prefill_chunk), "--prefill-chunk"},
          {repeat > 1, "--repeat"},
          {forcedGiven, "--forced-tokens"},
          {flags.given(FLAGS_logits_out), "--logits-out"},
          {flags.given(FLAGS_output), "--output"},
          {printLogits > 0, "--print-logits"},
          {profileMode != ProfileMode::Off, "--profile"},
          {flags.given(FLAGS_analyze), "--analyze"},
          {flags.given(FLAGS_dump_decisions), "--dump-decisions"},
          {flags.given(FLAGS_force_decisions), "--force-decisions"},
          {flags.given(FLAGS_dump_hidden), "--dump-hidden"}})
      if (given)
        return fail(absl::StrCat(name, " does not go with ",
                                 flags.given(FLAGS_turns) ? "--turns" : "--prefix-cache",
                                 " (a conversation runs one sequence, turn by turn)"));
    if (flags.given(FLAGS_turns) && promptSources != 0)
      return fail("--turns holds the prompt: its first turn; give no --prompt flag");
  } else {
    for (const auto &[given, name] :
         {std::pair<bool, const char *>{flags.given(FLAGS_prefix_cache_size), "--prefix-cache-size"},
          {flags.given(FLAGS_local_state_ttl), "--local-state-ttl"},
          {flags.given(FLAGS_prefix_cache_policy), "--prefix-cache-policy"}})
      if (given)
        return fail(absl::StrCat(name, " sets up --prefix-cache; give that too"));
  }
  runtime::prefix::PrefixCacheOptions cacheOptions;
  cacheOptions.directory = prefixCacheDir;
  if (int code = tools::prefixCacheOptionsFromFlags(flags, cacheOptions))
    return code;

  if (promptSources != 1 && !(flags.given(FLAGS_turns) && promptSources == 0))
    return fail("give exactly one of --prompt, --prompt-file, --prompts-file, --prompt-text "
                "and --prompt-text-file");
  if (int code = tools::promptsFromFlags(flags, text ? &*text : nullptr, weightsDir,
                                         flags.given(FLAGS_batch), batch, prompts))
    return code;
  // N new tokens: the prefill's and N - 1 decode steps'.
  const int64_t decodeStepsNeeded = std::max<int64_t>(0, maxNew - 1);
  if (forcedGiven && int64_t(forced.size()) < decodeStepsNeeded)
    return fail(absl::StrCat("--forced-tokens: ", forced.size(), " ids for ",
                             decodeStepsNeeded, " decode steps (--max-new-tokens=",
                             maxNew, " feeds ", decodeStepsNeeded,
                             " tokens after the prefill); give at least ",
                             decodeStepsNeeded));
  // --gpu-profile-steps: decode steps FIRST..LAST of the first run inside
  // the profilers' capture range.
  std::optional<std::pair<int64_t, int64_t>> profileSteps;
  if (const std::string spec = absl::GetFlag(FLAGS_gpu_profile_steps); !spec.empty()) {
    profileSteps = tools::parseIndexRange(spec);
    if (!profileSteps)
      return fail(absl::StrCat("--gpu-profile-steps=", spec,
                               ": give a decode step N or steps N-M (0 <= N <= M)"));
    if (profileSteps->second >= decodeStepsNeeded)
      return fail(absl::StrCat("--gpu-profile-steps=", spec, ": the run has ",
                               decodeStepsNeeded, " decode steps (--max-new-tokens=", maxNew,
                               "), numbered from 0"));
    if (executorOptions.device == runtime::ExecutorOptions::Device::Cpu)
      return fail("--gpu-profile-steps needs the GPU: give --device=cuda");
  }
  // A batch decodes in one step a token, unless asked not to or a dump is
  // asked for (its files are a sequence's: Executor::decodeBatch).
  const bool batchTogether =
      !absl::GetFlag(FLAGS_sequential_batch) && executorOptions.dumpDecisions.empty() &&
      executorOptions.forceDecisions.empty() && executorOptions.dumpHidden.empty() &&
      !executorOptions.analyzeRecall;
  if (!executorOptions.forceDecisions.empty() &&
      !fs::is_directory(executorOptions.forceDecisions))
    return fail("--force-decisions: " + executorOptions.forceDecisions +
                " is not a directory (a --dump-decisions directory)");
  for (auto [flag, dir] : {std::pair<const char *, const std::string *>{
                               "--dump-decisions", &executorOptions.dumpDecisions},
                           {"--dump-hidden", &executorOptions.dumpHidden}}) {
    if (dir->empty())
      continue;
    std::error_code ec;
    fs::create_directories(*dir, ec);
    if (ec || !fs::is_directory(*dir))
      return fail(std::string(flag) + ": cannot make the directory " + *dir +
                  (ec ? ": " + ec.message() : ""));
  }

  auto art = artifact::Artifact::open(artifactDir);
  if (!art.ok())
    return fail(std::string(art.status().message()));
  const size_t longestPrompt = prompts.longest();
  if (absl::Status st = artifact::checkContext(
          art->plan(), context + int64_t(longestPrompt) + maxNew);
      !st.ok())
    return fail(absl::StrCat(context ? absl::StrCat("--context=", context, " + ") : "",
                             prompts.each.empty() ? "" : "the longest ",
                             "prompt of ", longestPrompt, " tokens + ", maxNew,
                             " new: ", st.message()));
  // Forced ids in the vocabulary (the embedding's rows), before anything runs.
  for (const artifact::WeightEntry &w : art->weights().tensors) {
    if (w.name != "embed.weight" || w.shape.empty())
      continue;
    for (size_t i = 0; i < forced.size(); ++i)
      if (forced[i] < 0 || forced[i] >= w.shape[0])
        return fail(absl::StrCat("--forced-tokens: id ", forced[i], " at position ", i,
                                 " (decode step ", i, ") is outside the vocabulary of ",
                                 w.shape[0]));
  }
  std::string removeAfter;
  if (randomWeights) {
    auto dir = tools::makeRandomWeights(*art, weightSeed, progressMode);
    if (!dir.ok())
      return fail(std::string(dir.status().message()));
    weightsDir = *dir;
    removeAfter = *dir;
  }
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      if (!dir.empty()) {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    }
  } cleanup{removeAfter};
  auto ckpt = checkpoint::Checkpoint::open(weightsDir);
  if (!ckpt.ok())
    return fail(std::string(ckpt.status().message()));
  std::string engramMapSource;
  {
    auto map = tools::runEngramTokenMap(*art, engramMapFlag, text ? &*text : nullptr, weightsDir);
    if (!map.ok())
      return fail(std::string(map.status().message()));
    if (*map) {
      executorOptions.engramTokenMap = std::move((*map)->map);
      engramMapSource = (*map)->source;
    }
  }
  // The executor's long work (the weights' upload, each prefill's plan
  // steps) on one progress line at a time, `progressLabel` naming it.
  std::optional<tools::Progress> progressLine;
  std::string progressLabel;
  uint64_t progressDone = 0;
  auto endProgressLine = [&] {
    progressLine.reset();
    progressDone = 0;
  };
  executorOptions.onProgress = [&](const char *what, uint64_t done, uint64_t total) {
    const bool bytes = std::strcmp(what, "weights") == 0;
    if (!progressLine)
      progressLine.emplace(progressLabel.empty() ? std::string(what) : progressLabel, total,
                           bytes ? "B" : "steps", progressMode);
    progressLine->add(done - progressDone);
    progressDone = done;
  };
  auto executor = runtime::Executor::create(*art, *ckpt, executorOptions);
  if (!executor.ok())
    return fail(std::string(executor.status().message()) +
                (executorOptions.device != runtime::ExecutorOptions::Device::Cpu
                     ? " (--device=cpu runs the CPU backend)"
                     : ""));
  runtime::Executor &ex = **executor;
  if (!ex.deviceNote().empty())
    std::cerr << "csa-run: --device=auto runs on the CPU: " << ex.deviceNote() << "\n";
  std::vector<tools::Turn> turns;
  if (conversation) {
    if (!turnsFile.empty()) {
      auto read = tools::readTurns(turnsFile, text ? &*text : nullptr, maxNew, ex.vocabSize());
      if (!read.ok())
        return fail(std::string(read.status().message()));
      turns = std::move(*read);
    } else {
      turns.push_back({prompt, maxNew, "the prompt"});
    }
    prompt = turns.front().tokens; // the warm-up's token
  }
  // --logits-out: one row per step, written as the steps run into a
  // temporary file that is renamed only at the end (the writer removes it on
  // any early return).
  const int64_t logitSteps = 1 + decodeStepsNeeded;
  npy::NpyF32Writer logitsFile;
  if (!logitsOut.empty()) {
    std::vector<int64_t> shape = {logitSteps, ex.vocabSize()};
    if (batch > 1)
      shape.insert(shape.begin(), batch);
    if (absl::Status st = logitsFile.create(logitsOut, shape); !st.ok())
      return fail(absl::StrCat("--logits-out: ", st.message()));
  }
  auto recordLogits = [&](int64_t b, int64_t step, const std::vector<float> &logits) {
    if (!logitsFile.active())
      return absl::OkStatus();
    absl::Status st = logitsFile.writeRow(uint64_t(b * logitSteps + step), logits);
    return st.ok() ? st : absl::DataLossError(absl::StrCat("--logits-out: ", st.message()));
  };

  auto showLogits = [&](const char *what, const std::vector<float> &logits) {
    if (printLogits == 0)
      return;
    std::vector<int64_t> order(logits.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = int64_t(i);
    int64_t k = std::min<int64_t>(printLogits, int64_t(logits.size()));
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t c) {
                        return logits[size_t(a)] > logits[size_t(c)] ||
                               (logits[size_t(a)] == logits[size_t(c)] && a < c);
                      });
    std::printf("%s:", what);
    for (int64_t i = 0; i < k; ++i)
      std::printf(" %lld:%.6g", (long long)order[size_t(i)],
                  double(logits[size_t(order[size_t(i)])]));
    std::printf("\n");
  };

  using Clock = std::chrono::steady_clock;
  // --json: one object, printed at the end (docs/run-json.md).
  Json doc = Json::object();
  doc["schema_version"] = 1;
  doc["version"] = tools::versionLine("csa-run");
  doc["artifact"] = {{"path", artifactDir},
                     {"model", art->manifest().model},
                     {"schedule", art->manifest().schedule}};
  const bool onGpu = ex.device() == runtime::ExecutorOptions::Device::Cuda;
  doc["device"] = onGpu ? "cuda" : "cpu";
  doc["device_note"] = ex.deviceNote();
  doc["threads"] = ex.threads();
  doc["batch"] = batch;
  doc["context"] = context;
  doc["prefill_chunk"] = prefillChunk;
  doc["prompt_tokens"] = longestPrompt;
  if (!prompts.each.empty()) {
    Json each = Json::array();
    for (const std::vector<int32_t> &p : prompts.each)
      each.push_back(p.size());
    doc["prompt_tokens_each"] = each;
  }
  doc["max_new_tokens"] = maxNew;
  doc["weights_upload"] = nullptr;
  doc["warmup_ms"] = nullptr;
  {
    // The weights go to the GPU before anything is timed, in a line of
    // their own (the first prefill's time would otherwise be mostly this).
    auto start = Clock::now();
    progressLabel = "weights to the GPU";
    absl::StatusOr<uint64_t> uploaded = ex.uploadWeights();
    endProgressLine();
    if (!uploaded.ok())
      return fail(std::string(uploaded.status().message()));
    if (*uploaded > 0) {
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      const double gb = double(*uploaded) * 1e-9;
      doc["weights_upload"] = {{"bytes", *uploaded}, {"seconds", s}};
      if (!json)
        std::printf("weights: %.*f %s to the GPU in %.3f s (%.2f GB/s; %llu bytes)\n",
                    gb < 1 ? 1 : 2, gb < 1 ? gb * 1e3 : gb, gb < 1 ? "MB" : "GB", s,
                    gb / std::max(s, 1e-9), static_cast<unsigned long long>(*uploaded));
    }
  }
  if (warmup) {
    // One-time costs (the GPU's weight upload) out of the timings: a
    // 1-token prefill on a sequence that is thrown away.
    runtime::Sequence scratch = ex.newSequence();
    auto start = Clock::now();
    progressLabel = "warm-up prefill";
    auto logits = ex.prefill(scratch, {prompt.front()});
    endProgressLine();
    if (!logits.ok())
      return fail(absl::StrCat("warm-up: ", logits.status().message()));
    const double ms = std::chrono::duration<double>(Clock::now() - start).count() * 1e3;
    doc["warmup_ms"] = ms;
    if (!json)
      std::printf("warm-up: %.3f ms (a 1-token prefill, not counted)\n", ms);
    if (scratch.cachesHeldBy != 0)
      if (absl::Status st = ex.syncToHost(scratch); !st.ok())
        return fail(absl::StrCat("warm-up: ", st.message()));
    ex.resetProfile();
  }

  if (conversation) {
    std::unique_ptr<runtime::prefix::PrefixCache> cache;
    if (!prefixCacheDir.empty()) {
      auto opened = runtime::prefix::PrefixCache::open(
          *art, runtime::prefix::weightsFingerprint(*ckpt, executorOptions.engramTokenMap),
          cacheOptions);
      if (!opened.ok())
        return fail(std::string(opened.status().message()));
      cache = std::move(*opened);
    }
    tools::ConversationOptions o;
    o.cache = cache.get();
    o.params = params;
    o.seed = samplerSeed;
    o.text = text ? &*text : nullptr;
    o.stopAtEos = text && !ignoreEos;
    o.json = json;
    doc["prefix_cache_dir"] = prefixCacheDir;
    if (absl::Status st = tools::runConversation(ex, turns, o, doc); !st.ok())
      return fail(std::string(st.message()));
    if (absl::Status st = ex.checkDeviceStatuses(); !st.ok())
      return fail(std::string(st.message()));
    if (json)
      std::printf("%s\n", doc.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
    return 0;
  }

  /// One timed generation: every sequence's prefill and decode steps.
  using Run = tools::GenerationRun;
  // Generation stops at EOS when the run does not need every step.
  const bool stopAtEos = text && !ignoreEos && !forcedGiven && logitsOut.empty();
  // Text as it is produced: one sequence, no logits lines in between.
  const bool streamText = !json && text && batch == 1 && printLogits == 0;
  // The first run prints its logits and text and writes --logits-out.
  // Per-step output on stdout (text as it is produced, logits lines): no
  // decode progress line in between unless --progress.
  const bool printsSteps = streamText || printLogits > 0;
  auto generate = [&](Run &r, bool first, int64_t runIndex) -> absl::Status {
    // Progress lines name the run (--repeat) and the sequence (--batch).
    auto label = [&](const std::string &what, int64_t b) {
      std::string out = repeat > 1 ? absl::StrCat("run ", runIndex + 1, " of ", repeat, ", ")
                                   : std::string();
      absl::StrAppend(&out, what);
      if (b >= 0 && batch > 1)
        absl::StrAppend(&out, " (sequence ", b + 1, " of ", batch, ")");
      return out;
    };
    std::vector<sampling::Sampler> samplers;
    r.generated.assign(size_t(batch), {});
    r.stopped.assign(size_t(batch), 0);
    r.stepSequences = batchTogether ? batch : 1;
    for (int64_t b = 0; b < batch; ++b) {
      r.sequences.push_back(ex.newSequence());
      samplers.emplace_back(params, samplerSeed + uint64_t(b));
    }
    std::vector<int32_t> next(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      absl::StatusOr<std::vector<float>> logits;
      const std::vector<int32_t> &prompt = prompts.of(b);
      if (context > 0) {
        auto synthetic = ex.syntheticSequence(context, weightSeed + uint64_t(b));
        if (!synthetic.ok())
          return absl::InvalidArgumentError(
              absl::StrCat("--context: ", synthetic.status().message()));
        r.sequences[size_t(b)] = std::move(*synthetic);
      }
      // The global caches sized for the whole run at once, so that no step
      // allocates device memory and copies a cache to grow it.
      if (absl::Status st = ex.reserve(r.sequences[size_t(b)],
                                       context + int64_t(prompt.size()) + maxNew);
          !st.ok())
        return st;
      if (context > 0 && prefillChunk == 0) {
        tools::Progress promptLine(
            label(absl::StrCat("prompt of ", prompt.size(), " tokens, token by token"), b),
            prompt.size(), "tokens", progressMode);
        for (int32_t t : prompt) {
          auto start = Clock::now();
          logits = ex.decode(r.sequences[size_t(b)], t);
          const double s = std::chrono::duration<double>(Clock::now() - start).count();
          r.prefillSeconds += s;
          r.promptSteps.push_back(s);
          if (!logits.ok())
            break;
          promptLine.add(1);
        }
      } else {
        // One prefill, or --prefill-chunk's chunks, each extending the
        // sequence (the first is its prefill unless --context made one).
        auto start = Clock::now();
        const size_t chunkSize = prefillChunk > 0 ? size_t(prefillChunk) : prompt.size();
        progressLabel = label(absl::StrCat("prefill of ", prompt.size(), " tokens",
                                           prefillChunk > 0
                                               ? absl::StrCat(" in chunks of ", prefillChunk)
                                               : ""),
                              b);
        runtime::Sequence &seq = r.sequences[size_t(b)];
        size_t at = 0; // (an empty prompt still goes to the executor, which refuses it)
        do {
          const std::vector<int32_t> chunk(
              prompt.begin() + at, prompt.begin() + std::min(prompt.size(), at + chunkSize));
          logits = seq.position == 0 ? ex.prefill(seq, chunk) : ex.extend(seq, chunk);
          if (!logits.ok() && prefillChunk > 0)
            logits = absl::Status(logits.status().code(),
                                  absl::StrCat("the chunk at prompt token ", at, ": ",
                                               logits.status().message()));
          at += chunkSize;
        } while (logits.ok() && at < prompt.size());
        endProgressLine();
        r.prefillEach.push_back(std::chrono::duration<double>(Clock::now() - start).count());
        r.prefillSeconds += r.prefillEach.back();
      }
      if (!logits.ok())
        return absl::Status(logits.status().code(),
                            absl::StrCat("prefill: ", logits.status().message()));
      if (first) {
        if (b == 0)
          showLogits("prefill logits", *logits);
        if (absl::Status st = recordLogits(b, 0, *logits); !st.ok())
          return st;
      }
      auto token = samplers[size_t(b)].next(*logits);
      if (!token.ok())
        return token.status();
      next[size_t(b)] = *token;
    }
    tokenizer::Utf8Stream stream;
    const bool streaming = streamText && first;
    if (streaming)
      std::printf("text: ");
    // The tokens generated (the prefill's first of each sequence too).
    tools::Progress decodeLine(
        label("decode", -1), uint64_t(maxNew * batch), "tokens",
        printsSteps && progressMode == tools::ProgressMode::Auto ? tools::ProgressMode::Never
                                                                 : progressMode);
    // The capture range around decode steps profileSteps (the first run).
    bool profiling = false;
    auto profileRangeAt = [&](int64_t step) -> absl::Status {
      if (!first || !profileSteps)
        return absl::OkStatus();
      const bool inside = step >= profileSteps->first && step <= profileSteps->second;
      if (inside == profiling)
        return absl::OkStatus();
      profiling = inside;
      if (absl::Status st = ex.profilerRange(inside); !st.ok())
        return absl::Status(st.code(), absl::StrCat("--gpu-profile-steps: ", st.message()));
      if (inside)
        std::fprintf(stderr, "gpu profiler: capture range from decode step %lld to %lld\n",
                     (long long)profileSteps->first, (long long)profileSteps->second);
      return absl::OkStatus();
    };
    for (int64_t step = 0; step < maxNew; ++step) {
      if (absl::Status st = profileRangeAt(step); !st.ok())
        return st;
      // The sequences that go on to a forward this step.
      std::vector<int64_t> active;
      for (int64_t b = 0; b < batch; ++b) {
        if (r.stopped[size_t(b)])
          continue;
        r.generated[size_t(b)].push_back(next[size_t(b)]);
        decodeLine.add(1);
        if (streaming) {
          std::fputs(stream.feed(text->tokenizer.tokenBytes(next[size_t(b)])).c_str(), stdout);
          std::fflush(stdout);
        }
        if (stopAtEos && text->isEos(next[size_t(b)])) {
          r.stopped[size_t(b)] = 1;
          continue;
        }
        if (step + 1 == maxNew)
          continue; // the last token needs no forward
        active.push_back(b);
      }
      // Teacher forcing: the forced id is fed, the sampled one recorded.
      auto fedOf = [&](int64_t b) { return forcedGiven ? forced[size_t(step)] : next[size_t(b)]; };
      auto sampleFrom = [&](int64_t b, const std::vector<float> &logits) -> absl::Status {
        if (first) {
          if (b == 0)
            showLogits(absl::StrCat("decode ", step, " logits").c_str(), logits);
          if (absl::Status st = recordLogits(b, step + 1, logits); !st.ok())
            return st;
        }
        auto token = samplers[size_t(b)].next(logits);
        if (!token.ok())
          return token.status();
        next[size_t(b)] = *token;
        return absl::OkStatus();
      };
      auto stepFailed = [&](const absl::Status &st) {
        return absl::Status(st.code(), absl::StrCat("decode step ", step, ": ", st.message()));
      };
      // Greedy with no logits to show or save: the step returns the tokens
      // (picked on the GPU where the logits are, only the ids come back).
      const bool greedyStep = params.temperature == 0 && !greedyOnHost &&
                              !(first && (printLogits > 0 || logitsFile.active()));
      auto timedGreedy = [&](const std::vector<int64_t> &members) -> absl::Status {
        std::vector<runtime::Sequence *> sequences;
        std::vector<int32_t> fed;
        for (int64_t b : members) {
          sequences.push_back(&r.sequences[size_t(b)]);
          fed.push_back(fedOf(b));
        }
        auto start = Clock::now();
        auto ids = ex.decodeGreedy(sequences, fed);
        const double s = std::chrono::duration<double>(Clock::now() - start).count();
        r.decodeSeconds += s;
        r.decodeSteps.push_back(s);
        r.decodeTokens += int64_t(members.size());
        if (!ids.ok())
          return stepFailed(ids.status());
        for (size_t j = 0; j < members.size(); ++j)
          next[size_t(members[j])] = (*ids)[j];
        return absl::OkStatus();
      };
      if (greedyStep && batchTogether && active.size() > 1) {
        if (absl::Status st = timedGreedy(active); !st.ok())
          return st;
        continue;
      }
      if (greedyStep) {
        for (int64_t b : active)
          if (absl::Status st = timedGreedy({b}); !st.ok())
            return st;
        continue;
      }
      if (batchTogether && active.size() > 1) {
        // One step for every sequence: logits [sequences, vocab].
        std::vector<runtime::Sequence *> sequences;
        std::vector<int32_t> fed;
        for (int64_t b : active) {
          sequences.push_back(&r.sequences[size_t(b)]);
          fed.push_back(fedOf(b));
        }
        auto start = Clock::now();
        auto logits = ex.decodeBatch(sequences, fed);
        const double s = std::chrono::duration<double>(Clock::now() - start).count();
        r.decodeSeconds += s;
        r.decodeSteps.push_back(s);
        r.decodeTokens += int64_t(active.size());
        if (!logits.ok())
          return stepFailed(logits.status());
        const size_t vocab = logits->size() / active.size();
        for (size_t j = 0; j < active.size(); ++j) {
          const std::vector<float> row(logits->begin() + j * vocab,
                                       logits->begin() + (j + 1) * vocab);
          if (absl::Status st = sampleFrom(active[j], row); !st.ok())
            return st;
        }
        continue;
      }
      for (int64_t b : active) {
        auto start = Clock::now();
        auto logits = ex.decode(r.sequences[size_t(b)], fedOf(b));
        const double s = std::chrono::duration<double>(Clock::now() - start).count();
        r.decodeSeconds += s;
        r.decodeSteps.push_back(s);
        r.decodeTokens += 1;
        if (!logits.ok())
          return stepFailed(logits.status());
        if (absl::Status st = sampleFrom(b, *logits); !st.ok())
          return st;
      }
    }
    if (absl::Status st = profileRangeAt(maxNew); !st.ok())
      return st;
    decodeLine.finish();
    if (streaming)
      std::printf("%s\n", stream.finish().c_str());
    if (absl::Status st = ex.checkDeviceStatuses(); !st.ok())
      return st;
    for (const runtime::Sequence &s : r.sequences) {
      r.cacheHeld += s.cacheBytes();
      r.cacheUsed += s.cacheBytesInUse(ex.plan());
    }
    r.position = r.sequences[0].position;
    return absl::OkStatus();
  };

  // --repeat: every run from fresh sequences and samplers (the same ids);
  // the sequences of all but the last run go (their device copies too).
  std::vector<Run> runs(static_cast<size_t>(repeat));
  for (int64_t i = 0; i < repeat; ++i) {
    Run &r = runs[size_t(i)];
    if (absl::Status st = generate(r, i == 0, i); !st.ok())
      return fail(std::string(st.message()));
    if (r.generated != runs[0].generated)
      std::cerr << "csa-run: warning: run " << i + 1
                << " generated other ids than run 1 (the output is run 1's)\n";
    if (i + 1 < repeat) {
      for (runtime::Sequence &s : r.sequences)
        if (s.cachesHeldBy != 0)
          if (absl::Status st = ex.syncToHost(s); !st.ok())
            return fail(std::string(st.message()));
      r.sequences.clear();
    }
  }
  const Run &run = runs[0];

  std::ostringstream ids;
  for (int64_t b = 0; b < batch; ++b) {
    for (size_t i = 0; i < run.generated[size_t(b)].size(); ++i)
      ids << (i ? " " : "") << run.generated[size_t(b)][i];
    ids << "\n";
  }
  if (!outputFile.empty()) {
    if (absl::Status st = support::writeFileAtomically(outputFile, ids.str()); !st.ok())
      return fail(absl::StrCat("--output: ", st.message()));
  }
  if (logitsFile.active())
    if (absl::Status st = logitsFile.commit(); !st.ok())
      return fail(absl::StrCat("--logits-out: ", st.message()));
  std::vector<std::string> texts;
  if (text)
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<int64_t> tokens(run.generated[size_t(b)].begin(),
                                  run.generated[size_t(b)].end());
      texts.push_back(text->tokenizer.decode(tokens));
    }
  int64_t promptTokens = 0;
  for (int64_t b = 0; b < batch; ++b)
    promptTokens += int64_t(prompts.of(b).size());
  using tools::tokensPerSecond;
  doc["prefill"] = tools::prefillJson(run, promptTokens);
  doc["decode"] = tools::decodeJson(run);
  Json generatedJson = Json::array(), stoppedJson = Json::array();
  for (int64_t b = 0; b < batch; ++b) {
    generatedJson.push_back(run.generated[size_t(b)]);
    stoppedJson.push_back(run.stopped[size_t(b)] != 0);
  }
  doc["generated"] = generatedJson;
  doc["stopped_at_eos"] = stoppedJson;
  doc["text"] = text ? Json(texts) : Json(nullptr);
  doc["cache"] = {{"bytes_in_use", run.cacheUsed},
                  {"bytes_held", run.cacheHeld},
                  {"sequences", batch},
                  {"tokens_per_sequence", run.position},
                  {"global_bytes_per_token", ex.plan().globalBytesPerToken()},
                  {"fixed_bytes_per_sequence", ex.plan().fixedBytesPerSequence()},
                  {"bytes_per_sequence_at_max_context",
                   ex.plan().bytesPerSequence(ex.plan().maxContext)},
                  {"max_context", ex.plan().maxContext}};
  doc["transients"] = {{"peak_bytes", ex.lastTiming().peakTransientBytes},
                       {"count", ex.plan().transients.size()},
                       {"planned_bytes", ex.plan().transientBytes()}};
  doc["engram_token_map"] =
      engramMapSource.empty() ? Json(nullptr) : Json(engramMapSource);
  doc["unused_weights"] = ex.unusedWeights().size();

  if (!json) {
    std::printf("generated: %s", ids.str().c_str());
    if (text && !streamText)
      for (int64_t b = 0; b < batch; ++b)
        std::printf("text%s: %s\n", batch > 1 ? absl::StrCat("[", b, "]").c_str() : "",
                    texts[size_t(b)].c_str());
    for (int64_t b = 0; b < batch; ++b)
      if (run.stopped[size_t(b)])
        std::printf("%s stopped at EOS after %zu tokens\n",
                    batch > 1 ? absl::StrCat("sequence ", b).c_str() : "generation",
                    run.generated[size_t(b)].size());
    if (context > 0)
      std::printf("context: %lld synthetic positions per sequence; the prompt "
                  "ran %s\n",
                  (long long)context,
                  prefillChunk > 0 ? absl::StrCat("in chunks of ", prefillChunk).c_str()
                                   : "token by token");
    std::printf("prefill: %lld tokens in %.3f ms (%.1f tokens/s)\n",
                (long long)promptTokens, run.prefillSeconds * 1e3,
                tokensPerSecond(double(promptTokens), run.prefillSeconds));
    std::printf("decode: %zu steps in %.3f ms (%lld tokens, %.1f tokens/s)\n",
                run.decodeSteps.size(), run.decodeSeconds * 1e3, (long long)run.decodeTokens,
                tokensPerSecond(double(run.decodeTokens), run.decodeSeconds));
    if (run.prefillEach.size() > 1) {
      // The first sequence also pays one-time costs (a GPU's weight upload).
      std::printf("prefill per sequence:");
      for (size_t b = 0; b < run.prefillEach.size(); ++b)
        std::printf("%s %.3f ms", b ? "," : "", run.prefillEach[b] * 1e3);
      std::printf("\n");
    }
    if (const std::vector<double> sorted = run.sortedSteps(); !sorted.empty())
      std::printf("decode step: median %.3f ms over %zu steps%s\n",
                  sorted[sorted.size() / 2] * 1e3, sorted.size(),
                  run.stepSequences > 1
                      ? absl::StrCat(" (steps of up to ", run.stepSequences, " sequences)").c_str()
                      : "");
    std::printf("cache bytes: %llu in use, %llu held (%lld sequences at %lld "
                "tokens; plan: %.2f B/token global KV + %llu B fixed per "
                "sequence)\n",
                (unsigned long long)run.cacheUsed, (unsigned long long)run.cacheHeld,
                (long long)batch, (long long)run.position, ex.plan().globalBytesPerToken(),
                (unsigned long long)ex.plan().fixedBytesPerSequence());
    std::printf("transient bytes: %llu peak (the plan's %zu transients, "
                "buffers reused after each one's last use)\n",
                (unsigned long long)ex.lastTiming().peakTransientBytes,
                ex.plan().transients.size());
    if (!engramMapSource.empty())
      std::printf("engram token map: %s\n", engramMapSource.c_str());
    if (!ex.unusedWeights().empty())
      std::printf("weights: %zu tensors of the checkpoint are not used by this artifact "
                  "(skipped, --allow-unused-weights), e.g. %s\n",
                  ex.unusedWeights().size(), ex.unusedWeights().front().c_str());
  }
  doc["gpu"] = nullptr;
  if (onGpu)
    tools::reportGpu(ex.lastTiming().gpu, json, doc);
  if (flags.given(FLAGS_repeat))
    tools::reportRepeat(runs, promptTokens, warmup, json, doc);

  if (executorOptions.profile) {
    if (json)
      doc["profile"] = tools::profileJson(ex.profile(), ex.layerProfile());
    else
      tools::printProfile(ex.profile());
  }
  if (executorOptions.analyzeRecall) {
    if (json)
      doc["recall"] = tools::recallJson(ex.recall(), art->manifest().schedule);
    else
      tools::printRecall(ex.recall(), art->manifest().schedule);
  }
  if (json)
    std::printf("%s\n", doc.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  return 0;
}

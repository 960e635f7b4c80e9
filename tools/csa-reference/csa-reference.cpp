//===- csa-reference.cpp - Run the reference forward ------------------------===//
//
// Runs the plain C++ reference forward (models/reference) on a checkpoint:
// prefill a prompt, then greedy decode. The reference is the oracle compiled
// paths are checked against; this tool is how a person looks at it.
//
//   csa-reference CKPT_DIR --prompt=1,2,3 --decode=16
//   csa-reference CKPT_DIR --prompt=1,2,3 --publication=release
//   csa-reference CKPT_DIR --prompt-file=ids.txt --bounded-replay=21:128
//   csa-reference CKPT_DIR --prompt=1,2,3 --main-kv-format=fp8 --index-key-format=fp8
//
//===----------------------------------------------------------------------===//
#include "runtime/support/Dumps.h"
#include "tools/support/Flags.h"
#include "tools/support/LastResort.h"
#include "tools/support/Version.h"
#include "models/config/ModelConfig.h"
#include "models/reference/ReferenceModel.h"
#include "models/schedule/Schedule.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/sampling/TokenIds.h"
#include "runtime/tokenizer/EngramTokenMap.h"
#include "runtime/tokenizer/ModelTokenizer.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

#include <algorithm>
#include <filesystem>
#include <climits>
#include <optional>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

// The flags (tools/support/Flags.h: --flag=value or --flag value).
ABSL_FLAG(std::string, prompt, "", "the prompt's token ids, comma-separated");
ABSL_FLAG(std::string, prompt_file, "", "a file of the prompt's token ids");
ABSL_FLAG(std::string, prompt_text, "", "the prompt as text (needs a tokenizer)");
ABSL_FLAG(std::string, tokenizer, "", "a tokenizer folder or tokenizer.json");
ABSL_FLAG(std::string, engram_token_map, "",
          "the Engram layers' token map: a JSON file or 'modulo'");
ABSL_FLAG(int64_t, decode, 0, "greedy decode steps after the prefill");
ABSL_FLAG(int64_t, top, 5, "logits printed a step");
ABSL_FLAG(std::string, config, "", "the model config (default CKPT_DIR/config.json)");
ABSL_FLAG(std::string, schedule, "", "a schedule string in place of the config's");
ABSL_FLAG(std::string, publication, "owner",
          "when the index is published: 'owner' or 'release'");
ABSL_FLAG(std::string, main_kv_format, "fp4",
          "the main-KV row format: 'fp4' (released, 288 B) or 'fp8' (V4's, 584 B)");
ABSL_FLAG(std::string, index_key_format, "fp4",
          "the index-key row format: 'fp4' (released, 68 B) or 'fp8' (132 B)");
ABSL_FLAG(std::string, bounded_replay, "",
          "bounded replay, alone or as START:TAIL (the value only after '=')");
ABSL_FLAG(std::string, dump_hidden, "",
          "write every block's output to this folder (csa-run's layout)");
ABSL_FLAG(std::string, dump_decisions, "",
          "write every top-k set, HSI pool and MoE routing to this folder");

namespace {

using namespace csa;

/// The usage text (--help: with the flags' list, on stdout).
constexpr const char *kUsage =
    "usage: csa-reference CKPT_DIR (--prompt=ID,ID,... | --prompt-file=FILE)\n"
         "         [--decode=N] [--config=FILE] [--schedule=STR]\n"
         "         [--publication=owner|release] [--bounded-replay[=START:TAIL]]\n"
         "         [--main-kv-format=fp4|fp8] [--index-key-format=fp4|fp8]\n"
         "         [--top=K] [--prompt-text=TEXT] [--tokenizer=DIR|FILE]\n"
         "         [--engram-token-map=FILE|modulo]\n"
         "         [--dump-hidden=DIR] [--dump-decisions=DIR]\n"
         "Prefills the prompt at position 0 and greedily decodes N tokens with\n"
         "the reference forward; prints the top-K logits of each step.\n"
         "The config defaults to CKPT_DIR/config.json. The tokenizer (for\n"
         "--prompt-text, the generated text and the Engram token map) defaults\n"
         "to CKPT_DIR/tokenizer.json; the map is chosen as csa-run chooses it.\n"
         "--dump-hidden and --dump-decisions write what csa-run's flags of the\n"
         "same names write, indexed by call and layer block (dumps.jsonl), so\n"
         "that csa-diff compares a compiled run with the reference layer by layer.\n";

int fail(const std::string &message) {
  std::cerr << "csa-reference: error: " << message << "\n";
  return 1;
}


void printTop(const std::vector<float> &logits, int top, int64_t step) {
  std::vector<int64_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = int64_t(i);
  top = std::min<int>(top, int(order.size()));
  std::partial_sort(order.begin(), order.begin() + top, order.end(),
                    [&](int64_t a, int64_t b) {
                      return logits[size_t(a)] > logits[size_t(b)] ||
                             (logits[size_t(a)] == logits[size_t(b)] && a < b);
                    });
  std::printf("position %lld:", (long long)step);
  for (int i = 0; i < top; ++i)
    std::printf(" %lld (%.4f)", (long long)order[size_t(i)],
                logits[size_t(order[size_t(i)])]);
  std::printf("\n");
}

} // namespace

int main(int argc, char **argv) {
  csa::tools::installLastResortHandler("csa-reference");
  tools::CommandLine flags("csa-reference", kUsage);
  flags.implicitValue(FLAGS_bounded_replay, "")
      .range<int64_t>(FLAGS_decode, 0, INT64_MAX, "needs a count >= 0")
      .range<int64_t>(FLAGS_top, 1, INT_MAX, "needs a count >= 1");
  if (!flags.parse(argc, argv))
    return flags.exitCode();
  if (flags.positional().empty())
    return flags.usage();
  const std::optional<std::string> checkpointArg = flags.singlePositional("checkpoint directory");
  if (!checkpointArg)
    return 2;
  const std::string dir = *checkpointArg;
  const std::string configPath = absl::GetFlag(FLAGS_config);
  const std::string scheduleString = absl::GetFlag(FLAGS_schedule);
  std::string promptText = absl::GetFlag(FLAGS_prompt);
  const std::string promptFile = absl::GetFlag(FLAGS_prompt_file);
  const std::string textPrompt = absl::GetFlag(FLAGS_prompt_text);
  const bool textPromptGiven = flags.given(FLAGS_prompt_text);
  const std::string tokenizerFlag = absl::GetFlag(FLAGS_tokenizer);
  const std::string engramMapFlag = absl::GetFlag(FLAGS_engram_token_map);
  if (flags.given(FLAGS_engram_token_map) && engramMapFlag.empty())
    return fail("--engram-token-map needs a file or 'modulo'");
  const int64_t decodeSteps = absl::GetFlag(FLAGS_decode);
  const int top = int(absl::GetFlag(FLAGS_top));
  reference::ReferenceOptions options;
  if (const std::string v = absl::GetFlag(FLAGS_publication); v == "owner")
    options.publication = reference::ReferenceOptions::IndexPublication::Owner;
  else if (v == "release")
    options.publication = reference::ReferenceOptions::IndexPublication::Release;
  else
    return fail("--publication is 'owner' or 'release', got '" + v + "'");
  if (const std::string v = absl::GetFlag(FLAGS_main_kv_format); v == "fp4")
    options.mainKvFormat = reference::ReferenceOptions::MainKvFormat::Fp4;
  else if (v == "fp8")
    options.mainKvFormat = reference::ReferenceOptions::MainKvFormat::Fp8;
  else
    return fail("--main-kv-format is 'fp4' or 'fp8', got '" + v + "'");
  if (const std::string v = absl::GetFlag(FLAGS_index_key_format); v == "fp4")
    options.indexKeyFormat = reference::ReferenceOptions::IndexKeyFormat::Fp4;
  else if (v == "fp8")
    options.indexKeyFormat = reference::ReferenceOptions::IndexKeyFormat::Fp8;
  else
    return fail("--index-key-format is 'fp4' or 'fp8', got '" + v + "'");
  if (flags.given(FLAGS_bounded_replay)) {
    options.boundedReplay = true;
    if (const std::string v = absl::GetFlag(FLAGS_bounded_replay); !v.empty()) {
      std::vector<std::string> parts = absl::StrSplit(v, ':');
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &options.replayStartLayer) ||
          !absl::SimpleAtoi(parts[1], &options.replayTail) ||
          options.replayStartLayer < 0 || options.replayTail < 1)
        return fail("--bounded-replay=START:TAIL needs a layer >= 0 and a "
                    "tail >= 1, got '" + v + "'");
    }
  }
  std::optional<tokenizer::ModelTokenizer> text;
  const std::string tokenizerAt =
      !tokenizerFlag.empty() ? tokenizerFlag
      : tokenizer::hasTokenizer(dir) ? dir : std::string();
  if (!tokenizerAt.empty()) {
    auto loaded = tokenizer::ModelTokenizer::load(tokenizerAt);
    if (!loaded.ok())
      return fail(std::string(loaded.status().message()));
    text = std::move(*loaded);
  }
  std::vector<int32_t> prompt;
  std::string error;
  if (textPromptGiven) {
    if (!promptText.empty() || !promptFile.empty())
      return fail("give one of --prompt, --prompt-file and --prompt-text");
    if (!text)
      return fail("--prompt-text needs a tokenizer: " + dir +
                  " has no tokenizer.json; give --tokenizer=DIR|tokenizer.json");
    auto ids = text->encodePrompt(textPrompt);
    if (!ids.ok())
      return fail(std::string(ids.status().message()));
    if (ids->empty())
      return fail("the prompt text encodes to no tokens");
    prompt.assign(ids->begin(), ids->end());
  } else {
    if (!sampling::promptText(promptText, promptFile, promptText, error))
      return fail(error);
    if (!sampling::parseTokenIds(promptText, prompt, error))
      return fail("prompt: " + error);
  }

  auto config =
      loadModelConfig(configPath.empty() ? dir + "/config.json" : configPath);
  if (!config.ok())
    return fail(std::string(config.status().message()));
  auto schedule = scheduleString.empty()
                      ? scheduleFromConfig(*config)
                      : scheduleFromString(*config, scheduleString);
  if (!schedule.ok())
    return fail(std::string(schedule.status().message()));
  auto ckpt = checkpoint::Checkpoint::open(dir);
  if (!ckpt.ok())
    return fail(std::string(ckpt.status().message()));
  reference::TensorSource source = reference::checkpointTensorSource(*ckpt);
  std::string engramMapSource;
  if (!config->engramLayerIds.empty()) {
    auto map = tokenizer::chooseEngramTokenMap(
        {config->vocabSize, config->engramCompressedVocabSize, config->engramPadId},
        engramMapFlag, text ? &text->tokenizer : nullptr, text ? text->path : "", dir);
    if (!map.ok())
      return fail(std::string(map.status().message()));
    options.engramTokenMap = std::move(map->map);
    engramMapSource = map->source;
  }

  // Dumps: each array the forward shows goes to its folder, named
  // r<call>_<entry>-<n>_<what>.npy (n counts the call's arrays) and indexed
  // by call, entry and layer block (runtime/support/Dumps.h).
  const std::string dumpHidden = absl::GetFlag(FLAGS_dump_hidden),
                    dumpDecisions = absl::GetFlag(FLAGS_dump_decisions);
  int64_t call = 0, shown = 0;
  absl::Status dumpStatus;
  if (flags.given(FLAGS_dump_hidden) && dumpHidden.empty())
    return fail("--dump-hidden needs a folder");
  if (flags.given(FLAGS_dump_decisions) && dumpDecisions.empty())
    return fail("--dump-decisions needs a folder");
  for (const auto &[flag, dir] : {std::pair<const char *, std::string>{"--dump-hidden", dumpHidden},
                                  {"--dump-decisions", dumpDecisions}}) {
    if (dir.empty())
      continue;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || !std::filesystem::is_directory(dir))
      return fail(std::string(flag) + ": cannot make the directory " + dir +
                  (ec ? ": " + ec.message() : ""));
    if (absl::Status st = npy::startDumpIndex(dir); !st.ok())
      return fail(std::string(st.message()));
  }
  if (!dumpHidden.empty() || !dumpDecisions.empty())
    options.onDump = [&](const reference::ReferenceOptions::DumpArray &a) {
      const std::string &dir = a.what == "hidden" ? dumpHidden : dumpDecisions;
      if (dir.empty() || !dumpStatus.ok())
        return;
      npy::DumpEntry e;
      e.call = call;
      e.entry = call == 0 ? "prefill" : "decode";
      e.block = a.block;
      e.what = a.what;
      e.file = absl::StrFormat("r%03d_%s-%d_%s.npy", call, e.entry, shown++, a.what);
      dumpStatus = npy::writeArray(dir + "/" + e.file, a.descr, a.shape, a.bytes.data(),
                                   a.bytes.size());
      if (dumpStatus.ok())
        dumpStatus = npy::appendDumpIndex(dir, e);
    };

  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  auto model = reference::ReferenceModel::create(*config, *schedule, source,
                                                 options);
  if (!model.ok())
    return fail(std::string(model.status().message()));
  auto t1 = Clock::now();
  auto logits = (*model)->prefill(prompt);
  if (!logits.ok())
    return fail(std::string(logits.status().message()));
  if (!dumpStatus.ok())
    return fail(std::string(dumpStatus.message()));
  auto t2 = Clock::now();
  printTop(*logits, top, int64_t(prompt.size()) - 1);
  std::vector<int32_t> generated;
  for (int64_t step = 0; step < decodeSteps; ++step) {
    int32_t next = int32_t(std::max_element(logits->begin(), logits->end()) -
                           logits->begin());
    generated.push_back(next);
    ++call;
    shown = 0;
    logits = (*model)->decode(next);
    if (!logits.ok())
      return fail(std::string(logits.status().message()));
    if (!dumpStatus.ok())
      return fail(std::string(dumpStatus.message()));
    printTop(*logits, top, (*model)->position() - 1);
  }
  auto t3 = Clock::now();
  auto ms = [](auto a, auto b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  std::printf("generated:");
  for (int32_t t : generated)
    std::printf(" %d", t);
  std::printf("\n");
  if (text) {
    std::vector<int64_t> ids(generated.begin(), generated.end());
    std::printf("text: %s\n", text->tokenizer.decode(ids).c_str());
  }
  std::printf("load %.1f ms, prefill %zu tokens %.1f ms, decode %lld steps "
              "%.1f ms\n",
              ms(t0, t1), prompt.size(), ms(t1, t2), (long long)decodeSteps,
              ms(t2, t3));
  if (!engramMapSource.empty())
    std::printf("engram token map: %s\n", engramMapSource.c_str());
  return 0;
}

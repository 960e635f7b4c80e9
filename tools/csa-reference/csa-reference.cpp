//===- csa-reference.cpp - Run the reference forward ------------------------===//
//
// Runs the plain C++ reference forward (models/reference) on a checkpoint:
// prefill a prompt, then greedy decode. The reference is the oracle compiled
// paths are checked against; this tool is how a person looks at it.
//
//   csa-reference CKPT_DIR --prompt=1,2,3 --decode=16
//   csa-reference CKPT_DIR --prompt=1,2,3 --publication=release
//   csa-reference CKPT_DIR --prompt-file=ids.txt --bounded-replay=21:128
//
//===----------------------------------------------------------------------===//
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
#include "absl/strings/str_split.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

namespace {

using namespace csa;

int usage() {
  std::cerr
      << "usage: csa-reference CKPT_DIR (--prompt=ID,ID,... | --prompt-file=FILE)\n"
         "         [--decode=N] [--config=FILE] [--schedule=STR]\n"
         "         [--publication=owner|release] [--bounded-replay[=START:TAIL]]\n"
         "         [--top=K] [--prompt-text=TEXT] [--tokenizer=DIR|FILE]\n"
         "         [--engram-token-map=FILE|modulo]\n"
         "Prefills the prompt at position 0 and greedily decodes N tokens with\n"
         "the reference forward; prints the top-K logits of each step.\n"
         "The config defaults to CKPT_DIR/config.json. The tokenizer (for\n"
         "--prompt-text, the generated text and the Engram token map) defaults\n"
         "to CKPT_DIR/tokenizer.json; the map is chosen as csa-run chooses it.\n";
  return 2;
}

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
  if (csa::tools::answerVersion(argc, argv, "csa-reference"))
    return 0;
  std::string dir, configPath, scheduleString, promptText, promptFile;
  std::string textPrompt, tokenizerFlag, engramMapFlag;
  bool textPromptGiven = false;
  int64_t decodeSteps = 0;
  int top = 5;
  reference::ReferenceOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const std::string &flag) -> const char * {
      return arg.rfind(flag + "=", 0) == 0 ? argv[i] + flag.size() + 1 : nullptr;
    };
    if (const char *v = value("--prompt")) {
      promptText = v;
    } else if (const char *v = value("--prompt-file")) {
      promptFile = v;
    } else if (const char *v = value("--prompt-text")) {
      textPrompt = v, textPromptGiven = true;
    } else if (const char *v = value("--tokenizer")) {
      tokenizerFlag = v;
    } else if (const char *v = value("--engram-token-map")) {
      engramMapFlag = v;
      if (engramMapFlag.empty())
        return fail("--engram-token-map needs a file or 'modulo'");
    } else if (const char *v = value("--decode")) {
      if (!absl::SimpleAtoi(v, &decodeSteps) || decodeSteps < 0)
        return fail("--decode needs a count >= 0");
    } else if (const char *v = value("--top")) {
      if (!absl::SimpleAtoi(v, &top) || top < 1)
        return fail("--top needs a count >= 1");
    } else if (const char *v = value("--config")) {
      configPath = v;
    } else if (const char *v = value("--schedule")) {
      scheduleString = v;
    } else if (const char *v = value("--publication")) {
      if (std::string(v) == "owner")
        options.publication = reference::ReferenceOptions::IndexPublication::Owner;
      else if (std::string(v) == "release")
        options.publication = reference::ReferenceOptions::IndexPublication::Release;
      else
        return fail("--publication is 'owner' or 'release', got '" +
                    std::string(v) + "'");
    } else if (arg == "--bounded-replay") {
      options.boundedReplay = true;
    } else if (const char *v = value("--bounded-replay")) {
      options.boundedReplay = true;
      std::vector<std::string> parts = absl::StrSplit(v, ':');
      if (parts.size() != 2 ||
          !absl::SimpleAtoi(parts[0], &options.replayStartLayer) ||
          !absl::SimpleAtoi(parts[1], &options.replayTail) ||
          options.replayStartLayer < 0 || options.replayTail < 1)
        return fail("--bounded-replay=START:TAIL needs a layer >= 0 and a "
                    "tail >= 1, got '" + std::string(v) + "'");
    } else if (arg == "--help" || arg == "-h") {
      return usage(), 0;
    } else if (!arg.empty() && arg[0] == '-') {
      return fail("unknown flag '" + arg + "'");
    } else if (dir.empty()) {
      dir = arg;
    } else {
      return fail("more than one checkpoint given ('" + dir + "', '" + arg +
                  "')");
    }
  }
  if (dir.empty())
    return usage();
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
  auto t2 = Clock::now();
  printTop(*logits, top, int64_t(prompt.size()) - 1);
  std::vector<int32_t> generated;
  for (int64_t step = 0; step < decodeSteps; ++step) {
    int32_t next = int32_t(std::max_element(logits->begin(), logits->end()) -
                           logits->begin());
    generated.push_back(next);
    logits = (*model)->decode(next);
    if (!logits.ok())
      return fail(std::string(logits.status().message()));
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

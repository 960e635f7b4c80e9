//===- csa-score.cpp - Likelihood of a text under a compiled model --------===//
//
// How much accuracy a schedule, an ablation or a device costs: the
// per-token negative log-likelihood and perplexity of a text (or token ids)
// under an artifact, and the KL divergence of its next-token distributions
// from a saved base run, with top-1 agreement (as llama-perplexity
// --kl-divergence does).
//
//   csa-score full.csa --weights=CKPT --text-file=wiki.txt --kl-base=full.npy
//   csa-score reuse.csa --weights=CKPT --text-file=wiki.txt --kl=full.npy --json
//
// Each chunk of the tokens runs on a fresh sequence: a prefill of its first
// --prefill tokens (default 1), then one decode step per token with the
// text's own tokens fed (teacher forcing). Every token after the prefill is
// scored by the logits that predict it: the prefill's last row, then each
// step's. So scores are of the decode path, the one generation uses.
//
//===----------------------------------------------------------------------===//
#include "runtime/artifact/Artifact.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/executor/Executor.h"
#include "runtime/sampling/TokenIds.h"
#include "runtime/support/AtomicFile.h"
#include "runtime/support/JsonLimits.h"
#include "runtime/support/Npy.h"
#include "runtime/tokenizer/Unicode.h"
#include "tools/support/Flags.h"
#include "tools/support/LastResort.h"
#include "tools/support/Version.h"
#include "tools/support/Progress.h"
#include "tools/support/RunSetup.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <optional>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

// The flags (tools/support/Flags.h: --flag=value or --flag value).
ABSL_FLAG(std::string, weights, "", "the checkpoint folder (CKPT_DIR)");
ABSL_FLAG(std::optional<uint64_t>, random_weights, std::nullopt,
          "random weights for the artifact's config with this seed (the seed "
          "only as --random-weights=SEED)");
ABSL_FLAG(std::string, text, "", "the text to score (needs a tokenizer)");
ABSL_FLAG(std::string, text_file, "", "a file of the text to score");
ABSL_FLAG(std::string, tokens, "", "the token ids to score, comma-separated");
ABSL_FLAG(std::string, tokens_file, "", "a file of the token ids to score");
ABSL_FLAG(int64_t, chunk, 0, "tokens per window (0: all, at most max_context)");
ABSL_FLAG(int64_t, prefill, 1, "tokens prefilled at the start of each chunk");
ABSL_FLAG(int64_t, stride, 0, "slide the window by this many tokens");
ABSL_FLAG(std::string, kl_base, "", "write the log-probabilities to this .npy");
ABSL_FLAG(std::string, kl, "", "report the KL divergence from this --kl-base .npy");
ABSL_FLAG(bool, json, false, "print one JSON object");
ABSL_FLAG(std::string, device, "cpu", "cpu, cuda or auto");
ABSL_FLAG(std::string, tokenizer, "", "a tokenizer folder or tokenizer.json");
ABSL_FLAG(std::string, engram_token_map, "",
          "the Engram layers' token map: a JSON file or 'modulo'");
ABSL_FLAG(bool, allow_unused_weights, false,
          "run a checkpoint with tensors the artifact does not use");
ABSL_FLAG(bool, progress, false, "the tokens scored so far on stderr, always");
ABSL_FLAG(bool, quiet, false, "no progress line");

namespace {

using namespace csa;
namespace fs = std::filesystem;
using nlohmann::json;

/// The usage text (--help: with the flags' list, on stdout).
constexpr const char *kUsage =
    "usage: csa-score ARTIFACT (--weights=CKPT_DIR | --random-weights[=SEED])\n"
         "                (--text=TEXT | --text-file=FILE | --tokens=ID,ID,... |\n"
         "                 --tokens-file=FILE)\n"
         "                [--chunk=N] [--prefill=P] [--stride=S] [--kl-base=FILE.npy]\n"
         "                [--kl=FILE.npy]\n"
         "                [--json] [--device=cpu|cuda|auto] [--tokenizer=DIR|FILE]\n"
         "                [--engram-token-map=FILE|modulo] [--allow-unused-weights]\n"
         "                [--progress | --quiet]\n"
         "Scores the tokens under the artifact: the negative log-likelihood of each\n"
         "token given those before it (nats), its mean and the perplexity exp(mean).\n"
         "Text is encoded with the tokenizer (--tokenizer or CKPT_DIR/tokenizer.json,\n"
         "BOS as the folder says). The tokens run in chunks of N (default: all of\n"
         "them, at most the plan's max_context), each on a fresh sequence: a prefill\n"
         "of its first P tokens (default 1), then a decode step per token with the\n"
         "text's tokens fed; every token after the prefill is scored.\n"
         "--stride=S slides the window instead: each next window ends S tokens\n"
         "later, prefills the N - S tokens before its last S as context and scores\n"
         "those S, so every token after the first window is scored with N - S\n"
         "tokens of context (the sliding-window perplexity of long files).\n"
         "--kl-base writes the log-probabilities of every scored position, float32\n"
         "[scored, vocab], and FILE.npy.json (the tokens and positions); --kl reads\n"
         "such a pair (of the same tokens and chunking) and reports the KL divergence\n"
         "KL(base || this run) per position: mean, median, p90, p99, max, and the\n"
         "top-1 agreement. --json prints one JSON object (per-token values included).\n"
         "The tokens scored so far show on stderr when it is a terminal (--progress:\n"
         "always; --quiet: never).\n";

int fail(const std::string &message) {
  std::cerr << "csa-score: error: " << message << "\n";
  return 1;
}

/// log softmax in double.
std::vector<double> logSoftmax(const std::vector<float> &logits) {
  double max = -INFINITY;
  for (float v : logits)
    max = std::max(max, double(v));
  double sum = 0;
  for (float v : logits)
    sum += std::exp(double(v) - max);
  const double logZ = max + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    out[i] = double(logits[i]) - logZ;
  return out;
}

double quantile(std::vector<double> values, double q) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  const double at = q * double(values.size() - 1);
  const size_t lo = size_t(std::floor(at)), hi = size_t(std::ceil(at));
  return values[lo] + (values[hi] - values[lo]) * (at - double(lo));
}

} // namespace

int main(int argc, char **argv) {
  csa::tools::installLastResortHandler("csa-score");
  tools::CommandLine flags("csa-score", kUsage);
  flags.implicitValue(FLAGS_random_weights, "0")
      .describe(FLAGS_random_weights, "needs an integer seed")
      .range<int64_t>(FLAGS_chunk, 2, INT64_MAX, "needs a count >= 2")
      .range<int64_t>(FLAGS_prefill, 1, INT64_MAX, "needs a count >= 1")
      .range<int64_t>(FLAGS_stride, 1, INT64_MAX, "needs a count >= 1");
  if (!flags.parse(argc, argv))
    return flags.exitCode();
  if (argc < 2)
    return flags.usage();
  const std::optional<std::string> artifactArg = flags.singlePositional("artifact directory");
  if (!artifactArg)
    return 2;
  const std::string artifactDir = *artifactArg;
  std::string weightsDir = absl::GetFlag(FLAGS_weights);
  const std::string text = absl::GetFlag(FLAGS_text);
  const bool textGiven = flags.given(FLAGS_text);
  const std::string textFile = absl::GetFlag(FLAGS_text_file);
  const std::string tokensText = absl::GetFlag(FLAGS_tokens);
  const std::string tokensFile = absl::GetFlag(FLAGS_tokens_file);
  const std::string tokenizerFlag = absl::GetFlag(FLAGS_tokenizer);
  const std::string engramMapFlag = absl::GetFlag(FLAGS_engram_token_map);
  const std::string klBase = absl::GetFlag(FLAGS_kl_base);
  const std::string klAgainst = absl::GetFlag(FLAGS_kl);
  const bool randomWeights = absl::GetFlag(FLAGS_random_weights).has_value();
  const uint64_t weightSeed = absl::GetFlag(FLAGS_random_weights).value_or(0);
  const bool asJson = absl::GetFlag(FLAGS_json);
  // --quiet wins over --progress.
  const tools::ProgressMode progressMode =
      absl::GetFlag(FLAGS_quiet)      ? tools::ProgressMode::Never
      : absl::GetFlag(FLAGS_progress) ? tools::ProgressMode::Always
                                      : tools::ProgressMode::Auto;
  int64_t chunk = absl::GetFlag(FLAGS_chunk);
  const int64_t prefillTokens = absl::GetFlag(FLAGS_prefill);
  const int64_t stride = absl::GetFlag(FLAGS_stride);
  runtime::ExecutorOptions executorOptions = runtime::ExecutorOptions::fromEnvironment();
  executorOptions.allowUnusedWeights = absl::GetFlag(FLAGS_allow_unused_weights);
  if (const std::string d = absl::GetFlag(FLAGS_device); d == "cpu")
    executorOptions.device = runtime::ExecutorOptions::Device::Cpu;
  else if (d == "cuda")
    executorOptions.device = runtime::ExecutorOptions::Device::Cuda;
  else if (d == "auto")
    executorOptions.device = runtime::ExecutorOptions::Device::Auto;
  else
    return fail("--device is cpu, cuda or auto, got '" + d + "'");
  if (artifactDir.empty())
    return fail("give the artifact directory (csa-compile --emit=artifact -o DIR)");
  if (randomWeights == !weightsDir.empty())
    return fail("give exactly one of --weights=CKPT_DIR and --random-weights");
  if (textGiven + !textFile.empty() + !tokensText.empty() + !tokensFile.empty() != 1)
    return fail("give exactly one of --text, --text-file, --tokens and --tokens-file");
  if (!klBase.empty() && klBase == klAgainst)
    return fail("--kl-base and --kl name the same file");

  auto loadedText = tools::loadRunTokenizer(tokenizerFlag, weightsDir);
  if (!loadedText.ok())
    return fail(std::string(loadedText.status().message()));
  std::optional<tokenizer::ModelTokenizer> tok = std::move(*loadedText);
  std::vector<int32_t> tokens;
  std::string error;
  if (textGiven || !textFile.empty()) {
    if (!tok)
      return fail("scoring text needs a tokenizer: give --tokenizer=DIR|tokenizer.json "
                  "(or a checkpoint folder with tokenizer.json)");
    std::string raw = text;
    if (!textFile.empty() && !sampling::promptText("", textFile, raw, error))
      return fail(error);
    if (auto bad = tokenizer::firstInvalidUtf8(raw)) {
      std::cerr << "csa-score: warning: the text is not valid UTF-8 at byte " << *bad
                << "; ill-formed bytes are read as U+FFFD\n";
      raw = tokenizer::repairUtf8(raw);
    }
    auto ids = tok->encodePrompt(raw);
    if (!ids.ok())
      return fail(std::string(ids.status().message()));
    tokens.assign(ids->begin(), ids->end());
  } else {
    std::string ids;
    if (!sampling::promptText(tokensText, tokensFile, ids, error))
      return fail(error);
    if (!sampling::parseTokenIds(ids, tokens, error))
      return fail((tokensFile.empty() ? "--tokens: " : tokensFile + ": ") + error);
  }

  auto art = artifact::Artifact::open(artifactDir);
  if (!art.ok())
    return fail(std::string(art.status().message()));
  const int64_t n = int64_t(tokens.size());
  if (chunk == 0)
    chunk = std::min<int64_t>(n, art->plan().maxContext > 0 ? art->plan().maxContext : n);
  if (absl::Status st = artifact::checkContext(art->plan(), chunk); !st.ok())
    return fail(absl::StrCat("--chunk=", chunk, ": ", st.message()));
  if (stride && stride >= chunk)
    return fail(absl::StrCat("--stride=", stride, " must be below the window (--chunk=", chunk,
                             "): the tokens before the scored ones are the context"));
  if (n < prefillTokens + 1 || chunk < prefillTokens + 1)
    return fail(absl::StrCat("nothing to score: ", n, " tokens in chunks of ", chunk,
                             " and a prefill of ", prefillTokens,
                             " leave no token after the prefill"));

  std::string removeAfter;
  if (randomWeights) {
    auto dir = tools::makeRandomWeights(*art, weightSeed, progressMode);
    if (!dir.ok())
      return fail(std::string(dir.status().message()));
    weightsDir = removeAfter = *dir;
  }
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty())
        fs::remove_all(dir, ec);
    }
  } cleanup{removeAfter};
  auto ckpt = checkpoint::Checkpoint::open(weightsDir);
  if (!ckpt.ok())
    return fail(std::string(ckpt.status().message()));
  auto map = tools::runEngramTokenMap(*art, engramMapFlag, tok ? &*tok : nullptr, weightsDir);
  if (!map.ok())
    return fail(std::string(map.status().message()));
  if (*map)
    executorOptions.engramTokenMap = (*map)->map;
  auto executor = runtime::Executor::create(*art, *ckpt, executorOptions);
  if (!executor.ok())
    return fail(std::string(executor.status().message()));
  runtime::Executor &ex = **executor;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= ex.vocabSize())
      return fail(absl::StrCat("token ", tokens[i], " at position ", i,
                               " is outside the vocabulary of ", ex.vocabSize()));

  // The windows: tokens [begin, end) on a fresh sequence, the first
  // `prefill` of them prefilled, the rest scored. Chunks: [s, s + N) with
  // prefill P. Sliding (--stride=S): the first window [0, N) with P, then
  // each next one ends S later and prefills all but what is new.
  struct Window {
    int64_t begin, end, prefill;
  };
  std::vector<Window> windows;
  if (!stride) {
    for (int64_t s = 0; s < n; s += chunk)
      if (std::min(n, s + chunk) - s > prefillTokens)
        windows.push_back({s, std::min(n, s + chunk), prefillTokens});
  } else {
    windows.push_back({0, std::min(n, chunk), prefillTokens});
    while (windows.back().end < n) {
      const int64_t end = std::min(n, windows.back().end + stride),
                    begin = std::max<int64_t>(0, end - chunk);
      windows.push_back({begin, end, windows.back().end - begin});
    }
  }
  std::vector<int64_t> scored;
  for (const Window &w : windows)
    for (int64_t i = w.begin + w.prefill; i < w.end; ++i)
      scored.push_back(i);
  const int64_t vocab = ex.vocabSize();

  // The base run to compare with, checked to be of the same tokens.
  std::optional<npy::NpyF32Reader> base;
  if (!klAgainst.empty()) {
    const std::string sidecar = klAgainst + ".json";
    std::ifstream in(sidecar);
    if (!in)
      return fail(sidecar + ": cannot open (--kl needs the pair --kl-base wrote)");
    json meta;
    try {
      meta = json::parse(in);
    } catch (const json::exception &e) {
      return fail(sidecar + ": not valid JSON: " + e.what());
    }
    if (support::jsonDepth(meta) > 2 || !meta.is_object() || !meta.contains("tokens") ||
        !meta.contains("scored") || !meta["tokens"].is_array() || !meta["scored"].is_array())
      return fail(sidecar + ": must hold \"tokens\" and \"scored\" lists (a --kl-base file)");
    try {
      if (meta["tokens"].get<std::vector<int64_t>>() !=
          std::vector<int64_t>(tokens.begin(), tokens.end()))
        return fail(sidecar + ": the base run scored other tokens than this run's");
      if (meta["scored"].get<std::vector<int64_t>>() != scored)
        return fail(sidecar + ": the base run scored other positions (another --chunk, --prefill "
                              "or --stride?)");
    } catch (const json::exception &e) {
      return fail(sidecar + ": " + e.what());
    }
    auto reader = npy::NpyF32Reader::open(klAgainst);
    if (!reader.ok())
      return fail(std::string(reader.status().message()));
    if (reader->header().shape != std::vector<int64_t>{int64_t(scored.size()), vocab})
      return fail(absl::StrCat(klAgainst, ": shape is not [", scored.size(), ", ", vocab,
                               "] (the scored positions and this model's vocabulary)"));
    base = std::move(*reader);
  }
  npy::NpyF32Writer baseOut;
  if (!klBase.empty())
    if (absl::Status st = baseOut.create(klBase, {int64_t(scored.size()), vocab}); !st.ok())
      return fail(absl::StrCat("--kl-base: ", st.message()));

  std::vector<double> nll, kl, baseNll;
  int64_t agree = 0;
  std::vector<float> row, baseRow;
  auto score = [&](const std::vector<float> &logits, int64_t position) -> absl::Status {
    const std::vector<double> lp = logSoftmax(logits);
    const int32_t target = tokens[size_t(position)];
    nll.push_back(-lp[size_t(target)]);
    if (baseOut.active()) {
      row.assign(lp.begin(), lp.end());
      if (absl::Status st = baseOut.writeRow(uint64_t(nll.size() - 1), row); !st.ok())
        return st;
    }
    if (base) {
      if (absl::Status st = base->readRow(uint64_t(nll.size() - 1), baseRow); !st.ok())
        return st;
      // This run's log-probabilities rounded to float32 as the base's were,
      // so a run compared with its own base gives 0.
      double d = 0;
      size_t baseArgmax = 0, argmax = 0;
      for (size_t v = 0; v < lp.size(); ++v) {
        const double b = baseRow[v];
        if (b > -INFINITY)
          d += std::exp(b) * (b - double(float(lp[v])));
        if (baseRow[v] > baseRow[baseArgmax])
          baseArgmax = v;
        if (lp[v] > lp[argmax])
          argmax = v;
      }
      kl.push_back(std::max(0.0, d));
      baseNll.push_back(-double(baseRow[size_t(target)]));
      agree += baseArgmax == argmax;
    }
    return absl::OkStatus();
  };
  const int64_t chunks = int64_t(windows.size());
  tools::Progress progress("scoring", uint64_t(scored.size()), "tokens", progressMode);
  for (const Window &w : windows) {
    const int64_t s = w.begin, e = w.end;
    runtime::Sequence seq = ex.newSequence();
    auto logits = ex.prefill(
        seq, std::vector<int32_t>(tokens.begin() + s, tokens.begin() + s + w.prefill));
    if (!logits.ok())
      return fail(absl::StrCat("prefill at position ", s, ": ", logits.status().message()));
    for (int64_t i = s + w.prefill; i < e; ++i) {
      if (absl::Status st = score(*logits, i); !st.ok())
        return fail(std::string(st.message()));
      progress.add(1);
      if (i + 1 < e) {
        logits = ex.decode(seq, tokens[size_t(i)]);
        if (!logits.ok())
          return fail(absl::StrCat("decode at position ", i, ": ", logits.status().message()));
      }
    }
  }
  progress.finish();
  if (absl::Status st = ex.checkDeviceStatuses(); !st.ok())
    return fail(std::string(st.message()));
  const bool wroteBase = baseOut.active();
  if (wroteBase) {
    json meta = {{"tokens", tokens}, {"scored", scored}, {"vocab", vocab},
                 {"artifact", artifactDir}, {"chunk", chunk}, {"prefill", prefillTokens},
                 {"stride", stride}};
    if (absl::Status st = support::writeFileAtomically(klBase + ".json", meta.dump() + "\n");
        !st.ok())
      return fail(absl::StrCat("--kl-base: ", st.message()));
    if (absl::Status st = baseOut.commit(); !st.ok())
      return fail(absl::StrCat("--kl-base: ", st.message()));
  }

  double sum = 0;
  for (double v : nll)
    sum += v;
  const double meanNll = sum / double(nll.size());
  json out = {{"artifact", artifactDir},
              {"tokens", n},
              {"scored", int64_t(nll.size())},
              {"chunks", chunks},
              {"stride", stride},
              {"chunk", chunk},
              {"prefill", prefillTokens},
              {"mean_nll", meanNll},
              {"perplexity", std::exp(meanNll)},
              {"nll", nll}};
  if (*map)
    out["engram_token_map"] = (*map)->source;
  out["unused_weights"] = ex.unusedWeights().size();
  double meanKl = 0, meanBase = 0;
  if (base) {
    for (double v : kl)
      meanKl += v;
    meanKl /= double(kl.size());
    for (double v : baseNll)
      meanBase += v;
    meanBase /= double(baseNll.size());
    out["kl"] = {{"base", klAgainst},
                 {"mean", meanKl},
                 {"median", quantile(kl, 0.5)},
                 {"p90", quantile(kl, 0.9)},
                 {"p99", quantile(kl, 0.99)},
                 {"max", quantile(kl, 1.0)},
                 {"top1_agreement", double(agree) / double(kl.size())},
                 {"base_perplexity", std::exp(meanBase)},
                 {"per_token", kl}};
  }
  if (asJson) {
    std::printf("%s\n", out.dump(1).c_str());
    return 0;
  }
  if (stride)
    std::printf("tokens: %lld in %lld windows of up to %lld sliding by %lld; %zu scored (the first "
                "window after a %lld-token prefill, each next one its last %lld after %lld of "
                "context)\n",
                (long long)n, (long long)chunks, (long long)chunk, (long long)stride, nll.size(),
                (long long)prefillTokens, (long long)stride, (long long)(chunk - stride));
  else
    std::printf("tokens: %lld in %lld chunk%s of up to %lld; %zu scored (each chunk: a %lld-token "
                "prefill, then decode steps)\n",
                (long long)n, (long long)chunks, chunks == 1 ? "" : "s", (long long)chunk,
                nll.size(), (long long)prefillTokens);
  std::printf("nll: mean %.6f nats/token, perplexity %.4f\n", meanNll, std::exp(meanNll));
  if (base)
    std::printf("kl vs %s: mean %.6g, median %.6g, p90 %.6g, p99 %.6g, max %.6g (nats); "
                "top-1 agreement %.2f%% (%lld of %zu); base perplexity %.4f\n",
                klAgainst.c_str(), meanKl, quantile(kl, 0.5), quantile(kl, 0.9),
                quantile(kl, 0.99), quantile(kl, 1.0), 100.0 * double(agree) / double(kl.size()),
                (long long)agree, kl.size(), std::exp(meanBase));
  if (wroteBase)
    std::printf("kl base: %s (+ .json): %zu positions x %lld log-probabilities\n", klBase.c_str(),
                nll.size(), (long long)vocab);
  if (*map)
    std::printf("engram token map: %s\n", (*map)->source.c_str());
  if (!ex.unusedWeights().empty())
    std::printf("weights: %zu tensors of the checkpoint are not used by this artifact "
                "(skipped, --allow-unused-weights)\n",
                ex.unusedWeights().size());
  return 0;
}

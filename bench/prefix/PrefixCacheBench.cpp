//===- PrefixCacheBench.cpp - An agent turn's cost in the three cache cases ===//
//
// For a history of L tokens and a turn of N new tokens (random ids, seeded),
// on the CPU or the GPU:
//   cold         one prefill of the L + N tokens (no cache);
//   global+local restore the saved sequence (host memory) and extend it by N;
//   global-only  the same with the local snapshot expired: the rings rebuilt
//                by replaying the tokens before the last block boundary,
//                then the rest of the history and the N tokens extended;
//                once for each --replay length (0: the released window).
// Each case is timed as a user waits for it (restore + the turn's prefill,
// to its first logits). Then `decode` greedy steps of the global+local run
// are fed to the global-only run too (teacher forcing), and each step's
// logits are compared: max |a - b|, cosine, KL(global+local || global-only)
// and top-1 agreement: what the approximate local state costs at the turn
// boundary and that many tokens later. Persisted bytes: the plan's global
// bytes per token, the local snapshot's bytes, and what a cache that also
// kept every token's SWA rows (the V4-style policy) would persist.
//
//   csa-bench-prefix-cache h200-full.csa --weights=DIR --device=cuda \
//       --history=4096,16384 --new=64,512,2048 --decode=128 --json=out.json
//
//===----------------------------------------------------------------------===//
#include "runtime/artifact/Artifact.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/executor/Executor.h"
#include "runtime/prefix/PrefixCache.h"
#include "tools/support/Flags.h"
#include "tools/support/RunSetup.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>

ABSL_FLAG(std::string, weights, "", "the checkpoint folder");
ABSL_FLAG(std::optional<uint64_t>, random_weights, std::nullopt, "random weights (seed)");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, history, "256", "history lengths L, comma-separated");
ABSL_FLAG(std::string, new_tokens, "16,64", "turn lengths N, comma-separated");
ABSL_FLAG(std::string, replay, "0",
          "tokens a global-only hit replays, comma-separated (0: the released window)");
ABSL_FLAG(int64_t, prefill_chunk, 0,
          "prefill the history and the cold request in chunks of this many tokens "
          "(0: one prefill); a long prefill's buffers grow with its rows");
ABSL_FLAG(int64_t, decode, 32, "greedy steps after the turn compared between the cases");
ABSL_FLAG(uint64_t, seed, 1, "the token ids' seed");
ABSL_FLAG(std::string, json, "", "write the results to this JSON file");

namespace {
using namespace csa;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::vector<int64_t> parseList(const std::string &text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1)
      return {};
    out.push_back(v);
  }
  return out;
}

int32_t argmax(const std::vector<float> &v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

/// How far logits `b` are from `a`: max |a - b|, cosine, KL(softmax a ||
/// softmax b) in nats, and whether the top-1 ids agree.
struct Divergence {
  double maxAbs = 0, cosine = 1, kl = 0;
  bool top1 = true;
};
Divergence compare(const std::vector<float> &a, const std::vector<float> &b) {
  Divergence d;
  double dot = 0, na = 0, nb = 0;
  const double ma = *std::max_element(a.begin(), a.end()),
               mb = *std::max_element(b.begin(), b.end());
  double za = 0, zb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d.maxAbs = std::max(d.maxAbs, std::fabs(double(a[i]) - double(b[i])));
    dot += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += double(b[i]) * b[i];
    za += std::exp(a[i] - ma);
    zb += std::exp(b[i] - mb);
  }
  d.cosine = dot / std::sqrt(std::max(na * nb, 1e-300));
  const double la = ma + std::log(za), lb = mb + std::log(zb);
  for (size_t i = 0; i < a.size(); ++i) {
    const double pa = std::exp(a[i] - la);
    d.kl += pa * ((a[i] - la) - (b[i] - lb));
  }
  d.top1 = argmax(a) == argmax(b);
  return d;
}

/// `tokens` into `seq` (a new sequence): one prefill, or with `chunk` > 0 a
/// prefill of the first `chunk` tokens and extensions by the rest (csa-run
/// --prefill-chunk); the last chunk's logits.
absl::StatusOr<std::vector<float>> prefillInChunks(runtime::Executor &ex, runtime::Sequence &seq,
                                                   const std::vector<int32_t> &tokens,
                                                   int64_t chunk) {
  if (chunk <= 0 || int64_t(tokens.size()) <= chunk)
    return ex.prefill(seq, tokens);
  absl::StatusOr<std::vector<float>> logits;
  for (size_t at = 0; at < tokens.size(); at += size_t(chunk)) {
    std::vector<int32_t> part(tokens.begin() + long(at),
                              tokens.begin() + long(std::min(tokens.size(), at + size_t(chunk))));
    logits = at == 0 ? ex.prefill(seq, part) : ex.extend(seq, part);
    if (!logits.ok())
      return logits;
  }
  return logits;
}

int fail(const std::string &message) {
  std::cerr << "csa-bench-prefix-cache: error: " << message << "\n";
  return 1;
}
} // namespace

int main(int argc, char **argv) {
  tools::CommandLine flags(
      "csa-bench-prefix-cache",
      "usage: csa-bench-prefix-cache ARTIFACT (--weights=DIR | --random-weights[=SEED])\n"
      "          [--device=cpu|cuda] [--history=L,...] [--new-tokens=N,...] [--decode=M]\n"
      "          [--replay=R,...] [--prefill-chunk=C]\n"
      "          [--seed=S] [--json=FILE]\n"
      "An agent turn of N tokens after a history of L: cold, global+local and\n"
      "global-only (docs/prefix-cache.md), timed, and the global-only run's\n"
      "logits against the exact one's over M teacher-forced steps.\n");
  flags.implicitValue(FLAGS_random_weights, "0")
      .range<int64_t>(FLAGS_decode, 0, 1 << 20, "needs a count >= 0")
      .range<int64_t>(FLAGS_prefill_chunk, 0, int64_t(1) << 30, "needs a count >= 0");
  if (!flags.parse(argc, argv))
    return flags.exitCode();
  const std::optional<std::string> artifactDir = flags.singlePositional("artifact directory");
  if (!artifactDir)
    return 2;
  const std::vector<int64_t> histories = parseList(absl::GetFlag(FLAGS_history)),
                             turns = parseList(absl::GetFlag(FLAGS_new_tokens));
  if (histories.empty() || turns.empty())
    return flags.error("--history and --new-tokens need counts >= 1, comma-separated");
  const int64_t decodeSteps = absl::GetFlag(FLAGS_decode);
  const int64_t prefillChunk = absl::GetFlag(FLAGS_prefill_chunk);

  auto art = artifact::Artifact::open(*artifactDir);
  if (!art.ok())
    return fail(std::string(art.status().message()));
  std::string weightsDir = absl::GetFlag(FLAGS_weights);
  if (auto seed = absl::GetFlag(FLAGS_random_weights)) {
    auto made = tools::makeRandomWeights(*art, *seed);
    if (!made.ok())
      return fail(std::string(made.status().message()));
    weightsDir = *made;
  }
  if (weightsDir.empty())
    return flags.error("give --weights=DIR or --random-weights");
  auto ckpt = checkpoint::Checkpoint::open(weightsDir);
  if (!ckpt.ok())
    return fail(std::string(ckpt.status().message()));
  runtime::ExecutorOptions options;
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "cuda") {
    options.device = runtime::ExecutorOptions::Device::Cuda;
    options.keepCachesOnDevice = true;
  } else if (device != "cpu") {
    return flags.error("--device needs cpu or cuda, got '" + device + "'");
  }
  auto map = tools::runEngramTokenMap(*art, "", nullptr, weightsDir);
  if (!map.ok())
    return fail(std::string(map.status().message()));
  if (*map)
    options.engramTokenMap = std::move((*map)->map);
  auto created = runtime::Executor::create(*art, *ckpt, options);
  if (!created.ok())
    return fail(std::string(created.status().message()));
  runtime::Executor &ex = **created;
  if (auto up = ex.uploadWeights(); !up.ok())
    return fail(std::string(up.status().message()));
  {
    runtime::Sequence warm = ex.newSequence();
    if (auto l = ex.prefill(warm, {1, 2, 3}); !l.ok())
      return fail(std::string(l.status().message()));
    (void)ex.syncToHost(warm);
  }

  // One cache per replay length (memory only); the first also serves the
  // global+local case.
  std::vector<int64_t> replays;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_replay), ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 0)
      return flags.error("--replay needs token counts >= 0, comma-separated");
    replays.push_back(v);
  }
  std::vector<std::unique_ptr<runtime::prefix::PrefixCache>> caches;
  for (int64_t replay : replays) {
    runtime::prefix::PrefixCacheOptions o;
    o.replayTokens = replay;
    auto opened = runtime::prefix::PrefixCache::open(
        *art, runtime::prefix::weightsFingerprint(*ckpt, options.engramTokenMap), o);
    if (!opened.ok())
      return fail(std::string(opened.status().message()));
    caches.push_back(std::move(*opened));
  }
  const runtime::prefix::PrefixCacheStats &stats = caches.front()->stats();
  const artifact::Plan &plan = art->plan();
  int64_t ringRowsPerToken = 0;
  for (const artifact::CacheBuffer &b : plan.caches)
    if (b.kind == artifact::CacheKind::SwaRing)
      ringRowsPerToken += b.rowBytes;

  Json doc = Json::object();
  doc["artifact"] = *artifactDir;
  doc["device"] = device;
  doc["prefill_chunk"] = prefillChunk;
  doc["persisted"] = {{"global_bytes_per_token", stats.globalBytesPerToken},
                      {"local_snapshot_bytes", stats.localSnapshotBytes},
                      {"swa_row_bytes_per_token_all_layers", ringRowsPerToken},
                      {"v4_style_bytes_per_token", stats.globalBytesPerToken + ringRowsPerToken}};
  std::printf("persisted: %lld B/token global; a local snapshot %lld B; keeping every token's SWA rows "
              "too (V4-style) %lld B/token (x%.1f)\n",
              static_cast<long long>(stats.globalBytesPerToken),
              static_cast<long long>(stats.localSnapshotBytes),
              static_cast<long long>(stats.globalBytesPerToken + ringRowsPerToken),
              double(stats.globalBytesPerToken + ringRowsPerToken) /
                  double(std::max<int64_t>(1, stats.globalBytesPerToken)));
  std::printf("%8s %6s %12s %14s %14s %8s %10s %12s %10s %9s\n", "L", "N", "cold ms",
              "g+local ms", "g-only ms", "replay", "max|d| 0", "KL 0", "KL mean", "top1 agr");

  std::mt19937_64 gen(absl::GetFlag(FLAGS_seed));
  std::uniform_int_distribution<int32_t> token(0, int32_t(ex.vocabSize() - 1));
  Json rows = Json::array();
  for (int64_t L : histories) {
    std::vector<int32_t> history(static_cast<size_t>(L));
    for (int32_t &t : history)
      t = token(gen);
    runtime::Sequence saved = ex.newSequence();
    auto start = Clock::now();
    auto hl = prefillInChunks(ex, saved, history, prefillChunk);
    if (!hl.ok())
      return fail(absl::StrCat("history of ", L, ": ", hl.status().message()));
    if (absl::Status st = ex.syncToHost(saved); !st.ok())
      return fail(std::string(st.message()));
    const double historySeconds = since(start);
    for (int64_t N : turns) {
      std::vector<int32_t> request = history;
      for (int64_t i = 0; i < N; ++i)
        request.push_back(token(gen));
      Json row = {{"history", L}, {"new", N}, {"history_prefill_seconds", historySeconds}};

      // Cold: the whole request in one prefill.
      std::vector<float> coldLogits;
      {
        runtime::Sequence seq = ex.newSequence();
        start = Clock::now();
        auto l = prefillInChunks(ex, seq, request, prefillChunk);
        if (!l.ok())
          return fail(absl::StrCat("cold prefill: ", l.status().message()));
        row["cold_seconds"] = since(start);
        coldLogits = std::move(*l);
        (void)ex.syncToHost(seq);
      }
      // A case: restore, the turn's prefill, then the forced steps.
      std::vector<int32_t> forced;
      auto runCase = [&](runtime::prefix::PrefixCache &cache, runtime::prefix::RestoreCase want,
                         std::vector<std::vector<float>> &logits, Json &out) -> absl::Status {
        auto t0 = Clock::now();
        auto r = cache.restore(ex, request);
        if (!r.ok())
          return r.status();
        if (r->kind != want)
          return absl::InternalError(absl::StrCat("restored ",
                                                  runtime::prefix::restoreCaseName(r->kind),
                                                  ", not ", runtime::prefix::restoreCaseName(want)));
        auto l = ex.extend(r->sequence, r->suffix);
        if (!l.ok())
          return l.status();
        out = {{"seconds", since(t0)},
               {"restore_seconds", r->seconds},
               {"restored_tokens", r->restoredTokens},
               {"replayed_tokens", r->replayedTokens}};
        logits.push_back(std::move(*l));
        const bool record = forced.empty();
        for (int64_t i = 0; i < decodeSteps; ++i) {
          if (record)
            forced.push_back(argmax(logits.back()));
          auto d = ex.decode(r->sequence, forced[size_t(i)]);
          if (!d.ok())
            return d.status();
          logits.push_back(std::move(*d));
        }
        return ex.syncToHost(r->sequence);
      };
      std::vector<std::vector<float>> exact;
      Json hit;
      if (absl::Status st = caches.front()->save(saved); !st.ok())
        return fail(std::string(st.message()));
      if (absl::Status st =
              runCase(*caches.front(), runtime::prefix::RestoreCase::GlobalAndLocal, exact, hit);
          !st.ok())
        return fail(absl::StrCat("global+local: ", st.message()));
      const Divergence cold = compare(exact.front(), coldLogits);
      row["global_local"] = hit;
      row["cold_vs_global_local"] = {{"max_abs", cold.maxAbs}, {"cosine", cold.cosine},
                                     {"kl", cold.kl}, {"top1", cold.top1}};
      Json globalOnlyRuns = Json::array();
      for (auto &cache : caches) {
        std::vector<std::vector<float>> approx;
        Json globalOnly;
        if (absl::Status st = cache->save(saved); !st.ok())
          return fail(std::string(st.message()));
        cache->expireLocalState();
        if (absl::Status st =
                runCase(*cache, runtime::prefix::RestoreCase::GlobalOnly, approx, globalOnly);
            !st.ok())
          return fail(absl::StrCat("global-only: ", st.message()));
        Json steps = Json::array();
        double klSum = 0;
        int64_t agree = 0;
        for (size_t i = 0; i < exact.size(); ++i) {
          const Divergence d = compare(exact[i], approx[i]);
          steps.push_back(
              {{"max_abs", d.maxAbs}, {"cosine", d.cosine}, {"kl", d.kl}, {"top1", d.top1}});
          klSum += d.kl;
          agree += d.top1;
        }
        globalOnly["vs_global_local"] = steps;
        const Divergence first = compare(exact.front(), approx.front());
        std::printf("%8lld %6lld %12.2f %14.2f %14.2f %8lld %10.4f %12.3e %10.3e %4lld/%lld\n",
                    static_cast<long long>(L), static_cast<long long>(N),
                    row["cold_seconds"].get<double>() * 1e3, hit["seconds"].get<double>() * 1e3,
                    globalOnly["seconds"].get<double>() * 1e3,
                    static_cast<long long>(globalOnly["replayed_tokens"].get<int64_t>()),
                    first.maxAbs, first.kl, klSum / double(exact.size()),
                    static_cast<long long>(agree), static_cast<long long>(exact.size()));
        std::fflush(stdout);
        globalOnlyRuns.push_back(globalOnly);
      }
      row["global_only"] = globalOnlyRuns;
      rows.push_back(row);
    }
  }
  doc["runs"] = rows;
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    out << doc.dump(1) << "\n";
    if (!out)
      return fail("cannot write " + path);
  }
  return 0;
}

//===- csa-diff.cpp - Compare two logits files within bounds ---------------===//
//
// Compares two logits files written by `csa-run --logits-out` (NumPy .npy,
// '<f4', shape [steps, vocab] or [batch, steps, vocab]) step by step: the
// largest |a - b| of the step, the cosine of the two rows and whether their
// argmax (lowest id among ties, as greedy sampling takes) agrees.
//
//   csa-diff CPU.npy GPU.npy [--max-abs=X] [--min-cosine=Y] [--require-argmax] [--json]
//
// Prints a table (one row per step) and a summary line, the last line; with
// --json one JSON object instead. Exit status 0 when every step is within
// the bounds given (none given: 0 whatever the numbers), 1 when a bound
// fails (the summary names the first step and bound that failed), 2 on bad
// input (a missing file, not a .npy, another dtype, shapes that differ: the
// message names the file and what is wrong).
//
// Non-finite values: a position where both files hold the same infinity or
// both NaN counts as equal; one where only one does makes the step's
// max |Δ| +inf and its cosine NaN (both bounds fail). In JSON, inf and NaN
// are null.
//
// Two directories of `csa-run --dump-hidden` (every block's output,
// r<call>_<entry>-<step>_hidden.npy) compare file by file, in the order the
// run wrote them: max |a - b|, the relative RMS of the difference
// (sqrt(sum (a-b)^2 / sum a^2)) and the cosine over the whole array, so
// the first block where two runs part shows;
//
//   csa-diff A_DIR B_DIR [--max-abs=X] [--min-cosine=Y] [--max-rel-rms=Z] [--json]
//
// A file of A missing from B, or another shape, is bad input naming it.
// Folders that both hold an index (dumps.jsonl: csa-run's and
// csa-reference's dumps) pair their files by call, entry, layer block and
// kind instead of by name, so a compiled run compares with the reference.
//
// Plain C++ (no LLVM), so that it runs beside csa-run on a GPU machine with
// no LLVM installed (tools/scripts/gpu-check.sh copies both); the flags are
// parsed as csa-run's are.
//
//===----------------------------------------------------------------------===//
#include "tools/support/Flags.h"
#include "tools/support/LastResort.h"
#include "tools/support/Version.h"
#include "runtime/support/Dumps.h"
#include "runtime/support/Npy.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

// The flags (tools/support/Flags.h: --flag=value or --flag value).
ABSL_FLAG(std::optional<double>, max_abs, std::nullopt, "fail when max |a-b| exceeds this at a step (or block)");
ABSL_FLAG(std::optional<double>, min_cosine, std::nullopt, "fail when a cosine is below this");
ABSL_FLAG(std::optional<double>, max_rel_rms, std::nullopt,
          "fail when a block's relative RMS of a-b exceeds this (directories)");
ABSL_FLAG(std::optional<double>, min_topk_overlap, std::nullopt,
          "fail when a top-k set or HSI pool file's mean overlap is below this (directories)");
ABSL_FLAG(std::optional<double>, min_routing_agreement, std::nullopt,
          "fail when a MoE routing file's mean agreement is below this (directories)");
ABSL_FLAG(bool, require_argmax, false, "fail when an argmax differs (logits)");
ABSL_FLAG(bool, json, false, "print one JSON object (errors too)");

namespace {

using csa::npy::NpyF32Reader;

/// The usage text (--help: with the flags' list, on stdout).
constexpr const char *kUsage =
    "usage: csa-diff A.npy B.npy [--max-abs=X] [--min-cosine=Y]\n"
         "                [--require-argmax] [--json]\n"
         "Compares two logits files of csa-run --logits-out (float32 .npy of\n"
         "shape [steps, vocab] or [batch, steps, vocab]) step by step: max |a-b|,\n"
         "cosine, argmax. Prints a table and a summary line (--json: one JSON\n"
         "object). Exit status 0 within the bounds given, 1 when one fails\n"
         "(--max-abs: max |a-b| <= X at every step; --min-cosine: cosine >= Y;\n"
         "--require-argmax: the same argmax at every step), 2 on bad input.\n"
         "       csa-diff A_DIR B_DIR [--max-abs=X] [--min-cosine=Y]\n"
         "                [--max-rel-rms=Z] [--min-topk-overlap=T]\n"
         "                [--min-routing-agreement=R] [--json]\n"
         "Compares two csa-run --dump-hidden directories block by block (the\n"
         "*_hidden.npy files of A, in the order the run wrote them): max |a-b|,\n"
         "the relative RMS of a-b, the cosine; and the --dump-decisions files in\n"
         "them (*_topk.npy, *_hsi_pool.npy, *_moe_ids.npy): per file the mean\n"
         "and lowest share of a row's entries A chose that B chose too (top-k\n"
         "overlap, routing agreement) and the rows chosen alike; --min-topk-overlap\n"
         "bounds the mean of top-k and HSI files, --min-routing-agreement of MoE\n"
         "files. The same exit statuses.\n";

bool json = false;

int badInput(const std::string &message) {
  std::cerr << "csa-diff: error: " << message << "\n";
  if (json)
    std::cout << nlohmann::json{{"error", message}}.dump(
                     -1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  return 2;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

/// inf and NaN as JSON null.
nlohmann::json jsonNumber(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

/// The index of the largest value (NaN never is; ties: the lowest index);
/// -1 when every value is NaN.
int64_t argmax(const std::vector<float> &row) {
  int64_t best = -1;
  for (size_t i = 0; i < row.size(); ++i)
    if (!std::isnan(row[i]) && (best < 0 || row[i] > row[size_t(best)]))
      best = int64_t(i);
  return best;
}

struct StepResult {
  int64_t sequence = 0, step = 0;
  double maxAbs = 0, cosine = 1;
  int64_t argmaxA = -1, argmaxB = -1;
  std::vector<std::string> failed; ///< "max-abs", "min-cosine", "argmax"
};

/// Two arrays compared element by element, in parts (rows) or whole.
struct Comparison {
  double largest = 0, dot = 0, na = 0, nb = 0, diff2 = 0;
  bool nonFiniteMismatch = false;
  void add(const std::vector<float> &a, const std::vector<float> &b) {
    for (size_t i = 0; i < a.size(); ++i) {
      const double x = a[i], y = b[i];
      if (!std::isfinite(x) || !std::isfinite(y)) {
        // The same infinity, or NaN in both: equal; otherwise no bound holds.
        if (!((std::isnan(x) && std::isnan(y)) || x == y))
          nonFiniteMismatch = true;
        continue;
      }
      largest = std::max(largest, std::fabs(x - y));
      diff2 += (x - y) * (x - y);
      dot += x * y;
      na += x * x;
      nb += y * y;
    }
  }
  double maxAbs() const {
    return nonFiniteMismatch ? std::numeric_limits<double>::infinity() : largest;
  }
  double cosine() const {
    if (nonFiniteMismatch)
      return std::numeric_limits<double>::quiet_NaN();
    if (na == 0 && nb == 0)
      return 1; // two zero arrays are the same array
    return na == 0 || nb == 0 ? 0 : dot / std::sqrt(na * nb);
  }
  /// sqrt(sum (a - b)^2 / sum a^2).
  double relRms() const {
    if (nonFiniteMismatch)
      return std::numeric_limits<double>::infinity();
    return na > 0 ? std::sqrt(diff2 / na)
                  : (diff2 > 0 ? std::numeric_limits<double>::infinity() : 0);
  }
};

StepResult compareRows(const std::vector<float> &a, const std::vector<float> &b) {
  Comparison c;
  c.add(a, b);
  StepResult r;
  r.maxAbs = c.maxAbs();
  r.cosine = c.cosine();
  r.argmaxA = argmax(a);
  r.argmaxB = argmax(b);
  return r;
}

/// The dump files of `dir` ending in `suffix` in the order a run writes
/// them: by call, then entry, then plan step (numbers compared as numbers).
std::vector<std::string> dumpFiles(const std::string &dir, const std::string &suffix) {
  namespace fs = std::filesystem;
  struct Key {
    long long call, step;
    std::string entry, name;
  };
  std::vector<Key> keys;
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    long long call = 0, step = 0;
    char entry[32] = {0};
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0 ||
        std::sscanf(name.c_str(), "r%lld_%31[a-z]-%lld_", &call, entry, &step) != 3)
      continue;
    keys.push_back({call, step, entry, name});
  }
  std::sort(keys.begin(), keys.end(), [](const Key &x, const Key &y) {
    return std::tie(x.call, x.entry, x.step) < std::tie(y.call, y.entry, y.step);
  });
  std::vector<std::string> names;
  for (const Key &k : keys)
    names.push_back(k.name);
  return names;
}

/// The kinds of dump file csa-diff compares: the hidden states, then the
/// discrete decisions (every other kind).
constexpr const char *kDumpKinds[] = {"hidden", "topk", "hsi_pool", "moe_ids"};

/// (A's file, B's file) pairs by kind.
using FilePairs = std::map<std::string, std::vector<std::pair<std::string, std::string>>>;

/// Every file of A of each kind in kDumpKinds and its partner in B. When
/// both folders hold an index (dumps.jsonl, runtime/support/Dumps.h:
/// folders of different programs, such as csa-run and csa-reference), a
/// file's partner is B's file of the same call, entry, layer block and kind,
/// in A's index order (a kind B's index lists no file of is skipped);
/// otherwise it is B's file of the same name.
absl::StatusOr<FilePairs> pairedFiles(const std::string &dirA, const std::string &dirB) {
  namespace fs = std::filesystem;
  const std::string indexA = dirA + "/" + csa::npy::kDumpIndex,
                    indexB = dirB + "/" + csa::npy::kDumpIndex;
  FilePairs pairs;
  if (!fs::exists(indexA) || !fs::exists(indexB)) {
    for (const char *what : kDumpKinds)
      for (const std::string &name : dumpFiles(dirA, absl::StrCat("_", what, ".npy")))
        pairs[what].emplace_back(name, name);
    return pairs;
  }
  using Key = std::tuple<int64_t, std::string, std::string, std::string>;
  auto read = [&](const std::string &path)
      -> absl::StatusOr<std::vector<std::pair<Key, std::string>>> {
    std::ifstream in(path);
    std::vector<std::pair<Key, std::string>> entries;
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (line.empty())
        continue;
      try {
        const nlohmann::json e = nlohmann::json::parse(line);
        entries.push_back({Key{e.at("call").get<int64_t>(), e.at("entry").get<std::string>(),
                               e.at("block").get<std::string>(), e.at("what").get<std::string>()},
                           e.at("file").get<std::string>()});
      } catch (const nlohmann::json::exception &) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ":", n, ": not an index line {\"file\", \"call\", \"entry\", \"block\", \"what\"}"));
      }
    }
    return entries;
  };
  auto a = read(indexA);
  if (!a.ok())
    return a.status();
  auto b = read(indexB);
  if (!b.ok())
    return b.status();
  std::map<Key, std::string> partner;
  std::set<std::string> kindsOfB; // a kind B did not dump at all is not compared
  for (const auto &[key, file] : *b) {
    kindsOfB.insert(std::get<3>(key));
    if (!partner.emplace(key, file).second)
      return absl::InvalidArgumentError(
          absl::StrCat(indexB, ": two files for call ", std::get<0>(key), " ", std::get<1>(key),
                       " block '", std::get<2>(key), "' ", std::get<3>(key)));
  }
  for (const auto &[key, file] : *a) {
    const std::string &what = std::get<3>(key);
    if (!kindsOfB.count(what) ||
        std::find(std::begin(kDumpKinds), std::end(kDumpKinds), what) == std::end(kDumpKinds))
      continue;
    auto found = partner.find(key);
    if (found == partner.end())
      return absl::InvalidArgumentError(absl::StrCat(
          indexB, " has no ", what, " for call ", std::get<0>(key), " (", std::get<1>(key),
          ") block '", std::get<2>(key), "', which ", dirA, "/", file, " is"));
    pairs[what].emplace_back(file, found->second);
  }
  return pairs;
}

struct BlockResult {
  std::string name;
  double maxAbs = 0, relRms = 0, cosine = 1;
  std::vector<std::string> failed;
};

/// One decision file of A against B's: per row, the share of A's chosen
/// entries (top-k positions >= 0, HSI pool members, expert ids) that B chose
/// too.
struct SelectionResult {
  std::string name, kind; ///< kind: "topk", "hsi_pool" or "moe_ids"
  int64_t rows = 0, rowsEqual = 0;
  double meanOverlap = 1, minOverlap = 1;
  std::vector<std::string> failed;
};

/// The chosen entries of row `r` of a decision array: the values >= 0 of a
/// top-k set or routing, the columns set in an HSI pool's mask.
std::vector<int32_t> chosen(const csa::npy::NpyInts &a, bool mask, int64_t r) {
  const int64_t width = a.shape.empty() ? 1 : a.shape.back();
  std::vector<int32_t> out;
  for (int64_t j = 0; j < width; ++j) {
    const int32_t v = a.values[size_t(r * width + j)];
    if (mask ? v != 0 : v >= 0)
      out.push_back(mask ? int32_t(j) : v);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::StatusOr<SelectionResult> compareSelection(const std::string &pathA,
                                                 const std::string &pathB,
                                                 const std::string &name,
                                                 const std::string &kind) {
  auto a = csa::npy::readInts(pathA);
  if (!a.ok())
    return a.status();
  auto b = csa::npy::readInts(pathB);
  if (!b.ok())
    return b.status();
  if (a->shape != b->shape || a->shape.size() != 2)
    return absl::InvalidArgumentError(
        a->shape != b->shape
            ? absl::StrCat("the shapes differ: ", pathA, " is ", shapeText(a->shape), ", ", pathB,
                           " is ", shapeText(b->shape))
            : absl::StrCat(pathA, ": shape ", shapeText(a->shape), " is not [rows, k]"));
  SelectionResult r;
  r.name = name;
  r.kind = kind;
  r.rows = a->shape[0];
  const bool mask = kind == "hsi_pool";
  double sum = 0;
  for (int64_t row = 0; row < r.rows; ++row) {
    const std::vector<int32_t> x = chosen(*a, mask, row), y = chosen(*b, mask, row);
    std::vector<int32_t> both;
    std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(both));
    const double overlap = x.empty() ? (y.empty() ? 1.0 : 0.0) : double(both.size()) / x.size();
    sum += overlap;
    r.minOverlap = std::min(r.minOverlap, overlap);
    r.rowsEqual += x == y;
  }
  r.meanOverlap = r.rows > 0 ? sum / double(r.rows) : 1.0;
  return r;
}

/// csa-diff A_DIR B_DIR: every *_hidden.npy of A against B's, and every
/// decision file (--dump-decisions) of A against B's.
int compareDumps(const std::string &dirA, const std::string &dirB, bool haveMaxAbs,
                 double maxAbsBound, bool haveMinCosine, double minCosineBound,
                 bool haveMaxRelRms, double maxRelRmsBound,
                 std::optional<double> minTopkOverlap, std::optional<double> minRouting) {
  auto paired = pairedFiles(dirA, dirB);
  if (!paired.ok())
    return badInput(std::string(paired.status().message()));
  const std::vector<std::pair<std::string, std::string>> &names = (*paired)["hidden"];
  struct DecisionPair {
    std::string a, b, kind;
  };
  std::vector<DecisionPair> decisions;
  for (const char *kind : kDumpKinds)
    if (std::string_view(kind) != "hidden")
      for (const auto &[a, b] : (*paired)[kind])
        decisions.push_back({a, b, kind});
  if (names.empty() && decisions.empty())
    return badInput(dirA + ": no csa-run --dump-hidden or --dump-decisions files "
                           "(r<call>_<entry>-<step>_hidden.npy, _topk.npy, _hsi_pool.npy, "
                           "_moe_ids.npy)");
  if ((haveMaxAbs || haveMinCosine || haveMaxRelRms) && names.empty())
    return badInput(dirA + ": --max-abs, --min-cosine and --max-rel-rms bound hidden states; "
                           "it holds no --dump-hidden files");
  if ((minTopkOverlap || minRouting) && decisions.empty())
    return badInput(dirA + ": --min-topk-overlap and --min-routing-agreement bound decisions; "
                           "it holds no --dump-decisions files");
  std::vector<SelectionResult> selections;
  for (const DecisionPair &d : decisions) {
    const std::string &kind = d.kind;
    auto r = compareSelection(dirA + "/" + d.a, dirB + "/" + d.b, d.a, kind);
    if (!r.ok())
      return badInput(std::string(r.status().message()));
    const std::optional<double> bound = kind == "moe_ids" ? minRouting : minTopkOverlap;
    if (bound && !(r->meanOverlap >= *bound))
      r->failed.push_back(kind == "moe_ids" ? "min-routing-agreement" : "min-topk-overlap");
    selections.push_back(std::move(*r));
  }
  std::vector<BlockResult> results;
  std::vector<float> a, b;
  for (const auto &[name, nameB] : names) {
    const std::string pathA = dirA + "/" + name, pathB = dirB + "/" + nameB;
    auto ra = NpyF32Reader::open(pathA);
    if (!ra.ok())
      return badInput(std::string(ra.status().message()));
    auto rb = NpyF32Reader::open(pathB);
    if (!rb.ok())
      return badInput(std::string(rb.status().message()));
    if (ra->header().shape != rb->header().shape)
      return badInput(absl::StrCat("the shapes differ: ", pathA, " is ",
                                   shapeText(ra->header().shape), ", ", pathB, " is ",
                                   shapeText(rb->header().shape)));
    Comparison c;
    for (uint64_t row = 0; row < ra->rows(); ++row) {
      if (absl::Status st = ra->readRow(row, a); !st.ok())
        return badInput(std::string(st.message()));
      if (absl::Status st = rb->readRow(row, b); !st.ok())
        return badInput(std::string(st.message()));
      c.add(a, b);
    }
    BlockResult r;
    r.name = name;
    r.maxAbs = c.maxAbs();
    r.relRms = c.relRms();
    r.cosine = c.cosine();
    if (haveMaxAbs && !(r.maxAbs <= maxAbsBound))
      r.failed.push_back("max-abs");
    if (haveMinCosine && !(r.cosine >= minCosineBound))
      r.failed.push_back("min-cosine");
    if (haveMaxRelRms && !(r.relRms <= maxRelRmsBound))
      r.failed.push_back("max-rel-rms");
    results.push_back(std::move(r));
  }
  const BlockResult *first = nullptr, *worst = results.empty() ? nullptr : &results[0];
  int64_t failing = 0;
  for (const BlockResult &r : results) {
    if (!(r.relRms <= worst->relRms))
      worst = &r;
    if (!r.failed.empty()) {
      ++failing;
      if (!first)
        first = &r;
    }
  }
  // The decisions: the lowest mean overlap of each kind, the first failure.
  const SelectionResult *firstSelection = nullptr;
  int64_t failingSelections = 0;
  std::vector<std::string> selectionStats;
  for (const char *kind : {"topk", "hsi_pool", "moe_ids"}) {
    const SelectionResult *low = nullptr;
    int64_t files = 0;
    for (const SelectionResult &r : selections)
      if (r.kind == kind) {
        ++files;
        if (!low || r.meanOverlap < low->meanOverlap)
          low = &r;
      }
    if (low)
      selectionStats.push_back(absl::StrCat(
          files, " ", kind, " files, lowest mean ",
          std::string(kind) == "moe_ids" ? "agreement " : "overlap ", number(low->meanOverlap),
          " (", low->name, ")"));
  }
  for (const SelectionResult &r : selections)
    if (!r.failed.empty()) {
      ++failingSelections;
      if (!firstSelection)
        firstSelection = &r;
    }
  const bool bounded =
      haveMaxAbs || haveMinCosine || haveMaxRelRms || minTopkOverlap || minRouting;
  std::vector<std::string> statParts;
  if (worst)
    statParts.push_back(absl::StrCat(results.size(), " blocks; largest relative RMS ",
                                     number(worst->relRms), " (", worst->name, ", max-abs ",
                                     number(worst->maxAbs), ", cosine ",
                                     number(worst->cosine), ")"));
  statParts.insert(statParts.end(), selectionStats.begin(), selectionStats.end());
  const std::string stats = absl::StrJoin(statParts, "; ");
  std::string summary;
  if (first)
    summary = absl::StrCat("csa-diff: FAIL at ", first->name, ": ",
                           absl::StrJoin(first->failed, " and "), " (", failing, " of ",
                           results.size(), " blocks out of bounds); ", stats);
  else if (firstSelection)
    summary = absl::StrCat("csa-diff: FAIL at ", firstSelection->name, ": ",
                           absl::StrJoin(firstSelection->failed, " and "), " (",
                           failingSelections, " of ", selections.size(),
                           " decision files out of bounds); ", stats);
  else
    summary = absl::StrCat(bounded ? "csa-diff: within bounds: " : "csa-diff: no bounds given: ",
                           stats);
  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const BlockResult &r : results)
      rows.push_back({{"file", r.name},
                      {"max_abs", jsonNumber(r.maxAbs)},
                      {"rel_rms", jsonNumber(r.relRms)},
                      {"cosine", jsonNumber(r.cosine)},
                      {"failed", r.failed}});
    nlohmann::json decisionRows = nlohmann::json::array();
    for (const SelectionResult &r : selections)
      decisionRows.push_back({{"file", r.name},
                              {"kind", r.kind},
                              {"rows", r.rows},
                              {"rows_equal", r.rowsEqual},
                              {"mean_overlap", r.meanOverlap},
                              {"min_overlap", r.minOverlap},
                              {"failed", r.failed}});
    const std::string *firstName =
        first ? &first->name : firstSelection ? &firstSelection->name : nullptr;
    nlohmann::json out = {{"a", dirA},
                          {"b", dirB},
                          {"blocks", rows},
                          {"decisions", decisionRows},
                          {"failed_blocks", failing},
                          {"failed_decisions", failingSelections},
                          {"first_failure", firstName ? nlohmann::json(*firstName) : nlohmann::json(nullptr)},
                          {"within_bounds", firstName == nullptr},
                          {"summary", summary}};
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    if (!results.empty())
      std::printf("%-34s %12s %12s %12s\n", "block", "max-abs", "rel-rms", "cosine");
    for (const BlockResult &r : results)
      std::printf("%-34s %12.6g %12.6g %12.9f%s%s\n", r.name.c_str(), r.maxAbs, r.relRms,
                  r.cosine, r.failed.empty() ? "" : "  FAIL ",
                  absl::StrJoin(r.failed, ", ").c_str());
    if (!selections.empty())
      std::printf("%-34s %12s %12s %12s\n", "decision", "mean-overlap", "min-overlap",
                  "rows-equal");
    for (const SelectionResult &r : selections)
      std::printf("%-34s %12.6f %12.6f %5lld of %-4lld%s%s\n", r.name.c_str(), r.meanOverlap,
                  r.minOverlap, (long long)r.rowsEqual, (long long)r.rows,
                  r.failed.empty() ? "" : "  FAIL ", absl::StrJoin(r.failed, ", ").c_str());
    std::printf("%s\n", summary.c_str());
  }
  return first || firstSelection ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  csa::tools::installLastResortHandler("csa-diff");
  // --json before anything is read: a bad flag is reported as JSON too.
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--json")
      json = true;
  csa::tools::CommandLine flags("csa-diff", kUsage);
  constexpr double kMax = std::numeric_limits<double>::max();
  flags.range<double>(FLAGS_max_abs, 0, kMax, "needs a number >= 0")
      .range<double>(FLAGS_min_cosine, -1, 1, "needs a number in [-1, 1]")
      .range<double>(FLAGS_max_rel_rms, 0, kMax, "needs a number >= 0")
      .range<double>(FLAGS_min_topk_overlap, 0, 1, "needs a number in [0, 1]")
      .range<double>(FLAGS_min_routing_agreement, 0, 1, "needs a number in [0, 1]")
      .onError([](const std::string &message) {
        if (json)
          std::cout << nlohmann::json{{"error", message}}.dump(
                           -1, ' ', false, nlohmann::json::error_handler_t::replace)
                    << "\n";
      });
  if (!flags.parse(argc, argv))
    return flags.exitCode();
  json = absl::GetFlag(FLAGS_json);
  const std::vector<std::string> &files = flags.positional();
  const std::optional<double> maxAbs = absl::GetFlag(FLAGS_max_abs);
  const std::optional<double> minCosine = absl::GetFlag(FLAGS_min_cosine);
  const std::optional<double> maxRelRms = absl::GetFlag(FLAGS_max_rel_rms);
  const bool haveMaxAbs = maxAbs.has_value(), haveMinCosine = minCosine.has_value(),
             haveMaxRelRms = maxRelRms.has_value();
  const double maxAbsBound = maxAbs.value_or(0), minCosineBound = minCosine.value_or(0),
               maxRelRmsBound = maxRelRms.value_or(0);
  const bool requireArgmax = absl::GetFlag(FLAGS_require_argmax);
  if (files.size() != 2)
    return files.empty() && argc == 1
               ? flags.usage()
               : badInput(absl::StrCat("give two .npy files, got ", files.size()));
  const bool dirA = std::filesystem::is_directory(files[0]),
             dirB = std::filesystem::is_directory(files[1]);
  if (dirA != dirB)
    return badInput(absl::StrCat("give two .npy files or two --dump-hidden directories, got ",
                                 dirA ? files[0] : files[1], " (a directory) and ",
                                 dirA ? files[1] : files[0]));
  if (dirA) {
    if (requireArgmax)
      return badInput("--require-argmax compares logits, not --dump-hidden directories");
    return compareDumps(files[0], files[1], haveMaxAbs, maxAbsBound, haveMinCosine,
                        minCosineBound, haveMaxRelRms, maxRelRmsBound,
                        absl::GetFlag(FLAGS_min_topk_overlap),
                        absl::GetFlag(FLAGS_min_routing_agreement));
  }
  if (absl::GetFlag(FLAGS_min_topk_overlap) || absl::GetFlag(FLAGS_min_routing_agreement))
    return badInput("--min-topk-overlap and --min-routing-agreement compare --dump-decisions "
                    "directories, not logits files");
  if (haveMaxRelRms)
    return badInput("--max-rel-rms compares --dump-hidden directories, not logits files");

  std::vector<NpyF32Reader> readers;
  for (const std::string &f : files) {
    auto r = NpyF32Reader::open(f);
    if (!r.ok())
      return badInput(std::string(r.status().message()));
    const std::vector<int64_t> &shape = r->header().shape;
    if (shape.size() != 2 && shape.size() != 3)
      return badInput(absl::StrCat(f, ": shape ", shapeText(shape),
                                   " is not [steps, vocab] or [batch, steps, vocab]"));
    for (int64_t d : shape)
      if (d == 0)
        return badInput(absl::StrCat(f, ": shape ", shapeText(shape), " holds no logits"));
    readers.push_back(std::move(*r));
  }
  const std::vector<int64_t> &shapeA = readers[0].header().shape;
  const std::vector<int64_t> &shapeB = readers[1].header().shape;
  if (shapeA != shapeB)
    return badInput(absl::StrCat("the shapes differ: ", files[0], " is ", shapeText(shapeA),
                                 ", ", files[1], " is ", shapeText(shapeB)));
  const bool batched = shapeA.size() == 3;
  const int64_t steps = shapeA[shapeA.size() - 2];
  const int64_t vocab = shapeA.back();

  auto where = [&](const StepResult &r) {
    return batched ? absl::StrCat("sequence ", r.sequence, " step ", r.step)
                   : absl::StrCat("step ", r.step);
  };
  std::vector<StepResult> results;
  std::vector<float> a, b;
  for (uint64_t row = 0; row < readers[0].rows(); ++row) {
    for (int k = 0; k < 2; ++k)
      if (absl::Status st = readers[size_t(k)].readRow(row, k ? b : a); !st.ok())
        return badInput(std::string(st.message()));
    StepResult r = compareRows(a, b);
    r.sequence = int64_t(row) / steps;
    r.step = int64_t(row) % steps;
    if (haveMaxAbs && !(r.maxAbs <= maxAbsBound))
      r.failed.push_back("max-abs");
    if (haveMinCosine && !(r.cosine >= minCosineBound))
      r.failed.push_back("min-cosine");
    if (requireArgmax && r.argmaxA != r.argmaxB)
      r.failed.push_back("argmax");
    results.push_back(std::move(r));
  }

  // The extremes over all steps, the first failure, the counts.
  const StepResult *worstAbs = &results[0], *worstCos = &results[0], *first = nullptr;
  int64_t agree = 0, failing = 0;
  for (const StepResult &r : results) {
    if (!(r.maxAbs <= worstAbs->maxAbs))
      worstAbs = &r;
    if (!(r.cosine >= worstCos->cosine) && !std::isnan(worstCos->cosine))
      worstCos = &r;
    agree += r.argmaxA == r.argmaxB;
    if (!r.failed.empty()) {
      ++failing;
      if (!first)
        first = &r;
    }
  }
  auto boundText = [&](const StepResult &r) {
    std::vector<std::string> parts;
    for (const std::string &f : r.failed) {
      if (f == "max-abs")
        parts.push_back(absl::StrCat("max-abs ", number(r.maxAbs), " > ", number(maxAbsBound)));
      else if (f == "min-cosine")
        parts.push_back(absl::StrCat("cosine ", number(r.cosine), " < ", number(minCosineBound)));
      else
        parts.push_back(absl::StrCat("argmax ", r.argmaxA, " != ", r.argmaxB));
    }
    return absl::StrJoin(parts, " and ");
  };
  const int64_t total = int64_t(results.size());
  auto count = [](int64_t n, const char *what) {
    return absl::StrCat(n, " ", what, n == 1 ? "" : "s");
  };
  std::string stats = absl::StrCat(
      count(total, "step"),
      batched ? absl::StrCat(" (", count(shapeA[0], "sequence"), " x ", steps, ")") : "",
      " of ", vocab, " logits; max-abs ", number(worstAbs->maxAbs), " (", where(*worstAbs),
      ")", haveMaxAbs ? absl::StrCat(", bound ", number(maxAbsBound)) : "",
      "; min cosine ", number(worstCos->cosine), " (", where(*worstCos), ")",
      haveMinCosine ? absl::StrCat(", bound ", number(minCosineBound)) : "",
      "; argmax equal at ", agree, " of ", count(total, "step"));
  std::string summary;
  if (first)
    summary = absl::StrCat("csa-diff: FAIL at ", where(*first), ": ", boundText(*first),
                           " (", failing, " of ", count(total, "step"), " out of bounds); ",
                           stats);
  else if (haveMaxAbs || haveMinCosine || requireArgmax)
    summary = absl::StrCat("csa-diff: within bounds: ", stats);
  else
    summary = absl::StrCat("csa-diff: no bounds given: ", stats);

  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const StepResult &r : results) {
      nlohmann::json row = {{"step", r.step},
                            {"max_abs", jsonNumber(r.maxAbs)},
                            {"cosine", jsonNumber(r.cosine)},
                            {"argmax_a", r.argmaxA},
                            {"argmax_b", r.argmaxB},
                            {"argmax_equal", r.argmaxA == r.argmaxB},
                            {"failed", r.failed}};
      if (batched)
        row["sequence"] = r.sequence;
      rows.push_back(std::move(row));
    }
    auto at = [&](const StepResult &r, double v) {
      nlohmann::json j = {{"value", jsonNumber(v)}, {"step", r.step}};
      if (batched)
        j["sequence"] = r.sequence;
      return j;
    };
    nlohmann::json out = {
        {"a", files[0]},
        {"b", files[1]},
        {"shape", shapeA},
        {"bounds",
         {{"max_abs", haveMaxAbs ? nlohmann::json(maxAbsBound) : nlohmann::json(nullptr)},
          {"min_cosine",
           haveMinCosine ? nlohmann::json(minCosineBound) : nlohmann::json(nullptr)},
          {"require_argmax", requireArgmax}}},
        {"steps", rows},
        {"max_abs", at(*worstAbs, worstAbs->maxAbs)},
        {"min_cosine", at(*worstCos, worstCos->cosine)},
        {"argmax_equal_steps", agree},
        {"failed_steps", failing},
        {"first_failure", first ? nlohmann::json(at(*first, 0)) : nlohmann::json(nullptr)},
        {"within_bounds", first == nullptr},
        {"summary", summary}};
    if (first) {
      out["first_failure"].erase("value");
      out["first_failure"]["failed"] = first->failed;
    }
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::printf("%s%6s %12s %12s %9s %9s\n", batched ? "     seq" : "", "step",
                "max-abs", "cosine", "argmax-a", "argmax-b");
    for (const StepResult &r : results) {
      std::string mark = r.failed.empty()
                             ? (r.argmaxA == r.argmaxB ? "" : "argmax differs")
                             : "FAIL " + absl::StrJoin(r.failed, ", ");
      if (batched)
        std::printf("%8lld", (long long)r.sequence);
      std::printf("%6lld %12.6g %12.9f %9lld %9lld%s%s\n", (long long)r.step, r.maxAbs,
                  r.cosine, (long long)r.argmaxA, (long long)r.argmaxB,
                  mark.empty() ? "" : "  ", mark.c_str());
    }
    std::printf("%s\n", summary.c_str());
  }
  return first ? 1 : 0;
}

//===- RecallReport.cpp - csa-run --analyze=recall's table and JSON -------===//
#include "tools/csa-run/RecallReport.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

namespace csa::tools {

std::string layerMode(const std::string &schedule, int64_t layer) {
  int64_t at = 0;
  for (char c : schedule) {
    if (std::isdigit(static_cast<unsigned char>(c)) || c == ' ' || c == '|' || c == '_')
      continue;
    if (at++ != layer)
      continue;
    switch (c) {
    case 'W':
      return "swa";
    case 'F':
    case 'C':
      return "full";
    case 'R':
      return "reindex";
    case '.':
      return "reuse";
    default:
      return "";
    }
  }
  return "";
}

nlohmann::ordered_json recallJson(const std::vector<runtime::RecallEntry> &rows,
                                  const std::string &schedule) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const runtime::RecallEntry &r : rows)
    out.push_back({{"run", r.run},
                   {"entry", r.entry},
                   {"layer", r.layer},
                   {"mode", layerMode(schedule, r.layer)},
                   {"first_position", r.firstPosition},
                   {"rows", r.rows},
                   {"k", r.k},
                   {"visible", r.visible},
                   {"selected", r.selected},
                   {"recall", r.recall},
                   {"recall_min", r.recallMin},
                   {"ceiling", r.ceiling}});
  return out;
}

void printRecall(const std::vector<runtime::RecallEntry> &rows, const std::string &schedule) {
  struct Sum {
    int64_t steps = 0, rows = 0;
    double visible = 0, selected = 0, recall = 0, ceiling = 0, recallMin = 1;
  };
  // Prefill's rows first, then decode's, each by layer.
  std::map<std::pair<int, int64_t>, Sum> sums;
  for (const runtime::RecallEntry &r : rows) {
    if (r.rows == 0)
      continue;
    Sum &s = sums[{r.entry == "prefill" ? 0 : 1, r.layer}];
    ++s.steps;
    s.rows += r.rows;
    const double w = double(r.rows);
    s.visible += w * r.visible;
    s.selected += w * r.selected;
    s.recall += w * r.recall;
    s.ceiling += w * r.ceiling;
    s.recallMin = std::min(s.recallMin, r.recallMin);
  }
  std::printf("recall: the share of each query's dense softmax mass over the visible compressed "
              "entries (mean over heads) that its selected set holds, and the most that as many "
              "entries hold (ceiling)\n");
  std::printf("  %-7s %5s %-7s %6s %7s %8s %8s %7s %7s %7s\n", "entry", "layer", "mode",
              "steps", "rows", "visible", "selected", "recall", "min", "ceiling");
  for (const auto &[key, s] : sums) {
    const double w = double(s.rows);
    std::printf("  %-7s %5lld %-7s %6lld %7lld %8.1f %8.1f %7.4f %7.4f %7.4f\n",
                key.first == 0 ? "prefill" : "decode", (long long)key.second,
                layerMode(schedule, key.second).c_str(), (long long)s.steps,
                (long long)s.rows, s.visible / w, s.selected / w, s.recall / w, s.recallMin,
                s.ceiling / w);
  }
  if (sums.empty())
    std::printf("  (no query saw a compressed entry)\n");
}

} // namespace csa::tools

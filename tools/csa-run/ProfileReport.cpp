//===- ProfileReport.cpp - csa-run --profile's table and JSON -------------===//
#include "tools/csa-run/ProfileReport.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>
#include <string>

namespace csa::tools {

using Json = nlohmann::ordered_json;

namespace {

/// The profile's total time and the host's share of it.
void totals(const std::vector<runtime::ProfileEntry> &rows, double &total, double &host) {
  for (const runtime::ProfileEntry &e : rows) {
    total += e.seconds;
    host += e.hostSeconds;
  }
}

/// A layerProfile() row's layer in the JSON: its number, or null before
/// and after the layers (with "part" saying which).
void putLayer(Json &row, int64_t layer) {
  row["layer"] = layer >= 0 ? Json(layer) : Json(nullptr);
  row["part"] = layer >= 0 ? "layer"
                : layer == runtime::ProfileEntry::kAfterLayers ? "head"
                                                               : "embed";
}

} // namespace

Json profileJson(const std::vector<runtime::ProfileEntry> &kinds,
                 const std::vector<runtime::ProfileEntry> &layerRows) {
  double total = 0, host = 0;
  totals(kinds, total, host);
  auto row = [&](const runtime::ProfileEntry &e) {
    return Json{{"step", e.step},
                          {"op", e.op},
                          {"calls", e.calls},
                          {"ms", e.seconds * 1e3},
                          {"host_ms", e.hostSeconds * 1e3},
                          {"share", total > 0 ? e.seconds / total : 0.0},
                          {"bytes_to_device", e.bytesToDevice},
                          {"bytes_to_host", e.bytesToHost}};
  };
  Json byKind = Json::array();
  std::map<std::string, runtime::ProfileEntry> ops;
  std::vector<std::string> opOrder; // slowest kind first, as by_kind
  for (const runtime::ProfileEntry &e : kinds) {
    byKind.push_back(row(e));
    runtime::ProfileEntry &op = ops[e.op];
    if (op.op.empty()) {
      op.op = op.step = e.op;
      opOrder.push_back(e.op);
    }
    op.calls += e.calls;
    op.seconds += e.seconds;
    op.hostSeconds += e.hostSeconds;
    op.bytesToDevice += e.bytesToDevice;
    op.bytesToHost += e.bytesToHost;
  }
  std::vector<runtime::ProfileEntry> opRows;
  for (const std::string &name : opOrder)
    opRows.push_back(ops[name]);
  std::stable_sort(opRows.begin(), opRows.end(),
                   [](const auto &a, const auto &b) { return a.seconds > b.seconds; });
  Json byOp = Json::array();
  for (const runtime::ProfileEntry &e : opRows) {
    Json r = row(e);
    r.erase("step");
    byOp.push_back(r);
  }
  // By layer: rows in plan order; the layers' sums in layer order (the
  // embedding first, the head last).
  Json byLayer = Json::array();
  struct LayerSum {
    double prefill = 0, decode = 0, host = 0;
    int64_t calls = 0;
  };
  auto layerOrder = [](int64_t layer) {
    return layer == runtime::ProfileEntry::kBeforeLayers ? INT64_MIN
           : layer == runtime::ProfileEntry::kAfterLayers ? INT64_MAX
                                                          : layer;
  };
  std::map<int64_t, std::pair<int64_t, LayerSum>> sums; // order -> (layer, sums)
  for (const runtime::ProfileEntry &e : layerRows) {
    Json r = row(e);
    r["entry"] = e.entry;
    putLayer(r, e.layer);
    byLayer.push_back(r);
    auto &[layer, sum] = sums[layerOrder(e.layer)];
    layer = e.layer;
    (e.entry == "decode" ? sum.decode : sum.prefill) += e.seconds;
    sum.host += e.hostSeconds;
    sum.calls += e.calls;
  }
  Json layers = Json::array();
  for (const auto &[order, entry] : sums) {
    const auto &[layer, sum] = entry;
    Json r{{"ms", (sum.prefill + sum.decode) * 1e3},
                     {"prefill_ms", sum.prefill * 1e3},
                     {"decode_ms", sum.decode * 1e3},
                     {"host_ms", sum.host * 1e3},
                     {"calls", sum.calls}};
    putLayer(r, layer);
    layers.push_back(r);
  }
  return {{"total_ms", total * 1e3}, {"host_ms", host * 1e3}, {"by_kind", byKind},
          {"by_op", byOp},           {"by_layer", byLayer},    {"layers", layers}};
}

void printProfile(const std::vector<runtime::ProfileEntry> &rows) {
  double total = 0, host = 0;
  totals(rows, total, host);
  std::printf("profile: %.3f ms in %zu kinds of step, %.3f ms of it in the host's "
              "drivers (ms, calls, share, host ms, op and kernels)\n",
              total * 1e3, rows.size(), host * 1e3);
  for (const runtime::ProfileEntry &e : rows)
    std::printf("  %10.3f ms %7lld %5.1f%% %9.3f  %s\n", e.seconds * 1e3,
                (long long)e.calls, total > 0 ? 100 * e.seconds / total : 0.0,
                e.hostSeconds * 1e3, e.step.c_str());
  // The GPU path: what each kind of step copied between host and device.
  std::vector<runtime::ProfileEntry> copying;
  double toDevice = 0, toHost = 0;
  for (const runtime::ProfileEntry &e : rows) {
    toDevice += double(e.bytesToDevice);
    toHost += double(e.bytesToHost);
    if (e.bytesToDevice + e.bytesToHost > 0)
      copying.push_back(e);
  }
  if (!copying.empty()) {
    std::sort(copying.begin(), copying.end(), [](const auto &a, const auto &b) {
      return a.bytesToDevice + a.bytesToHost > b.bytesToDevice + b.bytesToHost;
    });
    std::printf("transfers: %.3f MB to the device, %.3f MB to the host "
                "(MB to the device, MB to the host, step; the largest 12)\n",
                toDevice / 1e6, toHost / 1e6);
    for (size_t i = 0; i < copying.size() && i < 12; ++i)
      std::printf("  %12.3f %12.3f  %s\n", double(copying[i].bytesToDevice) / 1e6,
                  double(copying[i].bytesToHost) / 1e6, copying[i].step.c_str());
  }
}

} // namespace csa::tools

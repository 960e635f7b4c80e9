//===- Sweep.cpp - csa-compile --sweep: one cost row per variant ----------===//

#include "tools/csa-compile/Sweep.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <set>

// Left-aligned in `width` columns.
static std::string padRight(const std::string &s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

namespace csa::sweep {
namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// A path of the file relative to the sweep file's folder.
std::string besideFile(const std::string &sweepPath, const std::string &path) {
  if (path.empty() || llvm::sys::path::is_absolute(path))
    return path;
  llvm::SmallString<256> full(llvm::sys::path::parent_path(sweepPath));
  llvm::sys::path::append(full, path);
  return full.str().str();
}

llvm::Expected<Row> parseRow(const llvm::json::Value &value, const std::string &where,
                             const std::string &path) {
  const llvm::json::Object *object = value.getAsObject();
  if (!object)
    return error(where + ": must be an object");
  static const std::set<std::string> known = {
      "name", "variant", "config", "schedule", "schedule_json", "no_ced",
      "no_bounded_replay", "replay_start_layer", "replay_tail", "main_kv_format",
      "index_key_format"};
  for (const auto &[key, v] : *object)
    if (!known.count(key.str()))
      return error(where + ": unknown field '" + key.str() +
                   "' (name, variant, config, schedule, schedule_json, no_ced, "
                   "no_bounded_replay, replay_start_layer, replay_tail, main_kv_format, "
                   "index_key_format)");
  Row row;
  auto text = [&](const char *key, std::string &out) -> llvm::Error {
    const llvm::json::Value *v = object->get(key);
    if (!v)
      return llvm::Error::success();
    auto s = v->getAsString();
    if (!s || s->empty())
      return error(where + "." + key + ": must be a non-empty string");
    out = s->str();
    return llvm::Error::success();
  };
  auto flag = [&](const char *key, bool &out) -> llvm::Error {
    const llvm::json::Value *v = object->get(key);
    if (!v)
      return llvm::Error::success();
    auto b = v->getAsBoolean();
    if (!b)
      return error(where + "." + key + ": must be true or false");
    out = *b;
    return llvm::Error::success();
  };
  auto integer = [&](const char *key, int64_t &out) -> llvm::Error {
    const llvm::json::Value *v = object->get(key);
    if (!v)
      return llvm::Error::success();
    auto i = v->getAsInteger();
    if (!i || *i < 0 || *i > 1000000)
      return error(where + "." + key + ": must be an integer from 0 to 10^6");
    out = *i;
    return llvm::Error::success();
  };
  for (auto [key, out] : {std::pair<const char *, std::string *>{"name", &row.name},
                          {"variant", &row.variant}, {"config", &row.config},
                          {"schedule", &row.schedule}, {"schedule_json", &row.scheduleJson},
                          {"main_kv_format", &row.mainKvFormat},
                          {"index_key_format", &row.indexKeyFormat}})
    if (llvm::Error e = text(key, *out))
      return std::move(e);
  if (row.name.empty())
    return error(where + ".name: missing (each row names its variant)");
  if (!row.mainKvFormat.empty() && row.mainKvFormat != "fp4" && row.mainKvFormat != "fp8")
    return error(where + ".main_kv_format: must be \"fp4\" or \"fp8\", not \"" +
                 row.mainKvFormat + "\"");
  if (!row.indexKeyFormat.empty() && row.indexKeyFormat != "fp4" && row.indexKeyFormat != "fp8")
    return error(where + ".index_key_format: must be \"fp4\" or \"fp8\", not \"" +
                 row.indexKeyFormat + "\"");
  if (!row.variant.empty() && !row.config.empty())
    return error(where + ": give variant or config, not both");
  if (llvm::Error e = flag("no_ced", row.noCed))
    return std::move(e);
  if (llvm::Error e = flag("no_bounded_replay", row.noBoundedReplay))
    return std::move(e);
  if (llvm::Error e = integer("replay_start_layer", row.replayStartLayer))
    return std::move(e);
  if (llvm::Error e = integer("replay_tail", row.replayTail))
    return std::move(e);
  row.config = besideFile(path, row.config);
  row.scheduleJson = besideFile(path, row.scheduleJson);
  return row;
}

std::string humanSi(double v) {
  const char *units[] = {"", " K", " M", " G", " T", " P"};
  int i = 0;
  while (std::abs(v) >= 1000 && i < 5)
    v /= 1000, ++i;
  return llvm::formatv("{0:F2}{1}", v, units[i]).str();
}

std::string contextName(int64_t c) {
  if (c % (1 << 20) == 0)
    return std::to_string(c >> 20) + "M";
  if (c % 1024 == 0)
    return std::to_string(c >> 10) + "K";
  return std::to_string(c);
}

std::string csvField(const std::string &s) {
  if (s.find_first_of(",\"\n") == std::string::npos)
    return s;
  std::string out = "\"";
  for (char c : s)
    out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

} // namespace

llvm::Expected<File> parseFile(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return error(path + ": cannot read the sweep file: " + buffer.getError().message());
  if ((*buffer)->getBufferSize() > (size_t(16) << 20))
    return error(path + ": larger than 16 MiB; a sweep file lists variants");
  auto parsed = llvm::json::parse((*buffer)->getBuffer());
  if (!parsed)
    return error(path + ": not valid JSON: " + llvm::toString(parsed.takeError()));
  File file;
  const llvm::json::Array *rows = parsed->getAsArray();
  if (const llvm::json::Object *object = parsed->getAsObject()) {
    for (const auto &[key, v] : *object)
      if (key != "contexts" && key != "prefill_tokens" && key != "variants")
        return error(path + ": unknown field '" + key.str() +
                     "' (contexts, prefill_tokens, variants)");
    rows = object->getArray("variants");
    if (!rows)
      return error(path + ": variants: missing (a list of rows)");
    if (const llvm::json::Value *c = object->get("contexts")) {
      const llvm::json::Array *list = c->getAsArray();
      if (!list || list->empty())
        return error(path + ": contexts: must be a non-empty list of token counts");
      for (size_t i = 0; i < list->size(); ++i) {
        auto n = (*list)[i].getAsInteger();
        if (!n || *n < 1 || *n > (int64_t(1) << 30))
          return error(llvm::formatv("{0}: contexts[{1}]: must be a count from 1 to 2^30",
                                     path, i));
        file.contexts.push_back(*n);
      }
    }
    if (const llvm::json::Value *p = object->get("prefill_tokens")) {
      auto n = p->getAsInteger();
      if (!n || *n < 1 || *n > 131072)
        return error(path + ": prefill_tokens: must be a count from 1 to 131072");
      file.prefillTokens = *n;
    }
  }
  if (!rows)
    return error(path + ": must be a list of variants or {\"variants\": [...]}");
  if (rows->empty())
    return error(path + ": lists no variants");
  std::set<std::string> names;
  for (size_t i = 0; i < rows->size(); ++i) {
    auto row = parseRow((*rows)[i], llvm::formatv("{0}: variants[{1}]", path, i).str(), path);
    if (!row)
      return row.takeError();
    if (!names.insert(row->name).second)
      return error(llvm::formatv("{0}: variants[{1}].name: '{2}' is given twice", path, i,
                                 row->name));
    file.rows.push_back(std::move(*row));
  }
  if (file.contexts.empty())
    file.contexts = defaultReportContexts();
  return file;
}

llvm::Error run(const File &file,
                const std::function<llvm::Expected<ModelCost>(const Row &)> &cost,
                Format format, llvm::raw_ostream &os) {
  std::vector<ModelCost> costs;
  for (const Row &row : file.rows) {
    auto c = cost(row);
    if (!c)
      return error("variant '" + row.name + "': " + llvm::toString(c.takeError()));
    costs.push_back(std::move(*c));
  }
  auto persistent = [](const ModelCost &c) {
    return c.swaBytesPerSequence + c.compressorBytesPerSequence;
  };
  auto prefillOf = [](const ModelCost &c) {
    if (c.prefill.empty())
      return 0.0;
    return c.replayCompiled && c.replayStartLayer >= 0 ? c.prefill.front().weightedFlopsReplay
                                                       : c.prefill.front().weightedFlops;
  };
  auto kvRead = [](const DecodeCost &d) { return double(d.indexerBytes + d.attentionBytes); };

  if (format == Format::Json) {
    llvm::json::Array rows;
    for (size_t i = 0; i < costs.size(); ++i) {
      const ModelCost &c = costs[i];
      llvm::json::Array decode;
      for (const DecodeCost &d : c.decode)
        decode.push_back(llvm::json::Object{{"context", d.context},
                                            {"weighted_flops", d.weightedFlops},
                                            {"kv_bytes_read", kvRead(d)},
                                            {"global_kv_bytes", d.globalKvBytes}});
      llvm::json::Object prefill{{"tokens", file.prefillTokens},
                                 {"weighted_flops", prefillOf(c)},
                                 {"bounded_replay", c.replayCompiled && c.replayStartLayer >= 0}};
      if (!c.prefill.empty()) {
        prefill["weighted_flops_every_layer"] = c.prefill.front().weightedFlops;
        prefill["weighted_flops_bounded_replay"] = c.prefill.front().weightedFlopsReplay;
      }
      rows.push_back(llvm::json::Object{
          {"name", file.rows[i].name},
          {"schedule", c.schedule},
          {"global_kv_bytes_per_token", c.globalKvBytesPerToken},
          {"persistent_bytes_per_sequence", persistent(c)},
          {"parameters", c.parameters},
          {"active_parameters", c.activeParameters},
          {"decode", std::move(decode)},
          {"prefill", std::move(prefill)}});
    }
    llvm::json::Object root{{"contexts", llvm::json::Array(file.contexts)},
                            {"prefill_tokens", file.prefillTokens},
                            {"variants", std::move(rows)}};
    os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
    return llvm::Error::success();
  }
  if (format == Format::Csv) {
    os << "name,schedule,global_kv_bytes_per_token,persistent_bytes_per_sequence,parameters,"
          "active_parameters";
    for (int64_t ctx : file.contexts)
      os << ",decode_flops_" << ctx << ",decode_kv_bytes_" << ctx;
    os << ",prefill_flops_" << file.prefillTokens << "\n";
    for (size_t i = 0; i < costs.size(); ++i) {
      const ModelCost &c = costs[i];
      os << csvField(file.rows[i].name) << "," << c.schedule << ","
         << llvm::formatv("{0}", c.globalKvBytesPerToken) << "," << persistent(c) << ","
         << c.parameters << "," << c.activeParameters;
      for (const DecodeCost &d : c.decode)
        os << llvm::formatv(",{0:E6},{1}", d.weightedFlops, int64_t(kvRead(d)));
      os << llvm::formatv(",{0:E6}", prefillOf(c)) << "\n";
    }
    return llvm::Error::success();
  }
  size_t nameWidth = 8, scheduleWidth = 8;
  for (size_t i = 0; i < costs.size(); ++i) {
    nameWidth = std::max(nameWidth, file.rows[i].name.size());
    scheduleWidth = std::max(scheduleWidth, costs[i].schedule.size());
  }
  os << llvm::formatv("{0} {1} {2,10} {3,11} {4,10} {5,10}", padRight("variant", nameWidth),
                      padRight("schedule", scheduleWidth),
                      "KV B/tok", "fixed B/seq", "params", "active");
  for (int64_t ctx : file.contexts)
    os << llvm::formatv(" {0,11} {1,11}", "FLOPs@" + contextName(ctx),
                        "KV rd@" + contextName(ctx));
  os << llvm::formatv(" {0,13}\n", "prefill@" + contextName(file.prefillTokens));
  for (size_t i = 0; i < costs.size(); ++i) {
    const ModelCost &c = costs[i];
    os << llvm::formatv("{0} {1} {2,10:F2} {3,11} {4,10} {5,10}",
                        padRight(file.rows[i].name, nameWidth),
                        padRight(c.schedule, scheduleWidth),
                        c.globalKvBytesPerToken, humanSi(double(persistent(c))) + "B",
                        humanSi(double(c.parameters)), humanSi(double(c.activeParameters)));
    for (const DecodeCost &d : c.decode)
      os << llvm::formatv(" {0,11} {1,11}", humanSi(d.weightedFlops),
                          humanSi(kvRead(d)) + "B");
    os << llvm::formatv(" {0,13}\n", humanSi(prefillOf(c)) +
                                         (c.replayCompiled && c.replayStartLayer >= 0 ? " (r)" : ""));
  }
  os << "KV B/tok: global KV bytes per token; fixed B/seq: SWA rings + compressor state; FLOPs: "
        "precision-weighted per decode token; KV rd: index-key + attention bytes read per "
        "decode token; prefill: weighted FLOPs of the prompt as compiled ((r): bounded replay)\n";
  return llvm::Error::success();
}

} // namespace csa::sweep

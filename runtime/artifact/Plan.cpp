//===- Plan.cpp - The execution plan of an artifact (plan.json)
//------------===//
#include "runtime/artifact/Plan.h"

#include "runtime/artifact/JsonFields.h"

#include "absl/strings/str_cat.h"

#include <cctype>
#include <limits>
#include <map>
#include <set>
#include <utility>

namespace csa {
namespace artifact {

using detail::Fields;
using nlohmann::json;

namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

struct NameOf {
  CacheKind kind;
  const char *name;
};
constexpr NameOf kCacheKinds[] = {
    {CacheKind::SwaRing, "swa_ring"},
    {CacheKind::GlobalCache, "global_cache"},
    {CacheKind::CompressorState, "compressor_state"},
};

constexpr const char *kScalars[] = {"position", "num_tokens", "batch_size"};
constexpr const char *kInputs[] = {"tokens", "positions"};
constexpr const char *kOutputs[] = {"logits"};
constexpr const char *kBuiltins[] = {"builtin.slice_rows"};
constexpr const char *kIndexOps[] = {"add", "sub", "mul", "div", "min", "max"};
constexpr const char *kDtypes[] = {"bf16", "f32", "i8", "i32", "i64"};

template <size_t N>
bool inList(const char *const (&list)[N], std::string_view name) {
  for (const char *item : list)
    if (name == item)
      return true;
  return false;
}
template <size_t N> std::string joinList(const char *const (&list)[N]) {
  std::string out;
  for (const char *item : list)
    absl::StrAppend(&out, out.empty() ? "" : ", ", item);
  return out;
}

bool mulOverflows(int64_t a, int64_t b, int64_t *out) {
  return __builtin_mul_overflow(a, b, out);
}

absl::StatusOr<CacheBuffer> parseCache(const json &value,
                                       const std::string &source,
                                       const std::string &path) {
  CSA_ARTIFACT_TRY_STATUS(detail::expectObject(value, source, path));
  Fields f(value, source, path);
  CacheBuffer cache;
  CSA_ARTIFACT_TRY(cache.id, f.string("id"));
  CSA_ARTIFACT_TRY(cache.layer, f.integer("layer", 0));
  CSA_ARTIFACT_TRY(std::string kind, f.string("kind"));
  auto parsed = parseCacheKind(kind);
  if (!parsed)
    return f.error("kind", absl::StrCat("unknown cache kind '", kind,
                                        "' (expected swa_ring, global_cache "
                                        "or compressor_state)"));
  cache.kind = *parsed;
  switch (cache.kind) {
  case CacheKind::SwaRing: {
    CSA_ARTIFACT_TRY_STATUS(f.onlyKnown(
        {"id", "layer", "kind", "window", "row_bytes", "fixed_bytes"}));
    CSA_ARTIFACT_TRY(cache.window, f.integer("window", 1));
    CSA_ARTIFACT_TRY(cache.rowBytes, f.integer("row_bytes", 1));
    CSA_ARTIFACT_TRY(cache.fixedBytes, f.integer("fixed_bytes", 1));
    int64_t product = 0;
    if (mulOverflows(cache.window, cache.rowBytes, &product) ||
        product != cache.fixedBytes)
      return f.error("fixed_bytes",
                     absl::StrCat("must be window x row_bytes = ", cache.window,
                                  " x ", cache.rowBytes, ", got ",
                                  cache.fixedBytes));
    break;
  }
  case CacheKind::GlobalCache: {
    CSA_ARTIFACT_TRY_STATUS(
        f.onlyKnown({"id", "layer", "kind", "ratio", "entry_bytes",
                     "main_row_bytes", "index_row_bytes", "main_row_rope",
                     "index_row_format"}));
    CSA_ARTIFACT_TRY(cache.ratio, f.integer("ratio", 1));
    CSA_ARTIFACT_TRY(cache.entryBytes, f.integer("entry_bytes", 1));
    CSA_ARTIFACT_TRY(cache.mainRowBytes,
                     f.optionalInteger("main_row_bytes", 1, 0));
    CSA_ARTIFACT_TRY(cache.indexRowBytes,
                     f.optionalInteger("index_row_bytes", 1, 0));
    CSA_ARTIFACT_TRY(cache.mainRowRope,
                     f.optionalInteger("main_row_rope", 1, 0));
    if (f.has("index_row_format")) {
      CSA_ARTIFACT_TRY(const std::string format, f.string("index_row_format"));
      if (format != "fp8")
        return f.error("index_row_format",
                       "must be \"fp8\" (absent: the released FP4 row), got \"" + format + "\"");
      if (cache.indexRowBytes <= 4)
        return f.error("index_row_format",
                       "needs index_row_bytes above 4 (values, then an fp32 scale)");
      cache.indexRowFp8 = true;
    }
    if (f.has("main_row_rope") && !f.has("main_row_bytes"))
      return f.error("main_row_rope", "needs main_row_bytes (the row it describes)");
    if (f.has("main_row_bytes") != f.has("index_row_bytes"))
      return f.error(f.has("main_row_bytes") ? "index_row_bytes"
                                             : "main_row_bytes",
                     "missing (main_row_bytes and index_row_bytes come "
                     "together)");
    if (cache.mainRowBytes > 0 &&
        (cache.mainRowBytes > kMaxInt - cache.indexRowBytes ||
         cache.mainRowBytes + cache.indexRowBytes != cache.entryBytes))
      return f.error("entry_bytes",
                     absl::StrCat("must be main_row_bytes + index_row_bytes "
                                  "= ",
                                  cache.mainRowBytes, " + ",
                                  cache.indexRowBytes, ", got ",
                                  cache.entryBytes));
    break;
  }
  case CacheKind::CompressorState: {
    CSA_ARTIFACT_TRY_STATUS(
        f.onlyKnown({"id", "layer", "kind", "ratio", "fixed_bytes"}));
    CSA_ARTIFACT_TRY(cache.ratio, f.integer("ratio", 2));
    CSA_ARTIFACT_TRY(cache.fixedBytes, f.integer("fixed_bytes", 1));
    break;
  }
  }
  return cache;
}

absl::StatusOr<KernelArg> parseArg(const json &value, const std::string &source,
                                   const std::string &path) {
  CSA_ARTIFACT_TRY_STATUS(detail::expectObject(value, source, path));
  Fields f(value, source, path);
  if (value.size() != 1)
    return f.errorAt(
        "", absl::StrCat("an argument is an object with exactly one of "
                         "weight, cache, transient, scalar, constant, "
                         "input, output, index; got ",
                         value.size(), " members"));
  CSA_ARTIFACT_TRY_STATUS(f.onlyKnown({"weight", "cache", "transient", "scalar",
                                       "constant", "input", "output", "index"}));
  KernelArg arg;
  const std::string key = value.begin().key();
  if (key == "index") {
    arg.kind = ArgKind::Index;
    arg.expr = value.begin().value();
    std::string problem = checkIndexExpr(arg.expr);
    if (!problem.empty())
      return f.error("index", problem);
    return arg;
  }
  if (key == "constant") {
    arg.kind = ArgKind::Constant;
    CSA_ARTIFACT_TRY(
        arg.value, f.integer("constant", std::numeric_limits<int64_t>::min()));
    return arg;
  }
  CSA_ARTIFACT_TRY(arg.name, f.string(key.c_str()));
  if (key == "weight") {
    arg.kind = ArgKind::Weight;
  } else if (key == "cache") {
    arg.kind = ArgKind::Cache;
  } else if (key == "transient") {
    arg.kind = ArgKind::Transient;
  } else if (key == "scalar") {
    arg.kind = ArgKind::Scalar;
    if (!isKnownScalar(arg.name))
      return f.error(key, absl::StrCat("unknown scalar '", arg.name,
                                       "' (known: ", joinList(kScalars), ")"));
  } else if (key == "input") {
    arg.kind = ArgKind::Input;
    if (!isKnownInput(arg.name))
      return f.error(key, absl::StrCat("unknown input '", arg.name,
                                       "' (known: ", joinList(kInputs), ")"));
  } else {
    arg.kind = ArgKind::Output;
    if (!isKnownOutput(arg.name))
      return f.error(key, absl::StrCat("unknown output '", arg.name,
                                       "' (known: ", joinList(kOutputs), ")"));
  }
  return arg;
}

absl::StatusOr<KernelCall> parseCall(const json &value,
                                     const std::string &source,
                                     const std::string &path) {
  CSA_ARTIFACT_TRY_STATUS(detail::expectObject(value, source, path));
  Fields f(value, source, path);
  CSA_ARTIFACT_TRY_STATUS(
      f.onlyKnown({"kernel", "object", "args", "attrs", "overlaps_until"}));
  KernelCall call;
  CSA_ARTIFACT_TRY(call.kernel, f.string("kernel"));
  for (char c : call.kernel)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
          c == '$'))
      return f.error("kernel",
                     absl::StrCat("'", call.kernel,
                                  "' is not a symbol name (letters, digits, "
                                  "_ . $)"));
  CSA_ARTIFACT_TRY(call.object, f.string("object", /*allowEmpty=*/true));
  if (call.kernel.rfind("builtin.", 0) != 0 && call.object.empty())
    return f.error("object", "must not be empty (the file of the kernel)");
  if (call.kernel.rfind("builtin.", 0) == 0) {
    if (!isBuiltinKernel(call.kernel))
      return f.error("kernel",
                     absl::StrCat("unknown builtin '", call.kernel,
                                  "' (known: ", joinList(kBuiltins), ")"));
    if (!call.object.empty())
      return f.error("object", "a builtin step has no object (\"\")");
  }
  CSA_ARTIFACT_TRY(const json *args, f.array("args"));
  for (size_t i = 0; i < args->size(); ++i) {
    CSA_ARTIFACT_TRY(
        KernelArg arg,
        parseArg((*args)[i], source, detail::indexPath(f.pathOf("args"), i)));
    call.args.push_back(std::move(arg));
  }
  if (f.has("attrs")) {
    CSA_ARTIFACT_TRY(const json *attrs, f.object("attrs"));
    call.attrs = *attrs;
  }
  if (f.has("overlaps_until")) {
    CSA_ARTIFACT_TRY(call.overlapsUntil, f.integer("overlaps_until", 1));
    if (call.kernel.rfind("builtin.", 0) == 0)
      return f.error("overlaps_until", "a builtin step does not overlap others");
  }
  return call;
}

} // namespace

const char *cacheKindName(CacheKind kind) {
  for (const NameOf &n : kCacheKinds)
    if (n.kind == kind)
      return n.name;
  return "?";
}

std::optional<CacheKind> parseCacheKind(std::string_view name) {
  for (const NameOf &n : kCacheKinds)
    if (name == n.name)
      return n.kind;
  return std::nullopt;
}

const char *argKindName(ArgKind kind) {
  switch (kind) {
  case ArgKind::Weight:
    return "weight";
  case ArgKind::Cache:
    return "cache";
  case ArgKind::Transient:
    return "transient";
  case ArgKind::Scalar:
    return "scalar";
  case ArgKind::Constant:
    return "constant";
  case ArgKind::Input:
    return "input";
  case ArgKind::Output:
    return "output";
  case ArgKind::Index:
    return "index";
  }
  return "?";
}

bool isBuiltinKernel(std::string_view kernel) {
  return inList(kBuiltins, kernel);
}

namespace {
std::string checkIndexExprAt(const json &expr, int depth);
} // namespace

std::string checkIndexExpr(const json &expr) { return checkIndexExprAt(expr, 0); }

namespace {
std::string checkIndexExprAt(const json &expr, int depth) {
  // Plans nest a few levels; a deep expression is damage, not a plan.
  if (depth > 32)
    return "index expression nested deeper than 32 levels";
  if (expr.is_number_integer())
    return "";
  if (expr.is_string()) {
    std::string name = expr.get<std::string>();
    if (name == "position" || name == "num_tokens")
      return "";
    return absl::StrCat("unknown index variable '", name,
                        "' (known: position, num_tokens)");
  }
  if (!expr.is_array() || expr.empty() || !expr[0].is_string())
    return "an index expression is an integer, \"position\", "
           "\"num_tokens\", [\"rows\", ID] or [OP, EXPR, EXPR]";
  std::string op = expr[0].get<std::string>();
  if (op == "rows") {
    if (expr.size() != 2 || !expr[1].is_string())
      return "[\"rows\", ID] names one transient";
    return "";
  }
  if (!inList(kIndexOps, op))
    return absl::StrCat("unknown index operation '", op,
                        "' (known: rows, ", joinList(kIndexOps), ")");
  if (expr.size() != 3)
    return absl::StrCat("'", op, "' takes two operands, got ", expr.size() - 1);
  for (size_t i = 1; i < 3; ++i) {
    std::string inner = checkIndexExprAt(expr[i], depth + 1);
    if (!inner.empty())
      return inner;
  }
  return "";
}
} // namespace

std::vector<std::string> rowsReferences(const json &expr) {
  std::vector<std::string> ids;
  if (!expr.is_array() || expr.empty())
    return ids;
  if (expr[0] == "rows") {
    if (expr.size() == 2 && expr[1].is_string())
      ids.push_back(expr[1].get<std::string>());
    return ids;
  }
  for (size_t i = 1; i < expr.size(); ++i)
    for (std::string &id : rowsReferences(expr[i]))
      ids.push_back(std::move(id));
  return ids;
}

int64_t TransientBuffer::elementBytes() const {
  if (dtype == "bf16")
    return 2;
  if (dtype == "f32" || dtype == "i32")
    return 4;
  if (dtype == "i64")
    return 8;
  if (dtype == "i8")
    return 1;
  return 0;
}


bool isKnownScalar(std::string_view name) { return inList(kScalars, name); }
bool isKnownInput(std::string_view name) { return inList(kInputs, name); }
bool isKnownOutput(std::string_view name) { return inList(kOutputs, name); }

int64_t CacheBuffer::entriesAt(int64_t context) const {
  if (kind != CacheKind::GlobalCache || ratio < 1 || context < 0)
    return 0;
  return context / ratio;
}

uint64_t CacheBuffer::bytesAt(int64_t context) const {
  if (kind == CacheKind::GlobalCache)
    return uint64_t(entriesAt(context)) * uint64_t(entryBytes);
  return uint64_t(fixedBytes);
}

const CacheBuffer *Plan::findCache(std::string_view id) const {
  for (const CacheBuffer &cache : caches)
    if (cache.id == id)
      return &cache;
  return nullptr;
}

const TransientBuffer *Plan::findTransient(std::string_view id) const {
  for (const TransientBuffer &buffer : transients)
    if (buffer.id == id)
      return &buffer;
  return nullptr;
}

uint64_t Plan::bytesPerSequence(int64_t context) const {
  uint64_t total = 0;
  for (const CacheBuffer &cache : caches)
    total += cache.bytesAt(context);
  return total;
}

uint64_t Plan::fixedBytesPerSequence() const {
  uint64_t total = 0;
  for (const CacheBuffer &cache : caches)
    if (cache.kind != CacheKind::GlobalCache)
      total += uint64_t(cache.fixedBytes);
  return total;
}

double Plan::globalBytesPerToken() const {
  double total = 0;
  for (const CacheBuffer &cache : caches)
    if (cache.kind == CacheKind::GlobalCache)
      total += double(cache.entryBytes) / double(cache.ratio);
  return total;
}

uint64_t Plan::transientBytes() const {
  uint64_t total = 0;
  for (const TransientBuffer &buffer : transients)
    total += uint64_t(buffer.bytes);
  return total;
}

absl::StatusOr<Plan> parsePlan(const json &root, const std::string &source) {
  CSA_ARTIFACT_TRY_STATUS(detail::expectObject(root, source, ""));
  Fields f(root, source, "");
  Plan plan;
  // The version first: a newer plan may have any other shape.
  CSA_ARTIFACT_TRY(plan.version, f.integer("version", 1));
  if (plan.version > kPlanVersion)
    return absl::FailedPreconditionError(
        absl::StrCat(source, ": plan version ", plan.version,
                     " is newer than this runtime's ", kPlanVersion,
                     "; rebuild the runtime or recompile"));
  if (plan.version < kOldestPlanVersion)
    return absl::FailedPreconditionError(
        absl::StrCat(source, ": plan version ", plan.version,
                     " is older than this runtime's ", kPlanVersion,
                     " (the steps' kernels changed); recompile the artifact"));
  CSA_ARTIFACT_TRY_STATUS(f.onlyKnown(
      {"version", "max_context", "caches", "transients", "entry_points"}));
  CSA_ARTIFACT_TRY(plan.maxContext, f.integer("max_context", 1));

  // Buffer ids are one namespace: an argument names a buffer unambiguously.
  std::map<std::string, std::string> idPaths;
  auto claimId = [&](const std::string &id,
                     const std::string &path) -> absl::Status {
    auto [it, inserted] = idPaths.emplace(id, path);
    if (!inserted)
      return f.errorAt(detail::joinPath(path, "id"),
                       absl::StrCat("duplicate buffer id '", id, "' (also ",
                                    it->second, ")"));
    return absl::OkStatus();
  };

  CSA_ARTIFACT_TRY(const json *caches, f.array("caches"));
  std::map<std::pair<int64_t, CacheKind>, std::string> layerKinds;
  for (size_t i = 0; i < caches->size(); ++i) {
    std::string path = detail::indexPath("caches", i);
    CSA_ARTIFACT_TRY(CacheBuffer cache, parseCache((*caches)[i], source, path));
    CSA_ARTIFACT_TRY_STATUS(claimId(cache.id, path));
    auto [it, inserted] =
        layerKinds.emplace(std::make_pair(cache.layer, cache.kind), path);
    if (!inserted)
      return f.errorAt(
          path, absl::StrCat("layer ", cache.layer, " has a second ",
                             cacheKindName(cache.kind), " (also ", it->second,
                             "); a layer's cache is one "
                             "storage"));
    plan.caches.push_back(std::move(cache));
  }

  if (f.has("transients")) {
    CSA_ARTIFACT_TRY(const json *transients, f.array("transients"));
    for (size_t i = 0; i < transients->size(); ++i) {
      std::string path = detail::indexPath("transients", i);
      const json &value = (*transients)[i];
      CSA_ARTIFACT_TRY_STATUS(detail::expectObject(value, source, path));
      Fields t(value, source, path);
      CSA_ARTIFACT_TRY_STATUS(t.onlyKnown({"id", "bytes", "dtype", "shape"}));
      TransientBuffer buffer;
      CSA_ARTIFACT_TRY(buffer.id, t.string("id"));
      CSA_ARTIFACT_TRY(buffer.bytes, t.integer("bytes", 1));
      if (t.has("dtype") != t.has("shape"))
        return t.errorAt("", "give both dtype and shape, or neither");
      if (t.has("dtype")) {
        CSA_ARTIFACT_TRY(buffer.dtype, t.string("dtype"));
        if (!inList(kDtypes, buffer.dtype))
          return t.error("dtype", absl::StrCat("unknown dtype '", buffer.dtype,
                                               "' (known: ", joinList(kDtypes),
                                               ")"));
        CSA_ARTIFACT_TRY(const json *shape, t.array("shape"));
        if (shape->empty())
          return t.error("shape", "must have at least one dimension");
        for (size_t d = 0; d < shape->size(); ++d) {
          const json &dim = (*shape)[d];
          if (!dim.is_number_integer() || dim.get<int64_t>() < -1 ||
              dim.get<int64_t>() == 0)
            return t.error("shape",
                           absl::StrCat("dimension ", d,
                                        " must be an integer >= 1, or -1 "
                                        "(sized by each step)"));
          buffer.shape.push_back(dim.get<int64_t>());
        }
      }
      CSA_ARTIFACT_TRY_STATUS(claimId(buffer.id, path));
      plan.transients.push_back(std::move(buffer));
    }
  }

  // The buffers by id, for the calls' arguments (a lookup each, not a scan:
  // a plan of thousands of transients would parse in quadratic time).
  std::set<std::string_view> cacheIds, transientIds;
  for (const CacheBuffer &cache : plan.caches)
    cacheIds.insert(cache.id);
  for (const TransientBuffer &buffer : plan.transients)
    transientIds.insert(buffer.id);

  CSA_ARTIFACT_TRY(const json *entries, f.object("entry_points"));
  Fields e(*entries, source, "entry_points");
  CSA_ARTIFACT_TRY_STATUS(e.onlyKnown({"prefill", "decode"}));
  for (const char *name : {"prefill", "decode"}) {
    std::vector<KernelCall> &calls =
        std::string_view(name) == "prefill" ? plan.prefill : plan.decode;
    CSA_ARTIFACT_TRY(const json *list, e.array(name));
    if (list->empty())
      return e.error(name, "must list at least one kernel call");
    for (size_t i = 0; i < list->size(); ++i) {
      std::string path = detail::indexPath(e.pathOf(name), i);
      CSA_ARTIFACT_TRY(KernelCall call, parseCall((*list)[i], source, path));
      if (call.overlapsUntil >= 0) {
        const std::string at = detail::joinPath(path, "overlaps_until");
        if (plan.version < 6)
          return f.errorAt(at, absl::StrCat("plan version ", plan.version,
                                            " has no overlapping steps (from version 6)"));
        if (call.overlapsUntil <= int64_t(i) || call.overlapsUntil > int64_t(list->size()))
          return f.errorAt(at, absl::StrCat("must be a later step of ", name, " (", i + 1,
                                            " .. ", list->size(), "), got ",
                                            call.overlapsUntil));
      }
      for (size_t a = 0; a < call.args.size(); ++a) {
        const KernelArg &arg = call.args[a];
        std::string argPath = detail::joinPath(
            detail::indexPath(detail::joinPath(path, "args"), a),
            argKindName(arg.kind));
        if (arg.kind == ArgKind::Cache && !cacheIds.count(arg.name))
          return f.errorAt(argPath,
                           absl::StrCat("unknown cache buffer '", arg.name,
                                        "' (not in caches)"));
        if (arg.kind == ArgKind::Transient && !transientIds.count(arg.name))
          return f.errorAt(argPath,
                           absl::StrCat("unknown transient buffer '", arg.name,
                                        "' (not in transients)"));
        if (arg.kind == ArgKind::Index)
          for (const std::string &id : rowsReferences(arg.expr))
            if (!transientIds.count(id))
              return f.errorAt(argPath,
                               absl::StrCat("[\"rows\", \"", id,
                                            "\"]: unknown transient buffer"));
      }
      calls.push_back(std::move(call));
    }
  }
  return plan;
}

absl::StatusOr<Plan> parsePlanText(const std::string &text,
                                   const std::string &source) {
  CSA_ARTIFACT_TRY(json root, detail::parseJsonText(text, source));
  return parsePlan(root, source);
}

json planToJson(const Plan &plan) {
  json root = json::object();
  root["version"] = plan.version;
  root["max_context"] = plan.maxContext;
  json caches = json::array();
  for (const CacheBuffer &cache : plan.caches) {
    json c = {{"id", cache.id},
              {"layer", cache.layer},
              {"kind", cacheKindName(cache.kind)}};
    switch (cache.kind) {
    case CacheKind::SwaRing:
      c["window"] = cache.window;
      c["row_bytes"] = cache.rowBytes;
      c["fixed_bytes"] = cache.fixedBytes;
      break;
    case CacheKind::GlobalCache:
      c["ratio"] = cache.ratio;
      c["entry_bytes"] = cache.entryBytes;
      if (cache.mainRowBytes > 0 || cache.indexRowBytes > 0) {
        c["main_row_bytes"] = cache.mainRowBytes;
        c["index_row_bytes"] = cache.indexRowBytes;
      }
      if (cache.mainRowRope > 0)
        c["main_row_rope"] = cache.mainRowRope;
      if (cache.indexRowFp8)
        c["index_row_format"] = "fp8";
      break;
    case CacheKind::CompressorState:
      c["ratio"] = cache.ratio;
      c["fixed_bytes"] = cache.fixedBytes;
      break;
    }
    caches.push_back(std::move(c));
  }
  root["caches"] = std::move(caches);
  json transients = json::array();
  for (const TransientBuffer &buffer : plan.transients) {
    json t = {{"id", buffer.id}, {"bytes", buffer.bytes}};
    if (!buffer.dtype.empty()) {
      t["dtype"] = buffer.dtype;
      t["shape"] = buffer.shape;
    }
    transients.push_back(std::move(t));
  }
  root["transients"] = std::move(transients);
  json entries = json::object();
  for (const char *name : {"prefill", "decode"}) {
    const std::vector<KernelCall> &calls =
        std::string_view(name) == "prefill" ? plan.prefill : plan.decode;
    json list = json::array();
    for (const KernelCall &call : calls) {
      json args = json::array();
      for (const KernelArg &arg : call.args) {
        if (arg.kind == ArgKind::Constant)
          args.push_back({{"constant", arg.value}});
        else if (arg.kind == ArgKind::Index)
          args.push_back({{"index", arg.expr}});
        else
          args.push_back({{argKindName(arg.kind), arg.name}});
      }
      json c = {{"kernel", call.kernel},
                {"object", call.object},
                {"args", std::move(args)}};
      if (call.attrs.is_object() && !call.attrs.empty())
        c["attrs"] = call.attrs;
      if (call.overlapsUntil >= 0)
        c["overlaps_until"] = call.overlapsUntil;
      list.push_back(std::move(c));
    }
    entries[name] = std::move(list);
  }
  root["entry_points"] = std::move(entries);
  return root;
}

absl::Status checkContext(const Plan &plan, int64_t tokens) {
  if (tokens < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("context of ", tokens, " tokens: must be >= 0"));
  if (tokens > plan.maxContext)
    return absl::OutOfRangeError(absl::StrCat(
        "context of ", tokens,
        " tokens is longer than the plan allows (max_context ", plan.maxContext,
        "); shorten the input or recompile for a context of at least ", tokens,
        " tokens"));
  return absl::OkStatus();
}

} // namespace artifact
} // namespace csa

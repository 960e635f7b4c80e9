//===- Plan.h - The execution plan of an artifact (plan.json) ---*- C++ -*-===//
//
// What csa-compile decided and the runtime carries out, kernel by kernel:
// the per-sequence cache buffers (sized as csa-plan-caches sizes them), the
// per-step transient buffers, the largest context the caches are planned
// for, and for each entry point (`prefill`, `decode`) the ordered kernel
// calls with their argument bindings. The JSON schema (plan version 1) is
// documented in docs/artifact-format.md; parsePlan() checks it and names the
// field path of every error ("plan.json: entry_points.decode[2].args[0]
// .cache: unknown cache buffer 'L3.swa'").
//
// Plain C++17, no LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_ARTIFACT_PLAN_H
#define CSA_RUNTIME_ARTIFACT_PLAN_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace csa {
namespace artifact {

/// The plan schema version this runtime reads (plan.json "version").
/// 2: csa.hc_mix, csa.topk and csa.hsi_select call two kernels each (roles
/// sums/rank/blocks beside main; hsi_select has attrs.block_size).
/// 3: csa.moe's gather kernel copies the rows the runtime lists per expert
/// (x, row index, rows) instead of scanning the routing itself.
/// 4: HSI's selection is the top-k's rank over block scores plus an
/// expansion (roles rank and expand).
/// 5: prefill takes the position of its first token (a scalar "position"
/// where version 4 folded 0), so a prefill step can extend a sequence.
/// 6: a step may carry "overlaps_until" (it may run beside the steps after
/// it up to that one). A version 5 plan, which has none, still runs.
constexpr int64_t kPlanVersion = 6;
/// The oldest plan version this runtime reads.
constexpr int64_t kOldestPlanVersion = 5;

/// The per-sequence caches of docs/cache-formats.md.
enum class CacheKind : uint8_t {
  SwaRing,         ///< "swa_ring": the last `window` FP8 KV rows of a layer
  GlobalCache,     ///< "global_cache": one entry per `ratio` tokens (Full)
  CompressorState, ///< "compressor_state": the incomplete group (ratio > 1)
};
const char *cacheKindName(CacheKind kind);
std::optional<CacheKind> parseCacheKind(std::string_view name);

/// One per-sequence cache buffer. Which fields apply depends on the kind
/// (the others are 0):
///   swa_ring:         window, rowBytes, fixedBytes = window * rowBytes
///   global_cache:     ratio, entryBytes (= mainRowBytes + indexRowBytes when
///                     those are given); grows by one entry per ratio tokens
///   compressor_state: ratio (>= 2), fixedBytes
struct CacheBuffer {
  std::string id;
  int64_t layer = 0;
  CacheKind kind = CacheKind::SwaRing;
  int64_t window = 0;
  int64_t rowBytes = 0;
  int64_t ratio = 0;
  int64_t entryBytes = 0;
  int64_t mainRowBytes = 0;  ///< optional (0: not given)
  int64_t indexRowBytes = 0; ///< optional (0: not given)
  /// optional: 0 for the released FP4 main-KV row; N > 0 for V4's FP8 row
  /// whose last N channels are bf16 (`!csa.fp8_nope_row<D, rope N, ...>`).
  int64_t mainRowRope = 0;
  /// optional: false for the released FP4 index-key row, true for the FP8
  /// row (E4M3 values, one fp32 scale: `!csa.fp8_row<D, f32, D>`).
  bool indexRowFp8 = false;
  int64_t fixedBytes = 0;

  /// Entries a global cache holds at `context` tokens: context / ratio
  /// (complete groups; the partial group is in the compressor state).
  int64_t entriesAt(int64_t context) const;
  /// Bytes one sequence holds in this buffer at `context` tokens.
  uint64_t bytesAt(int64_t context) const;
};

/// A per-step scratch buffer (activations, top-k indices, ...), owned by the
/// executor, not by a sequence. `dtype` and `shape` (optional, both or
/// neither) say what it holds: "bf16", "f32", "i8", "i32" or "i64", and the
/// dimensions, where -1 is sized by each step (the rows of a step, the
/// compressed positions a score row covers); `bytes` is its size with every
/// -1 at max_context.
struct TransientBuffer {
  std::string id;
  int64_t bytes = 0;
  std::string dtype;
  std::vector<int64_t> shape;

  /// Bytes of one element of `dtype` (0 if unknown or absent).
  int64_t elementBytes() const;
};

/// How one kernel argument is bound. The JSON spelling is an object with
/// exactly one member, named after the kind.
enum class ArgKind : uint8_t {
  Weight,    ///< {"weight": "layers.0.attn.wq_a.weight"}: a weights.json tensor
  Cache,     ///< {"cache": "L0.swa"}: a CacheBuffer id
  Transient, ///< {"transient": "t3"}: a TransientBuffer id
  Scalar,    ///< {"scalar": "position"}: a value the runtime supplies
  Constant,  ///< {"constant": 8}: an integer compiled into the plan
  Input,     ///< {"input": "tokens"}: an entry point input
  Output,    ///< {"output": "logits"}: an entry point output
  Index,     ///< {"index": EXPR}: an integer the runtime computes per step
};

/// Validates an index expression (see docs/artifact-format.md):
///   EXPR := integer | "position" | "num_tokens"
///         | ["rows", TRANSIENT_ID]
///         | [OP, EXPR, EXPR]   with OP in add, sub, mul, div, min, max
/// `div` is floor division of non-negative values. Returns a message, or ""
/// when the expression is well formed; `transients` are ids ["rows", .] may
/// name.
std::string checkIndexExpr(const nlohmann::json &expr);

/// The transients a well-formed index expression reads through
/// ["rows", ID], in order of appearance.
std::vector<std::string> rowsReferences(const nlohmann::json &expr);
const char *argKindName(ArgKind kind);

/// Names the runtime knows for {"scalar": ...}: "position" (the position of
/// the first token of the step), "num_tokens" (tokens in the step),
/// "batch_size" (sequences in the step).
bool isKnownScalar(std::string_view name);
/// {"input": ...}: "tokens", "positions". {"output": ...}: "logits".
bool isKnownInput(std::string_view name);
bool isKnownOutput(std::string_view name);

struct KernelArg {
  ArgKind kind = ArgKind::Constant;
  std::string name;  ///< every kind but Constant and Index
  int64_t value = 0; ///< Constant
  nlohmann::json expr; ///< Index

  static KernelArg weight(std::string n) {
    return {ArgKind::Weight, std::move(n), 0};
  }
  static KernelArg cache(std::string n) {
    return {ArgKind::Cache, std::move(n), 0};
  }
  static KernelArg transient(std::string n) {
    return {ArgKind::Transient, std::move(n), 0};
  }
  static KernelArg scalar(std::string n) {
    return {ArgKind::Scalar, std::move(n), 0};
  }
  static KernelArg constant(int64_t v) { return {ArgKind::Constant, "", v}; }
  static KernelArg input(std::string n) {
    return {ArgKind::Input, std::move(n), 0};
  }
  static KernelArg output(std::string n) {
    return {ArgKind::Output, std::move(n), 0};
  }
  static KernelArg index(nlohmann::json e) {
    return {ArgKind::Index, "", 0, std::move(e)};
  }
};

/// Steps the runtime carries out itself (data movement only, never
/// arithmetic on values): `kernel` names them, `object` is empty.
///   builtin.slice_rows(source, offset: index, size: index, result): rows
///   [offset, offset + size) of a transient (csa-bounded-replay's cut).
bool isBuiltinKernel(std::string_view kernel);

/// One call of a generated kernel.
struct KernelCall {
  std::string kernel; ///< the symbol in `object`, or a builtin
  std::string object; ///< artifact-relative path of the file that holds it
                      ///< ("kernels/host.so"); listed in the manifest;
                      ///< empty for a builtin
  std::vector<KernelArg> args;
  /// Backend data the runtime passes through (launch grid, shared memory
  /// bytes, ...): any JSON object, not checked here. Empty: none.
  nlohmann::json attrs = nlohmann::json::object();
  /// -1, or the index (in its entry point) of the first step that reads
  /// this step's results: the steps between may run while this one runs (a
  /// GPU puts it on a branch of the step's graph that joins there). Written
  /// by the compiler, checked against the steps' layouts by checkOverlaps
  /// (OpAbi.h).
  int64_t overlapsUntil = -1;
};

struct Plan {
  int64_t version = kPlanVersion;
  int64_t maxContext = 0; ///< the caches are planned for this many tokens
  std::vector<CacheBuffer> caches;
  std::vector<TransientBuffer> transients;
  std::vector<KernelCall> prefill;
  std::vector<KernelCall> decode;

  const CacheBuffer *findCache(std::string_view id) const;
  const TransientBuffer *findTransient(std::string_view id) const;
  /// Bytes of every per-sequence cache at `context` tokens (what
  /// csa.cache_plan's bytes_per_sequence is at max_context).
  uint64_t bytesPerSequence(int64_t context) const;
  /// SWA rings and compressor states: bytes independent of the context.
  uint64_t fixedBytesPerSequence() const;
  /// Sum over global caches of entry_bytes / ratio.
  double globalBytesPerToken() const;
  uint64_t transientBytes() const;
};

/// Parses and checks plan.json. `source` names the file in messages. Checks
/// the version (a newer one is a FailedPrecondition naming both versions),
/// the schema (unknown fields, types, ranges), consistency (unique ids, one
/// cache per (layer, kind), swa fixed_bytes = window x row_bytes, global
/// entry_bytes = main + index row bytes when given) and that every cache /
/// transient argument names a declared buffer. Weight names and objects are
/// checked against the rest of the artifact by Artifact::open.
absl::StatusOr<Plan> parsePlan(const nlohmann::json &root,
                               const std::string &source = "plan.json");
absl::StatusOr<Plan> parsePlanText(const std::string &text,
                                   const std::string &source = "plan.json");
/// The JSON form parsePlan reads back.
nlohmann::json planToJson(const Plan &plan);

/// OK if a sequence of `tokens` tokens fits the plan; OutOfRange otherwise:
/// "context of 5000 tokens is longer than the plan allows (max_context
/// 4096); shorten the input or recompile for a context of at least 5000
/// tokens". A negative count is InvalidArgument.
absl::Status checkContext(const Plan &plan, int64_t tokens);

} // namespace artifact
} // namespace csa

#endif // CSA_RUNTIME_ARTIFACT_PLAN_H

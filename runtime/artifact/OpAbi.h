//===- OpAbi.h - The argument layout of each op's plan step -----*- C++ -*-===//
//
// The one definition of what a plan step of each op binds, in order: named
// slots of four kinds (a value, a weight, a cache, an integer), some present
// only for certain attrs of the step (a global sparse attention's cache and
// top-k set, a quantized linear's scale, the compressor state of ratio > 1)
// and one group repeated per routed expert of csa.moe. The plan writer
// (codegen/host/HostPlan.cpp) binds its arguments by slot name in this
// order, the executor checks every step against it at load and its drivers
// find their arguments by slot name, and docs/artifact-format.md's section
// "Step arguments" is printed from it (csa-op-abi), so the three cannot
// drift apart.
//
// Plain C++17, no LLVM: the runtime reads it and the compiler includes it.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_ARTIFACT_OPABI_H
#define CSA_RUNTIME_ARTIFACT_OPABI_H

#include "runtime/artifact/Plan.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace csa {
namespace artifact {

/// What a slot accepts.
enum class SlotKind : uint8_t {
  Value,   ///< a transient, an entry-point input or output
  Weight,  ///< a checkpoint tensor
  Cache,   ///< a per-sequence cache buffer
  Integer, ///< an index expression, a scalar or a constant
};
/// "value", "weight", "cache", "integer".
const char *slotKindName(SlotKind kind);
/// Whether an argument bound as `kind` may fill a `slot` slot.
bool fitsSlot(ArgKind kind, SlotKind slot);

/// When a slot is present, decided by one attr of the step.
struct SlotCondition {
  enum class Test : uint8_t {
    Always,
    Flag,         ///< attrs[attr] is true (a boolean)
    AboveOne,     ///< attrs[attr] > 1 (an integer >= 1)
    ScaledFormat, ///< attrs[attr] is a weight format with scales
    Given,        ///< attrs has attr (its value is checked by its reader)
  };
  Test test = Test::Always;
  const char *attr = nullptr;
};

/// One slot of an op's table entry.
struct SlotDef {
  const char *name;
  SlotKind kind;
  const char *description;
  SlotCondition when;
  /// Non-null: the slot is part of a group repeated attrs[repeat] times
  /// (consecutive slots with the same `repeat` form one group, laid out
  /// group after group).
  const char *repeat = nullptr;
  /// A value the step writes (one of the op's results).
  bool result = false;
};

/// The table entry of one op (or one region kind of csa.fusion).
struct OpAbi {
  const char *op;
  /// Non-null: this entry is the op's layout when attrs[variantAttr] is the
  /// string `variant` (csa.fusion's region name).
  const char *variantAttr;
  const char *variant;
  const char *summary;
  std::vector<SlotDef> slots;
};

/// The table: every op a plan step carries out, in docs order.
const std::vector<OpAbi> &opAbis();

/// Whether the weights of `format` (a linear's attrs.format, the spelling of
/// csa's WeightFormat) come with a scale tensor; nullopt for an unknown
/// format.
std::optional<bool> weightFormatHasScales(std::string_view format);

/// A slot of a concrete layout.
struct ArgSlot {
  const SlotDef *def;
  int64_t instance = -1; ///< the repeat of a repeated slot, else -1

  const char *name() const { return def->name; }
  SlotKind kind() const { return def->kind; }
  /// "sink", or "experts[3].w1.weight" for a repeated slot.
  std::string label() const;
};

/// The arguments of one step, as its op and attrs lay them out.
class ArgLayout {
public:
  const std::string &op() const { return op_; }
  const std::vector<ArgSlot> &slots() const { return slots_; }
  size_t size() const { return slots_.size(); }

  /// The position of slot `name` (of repeat `instance` for a repeated slot),
  /// or nullopt when the layout has none.
  std::optional<size_t> find(std::string_view name,
                             int64_t instance = -1) const;
  bool has(std::string_view name, int64_t instance = -1) const {
    return find(name, instance).has_value();
  }
  /// find() for a slot the caller relies on: throws std::logic_error naming
  /// the op and the slot when the layout has none (a bug of the caller, as
  /// the layout was checked against the step's attrs).
  size_t at(std::string_view name, int64_t instance = -1) const;
  /// "input, weight, scale, result" (long layouts elided in the middle).
  std::string signature() const;

private:
  friend absl::StatusOr<ArgLayout> argLayout(std::string_view,
                                             const nlohmann::json &);
  std::string op_;
  std::vector<ArgSlot> slots_;
  /// Slot name -> position of each instance (one for an unrepeated slot).
  std::map<std::string, std::vector<size_t>, std::less<>> positions_;
};

/// The layout of a step of `op` with `attrs` (the step's attrs object).
/// InvalidArgument when `op` has no entry, or when an attr the layout depends
/// on is missing or out of range ("attrs.ratio must be an integer >= 1, got
/// 0 (csa.compress takes state, wgate.weight when it is > 1)").
absl::StatusOr<ArgLayout> argLayout(std::string_view op,
                                    const nlohmann::json &attrs);

/// Empty when `arg` may fill slot `i` of `layout`, else what is wrong:
/// "args[5] (sink) is a transient; csa.sparse_attention takes a weight
/// there".
std::string checkArg(const ArgLayout &layout, size_t i, const KernelArg &arg);
/// The count and every kind of `args` against `layout`; InvalidArgument
/// naming the first mismatching slot.
absl::Status checkArgs(const ArgLayout &layout,
                       const std::vector<KernelArg> &args);

/// What a step reads and writes, by its op's layout: its transients and
/// entry outputs ("transient:t3", "output:logits"), written where the slot is
/// one of the op's results; the transients its index expressions size
/// themselves by; its caches ("cache:L2.swa"), read and written; and, for an
/// op whose executor driver keeps scratch buffers, "scratch:<op>", read and
/// written (the steps of such an op share them).
struct StepValues {
  std::set<std::string> readSet, writeSet;
  /// Something this step reads that `other` writes, if any.
  std::optional<std::string> reads(const StepValues &other) const;
  /// Something this step writes that is in `values`, if any.
  std::optional<std::string> writesAny(const std::set<std::string> &values) const;
};
/// InvalidArgument when the step's op has no layout for its attrs or its
/// arguments do not fit it.
absl::StatusOr<StepValues> stepValues(const KernelCall &call);

/// The plan's overlapping steps (Plan.h's overlaps_until): consecutive steps
/// with the same overlaps_until form a branch, which may run beside the
/// steps after it up to that step, its join. Checks that every branch ends
/// before its join and that no step between the branch and its join reads
/// what the branch writes (the results' first reader is the join), writes
/// what it reads or writes (values, caches, an op's scratch) or is a builtin,
/// nor is a builtin in the branch. Branches may run beside each other.
/// InvalidArgument naming both steps ("decode[4].overlaps_until (9):
/// decode[6] reads transient:t3, which the branch writes ...").
absl::Status checkOverlaps(const std::vector<KernelCall> &calls, std::string_view entry);
/// checkOverlaps for step `i` alone.
absl::Status checkOverlap(const std::vector<KernelCall> &calls, size_t i,
                          std::string_view entry);

/// The "Step arguments" section of docs/artifact-format.md: each op's slots
/// as markdown tables (what csa-op-abi prints).
std::string opAbiMarkdown();

} // namespace artifact
} // namespace csa

#endif // CSA_RUNTIME_ARTIFACT_OPABI_H

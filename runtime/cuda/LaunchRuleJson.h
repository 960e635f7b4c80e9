//===- LaunchRuleJson.h - A launch rule from kernels.json --------*- C++ -*-===//
//
// The one reader of a kernel's "launch" object in kernels.json, for the
// executor's GPU path and csa-gpu-check. Header-only: it needs
// nlohmann/json and exceptions, which runtime/cuda itself does not.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_CUDA_LAUNCHRULEJSON_H
#define CSA_RUNTIME_CUDA_LAUNCHRULEJSON_H

#include "runtime/cuda/CudaDriver.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#include <nlohmann/json.hpp>

namespace csa::cuda {

/// `launch` of kernel `name` with `numArguments` arguments; an error names
/// the field that is missing or out of range.
inline absl::StatusOr<LaunchRule> parseLaunchRule(const nlohmann::json &launch,
                                                  const std::string &name,
                                                  size_t numArguments) {
  auto bad = [&](const std::string &what) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", name, "': launch.", what));
  };
  auto integer = [&](const char *key, int64_t lo, int64_t hi,
                     int64_t &out) -> absl::Status {
    auto it = launch.find(key);
    if (it == launch.end() || !it->is_number_integer())
      return bad(absl::StrCat(key, " is missing"));
    out = it->get<int64_t>();
    if (out < lo || out > hi)
      return bad(absl::StrCat(key, " is ", out, ", not in [", lo, ", ", hi, "]"));
    return absl::OkStatus();
  };
  LaunchRule rule;
  if (!launch.is_object() || !launch.contains("rule") || !launch["rule"].is_string())
    return bad("rule is missing");
  rule.rule = launch["rule"].get<std::string>();
  if (rule.rule != "rows" && rule.rule != "row_elements" &&
      rule.rule != "row_outputs" && rule.rule != "row_tiles" &&
      rule.rule != "expert_tiles" && rule.rule != "channels" && rule.rule != "single")
    return bad(absl::StrCat("rule '", rule.rule,
                            "' is not rows, row_elements, row_outputs, "
                            "row_tiles, expert_tiles, channels or single"));
  if (absl::Status st = integer("block", 1, 1024, rule.block); !st.ok())
    return st;
  if (rule.rule == "single")
    return rule;
  if (rule.rule == "channels") {
    if (absl::Status st = integer("channels", 1, int64_t(1) << 31, rule.outputs);
        !st.ok())
      return st;
    return rule;
  }
  const int64_t lastArgument = int64_t(numArguments) - 1;
  if (absl::Status st = integer("rows_argument", 0, lastArgument, rule.rowsArgument);
      !st.ok())
    return st;
  absl::Status st =
      rule.rule == "rows"
          ? integer("rows_per_thread", 1, int64_t(1) << 30, rule.rowsPerThread)
      : rule.rule == "row_elements"
          ? integer("elements_per_row", 1, int64_t(1) << 30, rule.elementsPerRow)
          : integer("outputs", 1, int64_t(1) << 40, rule.outputs);
  if (st.ok() && rule.rule == "row_outputs") {
    st = integer("outputs_per_block", 1, rule.block, rule.outputsPerBlock);
    // Whole warps per output (a linear a warp an output, attention a block
    // per head), with its shared buffers compiled in for that block.
    if (st.ok() && rule.block % (32 * rule.outputsPerBlock) != 0)
      st = bad(absl::StrCat("block is ", rule.block,
                            ", not a multiple of 32 x outputs_per_block (",
                            32 * rule.outputsPerBlock, ")"));
  }
  if (st.ok() && rule.rule == "row_tiles") {
    // At least a thread per output of the tile (a linear tile has exactly
    // that; a mix-sums tile more, to stage its operands).
    st = integer("outputs_per_block", 1, rule.block, rule.outputsPerBlock);
    if (st.ok())
      st = integer("rows_per_block", 1, 1024, rule.rowsPerBlock);
    if (st.ok() && launch.contains("max_tile_blocks"))
      st = integer("max_tile_blocks", 1, 65535, rule.maxTileBlocks);
  }
  if (st.ok() && rule.rule == "expert_tiles") {
    st = integer("outputs_per_block", 1, rule.block, rule.outputsPerBlock);
    if (st.ok())
      st = integer("experts", 1, int64_t(1) << 20, rule.experts);
  }
  // row_tiles: element_dims multiply `outputs` (a tile count that grows with
  // an argument, such as the index scores' keys).
  const bool dynamicRule = rule.rule == "row_elements" || rule.rule == "row_tiles";
  if (st.ok() && !dynamicRule && launch.contains("element_dims"))
    return bad(absl::StrCat("element_dims is only for row_elements and row_tiles, not ",
                            rule.rule));
  if (st.ok() && dynamicRule && launch.contains("element_dims")) {
    const nlohmann::json &dims = launch["element_dims"];
    if (!dims.is_array())
      return bad("element_dims is not a list of [argument, dimension]");
    for (const nlohmann::json &d : dims) {
      if (!d.is_array() || d.size() != 2 || !d[0].is_number_integer() ||
          !d[1].is_number_integer())
        return bad("element_dims has an entry that is not [argument, dimension]");
      const int64_t argument = d[0].get<int64_t>(), dim = d[1].get<int64_t>();
      if (argument < 0 || argument > lastArgument || dim < 0 || dim > 15)
        return bad(absl::StrCat("element_dims entry [", argument, ", ", dim,
                                "] is out of range (", numArguments,
                                " arguments, dimensions 0..15)"));
      rule.elementDims.emplace_back(argument, dim);
    }
  }
  if (!st.ok())
    return st;
  return rule;
}

/// The "state" list of kernel entry `kernel` (none when absent); an error
/// names the entry that is not {dims: [positive...], element_bytes: 1, 2, 4
/// or 8}.
inline absl::StatusOr<std::vector<KernelStateBuffer>>
parseKernelState(const nlohmann::json &kernel, const std::string &name) {
  std::vector<KernelStateBuffer> state;
  auto it = kernel.find("state");
  if (it == kernel.end())
    return state;
  auto bad = [&](size_t i) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", name, "': state[", i,
        "] is not {dims: [sizes > 0], element_bytes: 1, 2, 4 or 8} of at most 1 GiB"));
  };
  if (!it->is_array())
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", name, "': state is not a list"));
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json &e = (*it)[i];
    if (!e.is_object() || !e.contains("dims") || !e["dims"].is_array() ||
        e["dims"].empty() || e["dims"].size() > 8 || !e.contains("element_bytes") ||
        !e["element_bytes"].is_number_integer())
      return bad(i);
    KernelStateBuffer buffer;
    buffer.elementBytes = e["element_bytes"].get<int64_t>();
    if (buffer.elementBytes != 1 && buffer.elementBytes != 2 && buffer.elementBytes != 4 &&
        buffer.elementBytes != 8)
      return bad(i);
    double bytes = double(buffer.elementBytes);
    for (const nlohmann::json &d : e["dims"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 1)
        return bad(i);
      buffer.dims.push_back(d.get<int64_t>());
      bytes *= double(buffer.dims.back());
    }
    if (bytes > double(size_t(1) << 30))
      return bad(i);
    state.push_back(std::move(buffer));
  }
  return state;
}

} // namespace csa::cuda

#endif // CSA_RUNTIME_CUDA_LAUNCHRULEJSON_H

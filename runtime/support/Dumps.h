//===- Dumps.h - Dump folders: .npy arrays and their index -------*- C++ -*-===//
//
// A dump folder (csa-run --dump-hidden / --dump-decisions, csa-reference's
// same flags) holds one .npy per array and an index, dumps.jsonl: one JSON
// object a line per file,
//
//   {"file": "r000_prefill-117_hidden.npy", "call": 0, "entry": "prefill",
//    "block": "layers.2.attn", "what": "hidden"}
//
// call counts the forward's calls from 0 (the prefill, then each decode
// step), block is the layer block the array belongs to (from a csa.hc_mix to
// its csa.hc_update: "layers.<i>.attn" or "layers.<i>.ffn") and what is
// hidden, topk, hsi_pool, moe_ids or moe_weights. Two folders written by
// different programs (the compiled model and the reference forward) name
// their files differently; csa-diff pairs them by (call, entry, block, what).
//
// Plain C++17 with Abseil, no LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_SUPPORT_DUMPS_H
#define CSA_RUNTIME_SUPPORT_DUMPS_H

#include "absl/status/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace csa::npy {

/// The index's file name in a dump folder.
inline constexpr const char *kDumpIndex = "dumps.jsonl";

struct DumpEntry {
  std::string file; ///< the .npy's name in the folder
  int64_t call = 0;
  std::string entry; ///< "prefill" or "decode"
  std::string block; ///< "layers.<i>.attn" / ".ffn"; empty: outside a layer
  std::string what;
};

/// Writes `bytes` at `data` as a C-order .npy of `descr` and `shape` to a
/// temporary name beside `path`, then renames it to `path`.
absl::Status writeArray(const std::string &path, const std::string &descr,
                        const std::vector<int64_t> &shape, const void *data, size_t bytes);

/// Empties `dir`'s index (a run starts its folder's index afresh).
absl::Status startDumpIndex(const std::string &dir);

/// Appends `entry` to `dir`'s index.
absl::Status appendDumpIndex(const std::string &dir, const DumpEntry &entry);

} // namespace csa::npy

#endif // CSA_RUNTIME_SUPPORT_DUMPS_H

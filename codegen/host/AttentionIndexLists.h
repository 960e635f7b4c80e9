//===- AttentionIndexLists.h - Sparse attention's rows and lists -*- C++ -*-===//
//
// The kernels that tell sparse attention which rows to read: the window part
// of its index lists (a decode step's ring slots, a prefill's or a chunk's
// own rows), the selected part from the top-k sets (in set order or entry
// order), and the gather of a global cache's entries. Built where the
// attention runs, so no step reads its top-k sets back.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_CODEGEN_HOST_ATTENTIONINDEXLISTS_H
#define CSA_CODEGEN_HOST_ATTENTIONINDEXLISTS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace csa::codegen {

/// `name(selected: memref<?x?xi32>, idx: memref<?x?xi32>, column: i64,
///       firstRow: i64)`: idx[i, column + j] = selected[i, j] < 0 ? -1 :
/// firstRow + i x k + j (k = the sets' width): sparse attention's index list
/// for rows gathered in the top-k sets' own order (a decode step gathers its
/// one set unchanged instead of reading it back to sort the entries), built
/// where the sets are.
mlir::func::FuncOp buildSelectedIndexKernel(mlir::ModuleOp module,
                                            const std::string &name);

/// `name(idx: memref<?x?xi32>, position: i64, ringStart: i64)`: the window
/// part of a one-token step's index list, built where the attention runs
/// instead of on the host and uploaded. With W = idx's width (the window; a
/// step passes the list's first W columns), idx[i, j] is the ring slot
/// (position % W + 1 + j) % W, which holds position p = position - W + 1 + j
/// (oldest first), or -1 when that slot holds nothing yet (slot > position,
/// or p < ringStart, the first position the ring received). Every row gets
/// the same list (a decode step's one query row); a thread per element on
/// the GPU.
mlir::func::FuncOp buildWindowIndexKernel(mlir::ModuleOp module,
                                          const std::string &name);

/// `name(idx: memref<?x?xi32>, position: i64, ringStart: i64, window: i64,
///       chunk: i64)`: the window part of a multi-row call's index list (the
/// list's first columns: a caller passes them with the list's row stride),
/// row i for position position + i, built
/// where the attention runs instead of on the host and uploaded. With
/// chunk = 0 (the ring held nothing before the call: the rows are the call's
/// own, row r for position position + r) column j names r = max(0, i - window
/// + 1) + j, or -1 when r > i. With chunk = 1 (a chunk after held rows: the
/// ring as it was, `window` rows, then the call's) column j names position
/// p = position + i - window + 1 + j: -1 before max(0, ringStart), its ring
/// slot p % window before `position`, else row window + p - position. The
/// host's lists, element for element; a thread per element on the GPU.
mlir::func::FuncOp buildRowsWindowIndexKernel(mlir::ModuleOp module,
                                              const std::string &name);

/// `name(selected: memref<?x?xi32>, idx: memref<?x?xi32>, column: i64,
///       firstRow: i64, held: i64)`: idx[i, column + j] = firstRow + e for
/// e = selected[i, j], or -1 when e < 0 (nothing selected) or e >= held:
/// the index list's selected part when the rows after firstRow are the
/// cache's held entries in entry order (a prefill gathers them all instead
/// of reading its top-k sets back to gather only the named ones).
mlir::func::FuncOp buildEntryIndexKernel(mlir::ModuleOp module, const std::string &name);

/// `name(cache: memref<?xi8>, which: memref<?xi32>, out: memref<?x?xi8>,
///       entryBytes: i64, offset: i64)`: out[r, c] = cache[which[r] x
/// entryBytes + offset + c], the parts of the entries a step reads (the
/// selected main-KV rows of a global cache), gathered where the cache is.
/// A row whose entry is negative (-1: nothing selected) or reaches past the
/// cache is zeros, so a top-k set can be passed as `which` unchanged.
mlir::func::FuncOp buildGatherCacheEntriesKernel(mlir::ModuleOp module,
                                                 const std::string &name);

} // namespace csa::codegen

#endif // CSA_CODEGEN_HOST_ATTENTIONINDEXLISTS_H

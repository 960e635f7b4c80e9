//===- OpDrivers.cpp - One driver per plan op kind ------------------------===//
//
// A driver reads the step's bindings by slot name (runtime/artifact/OpAbi.h),
// sizes the results, builds memref descriptors and calls the op's generated
// kernels (attrs.kernels, by role) in the order the op's semantics need.
//
//===----------------------------------------------------------------------===//
#include "runtime/executor/ExecutorImpl.h"
#include "runtime/executor/Decisions.h"

namespace csa::runtime {

//===----------------------------------------------------------------------===//
// Drivers
//===----------------------------------------------------------------------===//

absl::Status Executor::Impl::embed(Step &s) {
  Tensor &tok = tensor(s, "tokens");
  const checkpoint::TensorView &table = weight(s, "weight");
  const int64_t n = tok.rows(), dim = attr(s, "dim");
  Tensor &out = kernelResult(s, "result", 2, {n, dim}, tok.base);
  auto dt = desc<1>(tok.ptr(), {n});
  auto dw = desc<2>(table.data, {table.shape[0], dim});
  auto dout = desc<2>(out.ptr(), {n, dim});
  invoke(s, "main", &dt, &dw, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::hcExpand(Step &s) {
  Tensor &h = tensor(s, "input");
  const int64_t n = h.rows(), hc = attr(s, "hc"), dim = attr(s, "dim");
  Tensor &out = kernelResult(s, "result", 2, {n, hc, dim}, h.base);
  auto dh = desc<2>(h.ptr(), {n, dim});
  auto dout = desc<3>(out.ptr(), {n, hc, dim});
  invoke(s, "main", &dh, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::hcMix(Step &s) {
  Tensor &x = tensor(s, "streams");
  const int64_t n = x.rows(), hc = attr(s, "hc"), dim = attr(s, "dim");
  const int64_t mix = (2 + hc) * hc;
  Tensor &pre = kernelResult(s, "pre", 4, {n, hc}, x.base);
  Tensor &post = kernelResult(s, "post", 4, {n, hc}, x.base);
  Tensor &comb = kernelResult(s, "comb", 4, {n, hc, hc}, x.base);
  // The mix+1 long sums (dots and sum of squares), then the rest per row.
  Tensor &sums = kernelScratch("hc_mix.sums", 4, {n, mix + 1});
  auto dx = desc<3>(x.ptr(), {n, hc, dim});
  auto dfn = desc<2>(weight(s, "fn").data, {mix, hc * dim});
  auto dsums = desc<2>(sums.ptr(), {n, mix + 1});
  invoke(s, "sums", &dx, &dfn, &dsums);
  auto dbase = desc<1>(weight(s, "base").data, {mix});
  auto dscale = desc<1>(weight(s, "scale").data, {3});
  auto dpre = desc<2>(pre.ptr(), {n, hc});
  auto dpost = desc<2>(post.ptr(), {n, hc});
  auto dcomb = desc<3>(comb.ptr(), {n, hc, hc});
  invoke(s, "main", &dsums, &dbase, &dscale, &dpre, &dpost, &dcomb);
  return absl::OkStatus();
}

absl::Status Executor::Impl::hcCollapse(Step &s) {
  Tensor &x = tensor(s, "streams"), &pre = tensor(s, "pre");
  const int64_t n = x.rows(), hc = attr(s, "hc"), dim = attr(s, "dim");
  Tensor &out = kernelResult(s, "result", 2, {n, dim}, x.base);
  auto dx = desc<3>(x.ptr(), {n, hc, dim});
  auto dpre = desc<2>(pre.ptr(), {n, hc});
  auto dout = desc<2>(out.ptr(), {n, dim});
  invoke(s, "main", &dx, &dpre, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::hcUpdate(Step &s) {
  Tensor &x = tensor(s, "streams"), &y = tensor(s, "update"),
         &post = tensor(s, "post"), &comb = tensor(s, "comb");
  const int64_t n = x.rows(), hc = attr(s, "hc"), dim = attr(s, "dim");
  Tensor &out = kernelResult(s, "result", 2, {n, hc, dim}, x.base);
  auto dx = desc<3>(x.ptr(), {n, hc, dim});
  auto dy = desc<2>(y.ptr(), {n, dim});
  auto dpost = desc<2>(post.ptr(), {n, hc});
  auto dcomb = desc<3>(comb.ptr(), {n, hc, hc});
  auto dout = desc<3>(out.ptr(), {n, hc, dim});
  invoke(s, "main", &dx, &dy, &dpost,
         &dcomb, &dout);
  if (!options.dumpHidden.empty()) {
    // The block's output, bf16 widened to float32 (exact) so numpy reads it.
    onHost(out.ptr());
    std::vector<uint32_t> widened(size_t(out.numel()));
    const auto *bits = reinterpret_cast<const uint16_t *>(out.ptr());
    for (size_t i = 0; i < widened.size(); ++i)
      widened[i] = uint32_t(bits[i]) << 16;
    return dump(s, options.dumpHidden, "hidden", "<f4", {n, hc, dim}, widened.data(), 4);
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::rmsNorm(Step &s) {
  Tensor &x = tensor(s, "input");
  const int64_t dim = attr(s, "dim"), rows = x.numel() / dim;
  std::vector<int64_t> dims = x.dims;
  Tensor &out = kernelResult(s, "result", 2, dims, x.base);
  auto dx = desc<2>(x.ptr(), {rows, dim});
  auto dw = desc<1>(weight(s, "weight").data, {dim});
  auto dout = desc<2>(out.ptr(), {rows, dim});
  invoke(s, "main", &dx, &dw, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::linearOp(Step &s) {
  Tensor &x = tensor(s, "input");
  const int64_t in = attr(s, "in"), out = attr(s, "out");
  const int64_t rows = x.numel() / in;
  const std::string format = s.call->attrs.at("format").get<std::string>();
  Tensor &y = kernelResult(s, "result", format == "f32" ? 4 : 2, {rows, out}, x.base);
  linear(s, "main", x.ptr(), rows, in, "", -1, y.ptr(), out);
  return absl::OkStatus();
}

absl::Status Executor::Impl::rope(Step &s) {
  Tensor &x = tensor(s, "input");
  const int64_t dim = attr(s, "dim"), perPosition = attr(s, "rows_per_position");
  if (!batch.empty()) {
    // A batch step: row i at sequence i's position, a launch a row on the
    // batch value (no per-sequence copies of it).
    if (x.rows() != int64_t(batch.size()) || x.numel() % (x.rows() * dim) != 0)
      return absl::InternalError("a batch step's RoPE input is not a row a sequence");
    auto copied = resultCopyOf(s, "result", x, 0, 2, x.dims, x.base);
    if (!copied.ok())
      return copied.status();
    Tensor &out = **copied;
    const int64_t rowElements = out.numel() / out.rows();
    const int64_t batchPosition = position, batchTokens = numTokens;
    for (size_t i = 0; i < batch.size(); ++i) {
      position = batch[i]->position;
      numTokens = 1;
      auto pos = index(s, "position");
      position = batchPosition;
      numTokens = batchTokens;
      if (!pos.ok())
        return pos.status();
      auto d = desc<2>(out.as<uint16_t>() + int64_t(i) * rowElements, {rowElements / dim, dim});
      invoke(s, "main", &d, int64_t(*pos), attr(s, "stride"), perPosition);
    }
    return absl::OkStatus();
  }
  auto pos = index(s, "position");
  if (!pos.ok())
    return pos.status();
  auto copied = resultCopyOf(s, "result", x, 0, 2, x.dims, x.base);
  if (!copied.ok())
    return copied.status();
  Tensor &out = **copied;
  auto d = desc<2>(out.ptr(), {out.numel() / dim, dim});
  invoke(s, "main", &d, int64_t(*pos), attr(s, "stride"),
         perPosition);
  return absl::OkStatus();
}

absl::Status Executor::Impl::quantize(Step &s) {
  Tensor &x = tensor(s, "input");
  const int64_t dim = attr(s, "dim"), rows = x.numel() / dim;
  const int64_t rowBytes = rowBytesOf(s, "result");
  if (rowBytes < 1)
    return absl::InvalidArgumentError("the quantized rows must be an i8 [rows, row_bytes] transient");
  Tensor &out = kernelResult(s, "result", 1, {rows, rowBytes}, x.base);
  auto dx = desc<2>(x.ptr(), {rows, dim});
  auto dout = desc<2>(out.ptr(), {rows, rowBytes});
  invoke(s, "main", &dx, &dout);
  return absl::OkStatus();
}

absl::StatusOr<Desc<2>> Executor::Impl::appendView(Step &s,
                                                   std::string_view cacheSlot,
                                                   int64_t start, int64_t n,
                                                   int64_t rowBytes) {
  CacheState &c = cache(s, cacheSlot);
  const CacheBuffer &b = cacheBuffer(s, cacheSlot);
  const std::string part = s.call->attrs.at("part").get<std::string>();
  if (part != "ring" && part != "main" && part != "index")
    return absl::InvalidArgumentError("attrs.part must be ring, main or index");
  if ((part == "ring") != (b.kind == CacheKind::SwaRing) ||
      (part != "ring" && b.kind != CacheKind::GlobalCache))
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", part, " store into '", b.id, "', a ", artifact::cacheKindName(b.kind)));
  if (part == "ring") {
    if (c.ringStart < 0 || start > c.ringEnd) {
      // A fresh ring, or one whose rows stop short of this store (bounded
      // replay's tail of a long chunk): it starts over at this store.
      c.ringStart = start;
    } else if (start < c.ringEnd) {
      return absl::InternalError(absl::StrCat(
          "a store at position ", start, " into '", b.id, "', which holds up to ",
          c.ringEnd - 1, " (a runtime bug)"));
    } else if (n > 1 && c.ringEnd > c.ringStart) {
      // A chunk after held rows: the ring as it was, for its attention.
      Tensor &kept = scratch(absl::StrCat("ring.before.", b.id), 1, {b.window, b.rowBytes});
      if (!runner || !runner->copyOnDevice(kept.ptr(), c.bytes.data(), kept.data.size())) {
        onHost(c.bytes.data());
        std::memcpy(kept.ptr(), c.bytes.data(), kept.data.size());
      }
      keptRings[b.id] = {calls, &kept};
    }
    c.ringEnd = start + n;
    return desc<2>(c.bytes.data(), {b.window, b.rowBytes});
  }
  const int64_t capacity = artifact->plan().maxContext / b.ratio;
  const int64_t end = start + n;
  if (end > capacity)
    return absl::OutOfRangeError(absl::StrCat(
        "cache '", b.id, "' would need ", end, " entries; the plan allows ",
        capacity, " (max_context ", artifact->plan().maxContext, ")"));
  if (int64_t(c.bytes.size()) < end * b.entryBytes) {
    // The entries written so far move with the buffer: on the device when it
    // holds them (a long context's cache is not downloaded and uploaded
    // whole), else on the host.
    GpuRunner::Detached moved;
    if (runner)
      moved = runner->detachDeviceCurrent(c.bytes.data());
    if (moved.bytes == 0) {
      onHost(c.bytes.data());
      if (runner)
        runner->forget(c.bytes.data());
    }
    bounds.remove(c.bytes.data());
    c.bytes.resize(size_t(std::min(capacity, std::max<int64_t>(
                                                 end, 2 * int64_t(c.bytes.size()) /
                                                          b.entryBytes)) *
                          b.entryBytes),
                   0);
    bounds.add(c.bytes.data(), c.bytes.size());
    if (moved.bytes != 0)
      runner->adoptOnDevice(c.bytes.data(), c.bytes.size(), moved);
    else
      hostRefilled(c.bytes.data());
  }
  const int64_t entries = int64_t(c.bytes.size()) / b.entryBytes;
  const int64_t offset = part == "main" ? 0 : b.mainRowBytes;
  int64_t &written = part == "main" ? c.mainEntries : c.indexEntries;
  written = std::max(written, end);
  // Entry e's main-KV row, then its index-key row: a strided view of one part.
  return Desc<2>{c.bytes.data(), c.bytes.data(), offset, {entries, rowBytes},
                 {b.entryBytes, 1}};
}

absl::Status Executor::Impl::cacheAppend(Step &s) {
  Tensor &rows = tensor(s, "rows");
  auto start = index(s, "position");
  if (!start.ok())
    return start.status();
  const int64_t n = rows.rows(), rowBytes = rows.dims.at(1);
  auto dc = appendView(s, "cache", *start, n, rowBytes);
  if (!dc.ok())
    return dc.status();
  auto dr = desc<2>(rows.ptr(), {n, rowBytes});
  int32_t missed = invokeAs<int32_t>(kernel(s, "main"), &dr, &*dc, int64_t(*start));
  if (missed != 0)
    return absl::InternalError(absl::StrCat(missed, " rows were not stored in '",
                                            arg(s, "cache").name, "' (a runtime bug)"));
  return absl::OkStatus();
}

Executor::Impl::RegionRun Executor::Impl::regionRun(Step &s,
                                                   std::initializer_list<const char *> parts) {
  const KernelRef &fused = kernel(s, "main");
  if (fused.gpu && fused.gpu->launch.rule == "row_tiles")
    return RegionRun::BlockForm;
  if (!runner)
    return RegionRun::FusedKernel;
  for (const char *part : parts)
    if (!s.kernels.count(part))
      return RegionRun::FusedKernel;
  return RegionRun::Parts;
}

absl::Status Executor::Impl::hcCollapseNorm(Step &s) {
  Tensor &x = tensor(s, "streams"), &pre = tensor(s, "pre");
  const int64_t n = x.rows(), hc = attr(s, "hc"), dim = attr(s, "dim");
  Tensor &out = kernelResult(s, "result", 2, {n, dim}, x.base);
  auto dx = desc<3>(x.ptr(), {n, hc, dim});
  auto dpre = desc<2>(pre.ptr(), {n, hc});
  auto dw = desc<1>(weight(s, "weight").data, {dim});
  auto dout = desc<2>(out.ptr(), {n, dim});
  // The block form is the norm's word form (a block per row).
  if (regionRun(s, {"collapse", "norm"}) == RegionRun::Parts) {
    Tensor &collapsed = kernelScratch("fusion.collapsed", 2, {n, dim});
    auto dc = desc<2>(collapsed.ptr(), {n, dim});
    invoke(s, "collapse", &dx, &dpre, &dc);
    invoke(s, "norm", &dc, &dw, &dout);
    return absl::OkStatus();
  }
  invoke(s, "main", &dx, &dpre, &dw, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::fusion(Step &s) {
  const std::string name = s.call->attrs.at("name").get<std::string>();
  if (name == "hc_collapse_norm")
    return hcCollapseNorm(s);
  if (name != "rope_quantize_store")
    return absl::UnimplementedError(absl::StrCat(
        "the CPU executor runs no kernel region '", name, "'"));
  Tensor &x = tensor(s, "input");
  auto ropePosition = index(s, "rope_position");
  if (!ropePosition.ok())
    return ropePosition.status();
  auto storePosition = index(s, "store_position");
  if (!storePosition.ok())
    return storePosition.status();
  const int64_t n = x.rows(), dim = attr(s, "dim");
  const int64_t rowBytes = rowBytesOf(s, "rows");
  if (rowBytes < 1)
    return absl::InvalidArgumentError("the rows of a region must be an i8 [rows, row_bytes] transient");
  // The block form is the quantizer's (a block per row: the released row
  // formats); the same operations on the same bytes however it runs.
  const RegionRun run = regionRun(s, {"rope", "quantize", "append"});
  const bool blockForm = run == RegionRun::BlockForm;
  const bool parts = run == RegionRun::Parts && s.call->attrs.contains("rope_stride");
  Tensor &rows = parts || blockForm ? kernelResult(s, "rows", 1, {n, rowBytes}, x.base)
                                    : result(s, "rows", 1, {n, rowBytes}, x.base);
  auto dc = appendView(s, "cache", *storePosition, n, rowBytes);
  if (!dc.ok())
    return dc.status();
  auto dx = desc<2>(x.ptr(), {n, dim});
  auto dr = desc<2>(rows.ptr(), {n, rowBytes});
  int32_t missed = 0;
  if (parts && n > 0) {
    const size_t bytes = size_t(n * dim * 2);
    if (x.byteSize() < bytes)
      return absl::InvalidArgumentError("the region's input holds fewer bytes than [rows, dim] bf16");
    Tensor &rotated = scratch("fusion.rotated", 2, {n, dim});
    if (!runner->copyOnDevice(rotated.ptr(), x.ptr(), bytes)) {
      onHost(x.ptr());
      std::memcpy(rotated.ptr(), x.ptr(), bytes);
    }
    auto drot = desc<2>(rotated.ptr(), {n, dim});
    invoke(s, "rope", &drot, int64_t(*ropePosition),
           s.call->attrs.at("rope_stride").get<int64_t>(), int64_t(1));
    invoke(s, "quantize", &drot, &dr);
    missed = invokeAs<int32_t>(kernel(s, "append"), &dr, &*dc, int64_t(*storePosition));
  } else {
    missed = invokeAs<int32_t>(kernel(s, "main"), &dx, int64_t(*ropePosition), int64_t(*storePosition),
                               &*dc, &dr);
  }
  if (missed != 0)
    return absl::InternalError(absl::StrCat(missed, " rows were not stored in '",
                                            arg(s, "cache").name, "' (a runtime bug)"));
  return absl::OkStatus();
}

absl::Status Executor::Impl::compress(Step &s) {
  Tensor &x = tensor(s, "input");
  auto pos = index(s, "position");
  if (!pos.ok())
    return pos.status();
  const int64_t ratio = attr(s, "ratio"), in = attr(s, "in"), dim = attr(s, "dim");
  const int64_t n = x.rows();
  if (ratio == 1) {
    Tensor &latent = kernelScratch("compress.latent", 2, {n, dim});
    linear(s, "linear", x.ptr(), n, in, "wkv.", -1, latent.ptr(), dim);
    Tensor &out = kernelResult(s, "result", 2, {n, dim}, *pos);
    auto dl = desc<2>(latent.ptr(), {n, dim});
    auto dw = desc<1>(weight(s, "norm.weight").data, {dim});
    auto dout = desc<2>(out.ptr(), {n, dim});
    invoke(s, "norm", &dl, &dw, &dout);
    return absl::OkStatus();
  }
  CacheState &state = cache(s, "state");
  Tensor &kv = kernelScratch("compress.kv", 4, {n, dim});
  Tensor &score = kernelScratch("compress.score", 4, {n, dim});
  linear(s, "linear", x.ptr(), n, in, "wkv.", -1, kv.ptr(), dim);
  linear(s, "linear", x.ptr(), n, in, "wgate.", -1, score.ptr(), dim);
  const int64_t groups = (*pos + n) / ratio - *pos / ratio;
  Tensor &pooled = kernelScratch("compress.pooled", 2, {groups, dim});
  float *stateKv = reinterpret_cast<float *>(state.bytes.data());
  float *stateScore = stateKv + ratio * dim;
  auto dkv = desc<2>(kv.ptr(), {n, dim});
  auto dscore = desc<2>(score.ptr(), {n, dim});
  auto dsk = desc<2>(stateKv, {ratio, dim});
  auto dss = desc<2>(stateScore, {ratio, dim});
  auto dp = desc<2>(pooled.ptr(), {groups, dim});
  invoke(s, "pool", &dkv, &dscore, &dsk,
         &dss, int64_t(*pos), &dp);
  Tensor &out = kernelResult(s, "result", 2, {groups, dim}, *pos / ratio);
  auto dw = desc<1>(weight(s, "norm.weight").data, {dim});
  auto dout = desc<2>(out.ptr(), {groups, dim});
  invoke(s, "norm", &dp, &dw, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::indexScore(Step &s) {
  Tensor &q = tensor(s, "query"), &w = tensor(s, "head_weights");
  const int64_t n = q.rows(), heads = attr(s, "heads"), dim = attr(s, "dim"),
                ratio = attr(s, "ratio");
  // Release publication: a decode step reads the keys the plan's table
  // names for its position (csa.index_score's `published`).
  int64_t keysFrom = -1;
  if (s.call->attrs.contains("published_at") && s.where.rfind("decode", 0) == 0) {
    const json &at = s.call->attrs["published_at"];
    const int64_t published = attr(s, "published");
    if (!at.is_array() || at.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          s.where, ": attrs.published_at is not a non-empty list (one entry per position residue)"));
    const json &e = at[size_t(q.base % int64_t(at.size()))];
    if (!e.is_number_integer() || e.get<int64_t>() < -1 || e.get<int64_t>() >= published)
      return absl::InvalidArgumentError(absl::StrCat(
          s.where, ": attrs.published_at names ", e.dump(), "; -1 (the own cache) or one of the ",
          published, " published caches"));
    keysFrom = e.get<int64_t>();
  }
  CacheState &c = keysFrom < 0 ? cache(s, "cache") : cache(s, "published", keysFrom);
  const CacheBuffer &b =
      keysFrom < 0 ? cacheBuffer(s, "cache") : cacheBuffer(s, "published", keysFrom);
  const int64_t keyBytes = b.indexRowBytes;
  // Queries through FP4 (E2M1, UE8M0 per 32), as the released indexer.
  Tensor &qRows = kernelScratch("index.qrows", 1, {n * heads, keyBytes});
  Tensor &qDeq = kernelScratch("index.q", 2, {n, heads, dim});
  auto dq = desc<2>(q.ptr(), {n * heads, dim});
  auto dqr = desc<2>(qRows.ptr(), {n * heads, keyBytes});
  auto dqd = desc<2>(qDeq.ptr(), {n * heads, dim});
  invoke(s, "quantize", &dq, &dqr);
  invoke(s, "dequantize", &dqr, &dqd);
  // Head weights times (heads * dim)^-1/2.
  Tensor &ws = kernelScratch("index.w", 2, {n, heads});
  auto dw = desc<2>(w.ptr(), {n, heads});
  auto dws = desc<2>(ws.ptr(), {n, heads});
  invoke(s, "scale", &dw, &dws);
  // The keys written so far.
  const int64_t width = (q.base + n) / ratio;
  const int64_t numKeys = std::min(width, c.indexEntries);
  Tensor &keys = kernelScratch("index.keys", 2, {numKeys, dim});
  Tensor &keyRows =
      gatherParts("index.key_rows", c, b, b.mainRowBytes, keyBytes, numKeys);
  auto dkr = desc<2>(keyRows.ptr(), {numKeys, keyBytes});
  auto dk = desc<2>(keys.ptr(), {numKeys, dim});
  if (numKeys > 0)
    invoke(s, "dequantize", &dkr, &dk);
  Tensor &visible = visibleEntries(q.base, n, ratio);
  Tensor &out = kernelResult(s, "scores", 4, {n, width}, q.base);
  auto dqq = desc<3>(qDeq.ptr(), {n, heads, dim});
  auto dv = desc<1>(visible.ptr(), {n});
  auto dout = desc<2>(out.ptr(), {n, width});
  invoke(s, "main", &dqq, &dk, &dws,
         &dv, &dout);
  return absl::OkStatus();
}

absl::Status Executor::Impl::hsiSelect(Step &s) {
  Tensor &scores = tensor(s, "scores");
  const int64_t n = scores.rows(), width = scores.dims.at(1),
                ratio = attr(s, "ratio"), blockSize = attr(s, "block_size");
  Tensor &visible = visibleEntries(scores.base, n, ratio);
  Tensor &mask = kernelResult(s, "pool", 1, {n, width}, scores.base);
  // Each block's score, the top blocks (each block ranks itself), then
  // their positions.
  const int64_t numBlocks = (width + blockSize - 1) / blockSize;
  Tensor &blocks = kernelScratch("hsi.blocks", 4, {n, numBlocks});
  Tensor &picked = kernelScratch("hsi.picked", 1, {n, numBlocks});
  auto ds = desc<2>(scores.ptr(), {n, width});
  auto dv = desc<1>(visible.ptr(), {n});
  auto db = desc<2>(blocks.ptr(), {n, numBlocks});
  auto dp = desc<2>(picked.ptr(), {n, numBlocks});
  auto dm = desc<2>(mask.ptr(), {n, width});
  invoke(s, "blocks", &ds, &dv, &db);
  invoke(s, "rank", &db, &dp);
  invoke(s, "expand", &db, &dp, &dm);
  return decision(s, "hsi_pool", mask, "|u1");
}

absl::Status Executor::Impl::topk(Step &s) {
  Tensor &scores = tensor(s, "scores");
  const bool masked = s.layout.has("pool");
  const int64_t n = scores.rows(), width = scores.dims.at(1),
                ratio = attr(s, "ratio"), k = attr(s, "k");
  Tensor &visible = visibleEntries(scores.base, n, ratio);
  Tensor &out = kernelResult(s, "result", 4, {n, k}, scores.base);
  auto ds = desc<2>(scores.ptr(), {n, width});
  auto dv = desc<1>(visible.ptr(), {n});
  auto dout = desc<2>(out.ptr(), {n, k});
  // Which positions are in the top k (each position ranks itself), then
  // the picks in position order.
  Tensor &picked = kernelScratch("topk.picked", 1, {n, width});
  auto dp = desc<2>(picked.ptr(), {n, width});
  if (!masked) {
    invoke(s, "rank", &ds, &dp);
    invoke(s, "main", &dp, &dv, &dout);
    return decision(s, "topk", out, "<i4");
  }
  // The pool answers by position: row i of the scores is the pool's row
  // (scores.base + i - pool.base); positions past its width are not in it.
  Tensor &pool = tensor(s, "pool");
  Tensor &mask = scratch("topk.mask", 1, {n, width});
  const int64_t poolWidth = pool.dims.at(1);
  const int64_t firstRow = scores.base - pool.base;
  if (firstRow < 0 || firstRow + n > pool.rows())
    return absl::InternalError(absl::StrCat(
        "the candidate pool has no rows for positions ", scores.base, "..",
        scores.base + n - 1, " (it covers ", pool.base, "..",
        pool.base + pool.rows() - 1, ")"));
  // The pool's rows are the mask's when they are as wide (a decode step's one
  // row): a copy where the pool is, not a read-back.
  const bool copied = runner && width == poolWidth &&
                      runner->copyOnDevice(mask.ptr(),
                                           pool.as<uint8_t>() + firstRow * poolWidth,
                                           size_t(n * width));
  if (!copied) {
    onHost(pool.ptr());
    std::fill(mask.data.begin(), mask.data.end(), 0);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(mask.as<uint8_t>() + i * width,
                  pool.as<uint8_t>() + (firstRow + i) * poolWidth,
                  size_t(std::min(width, poolWidth)));
  }
  auto dm = desc<2>(mask.ptr(), {n, width});
  invoke(s, "rank", &ds, &dm, &dp);
  invoke(s, "main", &dp, &dv, &dout);
  return decision(s, "topk", out, "<i4");
}

absl::Status Executor::Impl::sparseAttention(Step &s) {
  Tensor &q = tensor(s, "query");
  CacheState &ring = cache(s, "window");
  const CacheBuffer &ringBuffer = cacheBuffer(s, "window");
  Tensor &fresh = tensor(s, "fresh");
  auto pos = index(s, "position");
  if (!pos.ok())
    return pos.status();
  const bool global = s.layout.has("cache");
  const int64_t n = q.rows(), heads = attr(s, "heads"), dim = attr(s, "dim"),
                window = attr(s, "window");
  const float scale = float(s.call->attrs.at("scale").get<double>());
  const int64_t rowBytes = ringBuffer.rowBytes;

  // Window rows. Before this call the ring held positions [ringStart, pos)
  // (the call's rows were appended already): either none (a fresh ring, the
  // layers bounded replay starts late: the call's rows), or, for one decode
  // token, the ring, or, for a chunk after held rows, the ring as it was
  // (appendView kept it) and then the call's rows.
  const bool ringEmptyBefore = ring.ringStart >= *pos;
  const bool chunk = !ringEmptyBefore && n != 1;
  Tensor *kept = nullptr;
  if (chunk) {
    auto it = keptRings.find(ringBuffer.id);
    if (it == keptRings.end() || it->second.run != calls)
      return absl::InternalError(absl::StrCat(
          "the rows that ring '", ringBuffer.id,
          "' held before this chunk were not kept (a runtime bug)"));
    kept = it->second.rows;
    if (fresh.rows() != n)
      return absl::InvalidArgumentError("the fresh SWA rows are not one per query row");
  }
  const int64_t windowRows = ringEmptyBefore ? n : chunk ? window + n : window;
  const int64_t windowWidth = ringEmptyBefore ? std::min(n, window) : window;

  // Selected rows: the global cache's main-KV entries the top-k sets name.
  Tensor *selected = global ? &tensor(s, "selected") : nullptr;
  if (selected && (selected->elementBytes != 4 || selected->dims.size() != 2))
    return absl::InvalidArgumentError("the selected positions are not an i32 [rows, k] top-k set");
  const int64_t k = global ? selected->dims.at(1) : 0;
  // One query row (a decode step): its top-k set is gathered as it is, row
  // windowRows + j holding entry set[j], and the index list's selected part
  // is built where the set is (selected_index), so nothing is read back. The
  // attention walks the same entries in the same order either way.
  const bool inSetOrder = global && n == 1 && s.kernels.count("gather_selected") &&
                          s.kernels.count("selected_index");
  const int32_t *setRow = nullptr;
  if (global) {
    const int64_t selRow = q.base - selected->base;
    if (selRow < 0 || selRow + n > selected->rows())
      return absl::InternalError(absl::StrCat(
          "the top-k set has no rows for positions ", q.base, "..", q.base + n - 1));
    setRow = selected->as<int32_t>() + selRow * k;
  }
  // Where the index lists are built: by kernels where the attention runs
  // when the plan has them (nothing read back or uploaded, so the call's
  // launches stay one run), otherwise on the host. The window part from the
  // ring's slots (a decode step: one row after held rows) or from the call's
  // rows (a prefill, a chunk); the selected part in set order (one row) or
  // in entry order (below).
  const bool windowOnDevice =
      (!ringEmptyBefore && n == 1) ? s.kernels.count("window_index") != 0
                                   : s.kernels.count("window_index_rows") != 0;
  const bool inEntryOrder =
      global && !inSetOrder && windowOnDevice && s.kernels.count("entry_index");
  const bool onDevice = windowOnDevice && (!global || inSetOrder || inEntryOrder);
  const int64_t held = global ? cache(s, "cache").mainEntries : 0;
  // Several rows' sets overlap: the entries are gathered and dequantized
  // once, row windowRows + slot[e] holding entry e. In entry order every held
  // entry (slot[e] = e: nearly all are named by some set of a long prompt);
  // otherwise only those some set names, read back, in ascending order.
  std::vector<int32_t> used, slot;
  if (global && !inSetOrder && !inEntryOrder) {
    onHost(selected->ptr());
    const int32_t *sel = selected->as<int32_t>();
    slot.assign(size_t(held), -1);
    for (int64_t i = 0; i < selected->numel(); ++i) {
      if (sel[i] < 0)
        continue;
      if (sel[i] >= held)
        return absl::InternalError(absl::StrCat(
            "a top-k set names entry ", sel[i], " of '", arg(s, "cache").name,
            "', which holds ", held));
      slot[size_t(sel[i])] = 0;
    }
    for (int64_t e = 0; e < held; ++e)
      if (slot[size_t(e)] == 0) {
        slot[size_t(e)] = int32_t(used.size());
        used.push_back(int32_t(e));
      }
  }
  const int64_t entries = inSetOrder ? k : inEntryOrder ? held : int64_t(used.size());
  // Indices per query: the window (in position order, -1 where nothing
  // is held), then the selected entries after the window rows.
  const int64_t width = windowWidth + k;
  Tensor &idx = onDevice ? kernelScratch("attention.idx", 4, {n, width})
                         : scratch("attention.idx", 4, {n, width});
  int32_t *ix = idx.as<int32_t>();
  for (int64_t i = 0; i < n && !onDevice; ++i) {
    int32_t *row = ix + i * width;
    if (ringEmptyBefore) {
      const int64_t first = std::max<int64_t>(0, i - window + 1);
      for (int64_t j = 0; j < windowWidth; ++j)
        row[j] = first + j > i ? -1 : int32_t(first + j);
    } else if (chunk) {
      // Positions before the call in the kept ring's slots, the call's own
      // after the ring's `window` rows; oldest first, as a prefill lists them.
      for (int64_t j = 0; j < window; ++j) {
        const int64_t p = *pos + i - window + 1 + j;
        row[j] = p < std::max<int64_t>(0, ring.ringStart) ? -1
                 : p < *pos                               ? int32_t(p % window)
                                                          : int32_t(window + p - *pos);
      }
    } else {
      // The ring's slots oldest to newest; slots of positions before the
      // ring's first row hold nothing.
      const int64_t oldest = *pos % window + 1;
      for (int64_t j = 0; j < window; ++j) {
        const int64_t slot = (oldest + j) % window;
        const int64_t p = *pos - window + 1 + j; // the position in that slot
        row[j] = (slot > *pos || p < ring.ringStart) ? -1 : int32_t(slot);
      }
    }
    if (global && !inSetOrder) {
      const int32_t *sel = setRow + i * k;
      for (int64_t j = 0; j < k; ++j)
        row[windowWidth + j] =
            sel[j] < 0 ? -1 : int32_t(windowRows + slot[size_t(sel[j])]);
    }
  }
  // The host's index lists go to the GPU now, before this step's launches,
  // so that those are one run (one graph; LaunchGraphs).
  Tensor *which = nullptr;
  if (global && entries > 0 && s.kernels.count("gather_selected") && !inSetOrder &&
      !inEntryOrder) {
    which = &scratch("attention.which", 4, {entries});
    std::memcpy(which->ptr(), used.data(), used.size() * sizeof(int32_t));
    uploadNow(which->ptr());
  }
  if (onDevice && !ringEmptyBefore && n == 1) {
    // The list's first `window` columns (one row: no stride to skip).
    auto didx = desc<2>(idx.ptr(), {n, window});
    invoke(s, "window_index", &didx, int64_t(*pos), int64_t(ring.ringStart));
  } else if (onDevice) {
    // The list's first windowWidth columns, rows `width` apart.
    auto didx = desc<2>(idx.ptr(), {n, windowWidth});
    didx.strides[0] = width;
    invoke(s, "window_index_rows", &didx, int64_t(*pos), int64_t(ring.ringStart), window,
           int64_t(chunk));
  } else {
    uploadNow(idx.ptr());
  }
  if (global && k > 0 && (inSetOrder || inEntryOrder)) {
    auto dsel = desc<2>(setRow, {n, k});
    auto didx = desc<2>(idx.ptr(), {n, width});
    if (inSetOrder)
      invoke(s, "selected_index", &dsel, &didx, windowWidth, windowRows);
    else
      invoke(s, "entry_index", &dsel, &didx, windowWidth, windowRows, held);
  }
  Tensor &rows = kernelScratch("attention.rows", 2, {windowRows + entries, dim});
  if (chunk) {
    auto dk = desc<2>(kept->as<uint8_t>(), {window, rowBytes});
    auto dkv = desc<2>(rows.ptr(), {window, dim});
    invoke(s, "dequantize_window", &dk, &dkv);
    auto df = desc<2>(fresh.as<uint8_t>(), {n, rowBytes});
    auto dfv = desc<2>(rows.as<uint16_t>() + window * dim, {n, dim});
    invoke(s, "dequantize_window", &df, &dfv);
  } else {
    const uint8_t *src = ringEmptyBefore ? fresh.as<uint8_t>() : ring.bytes.data();
    auto dr = desc<2>(src, {windowRows, rowBytes});
    auto dv = desc<2>(rows.ptr(), {windowRows, dim});
    if (windowRows > 0)
      invoke(s, "dequantize_window", &dr, &dv);
  }
  // A set of an empty cache names nothing (all -1): no rows to gather.
  if (global && entries > 0 && (!inSetOrder || held > 0)) {
    CacheState &c = cache(s, "cache");
    const CacheBuffer &b = cacheBuffer(s, "cache");
    Tensor *gathered = nullptr;
    if (inEntryOrder) {
      // Every held entry in order: one strided copy where the cache is.
      gathered = &gatherParts("attention.main_rows", c, b, 0, b.mainRowBytes, entries);
    } else if (s.kernels.count("gather_selected")) {
      // A kernel gathers them where the cache is (on the GPU path one launch
      // instead of a copy per run of consecutive entries).
      Tensor &rowsOut = kernelScratch("attention.main_rows", 1, {entries, b.mainRowBytes});
      auto dc = desc<1>(c.bytes.data(), {int64_t(c.bytes.size())});
      auto dw = desc<1>(inSetOrder ? setRow : which->ptr(), {entries});
      auto dr = desc<2>(rowsOut.ptr(), {entries, b.mainRowBytes});
      invoke(s, "gather_selected", &dc, &dw, &dr, int64_t(b.entryBytes), int64_t(0));
      gathered = &rowsOut;
    } else {
      gathered = &gatherParts("attention.main_rows", c, b, 0, b.mainRowBytes, entries, &used);
    }
    Tensor &mainRows = *gathered;
    auto dm = desc<2>(mainRows.ptr(), {entries, b.mainRowBytes});
    auto dv = desc<2>(rows.as<uint16_t>() + windowRows * dim, {entries, dim});
    invoke(s, "dequantize_selected", &dm, &dv);
  }

  Tensor &out = kernelResult(s, "result", 2, {n, heads, dim}, q.base);
  auto dq = desc<3>(q.ptr(), {n, heads, dim});
  auto drows = desc<2>(rows.ptr(), {windowRows + entries, dim});
  auto didx = desc<2>(idx.ptr(), {n, width});
  auto dsink = desc<1>(weight(s, "sink").data, {heads});
  auto dout = desc<3>(out.ptr(), {n, heads, dim});
  invoke(s, "main", &dq, &drows, &didx,
         &dsink, scale, &dout);
  if (options.analyzeRecall && global)
    return analyzeRecall(s, q, *selected);
  return absl::OkStatus();
}

absl::Status Executor::Impl::engram(Step &s) {
  Tensor &streams = tensor(s, "streams");
  auto pos = index(s, "position");
  if (!pos.ok())
    return pos.status();
  const int64_t n = streams.rows(), hc = attr(s, "hc"), dim = attr(s, "dim"),
                maxNgram = attr(s, "max_ngram"), cols = attr(s, "columns"),
                headDim = attr(s, "head_dim"),
                compressedVocab = attr(s, "compressed_vocab");
  if (!engramMapChecked) {
    // The options' map (the tokenizer's compressed ids); without one, t mod
    // the compressed vocabulary (ExecutorOptions::engramTokenMap).
    if (engramMap.empty()) {
      engramMap.resize(size_t(vocab));
      for (int64_t t = 0; t < vocab; ++t)
        engramMap[size_t(t)] = t % compressedVocab;
    }
    for (size_t t = 0; t < engramMap.size(); ++t)
      if (engramMap[t] < 0 || engramMap[t] >= compressedVocab)
        return absl::InvalidArgumentError(absl::StrCat(
            "the Engram token map gives token ", t, " the class ", engramMap[t],
            ", outside [0, ", compressedVocab, ") (engram_compressed_vocab_size)"));
    bounds.add(engramMap.data(), engramMap.size() * sizeof(int64_t));
    hostRefilled(engramMap.data());
    engramMapChecked = true;
  }
  // The history from max(0, start - (maxNgram - 1)) to the step's last token.
  const int64_t first = std::max<int64_t>(0, *pos - (maxNgram - 1));
  if (*pos > int64_t(seq->history.size()) ||
      n > int64_t(seq->history.size()) - *pos)
    return absl::InternalError("the token history is shorter than the step");
  const int64_t last = *pos + n;
  Tensor &hist = scratch("engram.history", 4, {last - first});
  std::memcpy(hist.ptr(), seq->history.data() + first,
              size_t(last - first) * sizeof(int32_t));
  Tensor &ids = kernelScratch("engram.ids", 8, {n, cols});
  auto dt = desc<1>(hist.ptr(), {last - first});
  auto dmap = desc<1>(engramMap.data(), {vocab});
  auto dids = desc<2>(ids.ptr(), {n, cols});
  invoke(s, "hash", &dt, &dmap, int64_t(first),
         int64_t(*pos), &dids);
  const checkpoint::TensorView &table = weight(s, "embed.weight"),
                               &tableScale = weight(s, "embed.scale");
  Tensor &rows = kernelScratch("engram.rows", 2, {n, cols * headDim});
  auto dtab = desc<2>(table.data, {table.shape[0], headDim});
  auto dts = desc<2>(tableScale.data, {tableScale.shape[0], headDim / 32});
  auto drows = desc<2>(rows.ptr(), {n, cols * headDim});
  invoke(s, "gather", &dids, &dtab, &dts,
         &drows);
  Tensor &kv = kernelScratch("engram.kv", 2, {n, (hc + 1) * dim});
  linear(s, "linear", rows.ptr(), n, cols * headDim, "wkv.", -1, kv.ptr(),
         (hc + 1) * dim);
  auto copied = resultCopyOf(s, "result", streams, 0, 2, {n, hc, dim}, streams.base);
  if (!copied.ok())
    return copied.status();
  Tensor &out = **copied;
  auto dout = desc<3>(out.ptr(), {n, hc, dim});
  auto dkv = desc<2>(kv.ptr(), {n, (hc + 1) * dim});
  auto dq = desc<2>(weight(s, "q_weight").data, {hc, dim});
  auto dk = desc<2>(weight(s, "k_weight").data, {hc, dim});
  invoke(s, "gate", &dout, &dkv, &dq, &dk);
  return absl::OkStatus();
}

absl::Status Executor::Impl::lmHead(Step &s) {
  Tensor &x = tensor(s, "input");
  const int64_t dim = attr(s, "dim"), vocabOut = attr(s, "vocab");
  // In a batch step every row is the last of its sequence.
  const bool lastOnly = s.call->attrs.at("last_only").get<bool>() && batch.empty();
  const int64_t rows = lastOnly ? 1 : x.rows();
  if (x.rows() < 1 || x.numel() != x.rows() * dim)
    return absl::InvalidArgumentError(absl::StrCat(
        "the head's input is not [rows >= 1, ", dim, "]"));
  const uint16_t *in = x.as<uint16_t>() + (lastOnly ? (x.rows() - 1) * dim : 0);
  Tensor &out = kernelResult(s, "result", 4, {rows, vocabOut}, x.base);
  linear(s, "main", in, rows, dim, "", -1, out.ptr(), vocabOut);
  return absl::OkStatus();
}

absl::Status Executor::Impl::sliceRows(Step &s) {
  Tensor &src = tensor(s, "source");
  auto offset = index(s, "offset");
  if (!offset.ok())
    return offset.status();
  auto count = index(s, "size");
  if (!count.ok())
    return count.status();
  if (src.dims.empty())
    return absl::InvalidArgumentError("slices a value no step has written");
  if (*offset > src.rows() || *count > src.rows() - *offset)
    return absl::InternalError(absl::StrCat("rows [", *offset, ", ",
                                            *offset + *count, ") of a value with ",
                                            src.rows(), " rows"));
  std::vector<int64_t> dims = src.dims;
  dims[0] = *count;
  const int64_t rowBytes = src.numel() / std::max<int64_t>(src.rows(), 1) * src.elementBytes;
  auto copied = resultCopyOf(s, "result", src, size_t(*offset * rowBytes),
                             src.elementBytes, dims, src.base + *offset);
  return copied.ok() ? absl::OkStatus() : copied.status();
}

} // namespace csa::runtime

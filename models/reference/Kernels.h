//===- Kernels.h - Plain C++ kernels of the reference forward ----*- C++ -*-===//
//
// The numerics of the released `kernel.py` / `model.py`, written for clarity:
// weights stay in their checkpoint formats and are dequantized row by row
// (exactly: every code times its power-of-two or E4M3 scale is exact in
// fp32), activations are fp32 vectors rounded to bf16 wherever the reference
// holds a bf16 tensor.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_MODELS_REFERENCE_KERNELS_H
#define CSA_MODELS_REFERENCE_KERNELS_H

#include <cstdint>
#include <functional>
#include <vector>

namespace csa::reference {

/// A row-major matrix of activations.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
  Mat() = default;
  Mat(int64_t rows, int64_t cols, float fill = 0.f)
      : rows(rows), cols(cols), v(size_t(rows * cols), fill) {}
  float *row(int64_t r) { return v.data() + r * cols; }
  const float *row(int64_t r) const { return v.data() + r * cols; }
  float &at(int64_t r, int64_t c) { return v[size_t(r * cols + c)]; }
  float at(int64_t r, int64_t c) const { return v[size_t(r * cols + c)]; }
};

/// How a weight is stored (and therefore how `linear` treats activations).
enum class WeightKind {
  BF16, ///< plain bf16 matmul, bf16 output
  F32,  ///< fp32 matmul, fp32 output (compressor at ratio > 1, gate, head)
  FP8,  ///< E4M3 with 32x32 UE8M0 block scales; activations FP8 per 32
  FP4,  ///< packed E2M1 with a UE8M0 scale per 32 along K; activations FP8
};

/// A [rows, cols] weight viewed in its stored bytes.
struct Weight {
  WeightKind kind = WeightKind::BF16;
  int64_t rows = 0, cols = 0;
  const uint8_t *data = nullptr;
  const uint8_t *scale = nullptr; ///< FP8/FP4 only
  /// Stored as F32 (true) or BF16 (false) when kind is BF16/F32: the kind
  /// says how the reference computes, this says how the bytes are laid out.
  bool storedF32 = false;

  /// Dequantizes row `r` into `out[cols]`.
  void dequantizeRow(int64_t r, float *out) const;
};

/// Loads element `i` of a possibly unaligned little-endian array (checkpoint
/// tensors are packed back to back, so their bytes carry no alignment).
uint16_t loadU16(const uint8_t *base, int64_t i);
float loadF32(const uint8_t *base, int64_t i);

float bf16(float x);
void roundBf16(std::vector<float> &v);
void roundBf16(Mat &m);

/// Runs `body(begin, end)` over [0, n) split across the machine's threads.
void parallelFor(int64_t n, const std::function<void(int64_t, int64_t)> &body);

/// y = x @ W^T as the released code computes it for `w.kind`:
/// FP8/FP4: act_quant(x, 32, ue8m0) then per-32-block fp32 partial sums,
/// bf16 output; BF16: fp32 accumulation, bf16 output; F32: fp32 output.
/// Every linear sums an fp32 partial per kLinearBlock-block of K (the last
/// one shorter when K is not a multiple) and adds the partials in K order.
inline constexpr int64_t kLinearBlock = 32;
Mat linear(const Mat &x, const Weight &w);

/// RMSNorm in fp32 with a weight, output rounded to bf16.
Mat rmsNorm(const Mat &x, const std::vector<float> &weight, double eps);

/// act_quant(..., inplace=True): FP8 E4M3 with UE8M0 scales per 32, back to
/// bf16 (exact).
void fp8QuantDequant(float *x, int64_t n);
/// fp4_act_quant(..., 32, inplace=True): E2M1 with UE8M0 scales per 32.
void fp4QuantDequantUe8m0(float *x, int64_t n);

/// RoPE tables: one (cos, sin) pair per position and rotated pair, computed
/// in fp32 as `precompute_freqs_cis` does (YaRN when originalSeqLen > 0).
struct RopeTable {
  int64_t dim = 0; ///< rotated channels (even)
  std::vector<float> freqs; ///< dim/2 frequencies
  RopeTable() = default;
  RopeTable(int64_t dim, double theta, int64_t originalSeqLen, double factor,
            double betaFast, double betaSlow);
  /// Rotates the last `dim` channels of `x[width]` at `position`
  /// (adjacent pairs as complex numbers), rounding to bf16.
  void apply(float *x, int64_t width, int64_t position, bool inverse) const;
};

/// Indices of the `k` largest scores, ties to the lowest index (csa's
/// deterministic rule; torch leaves ties implementation-defined).
std::vector<int64_t> topkIndices(const std::vector<float> &scores, int64_t k);

/// HSI level 1 (`select_candidate_blocks`): scores each block of
/// `blockSize` positions by its max, pins the block of the newest visible
/// position (`compressLen - 1`), keeps the top `topBlocks` blocks that are
/// not -inf; returns a mask over positions.
std::vector<char> selectCandidateBlocks(const std::vector<float> &scores,
                                        int64_t compressLen, int64_t topBlocks,
                                        int64_t blockSize);

/// One indexer score (`Indexer.forward`): the bf16 einsum of each head's
/// query `q[h * dim ...]` with `key`, ReLU, times the head weight `w[h]`
/// (bf16), summed over heads and rounded to bf16.
float indexScore(const float *q, const float *key, const float *w,
                 int64_t heads, int64_t dim);

/// `sparse_attn` for one query head: one softmax over `rows[idx[k]]` (K = V;
/// -1 contributes nothing), online over blocks of 64 indices with bf16
/// probabilities and a running max starting at -1e30, the sink added to the
/// denominator only; writes `rows.cols` bf16 values to `out`.
void sparseAttentionHead(const float *q, const Mat &rows,
                         const std::vector<int32_t> &idx, float sink,
                         float scale, float *out);

/// Engram's gated update of one stream (`Engram.forward`): a normalised dot
/// product of the stream `h` with its key (weighted by q_weight * k_weight),
/// a signed-sqrt sigmoid gate, `h += gate * value`, rounded to bf16 in place.
void engramGate(float *h, const float *key, const float *value,
                const float *qWeight, const float *kWeight, int64_t d,
                float eps);

/// The ratio > 1 compressor's pooling of one group (`Compressor.forward`):
/// per channel, a softmax over the group's `ratio` gate scores weighting its
/// projected KV rows (fp32; rows are `dim` apart).
void poolGroup(const float *kv, const float *score, int64_t ratio, int64_t dim,
               float *out);

/// MoE routing of one token (`Gate.forward`): s = sqrt(softplus(logit));
/// the top `k` of s + bias (ties to the lowest expert id) in selection
/// order; weights s / (sum + 1e-20) (when k > 1) times `routeScale`.
void routeToken(const float *logits, const std::vector<float> &bias, int64_t k,
                float routeScale, std::vector<int64_t> &ids,
                std::vector<float> &weights);

/// The clamped SwiGLU of one element (`Expert.forward`): up clamped to
/// +-limit, gate clamped above at limit (limit > 0), silu(gate) * up times
/// the routing weight (1 for the shared expert), rounded to bf16.
float swiglu(float gate, float up, float limit, float weight);

/// mHC mixing coefficients of one token (`hc_mixes` + `hc_split_sinkhorn`).
struct Mixes {
  std::vector<float> pre, post, comb; ///< [hc], [hc], [hc x hc] (i, j)
};

/// From the token's hc streams (each `d` values): m = (X @ fn^T) *
/// rsqrt(mean(X^2) + normEps), then pre/post/comb with `iters` Sinkhorn
/// normalisations, all fp32 (kernel.py `hc_split_sinkhorn`).
Mixes hcMixes(const std::vector<const float *> &streams, int64_t d,
              const std::vector<float> &fn, const std::vector<float> &base,
              const std::vector<float> &scale, int64_t iters, float eps,
              float normEps);

/// `hc_pre`: out = bf16(sum_i pre[i] * X_i).
void hcPre(const std::vector<const float *> &streams, const float *pre,
           int64_t d, float *out);

/// `hc_post`: out_j = bf16(post_j * update + sum_i comb[i][j] * X_i).
void hcUpdate(const std::vector<const float *> &streams, const float *update,
              const Mixes &mixes, int64_t d, const std::vector<float *> &out);

} // namespace csa::reference

#endif // CSA_MODELS_REFERENCE_KERNELS_H

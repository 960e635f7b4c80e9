//===- Kernels.cpp - Plain C++ kernels of the reference forward -----------===//
#include "models/reference/Kernels.h"

#include "runtime/numerics/Numerics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <thread>

namespace csa::reference {

namespace nx = csa::numerics;

uint16_t loadU16(const uint8_t *base, int64_t i) {
  uint16_t v;
  std::memcpy(&v, base + 2 * i, sizeof v);
  return v;
}

float loadF32(const uint8_t *base, int64_t i) {
  float v;
  std::memcpy(&v, base + 4 * i, sizeof v);
  return v;
}

float bf16(float x) { return nx::roundToBf16(x); }

void roundBf16(std::vector<float> &v) {
  for (float &x : v)
    x = bf16(x);
}
void roundBf16(Mat &m) { roundBf16(m.v); }

void parallelFor(int64_t n,
                 const std::function<void(int64_t, int64_t)> &body) {
  int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  threads = std::min<int64_t>(threads, n);
  if (threads <= 1 || n < 64) {
    body(0, n);
    return;
  }
  std::vector<std::thread> pool;
  int64_t chunk = (n + threads - 1) / threads;
  for (int64_t t = 0; t < threads; ++t) {
    int64_t begin = t * chunk, end = std::min(n, begin + chunk);
    if (begin < end)
      pool.emplace_back(body, begin, end);
  }
  for (std::thread &th : pool)
    th.join();
}

void Weight::dequantizeRow(int64_t r, float *out) const {
  switch (kind) {
  case WeightKind::BF16:
  case WeightKind::F32:
    if (storedF32) {
      std::memcpy(out, data + 4 * r * cols, size_t(4 * cols));
    } else {
      for (int64_t c = 0; c < cols; ++c)
        out[c] = nx::bf16ToFloat(loadU16(data, r * cols + c));
    }
    return;
  case WeightKind::FP8: {
    const uint8_t *codes = data + r * cols;
    const int64_t scaleCols = (cols + 31) / 32;
    const uint8_t *scales = scale + (r / 32) * scaleCols;
    for (int64_t c = 0; c < cols; ++c)
      out[c] = nx::decodeE4M3(codes[c]) * nx::decodeUe8m0(scales[c / 32]);
    return;
  }
  case WeightKind::FP4: {
    const uint8_t *packed = data + r * (cols / 2);
    const uint8_t *scales = scale + r * (cols / 32);
    for (int64_t c = 0; c < cols; c += 2) {
      float s = nx::decodeUe8m0(scales[c / 32]);
      out[c] = nx::decodeE2M1(nx::lowE2M1(packed[c / 2])) * s;
      out[c + 1] = nx::decodeE2M1(nx::highE2M1(packed[c / 2])) * s;
    }
    return;
  }
  }
}

void fp8QuantDequant(float *x, int64_t n) {
  nx::actQuantInplace(x, size_t(n), 32, nx::Fp8ScaleFormat::Ue8m0);
}

void fp4QuantDequantUe8m0(float *x, int64_t n) {
  nx::fp4ActQuantInplace(x, size_t(n), 32, nx::Fp4ScaleFormat::Ue8m0);
}

/// Eight fp32 lanes (GCC/Clang vector extension): one per activation row.
typedef float Lanes __attribute__((vector_size(32)));

Mat linear(const Mat &x, const Weight &w) {
  const int64_t m = x.rows, k = x.cols, n = w.rows;
  Mat y(m, n);
  const bool quantized = w.kind == WeightKind::FP8 || w.kind == WeightKind::FP4;
  // act_quant(x, 32, ue8m0): the dequantized activation is exact in fp32.
  Mat xq = x;
  if (quantized)
    for (int64_t r = 0; r < m; ++r)
      fp8QuantDequant(xq.row(r), k);
  // fp8_gemm / fp4_gemm add an fp32 partial per 32-block of K (the block
  // products are exact). The plain GEMMs' order is unspecified upstream
  // (cuBLAS); csa gives them the same order (semantics.md), so a GPU can
  // compute the 32-block partials in parallel and still match bit for bit.
  const int64_t block = kLinearBlock;
  if (m < 4) {
    // Few rows (decode): one pass per row, no transposition.
    parallelFor(n, [&](int64_t begin, int64_t end) {
      std::vector<float> wrow(static_cast<size_t>(k));
      for (int64_t j = begin; j < end; ++j) {
        w.dequantizeRow(j, wrow.data());
        for (int64_t r = 0; r < m; ++r) {
          const float *a = xq.row(r);
          float acc = 0.f;
          for (int64_t kb = 0; kb < k; kb += block) {
            float partial = 0.f;
            for (int64_t c = kb; c < std::min(k, kb + block); ++c)
              partial += a[c] * wrow[size_t(c)];
            acc += partial;
          }
          y.at(r, j) = w.kind == WeightKind::F32 ? acc : bf16(acc);
        }
      }
    });
    return y;
  }
  // Rows are processed in groups of kLanes, transposed so that the compiler
  // vectorizes across rows; each row still sums its products in K order, so
  // the result does not depend on the grouping.
  constexpr int64_t kLanes = 8;
  const int64_t groups = (m + kLanes - 1) / kLanes;
  std::vector<float> xt(static_cast<size_t>(groups * k * kLanes), 0.f);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c)
      xt[size_t(((r / kLanes) * k + c) * kLanes + r % kLanes)] = xq.at(r, c);
  parallelFor(n, [&](int64_t begin, int64_t end) {
    std::vector<float> wrow(static_cast<size_t>(k));
    for (int64_t j = begin; j < end; ++j) {
      w.dequantizeRow(j, wrow.data());
      for (int64_t g = 0; g < groups; ++g) {
        const float *a = &xt[size_t(g * k * kLanes)];
        Lanes acc = {};
        for (int64_t kb = 0; kb < k; kb += block) {
          Lanes partial = {};
          const int64_t kEnd = std::min(k, kb + block);
          for (int64_t c = kb; c < kEnd; ++c) {
            Lanes ac;
            std::memcpy(&ac, a + c * kLanes, sizeof ac);
            partial += ac * wrow[size_t(c)];
          }
          acc += partial;
        }
        for (int64_t l = 0; l < kLanes && g * kLanes + l < m; ++l)
          y.at(g * kLanes + l, j) =
              w.kind == WeightKind::F32 ? acc[l] : bf16(acc[l]);
      }
    }
  });
  return y;
}

Mat rmsNorm(const Mat &x, const std::vector<float> &weight, double eps) {
  Mat y(x.rows, x.cols);
  for (int64_t r = 0; r < x.rows; ++r) {
    const float *a = x.row(r);
    float sum = 0.f;
    for (int64_t c = 0; c < x.cols; ++c)
      sum += a[c] * a[c];
    float var = sum / float(x.cols);
    float inv = 1.0f / std::sqrt(var + float(eps));
    for (int64_t c = 0; c < x.cols; ++c)
      y.at(r, c) = bf16(weight[size_t(c)] * (a[c] * inv));
  }
  return y;
}

RopeTable::RopeTable(int64_t dim, double theta, int64_t originalSeqLen,
                     double factor, double betaFast, double betaSlow)
    : dim(dim), freqs(size_t(dim / 2)) {
  for (int64_t i = 0; i < dim / 2; ++i) {
    float exponent = float(2 * i) / float(dim);
    freqs[size_t(i)] = 1.0f / std::pow(float(theta), exponent);
  }
  if (originalSeqLen > 0) {
    auto correctedDim = [&](double rotations) {
      return double(dim) *
             std::log(double(originalSeqLen) / (rotations * 2 * M_PI)) /
             (2 * std::log(theta));
    };
    double low = std::max(std::floor(correctedDim(betaFast)), 0.0);
    double high = std::min(std::ceil(correctedDim(betaSlow)), double(dim - 1));
    float span = float(std::max(high - low, 1e-3));
    for (int64_t i = 0; i < dim / 2; ++i) {
      float ramp = std::clamp((float(i) - float(low)) / span, 0.f, 1.f);
      float smooth = 1.f - ramp;
      float f = freqs[size_t(i)];
      freqs[size_t(i)] = f / float(factor) * (1.f - smooth) + f * smooth;
    }
  }
}

void RopeTable::apply(float *x, int64_t width, int64_t position,
                      bool inverse) const {
  float *tail = x + (width - dim);
  for (int64_t i = 0; i < dim / 2; ++i) {
    float angle = float(position) * freqs[size_t(i)];
    float c, s;
    numerics::sincos32(angle, s, c);
    if (inverse)
      s = -s;
    float a = tail[2 * i], b = tail[2 * i + 1];
    tail[2 * i] = bf16(a * c - b * s);
    tail[2 * i + 1] = bf16(a * s + b * c);
  }
}

std::vector<int64_t> topkIndices(const std::vector<float> &scores, int64_t k) {
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  k = std::min<int64_t>(k, int64_t(order.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t a, int64_t b) {
                      if (scores[size_t(a)] != scores[size_t(b)])
                        return scores[size_t(a)] > scores[size_t(b)];
                      return a < b;
                    });
  order.resize(size_t(k));
  return order;
}

std::vector<char> selectCandidateBlocks(const std::vector<float> &scores,
                                        int64_t compressLen, int64_t topBlocks,
                                        int64_t blockSize) {
  const float negInf = -std::numeric_limits<float>::infinity();
  const int64_t width = int64_t(scores.size());
  const int64_t numBlocks = (width + blockSize - 1) / blockSize;
  std::vector<float> blockScore(size_t(numBlocks), negInf);
  for (int64_t t = 0; t < width; ++t)
    blockScore[size_t(t / blockSize)] =
        std::max(blockScore[size_t(t / blockSize)], scores[size_t(t)]);
  // The newest block is only partly filled: pin it in.
  if (compressLen >= 1)
    blockScore[size_t((compressLen - 1) / blockSize)] =
        std::numeric_limits<float>::infinity();
  std::vector<int64_t> top = topkIndices(blockScore, topBlocks);
  std::vector<char> keep(size_t(width), 0);
  for (int64_t b : top) {
    if (blockScore[size_t(b)] == negInf)
      continue; // fewer reachable blocks than picks
    for (int64_t t = b * blockSize; t < std::min(width, (b + 1) * blockSize);
         ++t)
      keep[size_t(t)] = 1;
  }
  return keep;
}

float indexScore(const float *q, const float *key, const float *w,
                 int64_t heads, int64_t dim) {
  float sum = 0.f;
  for (int64_t h = 0; h < heads; ++h) {
    const float *qh = q + h * dim;
    float dot = 0.f;
    for (int64_t e = 0; e < dim; ++e)
      dot += qh[e] * key[e];
    sum += bf16(std::max(bf16(dot), 0.f) * w[h]);
  }
  return bf16(sum);
}

void sparseAttentionHead(const float *q, const Mat &rows,
                         const std::vector<int32_t> &idx, float sink,
                         float scale, float *out) {
  const float negInf = -std::numeric_limits<float>::infinity();
  const int64_t hd = rows.cols;
  std::vector<float> acc(static_cast<size_t>(hd), 0.f);
  float maxScore = -1e30f, sumExp = 0.f;
  for (size_t b = 0; b < idx.size(); b += 64) {
    const size_t blockEnd = std::min(idx.size(), b + 64);
    std::vector<float> sc(blockEnd - b, negInf);
    float blockMax = negInf;
    for (size_t k = b; k < blockEnd; ++k) {
      if (idx[k] < 0)
        continue;
      const float *row = rows.row(idx[k]);
      float dot = 0.f;
      for (int64_t e = 0; e < hd; ++e)
        dot += q[e] * row[e];
      sc[k - b] = dot * scale;
      blockMax = std::max(blockMax, sc[k - b]);
    }
    const float prevMax = maxScore;
    maxScore = std::max(prevMax, blockMax);
    const float rescale = numerics::exp32(prevMax - maxScore);
    float blockSum = 0.f;
    for (float &v : acc)
      v *= rescale;
    for (size_t k = b; k < blockEnd; ++k) {
      const float p = numerics::exp32(sc[k - b] - maxScore);
      blockSum += p;
      if (idx[k] < 0)
        continue;
      const float pb = bf16(p);
      const float *row = rows.row(idx[k]);
      for (int64_t e = 0; e < hd; ++e)
        acc[size_t(e)] += pb * row[e];
    }
    sumExp = sumExp * rescale + blockSum;
  }
  sumExp += numerics::exp32(sink - maxScore);
  for (int64_t e = 0; e < hd; ++e)
    out[e] = bf16(acc[size_t(e)] / sumExp);
}

void routeToken(const float *logits, const std::vector<float> &bias, int64_t k,
                float routeScale, std::vector<int64_t> &ids,
                std::vector<float> &weights) {
  const int64_t experts = int64_t(bias.size());
  std::vector<float> s(static_cast<size_t>(experts)), biased(s.size());
  for (int64_t e = 0; e < experts; ++e) {
    float z = logits[e];
    float sp = z > 20.f ? z : numerics::log1p32(numerics::exp32(z)); // F.softplus
    s[size_t(e)] = std::sqrt(sp);
    biased[size_t(e)] = s[size_t(e)] + bias[size_t(e)];
  }
  ids = topkIndices(biased, k);
  weights.clear();
  float sum = 0.f;
  for (int64_t e : ids) {
    weights.push_back(s[size_t(e)]);
    sum += s[size_t(e)];
  }
  for (float &w : weights) {
    if (k > 1)
      w /= sum + 1e-20f; // not norm_eps: as in training
    w *= routeScale;
  }
}

float swiglu(float gate, float up, float limit, float weight) {
  if (limit > 0) {
    up = std::clamp(up, -limit, limit);
    gate = std::min(gate, limit);
  }
  float v = gate * (1.f / (1.f + numerics::exp32(-gate))) * up;
  v *= weight;
  return bf16(v);
}

void engramGate(float *h, const float *key, const float *value,
                const float *qWeight, const float *kWeight, int64_t d,
                float eps) {
  float hh = 0.f, kk = 0.f, dot = 0.f;
  for (int64_t e = 0; e < d; ++e) {
    hh += h[e] * h[e];
    kk += key[e] * key[e];
    float weight = qWeight[e] * kWeight[e];
    dot += h[e] * weight * key[e];
  }
  const float rstd = (1.f / std::sqrt(hh / float(d) + eps)) *
                     (1.f / std::sqrt(kk / float(d) + eps));
  dot = dot * rstd * float(std::pow(double(d), -0.5));
  const float signedRoot =
      std::copysign(std::sqrt(std::max(std::fabs(dot), 1e-6f)), dot);
  const float gate = 1.f / (1.f + numerics::exp32(-signedRoot));
  for (int64_t e = 0; e < d; ++e)
    h[e] = bf16(h[e] + gate * value[e]);
}

void poolGroup(const float *kv, const float *score, int64_t ratio, int64_t dim,
               float *out) {
  for (int64_t ch = 0; ch < dim; ++ch) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < ratio; ++t)
      mx = std::max(mx, score[t * dim + ch]);
    float denom = 0.f;
    for (int64_t t = 0; t < ratio; ++t)
      denom += numerics::exp32(score[t * dim + ch] - mx);
    float acc = 0.f;
    for (int64_t t = 0; t < ratio; ++t)
      acc += kv[t * dim + ch] * (numerics::exp32(score[t * dim + ch] - mx) / denom);
    out[ch] = acc;
  }
}

namespace {
float sigmoidF(float x) { return 1.f / (1.f + numerics::exp32(-x)); }
} // namespace

//===----------------------------------------------------------------------===//
// mHC
//===----------------------------------------------------------------------===//

Mixes hcMixes(const std::vector<const float *> &streams, int64_t d,
              const std::vector<float> &fn, const std::vector<float> &base,
              const std::vector<float> &scale, int64_t iters, float eps,
              float normEps) {
  const int64_t hc = int64_t(streams.size()), width = hc * d,
                mix = (2 + hc) * hc;
  float sq = 0.f;
  for (int64_t i = 0; i < hc; ++i)
    for (int64_t e = 0; e < d; ++e)
      sq += streams[size_t(i)][e] * streams[size_t(i)][e];
  const float rsqrt = 1.f / std::sqrt(sq / float(width) + normEps);
  std::vector<float> m(static_cast<size_t>(mix));
  for (int64_t k = 0; k < mix; ++k) {
    const float *row = fn.data() + k * width;
    float acc = 0.f;
    for (int64_t i = 0; i < hc; ++i)
      for (int64_t e = 0; e < d; ++e)
        acc += streams[size_t(i)][e] * row[i * d + e];
    m[size_t(k)] = acc * rsqrt;
  }
  Mixes out;
  for (int64_t i = 0; i < hc; ++i) {
    out.pre.push_back(sigmoidF(m[size_t(i)] * scale[0] + base[size_t(i)]) + eps);
    out.post.push_back(
        2.f * sigmoidF(m[size_t(hc + i)] * scale[1] + base[size_t(hc + i)]));
  }
  std::vector<float> comb(static_cast<size_t>(hc * hc));
  for (int64_t k = 0; k < hc * hc; ++k)
    comb[size_t(k)] = m[size_t(2 * hc + k)] * scale[2] + base[size_t(2 * hc + k)];
  auto rowNormalize = [&](bool softmax) {
    for (int64_t i = 0; i < hc; ++i) {
      float *row = &comb[size_t(i * hc)];
      if (softmax) {
        float mx = *std::max_element(row, row + hc);
        for (int64_t j = 0; j < hc; ++j)
          row[j] = numerics::exp32(row[j] - mx);
      }
      float sum = 0.f;
      for (int64_t j = 0; j < hc; ++j)
        sum += row[j];
      for (int64_t j = 0; j < hc; ++j)
        row[j] = softmax ? row[j] / sum + eps : row[j] / (sum + eps);
    }
  };
  auto colNormalize = [&]() {
    for (int64_t j = 0; j < hc; ++j) {
      float sum = 0.f;
      for (int64_t i = 0; i < hc; ++i)
        sum += comb[size_t(i * hc + j)];
      for (int64_t i = 0; i < hc; ++i)
        comb[size_t(i * hc + j)] /= sum + eps;
    }
  };
  rowNormalize(/*softmax=*/true);
  colNormalize();
  for (int64_t it = 0; it + 1 < iters; ++it) {
    rowNormalize(false);
    colNormalize();
  }
  out.comb = std::move(comb);
  return out;
}

void hcPre(const std::vector<const float *> &streams, const float *pre,
           int64_t d, float *out) {
  for (int64_t e = 0; e < d; ++e) {
    float acc = 0.f;
    for (size_t i = 0; i < streams.size(); ++i)
      acc += pre[i] * streams[i][e];
    out[e] = bf16(acc);
  }
}

void hcUpdate(const std::vector<const float *> &streams, const float *update,
              const Mixes &mixes, int64_t d, const std::vector<float *> &out) {
  const int64_t hc = int64_t(streams.size());
  for (int64_t j = 0; j < hc; ++j)
    for (int64_t e = 0; e < d; ++e) {
      float acc = mixes.post[size_t(j)] * update[e];
      float mixSum = 0.f;
      for (int64_t src = 0; src < hc; ++src)
        mixSum += mixes.comb[size_t(src * hc + j)] * streams[size_t(src)][e];
      out[size_t(j)][e] = bf16(acc + mixSum);
    }
}

} // namespace csa::reference

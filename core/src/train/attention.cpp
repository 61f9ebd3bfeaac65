// Attention forward (saving the log-sum-exp) and backward under the rank rule, tile by tile.
#include "masque/train/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "masque/error.hpp"
#include "masque/threading.hpp"
#include "masque/train/grad_ops.hpp"
#include "numerics/attention_rule.hpp"
#include "numerics/parallel.hpp"
#include "numerics/simd.hpp"

namespace masque::train {

namespace {

using numerics::fast_exp;

constexpr std::int32_t kTileRows = 128;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Problem {
  AttentionDims dims;
  MaskView mask;
  SeqView q, k, v;
  std::int32_t group;  // query heads per kv head
  AttentionDropout dropout;

  const float* q_at(std::int32_t b, std::int32_t i, std::int32_t h) const {
    return q.data + b * q.batch_stride + i * q.token_stride + std::int64_t{h} * dims.head_dim;
  }
  const float* k_at(std::int32_t b, std::int32_t j, std::int32_t h) const {
    return k.row(b) + j * k.token_stride + std::int64_t{h / group} * dims.head_dim;
  }
  const float* v_at(std::int32_t b, std::int32_t j, std::int32_t h) const {
    return v.row(b) + j * v.token_stride + std::int64_t{h / group} * dims.head_dim;
  }
  float* lse_at(float* lse, std::int32_t b, std::int32_t h, std::int32_t i) const {
    return lse + (std::int64_t{b} * dims.heads + h) * mask.q_len + i;
  }
};

template <typename View>
auto at(View s, std::int32_t b, std::int32_t i, std::int32_t h, std::int32_t d) {
  return s.data + b * s.batch_stride + i * s.token_stride + std::int64_t{h} * d;
}

using numerics::key_span;
using numerics::mask_row;
using numerics::real_queries;

// Softmax of one masked row in place; returns its log-sum-exp (-inf, and zeros, when no entry
// is allowed).
MASQUE_VECTORIZE float softmax_row(float* s, std::int32_t n) {
  const float mx = numerics::max_of(s, n);
  if (mx == kNegInf) {
    std::fill(s, s + n, 0.0f);
    return kNegInf;
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::int32_t j = 0; j < n; ++j) {
    const float e = fast_exp(s[j] - mx);
    s[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (std::int32_t j = 0; j < n; ++j) s[j] *= inv;
  return mx + std::log(sum);
}

// p = exp(s - lse) for an allowed entry (masked entries are -inf and give 0).
MASQUE_VECTORIZE void probs_row(float* s, std::int32_t n, float lse) {
  if (lse == kNegInf) {
    std::fill(s, s + n, 0.0f);
    return;
  }
#pragma omp simd
  for (std::int32_t j = 0; j < n; ++j) s[j] = fast_exp(s[j] - lse);
}

// ds = p * (dp - delta), in place in dp.
MASQUE_VECTORIZE void score_grad_row(const float* __restrict p, float* __restrict dp,
                                     std::int32_t n, float delta) {
#pragma omp simd
  for (std::int32_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);
}

MASQUE_VECTORIZE float dot(const float* __restrict a, const float* __restrict b, std::int32_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::int32_t c = 0; c < n; ++c) sum += a[c] * b[c];
  return sum;
}

void sgemm(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
           std::int64_t ldc) {
  if (dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) != dnnl_success)
    throw RuntimeError("train attention: oneDNN sgemm failed");
}

// The scaled, masked scores of queries [i0, i0 + rows) of head h over keys [j0, j0 + n).
void scores(const Problem& p, std::int32_t b, std::int32_t h, std::int32_t i0, std::int32_t rows,
            std::int32_t j0, std::int32_t n, float* s) {
  sgemm('N', 'T', rows, n, p.dims.head_dim, p.dims.scale, p.q_at(b, i0, h), p.q.token_stride,
        p.k_at(b, j0, h), p.k.token_stride, 0.0f, s, n);
  for (std::int32_t r = 0; r < rows; ++r)
    mask_row(p.mask, b, i0 + r, j0, n, s + std::int64_t{r} * n);
}

struct Tile {
  std::int32_t b, h, i0, rows;
};

// The dropout factors (0 or 1 / (1 - p)) of query t.i0 + r of the tile over keys [j0, j0 + n).
void dropout_row_factors(const Problem& p, const Tile& t, std::int32_t r, std::int32_t j0,
                         std::int32_t n, float* factors) {
  const AttentionDropout& d = p.dropout;
  dropout_factors(dropout_key(*d.context, static_cast<std::size_t>(t.b), d.site), d.p,
                  attention_element(t.h, t.i0 + r, j0), n, factors);
}

MASQUE_VECTORIZE void scale_row(float* __restrict s, const float* __restrict f, std::int32_t n) {
#pragma omp simd
  for (std::int32_t j = 0; j < n; ++j) s[j] *= f[j];
}

// With dropout factors f: ds = p (f dp - delta), in place in dp; then p *= f (what dV needs).
MASQUE_VECTORIZE void dropped_score_grad_row(float* __restrict p, float* __restrict dp,
                                             const float* __restrict f, std::int32_t n,
                                             float delta) {
#pragma omp simd
  for (std::int32_t j = 0; j < n; ++j) {
    dp[j] = p[j] * (f[j] * dp[j] - delta);
    p[j] *= f[j];
  }
}

void forward_tile(const Problem& p, const Tile& t, MutableSeqView out, float* lse,
                  std::vector<float>& work) {
  const std::int32_t d = p.dims.head_dim;
  const auto [j0, j1] = key_span(p.mask, t.b, t.i0, t.i0 + t.rows);
  const std::int32_t n = j1 - j0;
  if (n == 0) {
    for (std::int32_t r = 0; r < t.rows; ++r) {
      float* o = at(out, t.b, t.i0 + r, t.h, d);
      std::fill(o, o + d, 0.0f);
      *p.lse_at(lse, t.b, t.h, t.i0 + r) = kNegInf;
    }
    return;
  }
  const bool drop = p.dropout.active();
  work.resize(static_cast<std::size_t>(t.rows + (drop ? 1 : 0)) * n);
  float* s = work.data();
  scores(p, t.b, t.h, t.i0, t.rows, j0, n, s);
  for (std::int32_t r = 0; r < t.rows; ++r)
    *p.lse_at(lse, t.b, t.h, t.i0 + r) = softmax_row(s + std::int64_t{r} * n, n);
  if (drop) {
    float* factors = s + std::int64_t{t.rows} * n;
    for (std::int32_t r = 0; r < t.rows; ++r) {
      dropout_row_factors(p, t, r, j0, n, factors);
      scale_row(s + std::int64_t{r} * n, factors, n);
    }
  }
  sgemm('N', 'N', t.rows, d, n, 1.0f, s, n, p.v_at(t.b, j0, t.h), p.v.token_stride, 0.0f,
        at(out, t.b, t.i0, t.h, d), out.token_stride);
}

struct Grads {
  SeqView out, dout;
  const float* lse;
  MutableSeqView dq, dk, dv;
};

// One query tile of head h: dq written, dk and dv of the span accumulated.
void backward_tile(const Problem& p, const Grads& g, const Tile& t, std::vector<float>& work) {
  const std::int32_t d = p.dims.head_dim;
  const auto [j0, j1] = key_span(p.mask, t.b, t.i0, t.i0 + t.rows);
  const std::int32_t n = j1 - j0;
  if (n == 0) {
    for (std::int32_t r = 0; r < t.rows; ++r) {
      float* dq = at(g.dq, t.b, t.i0 + r, t.h, d);
      std::fill(dq, dq + d, 0.0f);
    }
    return;
  }
  const bool drop = p.dropout.active();
  work.resize(static_cast<std::size_t>(2 * t.rows + (drop ? 1 : 0)) * n);
  float* s = work.data();
  float* dp = s + std::int64_t{t.rows} * n;
  float* factors = dp + std::int64_t{t.rows} * n;
  scores(p, t.b, t.h, t.i0, t.rows, j0, n, s);
  const float* lse = g.lse + (std::int64_t{t.b} * p.dims.heads + t.h) * p.mask.q_len + t.i0;
  for (std::int32_t r = 0; r < t.rows; ++r) probs_row(s + std::int64_t{r} * n, n, lse[r]);
  const float* dout = at(g.dout, t.b, t.i0, t.h, d);
  const float* kspan = p.k_at(t.b, j0, t.h);
  const float* vspan = p.v_at(t.b, j0, t.h);
  // dP = dO V^T; dS = P (dP - rowsum(dO * O)) (dP scaled by the dropout factors first, and P
  // replaced by the dropped P that dV needs).
  sgemm('N', 'T', t.rows, n, d, 1.0f, dout, g.dout.token_stride, vspan, p.v.token_stride, 0.0f, dp,
        n);
  for (std::int32_t r = 0; r < t.rows; ++r) {
    const float delta = dot(at(g.dout, t.b, t.i0 + r, t.h, d), at(g.out, t.b, t.i0 + r, t.h, d), d);
    if (drop) {
      dropout_row_factors(p, t, r, j0, n, factors);
      dropped_score_grad_row(s + std::int64_t{r} * n, dp + std::int64_t{r} * n, factors, n, delta);
    } else {
      score_grad_row(s + std::int64_t{r} * n, dp + std::int64_t{r} * n, n, delta);
    }
  }
  const std::int32_t kv = t.h / p.group;
  // dQ = scale dS K; dK += scale dS^T Q; dV += P^T dO.
  sgemm('N', 'N', t.rows, d, n, p.dims.scale, dp, n, kspan, p.k.token_stride, 0.0f,
        at(g.dq, t.b, t.i0, t.h, d), g.dq.token_stride);
  sgemm('T', 'N', n, d, t.rows, p.dims.scale, dp, n, p.q_at(t.b, t.i0, t.h), p.q.token_stride, 1.0f,
        at(g.dk, t.b, j0, kv, d), g.dk.token_stride);
  sgemm('T', 'N', n, d, t.rows, 1.0f, s, n, dout, g.dout.token_stride, 1.0f,
        at(g.dv, t.b, j0, kv, d), g.dv.token_stride);
}

// Everything of row b and kv head `kv`: its dk and dv (zeroed, then accumulated over the query
// heads of the group and their tiles in a fixed order) and the dq of those heads.
void backward_group(const Problem& p, const Grads& g, std::int32_t b, std::int32_t kv,
                    std::vector<float>& work) {
  const std::int32_t d = p.dims.head_dim;
  for (std::int32_t j = 0; j < p.mask.k_len; ++j) {
    std::fill_n(at(g.dk, b, j, kv, d), d, 0.0f);
    std::fill_n(at(g.dv, b, j, kv, d), d, 0.0f);
  }
  const std::int32_t q_len = real_queries(p.mask, b);
  for (std::int32_t h = kv * p.group; h < (kv + 1) * p.group; ++h) {
    for (std::int32_t i0 = 0; i0 < q_len; i0 += kTileRows)
      backward_tile(p, g, {b, h, i0, std::min(kTileRows, q_len - i0)}, work);
    for (std::int32_t i = q_len; i < p.mask.q_len; ++i) std::fill_n(at(g.dq, b, i, h, d), d, 0.0f);
  }
}

void validate(const AttentionDims& dims, const MaskView& m, SeqView q, SeqView k, SeqView v) {
  if (dims.heads <= 0 || dims.kv_heads <= 0 || dims.head_dim <= 0 || dims.heads % dims.kv_heads)
    throw RuntimeError("train attention: " + std::to_string(dims.heads) +
                       " query heads cannot share " + std::to_string(dims.kv_heads) +
                       " kv heads (head_dim " + std::to_string(dims.head_dim) + ")");
  if (m.batch < 0 || m.q_len < 0 || m.k_len < 0)
    throw RuntimeError("train attention: negative mask dimensions");
  if (m.batch == 0 || m.q_len == 0) return;
  if (!m.key_role || (m.query_role && !m.dense && (!m.key_rank || !m.query_rank)))
    throw RuntimeError("train attention: the mask view lacks key or query arrays");
  if (!q.data || (m.k_len > 0 && (!k.data || !v.data)))
    throw RuntimeError("train attention: no queries, keys or values");
}

void validate_dropout(const MaskView& m, const AttentionDropout* d) {
  if (!d || !d->active()) return;
  if (m.q_len > 65536 || m.k_len > 65536)
    throw RuntimeError("train attention: dropout numbers queries and keys below 65536, got " +
                       std::to_string(m.q_len) + " x " + std::to_string(m.k_len));
  if (d->context->records.size() < static_cast<std::size_t>(m.batch))
    throw RuntimeError("train attention: dropout has record keys for " +
                       std::to_string(d->context->records.size()) + " of " +
                       std::to_string(m.batch) + " batch rows");
}

// Runs body(task) for tasks [0, count) on the calling thread's intra-op threads; sgemm inside
// a task always runs on one thread, so results do not depend on the thread count.
template <typename Body>
void run_tasks(std::int64_t count, double flops, Body body) {
  const int threads = static_cast<int>(
      std::min<std::int64_t>(numerics::threads_for(flops), std::max<std::int64_t>(count, 1)));
  if (threads <= 1) {
    ThreadScope one(1);
    std::vector<float> work;
    for (std::int64_t i = 0; i < count; ++i) body(i, work);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> work;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < count; ++i) body(i, work);
  }
}

}  // namespace

void attention_forward(const AttentionDims& dims, const MaskView& mask, SeqView q, SeqView k,
                       SeqView v, MutableSeqView out, float* lse, const AttentionDropout* dropout) {
  validate(dims, mask, q, k, v);
  validate_dropout(mask, dropout);
  if (mask.batch == 0 || mask.q_len == 0) return;
  if (!out.data || !lse) throw RuntimeError("train attention: no output or lse buffer");
  const Problem p{
      dims, mask, q, k, v, dims.heads / dims.kv_heads, dropout ? *dropout : AttentionDropout{}};
  const std::int32_t d = dims.head_dim;
  std::vector<Tile> tiles;
  for (std::int32_t b = 0; b < mask.batch; ++b) {
    const std::int32_t q_len = real_queries(mask, b);
    for (std::int32_t h = 0; h < dims.heads; ++h) {
      for (std::int32_t i0 = 0; i0 < q_len; i0 += kTileRows)
        tiles.push_back({b, h, i0, std::min(kTileRows, q_len - i0)});
      for (std::int32_t i = q_len; i < mask.q_len; ++i) {
        std::fill_n(at(out, b, i, h, d), d, 0.0f);
        *p.lse_at(lse, b, h, i) = kNegInf;
      }
    }
  }
  const double flops = 4.0 * mask.batch * mask.q_len * mask.k_len * dims.heads * d;
  run_tasks(
      static_cast<std::int64_t>(tiles.size()), flops,
      [&](std::int64_t i, std::vector<float>& work) { forward_tile(p, tiles[i], out, lse, work); });
}

void attention_backward(const AttentionDims& dims, const MaskView& mask, SeqView q, SeqView k,
                        SeqView v, SeqView out, SeqView dout, const float* lse, MutableSeqView dq,
                        MutableSeqView dk, MutableSeqView dv, const AttentionDropout* dropout) {
  validate(dims, mask, q, k, v);
  validate_dropout(mask, dropout);
  if (mask.batch == 0) return;
  if (!out.data || !dout.data || !lse || !dq.data || (mask.k_len > 0 && (!dk.data || !dv.data)))
    throw RuntimeError("train attention: missing out, dout, lse or gradient buffers");
  const Problem p{
      dims, mask, q, k, v, dims.heads / dims.kv_heads, dropout ? *dropout : AttentionDropout{}};
  const Grads g{out, dout, lse, dq, dk, dv};
  const std::int64_t count = std::int64_t{mask.batch} * dims.kv_heads;
  const double flops = 10.0 * mask.batch * mask.q_len * mask.k_len * dims.heads * dims.head_dim;
  run_tasks(count, flops, [&](std::int64_t task, std::vector<float>& work) {
    backward_group(p, g, static_cast<std::int32_t>(task / dims.kv_heads),
                   static_cast<std::int32_t>(task % dims.kv_heads), work);
  });
}

}  // namespace masque::train

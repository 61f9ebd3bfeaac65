// Scaled dot-product attention with the mask rule evaluated per (query, key).
//
// Work is cut into tiles: up to kBlockRows query rows of one head (or, for few queries per row,
// the query heads sharing one kv head: grouped-query decoding reads each key once). A tile
// computes its scores only over the span of keys some of its queries may see (causal blocks
// skip the future), applies the rule while taking the softmax, and multiplies by V. Large tiles
// use oneDNN's sgemm straight on the strided token-major data; small ones (tiny heads, decoding
// steps) use loops, where a library call would cost more than the arithmetic.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "masque/attention.hpp"
#include "masque/error.hpp"
#include "masque/threading.hpp"
#include "numerics/simd.hpp"

namespace masque {

using numerics::fast_exp;

namespace {

constexpr std::int32_t kBlockRows = 64;
// Below this many multiply-adds per tile product, loops beat an sgemm call.
constexpr std::int64_t kGemmMinWork = 8192;
// Rows per batch row below which the heads of a kv group form the tile instead of queries.
constexpr std::int32_t kGroupQueriesBelow = 8;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Tile {
  std::int32_t b = 0;
  std::int32_t head = 0;   // first query head
  std::int32_t query = 0;  // first query
  std::int32_t rows = 0;
  bool heads_as_rows = false;  // rows are heads head.. of one query; else queries of one head
};

struct Problem {
  AttentionDims dims;
  MaskView mask;
  SeqView q, k, v;
  MutableSeqView out;
  const AttentionProbs* probs;
  std::int32_t group;  // query heads per kv head

  std::int32_t query_of(const Tile& t, std::int32_t r) const {
    return t.heads_as_rows ? t.query : t.query + r;
  }
  std::int32_t head_of(const Tile& t, std::int32_t r) const {
    return t.heads_as_rows ? t.head + r : t.head;
  }
  const float* q_row(const Tile& t, std::int32_t r) const {
    return q.data + t.b * q.batch_stride + std::int64_t{query_of(t, r)} * q.token_stride +
           std::int64_t{head_of(t, r)} * dims.head_dim;
  }
  float* out_row(const Tile& t, std::int32_t r) const {
    return out.data + t.b * out.batch_stride + std::int64_t{query_of(t, r)} * out.token_stride +
           std::int64_t{head_of(t, r)} * dims.head_dim;
  }
  std::int64_t q_ld(const Tile& t) const {
    return t.heads_as_rows ? dims.head_dim : q.token_stride;
  }
  std::int64_t out_ld(const Tile& t) const {
    return t.heads_as_rows ? dims.head_dim : out.token_stride;
  }
  const float* k_base(const Tile& t) const {
    return k.data + t.b * k.batch_stride + std::int64_t{t.head / group} * dims.head_dim;
  }
  const float* v_base(const Tile& t) const {
    return v.data + t.b * v.batch_stride + std::int64_t{t.head / group} * dims.head_dim;
  }
};

bool query_is_pad(const MaskView& m, std::int32_t b, std::int32_t i) {
  return m.query_role && m.query_role[b * m.query_stride + i] == TokenRole::pad;
}

// [j0, j1): the keys any query of the tile may see (a superset is fine; the rule is applied
// per entry afterwards).
std::pair<std::int32_t, std::int32_t> key_span(const Problem& p, const Tile& t) {
  const MaskView& m = p.mask;
  const std::int32_t first = p.query_of(t, 0), last = p.query_of(t, t.rows - 1);
  const TokenRole* role = m.key_role + t.b * m.key_stride;
  std::int32_t j0 = m.k_len, j1 = 0;
  auto take = [&](std::int32_t j) {
    j0 = std::min(j0, j);
    j1 = std::max(j1, j + 1);
  };
  if (!m.query_role) {  // cross-attention: every real key
    for (std::int32_t j = 0; j < m.k_len; ++j)
      if (role[j] != TokenRole::pad) take(j);
    return {j0, std::max(j0, j1)};
  }
  if (m.dense) {
    for (std::int32_t i = first; i <= last; ++i) {
      if (query_is_pad(m, t.b, i)) continue;
      const std::uint8_t* d = m.dense + (std::int64_t{t.b} * m.q_len + i) * m.k_len;
      for (std::int32_t j = 0; j < m.k_len; ++j)
        if (d[j] && role[j] != TokenRole::pad) take(j);
    }
    return {j0, std::max(j0, j1)};
  }
  std::int32_t max_rank = std::numeric_limits<std::int32_t>::min();
  bool any = false;
  for (std::int32_t i = first; i <= last; ++i) {
    if (query_is_pad(m, t.b, i)) continue;
    any = true;
    max_rank = std::max(max_rank, m.query_rank[t.b * m.query_stride + i]);
    const std::int32_t self = i + m.self_offset;
    if (self >= 0 && self < m.k_len && role[self] != TokenRole::pad) take(self);
  }
  if (!any) return {0, 0};
  const std::int32_t* rank = m.key_rank + t.b * m.key_stride;
  for (std::int32_t j = 0; j < m.k_len; ++j)
    if (role[j] == TokenRole::content && rank[j] <= max_rank) take(j);
  return {j0, std::max(j0, j1)};
}

// Sets the disallowed scores of query i over keys [j0, j0 + n) to -inf.
MASQUE_VECTORIZE void mask_rank_row(float* __restrict s, const TokenRole* __restrict role,
                                    const std::int32_t* __restrict rank, std::int32_t n,
                                    std::int32_t query_rank, std::int32_t self) {
  for (std::int32_t j = 0; j < n; ++j) {
    const bool ok = role[j] != TokenRole::pad &&
                    ((role[j] == TokenRole::content && rank[j] <= query_rank) || j == self);
    s[j] = ok ? s[j] : kNegInf;
  }
}
MASQUE_VECTORIZE void mask_dense_row(float* __restrict s, const TokenRole* __restrict role,
                                     const std::uint8_t* __restrict dense, std::int32_t n) {
  for (std::int32_t j = 0; j < n; ++j)
    s[j] = (role[j] != TokenRole::pad && dense[j] != 0) ? s[j] : kNegInf;
}
MASQUE_VECTORIZE void mask_keys_row(float* __restrict s, const TokenRole* __restrict role,
                                    std::int32_t n) {
  for (std::int32_t j = 0; j < n; ++j) s[j] = role[j] != TokenRole::pad ? s[j] : kNegInf;
}

void mask_row(const Problem& p, const Tile& t, std::int32_t i, std::int32_t j0, std::int32_t n,
              float* s) {
  const MaskView& m = p.mask;
  const TokenRole* role = m.key_role + t.b * m.key_stride + j0;
  if (!m.query_role) return mask_keys_row(s, role, n);
  if (query_is_pad(m, t.b, i)) {
    std::fill(s, s + n, kNegInf);
    return;
  }
  if (m.dense) {
    return mask_dense_row(s, role, m.dense + (std::int64_t{t.b} * m.q_len + i) * m.k_len + j0, n);
  }
  mask_rank_row(s, role, m.key_rank + t.b * m.key_stride + j0, n,
                m.query_rank[t.b * m.query_stride + i], i + m.self_offset - j0);
}

// Softmax of one masked row in place; a row with no allowed key becomes zeros.
MASQUE_VECTORIZE void softmax_row(float* s, std::int32_t n) {
  float mx = kNegInf;
#pragma omp simd reduction(max : mx)
  for (std::int32_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
  if (mx == kNegInf) {
    for (std::int32_t j = 0; j < n; ++j) s[j] = 0.0f;
    return;
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::int32_t j = 0; j < n; ++j) {
    const float e = s[j] == kNegInf ? 0.0f : fast_exp(s[j] - mx);
    s[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (std::int32_t j = 0; j < n; ++j) s[j] *= inv;
}

MASQUE_VECTORIZE void scores_loop(const float* __restrict q, const float* __restrict k,
                                  std::int64_t ldk, std::int32_t n, std::int32_t d, float scale,
                                  float* __restrict s) {
  for (std::int32_t j = 0; j < n; ++j) {
    const float* kj = k + j * ldk;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (std::int32_t c = 0; c < d; ++c) dot += q[c] * kj[c];
    s[j] = dot * scale;
  }
}

MASQUE_VECTORIZE void weighted_sum_loop(const float* __restrict p, const float* __restrict v,
                                        std::int64_t ldv, std::int32_t n, std::int32_t d,
                                        float* __restrict o) {
  for (std::int32_t c = 0; c < d; ++c) o[c] = 0.0f;
  for (std::int32_t j = 0; j < n; ++j) {
    const float pj = p[j];
    const float* vj = v + j * ldv;
    for (std::int32_t c = 0; c < d; ++c) o[c] += pj * vj[c];
  }
}

void sgemm(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
           std::int64_t ldc) {
  if (dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc) != dnnl_success)
    throw RuntimeError("attention: oneDNN sgemm failed");
}

void write_probs(const Problem& p, const Tile& t, std::int32_t j0, std::int32_t n,
                 const float* scores) {
  const AttentionProbs* probs = p.probs;
  for (std::int32_t r = 0; r < t.rows; ++r) {
    if (p.head_of(t, r) != probs->head) continue;
    float* row = probs->data + (std::int64_t{t.b} * p.mask.q_len + p.query_of(t, r)) * p.mask.k_len;
    std::fill(row, row + p.mask.k_len, 0.0f);
    if (n > 0) std::memcpy(row + j0, scores + std::int64_t{r} * n, sizeof(float) * n);
  }
}

void run_tile(const Problem& p, const Tile& t, std::vector<float>& work) {
  const std::int32_t d = p.dims.head_dim;
  const auto [j0, j1] = key_span(p, t);
  const std::int32_t n = j1 - j0;
  if (n == 0) {  // nothing visible: zeros
    for (std::int32_t r = 0; r < t.rows; ++r) std::fill(p.out_row(t, r), p.out_row(t, r) + d, 0.0f);
    if (p.probs && p.probs->data) write_probs(p, t, 0, 0, nullptr);
    return;
  }
  work.resize(static_cast<std::size_t>(t.rows) * n);
  float* s = work.data();
  const float* k = p.k_base(t) + std::int64_t{j0} * p.k.token_stride;
  const float* v = p.v_base(t) + std::int64_t{j0} * p.v.token_stride;
  const bool gemm = std::int64_t{t.rows} * n * d >= kGemmMinWork;

  if (gemm) {
    sgemm('N', 'T', t.rows, n, d, p.dims.scale, p.q_row(t, 0), p.q_ld(t), k, p.k.token_stride, s,
          n);
  } else {
    for (std::int32_t r = 0; r < t.rows; ++r)
      scores_loop(p.q_row(t, r), k, p.k.token_stride, n, d, p.dims.scale, s + std::int64_t{r} * n);
  }
  for (std::int32_t r = 0; r < t.rows; ++r) {
    float* row = s + std::int64_t{r} * n;
    mask_row(p, t, p.query_of(t, r), j0, n, row);
    softmax_row(row, n);
  }
  if (p.probs && p.probs->data) write_probs(p, t, j0, n, s);
  if (gemm) {
    sgemm('N', 'N', t.rows, d, n, 1.0f, s, n, v, p.v.token_stride, p.out_row(t, 0), p.out_ld(t));
  } else {
    for (std::int32_t r = 0; r < t.rows; ++r)
      weighted_sum_loop(s + std::int64_t{r} * n, v, p.v.token_stride, n, d, p.out_row(t, r));
  }
}

std::vector<Tile> make_tiles(const Problem& p) {
  std::vector<Tile> tiles;
  const MaskView& m = p.mask;
  const bool group_rows = p.group > 1 && m.q_len < kGroupQueriesBelow;
  for (std::int32_t b = 0; b < m.batch; ++b) {
    if (group_rows) {
      for (std::int32_t g = 0; g < p.dims.kv_heads; ++g)
        for (std::int32_t i = 0; i < m.q_len; ++i)
          tiles.push_back({b, g * p.group, i, p.group, true});
    } else {
      for (std::int32_t h = 0; h < p.dims.heads; ++h)
        for (std::int32_t i = 0; i < m.q_len; i += kBlockRows)
          tiles.push_back({b, h, i, std::min(kBlockRows, m.q_len - i), false});
    }
  }
  return tiles;
}

void validate(const AttentionDims& dims, const MaskView& m, SeqView q, SeqView k, SeqView v,
              MutableSeqView out) {
  if (dims.heads <= 0 || dims.kv_heads <= 0 || dims.head_dim <= 0 || dims.heads % dims.kv_heads)
    throw RuntimeError("attention: " + std::to_string(dims.heads) + " query heads cannot share " +
                       std::to_string(dims.kv_heads) + " kv heads (head_dim " +
                       std::to_string(dims.head_dim) + ")");
  if (m.batch < 0 || m.q_len < 0 || m.k_len < 0)
    throw RuntimeError("attention: negative mask dimensions");
  if (m.batch == 0 || m.q_len == 0) return;
  if (!m.key_role || (m.query_role && !m.dense && (!m.key_rank || !m.query_rank)))
    throw RuntimeError("attention: the mask view lacks key or query arrays");
  if (m.k_len > 0 && (!k.data || !v.data)) throw RuntimeError("attention: no keys or values");
  if (!q.data || !out.data) throw RuntimeError("attention: no queries or output");
  const std::int64_t qw = std::int64_t{dims.heads} * dims.head_dim;
  const std::int64_t kw = std::int64_t{dims.kv_heads} * dims.head_dim;
  if ((m.q_len > 1 && (q.token_stride < qw || out.token_stride < qw)) ||
      (m.k_len > 1 && (k.token_stride < kw || v.token_stride < kw)))
    throw RuntimeError("attention: token strides are narrower than the heads");
}

}  // namespace

SeqView seq_view(const Tensor& t, std::int64_t length, std::int64_t column) {
  if (t.dtype() != DType::f32 || t.rank() < 2 || length <= 0 || column < 0 || column > t.dim(-1))
    throw RuntimeError("seq_view: expected an F32 tensor of tokens, got " + to_string(t.shape()));
  const std::int64_t width = t.dim(-1);
  return {t.f32() + column, length * width, width};
}

MutableSeqView mutable_seq_view(Tensor& t, std::int64_t length, std::int64_t column) {
  SeqView s = seq_view(t, length, column);
  return {const_cast<float*>(s.data), s.batch_stride, s.token_stride};
}

MaskView MaskView::self(const AttentionLayout& layout) {
  MaskView m;
  m.batch = layout.batch;
  m.q_len = m.k_len = layout.length;
  m.key_role = m.query_role = layout.role.data();
  m.key_rank = m.query_rank = layout.rank.data();
  m.key_stride = m.query_stride = layout.length;
  m.dense = layout.dense.empty() ? nullptr : layout.dense.data();
  return m;
}

MaskView MaskView::cross(const AttentionLayout& source, std::int32_t q_len) {
  MaskView m;
  m.batch = source.batch;
  m.q_len = q_len;
  m.k_len = source.length;
  m.key_role = source.role.data();
  m.key_rank = source.rank.data();
  m.key_stride = source.length;
  return m;
}

bool MaskView::allowed(std::int32_t b, std::int32_t i, std::int32_t j) const {
  const TokenRole kr = key_role[b * key_stride + j];
  if (kr == TokenRole::pad) return false;
  if (!query_role) return true;
  if (query_role[b * query_stride + i] == TokenRole::pad) return false;
  if (dense) return dense[(std::int64_t{b} * q_len + i) * k_len + j] != 0;
  if (j == i + self_offset) return true;
  return kr == TokenRole::content &&
         key_rank[b * key_stride + j] <= query_rank[b * query_stride + i];
}

void attention(const AttentionDims& dims, const MaskView& mask, SeqView q, SeqView k, SeqView v,
               MutableSeqView out, const AttentionProbs* probs) {
  validate(dims, mask, q, k, v, out);
  if (mask.batch == 0 || mask.q_len == 0) return;
  const Problem problem{dims, mask, q, k, v, out, probs, dims.heads / dims.kv_heads};
  const std::vector<Tile> tiles = make_tiles(problem);
  const int threads = std::min<int>(thread_count(), static_cast<int>(tiles.size()));
  if (threads <= 1) {
    std::vector<float> work;
    for (const Tile& t : tiles) run_tile(problem, t, work);
    return;
  }
  const auto count = static_cast<std::int64_t>(tiles.size());
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> work;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < count; ++i) run_tile(problem, tiles[i], work);
  }
}

void self_attention(const AttentionDims& dims, const AttentionLayout& layout, const Tensor& q,
                    const Tensor& k, const Tensor& v, Tensor& out) {
  const std::int64_t tokens = std::int64_t{layout.batch} * layout.length;
  const std::int64_t qw = std::int64_t{dims.heads} * dims.head_dim;
  const std::int64_t kw = std::int64_t{dims.kv_heads} * dims.head_dim;
  if (q.numel() != tokens * qw || k.numel() != tokens * kw || v.numel() != tokens * kw)
    throw RuntimeError("self_attention: q " + to_string(q.shape()) + ", k " + to_string(k.shape()) +
                       ", v " + to_string(v.shape()) + " do not fit a " +
                       std::to_string(layout.batch) + " x " + std::to_string(layout.length) +
                       " batch");
  if (tokens == 0) return;
  if (out.dtype() != DType::f32)
    out = Tensor({tokens, qw});
  else
    out.resize({tokens, qw});
  attention(dims, MaskView::self(layout), seq_view(q, layout.length), seq_view(k, layout.length),
            seq_view(v, layout.length), mutable_seq_view(out, layout.length));
}

void cross_attention(const AttentionDims& dims, const AttentionLayout& source, const Tensor& q,
                     std::int32_t q_len, const Tensor& k, const Tensor& v, Tensor& out) {
  const std::int64_t queries = std::int64_t{source.batch} * q_len;
  const std::int64_t keys = std::int64_t{source.batch} * source.length;
  const std::int64_t qw = std::int64_t{dims.heads} * dims.head_dim;
  const std::int64_t kw = std::int64_t{dims.kv_heads} * dims.head_dim;
  if (q.numel() != queries * qw || k.numel() != keys * kw || v.numel() != keys * kw)
    throw RuntimeError("cross_attention: q " + to_string(q.shape()) + ", k " +
                       to_string(k.shape()) + ", v " + to_string(v.shape()) + " do not fit " +
                       std::to_string(source.batch) + " rows of " + std::to_string(q_len) +
                       " queries and " + std::to_string(source.length) + " keys");
  if (queries == 0) return;
  if (out.dtype() != DType::f32)
    out = Tensor({queries, qw});
  else
    out.resize({queries, qw});
  if (keys == 0) {
    std::fill(out.f32(), out.f32() + out.numel(), 0.0f);
    return;
  }
  attention(dims, MaskView::cross(source, q_len), seq_view(q, q_len), seq_view(k, source.length),
            seq_view(v, source.length), mutable_seq_view(out, q_len));
}

}  // namespace masque

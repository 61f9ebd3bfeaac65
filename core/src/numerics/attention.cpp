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
#include "masque/ops.hpp"
#include "masque/threading.hpp"
#include "numerics/attention_rule.hpp"
#include "numerics/parallel.hpp"
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
    return k.row(t.b) + std::int64_t{t.head / group} * dims.head_dim;
  }
  const float* v_base(const Tile& t) const {
    return v.row(t.b) + std::int64_t{t.head / group} * dims.head_dim;
  }
};

using numerics::query_is_pad;
// Tiles never reach past a row's last real query, so a row is computed the same way alone or
// padded in any batch (results independent of the batch).
using numerics::real_queries;

// [j0, j1): the keys any query of the tile may see.
std::pair<std::int32_t, std::int32_t> key_span(const Problem& p, const Tile& t) {
  return numerics::key_span(p.mask, t.b, p.query_of(t, 0), p.query_of(t, t.rows - 1) + 1);
}

void mask_row(const Problem& p, const Tile& t, std::int32_t i, std::int32_t j0, std::int32_t n,
              float* s) {
  numerics::mask_row(p.mask, t.b, i, j0, n, s);
}

// s[c] += the position bias of the tile's row r for key column cols[c] (or j0 + c).
void add_bias_row(const Problem& p, const Tile& t, std::int32_t r, std::int32_t j0,
                  const std::vector<std::int32_t>* cols, std::int32_t n, float* s) {
  const PositionBias& bias = *p.mask.bias;
  const std::int32_t head = p.head_of(t, r);
  const std::int32_t query = p.query_of(t, r) + p.mask.self_offset;
  for (std::int32_t c = 0; c < n; ++c) s[c] += bias.value(head, query, cols ? (*cols)[c] : j0 + c);
}

// The unnormalised softmax of one masked row in place: exp(s - max). Returns 1 / sum, or 0 for
// a row with no allowed key (whose entries become 0). Normalising the d outputs afterwards is
// cheaper than normalising the n weights.
MASQUE_VECTORIZE float softmax_exp_row(float* s, std::int32_t n) {
  const float mx = numerics::max_of(s, n);
  if (mx == kNegInf) {
    for (std::int32_t j = 0; j < n; ++j) s[j] = 0.0f;
    return 0.0f;
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::int32_t j = 0; j < n; ++j) {
    const float e = fast_exp(s[j] - mx);  // 0 for masked (-inf) entries
    s[j] = e;
    sum += e;
  }
  return 1.0f / sum;
}

MASQUE_VECTORIZE void scale_row(float* x, float alpha, std::int32_t n) {
  for (std::int32_t j = 0; j < n; ++j) x[j] *= alpha;
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

// o += sum_j p[j] v_j, key by key in order: a span summed run by run gives the same bits.
MASQUE_VECTORIZE void weighted_sum_add(const float* __restrict p, const float* __restrict v,
                                       std::int64_t ldv, std::int32_t n, std::int32_t d,
                                       float* __restrict o) {
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
                 const float* weights, const float* inv_sum) {
  const AttentionProbs* probs = p.probs;
  for (std::int32_t r = 0; r < t.rows; ++r) {
    if (!probs->holds(p.head_of(t, r))) continue;
    float* row = probs->row(p.mask, p.head_of(t, r), t.b, p.query_of(t, r));
    std::fill(row, row + p.mask.k_len, 0.0f);
    for (std::int32_t j = 0; j < n; ++j)
      row[j0 + j] = weights[std::int64_t{r} * n + j] * inv_sum[r];
  }
}

void write_probs_at(const Problem& p, const Tile& t, const std::vector<std::int32_t>& cols,
                    const float* weights, const float* inv_sum) {
  const AttentionProbs* probs = p.probs;
  const auto n = static_cast<std::int64_t>(cols.size());
  for (std::int32_t r = 0; r < t.rows; ++r) {
    if (!probs->holds(p.head_of(t, r))) continue;
    float* row = probs->row(p.mask, p.head_of(t, r), t.b, p.query_of(t, r));
    std::fill(row, row + p.mask.k_len, 0.0f);
    for (std::int64_t c = 0; c < n; ++c) row[cols[c]] = weights[r * n + c] * inv_sum[r];
  }
}

// Whether every query of the tile sees every key of [j0, j1): the common unmasked case
// (bidirectional, cross-attention without padding in the span) skips the per-entry rule.
bool all_visible(const Problem& p, const Tile& t, std::int32_t j0, std::int32_t j1) {
  const MaskView& m = p.mask;
  if (m.dense || (m.band > 0 && m.query_role)) return false;
  const TokenRole* role = m.key_role + t.b * m.key_stride;
  if (!m.query_role) {
    for (std::int32_t j = j0; j < j1; ++j)
      if (role[j] == TokenRole::pad) return false;
    return true;
  }
  std::int32_t min_rank = std::numeric_limits<std::int32_t>::max();
  std::int32_t max_rank = std::numeric_limits<std::int32_t>::min();
  for (std::int32_t r = 0; r < t.rows; ++r) {
    const std::int32_t i = p.query_of(t, r);
    if (query_is_pad(m, t.b, i)) return false;
    min_rank = std::min(min_rank, m.query_rank[t.b * m.query_stride + i]);
    max_rank = std::max(max_rank, m.query_rank[t.b * m.query_stride + i]);
  }
  const std::int32_t* rank = m.key_rank + t.b * m.key_stride;
  for (std::int32_t j = j0; j < j1; ++j)
    if (role[j] != TokenRole::content || rank[j] > min_rank ||
        (m.window > 0 && std::int64_t{max_rank} - rank[j] >= m.window))
      return false;
  return true;
}

// The non-padding keys of [j0, j1) when the span has padding inside it (a short row of a
// right-padded prefill followed by decoding steps), else empty. Computing over these alone makes
// a row's result independent of the padding its batch adds.
void gap_keys(const Problem& p, const Tile& t, std::int32_t j0, std::int32_t j1,
              std::vector<std::int32_t>& cols) {
  cols.clear();
  const TokenRole* role = p.mask.key_role + t.b * p.mask.key_stride;
  bool gap = false;
  for (std::int32_t j = j0; j < j1; ++j) {
    if (role[j] == TokenRole::pad)
      gap = true;
    else
      cols.push_back(j);
  }
  if (!gap) cols.clear();
}

// K and V rows of this tile's kv head at `cols`, packed with stride head_dim.
void gather_keys(const Problem& p, const Tile& t, const std::vector<std::int32_t>& cols,
                 std::vector<float>& packed) {
  const std::int32_t d = p.dims.head_dim;
  const auto n = static_cast<std::int64_t>(cols.size());
  packed.resize(static_cast<std::size_t>(2 * n * d));
  const float* k = p.k_base(t);
  const float* v = p.v_base(t);
  for (std::int64_t c = 0; c < n; ++c) {
    std::copy_n(k + cols[c] * p.k.token_stride, d, packed.data() + c * d);
    std::copy_n(v + cols[c] * p.v.token_stride, d, packed.data() + (n + c) * d);
  }
}

// The runs [begin, end) of consecutive keys in `cols` (ascending): small tiles read a gapped
// span in place run by run instead of packing it.
struct KeyRun {
  std::int32_t begin, end, offset;  // keys [begin, end) are columns offset.. of the scores
};
void key_runs(const std::vector<std::int32_t>& cols, std::vector<KeyRun>& runs) {
  runs.clear();
  for (std::size_t c = 0; c < cols.size(); ++c) {
    if (runs.empty() || cols[c] != runs.back().end)
      runs.push_back({cols[c], cols[c] + 1, static_cast<std::int32_t>(c)});
    else
      ++runs.back().end;
  }
}

void run_tile(const Problem& p, const Tile& t, std::vector<float>& work) {
  thread_local std::vector<std::int32_t> cols;
  thread_local std::vector<KeyRun> runs;
  thread_local std::vector<float> packed;
  const std::int32_t d = p.dims.head_dim;
  const auto [j0, j1] = key_span(p, t);
  gap_keys(p, t, j0, j1, cols);
  const bool gathered = !cols.empty();
  const std::int32_t n = gathered ? static_cast<std::int32_t>(cols.size()) : j1 - j0;
  if (n == 0) {  // nothing visible: zeros
    for (std::int32_t r = 0; r < t.rows; ++r) std::fill(p.out_row(t, r), p.out_row(t, r) + d, 0.0f);
    if (p.probs && p.probs->data) write_probs(p, t, 0, 0, nullptr, nullptr);
    return;
  }
  if (gathered)
    key_runs(cols, runs);
  else
    runs.assign(1, {j0, j1, 0});
  work.resize(static_cast<std::size_t>(t.rows) * (n + 1));
  float* s = work.data();
  float* inv_sum = s + std::int64_t{t.rows} * n;
  const bool gemm = std::int64_t{t.rows} * n * d >= kGemmMinWork;
  // sgemm needs a gapped span's keys packed; the loops read them in place, run by run.
  const bool pack = gathered && gemm;
  if (pack) gather_keys(p, t, cols, packed);
  const float* k = pack ? packed.data() : p.k_base(t);
  const float* v = pack ? packed.data() + std::int64_t{n} * d : p.v_base(t);
  const std::int64_t ldk = pack ? d : p.k.token_stride;
  const std::int64_t ldv = pack ? d : p.v.token_stride;
  const std::int64_t first = pack ? 0 : j0;  // the key at k and v's first row

  if (gemm) {
    sgemm('N', 'T', t.rows, n, d, p.dims.scale, p.q_row(t, 0), p.q_ld(t), k + first * ldk, ldk, s,
          n);
  } else {
    for (std::int32_t r = 0; r < t.rows; ++r)
      for (const KeyRun& run : runs)
        scores_loop(p.q_row(t, r), k + std::int64_t{run.begin} * ldk, ldk, run.end - run.begin, d,
                    p.dims.scale, s + std::int64_t{r} * n + run.offset);
  }
  if (p.dims.softcap > 0.0f)  // before the mask: a masked score stays -inf
    for (std::int32_t r = 0; r < t.rows; ++r) soft_cap(s + std::int64_t{r} * n, n, p.dims.softcap);
  for (const KeyRun& run : runs) {
    if (all_visible(p, t, run.begin, run.end)) continue;
    for (std::int32_t r = 0; r < t.rows; ++r)
      mask_row(p, t, p.query_of(t, r), run.begin, run.end - run.begin,
               s + std::int64_t{r} * n + run.offset);
  }
  for (std::int32_t r = 0; r < t.rows; ++r) {
    float* row = s + std::int64_t{r} * n;
    if (p.mask.bias) add_bias_row(p, t, r, j0, gathered ? &cols : nullptr, n, row);
    inv_sum[r] = softmax_exp_row(row, n);
  }
  if (p.probs && p.probs->data) {
    if (gathered)
      write_probs_at(p, t, cols, s, inv_sum);
    else
      write_probs(p, t, j0, n, s, inv_sum);
  }
  if (gemm) {
    sgemm('N', 'N', t.rows, d, n, 1.0f, s, n, v + first * ldv, ldv, p.out_row(t, 0), p.out_ld(t));
  } else {
    for (std::int32_t r = 0; r < t.rows; ++r) {
      float* o = p.out_row(t, r);
      std::fill(o, o + d, 0.0f);
      for (const KeyRun& run : runs)
        weighted_sum_add(s + std::int64_t{r} * n + run.offset, v + std::int64_t{run.begin} * ldv,
                         ldv, run.end - run.begin, d, o);
    }
  }
  for (std::int32_t r = 0; r < t.rows; ++r) scale_row(p.out_row(t, r), inv_sum[r], d);
}

std::vector<Tile> make_tiles(const Problem& p) {
  std::vector<Tile> tiles;
  const MaskView& m = p.mask;
  for (std::int32_t b = 0; b < m.batch; ++b) {
    const std::int32_t q_len = real_queries(m, b);
    if (p.group > 1 && q_len < kGroupQueriesBelow) {
      for (std::int32_t g = 0; g < p.dims.kv_heads; ++g)
        for (std::int32_t i = 0; i < q_len; ++i)
          tiles.push_back({b, g * p.group, i, p.group, true});
    } else {
      for (std::int32_t h = 0; h < p.dims.heads; ++h)
        for (std::int32_t i = 0; i < q_len; i += kBlockRows)
          tiles.push_back({b, h, i, std::min(kBlockRows, q_len - i), false});
    }
  }
  return tiles;
}

// Padding queries past a row's last real one get zeros (nobody reads them, but they stay defined).
void zero_padding_queries(const Problem& p, MutableSeqView out) {
  const MaskView& m = p.mask;
  const std::int64_t width = std::int64_t{p.dims.heads} * p.dims.head_dim;
  for (std::int32_t b = 0; b < m.batch; ++b)
    for (std::int32_t i = real_queries(m, b); i < m.q_len; ++i) {
      float* row = out.data + b * out.batch_stride + i * out.token_stride;
      std::fill(row, row + width, 0.0f);
      if (p.probs && p.probs->data)
        for (std::int32_t h = p.probs->head; h < p.probs->head + p.probs->heads; ++h)
          std::fill(p.probs->row(m, h, b, i), p.probs->row(m, h, b, i) + m.k_len, 0.0f);
    }
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

// ---- tiny heads ---------------------------------------------------------------------------
//
// Heads of a few features (an encoder-decoder with 8 heads of 4, stories260k's grouped-query
// heads of 8) make the tiles above mostly bookkeeping: the key span and the mask are evaluated
// once per head, and every dot product is shorter than one vector. For such heads one query
// token is done for all heads at once instead: the rule is evaluated once per key, and each key
// costs a few vector operations on the H*d features, 8 lanes at a time (one AVX2 register: GCC
// lowers wider generic vectors on AVX2 through the stack, 3x slower than 8 lanes). A head's
// score ends up in each of its d lanes (a butterfly of lane swaps) and is stored once per head,
// so the softmax runs once per head; the weighted sum spreads it back over the head's lanes
// and runs on whole feature vectors. The lane loops use explicit vectors: GCC's
// unroll-and-jam otherwise turns the short inner loops into scalar code.

constexpr std::int32_t kLanes = 8;

// Grouped-query heads qualify when a head fills the 8 lanes: each lane block is one query
// head and reads its kv head's features (kv_column).
bool small_heads(const AttentionDims& dims) {
  const std::int32_t d = dims.head_dim;
  const bool grouped = dims.heads != dims.kv_heads;
  return (d == 1 || d == 2 || d == 4 || d == 8) && (!grouped || d == kLanes) &&
         dims.heads * d % kLanes == 0;
}

// The key/value feature of the lane block starting at query feature c (a multiple of 8), with
// `group` query heads of d features per kv head.
std::int64_t kv_column(std::int32_t c, std::int32_t d, std::int32_t group) {
  return group == 1 ? c : std::int64_t{c / (d * group)} * d;
}

// Vectors of 8 floats (GCC/Clang vector extensions), only passed to always-inlined helpers:
// the ABI of passing them to a real function does not matter. (GCC reports it at the end of the
// file, so the warning cannot be silenced for this section alone.)
#pragma GCC diagnostic ignored "-Wpsabi"
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));
using LaneIndex = std::int32_t __attribute__((vector_size(kLanes * sizeof(std::int32_t))));

#if defined(__clang__)
#define MASQUE_SWAP_LANES(x, ...) __builtin_shufflevector(x, x, __VA_ARGS__)
#else
#define MASQUE_SWAP_LANES(x, ...) __builtin_shuffle(x, LaneIndex{__VA_ARGS__})
#endif

[[gnu::always_inline]] inline Lanes load_lanes(const float* p) {
  Lanes x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
[[gnu::always_inline]] inline void store_lanes(float* p, Lanes x) {
  std::memcpy(p, &x, sizeof x);
}
[[gnu::always_inline]] inline Lanes max_lanes(Lanes a, Lanes b) {
#if defined(__clang__)
  return __builtin_elementwise_max(a, b);
#else
  return a > b ? a : b;
#endif
}

// Every lane gets the sum of its group of d consecutive lanes (d = 1, 2, 4 or 8; a constant
// once inlined).
[[gnu::always_inline]] inline Lanes group_sum(Lanes x, std::int32_t d) {
  if (d >= 2) x += MASQUE_SWAP_LANES(x, 1, 0, 3, 2, 5, 4, 7, 6);
  if (d >= 4) x += MASQUE_SWAP_LANES(x, 2, 3, 0, 1, 6, 7, 4, 5);
  if (d >= 8) x += MASQUE_SWAP_LANES(x, 4, 5, 6, 7, 0, 1, 2, 3);
  return x;
}

// Lane k * D of x (a head's score, which all D lanes of its group hold bit for bit: the
// butterfly adds the same pairs in every lane) to p[k], for the 8 / D heads of the block.
template <std::int32_t D>
[[gnu::always_inline]] inline void store_heads(float* p, Lanes x) {
  if constexpr (D == 1)
    store_lanes(p, x);
  else
    for (std::int32_t k = 0; k < kLanes / D; ++k) p[k] = x[k * D];
}

// The block's 8 / D head values p[0..8/D) spread over their D lanes each (p holds 8 readable
// floats).
template <std::int32_t D>
[[gnu::always_inline]] inline Lanes spread_heads(const float* p) {
  const Lanes x = load_lanes(p);
  if constexpr (D == 1)
    return x;
  else if constexpr (D == 2)
    return MASQUE_SWAP_LANES(x, 0, 0, 1, 1, 2, 2, 3, 3);
  else if constexpr (D == 4)
    return MASQUE_SWAP_LANES(x, 0, 0, 0, 0, 1, 1, 1, 1);
  else
    return Lanes{} + x[0];
}
#undef MASQUE_SWAP_LANES

// Fills keys[0..n) with the keys query i of row b may see (mask.hpp) and returns n.
std::int32_t visible_keys(const MaskView& m, std::int32_t b, std::int32_t i, std::int32_t* keys) {
  const TokenRole* role = m.key_role + b * m.key_stride;
  std::int32_t n = 0;
  if (!m.query_role) {
    for (std::int32_t j = 0; j < m.k_len; ++j)
      if (role[j] != TokenRole::pad) keys[n++] = j;
    return n;
  }
  if (query_is_pad(m, b, i)) return 0;
  if (m.dense) {
    const std::uint8_t* d = m.dense + (std::int64_t{b} * m.q_len + i) * m.k_len;
    const std::int32_t self = i + m.self_offset;
    for (std::int32_t j = 0; j < m.k_len; ++j)
      if (d[j] && role[j] != TokenRole::pad &&
          (m.band <= 0 || (j >= self - m.band && j <= self + m.band)))
        keys[n++] = j;
    return n;
  }
  const std::int32_t* rank = m.key_rank + b * m.key_stride;
  const std::int32_t query_rank = m.query_rank[b * m.query_stride + i];
  const std::int32_t self = i + m.self_offset;
  const TokenRole query_role = m.query_role[b * m.query_stride + i];
  for (std::int32_t j = 0; j < m.k_len; ++j)
    if (role[j] != TokenRole::pad &&
        (j == self || rank_rule_allows(query_role, query_rank, role[j], rank[j], m.window)) &&
        (m.band <= 0 || (j >= self - m.band && j <= self + m.band)))
      keys[n++] = j;
  return n;
}

// s[jj * H + h] = scale * (q . k) of head h for the n visible keys (H = f / D heads);
// mx[h] = the largest score of head h.
template <std::int32_t D>
[[gnu::always_inline]] inline void lane_scores(const float* q, const float* k, std::int64_t ldk,
                                               const std::int32_t* keys, std::int32_t n,
                                               std::int32_t f, std::int32_t group, float scale,
                                               float* s, float* mx) {
  for (std::int32_t c = 0; c < f; c += kLanes) {
    const Lanes qc = load_lanes(q + c);
    const float* kc = k + kv_column(c, D, group);
    Lanes top = Lanes{} + kNegInf;
    for (std::int32_t jj = 0; jj < n; ++jj) {
      const Lanes sc = group_sum(qc * load_lanes(kc + keys[jj] * ldk), D) * scale;
      store_heads<D>(s + std::int64_t{jj} * (f / D) + c / D, sc);
      top = max_lanes(top, sc);
    }
    store_heads<D>(mx + c / D, top);
  }
}

MASQUE_VECTORIZE void lane_scores(std::int32_t d, const float* q, const float* k, std::int64_t ldk,
                                  const std::int32_t* keys, std::int32_t n, std::int32_t f,
                                  std::int32_t group, float scale, float* s, float* mx) {
  switch (d) {
    case 1:
      return lane_scores<1>(q, k, ldk, keys, n, f, group, scale, s, mx);
    case 2:
      return lane_scores<2>(q, k, ldk, keys, n, f, group, scale, s, mx);
    case 4:
      return lane_scores<4>(q, k, ldk, keys, n, f, group, scale, s, mx);
    default:
      return lane_scores<8>(q, k, ldk, keys, n, f, group, scale, s, mx);
  }
}

// s[jj * H + h] = exp(s[jj * H + h] - mx[h]): the unnormalised weights, once per head.
MASQUE_VECTORIZE void lane_exp(float* __restrict s, const float* __restrict mx, std::int32_t n,
                               std::int32_t heads) {
  for (std::int32_t jj = 0; jj < n; ++jj) {
    float* __restrict e = s + std::int64_t{jj} * heads;
#pragma omp simd
    for (std::int32_t h = 0; h < heads; ++h) e[h] = fast_exp(e[h] - mx[h]);
  }
}

// o = sum_j e_j v_j / sum_j e_j per lane, e_j spread from its head to the head's lanes; sum
// receives the per-lane totals.
template <std::int32_t D>
[[gnu::always_inline]] inline void lane_values(const float* e, const float* v, std::int64_t ldv,
                                               const std::int32_t* keys, std::int32_t n,
                                               std::int32_t f, std::int32_t group, float* sum,
                                               float* o) {
  for (std::int32_t c = 0; c < f; c += kLanes) {
    const float* vc = v + kv_column(c, D, group);
    Lanes total{}, acc{};
    for (std::int32_t jj = 0; jj < n; ++jj) {
      const Lanes ej = spread_heads<D>(e + std::int64_t{jj} * (f / D) + c / D);
      total += ej;
      acc += ej * load_lanes(vc + keys[jj] * ldv);
    }
    store_lanes(sum + c, total);
    store_lanes(o + c, acc / total);
  }
}

MASQUE_VECTORIZE void lane_values(std::int32_t d, const float* e, const float* v, std::int64_t ldv,
                                  const std::int32_t* keys, std::int32_t n, std::int32_t f,
                                  std::int32_t group, float* sum, float* o) {
  switch (d) {
    case 1:
      return lane_values<1>(e, v, ldv, keys, n, f, group, sum, o);
    case 2:
      return lane_values<2>(e, v, ldv, keys, n, f, group, sum, o);
    case 4:
      return lane_values<4>(e, v, ldv, keys, n, f, group, sum, o);
    default:
      return lane_values<8>(e, v, ldv, keys, n, f, group, sum, o);
  }
}

// Query i of row b; the scratch lives in the calling thread (no allocation once warm).
void run_small_heads(const Problem& p, std::int32_t b, std::int32_t i) {
  thread_local std::vector<float> scratch;
  thread_local std::vector<std::int32_t> keys;
  const MaskView& m = p.mask;
  const std::int32_t f = p.dims.heads * p.dims.head_dim;
  keys.resize(std::max<std::size_t>(keys.size(), m.k_len));
  const std::int32_t n = visible_keys(m, b, i, keys.data());
  float* o = p.out.data + b * p.out.batch_stride + std::int64_t{i} * p.out.token_stride;
  const AttentionProbs* probs = p.probs && p.probs->data ? p.probs : nullptr;
  if (probs)
    for (std::int32_t h = probs->head; h < probs->head + probs->heads; ++h)
      std::fill(probs->row(m, h, b, i), probs->row(m, h, b, i) + m.k_len, 0.0f);
  if (n == 0) {  // nothing visible: zeros
    std::fill(o, o + f, 0.0f);
    return;
  }
  // Per head: the scores (then weights) of each key, and the maxima; then the lane totals.
  // Each part has a vector of slack, as spread_heads reads 8 floats.
  const std::int32_t heads = p.dims.heads;
  const std::int64_t weights = std::int64_t{n} * heads + kLanes;
  scratch.resize(std::max<std::size_t>(scratch.size(), weights + heads + kLanes + f + kLanes));
  const auto misaligned = reinterpret_cast<std::uintptr_t>(scratch.data()) / sizeof(float) % kLanes;
  float* s = scratch.data() + (kLanes - misaligned) % kLanes;
  float* mx = s + weights;
  float* sum = mx + heads + kLanes;
  const float* q = p.q.data + b * p.q.batch_stride + std::int64_t{i} * p.q.token_stride;
  const float* k = p.k.row(b);
  const float* v = p.v.row(b);
  const std::int32_t d = p.dims.head_dim;
  lane_scores(d, q, k, p.k.token_stride, keys.data(), n, f, p.group, p.dims.scale, s, mx);
  lane_exp(s, mx, n, heads);
  lane_values(d, s, v, p.v.token_stride, keys.data(), n, f, p.group, sum, o);
  if (probs)
    for (std::int32_t h = probs->head; h < probs->head + probs->heads; ++h) {
      float* row = probs->row(m, h, b, i);
      for (std::int32_t jj = 0; jj < n; ++jj)
        row[keys[jj]] = s[std::int64_t{jj} * heads + h] / sum[h * d];
    }
}

void attention_small_heads(const Problem& p) {
  const MaskView& m = p.mask;
  const std::int64_t count = std::int64_t{m.batch} * m.q_len;
  const double flops = 4.0 * count * m.k_len * p.dims.heads * p.dims.head_dim;
  const int threads = std::min<std::int64_t>(numerics::threads_for(flops), count);
  if (threads <= 1) {
    for (std::int32_t b = 0; b < m.batch; ++b)
      for (std::int32_t i = 0; i < m.q_len; ++i) run_small_heads(p, b, i);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t t = 0; t < count; ++t)
    run_small_heads(p, static_cast<std::int32_t>(t / m.q_len),
                    static_cast<std::int32_t>(t % m.q_len));
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
  m.window = m.dense ? 0 : layout.window;
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
  if (band > 0 && (j < i + self_offset - band || j > i + self_offset + band)) return false;
  if (dense) return dense[(std::int64_t{b} * q_len + i) * k_len + j] != 0;
  if (j == i + self_offset) return true;
  return rank_rule_allows(query_role[b * query_stride + i], query_rank[b * query_stride + i], kr,
                          key_rank[b * key_stride + j], window);
}

std::int32_t t5_relative_bucket(std::int32_t relative, bool bidirectional, std::int32_t num_buckets,
                                std::int32_t max_distance) {
  std::int32_t bucket = 0;
  if (bidirectional) {
    num_buckets /= 2;
    if (relative > 0) bucket += num_buckets;
    relative = relative < 0 ? -relative : relative;
  } else {
    relative = relative < 0 ? -relative : 0;
  }
  const std::int32_t max_exact = num_buckets / 2;
  if (relative < max_exact) return bucket + relative;
  // float32 as torch computes it: log(rel / max_exact) / log(max_distance / max_exact) * span.
  const float ratio = std::log(static_cast<float>(relative) / static_cast<float>(max_exact)) /
                      static_cast<float>(std::log(static_cast<double>(max_distance) / max_exact));
  const auto large =
      max_exact + static_cast<std::int32_t>(ratio * static_cast<float>(num_buckets - max_exact));
  return bucket + std::min(large, num_buckets - 1);
}

float PositionBias::value(std::int32_t head, std::int32_t query, std::int32_t key) const {
  switch (kind) {
    case Kind::t5_buckets:
      return table[std::int64_t{
                       t5_relative_bucket(key - query, bidirectional, num_buckets, max_distance)} *
                       heads +
                   head];
    case Kind::alibi:
      return table[head] * static_cast<float>(key - query);
    case Kind::none:
      break;
  }
  return 0.0f;
}

void attention(const AttentionDims& dims, const MaskView& mask, SeqView q, SeqView k, SeqView v,
               MutableSeqView out, const AttentionProbs* probs) {
  validate(dims, mask, q, k, v, out);
  if (probs && probs->data &&
      (probs->head < 0 || probs->heads < 1 || probs->head + probs->heads > dims.heads))
    throw RuntimeError("attention: probabilities of heads " + std::to_string(probs->head) + ".." +
                       std::to_string(probs->head + probs->heads - 1) + " asked of " +
                       std::to_string(dims.heads) + " heads");
  if (mask.batch == 0 || mask.q_len == 0) return;
  const Problem problem{dims, mask, q, k, v, out, probs, dims.heads / dims.kv_heads};
  if (small_heads(dims) && !mask.bias && dims.softcap == 0.0f)
    return attention_small_heads(problem);
  zero_padding_queries(problem, out);
  const std::vector<Tile> tiles = make_tiles(problem);
  const double flops = 4.0 * mask.batch * mask.q_len * mask.k_len * dims.heads * dims.head_dim;
  const int threads = std::min<int>(numerics::threads_for(flops), static_cast<int>(tiles.size()));
  if (threads <= 1) {
    ThreadScope one(1);  // sgemm would otherwise open its own parallel region per tile
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

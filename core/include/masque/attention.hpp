// Scaled dot-product attention under the masque mask rule (mask.hpp).
//
//   out_h = softmax(scale * q_h k_g^T  restricted to the allowed keys) v_g,   g = h / (H / Hkv)
//
// The rule is evaluated per (query, key) while the scores are computed: no n x n mask is stored
// per head or layer, and at most a block of query rows' scores exists at a time. A query with
// no allowed key gets zeros. Multi-head (Hkv = H), grouped-query (Hkv divides H) and multi-query
// (Hkv = 1) heads; self-attention, cross-attention and incremental steps against a KV cache
// (kv_cache.hpp) all go through attention().
#pragma once

#include <cstdint>

#include "masque/mask.hpp"
#include "masque/tensor.hpp"

namespace masque {

// Token-major activations of a padded batch, as Linear writes them: feature c of token t of
// sequence b is at data[b * batch_stride + t * token_stride + c]. Strides let q, k and v be
// column ranges of one fused qkv projection, or a KV cache with spare capacity. With `row_of`,
// sequence b is stored sequence row_of[b]: rows that share one (a record's beams attending to
// its encoder memory) read it in place.
struct SeqView {
  const float* data = nullptr;
  std::int64_t batch_stride = 0;
  std::int64_t token_stride = 0;
  const std::int32_t* row_of = nullptr;

  const float* row(std::int64_t b) const { return data + (row_of ? row_of[b] : b) * batch_stride; }
};
struct MutableSeqView {
  float* data = nullptr;
  std::int64_t batch_stride = 0;
  std::int64_t token_stride = 0;
};

// Views of a [B * length, C] (or [B, length, C]) tensor, starting at column `column`.
SeqView seq_view(const Tensor& t, std::int64_t length, std::int64_t column = 0);
MutableSeqView mutable_seq_view(Tensor& t, std::int64_t length, std::int64_t column = 0);

struct AttentionDims {
  std::int32_t heads = 0;     // query heads H
  std::int32_t kv_heads = 0;  // key/value heads Hkv (divides H)
  std::int32_t head_dim = 0;  // d: head h uses features [h*d, (h+1)*d)
  float scale = 1.0f;         // usually 1/sqrt(d); given by the model
  // > 0: each scaled score s becomes softcap * tanh(s / softcap) before the mask (Gemma 2).
  float softcap = 0.0f;
};

// An additive score bias per (head, query column, key column), evaluated in the kernel (no
// n x n tensor per head): T5's relative-position buckets or ALiBi's linear distance penalty.
// Columns are the token indices of the keys; query i is column i + MaskView::self_offset (so a
// decoding step against a KV cache gets the same bias as a full forward).
struct PositionBias {
  enum class Kind : std::uint8_t { none, t5_buckets, alibi };
  Kind kind = Kind::none;
  // t5_buckets: [num_buckets, heads] (HF relative_attention_bias.weight), bias = table[bucket(key
  // - query)][head]; alibi: one slope per head, bias = slope[head] * (key - query).
  const float* table = nullptr;
  std::int32_t heads = 0;
  std::int32_t num_buckets = 32, max_distance = 128;
  bool bidirectional = true;

  float value(std::int32_t head, std::int32_t query, std::int32_t key) const;
};

// T5's bucket of a relative position (key - query), as HF T5Attention._relative_position_bucket
// computes it (the logarithmic part in float32).
std::int32_t t5_relative_bucket(std::int32_t relative, bool bidirectional, std::int32_t num_buckets,
                                std::int32_t max_distance);

// Who may attend to whom, for a batch of `batch` rows of q_len queries and k_len keys.
// Key j of row b has role key_role[b * key_stride + j] and rank key_rank[...]; queries likewise.
// Without query arrays (cross-attention) every query sees every non-pad key. Query i is the
// same token as key i + self_offset (the `i == j` clause of the rule). A dense mask
// (dense[(b * q_len + i) * k_len + j], non-zero = allowed) replaces the rank clause.
struct MaskView {
  std::int32_t batch = 0, q_len = 0, k_len = 0;
  const TokenRole* key_role = nullptr;
  const std::int32_t* key_rank = nullptr;
  std::int64_t key_stride = 0;
  const TokenRole* query_role = nullptr;  // null: cross-attention (key validity only)
  const std::int32_t* query_rank = nullptr;
  std::int64_t query_stride = 0;
  std::int32_t self_offset = 0;
  const std::uint8_t* dense = nullptr;
  // Sliding window (Mistral, Qwen2): > 0 adds rank(query) - rank(key) < window to the rank
  // clause (the i == j clause still holds). Not with a dense mask.
  std::int32_t window = 0;
  // Band (ModernBERT's local layers): > 0 also hides keys whose column is more than band away
  // from the query's (i + self_offset), whatever the ranks or a dense mask say.
  std::int32_t band = 0;
  const PositionBias* bias = nullptr;  // added to the scaled scores, or null

  // Self-attention over a padded batch (the layout must outlive the view).
  static MaskView self(const AttentionLayout& layout);
  // Cross-attention from q_len queries per row to the tokens of `source` (its pads masked).
  static MaskView cross(const AttentionLayout& source, std::int32_t q_len);

  // The rule for one (row, query, key), as the kernel applies it.
  bool allowed(std::int32_t b, std::int32_t i, std::int32_t j) const;
};

// Optional output: the attention probabilities of query heads [head, head + heads),
// [heads, batch, q_len, k_len] (e.g. cross-attention of head 0 for alignment output, or every
// head of a layer for a heatmap). Disallowed keys get 0. Null: nothing is written, at no cost.
struct AttentionProbs {
  std::int32_t head = 0;  // first head
  float* data = nullptr;
  std::int32_t heads = 1;  // how many consecutive heads

  bool holds(std::int32_t h) const { return h >= head && h < head + heads; }
  // The row of query i of batch row b for head h (holds(h)), k_len entries.
  float* row(const MaskView& m, std::int32_t h, std::int32_t b, std::int32_t i) const {
    return data + ((std::int64_t{h - head} * m.batch + b) * m.q_len + i) * m.k_len;
  }
};

// q: H*d features per query token; k, v: Hkv*d per key token; out: H*d per query token.
// `out` must not overlap q, k or v. Uses the calling thread's intra-op threads (threading.hpp).
void attention(const AttentionDims& dims, const MaskView& mask, SeqView q, SeqView k, SeqView v,
               MutableSeqView out, const AttentionProbs* probs = nullptr);

// Tensor conveniences. Self: q [B*T, H*d], k/v [B*T, Hkv*d] under `layout` (B x T).
void self_attention(const AttentionDims& dims, const AttentionLayout& layout, const Tensor& q,
                    const Tensor& k, const Tensor& v, Tensor& out);
// Cross: q [B*q_len, H*d]; k/v [B*S, Hkv*d] of the source batch `source` (B x S).
void cross_attention(const AttentionDims& dims, const AttentionLayout& source, const Tensor& q,
                     std::int32_t q_len, const Tensor& k, const Tensor& v, Tensor& out);

}  // namespace masque

// Attention for training: a forward that saves what the backward needs, and the backward, under
// the masque mask rule (mask.hpp) evaluated per (query, key) inside the kernel.
//
//   out_h = softmax(scale * q_h k_g^T restricted to the allowed keys) v_g,   g = h / (H / Hkv)
//
// The same MaskView as inference (attention.hpp): pads, content and query roles, rank rule with
// self_offset, dense masks, cross-attention (no query arrays); multi-head, grouped-query and
// multi-query heads. No n x n mask and no probability matrix is stored: the forward keeps one
// float per (row, head, query), the log-sum-exp of the query's allowed scores, and the backward
// recomputes the probabilities tile by tile from q, k and the log-sum-exp (FlashAttention-2's
// recompute). Saved memory: 4 * batch * heads * q_len bytes beyond q, k, v and out, which the
// caller keeps anyway (BERT-base, 16 x 128 tokens, 12 heads: 96 KiB per layer, against 12 MiB
// for one layer's probabilities).
//
// Work: tiles of up to 128 queries of one head; a tile's scores cover only the span of keys its
// queries may see (causal tiles skip the future), with the rule applied per entry. Products go
// through oneDNN's sgemm on the strided token-major data. The forward runs tiles in parallel;
// the backward runs one task per (batch row, kv head), which owns that head's dk and dv, so
// nothing is added across threads and results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "masque/attention.hpp"
#include "masque/train/dropout.hpp"

namespace masque::train {

// Dropout on the attention probabilities (torch: dropout(softmax(scores)) @ v): the kept
// probabilities are scaled by 1 / (1 - p), the log-sum-exp stays the undropped softmax's. The
// mask of (batch row b, head h, query i, key j) is drawn with dropout_key(*context, b, site) at
// attention_element(h, i, j), row by row inside the tiles, forward and backward alike: no mask
// is stored. Null or p == 0: none.
struct AttentionDropout {
  float p = 0;
  const DropoutContext* context = nullptr;
  std::uint32_t site = 0;
  bool active() const { return p > 0 && context != nullptr; }
};

// Forward. q: H*d features per query token; k, v: Hkv*d per key token; out: H*d per query token
// (written; must not overlap q, k, v). lse: [batch, heads, q_len] floats, written: the
// log-sum-exp of each query's scaled allowed scores, -inf for a query that sees no key (padding
// queries, empty rows), whose output is zeros. Uses the calling thread's intra-op threads.
void attention_forward(const AttentionDims& dims, const MaskView& mask, SeqView q, SeqView k,
                       SeqView v, MutableSeqView out, float* lse,
                       const AttentionDropout* dropout = nullptr);

// Backward of attention_forward (with the same dropout), given out and lse from it and dout
// (same layout as out). With dropout, dV = (P∘M)ᵀ dO and dS = P ∘ (M∘dP − rowsum(dO∘O)).
// dq (like q), dk and dv (like k and v) are written, not accumulated: every entry of the heads'
// columns gets its gradient (0 for pads and keys nobody sees). None may overlap an input.
void attention_backward(const AttentionDims& dims, const MaskView& mask, SeqView q, SeqView k,
                        SeqView v, SeqView out, SeqView dout, const float* lse, MutableSeqView dq,
                        MutableSeqView dk, MutableSeqView dv,
                        const AttentionDropout* dropout = nullptr);

}  // namespace masque::train

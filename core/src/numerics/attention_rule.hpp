// The mask rule (masque/mask.hpp) as the attention kernels apply it to a row of scores: one
// home for the inference kernel (attention.cpp) and the training kernel (train/attention.cpp),
// so a score the forward hides is the one the backward hides, windows and dense masks included.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "masque/attention.hpp"
#include "numerics/simd.hpp"

namespace masque::numerics {

inline constexpr float kMaskedScore = -std::numeric_limits<float>::infinity();

inline bool query_is_pad(const MaskView& m, std::int32_t b, std::int32_t i) {
  return m.query_role && m.query_role[b * m.query_stride + i] == TokenRole::pad;
}

// Queries of row b up to its last real one; the ones after it are padding.
inline std::int32_t real_queries(const MaskView& m, std::int32_t b) {
  if (!m.query_role) return m.q_len;
  std::int32_t n = m.q_len;
  while (n > 0 && query_is_pad(m, b, n - 1)) --n;
  return n;
}

// [j0, j1): the keys queries [i0, i1) of row b may see (a superset is fine: the rule is applied
// per entry afterwards).
inline std::pair<std::int32_t, std::int32_t> key_span(const MaskView& m, std::int32_t b,
                                                      std::int32_t i0, std::int32_t i1) {
  const TokenRole* role = m.key_role + b * m.key_stride;
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
    for (std::int32_t i = i0; i < i1; ++i) {
      if (query_is_pad(m, b, i)) continue;
      const std::uint8_t* d = m.dense + (std::int64_t{b} * m.q_len + i) * m.k_len;
      for (std::int32_t j = 0; j < m.k_len; ++j)
        if (d[j] && role[j] != TokenRole::pad) take(j);
    }
    return {j0, std::max(j0, j1)};
  }
  std::int32_t max_rank = std::numeric_limits<std::int32_t>::min();
  bool any = false;
  for (std::int32_t i = i0; i < i1; ++i) {
    if (query_is_pad(m, b, i)) continue;
    any = true;
    max_rank = std::max(max_rank, m.query_rank[b * m.query_stride + i]);
    const std::int32_t self = i + m.self_offset;
    if (self >= 0 && self < m.k_len && role[self] != TokenRole::pad) take(self);
  }
  if (!any) return {0, 0};
  const std::int32_t* rank = m.key_rank + b * m.key_stride;
  for (std::int32_t j = 0; j < m.k_len; ++j)  // block_query keys: a superset of the rule's
    if ((role[j] == TokenRole::content || role[j] == TokenRole::block_query) && rank[j] <= max_rank)
      take(j);
  return {j0, std::max(j0, j1)};
}

// Sets the disallowed scores of a query over keys [j0, j0 + n) to -inf.
MASQUE_VECTORIZE inline void mask_rank_row(float* __restrict s, const TokenRole* __restrict role,
                                           const std::int32_t* __restrict rank, std::int32_t n,
                                           std::int32_t query_rank, std::int32_t self) {
  for (std::int32_t j = 0; j < n; ++j) {
    const bool ok = role[j] != TokenRole::pad &&
                    ((role[j] == TokenRole::content && rank[j] <= query_rank) || j == self);
    s[j] = ok ? s[j] : kMaskedScore;
  }
}
// A block_query's row: its own rank's block_query keys are visible too (mask.hpp).
MASQUE_VECTORIZE inline void mask_block_row(float* __restrict s, const TokenRole* __restrict role,
                                            const std::int32_t* __restrict rank, std::int32_t n,
                                            std::int32_t query_rank, std::int32_t self,
                                            std::int32_t window) {
  for (std::int32_t j = 0; j < n; ++j) {
    const bool ok =
        j == self || rank_rule_allows(TokenRole::block_query, query_rank, role[j], rank[j], window);
    s[j] = ok && role[j] != TokenRole::pad ? s[j] : kMaskedScore;
  }
}
// The same with a sliding window: ranks more than window - 1 below the query's are hidden too.
MASQUE_VECTORIZE inline void mask_window_row(float* __restrict s, const TokenRole* __restrict role,
                                             const std::int32_t* __restrict rank, std::int32_t n,
                                             std::int32_t query_rank, std::int32_t self,
                                             std::int32_t window) {
  for (std::int32_t j = 0; j < n; ++j) {
    const bool ok =
        role[j] != TokenRole::pad && ((role[j] == TokenRole::content && rank[j] <= query_rank &&
                                       query_rank - rank[j] < window) ||
                                      j == self);
    s[j] = ok ? s[j] : kMaskedScore;
  }
}
MASQUE_VECTORIZE inline void mask_dense_row(float* __restrict s, const TokenRole* __restrict role,
                                            const std::uint8_t* __restrict dense, std::int32_t n) {
  for (std::int32_t j = 0; j < n; ++j)
    s[j] = (role[j] != TokenRole::pad && dense[j] != 0) ? s[j] : kMaskedScore;
}
MASQUE_VECTORIZE inline void mask_keys_row(float* __restrict s, const TokenRole* __restrict role,
                                           std::int32_t n) {
  for (std::int32_t j = 0; j < n; ++j) s[j] = role[j] != TokenRole::pad ? s[j] : kMaskedScore;
}

// Keys [j0, j0 + n) farther than `band` columns from column `self` become -inf.
inline void mask_band_row(float* s, std::int32_t j0, std::int32_t n, std::int32_t self,
                          std::int32_t band) {
  for (std::int32_t j = 0; j < n; ++j)
    if (j0 + j < self - band || j0 + j > self + band) s[j] = kMaskedScore;
}

// The rank rule (or the dense mask) for query i of row b over keys [j0, j0 + n).
inline void mask_rule_row(const MaskView& m, std::int32_t b, std::int32_t i, std::int32_t j0,
                          std::int32_t n, float* s) {
  const TokenRole* role = m.key_role + b * m.key_stride + j0;
  if (!m.query_role) return mask_keys_row(s, role, n);
  if (query_is_pad(m, b, i)) {
    std::fill(s, s + n, kMaskedScore);
    return;
  }
  if (m.dense)
    return mask_dense_row(s, role, m.dense + (std::int64_t{b} * m.q_len + i) * m.k_len + j0, n);
  const std::int32_t* rank = m.key_rank + b * m.key_stride + j0;
  const std::int32_t query_rank = m.query_rank[b * m.query_stride + i];
  if (m.query_role[b * m.query_stride + i] == TokenRole::block_query)
    return mask_block_row(s, role, rank, n, query_rank, i + m.self_offset - j0, m.window);
  if (m.window > 0)
    return mask_window_row(s, role, rank, n, query_rank, i + m.self_offset - j0, m.window);
  mask_rank_row(s, role, rank, n, query_rank, i + m.self_offset - j0);
}

// The rule for query i of row b over keys [j0, j0 + n): disallowed scores become -inf.
inline void mask_row(const MaskView& m, std::int32_t b, std::int32_t i, std::int32_t j0,
                     std::int32_t n, float* s) {
  mask_rule_row(m, b, i, j0, n, s);
  if (m.band > 0 && m.query_role) mask_band_row(s, j0, n, i + m.self_offset, m.band);
}

}  // namespace masque::numerics

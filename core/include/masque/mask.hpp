// Plugin kind `mask`: which positions may attend to which (../shared/DESIGN.md).
//
// A strategy describes one sequence by a rank and a role per token. Query token i may attend
// key token j when
//
//     role[j] != pad  &&  ( i == j  ||  (role[j] == content && rank[j] <= rank[i])
//                           ||  (role[i] == role[j] == block_query && rank[j] == rank[i]) )
//
// bidirectional: all ranks 0; causal: rank = position; seq2seq (UniLM): rank = cumulative sum
// of the segment ids; permutation: rank = index of the position in the factorization order.
// `query` tokens (the query stream for predicting in a permutation order with a BERT-like
// model) see the content ranked at or below their own rank and themselves, and no other token
// sees them. `block_query` tokens are a query stream whose tokens also see the other
// block_query tokens of their own rank: block diffusion's training layout (BD3-LM), a noised
// copy of each block that sees itself and the clean blocks before it, no other token seeing
// it. Strategies that rank cannot express fill `dense` (allowed[i * n + j]) instead;
// the rule above then reads `role[j] != pad && dense[i * n + j]`.
//
// The attention kernel evaluates this rule on the fly: no n x n mask is stored per head or
// layer. Incremental decoding with a KV cache is valid when every new token ranks at or above
// everything cached and the strategy is rank-based (supports_incremental()).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "masque/plugin.hpp"

namespace masque {

// block_query was added in ABI 1.2 (appended: no earlier plugin produces it).
enum class TokenRole : std::uint8_t { pad = 0, content = 1, query = 2, block_query = 3 };

// The rule between a query token (role qr, rank qk) and a key token that is not itself and
// not padding: the one home of the rank clause for every evaluator of the rule.
inline bool rank_rule_allows(TokenRole qr, std::int32_t qk, TokenRole kr, std::int32_t kk,
                             std::int32_t window) {
  if (kr == TokenRole::content) return kk <= qk && (window <= 0 || qk - kk < window);
  return kr == TokenRole::block_query && qr == TokenRole::block_query && kk == qk;
}

// What a task knows about one sequence of `length` content tokens.
struct MaskRequest {
  std::int32_t length = 0;
  std::span<const std::int32_t> segments;  // per content token (seq2seq), or empty
  std::span<const std::int32_t> order;     // explicit factorization order for this record, or
                                           // empty to use the strategy's own setting
  std::uint64_t record_id = 0;             // seeds per-record random orders
  // Added in ABI 1.1 (appended: plugins built against 1.0 read the fields above unchanged).
  // Per content token, 1 = context outside the factorization order ([CLS]/[SEP], a
  // template's given words): it sees the other context, every token sees it. The order then
  // runs over the other tokens, `order` indexing them 0..m-1. Empty = no context. Strategies
  // without an order ignore it.
  std::span<const std::uint8_t> context;
  // Append the query stream (one query token per ordered token) whatever the strategy's own
  // setting; a strategy that has no query stream ignores it.
  bool query_stream = false;
};

struct SequenceMask {
  std::vector<std::int32_t> rank;  // one per token: content tokens, then query tokens
  std::vector<TokenRole> role;
  std::vector<std::uint8_t> dense;  // empty, or n*n with n = rank.size()
  // Sliding window (> 0): the rank clause also needs rank[i] - rank[j] < window.
  std::int32_t window = 0;
  std::vector<std::int32_t> order;  // the factorization order used (permutation), else empty
  // Query tokens appended after the content: the content position each one predicts. The task
  // feeds a [MASK] token with that position id for each.
  std::vector<std::int32_t> query_positions;

  std::size_t size() const { return rank.size(); }
  bool allowed(std::size_t i, std::size_t j) const;
};

// Contract: build() is const and thread-safe; it throws RecordError for a request it cannot
// serve (e.g. an order that is not a permutation of 0..length-1, missing segments).
class BOOST_SYMBOL_VISIBLE MaskStrategy : public Plugin {
 public:
  virtual SequenceMask build(const MaskRequest& request) const = 0;
  virtual bool supports_incremental() const = 0;
};

// The attention layout of a padded batch of B sequences of T tokens (row b, column t at
// b * T + t). Padding columns have role pad.
struct AttentionLayout {
  std::int32_t batch = 0, length = 0;
  std::vector<std::int32_t> rank;   // B*T
  std::vector<TokenRole> role;      // B*T
  std::vector<std::uint8_t> dense;  // empty, or B*T*T
  std::int32_t window = 0;          // the rows' SequenceMask::window (0: none)

  void reset(std::int32_t batch, std::int32_t length);  // all pad, rank 0, no dense
  // Copies one sequence's mask into row b (its size must be <= T).
  void set_row(std::int32_t b, const SequenceMask& mask);
  bool allowed(std::int32_t b, std::int32_t i, std::int32_t j) const;
};

}  // namespace masque

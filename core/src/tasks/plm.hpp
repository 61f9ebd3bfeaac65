// Permutation-LM helpers shared by plm-score and plm-generate.
//
// A record's tokens split into `slots` (the positions that take part in the factorization
// order: the text tokens for plm-score, the [MASK] positions for plm-generate) and context
// (e.g. [CLS]/[SEP], or the template's given words), which every token may see.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "masque/mask.hpp"
#include "masque/model.hpp"
#include "tasks/common.hpp"

namespace masque {

enum class PlmMethod {
  query_stream,  // one forward: a query token per slot sees the slots before it in the order
  incremental,   // the same, step by step with the KV cache
  visible_mask,  // plain BERT: slots not yet revealed are visible [MASK] tokens
};

PlmMethod parse_plm_method(const std::string& name);

// Tokens that frame a text ([CLS], [SEP], BOS, EOS, padding): context, not part of the order.
bool is_context_token(const Tokenizer* tokenizer, TokenId id);

// The factorization order over `slots` slots (indexes 0..slots-1, first to last), from the
// pipeline's mask strategy, which must be a permutation strategy: an explicit per-record order
// wins over the strategy's setting.
std::vector<std::int32_t> resolve_order(const MaskStrategy& mask, std::int32_t slots,
                                        const std::vector<std::int32_t>& explicit_order,
                                        std::uint64_t record_id);

// MaskRequest::context for a record of `length` tokens: 1 everywhere but at the slots.
std::vector<std::uint8_t> context_flags(std::size_t length, const std::vector<std::int32_t>& slots);

// The query-stream mask of a record from the permutation strategy: its context sees itself,
// slot order[t] ranks t, and query t (predicting slot order[t], appended after the content)
// sees the context and the slots of steps < t. ConfigError when the strategy has no query
// stream.
SequenceMask query_stream_mask(const MaskStrategy& mask, std::size_t length,
                               const std::vector<std::int32_t>& slots,
                               const std::vector<std::int32_t>& order, std::uint64_t record_id);

}  // namespace masque

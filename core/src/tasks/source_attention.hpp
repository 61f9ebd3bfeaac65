// return_attention and replace_unknowns of the seq2seq task (CTranslate2's options): for each
// output token of a hypothesis, the attention over the record's source tokens of the query that
// predicted it, averaged over the alignment heads of one layer (CTranslate2's alignment_layer,
// default the last, and alignment_heads, default 1: the first head only).
//
// Attention at a step depends only on the source and the tokens fed before it, so it is
// recomputed by teacher forcing the finished hypotheses (one row each, batched) rather than
// carried through every decoder's search: greedy, beam, sampling and alternatives give the
// values CTranslate2 records during its search (beam reordering included), and a run that does
// not ask for attention pays nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tasks/common.hpp"

namespace masque {

using AttentionRows = std::vector<std::vector<float>>;  // [output token][source token]

// `stepper` has one row per record, records attention (ModelStepper's `record`) with heads
// [0, heads) and holds each row's source in columns [0, source_length[row]). Hypothesis k
// (tokens targets[k], of record record_of[k]) gets one row per token, source_length of its
// record wide, the heads averaged.
std::vector<AttentionRows> force_attention(ModelStepper& stepper,
                                           std::span<const std::int32_t> record_of,
                                           std::span<const std::vector<TokenId>> targets,
                                           std::span<const std::int32_t> source_length);

// CTranslate2's replace_unknowns: the source position with the highest attention (the first of
// equal ones) for a row, or -1 for an empty row.
std::int32_t most_attended(std::span<const float> row);

}  // namespace masque

// What a seq2seq record brings besides its source: a target (or target prefix) given as text or
// as ids, and the source length limit (CTranslate2's max_input_length). Shared by `seq2seq` and
// `seq2seq-score`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "tasks/common.hpp"

namespace masque {

// The ids of the record's field `name`: text through `tokenizer` (no special tokens) or an array
// of ids in 0..vocab-1. Empty when the field is absent or empty. RecordError otherwise.
std::vector<TokenId> target_field(const Record& record, const std::string& name,
                                  const Tokenizer* tokenizer, std::int32_t vocab);

// The task parameter `max_input_length` and its effect: a source longer than the limit keeps
// its first limit tokens (and its final special token, e.g. [SEP], when the tokenizer added one).
// Returns a note for the record's output ("" when nothing was cut).
ParamSpec max_input_length_param();
std::string truncate_source(Item& item, const Params& task_params, const Tokenizer* tokenizer);

}  // namespace masque

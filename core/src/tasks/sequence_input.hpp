// The input of the whole-record tasks (classify, embed): one text, or a sentence pair (the
// second text from another TSV column / JSON field, token type 1, as BERT's pair heads were
// trained), or ids; and the attention the model family was trained with.
#pragma once

#include <string>

#include "masque/params.hpp"
#include "tasks/common.hpp"

namespace masque {

// The task parameters `add_special` and `pair_field`.
ParamSpec add_special_param();
ParamSpec pair_field_param();

// The record's tokens and token types: `ids` (and `token_type_ids`) when given, else its text
// (and, with a pair field, the pair through the tokenizer's encode_pair). RecordError for an
// empty record, a missing or non-string pair field, mismatched token types, too many tokens.
SequenceSpec sequence_input(Item& item, const Tokenizer* tokenizer, const Model& model,
                            const Params& task_params);

// The pipeline's mask when it names one, else what the family's heads were trained under:
// bidirectional for encoder-only models, causal for decoder-only ones (held by the task).
const MaskStrategy& sequence_mask(const Plugins& plugins);

}  // namespace masque

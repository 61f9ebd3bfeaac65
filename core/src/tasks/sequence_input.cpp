#include "tasks/sequence_input.hpp"

#include "masque/error.hpp"

namespace masque {

ParamSpec add_special_param() {
  return {.name = "add_special",
          .type = ParamType::boolean,
          .default_value = "true",
          .help =
              "text records get the special tokens the model expects ([CLS] ... [SEP] "
              "(... [SEP]), BOS)"};
}

ParamSpec pair_field_param() {
  return {.name = "pair_field",
          .type = ParamType::string,
          .default_value = "",
          .help =
              "sentence pairs: the TSV column / JSON field holding each record's second text "
              "(token type 1); the first is the run's input field. Empty: single texts"};
}

namespace {

void tokenize_pair(Item& item, const Tokenizer* tokenizer, bool add_special,
                   const std::string& pair_field) {
  const Record& record = item.record;
  if (record.ids)
    throw RecordError("a record given as ids cannot also take a pair field ('" + pair_field +
                      "'): give its token_type_ids instead");
  if (!tokenizer) throw RecordError("the pipeline has no tokenizer for the pair field");
  const auto it = record.fields.find(pair_field);
  if (it == record.fields.end())
    throw RecordError("no field '" + pair_field + "' (task.pair_field) in the record");
  if (!it->is_string())
    throw RecordError("field '" + pair_field + "' (task.pair_field) must be a string");
  Encoding e = tokenizer->encode_pair(record.text, it->get_ref<const std::string&>(), add_special);
  item.tokens = std::move(e.ids);
  item.type_ids = std::move(e.type_ids);
  if (item.type_ids.size() != item.tokens.size()) item.type_ids.assign(item.tokens.size(), 0);
}

}  // namespace

SequenceSpec sequence_input(Item& item, const Tokenizer* tokenizer, const Model& model,
                            const Params& task_params) {
  const bool add_special = task_params.get_bool("add_special");
  const std::string pair_field = task_params.get_string("pair_field");
  if (pair_field.empty())
    tokenize_item(item, tokenizer, &model, add_special);
  else
    tokenize_pair(item, tokenizer, add_special, pair_field);
  if (item.tokens.empty()) throw RecordError("empty record: nothing to run");
  SequenceSpec s;
  s.ids = item.tokens;
  s.record_id = item.record.id;
  s.token_types = int_array_field(item.record, "token_type_ids").value_or(item.type_ids);
  if (s.token_types.size() != s.ids.size())
    throw RecordError("'token_type_ids' has " + std::to_string(s.token_types.size()) +
                      " entries for " + std::to_string(s.ids.size()) + " tokens");
  s.segments = s.token_types;
  check_length(item, s.ids.size(), task_params, model);
  item.cost = s.ids.size();
  return s;
}

const MaskStrategy& sequence_mask(const Plugins& plugins) {
  if (plugins.mask) return *plugins.mask;
  return plugins.held_mask(plugins.model->info().kind == ModelKind::encoder_only ? "bidirectional"
                                                                                 : "causal");
}

}  // namespace masque

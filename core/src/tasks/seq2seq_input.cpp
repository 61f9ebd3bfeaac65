#include "tasks/seq2seq_input.hpp"

#include "masque/error.hpp"

namespace masque {

std::vector<TokenId> target_field(const Record& record, const std::string& name,
                                  const Tokenizer* tokenizer, std::int32_t vocab) {
  std::vector<TokenId> ids;
  auto it = record.fields.find(name);
  if (it == record.fields.end() || it->is_null()) return ids;
  if (it->is_string()) {
    if (it->get<std::string>().empty()) return ids;
    if (!tokenizer) throw RecordError("'" + name + "' is text, but the pipeline has no tokenizer");
    return tokenizer->encode(it->get<std::string>(), false).ids;
  }
  if (!it->is_array())
    throw RecordError("'" + name + "' must be text or an array of ids in 0.." +
                      std::to_string(vocab - 1));
  for (const auto& v : *it) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= vocab)
      throw RecordError("'" + name + "' must be text or an array of ids in 0.." +
                        std::to_string(vocab - 1));
    ids.push_back(v.get<TokenId>());
  }
  return ids;
}

ParamSpec max_input_length_param() {
  return {.name = "max_input_length",
          .type = ParamType::integer,
          .default_value = "0",
          .help =
              "sources longer than this many tokens are truncated (their final special token "
              "kept) and the record says so in a `note` field, instead of failing (0 = no "
              "limit; CTranslate2 max_input_length, whose default is 1024)",
          .min = 0,
          .max = 1e9};
}

std::string truncate_source(Item& item, const Params& task_params, const Tokenizer* tokenizer) {
  const auto limit = static_cast<std::size_t>(task_params.get_int("max_input_length"));
  const std::size_t length = item.tokens.size();
  if (limit == 0 || length <= limit) return "";
  // A model reading `[CLS] source [SEP]` needs its [SEP]: keep a final special token.
  const bool keep_last =
      limit > 1 && tokenizer && !item.record.ids && tokenizer->is_special(item.tokens.back());
  const TokenId last = item.tokens.back();
  item.tokens.resize(limit);
  if (keep_last) item.tokens.back() = last;
  if (!item.type_ids.empty()) item.type_ids.resize(limit);
  return "source truncated from " + std::to_string(length) + " to " + std::to_string(limit) +
         " tokens (max_input_length)";
}

}  // namespace masque

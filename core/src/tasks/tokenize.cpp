// Task `tokenize`: the tokenizer alone — ids, pieces and byte offsets of every record.
#include "masque/error.hpp"
#include "tasks/task.hpp"

namespace masque {

namespace {

class TokenizeTask final : public Task {
 public:
  TokenizeTask(const Tokenizer& tokenizer, bool add_special)
      : tokenizer_(tokenizer), add_special_(add_special) {}

  void prepare(Item& item) const override { item.cost = item.record.text.size(); }

  std::vector<Result> process(std::span<Item* const> batch) const override {
    std::vector<Result> results;
    for (Item* item : batch) {
      try {
        results.push_back(tokenize(*item));
      } catch (const RecordError& e) {
        results.push_back(error_result(item->record.id, e.what()));
      }
    }
    return results;
  }

  std::vector<std::string> tsv_columns() const override { return {"ids", "pieces"}; }

 private:
  Result tokenize(const Item& item) const {
    if (item.record.ids && item.record.text.empty())
      throw RecordError("tokenize needs text, got only ids");
    Encoding e = tokenizer_.encode(item.record.text, add_special_);
    Result r;
    r.id = item.record.id;
    r.object["id"] = item.record.id;
    r.object["ids"] = e.ids;
    r.object["pieces"] = e.pieces;
    auto offsets = nlohmann::ordered_json::array();
    for (const auto& o : e.offsets) offsets.push_back({o.begin, o.end});
    r.object["offsets"] = offsets;
    for (std::size_t i = 0; i < e.pieces.size(); ++i) r.text += (i ? " " : "") + e.pieces[i];
    r.tokens = e.ids.size();
    return r;
  }

  const Tokenizer& tokenizer_;
  bool add_special_;
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<TokenizeTask>(*plugins.tokenizer,
                                        pipeline.task_params.get_bool("add_special"));
}

const TaskRegistration registration({
    .spec = {.name = "tokenize",
             .description = "tokenize each record: {id, ids, pieces, offsets} (byte spans)",
             .params = {{.name = "add_special",
                         .type = ParamType::boolean,
                         .default_value = "true",
                         .help = "add the special tokens the model expects ([CLS]/[SEP], BOS)"}},
             .required_sections = {"tokenizer"},
             .optional_sections = {},
             .default_plugins = {}},
    .create = create,
});

}  // namespace

}  // namespace masque

// Task `plm-generate`: fill the [MASK] positions of a template one at a time, in an order —
// the permutation mask's (left-to-right, right-to-left, random, explicit) or by confidence
// (the most confident position first) — each step conditioned on everything filled before;
// the decoder plugin chooses the token at each step (greedy, sampling, beam).
#include <algorithm>
#include <map>

#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "tasks/plm.hpp"

namespace masque {

namespace {

struct Template {
  std::vector<std::int32_t> slots;  // positions of the [MASK] tokens
  std::vector<std::int32_t> order;  // slot indexes, first to last (unused for confidence)
};

const Template& template_of(const Item& item) {
  return *static_cast<const Template*>(item.data.get());
}

// One row being filled: which record, the tokens so far, and the positions filled so far.
struct Row {
  std::int32_t record = 0;
  std::vector<TokenId> tokens;
  std::vector<std::int32_t> filled;  // positions in fill order
  std::int32_t next = -1;            // position chosen for the current step
};

// Records are the items; with continuous batching (`limits` enabled) they come in as the
// decoder admits them, at most limits.max_rows rows at a time.
class PlmStepper final : public Stepper {
 public:
  PlmStepper(const Model& model, const MaskStrategy& visible, std::span<Item* const> items,
             PlmMethod method, bool confidence, TokenId mask_token,
             const ContinuousLimits& limits = {})
      : model_(model),
        visible_(visible),
        items_(items),
        method_(method),
        confidence_(confidence),
        mask_token_(mask_token),
        limits_(limits) {
    if (!limits_.enabled) add_rows(items.size(), false);
  }

  std::int32_t num_records() const override { return static_cast<std::int32_t>(admitted_); }

  std::int32_t admit(std::int32_t rows_per_record, bool keep_rows) override {
    if (!limits_.enabled) return 0;
    const auto rows = keep_rows ? static_cast<std::int32_t>(rows_.size()) : 0;
    const std::int32_t per_record = std::max(1, rows_per_record);
    const std::int32_t free_rows = limits_.max_rows - rows;
    if (rows > 0 && free_rows < std::max(per_record, limits_.max_rows / 8)) return 0;
    const std::size_t count =
        limits_.admissible(items_.subspan(admitted_), std::max(1, free_rows / per_record));
    if (count > 0) add_rows(count, rows > 0);
    return static_cast<std::int32_t>(count);
  }
  std::int32_t vocab_size() const override { return model_.info().vocab_size; }
  std::uint64_t record_id(std::int32_t r) const override { return items_[r]->record.id; }
  std::span<const TokenId> context(std::int32_t r) const override { return items_[r]->tokens; }
  std::int32_t max_steps(std::int32_t r) const override {
    return static_cast<std::int32_t>(template_of(*items_[r]).slots.size());
  }
  bool fixed_length() const override { return true; }
  std::vector<TokenId> default_end_tokens() const override { return {}; }

  void logits(Tensor& out) override {
    if (method_ == PlmMethod::visible_mask)
      visible_logits(out);
    else
      incremental_logits(out);
    // The positions a path fills depend only on the tokens chosen before: remember them by that
    // prefix (a decoder need not call advance() after the last step).
    for (const Row& row : rows_) {
      std::vector<std::int32_t> positions = row.filled;
      positions.push_back(row.next);
      paths_[row.record][chosen(row)] = std::move(positions);
    }
  }

  void advance(std::span<const TokenId> tokens) override {
    std::vector<std::int32_t> positions(rows_.size()), types(rows_.size());
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      Row& row = rows_[r];
      row.tokens[row.next] = tokens[r];
      row.filled.push_back(row.next);
      positions[r] = row.next;
      types[r] = items_[row.record]->type_ids[row.next];
    }
    if (method_ == PlmMethod::incremental) {
      Tensor unused;
      model_.step(*state_,
                  {.tokens = tokens, .positions = positions, .token_types = types, .append = true},
                  unused);
    }
  }

  void select(std::span<const std::int32_t> rows) override {
    std::vector<Row> picked;
    for (auto r : rows) picked.push_back(rows_[r]);
    rows_ = std::move(picked);
    if (rows.empty())
      state_.reset();  // every row is done: an admission starts a new state
    else if (state_)
      state_->select(rows);
  }

  // Positions filled (in order) by the path that chose `tokens` for `record`.
  const std::vector<std::int32_t>& positions_of(std::int32_t record,
                                                const std::vector<TokenId>& tokens) const {
    auto paths = paths_.find(record);
    if (paths == paths_.end() || tokens.empty())
      throw RuntimeError("plm-generate: no recorded path for a hypothesis");
    auto it = paths->second.find(std::vector<TokenId>(tokens.begin(), tokens.end() - 1));
    if (it == paths->second.end())
      throw RuntimeError("plm-generate: no recorded path for a hypothesis");
    return it->second;
  }

 private:
  std::vector<TokenId> chosen(const Row& row) const {
    std::vector<TokenId> out;
    for (auto p : row.filled) out.push_back(row.tokens[p]);
    return out;
  }

  std::vector<std::int32_t> remaining(const Row& row) const {
    std::vector<std::int32_t> out;
    const Template& t = template_of(*items_[row.record]);
    for (auto p : t.slots)
      if (std::find(row.filled.begin(), row.filled.end(), p) == row.filled.end()) out.push_back(p);
    return out;
  }

  std::int32_t fixed_next(const Row& row) const {
    const Template& t = template_of(*items_[row.record]);
    return t.slots[t.order[row.filled.size()]];
  }

  static double confidence(std::span<const float> logits) {
    float best = logits[0];
    for (float v : logits) best = std::max(best, v);
    return static_cast<double>(best) - decoding::log_sum_exp(logits);
  }

  // Plain BERT: not-yet-filled positions are visible [MASK] tokens; a full forward per step.
  void visible_logits(Tensor& out) {
    std::vector<SequenceSpec> specs(rows_.size());
    std::vector<std::vector<std::int32_t>> candidates(rows_.size());
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      specs[r].ids = rows_[r].tokens;
      specs[r].token_types = items_[rows_[r].record]->type_ids;
      candidates[r] =
          confidence_ ? remaining(rows_[r]) : std::vector<std::int32_t>{fixed_next(rows_[r])};
    }
    BuiltBatch built = build_batch(specs, visible_, model_.info().pad, -1);
    for (std::size_t r = 0; r < rows_.size(); ++r)
      for (auto p : candidates[r])
        built.batch.output_rows.push_back(static_cast<std::int32_t>(r * built.batch.length + p));
    ForwardResult result = model_.forward(built.batch);
    const std::int64_t v = result.logits.dim(-1);
    out = Tensor({static_cast<std::int64_t>(rows_.size()), v});
    std::size_t k = 0;  // first output row of the current row's candidates
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      std::size_t pick = 0;
      double best_conf = -1e300;
      for (std::size_t c = 0; c < candidates[r].size() && candidates[r].size() > 1; ++c) {
        double conf = confidence(tensor_row(result.logits, k + c));
        if (conf > best_conf) best_conf = conf, pick = c;
      }
      rows_[r].next = candidates[r][pick];
      copy_row(result.logits, k + pick, out, r);
      k += candidates[r].size();
    }
  }

  // The next `count` items become records, one row each, after the current rows (`keep`) or
  // in their place.
  void add_rows(std::size_t count, bool keep) {
    if (!keep) rows_.clear();
    for (std::size_t i = admitted_; i < admitted_ + count; ++i)
      rows_.push_back({static_cast<std::int32_t>(i), items_[i]->tokens, {}, -1});
    if (method_ == PlmMethod::incremental) {
      std::unique_ptr<DecodeState> state = prefill(items_.subspan(admitted_, count));
      if (keep)
        state_->append(*state);
      else
        state_ = std::move(state);
    }
    admitted_ += count;
  }

  // Permutation LM with the KV cache: the template's words are context; a query token at the
  // chosen position sees them and everything filled so far.
  std::unique_ptr<DecodeState> prefill(std::span<Item* const> items) const {
    std::vector<SequenceSpec> specs(items.size());
    std::vector<std::vector<std::int32_t>> positions(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      const Template& t = template_of(*items[i]);
      for (std::size_t p = 0; p < items[i]->tokens.size(); ++p) {
        if (std::find(t.slots.begin(), t.slots.end(), static_cast<std::int32_t>(p)) !=
            t.slots.end())
          continue;
        specs[i].ids.push_back(items[i]->tokens[p]);
        specs[i].token_types.push_back(items[i]->type_ids[p]);
        positions[i].push_back(static_cast<std::int32_t>(p));
      }
      if (specs[i].ids.empty())
        throw RecordError(
            "the incremental method needs at least one given token besides the [MASK]s");
    }
    BuiltBatch built = build_batch(specs, visible_, model_.info().pad, -1);
    for (std::size_t i = 0; i < items.size(); ++i)
      for (std::size_t k = 0; k < positions[i].size(); ++k)
        built.batch.positions[i * built.batch.length + k] = positions[i][k];
    return model_.start(built.batch, nullptr);
  }

  void query(const std::vector<std::int32_t>& positions, Tensor& logits) {
    std::vector<TokenId> masks(rows_.size(), mask_token_);
    std::vector<std::int32_t> types(rows_.size());
    for (std::size_t r = 0; r < rows_.size(); ++r)
      types[r] = items_[rows_[r].record]->type_ids[positions[r]];
    model_.step(*state_,
                {.tokens = masks, .positions = positions, .token_types = types, .append = false},
                logits);
  }

  void incremental_logits(Tensor& out) {
    std::vector<std::vector<std::int32_t>> candidates(rows_.size());
    std::size_t most = 0;
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      candidates[r] =
          confidence_ ? remaining(rows_[r]) : std::vector<std::int32_t>{fixed_next(rows_[r])};
      most = std::max(most, candidates[r].size());
    }
    std::vector<double> best(rows_.size(), -1e300);
    Tensor logits;
    for (std::size_t c = 0; c < most; ++c) {
      std::vector<std::int32_t> positions(rows_.size());
      for (std::size_t r = 0; r < rows_.size(); ++r)
        positions[r] = candidates[r][std::min(c, candidates[r].size() - 1)];
      query(positions, logits);
      const std::int64_t v = logits.dim(-1);
      if (out.empty() || out.dim(0) != static_cast<std::int64_t>(rows_.size()))
        out = Tensor({static_cast<std::int64_t>(rows_.size()), v});
      for (std::size_t r = 0; r < rows_.size(); ++r) {
        if (c >= candidates[r].size()) continue;
        double conf = candidates[r].size() == 1 ? 0.0 : confidence(tensor_row(logits, r));
        if (conf > best[r]) {
          best[r] = conf;
          rows_[r].next = positions[r];
          copy_row(logits, r, out, r);
        }
      }
    }
  }

  const Model& model_;
  const MaskStrategy& visible_;  // the given words see each other
  std::span<Item* const> items_;
  PlmMethod method_;
  bool confidence_;
  TokenId mask_token_;
  ContinuousLimits limits_;
  std::size_t admitted_ = 0;  // items that are records so far
  std::vector<Row> rows_;
  std::unique_ptr<DecodeState> state_;
  // record -> tokens chosen so far -> positions filled including the next one
  std::map<std::int32_t, std::map<std::vector<TokenId>, std::vector<std::int32_t>>> paths_;
};

class PlmGenerateTask final : public Task {
 public:
  PlmGenerateTask(const Pipeline& pipeline, const Plugins& plugins)
      : params_(pipeline.task_params),
        model_(*plugins.model),
        tokenizer_(plugins.tokenizer.get()),
        mask_(*plugins.mask),
        visible_(plugins.held_mask("bidirectional")),
        decoder_(*plugins.decoder),
        method_(parse_plm_method(params_.get_string("method"))),
        confidence_(params_.get_string("order_by") == "confidence"),
        limits_(continuous_limits(pipeline.run_params, decoder_)) {
    mask_token_ = require_mask_token(params_, tokenizer_, "plm-generate");
  }

  bool batches_continuously() const override { return limits_.enabled; }

  void prepare(Item& item) const override {
    tokenize_item(item, tokenizer_, &model_, true);
    auto t = std::make_shared<Template>();
    for (std::size_t p = 0; p < item.tokens.size(); ++p)
      if (item.tokens[p] == mask_token_) t->slots.push_back(static_cast<std::int32_t>(p));
    if (t->slots.empty())
      throw RecordError("no [MASK] token (id " + std::to_string(mask_token_) +
                        ") to fill in the record");
    if (!confidence_)
      t->order = resolve_order(mask_, static_cast<std::int32_t>(t->slots.size()),
                               order_field(item.record), item.record.id);
    check_length(item, item.tokens.size(), params_, model_);
    item.cost = item.tokens.size();
    item.data = t;
  }

  std::vector<Result> process(std::span<Item* const> items) const override {
    ContinuousLimits limits = limits_;
    limits.enabled = limits.enabled && items.size() > 1;
    PlmStepper stepper(model_, visible_, items, method_, confidence_, mask_token_, limits);
    std::vector<DecodeResult> decoded = decoder_.decode(stepper);
    if (decoded.size() != items.size())
      throw RuntimeError("the decoder returned " + std::to_string(decoded.size()) +
                         " results for " + std::to_string(items.size()) + " records");
    std::vector<Result> results;
    for (std::size_t i = 0; i < items.size(); ++i) {
      Result r;
      r.id = items[i]->record.id;
      r.object["id"] = r.id;
      auto hypotheses = nlohmann::ordered_json::array();
      for (const Hypothesis& h : decoded.at(i).hypotheses)
        hypotheses.push_back(describe(*items[i], stepper, static_cast<std::int32_t>(i), h));
      const auto& best = hypotheses.front();
      r.object["text"] = best["text"];
      r.object["tokens"] = best["tokens"];
      r.object["infill"] = best["infill"];
      r.object["filled"] = best["filled"];
      r.object["score"] = best["score"];
      if (hypotheses.size() > 1) r.object["hypotheses"] = hypotheses;
      r.text = best["text"].get<std::string>();
      for (const auto& h : hypotheses)
        r.nbest.push_back({h["text"].get<std::string>(), h["score"].get<double>()});
      r.tokens = items[i]->tokens.size();
      results.push_back(std::move(r));
    }
    return results;
  }

  std::vector<std::string> tsv_columns() const override { return {"text", "score"}; }

 private:
  nlohmann::ordered_json describe(const Item& item, const PlmStepper& stepper, std::int32_t record,
                                  const Hypothesis& h) const {
    const auto& positions = stepper.positions_of(record, h.tokens);
    std::vector<TokenId> tokens = item.tokens;
    std::vector<std::pair<std::int32_t, TokenId>> infill;
    auto filled = nlohmann::ordered_json::array();
    for (std::size_t s = 0; s < positions.size(); ++s) {
      tokens[positions[s]] = h.tokens[s];
      infill.emplace_back(positions[s], h.tokens[s]);
      nlohmann::ordered_json f;
      f["position"] = positions[s];
      f["id"] = h.tokens[s];
      f["token"] = tokenizer_ ? tokenizer_->id_to_piece(h.tokens[s]) : std::to_string(h.tokens[s]);
      if (s < h.logprobs.size()) f["logprob"] = h.logprobs[s];
      filled.push_back(std::move(f));
    }
    nlohmann::ordered_json j;
    j["text"] = detokenize(tokenizer_, tokens);
    j["tokens"] = tokens;
    std::sort(infill.begin(), infill.end());
    std::vector<TokenId> infill_tokens;
    for (const auto& [position, token] : infill) infill_tokens.push_back(token);
    j["infill"] = detokenize(tokenizer_, infill_tokens);
    j["filled"] = std::move(filled);
    j["score"] = h.score;
    return j;
  }

  const Params& params_;
  const Model& model_;
  const Tokenizer* tokenizer_;
  const MaskStrategy& mask_;
  const MaskStrategy& visible_;
  const Decoder& decoder_;
  PlmMethod method_;
  bool confidence_;
  ContinuousLimits limits_;
  TokenId mask_token_ = -1;
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<PlmGenerateTask>(pipeline, plugins);
}

const TaskRegistration registration({
    .spec =
        {.name = "plm-generate",
         .description =
             "fill the [MASK] positions of each template one at a time, in the "
             "permutation mask's order or most-confident first, with any decoder: "
             "{id, text, tokens, infill (the filled tokens in position order, as text), filled: "
             "[{position, id, token, logprob}], score}",
         .params =
             {{.name = "method",
               .type = ParamType::string,
               .default_value = "visible-mask",
               .help = "visible-mask: not-yet-filled positions are visible [MASK] tokens (plain "
                       "BERT checkpoints); incremental: permutation LM with the KV cache — a query "
                       "token at the next position sees the given words and the filled ones "
                       "(plm-score's query-stream scores every position in one pass; generation "
                       "fills one per step)",
               .choices = "visible-mask|incremental"},
              {.name = "order_by",
               .type = ParamType::string,
               .default_value = "mask",
               .help = "mask: the permutation mask's order over the [MASK] positions (or a "
                       "record's `order`); confidence: the position whose best token is most "
                       "probable first",
               .choices = "mask|confidence"},
              mask_token_param()},
         .required_sections = {"model", "mask", "decoder"},
         .optional_sections = {"tokenizer"},
         .default_plugins = {{"mask", "permutation"}},
         .model_kinds = {ModelKind::encoder_only},
         .held_masks = {"bidirectional"}},
    .create = create,
});

}  // namespace

}  // namespace masque

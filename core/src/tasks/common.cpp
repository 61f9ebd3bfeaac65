#include "tasks/common.hpp"

#include "run/stream.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "masque/decoding.hpp"
#include "masque/error.hpp"

namespace masque {

void tokenize_item(Item& item, const Tokenizer* tokenizer, const Model* model, bool add_special) {
  const Record& record = item.record;
  if (record.ids) {
    item.tokens = *record.ids;
    if (model) {
      // The input vocabulary: an encoder-decoder's source side, else the only one.
      const ModelInfo& info = model->info();
      const std::int32_t vocab =
          info.source_vocab_size > 0 ? info.source_vocab_size : info.vocab_size;
      for (TokenId id : item.tokens)
        if (id >= vocab)
          throw RecordError("token id " + std::to_string(id) +
                            " is out of the model's vocabulary (" + std::to_string(vocab) +
                            " ids)");
    }
    item.type_ids.assign(item.tokens.size(), 0);
    return;
  }
  if (!tokenizer)
    throw RecordError("the pipeline has no tokenizer: give records as ids (--input-format ids)");
  if (record.text.empty() && record.fields.contains("messages"))
    throw RecordError(
        "a \"messages\" record is a conversation: it needs lm-generate with task.chat: true "
        "(--chat), which renders it with the model's chat template");
  Encoding e = tokenizer->encode(record.text, add_special);
  item.tokens = std::move(e.ids);
  item.type_ids = std::move(e.type_ids);
  if (item.type_ids.size() != item.tokens.size()) item.type_ids.assign(item.tokens.size(), 0);
}

void check_length(const Item& item, std::size_t tokens, const Params& task_params,
                  const Model& model) {
  auto limit = static_cast<std::size_t>(task_params.get_int("max_record_tokens"));
  const char* what = "max_record_tokens";
  const auto model_max = static_cast<std::size_t>(model.info().max_positions);
  if (limit == 0 || (model_max > 0 && limit > model_max)) {
    limit = model_max;
    what = "the model's maximum positions";
  }
  if (limit == 0 || tokens <= limit) return;
  // Some layouts take more positions than the record has tokens (plm's query stream, a
  // seq2seq source and target): say both.
  const std::string size = tokens == item.tokens.size()
                               ? std::to_string(tokens) + " tokens"
                               : std::to_string(item.tokens.size()) + " tokens and needs " +
                                     std::to_string(tokens) + " positions";
  throw RecordError("the record has " + size + ", more than " + what + " (" +
                    std::to_string(limit) + ")");
}

std::vector<std::int32_t> order_field(const Record& record) {
  auto order = int_array_field(record, "order");
  if (order && order->empty())
    throw RecordError(
        "'order' is an empty array: give a position for every token, or leave the "
        "field out for the mask's order");
  return order.value_or(std::vector<std::int32_t>{});
}

std::optional<std::vector<std::int32_t>> int_array_field(const Record& record, const char* name) {
  auto it = record.fields.find(name);
  if (it == record.fields.end() || it->is_null()) return std::nullopt;
  if (!it->is_array())
    throw RecordError(std::string("'") + name + "' must be an array of integers");
  std::vector<std::int32_t> out;
  for (const auto& v : *it) {
    // get<int32_t> would wrap larger values silently (4294967296 -> 0).
    if (!v.is_number_integer() || v.get<std::int64_t>() < INT32_MIN ||
        v.get<std::int64_t>() > INT32_MAX)
      throw RecordError(std::string("'") + name + "' must be an array of 32-bit integers");
    out.push_back(v.get<std::int32_t>());
  }
  return out;
}

ParamSpec mask_token_param() {
  return {.name = "mask_token_id",
          .type = ParamType::integer,
          .default_value = "-1",
          .help =
              "id of the [MASK] token, also fed as the query token of the query-stream mask "
              "(-1 = the tokenizer's [MASK])",
          .min = -1};
}

TokenId mask_token(const Params& task_params, const Tokenizer* tokenizer) {
  const std::int64_t id = task_params.get_int("mask_token_id");
  if (id >= 0) return static_cast<TokenId>(id);
  return tokenizer ? tokenizer->special_tokens().mask : -1;
}

TokenId require_mask_token(const Params& task_params, const Tokenizer* tokenizer,
                           const char* task) {
  const TokenId id = mask_token(task_params, tokenizer);
  if (id < 0)
    throw ConfigError(std::string(task) +
                      " needs a [MASK] token: a tokenizer that has one, or task.mask_token_id");
  return id;
}

BuiltBatch build_batch(std::span<const SequenceSpec> sequences, const MaskStrategy& mask,
                       TokenId pad_token, TokenId query_token) {
  std::vector<SequenceMask> masks;
  masks.reserve(sequences.size());
  for (const SequenceSpec& s : sequences) {
    MaskRequest request;
    request.length = static_cast<std::int32_t>(s.ids.size());
    request.segments = s.segments;
    request.order = s.order;
    request.record_id = s.record_id;
    masks.push_back(mask.build(request));
  }
  return assemble_batch(sequences, std::move(masks), pad_token, query_token);
}

BuiltBatch assemble_batch(std::span<const SequenceSpec> sequences, std::vector<SequenceMask> masks,
                          TokenId pad_token, TokenId query_token) {
  BuiltBatch built;
  built.masks = std::move(masks);
  std::size_t longest = 0;
  for (const auto& m : built.masks) longest = std::max(longest, m.size());
  Batch& b = built.batch;
  b.batch = static_cast<std::int32_t>(sequences.size());
  b.length = static_cast<std::int32_t>(longest);
  const std::size_t total = sequences.size() * longest;
  b.ids.assign(total, std::max(pad_token, 0));
  b.positions.assign(total, 0);
  b.token_types.assign(total, 0);
  b.attention.reset(b.batch, b.length);
  for (std::size_t r = 0; r < sequences.size(); ++r) {
    const SequenceSpec& s = sequences[r];
    const SequenceMask& m = built.masks[r];
    const std::size_t base = r * longest, n = s.ids.size();
    if (m.size() != n + m.query_positions.size())
      throw RuntimeError("mask strategy returned " + std::to_string(m.size()) +
                         " tokens for a sequence of " + std::to_string(n) + " tokens and " +
                         std::to_string(m.query_positions.size()) + " queries");
    for (std::size_t t = 0; t < n; ++t) {
      b.ids[base + t] = s.ids[t];
      b.positions[base + t] = static_cast<std::int32_t>(t);
      if (!s.token_types.empty()) b.token_types[base + t] = s.token_types[t];
    }
    for (std::size_t q = 0; q < m.query_positions.size(); ++q) {
      if (query_token < 0)
        throw RecordError(
            "the mask strategy appends query tokens, but there is no [MASK] token to feed them");
      const auto p = static_cast<std::size_t>(m.query_positions[q]);
      b.ids[base + n + q] = query_token;
      b.positions[base + n + q] = static_cast<std::int32_t>(p);
      if (!s.token_types.empty() && p < n) b.token_types[base + n + q] = s.token_types[p];
    }
    b.attention.set_row(static_cast<std::int32_t>(r), m);
  }
  return built;
}

std::span<const float> tensor_row(const Tensor& tensor, std::size_t row) {
  const auto width = static_cast<std::size_t>(tensor.dim(-1));
  return {tensor.f32() + row * width, width};
}

void copy_row(const Tensor& from, std::size_t row, Tensor& to, std::size_t to_row) {
  const auto width = static_cast<std::size_t>(from.dim(-1));
  std::copy_n(from.f32() + row * width, width, to.f32() + to_row * width);
}

double token_logprob(std::span<const float> logits, TokenId id) {
  if (id < 0 || static_cast<std::size_t>(id) >= logits.size())
    throw RecordError("token id " + std::to_string(id) + " is outside the vocabulary of " +
                      std::to_string(logits.size()));
  return static_cast<double>(logits[id]) - decoding::log_sum_exp(logits);
}

std::string detokenize(const Tokenizer* tokenizer, std::span<const TokenId> ids) {
  if (tokenizer) return tokenizer->decode(ids, true);
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

namespace {

// Rows `rows` of recorded attention [heads, old rows, queries, keys].
Tensor select_attention_rows(const Tensor& probs, std::span<const std::int32_t> rows) {
  const std::int64_t heads = probs.dim(0), old_rows = probs.dim(1);
  const std::int64_t width = probs.dim(2) * probs.dim(3);
  Tensor out({heads, static_cast<std::int64_t>(rows.size()), probs.dim(2), probs.dim(3)});
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const float* from = probs.f32() + (h * old_rows + rows[r]) * width;
      std::copy(from, from + width, out.f32() + (h * std::int64_t(rows.size()) + r) * width);
    }
  return out;
}

TokenConstraint::State start_state(const StepperRecord& record) {
  return record.constraint ? record.constraint->start() : 0;
}

}  // namespace

ModelStepper::ModelStepper(const Model& model, std::unique_ptr<DecodeState> state, Tensor logits,
                           std::vector<StepperRecord> records, std::vector<TokenId> end_tokens,
                           TokenId start_token, std::int32_t step_token_type,
                           const AttentionRecording* record, Tensor attention)
    : model_(model),
      state_(std::move(state)),
      logits_(std::move(logits)),
      records_(std::move(records)),
      end_tokens_(std::move(end_tokens)),
      step_token_type_(step_token_type),
      record_(record),
      attention_(std::move(attention)) {
  row_records_.resize(records_.size());
  for (std::size_t r = 0; r < records_.size(); ++r) {
    row_records_[r] = static_cast<std::int32_t>(r);
    restricted_ = restricted_ || !records_[r].allowed.empty();
    row_states_.push_back(start_state(records_[r]));
  }
  if (start_token >= 0) {
    std::vector<TokenId> start(records_.size(), start_token);
    step(start);  // not a chosen token: not streamed
  }
}

void ModelStepper::advance(std::span<const TokenId> tokens) {
  // --stream: one row per record while a greedy or sampling decoder keeps one hypothesis.
  if (StreamSink* stream = StreamSink::active(); stream && !forked_) {
    std::vector<std::uint64_t> ids(row_records_.size());
    for (std::size_t row = 0; row < ids.size(); ++row)
      ids[row] = records_[static_cast<std::size_t>(row_records_[row])].id;
    stream->tokens(ids, tokens);
  }
  for (std::size_t row = 0; row < tokens.size() && row < row_records_.size(); ++row)
    if (const auto& c = records_[static_cast<std::size_t>(row_records_[row])].constraint)
      row_states_[row] = c->advance(row_states_[row], tokens[row]);
  step(tokens);
}

void ModelStepper::step(std::span<const TokenId> tokens) {
  StepInput input;
  input.tokens = tokens;
  if (step_token_type_ >= 0) {
    types_.assign(tokens.size(), step_token_type_);
    input.token_types = types_;
  }
  input.record_attention = record_;
  model_.step(*state_, input, logits_);
  if (tally_) tally_->add(tokens.size());
  if (record_) attention_ = record_->probs->clone();
}

void ModelStepper::logits(Tensor& out) {
  if (restricted_ && !logits_.empty()) {
    const auto width = static_cast<std::size_t>(logits_.dim(-1));
    for (std::size_t row = 0; row < row_records_.size(); ++row) {
      const auto& allowed = records_[static_cast<std::size_t>(row_records_[row])].allowed;
      float* values = logits_.f32() + row * width;
      for (std::size_t id = 0; id < allowed.size() && id < width; ++id)
        if (!allowed[id]) values[id] = std::numeric_limits<float>::lowest();
    }
  }
  if (!logits_.empty()) {
    const auto width = static_cast<std::size_t>(logits_.dim(-1));
    for (std::size_t row = 0; row < row_records_.size(); ++row)
      if (const auto& c = records_[static_cast<std::size_t>(row_records_[row])].constraint)
        c->mask(row_states_[row], {logits_.f32() + row * width, width});
  }
  out = logits_;
}

void ModelStepper::select(std::span<const std::int32_t> rows) {
  if (rows.empty()) {  // every row is done: the next admission starts a new state
    state_.reset();
    row_records_.clear();
    row_states_.clear();
    logits_ = Tensor();
    attention_ = Tensor();
    return;
  }
  std::vector<std::int32_t> records(rows.size());
  std::vector<TokenConstraint::State> states(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    records[i] = row_records_[rows[i]];
    states[i] = row_states_[rows[i]];
  }
  row_records_ = std::move(records);
  row_states_ = std::move(states);
  state_->select(rows);
  if (!attention_.empty()) attention_ = select_attention_rows(attention_, rows);
  if (logits_.empty()) return;
  gather_rows(logits_, rows, spare_);  // spare_ is reused: no allocation per step
  std::swap(logits_, spare_);
}

std::int32_t ModelStepper::admit(std::int32_t rows_per_record, bool keep_rows) {
  if (!admission_.next) return 0;
  const auto rows = keep_rows ? static_cast<std::int32_t>(row_records_.size()) : 0;
  const std::int32_t per_record = std::max(1, rows_per_record);
  // Joining copies the whole cache: wait until an eighth of the rows (or a record's) is free.
  const std::int32_t free_rows = admission_.max_rows - rows;
  if (rows > 0 && free_rows < std::max(per_record, admission_.max_rows / 8)) return 0;
  if (rows > 0 && !state_->can_append()) return 0;
  // A record wider than the row limit still runs, alone.
  const std::int32_t room = std::max(1, free_rows / per_record);
  AdmittedRecords in = admission_.next(room);
  const auto count = static_cast<std::int32_t>(in.records.size());
  if (count == 0) return 0;
  if (rows == 0) {
    state_ = std::move(in.state);
    logits_ = std::move(in.logits);
    row_records_.clear();
    row_states_.clear();
    attention_ = Tensor();
  } else {
    state_->append(*in.state);
    const std::int64_t width = logits_.dim(1);
    Tensor joined({std::int64_t{rows} + count, width});
    std::memcpy(joined.f32(), logits_.f32(), sizeof(float) * rows * width);
    std::memcpy(joined.f32() + rows * width, in.logits.f32(), sizeof(float) * count * width);
    logits_ = std::move(joined);
  }
  for (StepperRecord& record : in.records) {
    restricted_ = restricted_ || !record.allowed.empty();
    row_records_.push_back(static_cast<std::int32_t>(records_.size()));
    row_states_.push_back(start_state(record));
    records_.push_back(std::move(record));
  }
  return count;
}

std::size_t ContinuousLimits::admissible(std::span<Item* const> items, std::int32_t room) const {
  std::size_t count = 0, longest = 0;
  while (count < items.size() && count < static_cast<std::size_t>(std::max(room, 1))) {
    const std::size_t padded = std::max(longest, items[count]->cost);
    if (count > 0 && padded * (count + 1) > max_tokens) break;
    longest = padded;
    ++count;
  }
  return count;
}

AdmissionQueue::AdmissionQueue(std::span<Item* const> items, const ContinuousLimits& limits,
                               Start start)
    : items_(items), limits_(limits), start_(std::move(start)) {}

AdmittedRecords AdmissionQueue::next(std::int32_t room) {
  if (left_ == 0) {
    const std::size_t count = limits_.admissible(items_.subspan(started_), limits_.max_rows);
    if (count == 0) return {};
    std::vector<Item*> reversed(items_.begin() + static_cast<std::ptrdiff_t>(started_),
                                items_.begin() + static_cast<std::ptrdiff_t>(started_ + count));
    std::reverse(reversed.begin(), reversed.end());
    started_ += count;
    started_batch_ = start_(reversed);
    left_ = static_cast<std::int32_t>(count);
  }
  const std::int32_t take = std::clamp(room, 1, left_);
  std::vector<std::int32_t> rows(static_cast<std::size_t>(take));
  for (std::int32_t i = 0; i < take; ++i) rows[i] = left_ - 1 - i;  // input order
  AdmittedRecords out;
  out.state = started_batch_.state->split(rows);
  const std::int64_t width = started_batch_.logits.dim(1);
  out.logits = Tensor({take, width});
  for (std::int32_t i = 0; i < take; ++i)
    std::memcpy(out.logits.f32() + i * width, started_batch_.logits.f32() + rows[i] * width,
                sizeof(float) * width);
  for (std::int32_t r : rows) out.records.push_back(std::move(started_batch_.records[r]));
  started_batch_.records.resize(static_cast<std::size_t>(left_ - take));
  left_ -= take;
  admitted_ += static_cast<std::size_t>(take);
  if (left_ == 0) started_batch_ = AdmittedRecords();
  return out;
}

std::vector<DecodeResult> decode_continuously(const Decoder& decoder, ModelStepper& stepper,
                                              std::span<Item* const> items,
                                              const ContinuousLimits& limits,
                                              AdmissionQueue::Start start) {
  AdmissionQueue queue(items, limits, std::move(start));
  stepper.set_admission(
      {.max_rows = limits.max_rows, .next = [&](std::int32_t room) { return queue.next(room); }});
  std::vector<DecodeResult> decoded = decoder.decode(stepper);
  if (queue.admitted() != items.size())
    throw RuntimeError("the decoder stopped admitting records (" +
                       std::to_string(queue.admitted()) + " of " + std::to_string(items.size()) +
                       " decoded)");
  return decoded;
}

ContinuousLimits continuous_limits(const Params& run) {
  ContinuousLimits limits;
  if (!run.has("batching") || !run.has("max_batch_size")) return limits;  // no run section
  limits.enabled = run.get_string("batching") == "continuous";
  limits.max_rows = static_cast<std::int32_t>(run.get_int("max_batch_size"));
  limits.max_tokens = static_cast<std::size_t>(run.get_int("max_batch_tokens"));
  return limits;
}

ContinuousLimits continuous_limits(const Params& run, const Decoder& decoder) {
  ContinuousLimits limits = continuous_limits(run);
  limits.enabled = limits.enabled && decoder.admits_records();
  return limits;
}

nlohmann::ordered_json StepTally::summary() const {
  const std::uint64_t steps = steps_.load(), rows = rows_.load();
  return {{"decoding_steps", steps},
          {"decoded_rows", rows},
          {"rows_per_step", steps ? static_cast<double>(rows) / static_cast<double>(steps) : 0.0}};
}

nlohmann::ordered_json StepTally::state() const {
  return {{"decoding_steps", steps_.load()}, {"decoded_rows", rows_.load()}};
}

void StepTally::merge(const nlohmann::ordered_json& state) {
  steps_ += state.value("decoding_steps", std::uint64_t{0});
  rows_ += state.value("decoded_rows", std::uint64_t{0});
}

AdmittedRecords ModelStepper::release() && {
  AdmittedRecords out;
  out.state = std::move(state_);
  out.logits = std::move(logits_);
  out.records = std::move(records_);
  return out;
}

std::unique_ptr<Stepper> ModelStepper::fork() const {
  auto copy = std::make_unique<ModelStepper>(
      model_, state_->fork(), logits_.empty() ? Tensor() : logits_.clone(), records_, end_tokens_,
      -1, step_token_type_, record_, attention_.empty() ? Tensor() : attention_.clone());
  copy->row_records_ = row_records_;
  copy->row_states_ = row_states_;
  copy->forked_ = true;  // a search's private branch: its tokens are not the output's
  copy->tally_ = tally_;
  return copy;
}

bool ModelStepper::stops(std::int32_t record, std::span<const TokenId> tokens) const {
  const StopStrings* s = records_[record].stops.get();
  return s && s->matches(tokens);
}

void add_hypotheses(Result& result, const DecodeResult& decoded, const Tokenizer* tokenizer,
                    bool with_logprobs, const StopStrings* stops) {
  if (decoded.hypotheses.empty()) throw RuntimeError("the decoder returned no hypothesis");
  const auto text_of = [&](const Hypothesis& h) { return hypothesis_text(h, tokenizer, stops); };
  const Hypothesis& best = decoded.hypotheses.front();
  result.text = text_of(best);
  result.object["text"] = result.text;
  result.object["tokens"] = best.tokens;
  result.object["score"] = best.score;
  if (with_logprobs) result.object["token_logprobs"] = best.logprobs;
  if (decoded.hypotheses.size() > 1) {
    auto list = nlohmann::ordered_json::array();
    for (const Hypothesis& h : decoded.hypotheses) {
      nlohmann::ordered_json j;
      j["text"] = text_of(h);
      j["tokens"] = h.tokens;
      j["score"] = h.score;
      if (with_logprobs) j["token_logprobs"] = h.logprobs;
      list.push_back(j);
      result.nbest.push_back({j["text"].get<std::string>(), h.score});
    }
    result.object["hypotheses"] = list;
  } else {
    result.nbest.push_back({result.text, best.score});
  }
  result.tokens += best.tokens.size();
}

std::string hypothesis_text(const Hypothesis& h, const Tokenizer* tokenizer,
                            const StopStrings* stops) {
  std::string text = detokenize(tokenizer, h.tokens);
  return stops ? std::string(stops->cut(text)) : text;
}

std::shared_ptr<const TokenConstraint> bind_constraint(const Plugins& plugins,
                                                       const Tokenizer* tokenizer,
                                                       const Params& decoder_params,
                                                       std::vector<TokenId> default_end_tokens) {
  if (!plugins.constraint) return nullptr;
  if (!tokenizer)
    throw ConfigError(
        "constraint: needs a tokenizer (a grammar is over the output's text, and this pipeline "
        "has none)");
  std::vector<TokenId> ends = default_end_tokens;
  if (decoder_params.has("end_tokens")) {
    const auto& own = decoder_params.get_int_list("end_tokens");
    if (!own.empty()) ends.assign(own.begin(), own.end());
  }
  return plugins.constraint->bind(*tokenizer, ends);
}

DecodeResult valid_hypotheses(const DecodeResult& decoded, const Tokenizer* tokenizer,
                              const StopStrings* stops, const TokenConstraint* constraint) {
  if (!constraint) return decoded;
  DecodeResult out;
  std::string why;
  for (const Hypothesis& h : decoded.hypotheses) {
    const std::string text = hypothesis_text(h, tokenizer, stops);
    std::string problem = constraint->check(text);
    if (problem.empty()) {
      out.hypotheses.push_back(h);
    } else if (why.empty()) {  // the best hypothesis': what it had written, its end at most
      std::size_t from = text.size() > 80 ? text.size() - 80 : 0;
      while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
      why = problem + "; after " + std::to_string(h.tokens.size()) + " tokens it ends \"" +
            (from ? "..." : "") + text.substr(from) + "\"";
    }
  }
  if (out.hypotheses.empty()) throw RecordError("constraint: " + why);
  return out;
}

}  // namespace masque

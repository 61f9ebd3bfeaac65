#include "masque/train/objective.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "io/records.hpp"
#include "masque/error.hpp"
#include "masque/random.hpp"
#include "tasks/common.hpp"

namespace masque::train {

ObjectiveKind parse_objective(const std::string& name) {
  if (name == "causal-lm") return ObjectiveKind::causal_lm;
  if (name == "mlm") return ObjectiveKind::mlm;
  if (name == "seq2seq") return ObjectiveKind::seq2seq;
  if (name == "plm") return ObjectiveKind::plm;
  if (name == "classify") return ObjectiveKind::classify;
  if (name == "diffusion") return ObjectiveKind::diffusion;
  throw ConfigError(
      "objective: expected causal-lm, mlm, seq2seq, plm, classify or diffusion, got '" + name +
      "'");
}

const char* to_string(ObjectiveKind kind) {
  switch (kind) {
    case ObjectiveKind::causal_lm:
      return "causal-lm";
    case ObjectiveKind::mlm:
      return "mlm";
    case ObjectiveKind::seq2seq:
      return "seq2seq";
    case ObjectiveKind::plm:
      return "plm";
    case ObjectiveKind::classify:
      return "classify";
    case ObjectiveKind::diffusion:
      return "diffusion";
  }
  return "?";
}

namespace {

bool encoder_decoder(const ModelInfo& info) {
  return info.kind == ModelKind::encoder_decoder;
}

// The number of positions of an n-token order that are predicted.
std::size_t predicted_count(const ObjectiveOptions& o, std::size_t n) {
  if (o.plm_predict > 0) return std::min<std::size_t>(n, static_cast<std::size_t>(o.plm_predict));
  const auto k = static_cast<std::size_t>(std::lround(o.plm_fraction * static_cast<double>(n)));
  return std::clamp<std::size_t>(k, 1, n);
}

// classify: the record's label as an index of options.labels (a name, or an index given as a
// number). RecordError when missing or unknown.
std::int32_t label_index(const Record& record, const ObjectiveOptions& o) {
  const auto it = record.fields.find(o.label_field);
  if (it == record.fields.end()) throw RecordError("no '" + o.label_field + "' field (the label)");
  if (it->is_number_integer()) {
    const std::int64_t i = it->get<std::int64_t>();
    if (i < 0 || i >= static_cast<std::int64_t>(o.labels.size()))
      throw RecordError("label " + std::to_string(i) + " is outside the model's " +
                        std::to_string(o.labels.size()) + " labels");
    return static_cast<std::int32_t>(i);
  }
  if (!it->is_string())
    throw RecordError("field '" + o.label_field + "' must be a label name or index");
  const auto& name = it->get_ref<const std::string&>();
  const auto found = std::find(o.labels.begin(), o.labels.end(), name);
  // An index written as text (a TSV column) when no label has that name.
  std::int32_t index = -1;
  if (found == o.labels.end() && !name.empty() && name.size() < 10 &&
      std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      (index = std::stoi(name)) < static_cast<std::int32_t>(o.labels.size()))
    return index;
  if (found == o.labels.end())
    throw RecordError("unknown label '" + name + "' (config.json's id2label has " +
                      std::to_string(o.labels.size()) + " labels)");
  return static_cast<std::int32_t>(found - o.labels.begin());
}

// Whether `ids` hold a token that is not one of the tokenizer's specials.
bool has_content(const std::vector<TokenId>& ids, const Tokenizer& tokenizer) {
  return std::any_of(ids.begin(), ids.end(), [&](TokenId t) { return !tokenizer.is_special(t); });
}

// What a strategy needs to know of a sequence with no segments and no order of its own.
MaskRequest sequence_request(std::size_t length, std::uint64_t record) {
  MaskRequest r;
  r.length = static_cast<std::int32_t>(length);
  r.record_id = record;
  return r;
}

// The probe layout of a short sequence under the objective's mask; a strategy that cannot build
// it (e.g. the seq2seq mask without segments) does not suit the objective.
SequenceMask probe(const MaskStrategy& mask, const MaskRequest& request, const char* objective) {
  try {
    return mask.build(request);
  } catch (const std::exception& e) {
    throw ConfigError(std::string("objective ") + objective +
                      ": the mask strategy cannot lay out its records: " + e.what());
  }
}

// Rows from `first` on predict the next token: under a mask that lets such a row see a later
// token the model learns to copy it, so refuse it before training.
void check_no_lookahead(const MaskStrategy& mask, const MaskRequest& request, std::size_t first,
                        const char* objective, const char* masks) {
  const SequenceMask m = probe(mask, request, objective);
  const auto n = static_cast<std::size_t>(request.length);
  for (std::size_t p = first; p + 1 < n; ++p)
    for (std::size_t q = p + 1; q < n; ++q)
      if (m.allowed(p, q))
        throw ConfigError(std::string("objective ") + objective + ": under this mask token " +
                          std::to_string(p) + " sees token " + std::to_string(q) +
                          ", which is predicted after it, so the model would learn to copy it "
                          "(mask: " +
                          masks + ")");
}

}  // namespace

Objective::Objective(ObjectiveOptions options, const Tokenizer& source, const Tokenizer* target,
                     ObjectiveMasks masks, const ModelInfo& model)
    : options_(std::move(options)),
      source_(source),
      target_(target ? *target : source),
      masks_(masks),
      model_(model) {
  const SpecialTokens& special = source_.special_tokens();
  sep_ = special.sep;
  mask_token_ = special.mask;
  pad_ = std::max<TokenId>(model.pad, 0);
  decoder_start_ = model.decoder_start >= 0 ? model.decoder_start : model.bos;
  eos_ = model.eos >= 0 ? model.eos : target_.special_tokens().eos;
  empty_source_ = source_.encode("", true).ids.size();
  const char* name = to_string(options_.kind);
  if (encoder_decoder(model_)) {
    if (options_.kind != ObjectiveKind::seq2seq)
      throw ConfigError(std::string("objective ") + name +
                        ": an encoder-decoder model trains with objective seq2seq");
    if (!masks_.inputs || !masks_.source)
      throw ConfigError(
          "objective seq2seq: an encoder-decoder needs a source (bidirectional) and "
          "a target (causal) mask strategy");
    if (decoder_start_ < 0 || eos_ < 0)
      throw ConfigError(
          "objective seq2seq: the encoder-decoder has no decoder start or end token "
          "(decoder_start_token_id / eos_token_id in config.json)");
    check_no_lookahead(*masks_.inputs, sequence_request(4, 0), 0, name, "causal");
    return;
  }
  if (!masks_.inputs)
    throw ConfigError(std::string("objective ") + name + " needs a mask strategy");
  if (options_.kind == ObjectiveKind::seq2seq && sep_ < 0)
    throw ConfigError(
        "objective seq2seq on one model needs a [SEP] token in the tokenizer (it "
        "ends the target, as at inference)");
  if ((options_.kind == ObjectiveKind::mlm || options_.kind == ObjectiveKind::plm ||
       options_.kind == ObjectiveKind::diffusion) &&
      mask_token_ < 0)
    throw ConfigError(std::string("objective ") + name + " needs a [MASK] token in the tokenizer");
  if (options_.kind == ObjectiveKind::mlm &&
      !(options_.mlm_probability > 0 && options_.mlm_probability <= 1))
    throw ConfigError(
        "task.mlm_probability: must be in (0, 1] (objective mlm chooses that share "
        "of the tokens)");
  if (options_.kind == ObjectiveKind::classify &&
      options_.labels.size() != static_cast<std::size_t>(model_.vocab_size))
    throw ConfigError("objective classify: the model's head has " +
                      std::to_string(model_.vocab_size) + " outputs for " +
                      std::to_string(options_.labels.size()) +
                      " labels (config.json's id2label); the folder's config.json must name a "
                      "*ForSequenceClassification architecture and its labels");
  if (options_.kind == ObjectiveKind::diffusion &&
      !(options_.diffusion_eps >= 0 && options_.diffusion_eps < 1))
    throw ConfigError(
        "task.diffusion_eps: must be in [0, 1) (the masking ratio t is drawn from (eps, 1])");
  if (options_.kind == ObjectiveKind::plm && options_.plm_predict <= 0 &&
      !(options_.plm_fraction > 0 && options_.plm_fraction <= 1))
    throw ConfigError("task.plm_fraction: must be in (0, 1] (or set task.plm_predict)");
  check_mask();
}

void Objective::check_mask() const {
  const char* name = to_string(options_.kind);
  switch (options_.kind) {
    case ObjectiveKind::causal_lm:
      check_no_lookahead(*masks_.inputs, sequence_request(4, 0), 0, name, "causal");
      break;
    case ObjectiveKind::seq2seq: {
      // [CLS] source [SEP] | target [SEP]: rows from the source's last token predict.
      const std::int32_t segments[] = {0, 0, 1, 1, 1};
      MaskRequest request = sequence_request(5, 0);
      request.segments = segments;
      check_no_lookahead(*masks_.inputs, request, 1, name, "seq2seq or causal");
      break;
    }
    case ObjectiveKind::plm: {
      MaskRequest request = sequence_request(4, 0);
      request.query_stream = true;
      const SequenceMask m = probe(*masks_.inputs, request, name);
      if (m.query_positions.empty() || m.rank.size() != 4 + m.query_positions.size())
        throw ConfigError(
            "objective plm needs a mask strategy with a query stream (mask: {plugin: "
            "permutation})");
      break;
    }
    case ObjectiveKind::diffusion: {
      // A mask with a query stream for the noised copy (block-causal) must not show a copy
      // its own clean token; any mask without one works, as the noise replaces the token.
      const std::int32_t segments[] = {0, 0, 1, 1, 1};
      MaskRequest request = sequence_request(5, 0);
      request.segments = segments;
      request.query_stream = true;
      const SequenceMask m = probe(*masks_.inputs, request, name);
      for (std::size_t q = 0; q < m.query_positions.size(); ++q)
        if (m.allowed(5 + q, static_cast<std::size_t>(m.query_positions[q])))
          throw ConfigError("objective diffusion: under this mask the noised copy of token " +
                            std::to_string(m.query_positions[q]) +
                            " sees its clean token, so the model would learn to copy it (mask: "
                            "bidirectional or block-causal)");
      break;
    }
    case ObjectiveKind::mlm:
    case ObjectiveKind::classify:
      break;  // any mask: what is predicted is not an input token seen later
  }
}

std::vector<TokenId> Objective::tokens_of(const Record& record, const std::string& field,
                                          const Tokenizer& tokenizer, bool add_special) const {
  if (field == "text" && record.ids) return *record.ids;
  if (field == "text" && !record.fields.contains("text"))
    return tokenizer.encode(record.text, add_special).ids;
  const auto it = record.fields.find(field);
  if (it == record.fields.end()) throw RecordError("no '" + field + "' field");
  if (!it->is_string()) throw RecordError("field '" + field + "' must be a string");
  const std::string& text = it->get_ref<const std::string&>();
  if (!is_valid_utf8(text))
    throw RecordError("invalid UTF-8 at byte " + std::to_string(first_invalid_utf8(text)) +
                      " of field '" + field + "'");
  return tokenizer.encode(text, add_special).ids;
}

void Objective::check_length(std::size_t tokens) const {
  std::size_t limit = options_.max_tokens > 0 ? static_cast<std::size_t>(options_.max_tokens) : 0;
  if (model_.max_positions > 0 &&
      (limit == 0 || limit > static_cast<std::size_t>(model_.max_positions)))
    limit = static_cast<std::size_t>(model_.max_positions);
  if (limit > 0 && tokens > limit)
    throw RecordError("too long: " + std::to_string(tokens) + " tokens, more than " +
                      std::to_string(limit));
}

Example Objective::prepare(const Record& record) const {
  Example e = build_example(record);
  check_example(e);
  return e;
}

void Objective::check_example(const Example& e) const {
  auto check_ids = [](const std::vector<TokenId>& ids, std::int32_t size, const char* what) {
    if (size <= 0) return;
    for (const TokenId id : ids)
      if (id < 0 || id >= size)
        throw RecordError(std::string("id outside the model's ") + what + ": " +
                          std::to_string(id) + " (" + std::to_string(size) + " ids)");
  };
  const bool encdec = encoder_decoder(model_);
  // The input embeddings: the source's for an encoder-decoder, else the (only) token table;
  // vocab_size may be a classification head's labels.
  check_ids(e.ids, model_.source_vocab_size, encdec ? "source vocabulary" : "vocabulary");
  if (encdec) check_ids(e.target, model_.vocab_size, "target vocabulary");
  if (e.order.empty() || !masks_.inputs) return;
  try {
    (void)masks_.inputs->build(input_request(e, 0));
  } catch (const RecordError& error) {  // "bad order" groups these in the skip summary
    throw RecordError(std::string("bad order: ") + error.what());
  }
}

MaskRequest Objective::input_request(const Example& e, std::int64_t epoch) const {
  MaskRequest request = sequence_request(e.ids.size(), e.line);
  request.segments = e.segments;
  request.order = e.order;
  request.context = e.context;
  request.query_stream =
      options_.kind == ObjectiveKind::plm || options_.kind == ObjectiveKind::diffusion;
  // A new random order for each epoch (a record's own `order` is used as it is).
  if (options_.kind == ObjectiveKind::plm && epoch > 0)
    request.record_id = mix_seed(e.line, static_cast<std::uint64_t>(epoch));
  return request;
}

Example Objective::build_example(const Record& record) const {
  switch (options_.kind) {
    case ObjectiveKind::plm:
      return record.fields.contains(options_.target_field) ? prepare_infill(record)
                                                           : prepare_text(record);
    case ObjectiveKind::causal_lm:
    case ObjectiveKind::mlm:
      return prepare_text(record);
    case ObjectiveKind::classify: {
      Example e = prepare_text(record);
      e.label = label_index(record, options_);
      return e;
    }
    case ObjectiveKind::diffusion:
      return record.fields.contains(options_.target_field) ? prepare_diffusion(record)
                                                           : prepare_text(record);
    case ObjectiveKind::seq2seq:
      break;
  }
  Example e;
  const bool encdec = encoder_decoder(model_);
  e.ids = tokens_of(record, options_.source_field, source_, true);
  std::vector<TokenId> target = tokens_of(record, options_.target_field, target_, false);
  if (target.empty()) throw RecordError("empty target");
  if (e.ids.size() <= empty_source_) throw RecordError("empty source");
  if (encdec) {
    e.target = std::move(target);
    check_length(std::max(e.ids.size(), e.target.size() + 1));
    return e;
  }
  e.segments.assign(e.ids.size(), 0);
  for (TokenId t : target) e.ids.push_back(t);
  e.ids.push_back(sep_);
  e.segments.resize(e.ids.size(), 1);
  check_length(e.ids.size());
  return e;
}

Example Objective::prepare_text(const Record& record) const {
  Example e;
  e.ids = tokens_of(record, "text", source_, true);
  if (e.ids.size() < (options_.kind == ObjectiveKind::causal_lm ? 2u : 1u) ||
      ((options_.kind == ObjectiveKind::mlm || options_.kind == ObjectiveKind::diffusion) &&
       !has_content(e.ids, source_)))
    throw RecordError("empty text: nothing to predict");
  check_length(e.ids.size() +
               (options_.kind == ObjectiveKind::plm ? predicted_count(options_, e.ids.size()) : 0));
  if (options_.kind == ObjectiveKind::diffusion) check_copy(e);
  if (options_.kind == ObjectiveKind::plm) e.order = order_of(record);
  return e;
}

std::vector<std::int32_t> Objective::order_of(const Record& record) const {
  try {  // the corpus tasks' reader of integer fields (32-bit range included)
    return int_array_field(record, options_.order_field.c_str())
        .value_or(std::vector<std::int32_t>{});
  } catch (const RecordError& e) {  // "bad order" groups these in the skip summary
    throw RecordError(std::string("bad order: ") + e.what());
  }
}

// The slots after a source: the target's tokens, or with plm_target_slack >= 0 the source's
// words + the slack (the rest [SEP] fillers), which the target must fit.
std::size_t Objective::target_slots(std::span<const TokenId> source, std::size_t target) const {
  if (options_.plm_target_slack < 0) return target;
  const auto words = static_cast<std::size_t>(std::count_if(
      source.begin(), source.end(), [&](TokenId t) { return !source_.is_special(t); }));
  const std::size_t slots = words + static_cast<std::size_t>(options_.plm_target_slack);
  if (target > slots)
    throw RecordError("target longer than its slots: " + std::to_string(target) + " tokens, " +
                      std::to_string(slots) + " slots (source tokens + plm_target_slack)");
  return slots;
}

// `source tokens, target slots, [SEP]`: the layout plm-generate fills from the template
// `source [SEP] [MASK] x slots` (the tokenizer adds the specials around it).
Example Objective::prepare_infill(const Record& record) const {
  if (sep_ < 0)
    throw ConfigError(
        "objective plm on source/target records needs a [SEP] token in the tokenizer (it ends "
        "the template)");
  Example e;
  e.ids = tokens_of(record, options_.source_field, source_, true);
  const std::vector<TokenId> target = tokens_of(record, options_.target_field, source_, false);
  if (target.empty()) throw RecordError("empty target");
  const std::size_t slots = target_slots(e.ids, target.size());
  e.context.assign(e.ids.size(), 1);
  e.ids.insert(e.ids.end(), target.begin(), target.end());
  e.ids.resize(e.ids.size() + slots - target.size(), sep_);
  e.context.resize(e.ids.size(), 0);
  e.ids.push_back(sep_);
  e.context.push_back(1);
  e.order = order_of(record);  // over the slots
  check_length(e.ids.size() + predicted_count(options_, slots));
  return e;
}

// `source tokens, target slots`: segments 0, then 1 over the slots, which are the target and,
// with plm_target_slack >= 0, [SEP] fillers up to (source words + slack) (as plm's).
Example Objective::prepare_diffusion(const Record& record) const {
  if (sep_ < 0 && options_.plm_target_slack >= 0)
    throw ConfigError(
        "objective diffusion with plm_target_slack needs a [SEP] token in the tokenizer (the "
        "filler after the target)");
  Example e;
  e.ids = tokens_of(record, options_.source_field, source_, true);
  const std::vector<TokenId> target = tokens_of(record, options_.target_field, source_, false);
  if (target.empty()) throw RecordError("empty target");
  if (e.ids.size() <= empty_source_) throw RecordError("empty source");
  const std::size_t slots = target_slots(e.ids, target.size());
  e.segments.assign(e.ids.size(), 0);
  e.ids.insert(e.ids.end(), target.begin(), target.end());
  e.ids.resize(e.ids.size() + slots - target.size(), sep_);
  e.segments.resize(e.ids.size(), 1);
  check_length(e.ids.size());
  check_copy(e);
  return e;
}

// Under a mask with a noised copy (block-causal) a record is twice as long as it looks.
void Objective::check_copy(const Example& e) const {
  if (options_.kind != ObjectiveKind::diffusion || !masks_.inputs) return;
  const SequenceMask m = masks_.inputs->build(input_request(e, 0));
  check_length(m.size());
}

TrainingBatch Objective::lay_out(std::span<const Example* const> examples,
                                 std::int64_t epoch) const {
  if (encoder_decoder(model_)) return lay_out_encoder_decoder(examples);
  std::vector<SequenceSpec> specs(examples.size());
  std::vector<SequenceMask> masks(examples.size());
  for (std::size_t r = 0; r < examples.size(); ++r) {
    const Example& e = *examples[r];
    specs[r].ids = e.ids;
    specs[r].segments = e.segments;
    specs[r].token_types = e.segments;  // BERT's token types are the segments (0 when none)
    specs[r].order = e.order;
    masks[r] = masks_.inputs->build(input_request(e, epoch));
    if (options_.kind == ObjectiveKind::plm) {
      SequenceMask& m = masks[r];
      const std::size_t n = e.ids.size(), ordered = m.query_positions.size();
      if (ordered == 0 || m.rank.size() != n + ordered)
        throw ConfigError(
            "objective plm needs a mask strategy with a query stream (mask: {plugin: "
            "permutation})");
      // Keep the queries of the last K steps of the order: they are the only ones predicted,
      // and no other token sees a query, so dropping the rest changes nothing else.
      const std::size_t drop = ordered - predicted_count(options_, ordered);
      m.rank.erase(m.rank.begin() + static_cast<std::ptrdiff_t>(n),
                   m.rank.begin() + static_cast<std::ptrdiff_t>(n + drop));
      m.role.erase(m.role.begin() + static_cast<std::ptrdiff_t>(n),
                   m.role.begin() + static_cast<std::ptrdiff_t>(n + drop));
      m.query_positions.erase(m.query_positions.begin(),
                              m.query_positions.begin() + static_cast<std::ptrdiff_t>(drop));
    }
  }
  BuiltBatch built = assemble_batch(specs, std::move(masks), pad_, mask_token_);
  TrainingBatch out;
  out.inputs = std::move(built.batch);
  const std::int32_t length = out.inputs.length;
  for (std::size_t r = 0; r < examples.size(); ++r) {
    const Example& e = *examples[r];
    const auto base = static_cast<std::int32_t>(r) * length;
    const auto n = static_cast<std::int32_t>(e.ids.size());
    switch (options_.kind) {
      case ObjectiveKind::causal_lm:
        for (std::int32_t p = 0; p + 1 < n; ++p) {
          out.rows.push_back(base + p);
          out.labels.push_back(e.ids[p + 1]);
        }
        break;
      case ObjectiveKind::seq2seq: {
        const auto first = static_cast<std::int32_t>(
            std::find(e.segments.begin(), e.segments.end(), 1) - e.segments.begin());
        for (std::int32_t p = first - 1; p + 1 < n; ++p) {
          out.rows.push_back(base + p);
          out.labels.push_back(e.ids[p + 1]);
        }
        break;
      }
      case ObjectiveKind::plm: {
        const SequenceMask& m = built.masks[r];
        for (std::size_t q = 0; q < m.query_positions.size(); ++q) {
          out.rows.push_back(base + n + static_cast<std::int32_t>(q));
          out.labels.push_back(e.ids[m.query_positions[q]]);
        }
        break;
      }
      case ObjectiveKind::mlm:
      case ObjectiveKind::diffusion:
        break;  // corrupt() and noise() choose
      case ObjectiveKind::classify:
        // The row Hugging Face's head reads: [CLS] (encoder-only) or the last token.
        out.rows.push_back(base + (model_.kind == ModelKind::encoder_only ? 0 : n - 1));
        out.labels.push_back(e.label);
        break;
    }
  }
  if (options_.kind == ObjectiveKind::mlm) corrupt(out.inputs, examples, epoch, out);
  if (options_.kind == ObjectiveKind::diffusion)
    noise(out.inputs, examples, built.masks, epoch, out);
  return out;
}

void Objective::noise(Batch& batch, std::span<const Example* const> examples,
                      std::span<const SequenceMask> masks, std::int64_t epoch,
                      TrainingBatch& out) const {
  out.normalizer = 0;
  for (std::size_t r = 0; r < examples.size(); ++r) {
    const Example& e = *examples[r];
    const SequenceMask& m = masks[r];
    const auto n = e.ids.size();
    const auto base = r * static_cast<std::size_t>(batch.length);
    // The slots: segment 1 (source/target records), else every non-special token (text).
    auto slot = [&](std::size_t p) {
      return e.segments.empty() ? !source_.is_special(e.ids[p]) : e.segments[p] == 1;
    };
    // Where a slot's noised token goes: its own place, or its copy in the query stream (fed
    // the clean token, as assemble_batch gave it [MASK]).
    const bool copy = !m.query_positions.empty();
    constexpr std::size_t kNone = SIZE_MAX;
    std::vector<std::size_t> where(n, kNone);
    for (std::size_t p = 0; p < n && !copy; ++p) where[p] = p;
    for (std::size_t q = 0; q < m.query_positions.size(); ++q) {
      const auto p = static_cast<std::size_t>(m.query_positions[q]);
      where[p] = n + q;
      batch.ids[base + n + q] = e.ids[p];
    }
    // One stream per (seed, epoch, record): t first, then one draw per slot in position order.
    SplitMix64 rng(mix_seed(options_.seed, static_cast<std::uint64_t>(epoch), e.line));
    const double t = 1.0 - (1.0 - options_.diffusion_eps) * rng.uniform();
    for (std::size_t p = 0; p < n; ++p) {
      if (!slot(p)) continue;
      ++out.normalizer;
      if (rng.uniform() >= t) continue;
      if (where[p] == kNone)
        throw RuntimeError("objective diffusion: the mask's query stream has no copy of slot " +
                           std::to_string(p));
      batch.ids[base + where[p]] = mask_token_;
      out.rows.push_back(static_cast<std::int32_t>(base + where[p]));
      out.labels.push_back(e.ids[p]);
      out.weights.push_back(1.0 / t);
    }
  }
}

void Objective::corrupt(Batch& batch, std::span<const Example* const> examples, std::int64_t epoch,
                        TrainingBatch& out) const {
  const std::int32_t vocab = model_.vocab_size;
  for (std::size_t r = 0; r < examples.size(); ++r) {
    const Example& e = *examples[r];
    // One stream per (seed, epoch, record): the same corruption whatever the batch or thread.
    SplitMix64 rng(mix_seed(options_.seed, static_cast<std::uint64_t>(epoch), e.line));
    const auto base = r * static_cast<std::size_t>(batch.length);
    for (std::size_t t = 0; t < e.ids.size(); ++t) {
      const double chosen = rng.uniform(), how = rng.uniform();
      const std::uint64_t random_token = rng.next();
      if (source_.is_special(e.ids[t]) || chosen >= options_.mlm_probability) continue;
      out.rows.push_back(static_cast<std::int32_t>(base + t));
      out.labels.push_back(e.ids[t]);
      if (how < 0.8)
        batch.ids[base + t] = mask_token_;
      else if (how < 0.9)
        batch.ids[base + t] =
            static_cast<TokenId>(random_token % static_cast<std::uint64_t>(vocab));
    }
  }
}

TrainingBatch Objective::lay_out_encoder_decoder(std::span<const Example* const> examples) const {
  std::vector<SequenceSpec> sources(examples.size()), targets(examples.size());
  std::vector<SequenceMask> source_masks(examples.size()), target_masks(examples.size());
  for (std::size_t r = 0; r < examples.size(); ++r) {
    const Example& e = *examples[r];
    sources[r].ids = e.ids;
    source_masks[r] = masks_.source->build(sequence_request(e.ids.size(), e.line));
    targets[r].ids.push_back(decoder_start_);
    targets[r].ids.insert(targets[r].ids.end(), e.target.begin(), e.target.end());
    target_masks[r] = masks_.inputs->build(sequence_request(targets[r].ids.size(), e.line));
  }
  TrainingBatch out;
  out.source = assemble_batch(sources, std::move(source_masks), pad_, -1).batch;
  out.inputs = assemble_batch(targets, std::move(target_masks), pad_, -1).batch;
  for (std::size_t r = 0; r < examples.size(); ++r) {
    const Example& e = *examples[r];
    const auto base = static_cast<std::int32_t>(r) * out.inputs.length;
    for (std::size_t t = 0; t <= e.target.size(); ++t) {
      out.rows.push_back(base + static_cast<std::int32_t>(t));
      out.labels.push_back(t < e.target.size() ? e.target[t] : eos_);
    }
  }
  return out;
}

}  // namespace masque::train

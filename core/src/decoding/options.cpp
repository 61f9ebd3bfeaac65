// The decoding options every decoder plugin declares, and how they resolve per record.
#include <algorithm>
#include <cmath>
#include <string>

#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "masque/tensor.hpp"

namespace masque {

namespace {

const ParamSpec kSharedParams[] = {
    {.name = "max_new_tokens",
     .type = ParamType::integer,
     .default_value = "256",
     .help = "maximum decoding steps per record (CTranslate2 max_decoding_length); forced "
             "prefix tokens and the end token count as steps",
     .min = 1,
     .max = 1e6},
    {.name = "min_new_tokens",
     .type = ParamType::integer,
     .default_value = "0",
     .help = "end tokens are blocked while the decoding step (forced prefix included) is below "
             "this (CTranslate2 min_decoding_length)",
     .min = 0,
     .max = 1e6},
    {.name = "end_tokens",
     .type = ParamType::int_list,
     .default_value = "[]",
     .help = "token ids that end a hypothesis (not part of the output); empty: the model's EOS",
     .min = 0,
     .max = 1e7},
    {.name = "repetition_penalty",
     .type = ParamType::number,
     .default_value = "1.0",
     .help = "must be > 0; every token already in the prompt or the output has its logit divided "
             "by this when positive, multiplied when negative (CTRL; 1 = off, > 1 discourages "
             "repeats)",
     .min = 0,
     .max = 1e6},
    {.name = "no_repeat_ngram_size",
     .type = ParamType::integer,
     .default_value = "0",
     .help = "block any token that would repeat an n-gram of this size already in the prompt "
             "or the output (0 = off)",
     .min = 0,
     .max = 1000},
    {.name = "length_penalty",
     .type = ParamType::number,
     .default_value = "1.0",
     .help = "hypothesis score = sum of token log-probs / length^length_penalty, the length "
             "counting the forced prefix and the end token (0 = raw sum)",
     .min = -10,
     .max = 10},
    {.name = "suppress_sequences",
     .type = ParamType::string_list,
     .default_value = "[]",
     .help = "token id sequences never generated, each written as space-separated ids (e.g. "
             "[\"7\", \"12 5 9\"]): a single id is always blocked, a longer sequence's last id "
             "is blocked right after the others (CTranslate2 suppress_sequences, given as ids)"},
    {.name = "return_end_token",
     .type = ParamType::boolean,
     .default_value = "false",
     .help = "keep the end token in the output tokens when one was produced (CTranslate2 "
             "return_end_token)"},
    {.name = "prefix_bias_beta",
     .type = ParamType::number,
     .default_value = "0",
     .help = "in [0, 1); > 0 makes the target prefix a soft bias instead of forced: while a "
             "hypothesis has followed the prefix, its next-token distribution is (1 - beta) * p "
             "+ beta * onehot(prefix token) and it may leave the prefix (CTranslate2 "
             "prefix_bias_beta); not with return_alternatives",
     .min = 0,
     .max = 1},
    {.name = "return_alternatives",
     .type = ParamType::boolean,
     .default_value = "false",
     .help = "after the target prefix, expand the num_hypotheses most likely next tokens (never "
             "the end token) and complete each with this decoder's search; the alternatives are "
             "returned in expansion order (CTranslate2 return_alternatives)"},
    {.name = "min_alternative_expansion_prob",
     .type = ParamType::number,
     .default_value = "0",
     .help = "with return_alternatives: expansions whose probability is below this are dropped "
             "(CTranslate2 min_alternative_expansion_prob)",
     .min = 0,
     .max = 1},
};

std::int32_t get_int32(const Params& params, const char* name) {
  return static_cast<std::int32_t>(params.get_int(name));
}

std::vector<TokenId> get_token_list(const Params& params, const char* name) {
  std::vector<TokenId> out;
  for (std::int64_t v : params.get_int_list(name)) {
    if (v < 0 || v > INT32_MAX)
      throw ConfigError(std::string(name) + ": token id " + std::to_string(v) + " is out of range");
    out.push_back(static_cast<TokenId>(v));
  }
  return out;
}

// "12 5 9" -> {12, 5, 9}.
std::vector<TokenId> parse_sequence(const std::string& text) {
  std::vector<TokenId> ids;
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == ' ') {
      ++pos;
      continue;
    }
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(text.substr(pos), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    const char next = pos + used < text.size() ? text[pos + used] : ' ';
    if (used == 0 || v < 0 || v > INT32_MAX || next != ' ')
      throw ConfigError("suppress_sequences: '" + text +
                        "' is not a sequence of space-separated token ids");
    ids.push_back(static_cast<TokenId>(v));
    pos += used;
  }
  if (ids.empty()) throw ConfigError("suppress_sequences: an empty sequence");
  return ids;
}

void check_options(const DecodingOptions& o) {
  if (!(o.repetition_penalty > 0))
    throw ConfigError("repetition_penalty must be > 0, got " +
                      std::to_string(o.repetition_penalty));
  if (o.min_new_tokens > o.max_new_tokens)
    throw ConfigError("min_new_tokens (" + std::to_string(o.min_new_tokens) +
                      ") is greater than max_new_tokens (" + std::to_string(o.max_new_tokens) +
                      ")");
  if (o.prefix_bias_beta >= 1)
    throw ConfigError("prefix_bias_beta must be < 1, got " + std::to_string(o.prefix_bias_beta));
  if (o.prefix_bias_beta > 0 && o.return_alternatives)
    throw ConfigError("prefix_bias_beta (a biased prefix) cannot be used with return_alternatives");
}

void check_ids(const std::vector<TokenId>& ids, const char* name, std::int32_t vocab) {
  for (TokenId e : ids)
    if (e < 0 || e >= vocab)
      throw ConfigError(std::string(name) + ": id " + std::to_string(e) +
                        " is outside the vocabulary (size " + std::to_string(vocab) + ")");
}

}  // namespace

DecodingOptions parse_decoding_options(const Params& params) {
  DecodingOptions o;
  o.max_new_tokens = get_int32(params, "max_new_tokens");
  o.min_new_tokens = get_int32(params, "min_new_tokens");
  o.end_tokens = get_token_list(params, "end_tokens");
  o.repetition_penalty = params.get_number("repetition_penalty");
  o.no_repeat_ngram_size = get_int32(params, "no_repeat_ngram_size");
  o.length_penalty = params.get_number("length_penalty");
  for (const std::string& seq : params.get_string_list("suppress_sequences"))
    o.suppress_sequences.push_back(parse_sequence(seq));
  o.return_end_token = params.get_bool("return_end_token");
  o.prefix_bias_beta = params.get_number("prefix_bias_beta");
  o.return_alternatives = params.get_bool("return_alternatives");
  o.min_alternative_expansion_prob = params.get_number("min_alternative_expansion_prob");
  check_options(o);
  return o;
}

void check_decoder_tokens(const Params& params, std::int32_t vocab_size) {
  if (params.has("end_tokens"))
    check_ids(get_token_list(params, "end_tokens"), "end_tokens", vocab_size);
  if (params.has("suppress_sequences"))
    for (const std::string& seq : params.get_string_list("suppress_sequences"))
      check_ids(parse_sequence(seq), "suppress_sequences", vocab_size);
}

std::vector<ParamSpec> decoder_param_specs(std::initializer_list<ParamSpec> own) {
  std::vector<ParamSpec> specs(std::begin(kSharedParams), std::end(kSharedParams));
  specs.insert(specs.end(), own.begin(), own.end());
  return specs;
}

namespace decoding {

namespace {

std::int32_t record_limit(const Stepper& stepper, std::int32_t record,
                          const DecodingOptions& options) {
  const std::int32_t hard = stepper.max_steps(record);
  if (stepper.fixed_length()) {
    if (hard < 0)
      throw RuntimeError("a fixed-length stepper must give max_steps() for record " +
                         std::to_string(record));
    return hard;
  }
  return hard < 0 ? options.max_new_tokens : std::min(hard, options.max_new_tokens);
}

}  // namespace

RecordPlan plan_record(const Stepper& stepper, const DecodingOptions& options,
                       std::int32_t record) {
  RecordPlan plan;
  plan.context = stepper.context(record);
  (options.prefix_bias_beta > 0 ? plan.biased : plan.prefix) = stepper.forced_prefix(record);
  plan.limit = record_limit(stepper, record, options);
  return plan;
}

std::vector<RecordPlan> plan_records(const Stepper& stepper, const DecodingOptions& options) {
  std::vector<RecordPlan> plans;
  plans.reserve(static_cast<std::size_t>(stepper.num_records()));
  for (std::int32_t r = 0; r < stepper.num_records(); ++r)
    plans.push_back(plan_record(stepper, options, r));
  return plans;
}

std::size_t tokens_to_reserve(std::int32_t limit) {
  constexpr std::int32_t kReserveTokens = 4096;
  return static_cast<std::size_t>(std::clamp(limit, 0, kReserveTokens));
}

void check_step_logits(const Tensor& logits, std::size_t rows, std::int32_t vocab) {
  if (logits.dtype() != DType::f32 || logits.rank() != 2 ||
      logits.dim(0) != static_cast<std::int64_t>(rows) || logits.dim(1) != vocab)
    throw RuntimeError("the stepper returned logits " + to_string(logits.shape()) + " " +
                       to_string(logits.dtype()) + ", expected [" + std::to_string(rows) + ", " +
                       std::to_string(vocab) + "] f32");
}

std::vector<TokenId> resolve_end_tokens(const Stepper& stepper, const DecodingOptions& options) {
  if (stepper.fixed_length()) return {};
  std::vector<TokenId> ends =
      options.end_tokens.empty() ? stepper.default_end_tokens() : options.end_tokens;
  check_ids(ends, "end_tokens", stepper.vocab_size());
  for (const auto& seq : options.suppress_sequences)
    check_ids(seq, "suppress_sequences", stepper.vocab_size());
  return ends;
}

}  // namespace decoding
}  // namespace masque

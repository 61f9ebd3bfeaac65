// The decoding options every decoder plugin declares, and how they resolve per record.
#include <cmath>
#include <string>

#include "masque/decoding.hpp"
#include "masque/error.hpp"

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

void check_options(const DecodingOptions& o) {
  if (!(o.repetition_penalty > 0))
    throw ConfigError("repetition_penalty must be > 0, got " +
                      std::to_string(o.repetition_penalty));
  if (o.min_new_tokens > o.max_new_tokens)
    throw ConfigError("min_new_tokens (" + std::to_string(o.min_new_tokens) +
                      ") is greater than max_new_tokens (" + std::to_string(o.max_new_tokens) +
                      ")");
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
  check_options(o);
  return o;
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

std::vector<RecordPlan> plan_records(const Stepper& stepper, const DecodingOptions& options) {
  std::vector<RecordPlan> plans(static_cast<std::size_t>(stepper.num_records()));
  for (std::int32_t r = 0; r < stepper.num_records(); ++r) {
    RecordPlan& plan = plans[r];
    plan.context = stepper.context(r);
    plan.prefix = stepper.forced_prefix(r);
    plan.limit = record_limit(stepper, r, options);
  }
  return plans;
}

std::vector<TokenId> resolve_end_tokens(const Stepper& stepper, const DecodingOptions& options) {
  if (stepper.fixed_length()) return {};
  std::vector<TokenId> ends =
      options.end_tokens.empty() ? stepper.default_end_tokens() : options.end_tokens;
  for (TokenId e : ends)
    if (e < 0 || e >= stepper.vocab_size())
      throw ConfigError("end_tokens: id " + std::to_string(e) +
                        " is outside the vocabulary (size " + std::to_string(stepper.vocab_size()) +
                        ")");
  return ends;
}

}  // namespace decoding
}  // namespace masque

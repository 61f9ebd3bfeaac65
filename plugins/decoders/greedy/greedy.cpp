// Decoder `greedy`: the most likely token at every step (CTranslate2 beam_size = 1).
//
// Ties go to the smallest token id. The score is CTranslate2's greedy score: the sum of the
// token log-probs (end token included, forced prefix excluded) divided by
// length^length_penalty, the length counting the forced prefix and the end token.
#include <string>
#include "masque/decoder.hpp"

#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "masque/params.hpp"

namespace {

class ArgmaxChooser final : public masque::decoding::TokenChooser {
 public:
  masque::TokenId choose(std::span<const float> logits, std::int32_t) override {
    return masque::decoding::argmax(logits);
  }
};

std::vector<masque::DecodeResult> greedy_search(masque::Stepper& stepper,
                                                const masque::DecodingOptions& options) {
  ArgmaxChooser chooser;
  return masque::decoding::decode_independent(stepper, options, 1, chooser);
}

class GreedyDecoder final : public masque::Decoder {
 public:
  explicit GreedyDecoder(const masque::Params& params)
      : options_(masque::parse_decoding_options(params)),
        num_hypotheses_(static_cast<std::int32_t>(params.get_int("num_hypotheses"))) {
    if (num_hypotheses_ > 1 && !options_.return_alternatives)
      throw masque::ConfigError(
          "num_hypotheses (" + std::to_string(num_hypotheses_) +
          ") above 1 needs return_alternatives with greedy search (or use beam or sample)");
  }

  std::vector<masque::DecodeResult> decode(masque::Stepper& stepper) const override {
    if (options_.return_alternatives)
      return masque::decoding::decode_alternatives(stepper, options_, num_hypotheses_,
                                                   greedy_search);
    return greedy_search(stepper, options_);
  }
  bool admits_records() const override { return !options_.return_alternatives; }

 private:
  masque::DecodingOptions options_;
  std::int32_t num_hypotheses_;
};

masque::Plugin* create(const masque::Params& params) {
  return new GreedyDecoder(params);
}

const std::vector<masque::ParamSpec>& param_specs() {
  static const std::vector<masque::ParamSpec> specs = masque::decoder_param_specs({
      {.name = "num_hypotheses",
       .type = masque::ParamType::integer,
       .default_value = "1",
       .help = "alternatives per record with return_alternatives (else must be 1)",
       .min = 1,
       .max = 1024},
  });
  return specs;
}

// The decoder a `decoder:` section without a plugin takes; it settles a token a step.
const masque::DecoderTraits kTraits{.is_default = true, .streams = true};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::decoder,
      .name = "greedy",
      .version = "1.0.0",
      .license = "MIT",
      .description = "the most likely token at every step (smallest id on ties)",
      .params = param_specs().data(),
      .num_params = static_cast<std::uint32_t>(param_specs().size()),
      .create = create,
      .decoder = &kTraits,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

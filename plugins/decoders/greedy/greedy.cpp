// Decoder `greedy`: the most likely token at every step (CTranslate2 beam_size = 1).
//
// Ties go to the smallest token id. The score is CTranslate2's greedy score: the sum of the
// token log-probs (end token included, forced prefix excluded) divided by
// length^length_penalty, the length counting the forced prefix and the end token.
#include "masque/decoder.hpp"
#include "masque/decoding.hpp"
#include "masque/params.hpp"

namespace {

class ArgmaxChooser final : public masque::decoding::TokenChooser {
 public:
  masque::TokenId choose(std::span<const float> logits, std::int32_t) override {
    return masque::decoding::argmax(logits);
  }
};

class GreedyDecoder final : public masque::Decoder {
 public:
  explicit GreedyDecoder(const masque::Params& params)
      : options_(masque::parse_decoding_options(params)) {}

  std::vector<masque::DecodeResult> decode(masque::Stepper& stepper) const override {
    ArgmaxChooser chooser;
    return masque::decoding::decode_independent(stepper, options_, 1, chooser);
  }

 private:
  masque::DecodingOptions options_;
};

masque::Plugin* create(const masque::Params& params) {
  return new GreedyDecoder(params);
}

const std::vector<masque::ParamSpec>& param_specs() {
  static const std::vector<masque::ParamSpec> specs = masque::decoder_param_specs({});
  return specs;
}

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
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

// Decoder `beam`: CTranslate2's beam search (n-best, length penalty, patience); see
// beam_search.hpp for the exact algorithm. beam_size 1 gives the greedy result.
#include <string>

#include "beam_search.hpp"
#include "masque/decoder.hpp"
#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "masque/params.hpp"

namespace {

masque::beam::BeamOptions parse_beam(const masque::Params& params, bool alternatives) {
  masque::beam::BeamOptions o;
  o.beam_size = static_cast<std::int32_t>(params.get_int("beam_size"));
  o.patience = params.get_number("patience");
  o.num_hypotheses = static_cast<std::int32_t>(params.get_int("num_hypotheses"));
  if (!(o.patience > 0)) throw masque::ConfigError("patience must be > 0");
  const std::int32_t most = masque::beam::max_finished(o);
  if (o.num_hypotheses > most && !alternatives)
    throw masque::ConfigError(
        "num_hypotheses (" + std::to_string(o.num_hypotheses) +
        ") cannot exceed round(beam_size * patience) = " + std::to_string(most));
  return o;
}

class BeamDecoder final : public masque::Decoder {
 public:
  explicit BeamDecoder(const masque::Params& params)
      : options_(masque::parse_decoding_options(params)),
        beam_(parse_beam(params, options_.return_alternatives)) {}

  std::vector<masque::DecodeResult> decode(masque::Stepper& stepper) const override {
    if (!options_.return_alternatives) return masque::beam::beam_search(stepper, options_, beam_);
    // Each alternative is completed by a beam search returning its best hypothesis.
    masque::beam::BeamOptions one = beam_;
    one.num_hypotheses = 1;
    return masque::decoding::decode_alternatives(
        stepper, options_, beam_.num_hypotheses,
        [&one](masque::Stepper& s, const masque::DecodingOptions& o) {
          return masque::beam::beam_search(s, o, one);
        });
  }
  bool admits_records() const override { return !options_.return_alternatives; }

 private:
  masque::DecodingOptions options_;
  masque::beam::BeamOptions beam_;
};

masque::Plugin* create(const masque::Params& params) {
  return new BeamDecoder(params);
}

const std::vector<masque::ParamSpec>& param_specs() {
  static const std::vector<masque::ParamSpec> specs = masque::decoder_param_specs({
      {.name = "beam_size",
       .type = masque::ParamType::integer,
       .default_value = "4",
       .help = "number of beams K; each step keeps the best K of 2K candidates (1 = greedy)",
       .min = 1,
       .max = 1024},
      {.name = "patience",
       .type = masque::ParamType::number,
       .default_value = "1.0",
       .help = "must be > 0; a record stops once round(beam_size * patience) hypotheses are "
               "finished (arXiv 2204.05424; ignored when length_penalty is 0, where the search "
               "stops once the best candidate has finished)",
       .min = 0,
       .max = 1000},
      {.name = "num_hypotheses",
       .type = masque::ParamType::integer,
       .default_value = "1",
       .help = "hypotheses returned per record, best first (at most round(beam_size * "
               "patience)); with return_alternatives, the number of alternatives",
       .min = 1,
       .max = 1024},
  });
  return specs;
}

// A generation_config.json with several beams and no sampling asks for it; its tokens settle
// only at the end.
const masque::DecoderTraits kTraits{.chosen_by = "num_beams>1;do_sample!=true"};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::decoder,
      .name = "beam",
      .version = "1.0.0",
      .license = "MIT",
      .description = "beam search as CTranslate2 (n-best, length penalty, patience)",
      .params = param_specs().data(),
      .num_params = static_cast<std::uint32_t>(param_specs().size()),
      .create = create,
      .decoder = &kTraits,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

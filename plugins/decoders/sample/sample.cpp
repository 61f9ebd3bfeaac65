// Decoder `sample`: random sampling with temperature, top-k and top-p, seeded per record so
// that results are reproducible whatever the batching and threading (see sampler.hpp).
//
// Hypotheses are independent samples of the same record, best score first; the score is the
// greedy one (sum of the processed-logit log-probs / length^length_penalty).
#include <cmath>

#include "masque/decoder.hpp"
#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "masque/params.hpp"
#include "sampler.hpp"

namespace {

using masque::sample::SplitMix64;

// One stream per sequence (record, hypothesis), made for one decode() call; records that
// continuous batching admits later get theirs when they first sample.
class SamplingChooser final : public masque::decoding::TokenChooser {
 public:
  SamplingChooser(const masque::sample::SamplingOptions& options, std::uint64_t seed,
                  const masque::Stepper& stepper, std::int32_t per_record)
      : sampler_(options), seed_(seed), stepper_(stepper), per_record_(per_record) {
    add_streams(stepper.num_records());
  }

  masque::TokenId choose(std::span<const float> logits, std::int32_t sequence) override {
    if (static_cast<std::size_t>(sequence) >= streams_.size()) add_streams(stepper_.num_records());
    return sampler_.sample(logits, streams_[static_cast<std::size_t>(sequence)]);
  }

 private:
  void add_streams(std::int32_t records) {
    streams_.reserve(static_cast<std::size_t>(records) * per_record_);
    for (auto r = static_cast<std::int32_t>(streams_.size()) / per_record_; r < records; ++r)
      for (std::int32_t h = 0; h < per_record_; ++h)
        streams_.push_back(masque::sample::make_stream(seed_, stepper_.record_id(r),
                                                       static_cast<std::uint64_t>(h)));
  }

  masque::sample::Sampler sampler_;
  std::uint64_t seed_;
  const masque::Stepper& stepper_;
  std::int32_t per_record_;
  std::vector<SplitMix64> streams_;
};

masque::sample::SamplingOptions parse_sampling(const masque::Params& params) {
  masque::sample::SamplingOptions o;
  o.temperature = params.get_number("temperature");
  o.top_k = static_cast<std::int32_t>(params.get_int("top_k"));
  o.top_p = params.get_number("top_p");
  if (!(o.top_p > 0)) throw masque::ConfigError("top_p must be > 0 (1 = off)");
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    throw masque::ConfigError("temperature must be >= 0 (0 = greedy)");
  return o;
}

class SampleDecoder final : public masque::Decoder {
 public:
  explicit SampleDecoder(const masque::Params& params)
      : options_(masque::parse_decoding_options(params)),
        sampling_(parse_sampling(params)),
        seed_(static_cast<std::uint64_t>(params.get_int("seed"))),
        num_hypotheses_(static_cast<std::int32_t>(params.get_int("num_hypotheses"))) {
    const bool greedy = sampling_.temperature == 0 || sampling_.top_k == 1;
    if (greedy && num_hypotheses_ > 1)
      throw masque::ConfigError(
          "num_hypotheses " + std::to_string(num_hypotheses_) + " with " +
          (sampling_.temperature == 0 ? "temperature 0" : "top_k 1") +
          " (greedy) gives identical hypotheses: use the beam decoder for different ones, or "
          "sample with a temperature above 0 and top_k 0 or above 1");
  }

  std::vector<masque::DecodeResult> decode(masque::Stepper& stepper) const override {
    if (options_.return_alternatives)
      return masque::decoding::decode_alternatives(
          stepper, options_, num_hypotheses_,
          [this](masque::Stepper& s, const masque::DecodingOptions& o) { return sample(s, o, 1); });
    return sample(stepper, options_, num_hypotheses_);
  }
  bool admits_records() const override { return !options_.return_alternatives; }

 private:
  std::vector<masque::DecodeResult> sample(masque::Stepper& stepper,
                                           const masque::DecodingOptions& options,
                                           std::int32_t per_record) const {
    SamplingChooser chooser(sampling_, seed_, stepper, per_record);
    return masque::decoding::decode_independent(stepper, options, per_record, chooser);
  }

  masque::DecodingOptions options_;
  masque::sample::SamplingOptions sampling_;
  std::uint64_t seed_;
  std::int32_t num_hypotheses_;
};

masque::Plugin* create(const masque::Params& params) {
  return new SampleDecoder(params);
}

const std::vector<masque::ParamSpec>& param_specs() {
  static const std::vector<masque::ParamSpec> specs = masque::decoder_param_specs({
      {.name = "temperature",
       .type = masque::ParamType::number,
       .default_value = "1.0",
       .help = "divides the logits before sampling; < 1 sharpens, > 1 flattens, 0 = greedy",
       .min = 0,
       .max = 1e6},
      {.name = "top_k",
       .type = masque::ParamType::integer,
       .default_value = "0",
       .help = "sample among the k most likely tokens only (0 = all, 1 = greedy)",
       .min = 0,
       .max = 1e7},
      {.name = "top_p",
       .type = masque::ParamType::number,
       .default_value = "1.0",
       .help = "must be > 0; sample among the fewest most likely tokens whose probability "
               "(after top_k) reaches top_p (nucleus sampling; 1 = off)",
       .min = 0,
       .max = 1},
      {.name = "seed",
       .type = masque::ParamType::integer,
       .default_value = "0",
       .help = "random seed, combined with each record's number: the same seed and input give "
               "the same output whatever the batch size, position or thread count",
       .min = 0,
       .max = 9.2e18},
      {.name = "num_hypotheses",
       .type = masque::ParamType::integer,
       .default_value = "1",
       .help = "independent samples per record, returned best score first; with "
               "return_alternatives, the number of alternatives (each completed by one sample)",
       .min = 1,
       .max = 1024},
  });
  return specs;
}

// It settles a token a step (one hypothesis streams), and a generation_config.json with
// do_sample asks for it.
const masque::DecoderTraits kTraits{.streams = true, .chosen_by = "do_sample=true"};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::decoder,
      .name = "sample",
      .version = "1.0.0",
      .license = "MIT",
      .description = "random sampling (temperature, top-k, top-p), reproducible per record",
      .params = param_specs().data(),
      .num_params = static_cast<std::uint32_t>(param_specs().size()),
      .create = create,
      .decoder = &kTraits,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

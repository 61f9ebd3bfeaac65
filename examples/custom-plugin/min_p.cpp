// Decoder `min-p`: min-p sampling (Nguyen et al. 2024, "Turning Up the Heat: Min-p Sampling for
// Creative and Coherent LLM Outputs"; llama.cpp's and Hugging Face's `min_p`).
//
// At each step, with the logits already processed by the shared decoding options (repetition
// penalty, min_new_tokens, no_repeat_ngram_size):
// 1. keep the tokens whose probability is at least min_p times the probability of the most
//    likely token, i.e. logit(t) >= max logit + log(min_p). The threshold adapts to the model's
//    confidence: few candidates when it is sure, many when it is not. min_p = 0 keeps every
//    token, min_p = 1 only the most likely one(s).
// 2. sample among the kept tokens with weights exp((logit(t) - max logit) / temperature):
//    temperature is applied after the cut ("temperature last", as llama.cpp's default chain),
//    so a high temperature flattens the choice among good tokens without letting bad ones in.
//    temperature 0 is greedy.
// The draw walks the kept tokens in id order and picks the first whose cumulative weight
// exceeds u times the total, with u from a splitmix64 stream seeded by (seed, record id,
// hypothesis): a record's samples do not depend on its batch, position or the thread count.
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "masque/decoder.hpp"
#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "masque/params.hpp"

namespace {

// splitmix64 (Steele, Lea and Flood, 2014): fully specified, so samples are the same on every
// platform and standard library.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

std::uint64_t mix(std::uint64_t x) {
  return SplitMix64(x).next();
}

SplitMix64 make_stream(std::uint64_t seed, std::uint64_t record_id, std::uint64_t hypothesis) {
  return SplitMix64(mix(mix(mix(seed) ^ record_id) ^ hypothesis));
}

struct MinPOptions {
  double min_p = 0.05;
  double temperature = 1.0;
};

// Chooses one token per call for one sequence; holds scratch buffers (one per decode() call).
class MinPSampler {
 public:
  explicit MinPSampler(const MinPOptions& options)
      : log_min_p_(options.min_p > 0 ? std::log(options.min_p)
                                     : -std::numeric_limits<double>::infinity()),
        temperature_(options.temperature) {}

  masque::TokenId sample(std::span<const float> logits, SplitMix64& stream) {
    const masque::TokenId best = masque::decoding::argmax(logits);
    if (temperature_ == 0) return best;
    const double max_logit = logits[static_cast<std::size_t>(best)];
    keep_candidates(logits, max_logit);
    return draw(stream, best);
  }

 private:
  // Step 1: the tokens above the relative threshold, in id order, with their weights.
  void keep_candidates(std::span<const float> logits, double max_logit) {
    const double threshold = max_logit + log_min_p_;
    kept_.clear();
    weights_.clear();
    for (std::size_t t = 0; t < logits.size(); ++t) {
      const double logit = logits[t];
      if (logit < threshold) continue;
      const double weight = std::exp((logit - max_logit) / temperature_);
      // Blocked tokens (lowest float) underflow to 0: never a candidate, not even by rounding.
      if (weight == 0) continue;
      kept_.push_back(static_cast<masque::TokenId>(t));
      weights_.push_back(weight);
    }
  }

  // Step 2: one draw by inverse CDF over the kept tokens.
  masque::TokenId draw(SplitMix64& stream, masque::TokenId fallback) const {
    double total = 0;
    for (double w : weights_) total += w;
    const double target = stream.uniform() * total;
    double cumulative = 0;
    for (std::size_t i = 0; i < kept_.size(); ++i) {
      cumulative += weights_[i];
      if (target < cumulative) return kept_[i];
    }
    return kept_.empty() ? fallback : kept_.back();  // rounding left the target past the end
  }

  double log_min_p_;
  double temperature_;
  std::vector<masque::TokenId> kept_;
  std::vector<double> weights_;
};

// Gives decode_independent() one random stream per (record, hypothesis).
class MinPChooser final : public masque::decoding::TokenChooser {
 public:
  MinPChooser(const MinPOptions& options, std::uint64_t seed, const masque::Stepper& stepper,
              std::int32_t per_record)
      : sampler_(options) {
    streams_.reserve(static_cast<std::size_t>(stepper.num_records()) * per_record);
    for (std::int32_t r = 0; r < stepper.num_records(); ++r)
      for (std::int32_t h = 0; h < per_record; ++h)
        streams_.push_back(make_stream(seed, stepper.record_id(r), static_cast<std::uint64_t>(h)));
  }

  masque::TokenId choose(std::span<const float> logits, std::int32_t sequence) override {
    return sampler_.sample(logits, streams_[static_cast<std::size_t>(sequence)]);
  }

 private:
  MinPSampler sampler_;
  std::vector<SplitMix64> streams_;
};

// The declared ranges already hold; this rejects a combination only the decoder can judge.
MinPOptions parse_min_p(const masque::Params& params) {
  MinPOptions o;
  o.min_p = params.get_number("min_p");
  o.temperature = params.get_number("temperature");
  if (o.temperature == 0 && params.get_int("num_hypotheses") > 1)
    throw masque::ConfigError(
        "decoder.temperature: 0 is greedy: num_hypotheses > 1 would return identical "
        "copies; set a temperature > 0 or num_hypotheses: 1");
  return o;
}

class MinPDecoder final : public masque::Decoder {
 public:
  explicit MinPDecoder(const masque::Params& params)
      : options_(masque::parse_decoding_options(params)),
        min_p_(parse_min_p(params)),
        seed_(static_cast<std::uint64_t>(params.get_int("seed"))),
        num_hypotheses_(static_cast<std::int32_t>(params.get_int("num_hypotheses"))) {}

  // const and re-entrant: all per-call state lives in the chooser.
  std::vector<masque::DecodeResult> decode(masque::Stepper& stepper) const override {
    MinPChooser chooser(min_p_, seed_, stepper, num_hypotheses_);
    return masque::decoding::decode_independent(stepper, options_, num_hypotheses_, chooser);
  }

 private:
  masque::DecodingOptions options_;
  MinPOptions min_p_;
  std::uint64_t seed_;
  std::int32_t num_hypotheses_;
};

masque::Plugin* create(const masque::Params& params) {
  return new MinPDecoder(params);
}

// The shared decoding options (max_new_tokens, end_tokens, repetition_penalty, ...) followed
// by this decoder's own.
const std::vector<masque::ParamSpec>& param_specs() {
  static const std::vector<masque::ParamSpec> specs = masque::decoder_param_specs({
      {.name = "min_p",
       .type = masque::ParamType::number,
       .default_value = "0.05",
       .help = "keep the tokens whose probability is at least min_p times the top token's "
               "(0 = all tokens, 1 = only the most likely)",
       .min = 0,
       .max = 1},
      {.name = "temperature",
       .type = masque::ParamType::number,
       .default_value = "1.0",
       .help = "divides the logits of the kept tokens before sampling (applied after the min_p "
               "cut); < 1 sharpens, > 1 flattens, 0 = greedy",
       .min = 0,
       .max = 1e6},
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
       .help = "independent samples per record, returned best score first",
       .min = 1,
       .max = 1024},
  });
  return specs;
}

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::decoder,
      .name = "min-p",
      .version = "1.0.0",
      .license = "MIT",
      .description = "min-p sampling: tokens at least min_p times as likely as the best one",
      .params = param_specs().data(),
      .num_params = static_cast<std::uint32_t>(param_specs().size()),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

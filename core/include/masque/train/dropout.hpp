// Dropout in the trainable network: the rates a model's config.json gives for the places its
// upstream implementation applies dropout, and which element of which record is dropped at
// which place in which step.
//
// A mask is a pure function of (run seed, optimizer step, record, site, element): the Philox
// draws of grad_ops.hpp keyed by mix_seed(seed, record) and counting (step, site, element / 4).
// A record is identified by its micro-batch within the step and its line in the training file,
// and an element by its place inside the record (token position and feature; head, query and
// key), never by where the record sits in a padded or packed batch. So the masks depend neither
// on the thread count nor on how a batch is split, a resumed run draws the same ones, and the
// backward regenerates them instead of storing them. Evaluation passes no context: no dropout.
#pragma once

#include <cstdint>
#include <vector>

#include <boost/config.hpp>
#include <nlohmann/json.hpp>

#include "masque/plugin.hpp"
#include "masque/train/grad_ops.hpp"

namespace masque::train {

// Dropout probabilities by place (0: off); each in [0, 1).
struct DropoutRates {
  float embedding = 0;   // the embeddings' output (after BERT's embedding LayerNorm)
  float residual = 0;    // each attention / MLP sub-layer's output, before the residual add
  float attention = 0;   // the attention probabilities (self and cross)
  float activation = 0;  // the MLP's activation output (encoder-decoder activation_dropout)
  bool any() const { return embedding > 0 || residual > 0 || attention > 0 || activation > 0; }
};

// The rates of config.json under the keys the model plugin declares for each place
// (ModelTraits in masque/plugin.hpp; an absent key is 0, a place without a key has none). A
// value outside [0, 1) is a ConfigError naming the key. override >= 0 (the task's
// `dropout: p`) replaces every one of those keys' values: p at each place the model applies
// dropout upstream, and nowhere else.
BOOST_SYMBOL_VISIBLE DropoutRates dropout_rates_of(const ModelTraits& model,
                                                   const nlohmann::json& config,
                                                   float override = -1.0f);

// Where a mask is drawn. Stack 0 is a decoder-only or encoder-only model's stack and an
// encoder-decoder's decoder, stack 1 its encoder; the embeddings are layer 0.
enum class DropoutPlace : std::uint32_t {
  embedding = 0,
  attention_output = 1,
  cross_output = 2,
  mlp_output = 3,
  attention_probs = 4,
  cross_probs = 5,
  activation = 6,
};
constexpr std::uint32_t dropout_site(int stack, int layer, DropoutPlace place) {
  return (static_cast<std::uint32_t>(stack) * 4096u + static_cast<std::uint32_t>(layer)) * 8u +
         static_cast<std::uint32_t>(place);
}

// Element numbering inside one record's mask at one site.
constexpr std::uint64_t hidden_element(std::int64_t position, std::int64_t width,
                                       std::int64_t feature) {
  return static_cast<std::uint64_t>(position * width + feature);
}
// Queries and keys below 65536 (attention_forward checks).
constexpr std::uint64_t attention_element(std::int64_t head, std::int64_t query, std::int64_t key) {
  return (static_cast<std::uint64_t>(head) << 32) | (static_cast<std::uint64_t>(query) << 16) |
         static_cast<std::uint64_t>(key);
}

// A record's identity within a step: its micro-batch (gradient accumulation) and file line.
constexpr std::uint64_t dropout_record(std::uint64_t micro_batch, std::uint64_t line) {
  return (micro_batch << 40) ^ line;
}

// What a training forward draws its masks from.
struct DropoutContext {
  std::uint64_t seed = 0;
  std::uint64_t step = 0;              // the optimizer step (0-based)
  std::vector<std::uint64_t> records;  // dropout_record() of each batch row
};

// The key of batch row `row`'s mask at `site`.
BOOST_SYMBOL_VISIBLE DropoutKey dropout_key(const DropoutContext& context, std::size_t row,
                                            std::uint32_t site);

}  // namespace masque::train

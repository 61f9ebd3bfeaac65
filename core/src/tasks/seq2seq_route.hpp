// How the seq2seq task runs its model: a source/target adapter, chosen once per run by
// choose_seq2seq_route() from the pipeline (the mask decides, as everywhere in masque):
//  - with a `mask` section, one BERT-like model under that mask (UniLM's seq2seq mask):
//    `[CLS] source [SEP]` is segment 0, the target is generated as segment 1 with the KV cache;
//  - without one, an encoder-decoder model: the encoder reads the source under a held
//    `bidirectional` strategy, the decoder starts from the model's decoder start token.
// Each route checks that the model is of the kind it runs.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "tasks/common.hpp"

namespace masque {

class Seq2SeqRoute {
 public:
  virtual ~Seq2SeqRoute();
  // Positions a record takes in the model with a forced prefix of `prefix` tokens (for the
  // record length limit).
  virtual std::size_t positions(const Item& item, std::size_t prefix) const = 0;
  // True when the target is empty without running the model (an empty encoder source).
  virtual bool trivially_empty(const Item& item) const = 0;
  // The tokens that end a target: the model's EOS (encoder-decoder) or the tokenizer's [SEP].
  virtual std::vector<TokenId> end_tokens() const = 0;
  // Runs the sources of `items` and returns a stepper before each record's first target
  // token. `records` hold each record's id and forced prefix; the route adds the rest.
  // `record`: the stepper keeps the attention behind each step's logits (ModelStepper).
  virtual std::unique_ptr<ModelStepper> start(std::span<Item* const> items,
                                              std::vector<StepperRecord> records,
                                              const AttentionRecording* record = nullptr) const = 0;
  // A stepper with no record yet, set up as start()'s (continuous batching: it admits records
  // that start() began).
  virtual std::unique_ptr<ModelStepper> start_empty() const = 0;
  // Where a target token's attention to the source is: cross-attention over the encoder's
  // source (encoder-decoder), or self-attention whose first columns are the source segment
  // (UniLM). Either way, columns [0, item.tokens.size()) of a row are its source tokens.
  virtual bool cross_attention() const = 0;
};

std::unique_ptr<Seq2SeqRoute> choose_seq2seq_route(const Plugins& plugins);

}  // namespace masque

// What a network learns from a record: the objective lays examples out as the model's inputs
// under the pipeline's mask strategy and names the rows whose outputs are predicted and the
// token each predicts. The mask decides the task (DESIGN.md); the objective only decides which
// outputs carry a loss:
//
//   causal-lm  (causal mask)      text -> tokens; each position after the first is predicted
//                                 from the one before it.
//   mlm        (bidirectional)    text -> tokens; BERT's corruption: each non-special token is
//                                 chosen with probability mlm_probability, a chosen token is fed
//                                 as [MASK] (80 %), a random token (10 %) or itself (10 %) and
//                                 predicted at its own position; seeded per record and epoch.
//   seq2seq    (seq2seq = UniLM,  source + target -> `source tokens [SEP] target [SEP]` where the
//               or causal)        source tokens are what the tokenizer gives with its specials
//                                 (`[CLS] source [SEP]` for BERT); segment 0, then segment 1 from
//                                 the first target token; the output at p predicts the token at
//                                 p + 1 for every p from the source's last token, so the loss is
//                                 on the target tokens and the final [SEP] only (bert4keras).
//               (encoder-decoder) the source is encoded (bidirectional); the decoder reads the
//                                 decoder start token and the target, and predicts the target
//                                 and the end token (teacher forcing).
//   plm        (permutation, with text -> tokens and a factorization order (the record's `order`,
//               its query stream) or the strategy's); only the queries of the last K positions of
//                                 the order are kept, and each predicts its position's token
//                                 (XLNet's partial prediction). A record with a source and a
//                                 target: `source tokens, target slots, [SEP]` where the source
//                                 and the [SEP] are given context outside the order and only the
//                                 target slots are permuted (plm-generate's template:
//                                 `source [SEP] [MASK]...`); with plm_target_slack >= 0 the
//                                 target is padded with [SEP] to (source words + slack) slots,
//                                 so the template's length follows from the source alone.
//   diffusion  (bidirectional,    source + target -> `source tokens, target slots` (the slots as
//               block-causal, or  plm's, [SEP] fillers with plm_target_slack >= 0), segments 0
//               any mask)         then 1; or text -> tokens. Per record a masking ratio
//                                 t ~ U(eps, 1], each slot (each non-special text token) fed as
//                                 [MASK] with probability t, seeded per record and epoch; each
//                                 masked slot predicts its token with weight 1/t, and the step's
//                                 loss divides by all slots (MDLM / LLaDA's bound). Under a mask
//                                 with a query stream for it (block-causal) the slots stay clean
//                                 and the noise goes into the stream's copy of them (BD3-LM:
//                                 noised block b sees itself and the clean blocks before b).
//   classify   (bidirectional     text + label -> tokens; one output per record predicts its label
//               or causal)        (an index of the model's labels, config.json's id2label):
//                                 the first token's (BERT's [CLS], under the pooler) on an
//                                 encoder-only model, the last token's on a decoder-only one,
//                                 the rows Hugging Face's *ForSequenceClassification heads read.
//
// Every layout is the one the matching `masque run` task feeds at inference, so a trained
// model runs unchanged.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <boost/config.hpp>

#include "masque/mask.hpp"
#include "masque/model.hpp"
#include "masque/tokenizer.hpp"
#include "masque/train/dataset.hpp"

namespace masque {
struct Record;
}

namespace masque::train {

enum class ObjectiveKind : std::uint8_t { causal_lm, mlm, seq2seq, plm, classify, diffusion };

BOOST_SYMBOL_VISIBLE ObjectiveKind parse_objective(const std::string& name);  // ConfigError
BOOST_SYMBOL_VISIBLE const char* to_string(ObjectiveKind kind);

struct ObjectiveOptions {
  ObjectiveKind kind = ObjectiveKind::causal_lm;
  std::string source_field = "source", target_field = "target", order_field = "order";
  double mlm_probability = 0.15;
  std::int32_t plm_predict = 0;        // K; 0: use plm_fraction
  double plm_fraction = 1.0 / 6;       // K = max(1, round(fraction x length)) (XLNet: 1/6)
  std::int32_t plm_target_slack = -1;  // plm and diffusion on source/target records: slots =
                                       // source words + slack (-1: the target's own length)
  double diffusion_eps = 1e-3;         // diffusion: t ~ U(eps, 1]
  std::uint64_t seed = 0;              // mlm and diffusion corruption
  std::int32_t max_tokens = 0;         // longer records are skipped (0: the model's positions)
  std::string label_field = "label";   // classify: the record's label (a name or an index)
  std::vector<std::string> labels{};   // classify: the label names in logit order
};

// The mask strategies an objective lays batches out under (plugins, as everywhere in masque):
// `inputs` for the model's input (the decoder's, causal, for an encoder-decoder), `source` for
// an encoder-decoder's encoder (bidirectional).
struct ObjectiveMasks {
  const MaskStrategy* inputs = nullptr;
  const MaskStrategy* source = nullptr;
};

// One micro-batch as the network sees it, and what it must predict.
struct TrainingBatch {
  Batch inputs;  // decoder-only and encoder-only models; an encoder-decoder's decoder input
  Batch source;  // an encoder-decoder's encoder input (batch 0 otherwise)
  std::vector<std::int32_t> rows;  // flat rows of `inputs` (b * length + t) that are predicted
  std::vector<TokenId> labels;     // the token each of those rows predicts
  std::vector<double> weights;     // each row's loss weight (diffusion's 1/t), or empty: 1
  // What this part adds to the step's divisor (diffusion: its slots), or -1: labels.size().
  std::int64_t normalizer = -1;
  std::int64_t count() const {
    return normalizer >= 0 ? normalizer : static_cast<std::int64_t>(labels.size());
  }
};

class BOOST_SYMBOL_VISIBLE Objective {
 public:
  // `target` is the target-side tokenizer of an encoder-decoder (null: `source` for both).
  // ConfigError when the pieces do not fit (no [SEP] for seq2seq on one model, no [MASK] for
  // mlm/plm, a plm mask without the query stream, ...).
  Objective(ObjectiveOptions options, const Tokenizer& source, const Tokenizer* target,
            ObjectiveMasks masks, const ModelInfo& model);

  const ObjectiveOptions& options() const { return options_; }
  // A record as tokens; RecordError for a record that cannot be trained on.
  Example prepare(const Record& record) const;
  // The inputs and labels of a micro-batch (epoch seeds mlm's corruption and plm's random
  // orders).
  TrainingBatch lay_out(std::span<const Example* const> examples, std::int64_t epoch) const;

 private:
  std::vector<TokenId> tokens_of(const Record& record, const std::string& field,
                                 const Tokenizer& tokenizer, bool add_special) const;
  void check_length(std::size_t tokens) const;
  // ConfigError when the mask cannot serve the objective (it would leak what is predicted, or
  // lacks a query stream plm needs).
  void check_mask() const;
  Example build_example(const Record& record) const;
  // RecordError for what would fail only once a step lays the example out: ids outside the
  // model's tables, a record's own order the mask cannot use.
  void check_example(const Example& e) const;
  MaskRequest input_request(const Example& e, std::int64_t epoch) const;
  Example prepare_text(const Record& record) const;
  Example prepare_infill(const Record& record) const;
  std::vector<std::int32_t> order_of(const Record& record) const;  // the record's own, or empty
  TrainingBatch lay_out_encoder_decoder(std::span<const Example* const> examples) const;
  void corrupt(Batch& batch, std::span<const Example* const> examples, std::int64_t epoch,
               TrainingBatch& out) const;
  Example prepare_diffusion(const Record& record) const;
  std::size_t target_slots(std::span<const TokenId> source, std::size_t target) const;
  void check_copy(const Example& e) const;  // RecordError: too long with the noised copy
  void noise(Batch& batch, std::span<const Example* const> examples,
             std::span<const SequenceMask> masks, std::int64_t epoch, TrainingBatch& out) const;

  ObjectiveOptions options_;
  const Tokenizer& source_;
  const Tokenizer& target_;
  ObjectiveMasks masks_;
  ModelInfo model_;
  TokenId sep_ = -1, mask_token_ = -1, pad_ = 0, decoder_start_ = -1, eos_ = -1;
  std::size_t empty_source_ = 0;  // tokens of an empty source (the specials the tokenizer adds)
};

}  // namespace masque::train

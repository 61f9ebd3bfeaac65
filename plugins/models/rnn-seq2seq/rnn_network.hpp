// The `rnn-seq2seq` model as masque train trains it (train::TrainableNetwork): teacher forcing
// over a whole target batch, forward and backward.
//
// The recurrences run on oneDNN's RNN training primitives (rnn_train_layer.hpp): each encoder
// layer and direction as one call over the source batch (the backward direction on every row's
// real tokens reversed, as in rnn_encoder.hpp, so padding never reaches a real state or a
// gradient), each decoder layer one call per target step (input feeding makes step t's input
// depend on step t - 1's attention). Embeddings, the bridge, attention (Bahdanau or Luong),
// the attentional layer and the generator are written with masque/train's linear layers and
// per-row loops here; the backward goes through the same steps in reverse. Gradients are added
// to the ParameterSet's, in torch's layouts and under the checkpoint's names, so a trained
// folder loads in the inference plugin (rnn_model.hpp) unchanged.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "masque/train/network.hpp"
#include "masque/train/trainable.hpp"
#include "rnn_config.hpp"
#include "rnn_train_layer.hpp"

namespace masque::rnn {

class RnnNetwork final : public train::TrainableNetwork {
 public:
  // `params` (parameter_shapes(config), rnn_parameters.hpp) must outlive the network. Dropout
  // and bf16 products are not supported (ConfigError).
  RnnNetwork(RnnConfig config, train::ParameterSet& params, train::NetworkOptions options);

  const train::NetworkOptions& options() const override { return options_; }
  std::unique_ptr<train::NetworkTape> new_tape() const override;
  void forward(const train::TrainingBatch& batch, train::NetworkTape& tape, Tensor& logits,
               const train::DropoutContext* dropout) const override;
  void backward(train::NetworkTape& tape, const Tensor& dlogits) const override;
  std::unique_ptr<train::TrainableNetwork> replica(train::ParameterSet& params) const override;

  struct Tape;

 private:
  using Entry = train::ParameterSet::Entry;
  // One recurrent layer and direction and its four torch tensors.
  struct Recurrent {
    TrainLayer layer;
    Entry *w_ih, *w_hh, *b_ih, *b_hh;
  };
  Recurrent recurrent(const std::string& prefix, std::int32_t layer, const char* suffix,
                      std::int64_t in, std::int64_t hidden);
  Entry* find(const std::string& name) const;  // null when the model has no such tensor

  void encode(Tape& t) const;
  void decode(Tape& t) const;
  void attend(Tape& t, std::int32_t step) const;
  void attend_backward(Tape& t, std::int32_t step, const float* dc, float* ds) const;
  void decode_backward(Tape& t, const Tensor& dlogits) const;
  void encode_backward(Tape& t) const;

  RnnConfig c_;
  train::ParameterSet& params_;
  train::NetworkOptions options_;
  Entry *source_embeddings_ = nullptr, *target_embeddings_ = nullptr;
  std::vector<Recurrent> encoder_forward_, encoder_backward_, decoder_;
  Entry *bridge_w_ = nullptr, *bridge_b_ = nullptr;
  Entry *query_w_ = nullptr, *query_b_ = nullptr, *key_w_ = nullptr, *v_ = nullptr;
  Entry *out_w_ = nullptr, *out_b_ = nullptr;
  Entry *generator_w_ = nullptr, *generator_b_ = nullptr;  // tied: the target embeddings
};

}  // namespace masque::rnn

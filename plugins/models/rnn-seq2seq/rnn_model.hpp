// The `rnn-seq2seq` model plugin's Model: a bidirectional LSTM/GRU encoder and an LSTM/GRU
// decoder with Bahdanau or Luong attention and input feeding, from a config.json and a
// safetensors checkpoint in torch nn.LSTM/nn.GRU tensor names (README.md).
//
// start() encodes the source batch once (its memory and attention keys are shared by every
// row decoded from it) and sets each row's initial state through the bridge; step() feeds one
// target token per row through the decoder layers (one oneDNN RNN step each), attends over the
// row's source and projects to the target vocabulary.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "masque/layers.hpp"
#include "masque/model.hpp"
#include "masque/train/network.hpp"
#include "masque/train/trainable.hpp"
#include "rnn_attention.hpp"
#include "rnn_config.hpp"
#include "rnn_encoder.hpp"
#include "rnn_layer.hpp"

namespace masque::rnn {

// The recurrent state of a batch being decoded: per row, every decoder layer's h (and c for an
// LSTM), the input-feeding vector and which source the row decodes. select() reorders them like
// a KV cache; the source memory is immutable and shared.
class RnnState final : public DecodeState {
 public:
  RnnState(std::shared_ptr<const SourceMemory> source, std::vector<std::int32_t> source_of,
           std::vector<Tensor> h, std::vector<Tensor> c, Tensor feed);

  std::int32_t rows() const override { return static_cast<std::int32_t>(source_of_.size()); }
  void select(std::span<const std::int32_t> rows) override;
  std::unique_ptr<DecodeState> fork() const override;

  const SourceMemory& source() const { return *source_; }
  std::span<const std::int32_t> source_of() const { return source_of_; }
  std::vector<Tensor>& h() { return h_; }
  std::vector<Tensor>& c() { return c_; }  // empty for a GRU
  Tensor& feed() { return feed_; }

  // Step scratch (not copied by fork()).
  struct Scratch {
    Tensor embedded, input, attentional;
    std::vector<Tensor> h, c, y;
    AttentionScratch attention;
  };
  Scratch& scratch() { return scratch_; }

 private:
  std::shared_ptr<const SourceMemory> source_;
  std::vector<std::int32_t> source_of_;
  std::vector<Tensor> h_, c_;  // per layer [rows, Hd]
  Tensor feed_;                // [rows, Hd]: the previous attentional vector
  Scratch scratch_;
};

class Weights;

// The default budget of the encoder's first-layer input-gate tables (MiB; `gate_table_mib`).
inline constexpr std::int64_t kDefaultGateTableMib = 256;

class RnnSeq2SeqModel final : public Model, public train::TrainableModel {
 public:
  // init_seed >= 0: the parameters initialised from that seed (rnn_parameters.hpp; the folder
  // needs only config.json); -1: read from the folder's model.safetensors.
  // `compute`: the type of every product (f32, bf16 or i8: RnnLayer, Linear).
  // `gate_table_mib`: the most the encoder's first-layer input-gate tables may take (Encoder).
  explicit RnnSeq2SeqModel(const std::filesystem::path& path, std::int64_t init_seed = -1,
                           DType compute = DType::f32,
                           std::int64_t gate_table_mib = kDefaultGateTableMib);

  const ModelInfo& info() const override { return info_; }
  // The recurrent layers' Linears (f32 and int8), the bridge, the attention's and the generator.
  LinearList linear_layers() const override;
  // Throws ConfigError: an encoder-decoder runs through start() and step().
  ForwardResult forward(const Batch& batch) const override;
  std::unique_ptr<DecodeState> start(const Batch& batch, Tensor* logits) const override;
  void step(DecodeState& state, const StepInput& input, Tensor& logits) const override;

  // train::TrainableModel: masque train trains the model on RnnNetwork (rnn_network.hpp).
  const char* trainable_architecture() const override { return "rnn-seq2seq"; }
  train::ParameterSet parameters() const override;
  std::unique_ptr<train::TrainableNetwork> network(
      train::ParameterSet& params, const train::NetworkOptions& options) const override;

 private:
  void build(const Weights& weights);
  // Each layer's initial h [rows, Hd] from the encoder's final states.
  std::vector<Tensor> initial_states(const Tensor& final_state) const;

  std::filesystem::path path_;
  std::int64_t init_seed_ = -1;
  DType compute_ = DType::f32;
  std::int64_t gate_table_mib_ = kDefaultGateTableMib;
  RnnConfig config_;
  ModelInfo info_;
  Encoder encoder_;
  Linear bridge_;  // empty: zero initial states
  Tensor target_embeddings_;
  std::vector<RnnLayer> decoder_;
  Attention attention_;
  Linear generator_;
};

}  // namespace masque::rnn

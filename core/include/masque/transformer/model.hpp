// The Transformer tier, part 3: the one cached-model skeleton every model plugin uses.
//
// TransformerModel implements the Model contract (masque/model.hpp) over a network built from
// a TransformerSpec: token checks (RecordErrors naming the row, column and the config key),
// output-row gathering, a reusable logits buffer for forward(), a KV-cache append that is ended
// on every path (an exception leaves the state usable), and forward / start / step for
// decoder-only, encoder-only and encoder-decoder specs. A model plugin is a config reader that
// writes a spec (and a ModelTokens), then constructs this.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "masque/model.hpp"
#include "masque/safetensors.hpp"
#include "masque/transformer/network.hpp"
#include "masque/transformer/spec.hpp"

namespace masque::transformer {

// The special tokens of the model's config (-1: none).
struct ModelTokens {
  TokenId bos = -1, eos = -1, pad = -1, decoder_start = -1;
  TokenId forced_bos = -1;  // ModelInfo::forced_bos
  // Ids besides eos that end a generated sequence (ModelInfo::end_ids).
  std::vector<TokenId> other_end_ids{};
};

class BOOST_SYMBOL_VISIBLE TransformerModel final : public Model {
 public:
  // Builds the network from `spec`, reading every tensor it names from `checkpoint`; every
  // matmul computes in `matmul` (LinearOptions::compute and, for int4, group_size); decoding
  // holds self-attention keys and values in `kv_cache` (f32 or bf16, KvCache).
  TransformerModel(TransformerSpec spec, const SafeTensors& checkpoint, ModelTokens tokens,
                   MatmulType matmul = {}, DType kv_cache = DType::f32);
  ~TransformerModel() override;

  const TransformerSpec& spec() const { return spec_; }
  // Every Linear of the network, named by where it sits ("encoder.0.self_attention.qkv",
  // "decoder.5.mlp.out", "head.output").
  LinearList linear_layers() const override;
  const ModelInfo& info() const override { return info_; }
  ForwardResult forward(const Batch& batch) const override;
  std::unique_ptr<DecodeState> start(const Batch& batch, Tensor* logits) const override;
  void step(DecodeState& state, const StepInput& input, Tensor& logits) const override;

 private:
  // Checks and copies a batch's ids, positions and token types for `stack` (pads become 0).
  void prepare(const Batch& batch, const Stack& stack, std::int32_t vocab, Workspace& ws) const;
  // The same for a step's tokens (StepInput::length per row; pads become 0).
  void prepare_step(const StepInput& input, const KvCache& cache, Workspace& ws) const;
  // The ranks and roles of a step of several tokens per row (or given ranks or roles).
  void step_layout(const StepInput& input, const KvCache& cache, AttentionLayout& layout) const;
  // Final norm and head on `rows` of ws.hidden (all when empty). reuse: logits into this
  // thread's reusable buffer (forward) rather than into *logits' own.
  void outputs(Workspace& ws, std::span<const std::int32_t> rows, Tensor* logits, Tensor* hidden,
               bool reuse) const;
  std::unique_ptr<DecodeState> start_decoder(const Batch& batch, Tensor* logits) const;
  std::unique_ptr<DecodeState> start_encoder_decoder(const Batch& batch) const;
  // `asked` with the layer and head count made explicit (into `resolved`), or null when nothing
  // is asked. ConfigError for a layer, a head or cross-attention the decoder stack lacks.
  const AttentionRecording* resolve(const AttentionRecording* asked,
                                    AttentionRecording& resolved) const;

  DType kv_cache_ = DType::f32;
  TransformerSpec spec_;
  ModelInfo info_;
  Stack encoder_, decoder_;
  Head head_;
};

// The safetensors checkpoint of a model folder: the sharded index when there is one, else
// model.safetensors (errors name what is missing).
SafeTensors open_checkpoint(const std::filesystem::path& folder);

// ConfigError when the checkpoint holds more layers than `spec` reads from it: an unread
// tensor named like one of parameters(spec) but for another layer (digits between dots), as
// when config.json gives fewer layers than the weights have. Other unread tensors (a pooler, a
// head the task does not use) are fine.
void check_no_extra_layers(const SafeTensors& checkpoint, const TransformerSpec& spec);

}  // namespace masque::transformer

// The `encoder-decoder` model plugin's Model: a Transformer encoder-decoder (OpenNMT /
// CTranslate2 "TransformerBase" layout, Marian, BART-like) from a config.json and a safetensors
// checkpoint with Hugging Face BART-style tensor names.
//
// start() encodes a source batch once and projects every decoder layer's cross-attention k, v
// of the memory into the state's KV cache; step() then runs one target token per row through
// the decoder: self-attention over the row's cache, cross-attention over its memory, logits.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "encdec_config.hpp"
#include "encdec_layers.hpp"
#include "encdec_positions.hpp"
#include "masque/model.hpp"

namespace masque::encdec {

// The KV caches of a batch being decoded, and the scratch its steps reuse.
class DecoderState final : public DecodeState {
 public:
  explicit DecoderState(KvCache cache) : cache_(std::move(cache)) {}

  std::int32_t rows() const override { return cache_.rows(); }
  void select(std::span<const std::int32_t> rows) override { cache_.select(rows); }
  std::unique_ptr<DecodeState> fork() const override {
    return std::make_unique<DecoderState>(cache_.fork());
  }

  KvCache& cache() { return cache_; }
  Workspace& workspace() { return workspace_; }
  std::vector<std::int32_t>& positions() { return positions_; }

 private:
  KvCache cache_;
  Workspace workspace_;
  std::vector<std::int32_t> positions_;  // of the step in progress
};

class EncoderDecoderModel final : public Model {
 public:
  // compute: the matmuls' type, f32, bf16 or i8 (LinearOptions::compute).
  explicit EncoderDecoderModel(const std::filesystem::path& path, DType compute = DType::f32);

  const ModelInfo& info() const override { return info_; }
  // Throws ConfigError: an encoder-decoder runs through start() and step().
  ForwardResult forward(const Batch& batch) const override;
  std::unique_ptr<DecodeState> start(const Batch& batch, Tensor* logits) const override;
  void step(DecodeState& state, const StepInput& input, Tensor& logits) const override;

 private:
  void load_embeddings(const Checkpoint& w);
  void load_output(const Checkpoint& w, DType compute);
  // The memory of the source batch, in ws.x.
  void encode(const Batch& batch, Workspace& ws) const;
  // Projects the memory into a new state's cross-attention cache.
  std::unique_ptr<DecoderState> remember(const Batch& batch, Workspace& ws) const;

  EncDecConfig config_;
  ModelInfo info_;
  Tensor source_embeddings_, target_embeddings_;  // multiplied by the embedding scale
  PositionTable source_positions_, target_positions_;
  std::vector<EncoderLayer> encoder_;
  std::vector<DecoderLayer> decoder_;
  LayerNorm encoder_norm_, decoder_norm_;  // empty weight: no final norm
  Linear output_;
};

}  // namespace masque::encdec

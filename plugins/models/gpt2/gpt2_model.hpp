// GPT-2 (Hugging Face GPT2LMHeadModel): learned positions, pre-LayerNorm blocks with a fused
// q/k/v projection, a GELU MLP and a (usually tied) language-model head.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpt2_config.hpp"
#include "masque/kv_cache.hpp"
#include "masque/layers.hpp"
#include "masque/model.hpp"
#include "masque/safetensors.hpp"

namespace masque::gpt2 {

// Activations of one call, kept between calls so that steady-state decoding allocates nothing
// (thread_local for forward(), in the DecodeState for start() and step()).
struct Workspace {
  std::vector<TokenId> ids;             // pads replaced by 0: their value is arbitrary
  std::vector<std::int32_t> positions;  // likewise
  Tensor hidden, normed, qkv, context, projected, inner, selected;
};

// Where self-attention finds its keys and values: the batch itself (forward), or a KV cache
// that the new tokens are being appended to (start, step).
struct AttentionTarget {
  const AttentionLayout* layout = nullptr;
  KvCache* cache = nullptr;
  std::int32_t length = 0;  // new tokens per row
};

// One pre-LayerNorm transformer block.
class Block {
 public:
  Block(const SafeTensors& weights, const std::string& prefix, const Gpt2Config& config,
        std::int32_t index, DType compute);
  // x [rows, hidden] in, updated in place.
  void forward(Tensor& x, Workspace& ws, const AttentionTarget& target) const;

 private:
  void attend(Workspace& ws, const AttentionTarget& target) const;  // ws.qkv -> ws.context

  std::int32_t index_ = 0;
  AttentionDims dims_;
  LayerNorm ln_1_, ln_2_;
  Linear c_attn_, attn_proj_, c_fc_, mlp_proj_;  // c_fc_ carries the activation
};

class Gpt2Model final : public Model {
 public:
  // compute: the matmuls' type, f32, bf16 or i8 (LinearOptions::compute).
  explicit Gpt2Model(const std::filesystem::path& dir, DType compute = DType::f32);

  const ModelInfo& info() const override { return info_; }
  ForwardResult forward(const Batch& batch) const override;
  std::unique_ptr<DecodeState> start(const Batch& batch, Tensor* logits) const override;
  void step(DecodeState& state, const StepInput& input, Tensor& logits) const override;

 private:
  // ws.ids / ws.positions -> ws.hidden, the last block's output.
  void run(Workspace& ws, const AttentionTarget& target) const;
  // Final norm and head, only on `rows` of ws.hidden (all when empty). reuse: the logits go to
  // this thread's reusable buffer (forward) rather than into *logits' own (start, step).
  void outputs(Workspace& ws, std::span<const std::int32_t> rows, Tensor* logits, Tensor* hidden,
               bool reuse) const;

  Gpt2Config config_;
  ModelInfo info_;
  Embedding wte_, wpe_;
  std::vector<Block> blocks_;
  LayerNorm ln_f_;
  Linear head_;
};

}  // namespace masque::gpt2

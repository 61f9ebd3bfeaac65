// Llama (Hugging Face LlamaForCausalLM): RMSNorm pre-norm blocks, rotary positions
// (rotate_half), grouped-query attention and a SwiGLU MLP.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "llama_config.hpp"
#include "masque/kv_cache.hpp"
#include "masque/layers.hpp"
#include "masque/model.hpp"
#include "masque/safetensors.hpp"

namespace masque::llama {

// Activations of one call, kept between calls so that steady-state decoding allocates nothing
// (thread_local for forward(), in the DecodeState for start() and step()).
struct Workspace {
  std::vector<TokenId> ids;             // pads replaced by 0: their value is arbitrary
  std::vector<std::int32_t> positions;  // likewise
  Tensor hidden, normed, qkv, context, projected, gate_up, inner, selected;
};

// Where self-attention finds its keys and values: the batch itself (forward), or a KV cache
// that the new tokens are being appended to (start, step).
struct AttentionTarget {
  const AttentionLayout* layout = nullptr;
  KvCache* cache = nullptr;
  std::int32_t length = 0;  // new tokens per row
};

// One decoder layer.
class Block {
 public:
  Block(const SafeTensors& weights, const std::string& prefix, const LlamaConfig& config,
        const Rotary& rotary, std::int32_t index, DType compute);
  // x [rows, hidden] in, updated in place; ws.positions holds one position per row.
  void forward(Tensor& x, Workspace& ws, const AttentionTarget& target) const;

 private:
  void rotate(Workspace& ws) const;                                 // RoPE on q and k of ws.qkv
  void attend(Workspace& ws, const AttentionTarget& target) const;  // ws.qkv -> ws.context

  std::int32_t index_ = 0;
  AttentionDims dims_;
  Rotary rotary_;
  RmsNorm input_norm_, post_attention_norm_;
  Linear qkv_;  // q_proj, k_proj, v_proj as one matmul
  Linear o_proj_;
  Linear gate_up_;  // gate_proj and up_proj as one matmul: [gate | up]
  Linear down_;
};

class LlamaModel final : public Model {
 public:
  // compute: the matmuls' type, f32, bf16 or i8 (LinearOptions::compute).
  explicit LlamaModel(const std::filesystem::path& dir, DType compute = DType::f32);

  const ModelInfo& info() const override { return info_; }
  ForwardResult forward(const Batch& batch) const override;
  std::unique_ptr<DecodeState> start(const Batch& batch, Tensor* logits) const override;
  void step(DecodeState& state, const StepInput& input, Tensor& logits) const override;

 private:
  // ws.ids / ws.positions -> ws.hidden, the last layer's output.
  void run(Workspace& ws, const AttentionTarget& target) const;
  // Final norm and head, only on `rows` of ws.hidden (all when empty). reuse: the logits go to
  // this thread's reusable buffer (forward) rather than into *logits' own (start, step).
  void outputs(Workspace& ws, std::span<const std::int32_t> rows, Tensor* logits, Tensor* hidden,
               bool reuse) const;

  LlamaConfig config_;
  ModelInfo info_;
  Embedding embed_tokens_;
  std::vector<Block> blocks_;
  RmsNorm norm_;
  Linear head_;
};

}  // namespace masque::llama

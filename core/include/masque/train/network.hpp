// A trainable Transformer built from the same TransformerSpec as the inference network
// (masque/transformer/spec.hpp): the forward keeps what its backward needs, the backward adds
// every parameter's gradient, and the parameters are written back under the checkpoint names
// the spec gives, so a trained folder loads in `masque run` unchanged.
//
// The layers are the inference tier's, run backwards with masque/train's ops: linear layers on
// plain weights (train/linear.hpp), attention under the batch's rank layout evaluated in the
// kernel (train/attention.hpp), norms, activations, rotary and embeddings (train/grad_ops.hpp).
// Not (yet) trainable: relative position biases (T5) and sliding windows; a spec that uses
// them is a ConfigError naming the feature.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <boost/config.hpp>

#include "masque/model.hpp"
#include "masque/safetensors.hpp"
#include "masque/tensor.hpp"
#include "masque/train/dropout.hpp"
#include "masque/train/trainable.hpp"
#include "masque/transformer/spec.hpp"

namespace masque::train {

// Every parameter of a network: its values and its gradient, in the spec's stable order.
class BOOST_SYMBOL_VISIBLE ParameterSet {
 public:
  struct Entry {
    std::string name;
    transformer::ParameterRole role;
    Tensor value, grad;  // f32, owned, the checkpoint's shape
    // Weight decay applies to matrices and embeddings, not to biases and norm weights.
    bool decays() const;
  };

  ParameterSet() = default;
  // Entries a network other than a TrainableTransformer names (trainable.hpp); names unique.
  explicit ParameterSet(std::vector<Entry> entries);
  // The parameters `spec` names, read from `checkpoint` (fine-tuning) ...
  static ParameterSet from_checkpoint(const transformer::TransformerSpec& spec,
                                      const SafeTensors& checkpoint);
  // ... or initialised as the original models are: normal(0, range) for matrices, embeddings
  // and tables, zero biases, unit norm weights, zero norm biases; seeded (SplitMix64 +
  // Box-Muller, the same on every platform).
  static ParameterSet initialised(const transformer::TransformerSpec& spec, double range,
                                  std::uint64_t seed);

  std::size_t size() const { return entries_.size(); }
  Entry& operator[](std::size_t i) { return entries_[i]; }
  const Entry& operator[](std::size_t i) const { return entries_[i]; }
  std::vector<Entry>& entries() { return entries_; }
  const std::vector<Entry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // The entry of a checkpoint name (RuntimeError naming it when the spec has no such tensor).
  Entry& at(const std::string& name);
  const Entry& at(const std::string& name) const;

  void zero_grads();
  std::int64_t count() const;  // number of scalars
  // model.safetensors of the current values, written whole (safetensors_writer.hpp).
  void save(const std::filesystem::path& file) const;

 private:
  void index();
  std::vector<Entry> entries_;
  std::map<std::string, std::size_t> index_;
};

// What a forward keeps for its backward; opaque, reused from step to step.
struct Tape;
struct BOOST_SYMBOL_VISIBLE TapeDeleter {
  void operator()(Tape* tape) const;
};
using TapePtr = std::unique_ptr<Tape, TapeDeleter>;

// How a network computes. matmul_dtype: f32 (the default), or bf16: the linear layers' products,
// forward and backward, take bfloat16 operands (the f32 weights and activations rounded per
// call) with f32 accumulation and output; parameters, gradients and optimizer state stay f32.
// bf16 needs a CPU with AVX-512 BF16 (or AMX) instructions; elsewhere the constructor throws a
// ConfigError saying so.
//
// dropout: the rates of the places the model applies dropout (dropout.hpp); they act only in a
// forward given a DropoutContext (training), never in evaluation. All 0 (the default): no
// dropout anywhere, the network computes exactly as without these options.
struct NetworkOptions {
  DType matmul_dtype = DType::f32;
  DropoutRates dropout{};
};

class BOOST_SYMBOL_VISIBLE TrainableTransformer final : public TrainableNetwork {
 public:
  // The network of `spec` over `params` (which must come from the same spec and outlive it).
  TrainableTransformer(transformer::TransformerSpec spec, ParameterSet& params,
                       NetworkOptions options = {});
  ~TrainableTransformer() override;
  TrainableTransformer(const TrainableTransformer&) = delete;
  TrainableTransformer& operator=(const TrainableTransformer&) = delete;

  const transformer::TransformerSpec& spec() const { return spec_; }
  const NetworkOptions& options() const override { return options_; }
  TapePtr make_tape() const;

  // Logits [rows.size(), vocab] of flat rows `rows` of `inputs` (b * length + t). `source` is
  // an encoder-decoder's encoder input (null otherwise); `inputs` is then the decoder's.
  // `dropout`: training with the options' dropout rates, the masks drawn from this context
  // (one record key per batch row; the same rows in `source`); null: no dropout.
  void forward(const Batch& inputs, const Batch* source, std::span<const std::int32_t> rows,
               Tape& tape, Tensor& logits, const DropoutContext* dropout = nullptr) const;
  // Adds d(loss)/d(parameter) to every parameter's grad, given d(loss)/d(logits) of the last
  // forward on `tape`.
  void backward(Tape& tape, const Tensor& dlogits) const;

  // TrainableNetwork: the forward above on a TrainingBatch (its inputs, source and rows).
  std::unique_ptr<NetworkTape> new_tape() const override;
  void forward(const TrainingBatch& batch, NetworkTape& tape, Tensor& logits,
               const DropoutContext* dropout) const override;
  void backward(NetworkTape& tape, const Tensor& dlogits) const override;
  std::unique_ptr<TrainableNetwork> replica(ParameterSet& params) const override;

 private:
  struct Impl;
  transformer::TransformerSpec spec_;
  NetworkOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace masque::train

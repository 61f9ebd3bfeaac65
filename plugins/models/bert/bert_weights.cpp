#include "bert_weights.hpp"

#include <string>

#include "masque/error.hpp"

namespace masque::bert {

namespace {

// Reads tensors of the encoder under the checkpoint's prefix, and of the head as they are.
class TensorReader {
 public:
  TensorReader(const SafeTensors& checkpoint, const BertConfig& config)
      : st_(checkpoint), config_(config), prefix_(detect_prefix(checkpoint)) {}

  Tensor encoder(const std::string& name, const Shape& shape) const {
    return st_.get_f32(prefix_ + name, shape);
  }
  Tensor head(const std::string& name, const Shape& shape) const {
    return st_.get_f32(name, shape);
  }
  bool has_head(const std::string& name) const { return st_.contains(name); }

  std::int64_t hidden() const { return config_.hidden_size; }

 private:
  static std::string detect_prefix(const SafeTensors& st) {
    if (st.contains("bert.embeddings.word_embeddings.weight")) return "bert.";
    if (st.contains("embeddings.word_embeddings.weight")) return "";
    throw ConfigError(st.path().string() +
                      ": no tensor 'bert.embeddings.word_embeddings.weight' (nor "
                      "'embeddings.word_embeddings.weight'): not a BERT checkpoint");
  }

  const SafeTensors& st_;
  const BertConfig& config_;
  std::string prefix_;
};

LayerNorm load_norm(const TensorReader& r, const std::string& name, float eps, bool head = false) {
  const Shape shape{r.hidden()};
  if (head) return {r.head(name + ".weight", shape), r.head(name + ".bias", shape), eps};
  return {r.encoder(name + ".weight", shape), r.encoder(name + ".bias", shape), eps};
}

Embeddings load_embeddings(const TensorReader& r, const BertConfig& c) {
  const std::int64_t h = c.hidden_size;
  Embeddings e;
  e.words.table = r.encoder("embeddings.word_embeddings.weight", {c.vocab_size, h});
  e.positions.table = r.encoder("embeddings.position_embeddings.weight", {c.max_positions, h});
  e.token_types.table =
      r.encoder("embeddings.token_type_embeddings.weight", {c.type_vocab_size, h});
  e.norm = load_norm(r, "embeddings.LayerNorm", c.layer_norm_eps);
  return e;
}

EncoderLayer load_layer(const TensorReader& r, const BertConfig& c, std::int32_t index,
                        DType compute) {
  const std::string p = "encoder.layer." + std::to_string(index) + ".";
  const std::int64_t h = c.hidden_size, inter = c.intermediate_size;
  auto weight = [&](const std::string& name, std::int64_t out, std::int64_t in) {
    return r.encoder(p + name + ".weight", {out, in});
  };
  auto bias = [&](const std::string& name, std::int64_t out) {
    return r.encoder(p + name + ".bias", {out});
  };
  const Tensor qkv_w[] = {weight("attention.self.query", h, h), weight("attention.self.key", h, h),
                          weight("attention.self.value", h, h)};
  const Tensor qkv_b[] = {bias("attention.self.query", h), bias("attention.self.key", h),
                          bias("attention.self.value", h)};
  const LinearOptions plain{.compute = compute};
  EncoderLayer l;
  l.qkv = Linear::concat(qkv_w, qkv_b, plain);
  l.attention_output =
      Linear(weight("attention.output.dense", h, h), bias("attention.output.dense", h), plain);
  l.attention_norm = load_norm(r, p + "attention.output.LayerNorm", c.layer_norm_eps);
  l.intermediate = Linear(weight("intermediate.dense", inter, h), bias("intermediate.dense", inter),
                          {.activation = c.hidden_act, .compute = compute});
  l.output = Linear(weight("output.dense", h, inter), bias("output.dense", h), plain);
  l.output_norm = load_norm(r, p + "output.LayerNorm", c.layer_norm_eps);
  return l;
}

// The decoder weight is the word embedding matrix when tied (HF's default: a stored
// cls.predictions.decoder.weight is then overwritten by the tie); its bias is cls.predictions.bias
// (older checkpoints also store it as cls.predictions.decoder.bias).
Linear load_decoder(const TensorReader& r, const BertConfig& c, const Tensor& word_embeddings,
                    DType compute) {
  const Shape vocab{c.vocab_size};
  const Tensor bias =
      r.has_head("cls.predictions.bias") || !r.has_head("cls.predictions.decoder.bias")
          ? r.head("cls.predictions.bias", vocab)
          : r.head("cls.predictions.decoder.bias", vocab);
  const LinearOptions options{.compute = compute};
  if (c.tie_word_embeddings) return Linear(word_embeddings, bias, options);
  return Linear(r.head("cls.predictions.decoder.weight", {c.vocab_size, c.hidden_size}), bias,
                options);
}

MlmHead load_head(const TensorReader& r, const BertConfig& c, const Tensor& word_embeddings,
                  DType compute) {
  const std::int64_t h = c.hidden_size;
  MlmHead head;
  head.transform = Linear(r.head("cls.predictions.transform.dense.weight", {h, h}),
                          r.head("cls.predictions.transform.dense.bias", {h}),
                          {.activation = c.hidden_act, .compute = compute});
  head.norm = load_norm(r, "cls.predictions.transform.LayerNorm", c.layer_norm_eps, true);
  head.decoder = load_decoder(r, c, word_embeddings, compute);
  return head;
}

}  // namespace

SafeTensors open_checkpoint(const std::filesystem::path& folder) {
  for (const char* name : {"model.safetensors.index.json", "model.safetensors"})
    if (std::filesystem::is_regular_file(folder / name)) return SafeTensors::open(folder / name);
  return SafeTensors::open(folder);  // reports what is missing
}

BertWeights load_weights(const SafeTensors& checkpoint, const BertConfig& config, bool mlm_head,
                         DType compute) {
  const TensorReader reader(checkpoint, config);
  BertWeights w;
  w.embeddings = load_embeddings(reader, config);
  for (std::int32_t i = 0; i < config.num_layers; ++i)
    w.layers.push_back(load_layer(reader, config, i, compute));
  if (mlm_head) w.head = load_head(reader, config, w.embeddings.words.table, compute);
  return w;
}

}  // namespace masque::bert

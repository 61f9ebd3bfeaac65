#include "rnn_parameters.hpp"

#include <cstring>

#include "masque/random.hpp"

namespace masque::rnn {

namespace {

using transformer::ParameterRole;

void add_rnn(std::vector<ParameterShape>& out, const std::string& prefix, std::int32_t layer,
             const char* suffix, std::int64_t gates, std::int64_t in, std::int64_t hidden) {
  const std::string l = "_l" + std::to_string(layer) + suffix;
  out.push_back({prefix + ".weight_ih" + l, {gates * hidden, in}, ParameterRole::matrix});
  out.push_back({prefix + ".weight_hh" + l, {gates * hidden, hidden}, ParameterRole::matrix});
  out.push_back({prefix + ".bias_ih" + l, {gates * hidden}, ParameterRole::bias});
  out.push_back({prefix + ".bias_hh" + l, {gates * hidden}, ParameterRole::bias});
}

}  // namespace

std::vector<ParameterShape> parameter_shapes(const RnnConfig& c) {
  std::vector<ParameterShape> out;
  const std::int64_t G = c.cell == Cell::lstm ? 4 : 3;
  const std::int64_t E = c.embedding_size, He = c.encoder_hidden, Hd = c.decoder_hidden;
  const std::int64_t M = c.memory_size(), A = c.attention_size;
  out.push_back({"encoder.embed_tokens.weight", {c.source_vocab, E}, ParameterRole::embedding});
  for (std::int32_t l = 0; l < c.encoder_layers; ++l)
    for (const char* suffix : {"", "_reverse"})
      add_rnn(out, "encoder.rnn", l, suffix, G, l == 0 ? E : M, He);
  if (c.bridge == Bridge::dense) {
    out.push_back({"bridge.weight", {c.decoder_layers * Hd, M}, ParameterRole::matrix});
    out.push_back({"bridge.bias", {c.decoder_layers * Hd}, ParameterRole::bias});
  }
  out.push_back({"decoder.embed_tokens.weight", {c.target_vocab, E}, ParameterRole::embedding});
  for (std::int32_t l = 0; l < c.decoder_layers; ++l)
    add_rnn(out, "decoder.rnn", l, "", G, l == 0 ? c.decoder_input_size() : Hd, Hd);
  const std::string a = "decoder.attention.";
  if (c.attention == AttentionKind::bahdanau) {
    out.push_back({a + "query_proj.weight", {A, Hd}, ParameterRole::matrix});
    out.push_back({a + "query_proj.bias", {A}, ParameterRole::bias});
    out.push_back({a + "key_proj.weight", {A, M}, ParameterRole::matrix});
    out.push_back({a + "v.weight", {1, A}, ParameterRole::matrix});
  } else {
    out.push_back({a + "key_proj.weight", {Hd, M}, ParameterRole::matrix});
  }
  out.push_back({a + "out_proj.weight", {Hd, M + Hd}, ParameterRole::matrix});
  if (c.attention_output_bias) out.push_back({a + "out_proj.bias", {Hd}, ParameterRole::bias});
  if (!c.tie_output) {
    out.push_back({"generator.weight", {c.target_vocab, Hd}, ParameterRole::matrix});
    if (c.output_bias) out.push_back({"generator.bias", {c.target_vocab}, ParameterRole::bias});
  }
  return out;
}

train::ParameterSet checkpoint_parameters(const RnnConfig& config, const SafeTensors& checkpoint) {
  std::vector<train::ParameterSet::Entry> entries;
  for (const ParameterShape& p : parameter_shapes(config)) {
    const Tensor stored = checkpoint.get_f32(p.name, p.shape);
    Tensor value(p.shape);
    std::memcpy(value.raw(), stored.raw(), value.bytes());  // owned: training writes into it
    entries.push_back({p.name, p.role, std::move(value), Tensor::zeros(p.shape)});
  }
  return train::ParameterSet(std::move(entries));
}

train::ParameterSet initialised_parameters(const RnnConfig& config, std::uint64_t seed) {
  std::vector<train::ParameterSet::Entry> entries;
  std::uint64_t tensor = 0;
  for (const ParameterShape& p : parameter_shapes(config)) {
    Tensor value(p.shape);
    SplitMix64 rng(mix_seed(seed, tensor++));
    float* v = value.f32();
    for (std::int64_t i = 0; i < value.numel(); ++i)
      v[i] = static_cast<float>(0.2 * rng.uniform() - 0.1);
    entries.push_back({p.name, p.role, std::move(value), Tensor::zeros(p.shape)});
  }
  return train::ParameterSet(std::move(entries));
}

}  // namespace masque::rnn

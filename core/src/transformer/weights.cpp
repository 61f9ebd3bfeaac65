// WeightReader and Norm: how the tier reads a spec's tensors.
#include <vector>

#include "masque/ops.hpp"
#include "masque/transformer/network.hpp"

namespace masque::transformer {

Tensor WeightReader::tensor(const TensorSpec& spec) const {
  if (!spec.present()) return {};
  return checkpoint_.get_f32(spec.name, spec.shape);
}

Tensor WeightReader::stored(const TensorSpec& spec) const {
  if (!spec.present()) return {};
  Tensor t = checkpoint_.get_float(spec.name, spec.shape);
  // The finiteness check read every page; only the rows a run looks up need to stay.
  checkpoint_.release(spec.name);
  return t;
}

namespace {

// A bias stored as [1, n] (BART/Marian's final_logits_bias buffer) is used as [n].
Tensor as_vector(Tensor bias) {
  if (bias.rank() == 2 && bias.dim(0) == 1) return bias.reshaped({bias.dim(1)});
  return bias;
}

}  // namespace

Linear WeightReader::linear(const LinearSpec& spec, Activation activation) const {
  // The weight as stored: Linear widens it only where its matmul type needs f32 (int4 quantizes
  // a BF16 weight a feature at a time).
  const Tensor weight = checkpoint_.get_float(spec.weight.name, spec.weight.shape);
  Linear layer(weight, as_vector(tensor(spec.bias)),
               {.activation = activation,
                .layout = spec.layout,
                .compute = matmul_.compute,
                .group_size = matmul_.group_size},
               Int8Policy::where_it_pays);
  checkpoint_.release(spec.weight.name);
  return layer;
}

Linear WeightReader::fused(std::span<const LinearSpec> specs, Activation activation) const {
  if (specs.size() == 1) return linear(specs.front(), activation);
  std::vector<Tensor> weights, biases;
  bool any_bias = false;
  for (const LinearSpec& s : specs) any_bias = any_bias || s.bias.present();
  for (const LinearSpec& s : specs) {
    weights.push_back(tensor(s.weight));
    // A projection without a bias among ones with biases gets zeros (same result).
    if (any_bias)
      biases.push_back(s.bias.present() ? as_vector(tensor(s.bias))
                                        : Tensor::zeros({s.out_features()}));
  }
  Linear layer = Linear::concat(weights, biases,
                                {.activation = activation,
                                 .layout = specs.front().layout,
                                 .compute = matmul_.compute,
                                 .group_size = matmul_.group_size},
                                Int8Policy::where_it_pays);
  weights.clear();
  for (const LinearSpec& s : specs) checkpoint_.release(s.weight.name);
  return layer;
}

Norm::Norm(const NormSpec& spec, const WeightReader& weights)
    : kind_(spec.kind),
      weight_(weights.tensor(spec.weight)),
      bias_(weights.tensor(spec.bias)),
      eps_(spec.eps) {}

void Norm::forward(const Tensor& x, Tensor& y) const {
  if (kind_ == NormKind::rms_norm)
    rms_norm(x, weight_, eps_, y);
  else
    layer_norm(x, weight_, bias_, eps_, y);
}

}  // namespace masque::transformer

// WeightReader and Norm: how the tier reads a spec's tensors.
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "masque/transformer/network.hpp"
#include "masque/transformer/quantized_folder.hpp"

namespace masque::transformer {

Tensor WeightReader::tensor(const TensorSpec& spec) const {
  if (!spec.present()) return {};
  return checkpoint_.get_f32(spec.name, spec.shape);
}

Tensor WeightReader::stored(const TensorSpec& spec) const {
  if (!spec.present()) return {};
  Tensor t = checkpoint_.get_float(spec.name, spec.shape);
  // The finiteness check read every page; only the rows a run looks up need to stay, and a
  // lookup should bring back its own page only (on a 0.5B model a 512-token prompt's random ids
  // otherwise mapped 80 MB of the table's page-cache folios).
  checkpoint_.release(spec.name);
  checkpoint_.read_rows_at_random(spec.name);
  return t;
}

namespace {

// A bias stored as [1, n] (BART/Marian's final_logits_bias buffer) is used as [n].
Tensor as_vector(Tensor bias) {
  if (bias.rank() == 2 && bias.dim(0) == 1) return bias.reshaped({bias.dim(1)});
  return bias;
}

// Vectors one after the other, as f32.
Tensor concat_vectors(const std::vector<Tensor>& parts) {
  std::int64_t n = 0;
  for (const Tensor& p : parts) n += p.numel();
  Tensor out({n});
  float* o = out.f32();
  for (const Tensor& p : parts) {
    const Tensor f = p.dtype() == DType::f32 ? p : p.to_f32();
    std::memcpy(o, f.f32(), f.bytes());
    o += f.numel();
  }
  return out;
}

// The int8 levels a quantized checkpoint was written with (its "masque.quantization"
// metadata; 127 without).
std::int32_t int8_levels(const SafeTensors& checkpoint) {
  const auto& metadata = checkpoint.metadata();
  const auto it = metadata.find("masque.quantization");
  if (it == metadata.end()) return 127;
  const nlohmann::json entry = nlohmann::json::parse(it->second, nullptr, false);
  const auto q = entry.is_discarded()
                     ? std::nullopt
                     : read_quantization({{"quantization", entry}}, checkpoint.path());
  if (!q)
    throw ConfigError(checkpoint.path().string() + ": malformed masque.quantization metadata");
  return q->int8_levels;
}

// A quantized Linear from its parts; a malformed one is a ConfigError naming the tensor.
Linear from_quantized(std::span<const QuantizedWeight> parts, const Tensor& bias,
                      Activation activation, const std::string& what) {
  try {
    return Linear::quantized(parts, bias, activation, what);
  } catch (const RuntimeError& e) {
    throw ConfigError(e.what());
  }
}

}  // namespace

std::optional<QuantizedWeight> WeightReader::quantized(const LinearSpec& spec) const {
  const std::string values_name = quantized_values_name(spec.weight.name);
  if (!checkpoint_.contains(values_name)) return std::nullopt;
  const SafeTensorEntry& e = checkpoint_.entry(values_name);
  const std::string what = e.file.string() + ": tensor '" + values_name + "'";
  QuantizedWeight q;
  q.values = checkpoint_.get(values_name);
  q.scales = checkpoint_.get(quantized_scales_name(spec.weight.name));
  if (q.values.dtype() == DType::u8) {
    q.type = DType::i4;
    const std::int64_t groups = q.scales.rank() == 2 ? q.scales.dim(1) : 0;
    if (groups <= 0 || spec.in_features() % groups != 0)
      throw ConfigError(what + ": its scales (" + masque::to_string(q.scales.shape()) +
                        ") do not divide its " + std::to_string(spec.in_features()) + " inputs");
    q.group_size = static_cast<std::int32_t>(spec.in_features() / groups);
  } else if (q.values.dtype() == DType::i8) {
    q.type = DType::i8;
    q.levels = int8_levels(checkpoint_);
  } else {
    throw ConfigError(what + ": is " + std::string(to_string(q.values.dtype())) +
                      ", expected I8 (int8) or U8 (int4)");
  }
  if (q.type != matmul_.compute || (q.type == DType::i4 && q.group_size != matmul_.group_size))
    throw ConfigError(what + ": is quantized to " + (q.type == DType::i4 ? "int4" : "int8") +
                      (q.type == DType::i4 ? " in groups of " + std::to_string(q.group_size) : "") +
                      ", but the model is built with another matmul_dtype (a quantized folder "
                      "runs in its own type: matmul_dtype auto)");
  const Shape expected = q.type == DType::i4 ? Shape{spec.out_features(), spec.in_features() / 2}
                                             : Shape{spec.out_features(), spec.in_features()};
  if (q.values.shape() != expected)
    throw ConfigError(what + ": has shape " + masque::to_string(q.values.shape()) + ", expected " +
                      masque::to_string(expected));
  const std::string scales_name = quantized_scales_name(spec.weight.name);
  const Shape scales_shape = q.type == DType::i4
                                 ? Shape{spec.out_features(), spec.in_features() / q.group_size}
                                 : Shape{spec.out_features()};
  const DType scales_type = q.type == DType::i4 ? DType::bf16 : DType::f32;
  if (q.scales.dtype() != scales_type || q.scales.shape() != scales_shape)
    throw ConfigError(checkpoint_.entry(scales_name).file.string() + ": tensor '" + scales_name +
                      "': is " + to_string(q.scales.dtype()) + " " +
                      masque::to_string(q.scales.shape()) + ", expected " + to_string(scales_type) +
                      " " + masque::to_string(scales_shape));
  return q;
}

namespace {

// Drops the mapped pages of a quantized weight's tensors once a Linear holds its copy.
void release_quantized(const SafeTensors& checkpoint, const std::string& weight) {
  checkpoint.release(quantized_values_name(weight));
  checkpoint.release(quantized_scales_name(weight));
}

}  // namespace

Linear WeightReader::linear(const LinearSpec& spec, Activation activation) const {
  if (auto q = quantized(spec)) {
    Linear layer = from_quantized(std::span(&*q, 1), as_vector(tensor(spec.bias)), activation,
                                  checkpoint_.path().string() + ": " + spec.weight.name);
    release_quantized(checkpoint_, spec.weight.name);
    return layer;
  }
  // The weight as stored: Linear widens it only where its matmul type needs f32 (int4 quantizes
  // a BF16 weight a feature at a time).
  const Tensor weight = checkpoint_.get_float(spec.weight.name, spec.weight.shape);
  Linear layer(weight, as_vector(tensor(spec.bias)),
               {.activation = activation,
                .layout = spec.layout,
                .compute = matmul_.compute,
                .group_size = matmul_.group_size},
               Int8Policy::where_it_pays,
               [&](std::size_t bytes) { checkpoint_.release(spec.weight.name, bytes); });
  checkpoint_.release(spec.weight.name);
  return layer;
}

Linear WeightReader::fused(std::span<const LinearSpec> specs, Activation activation) const {
  if (specs.size() == 1) return linear(specs.front(), activation);
  std::vector<Tensor> weights, biases;
  bool any_bias = false;
  for (const LinearSpec& s : specs) any_bias = any_bias || s.bias.present();
  // A projection without a bias among ones with biases gets zeros (same result).
  for (const LinearSpec& s : specs)
    if (any_bias)
      biases.push_back(s.bias.present() ? as_vector(tensor(s.bias))
                                        : Tensor::zeros({s.out_features()}));
  std::vector<QuantizedWeight> parts;
  for (const LinearSpec& s : specs)
    if (auto q = quantized(s)) parts.push_back(std::move(*q));
  if (!parts.empty()) {
    if (parts.size() != specs.size())
      throw ConfigError(checkpoint_.path().string() + ": " + specs.front().weight.name +
                        " and the projections fused with it are not all quantized");
    Linear layer = from_quantized(parts, any_bias ? concat_vectors(biases) : Tensor(), activation,
                                  checkpoint_.path().string() + ": " + specs.front().weight.name);
    for (const LinearSpec& s : specs) release_quantized(checkpoint_, s.weight.name);
    return layer;
  }
  // In their stored type (a BF16 checkpoint's pieces are fused as BF16).
  for (const LinearSpec& s : specs)
    weights.push_back(checkpoint_.get_float(s.weight.name, s.weight.shape));
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
      eps_(spec.eps) {
  if (!spec.unit_offset) return;
  // (1 + w) once at load, then the plain norm; a copy, as an F32 file's tensor is its mapping.
  Tensor offset(weight_.shape());
  for (std::int64_t i = 0; i < weight_.numel(); ++i) offset.f32()[i] = weight_.f32()[i] + 1.0f;
  weight_ = std::move(offset);
}

void Norm::forward(const Tensor& x, Tensor& y) const {
  if (kind_ == NormKind::rms_norm)
    rms_norm(x, weight_, eps_, y);
  else
    layer_norm(x, weight_, bias_, eps_, y);
}

}  // namespace masque::transformer

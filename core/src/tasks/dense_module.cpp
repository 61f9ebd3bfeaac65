#include "tasks/dense_module.hpp"

#include <string>

#include "masque/config_json.hpp"
#include "masque/error.hpp"
#include "masque/safetensors.hpp"

namespace masque {

namespace {

// The torch module sentence-transformers names by its class path.
Activation dense_activation(const JsonConfig& config) {
  const std::string name =
      config.get_string("activation_function", "torch.nn.modules.activation.Tanh");
  const std::string leaf = name.substr(name.rfind('.') + 1);
  if (leaf == "Tanh") return Activation::tanh;
  if (leaf == "Identity") return Activation::none;
  if (leaf == "ReLU") return Activation::relu;
  if (leaf == "GELU") return Activation::gelu;
  if (leaf == "SiLU") return Activation::silu;
  throw ConfigError(config.file().string() + ": key 'activation_function': '" + name +
                    "' is not one masque has (Tanh, Identity, ReLU, GELU, SiLU)");
}

}  // namespace

DenseModule::DenseModule(const std::filesystem::path& dir, std::int64_t inputs) {
  const JsonConfig config = JsonConfig::load(dir / "config.json");
  const std::int64_t in = config.get_int("in_features"), out = config.get_int("out_features");
  if (in != inputs)
    throw ConfigError(config.file().string() + ": key 'in_features': " + std::to_string(in) +
                      ", but the model's hidden size is " + std::to_string(inputs));
  if (out <= 0)
    throw ConfigError(config.file().string() + ": key 'out_features': must be positive");
  activation_ = dense_activation(config);
  if (!std::filesystem::is_regular_file(dir / "model.safetensors"))
    throw ConfigError((dir / "model.safetensors").string() +
                      ": missing (a Dense module saved as pytorch_model.bin cannot be read: "
                      "save it again with safetensors)");
  const SafeTensors weights = SafeTensors::open(dir / "model.safetensors");
  weight_ = weights.get_f32("linear.weight", {out, in}).clone();
  if (config.get_bool("bias", true)) bias_ = weights.get_f32("linear.bias", {out}).clone();
}

std::vector<float> DenseModule::apply(const std::vector<float>& x) const {
  const std::int64_t out = weight_.dim(0), in = weight_.dim(1);
  Tensor y({1, out});
  for (std::int64_t o = 0; o < out; ++o) {
    double sum = bias_.numel() ? double{bias_.f32()[o]} : 0.0;
    const float* w = weight_.f32() + o * in;
    for (std::int64_t i = 0; i < in; ++i) sum += double{w[i]} * x[static_cast<std::size_t>(i)];
    y.f32()[o] = static_cast<float>(sum);
  }
  activate(activation_, y);
  return {y.f32(), y.f32() + out};
}

}  // namespace masque

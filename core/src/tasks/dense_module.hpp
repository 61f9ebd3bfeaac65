// A sentence-transformers Dense module (models.Dense, saved as 2_Dense/): after pooling, a
// vector becomes act(W x + b). Its folder holds config.json (in_features, out_features, bias,
// activation_function) and model.safetensors (linear.weight [out, in], linear.bias [out]).
#pragma once

#include <filesystem>
#include <vector>

#include "masque/ops.hpp"
#include "masque/tensor.hpp"

namespace masque {

class DenseModule {
 public:
  // ConfigError naming the file and key when the folder is not a Dense module masque can run,
  // or when its in_features is not `inputs` (the model's hidden size).
  DenseModule(const std::filesystem::path& dir, std::int64_t inputs);
  std::int64_t outputs() const { return weight_.dim(0); }
  std::vector<float> apply(const std::vector<float>& x) const;

 private:
  Tensor weight_, bias_;
  Activation activation_ = Activation::none;
};

}  // namespace masque

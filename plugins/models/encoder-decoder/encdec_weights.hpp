// Typed access to the tensors of a checkpoint: each one is checked against the shape the
// configuration implies, and a missing or misshapen tensor is a ConfigError naming the file and
// the tensor.
#pragma once

#include <cstdint>
#include <string>

#include "masque/layers.hpp"
#include "masque/safetensors.hpp"
#include "masque/tensor.hpp"

namespace masque::encdec {

class Checkpoint {
 public:
  explicit Checkpoint(SafeTensors tensors) : tensors_(std::move(tensors)) {}

  bool has(const std::string& name) const { return tensors_.contains(name); }
  Tensor matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const {
    return tensors_.get_f32(name, {rows, cols});
  }
  Tensor vector(const std::string& name, std::int64_t n) const {
    return tensors_.get_f32(name, {n});
  }
  // `name` when the layer has a bias, else no tensor.
  Tensor bias(const std::string& name, std::int64_t n, bool present) const {
    return present ? vector(name, n) : Tensor();
  }
  // `prefix`.weight and `prefix`.bias.
  LayerNorm layer_norm(const std::string& prefix, std::int64_t n, float eps) const {
    return {vector(prefix + ".weight", n), vector(prefix + ".bias", n), eps};
  }

 private:
  SafeTensors tensors_;
};

}  // namespace masque::encdec

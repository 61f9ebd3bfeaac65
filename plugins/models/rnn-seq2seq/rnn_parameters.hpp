// Every tensor of an `rnn-seq2seq` model (README.md, "Tensor names") with its shape and role,
// and the model's parameters as masque train holds them (train::ParameterSet): read from a
// checkpoint, or initialised from a seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "masque/safetensors.hpp"
#include "masque/train/network.hpp"
#include "rnn_config.hpp"

namespace masque::rnn {

struct ParameterShape {
  std::string name;
  Shape shape;
  transformer::ParameterRole role;
};

// In the README's order: encoder, bridge, decoder, attention, generator.
std::vector<ParameterShape> parameter_shapes(const RnnConfig& config);

// The checkpoint's tensors (ConfigError naming a missing or misshapen one).
train::ParameterSet checkpoint_parameters(const RnnConfig& config, const SafeTensors& checkpoint);
// Every parameter uniform in [-0.1, 0.1] (Luong et al. 2015; OpenNMT-py's param_init 0.1):
// one SplitMix64 stream per tensor, seeded by mix_seed(seed, tensor index).
train::ParameterSet initialised_parameters(const RnnConfig& config, std::uint64_t seed);

}  // namespace masque::rnn

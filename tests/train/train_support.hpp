// Helpers of the training-op tests: the PyTorch fixtures (reference_ops.py) and the tolerance.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "masque/tensor.hpp"

namespace masque::test {

// <build>/tests/train/fixtures/<name>.json, written by reference_ops.py (the CTest fixture).
nlohmann::json train_fixture(const std::string& name);

std::vector<float> floats(const nlohmann::json& values);    // exact: the inputs are f32
std::vector<double> doubles(const nlohmann::json& values);  // null -> -inf
std::vector<std::int32_t> ints(const nlohmann::json& values);
Tensor tensor(const nlohmann::json& values, Shape shape);

// The tolerance of every comparison with a float64 reference: the largest error relative to
// the largest reference magnitude of the tensor (max |a - e| <= rtol * max |e|), so that
// elements near zero are judged on the tensor's scale.
constexpr double kRelTol = 1e-5;

// max |a - e| / max |e| (infinite entries must match exactly; 0 for an all-zero reference
// matched exactly).
double relative_error(const float* actual, const std::vector<double>& expected);
double relative_error(const std::vector<float>& actual, const std::vector<double>& expected);

}  // namespace masque::test

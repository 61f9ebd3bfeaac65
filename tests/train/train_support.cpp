#include "train_support.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>

namespace masque::test {

nlohmann::json train_fixture(const std::string& name) {
  const std::string path = std::string(MASQUE_TRAIN_FIXTURES) + "/" + name + ".json";
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error(path +
                             " is missing: run the test 'test_train: generate the "
                             "PyTorch references' (ctest runs it first)");
  return nlohmann::json::parse(in);
}

std::vector<float> floats(const nlohmann::json& values) {
  std::vector<float> out;
  out.reserve(values.size());
  for (const auto& v : values) out.push_back(static_cast<float>(v.get<double>()));
  return out;
}

std::vector<double> doubles(const nlohmann::json& values) {
  std::vector<double> out;
  out.reserve(values.size());
  for (const auto& v : values)
    out.push_back(v.is_null() ? -std::numeric_limits<double>::infinity() : v.get<double>());
  return out;
}

std::vector<std::int32_t> ints(const nlohmann::json& values) {
  std::vector<std::int32_t> out;
  for (const auto& v : values) out.push_back(v.get<std::int32_t>());
  return out;
}

Tensor tensor(const nlohmann::json& values, Shape shape) {
  Tensor t(std::move(shape));
  const std::vector<float> f = floats(values);
  if (static_cast<std::int64_t>(f.size()) != t.numel())
    throw std::runtime_error("fixture tensor of " + std::to_string(f.size()) + " values for " +
                             to_string(t.shape()));
  std::copy(f.begin(), f.end(), t.f32());
  return t;
}

double relative_error(const float* actual, const std::vector<double>& expected) {
  double scale = 0.0, err = 0.0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double e = expected[i], a = actual[i];
    if (std::isinf(e)) {
      if (a != e) return std::numeric_limits<double>::infinity();
      continue;
    }
    if (!std::isfinite(a)) return std::numeric_limits<double>::infinity();
    scale = std::max(scale, std::fabs(e));
    err = std::max(err, std::fabs(a - e));
  }
  if (scale == 0.0) return err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return err / scale;
}

double relative_error(const std::vector<float>& actual, const std::vector<double>& expected) {
  if (actual.size() != expected.size()) return std::numeric_limits<double>::infinity();
  return relative_error(actual.data(), expected);
}

}  // namespace masque::test

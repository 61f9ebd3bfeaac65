#include "masque/model.hpp"

#include <string>
#include <vector>

#include "masque/error.hpp"

namespace masque {

DecodeState::~DecodeState() = default;

LinearList Model::linear_layers() const {
  return {};
}

bool DecodeState::can_append() const {
  return false;
}

void DecodeState::append(DecodeState&) {
  throw RuntimeError("this model's decoding state cannot take new rows (no continuous batching)");
}

std::unique_ptr<DecodeState> DecodeState::split(std::span<const std::int32_t> rows) {
  std::vector<char> leaving(static_cast<std::size_t>(this->rows()), 0);
  for (auto r : rows) {
    if (r < 0 || r >= this->rows() || leaving[r])
      throw RuntimeError("DecodeState::split: row " + std::to_string(r) + " of " +
                         std::to_string(this->rows()) + " (or twice)");
    leaving[r] = 1;
  }
  std::vector<std::int32_t> rest;
  for (std::int32_t r = 0; r < this->rows(); ++r)
    if (!leaving[r]) rest.push_back(r);
  std::unique_ptr<DecodeState> split = fork();
  split->select(rows);
  select(rest);
  return split;
}

}  // namespace masque

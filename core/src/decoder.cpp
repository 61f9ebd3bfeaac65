#include "masque/decoder.hpp"

namespace masque {

Stepper::~Stepper() = default;
std::span<const TokenId> Stepper::forced_prefix(std::int32_t) const {
  return {};
}
std::int32_t Stepper::max_steps(std::int32_t) const {
  return -1;
}
bool Stepper::fixed_length() const {
  return false;
}

}  // namespace masque

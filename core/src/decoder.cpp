#include "masque/decoder.hpp"

#include "masque/error.hpp"

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
std::int32_t Stepper::admit(std::int32_t, bool) {
  return 0;
}
bool Decoder::admits_records() const {
  return false;
}
bool Stepper::stops(std::int32_t, std::span<const TokenId>) const {
  return false;
}

std::unique_ptr<Stepper> Stepper::fork() const {
  throw RuntimeError("this task's stepper cannot be copied (needed by return_alternatives)");
}

}  // namespace masque

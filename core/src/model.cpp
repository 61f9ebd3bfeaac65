#include "masque/model.hpp"

#include "masque/error.hpp"

namespace masque {

DecodeState::~DecodeState() = default;

bool DecodeState::can_append() const {
  return false;
}

void DecodeState::append(DecodeState&) {
  throw RuntimeError("this model's decoding state cannot take new rows (no continuous batching)");
}

}  // namespace masque

#include "masque/model.hpp"

namespace masque {

DecodeState::~DecodeState() = default;

}  // namespace masque

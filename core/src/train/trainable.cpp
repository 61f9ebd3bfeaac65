#include "masque/train/trainable.hpp"

namespace masque::train {

// The key functions: the classes' type_info lives in libmasque, so that `masque train` finds a
// plugin's TrainableModel by dynamic_cast.
NetworkTape::~NetworkTape() = default;
TrainableNetwork::~TrainableNetwork() = default;
TrainableModel::~TrainableModel() = default;

}  // namespace masque::train

// Loads the decoder plugins from the build's plugin directory and creates decoders with
// every declared parameter set (defaults parsed from the descriptor, then overrides).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "masque/decoder.hpp"
#include "masque/params.hpp"
#include "masque/plugin.hpp"

namespace masque::test {

using Overrides = std::map<std::string, ParamValue>;

// The descriptor of libmasque-decoder-NAME.so; the library stays loaded for the process.
const PluginDescriptor& decoder_descriptor(const std::string& name);

// The declared defaults with `overrides` applied; an override of an undeclared name throws.
Params decoder_params(const std::string& name, const Overrides& overrides = {});

std::unique_ptr<Decoder> make_decoder(const std::string& name, const Overrides& overrides = {});

}  // namespace masque::test

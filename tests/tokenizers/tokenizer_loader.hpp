// Loads the built tokenizer plugins for the tests and the benchmark (dlopen through Boost.DLL),
// and builds their parameters: every declared default, then the given overrides.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "masque/tokenizer.hpp"

namespace masque::test {

// The descriptor of libmasque-tokenizer-NAME.so in `plugin_dir`. The library stays loaded until
// the process ends, so objects it created never outlive their code.
const PluginDescriptor& tokenizer_descriptor(const std::string& name,
                                             const std::filesystem::path& plugin_dir);

// Defaults of every declared parameter, overridden by `overrides`.
Params tokenizer_params(const PluginDescriptor& descriptor,
                        const std::map<std::string, ParamValue>& overrides);

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name,
                                          const std::map<std::string, ParamValue>& overrides,
                                          const std::filesystem::path& plugin_dir);

}  // namespace masque::test

// The plugin descriptor: what every plugin library exports, and how parameters are declared.
//
// A plugin library defines one `PluginDescriptor` and exports it with MASQUE_PLUGIN(...). The
// export lives in the ELF section "masque", so the host can tell a masque plugin from any other
// shared library with boost::dll::library_info, without loading it.
#pragma once

#include <cstdint>
#include <limits>

#include <boost/config.hpp>
#include <boost/dll/alias.hpp>

#include "masque/abi.hpp"

namespace masque {

class Params;

enum class PluginKind : std::uint8_t { tokenizer, mask, model, decoder, constraint };

const char* to_string(PluginKind kind);

enum class ParamType : std::uint8_t {
  boolean,      // true / false
  integer,      // 64-bit signed
  number,       // double
  string,       // free text, or one of `choices`
  path,         // a file or folder; relative paths resolve against the pipeline file
  int_list,     // [1, 2] or "1,2"
  string_list,  // [a, b] or "a,b"
};

const char* to_string(ParamType type);

// Flags for ParamSpec::flags.
enum ParamFlag : std::uint32_t {
  kParamRequired = 1u << 0,     // no default: the pipeline must set it
  kParamMayBeMissing = 1u << 1  // a path that need not exist yet (e.g. an output file)
};

// One declared parameter. Plain data so that it reads the same from any plugin build.
struct ParamSpec {
  const char* name = nullptr;
  ParamType type = ParamType::string;
  const char* default_value = "";  // YAML scalar or flow sequence; ignored when required
  const char* help = "";
  double min = -std::numeric_limits<double>::infinity();  // integer / number range, inclusive
  double max = std::numeric_limits<double>::infinity();
  const char* choices = nullptr;  // for strings: "a|b|c"; nullptr = free text
  std::uint32_t flags = 0;
};

// Base of every object a plugin creates. Virtual destructor defined in libmasque, so type
// information is shared between the host and all plugins.
class BOOST_SYMBOL_VISIBLE Plugin {
 public:
  virtual ~Plugin();
};

// Creates the plugin object from validated parameters. Throws masque::ConfigError for values
// that only the plugin can judge (e.g. an unreadable model folder).
using PluginFactory = Plugin* (*)(const Params& params);

inline constexpr std::uint32_t kDescriptorMagic = 0x4d51504cu;  // "MQPL"

// The layout of the first three fields never changes, so any host can read the ABI version of
// any plugin before touching the rest.
struct PluginDescriptor {
  std::uint32_t magic = kDescriptorMagic;
  std::uint16_t abi_major = kAbiMajor;
  std::uint16_t abi_minor = kAbiMinor;
  PluginKind kind = PluginKind::model;
  const char* name = "";
  const char* version = "";
  const char* license = "";
  const char* description = "";  // one line
  const char* fingerprint = kBuildFingerprint;
  const ParamSpec* params = nullptr;
  std::uint32_t num_params = 0;
  PluginFactory create = nullptr;
};

}  // namespace masque

// Exports `DESCRIPTOR_FUNCTION` (a `const masque::PluginDescriptor* f()`) as the library's
// plugin descriptor, in the "masque" section.
#define MASQUE_PLUGIN(DESCRIPTOR_FUNCTION) \
  BOOST_DLL_ALIAS_SECTIONED(DESCRIPTOR_FUNCTION, masque_plugin_descriptor, masque)

// The exported symbol name and section, for the host.
#define MASQUE_PLUGIN_SYMBOL "masque_plugin_descriptor"
#define MASQUE_PLUGIN_SECTION "masque"

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

// What a plugin declares about itself beyond its parameters, so that the host chooses and
// configures plugins by what they say they are and never by their names. Plain data, like
// ParamSpec; each pointer of PluginDescriptor below is for plugins of its kind only (null: the
// plugin declares nothing of the sort). `masque plugins NAME` shows all of it.

// A model plugin (PluginDescriptor::model).
struct ModelTraits {
  // `masque train` can train the plugin's models. The plugin then declares the `init_seed`
  // parameter (-1: the folder's weights; a seed: fresh ones) and creates a TransformerModel or
  // a train::TrainableModel.
  bool trainable = false;
  // The config.json keys of the dropout probabilities at the places the upstream model applies
  // dropout (nullptr: none there; an absent key in a folder's config is 0). The trainer reads
  // them (train/dropout.hpp); `task.dropout: p` sets p at exactly these places.
  const char* embedding_dropout = nullptr;   // the embeddings' output
  const char* residual_dropout = nullptr;    // each sub-layer's output, before its residual add
  const char* attention_dropout = nullptr;   // the attention probabilities
  const char* activation_dropout = nullptr;  // the MLP's activation output
};

// Files of a model folder that, present together, a tokenizer plugin reads.
struct TokenizerFolderFiles {
  const char* files = "";  // the file names, ' '-separated ("vocab.json merges.txt")
  // The parameter given the folder (a `path` parameter naming the folder), or, with
  // `names_file`, the first of `files` in it.
  const char* param = "path";
  bool names_file = false;
  // The pipeline section it fills: "tokenizer", or "target_tokenizer" for the target side of
  // a folder with two vocabularies (read only when the folder also gave a "tokenizer").
  const char* section = "tokenizer";
};

// A tokenizer plugin (PluginDescriptor::tokenizer).
struct TokenizerTraits {
  // The file sets it reads a model folder by, and how strongly: of all installed tokenizer
  // plugins, the one with the highest `preference` whose files a folder holds reads it
  // (`masque run --model DIR`, a `tokenizer:` section with a folder and no plugin).
  const TokenizerFolderFiles* reads = nullptr;
  std::uint32_t num_reads = 0;
  int preference = 0;
  // Further files of such a folder that belong to its tokenizer (' '-separated): what the
  // plugin reads besides (tokenizer_config.json) and what other tools read there
  // (special_tokens_map.json). A checkpoint of `masque train` copies them with `reads`' files.
  const char* carries = "";
  // The settings a checkpoint's tokenizer_config.json takes from the plugin's parameters, as
  // ' '-separated `param=key` pairs: a parameter set to true or false (not auto) is written as
  // that boolean under `key`, so the saved folder tokenizes as the training did. `config_class`
  // is the tokenizer_class such a file names when the folder carried none.
  const char* saved_settings = "";
  const char* config_class = "";
};

// A decoder plugin (PluginDescriptor::decoder).
struct DecoderTraits {
  // The decoder a task's `decoder:` section takes when it names no plugin.
  bool is_default = false;
  // It settles each token as it is chosen (one hypothesis, given `num_hypotheses` 1 when it
  // has that parameter), so `masque run --stream` can write text as it goes.
  bool streams = false;
  // The generation_config.json that asks for it (`masque run --model DIR`): ';'-separated
  // conditions that must all hold, each `key=value` (a string, number or true/false equal to
  // value), `key!=value` (absent or not equal) or `key>N` (an integer above N).
  const char* chosen_by = nullptr;
};

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
  // What the plugin says it is (ABI 9.0); only the pointer of the plugin's kind may be set.
  const ModelTraits* model = nullptr;
  const TokenizerTraits* tokenizer = nullptr;
  const DecoderTraits* decoder = nullptr;
};

}  // namespace masque

// Exports `DESCRIPTOR_FUNCTION` (a `const masque::PluginDescriptor* f()`) as the library's
// plugin descriptor, in the "masque" section.
#define MASQUE_PLUGIN(DESCRIPTOR_FUNCTION) \
  BOOST_DLL_ALIAS_SECTIONED(DESCRIPTOR_FUNCTION, masque_plugin_descriptor, masque)

// The exported symbol name and section, for the host.
#define MASQUE_PLUGIN_SYMBOL "masque_plugin_descriptor"
#define MASQUE_PLUGIN_SECTION "masque"

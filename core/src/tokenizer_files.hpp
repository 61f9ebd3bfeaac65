// Which tokenizer plugin reads a model folder, asked of the installed plugins: each declares the
// files it reads and how strongly it prefers them (TokenizerTraits, masque/plugin.hpp). A folder
// may hold several tokenizer files (a Llama folder often has tokenizer.json and
// tokenizer.model); the plugin with the highest preference whose files are all present reads it.
// Used by `masque run --model DIR`, `masque inspect`, a pipeline's `tokenizer:` section with a
// folder and no plugin, the check that a pipeline's tokenizer is the folder's, and the files a
// checkpoint of `masque train` carries.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "registry.hpp"

namespace masque::tok {

struct TokenizerChoice {
  std::string plugin;  // the tokenizer plugin's name
  std::string file;    // the files that decided it (relative to the folder), for messages
};

// The plugin that reads `folder` given as a folder (a set whose parameter takes the folder),
// or nothing when the folder holds no such set.
std::optional<TokenizerChoice> pick_tokenizer(const Registry& registry,
                                              const std::filesystem::path& folder);

// A tokenizer section as a pipeline built from a model folder writes it (model_folder.cpp).
struct TokenizerSection {
  std::string section;  // "tokenizer" or "target_tokenizer"
  std::string plugin;
  std::string key;   // the parameter naming the file or folder
  std::string file;  // relative to the folder; "" = the folder itself
};

// The tokenizer sections that read `folder`: the preferred plugin's `tokenizer` set and, beside
// it, its `target_tokenizer` set (a folder with separate source and target vocabularies).
// Empty when the folder has no tokenizer file any installed plugin reads.
std::vector<TokenizerSection> pick_tokenizer_sections(const Registry& registry,
                                                      const std::filesystem::path& folder);

// Every file set the installed plugins read, most preferred first, for messages:
// "tokenizer.json (tokenizer-json), ..., source_vocab.txt (vocab)".
std::string tokenizer_files_text(const Registry& registry);

// The names of the files that belong to a folder's tokenizer, for any installed plugin: the
// files of the sets read from a folder and what the plugins carry besides.
std::vector<std::string> carried_tokenizer_files(const Registry& registry);

}  // namespace masque::tok

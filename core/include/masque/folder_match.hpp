// Which model folders a model plugin serves as they are: an optional second export of a plugin
// library, next to its descriptor, so that a pipeline can be built from a folder alone
// (`masque run --task T --model DIR`, `masque inspect DIR`). Plugins without it still load and
// run when a pipeline names them; the host only cannot pick them for a folder.
//
// The text is a list of `key=value` conditions separated by ';'. The plugin serves a folder
// whose config.json has any of them at the top level: a string equal to value, or a list of
// strings that holds it. Examples: "model_type=llama", "architecture=rnn-seq2seq".
//
//   MASQUE_PLUGIN(descriptor)
//   MASQUE_FOLDER_MATCH("model_type=my-model")
//
// One plugin per folder: when two installed plugins serve the same folder, the host names both
// and asks for a pipeline naming one.
#pragma once

#include <boost/dll/alias.hpp>

// Exports a `const char* f()` returning TEXT as the symbol masque_folder_match in the "masque"
// section (the same mechanism as MASQUE_PLUGIN). TEXT must have static storage.
#define MASQUE_FOLDER_MATCH(TEXT)          \
  namespace {                              \
  const char* masque_folder_match_text() { \
    return TEXT;                           \
  }                                        \
  }                                        \
  BOOST_DLL_ALIAS_SECTIONED(masque_folder_match_text, masque_folder_match, masque)

// The exported symbol name, for the host.
#define MASQUE_FOLDER_MATCH_SYMBOL "masque_folder_match"

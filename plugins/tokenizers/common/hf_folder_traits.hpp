// What a tokenizer plugin that reads a Hugging Face tokenizer folder declares (TokenizerTraits,
// masque/plugin.hpp): its own file set, given as the folder under `path`, and the folder's
// other tokenizer files, which a checkpoint of masque train carries along (what the plugins
// read besides, tokenizer_config.json, and what Hugging Face's loaders read).
#pragma once

#include "masque/plugin.hpp"

namespace masque::tok {

inline constexpr const char* kHfTokenizerCarries =
    "tokenizer_config.json special_tokens_map.json added_tokens.json";

// `reads` must have static storage; `preference` orders the plugins a folder could choose.
constexpr TokenizerTraits hf_folder_traits(const TokenizerFolderFiles* reads, int preference) {
  return {.reads = reads, .num_reads = 1, .preference = preference, .carries = kHfTokenizerCarries};
}

}  // namespace masque::tok

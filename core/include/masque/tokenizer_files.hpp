// Which tokenizer plugin reads a model folder (header only; the pipeline loader uses it for a
// `tokenizer:` section that gives a `path:` and no `plugin:`). A folder may hold several tokenizer
// files (a Llama folder often has tokenizer.json and tokenizer.model); the first of these wins:
//
//   1. tokenizer.json            -> tokenizer-json  (the complete description: normalizer,
//                                                    pre-tokenizer, added tokens, post-processor)
//   2. tokenizer.model           -> sentencepiece
//   3. vocab.json + merges.txt   -> bpe
//   4. vocab.txt                 -> wordpiece
//
// tokenizer.json comes first because it is what Hugging Face's own loaders use when present
// (AutoTokenizer prefers the fast tokenizer) and it alone carries the added tokens and special-
// token template of the model.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace masque::tok {

struct TokenizerChoice {
  std::string plugin;  // the tokenizer plugin's name
  std::string file;    // the file that decided it (relative to the folder)
};

inline std::optional<TokenizerChoice> pick_tokenizer(const std::filesystem::path& folder) {
  std::error_code ec;
  auto has = [&](const char* name) { return std::filesystem::is_regular_file(folder / name, ec); };
  if (has("tokenizer.json")) return TokenizerChoice{"tokenizer-json", "tokenizer.json"};
  if (has("tokenizer.model")) return TokenizerChoice{"sentencepiece", "tokenizer.model"};
  if (has("vocab.json") && has("merges.txt"))
    return TokenizerChoice{"bpe", "vocab.json and merges.txt"};
  if (has("vocab.txt")) return TokenizerChoice{"wordpiece", "vocab.txt"};
  return std::nullopt;
}

// A tokenizer section as a pipeline built from a model folder writes it (model_folder.cpp).
struct TokenizerSection {
  std::string section;  // "tokenizer" or "target_tokenizer"
  std::string plugin;
  std::string key;   // the parameter naming the file or folder: "path" or "vocab"
  std::string file;  // relative to the folder; "" = the folder itself
};

// The tokenizer sections that read `folder`; empty when it has no tokenizer file. A folder
// pick_tokenizer reads gives one `tokenizer:` section with `path:`; a folder with separate
// source and target vocabularies (source_vocab.txt and target_vocab.txt, one token per line, as
// OpenNMT / CTranslate2 write them) gives `tokenizer:` and `target_tokenizer:` of the vocab
// plugin.
inline std::vector<TokenizerSection> pick_tokenizer_sections(const std::filesystem::path& folder) {
  if (auto choice = pick_tokenizer(folder)) return {{"tokenizer", choice->plugin, "path", ""}};
  std::error_code ec;
  std::vector<TokenizerSection> sections;
  if (std::filesystem::is_regular_file(folder / "source_vocab.txt", ec))
    sections.push_back({"tokenizer", "vocab", "vocab", "source_vocab.txt"});
  if (!sections.empty() && std::filesystem::is_regular_file(folder / "target_vocab.txt", ec))
    sections.push_back({"target_tokenizer", "vocab", "vocab", "target_vocab.txt"});
  return sections;
}

}  // namespace masque::tok

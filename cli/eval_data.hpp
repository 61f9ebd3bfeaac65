// masque eval's inputs: references (several correct token sequences per word) and hypotheses
// (one token sequence per word), read from text, TSV or `masque run`'s JSON lines. Every
// problem is a ConfigError naming the file and line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace masque::eval {

using Tokens = std::vector<std::string>;

// Splits on runs of spaces (tabs separate columns, so they never reach here).
Tokens split_tokens(std::string_view text);

struct Reference {
  std::string key;                   // the source: a word, or its tokens separated by spaces
  std::size_t line = 0;              // 1-based line of the key's first appearance
  std::vector<Tokens> alternatives;  // every correct answer, in file order, no duplicates
};

struct References {
  std::string file;
  std::vector<Reference> words;                        // in order of first appearance
  std::unordered_map<std::string, std::size_t> index;  // key -> position in words
};

// Lines `key<TAB>ref 1<TAB>ref 2...`; a key may repeat on later lines (its references are
// merged), so a `source<TAB>target` training TSV is a references file too.
References parse_references(std::string_view text, const std::string& file);

enum class HypFormat {
  automatic,  // jsonl when the first line starts with '{', else text
  text,       // line i is the hypothesis of the i-th word
  jsonl,      // `masque run` output: record i is the i-th word; error records count as empty
  tsv,        // `key<TAB>hypothesis`, any order
};
HypFormat parse_hyp_format(const std::string& name);  // ConfigError on an unknown name

struct Hypotheses {
  std::vector<Tokens> tokens;     // one per reference word, in the references' order
  std::size_t error_records = 0;  // JSON error records, scored as empty hypotheses
};

// `field` (jsonl) names the member holding the hypothesis, a string of space-separated tokens
// or an array of strings; one starting with '/' is a JSON pointer (e.g. /hypotheses/0/text).
Hypotheses parse_hypotheses(std::string_view text, const std::string& file, HypFormat format,
                            const std::string& field, const References& refs);

// The whole file ("-" = stdin); ConfigError naming it when it cannot be read.
std::string read_whole_file(const std::string& path);

}  // namespace masque::eval

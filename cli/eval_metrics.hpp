// masque eval's scores: word error rate (a word is right when its hypothesis equals one of its
// references) and token error rate (edit distance to the closest reference over that
// reference's length, summed over words), overall and by source length.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval_data.hpp"

namespace masque::eval {

// Levenshtein distance over tokens (substitution, insertion, deletion each cost 1).
std::size_t edit_distance(const Tokens& a, const Tokens& b);

struct WordScore {
  bool correct = false;
  std::size_t edits = 0;       // to the closest reference (the first one on ties)
  std::size_t ref_length = 0;  // that reference's length
};
WordScore score_word(const Tokens& hypothesis, const std::vector<Tokens>& references);

struct Tally {
  std::size_t words = 0, correct = 0, edits = 0, ref_tokens = 0;
  void add(const WordScore& s);
  double wer() const;  // fraction of words that are wrong
  double ter() const;  // edits / reference tokens
};

enum class LengthUnit {
  automatic,  // tokens when the key has a space ("m a s q u e"), else characters
  chars,      // UTF-8 code points of the key
  tokens,     // space-separated tokens of the key
};
LengthUnit parse_length_unit(const std::string& name);  // ConfigError on an unknown name
std::size_t source_length(const std::string& key, LengthUnit unit);

// Length buckets from ascending upper bounds: {4, 6} gives 1-4, 5-6 and 7+.
struct Bucket {
  std::size_t min = 0, max = 0;  // max 0: no upper bound
  Tally tally;
  std::string label() const;
};
std::vector<Bucket> make_buckets(const std::vector<std::size_t>& upper_bounds);
std::vector<std::size_t> parse_bounds(const std::string& text);  // "4,6,8"; ConfigError

struct Report {
  Tally overall;
  std::vector<Bucket> buckets;  // every bucket, empty ones included
  std::size_t error_records = 0;
};
Report evaluate(const References& refs, const Hypotheses& hyps,
                const std::vector<std::size_t>& upper_bounds, LengthUnit unit);

// `token_name` names the tokens in the text table ("phone" for G2P, "token" by default).
std::string format_text(const Report& report, const std::string& token_name);
nlohmann::ordered_json to_json(const Report& report);

}  // namespace masque::eval

#include "tasks/vocabulary_map.hpp"

#include <fstream>

#include "masque/error.hpp"

namespace masque {

namespace {

std::vector<std::string> split_spaces(const std::string& text) {
  std::vector<std::string> out;
  std::string token;
  for (char c : text) {
    if (c == ' ') {
      if (!token.empty()) out.push_back(std::move(token));
      token.clear();
    } else {
      token += c;
    }
  }
  if (!token.empty()) out.push_back(std::move(token));
  return out;
}

std::string join(std::span<const std::string> pieces) {
  std::string out;
  for (std::size_t i = 0; i < pieces.size(); ++i) out += (i ? " " : "") + pieces[i];
  return out;
}

}  // namespace

VocabularyMap::VocabularyMap(const std::filesystem::path& file, const Tokenizer& target,
                             const ModelInfo& model)
    : vocab_size_(model.vocab_size) {
  std::ifstream in(file);
  if (!in) throw ConfigError(file.string() + ": cannot open the vocabulary map");
  const SpecialTokens& s = target.special_tokens();
  for (TokenId t :
       {s.bos, s.eos, s.pad, s.unk, model.bos, model.eos, model.pad, model.decoder_start})
    if (t >= 0 && t < vocab_size_) always_.push_back(t);
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::size_t tab = line.find('\t');
    if (tab == std::string::npos)
      throw ConfigError(file.string() + ":" + std::to_string(number) +
                        ": expected '<source n-gram> TAB <target tokens>'");
    const std::vector<std::string> key = split_spaces(line.substr(0, tab));
    std::vector<TokenId>& targets = key.empty() ? always_ : rules_[join(key)];
    for (const std::string& piece : split_spaces(line.substr(tab + 1))) {
      const auto id = target.piece_to_id(piece);
      if (!id || *id < 0 || *id >= vocab_size_)
        throw ConfigError(file.string() + ":" + std::to_string(number) + ": target token '" +
                          piece + "' is not in the target vocabulary");
      targets.push_back(*id);
    }
    longest_ = std::max(longest_, key.size());
  }
}

std::vector<std::uint8_t> VocabularyMap::allowed(std::span<const std::string> source_pieces,
                                                 std::span<const TokenId> prefix) const {
  std::vector<std::uint8_t> allowed(static_cast<std::size_t>(vocab_size_), 0);
  auto allow = [&](TokenId t) {
    if (t >= 0 && t < vocab_size_) allowed[static_cast<std::size_t>(t)] = 1;
  };
  for (TokenId t : always_) allow(t);
  for (TokenId t : prefix) allow(t);
  for (std::size_t start = 0; start < source_pieces.size(); ++start)
    for (std::size_t n = 1; n <= longest_ && start + n <= source_pieces.size(); ++n) {
      auto it = rules_.find(join(source_pieces.subspan(start, n)));
      if (it != rules_.end())
        for (TokenId t : it->second) allow(t);
    }
  return allowed;
}

}  // namespace masque

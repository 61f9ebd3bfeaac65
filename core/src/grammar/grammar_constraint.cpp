// libmasque's TokenConstraint for GBNF grammars: the tokens a grammar state allows, found by
// walking a byte trie of the vocabulary beside the grammar's memoized byte steps (a subtree is
// left as soon as the grammar rejects its prefix), cached per state.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "grammar/gbnf.hpp"
#include "grammar/grammar_matcher.hpp"
#include "masque/constraint.hpp"
#include "masque/error.hpp"
#include "masque/params.hpp"

namespace masque {

TokenConstraint::~TokenConstraint() = default;

namespace {

using grammar::GrammarMatcher;
using StateId = GrammarMatcher::StateId;

// The bytes each token adds to a decoded text: `inner` after other text, `first` at the start
// of an output (where SentencePiece drops a word's leading space); empty: never generated
// (special tokens, tokens that decode to nothing).
struct TokenTexts {
  std::vector<std::string> inner, first;
  bool first_differs = false;
};

// `<0xAB>`: a byte-fallback piece, which decodes to that byte inside a longer UTF-8 sequence.
int fallback_byte(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  try {
    return std::stoi(piece.substr(3, 2), nullptr, 16);
  } catch (const std::exception&) {
    return -1;
  }
}

// A token that decodes to one ASCII letter, alone and (with whatever separator the tokenizer
// puts between tokens) repeated: the context that shows what another token adds after text.
TokenId find_anchor(const Tokenizer& tokenizer) {
  for (TokenId t = 0; t < tokenizer.vocab_size(); ++t) {
    if (tokenizer.is_special(t)) continue;
    try {
      const TokenId one[] = {t}, two[] = {t, t};
      const std::string text = tokenizer.decode(one, true);
      const std::string twice = tokenizer.decode(two, true);
      if (text.size() == 1 && std::isalpha(static_cast<unsigned char>(text[0])) &&
          twice.size() > 1 && twice.compare(0, 1, text) == 0 && twice.back() == text[0])
        return t;
    } catch (const std::exception&) {
    }
  }
  return -1;
}

TokenTexts token_texts(const Tokenizer& tokenizer, std::span<const TokenId> end_tokens) {
  const std::int32_t n = tokenizer.vocab_size();
  TokenTexts out;
  out.inner.resize(static_cast<std::size_t>(n));
  out.first.resize(static_cast<std::size_t>(n));
  const TokenId anchor = find_anchor(tokenizer);
  const TokenId unk = tokenizer.special_tokens().unk;
  std::string anchor_text;
  if (anchor >= 0) {
    const TokenId a[] = {anchor};
    anchor_text = tokenizer.decode(a, true);
  }
  for (TokenId t = 0; t < n; ++t) {
    if (tokenizer.is_special(t) || t == unk ||
        std::find(end_tokens.begin(), end_tokens.end(), t) != end_tokens.end())
      continue;
    try {
      const int byte = fallback_byte(tokenizer.id_to_piece(t));
      if (byte >= 0) {
        out.inner[t] = out.first[t] = std::string(1, static_cast<char>(byte));
        continue;
      }
      const TokenId one[] = {t};
      out.first[t] = tokenizer.decode(one, true);
      out.inner[t] = out.first[t];
      if (anchor >= 0) {
        const TokenId pair[] = {anchor, t};
        const std::string text = tokenizer.decode(pair, true);
        if (text.compare(0, anchor_text.size(), anchor_text) == 0)
          out.inner[t] = text.substr(anchor_text.size());
      }
    } catch (const std::exception&) {  // an id the tokenizer cannot decode: never generated
      out.inner[t].clear();
      out.first[t].clear();
    }
    if (out.inner[t].empty() || out.first[t].empty()) out.inner[t].clear(), out.first[t].clear();
    out.first_differs = out.first_differs || out.first[t] != out.inner[t];
  }
  return out;
}

// The vocabulary's byte strings as a trie, laid out flat in breadth-first order: a node's
// children are consecutive, so the mask walk reads memory in order.
class ByteTrie {
 public:
  explicit ByteTrie(const std::vector<std::string>& texts) {
    struct Draft {
      std::vector<std::pair<std::uint8_t, std::uint32_t>> children;
      std::vector<TokenId> tokens;
    };
    std::vector<Draft> draft(1);
    for (std::size_t t = 0; t < texts.size(); ++t) {
      if (texts[t].empty()) continue;
      std::uint32_t at = 0;
      for (char c : texts[t]) {
        const auto b = static_cast<std::uint8_t>(c);
        std::uint32_t next = 0;
        for (const auto& [byte, child] : draft[at].children)
          if (byte == b) next = child;
        if (next == 0) {
          next = static_cast<std::uint32_t>(draft.size());
          draft[at].children.emplace_back(b, next);
          draft.emplace_back();
        }
        at = next;
      }
      draft[at].tokens.push_back(static_cast<TokenId>(t));
    }
    std::vector<std::uint32_t> order{0};  // draft ids in breadth-first order
    for (std::size_t i = 0; i < order.size(); ++i)
      for (const auto& child : draft[order[i]].children) order.push_back(child.second);
    const std::size_t n = order.size();
    first_child_.resize(n);
    children_.resize(n);
    byte_.resize(n);
    token_begin_.resize(n + 1);
    std::uint32_t next = 1;
    for (std::size_t i = 0; i < n; ++i) {
      const Draft& d = draft[order[i]];
      first_child_[i] = next;
      children_[i] = static_cast<std::uint32_t>(d.children.size());
      for (const auto& child : d.children) byte_[next++] = child.first;
      token_begin_[i] = static_cast<std::uint32_t>(tokens_.size());
      tokens_.insert(tokens_.end(), d.tokens.begin(), d.tokens.end());
    }
    token_begin_[n] = static_cast<std::uint32_t>(tokens_.size());
  }

  std::uint32_t first_child(std::uint32_t node) const { return first_child_[node]; }
  std::uint32_t children(std::uint32_t node) const { return children_[node]; }
  std::uint8_t byte(std::uint32_t node) const { return byte_[node]; }
  std::span<const TokenId> tokens(std::uint32_t node) const {
    return {tokens_.data() + token_begin_[node], token_begin_[node + 1] - token_begin_[node]};
  }

 private:
  std::vector<std::uint32_t> first_child_, children_, token_begin_;
  std::vector<std::uint8_t> byte_;  // the byte on the edge into each node
  std::vector<TokenId> tokens_;
};

using Mask = std::vector<std::uint64_t>;  // bit t: token t allowed

class GrammarConstraint final : public TokenConstraint {
 public:
  // A state's top bit: no token has been produced yet (tokens read as `first` texts).
  static constexpr State kAtStart = 0x80000000u;

  GrammarConstraint(grammar::Grammar g, const std::string& source, const Tokenizer& tokenizer,
                    std::span<const TokenId> end_tokens, std::size_t cache_mib)
      : matcher_(std::move(g)),
        texts_(token_texts(tokenizer, end_tokens)),
        inner_(texts_.inner),
        first_(texts_.first_differs ? std::make_unique<ByteTrie>(texts_.first) : nullptr),
        end_tokens_(end_tokens.begin(), end_tokens.end()),
        vocab_(tokenizer.vocab_size()),
        cache_budget_(cache_mib << 20) {
    const Mask& m = *mask_of(start());
    bool any = false;
    for (std::int32_t t = 0; t < vocab_ && !any; ++t)
      any = (m[t / 64] >> (t % 64) & 1) && !is_end(t);
    if (!any && !matcher_.accepts(matcher_.start()))
      throw ConfigError(source + ": no token of the tokenizer's vocabulary can start an output " +
                        "that matches the grammar");
  }

  State start() const override { return matcher_.start() | (texts_.first_differs ? kAtStart : 0); }

  void mask(State state, std::span<float> logits) const override {
    const std::shared_ptr<const Mask> m = mask_of(state);
    const std::size_t n = std::min(logits.size(), static_cast<std::size_t>(vocab_));
    for (std::size_t w = 0; w * 64 < n; ++w) {
      const std::uint64_t word = (*m)[w];
      if (word == ~std::uint64_t{0}) continue;
      const std::size_t end = std::min(n, w * 64 + 64);
      for (std::size_t t = w * 64; t < end; ++t)
        if (!(word >> (t % 64) & 1)) logits[t] = std::numeric_limits<float>::lowest();
    }
    for (std::size_t t = n; t < logits.size(); ++t)  // ids past the tokenizer's vocabulary
      logits[t] = std::numeric_limits<float>::lowest();
  }

  State advance(State state, TokenId token) const override {
    if (is_end(token)) return state;
    if (token < 0 || token >= vocab_) return GrammarMatcher::kDead;
    const std::uint64_t key = (std::uint64_t{state} << 32) | static_cast<std::uint32_t>(token);
    std::lock_guard lock(mutex_);
    if (const auto it = advanced_.find(key); it != advanced_.end()) return it->second;
    const bool at_start = (state & kAtStart) != 0;
    const std::string& bytes = (at_start ? texts_.first : texts_.inner)[token];
    const StateId next =
        bytes.empty() ? GrammarMatcher::kDead : matcher_.step(state & ~kAtStart, bytes);
    if (advanced_.size() > (1u << 22)) advanced_.clear();
    advanced_.emplace(key, next);
    return next;
  }

  std::string check(std::string_view text) const override {
    std::lock_guard lock(mutex_);
    StateId s = matcher_.start();
    for (std::size_t i = 0; i < text.size(); ++i) {
      s = matcher_.step(s, static_cast<std::uint8_t>(text[i]));
      if (s == GrammarMatcher::kDead)
        return "the output does not match the grammar from byte " + std::to_string(i) + " on: \"" +
               std::string(text.substr(0, i + 1)) + "\"";
    }
    if (!matcher_.accepts(s))
      return "the output ended before its grammar was complete (a length limit: max_new_tokens "
             "or the model's context; or a stop string)";
    return "";
  }

 private:
  bool is_end(TokenId t) const {
    return std::find(end_tokens_.begin(), end_tokens_.end(), t) != end_tokens_.end();
  }

  std::shared_ptr<const Mask> mask_of(State state) const {
    std::lock_guard lock(mutex_);
    if (const auto it = masks_.find(state); it != masks_.end()) return it->second;
    auto m = std::make_shared<const Mask>(compute_mask(state));
    const std::size_t bytes = m->size() * sizeof(std::uint64_t) + 64;
    if (cached_bytes_ + bytes > cache_budget_) {  // recompute rather than grow without end
      masks_.clear();
      cached_bytes_ = 0;
    }
    masks_.emplace(state, m);
    cached_bytes_ += bytes;
    return m;
  }

  // Called with mutex_ held.
  Mask compute_mask(State state) const {
    Mask m((static_cast<std::size_t>(vocab_) + 63) / 64, 0);
    const auto allow = [&](TokenId t) { m[t / 64] |= std::uint64_t{1} << (t % 64); };
    const StateId s = state & ~kAtStart;
    const ByteTrie& trie = (state & kAtStart) && first_ ? *first_ : inner_;
    bool any = false;
    std::vector<std::pair<std::uint32_t, StateId>> work{{0, s}};
    while (s != GrammarMatcher::kDead && !work.empty()) {
      const auto [at, st] = work.back();
      work.pop_back();
      const std::uint32_t first = trie.first_child(at), end = first + trie.children(at);
      for (std::uint32_t child = first; child < end; ++child) {
        const StateId next = matcher_.step(st, trie.byte(child));
        if (next == GrammarMatcher::kDead) continue;
        for (TokenId t : trie.tokens(child)) allow(t), any = true;
        if (trie.children(child) > 0) work.emplace_back(child, next);
      }
    }
    // Ends where the output may end; where nothing can follow (or nothing can continue a
    // dead end, which check() then rejects), end is all there is.
    if (!any || matcher_.accepts(s))
      for (TokenId t : end_tokens_)
        if (t >= 0 && t < vocab_) allow(t);
    return m;
  }

  mutable std::mutex mutex_;
  mutable GrammarMatcher matcher_;
  TokenTexts texts_;
  ByteTrie inner_;
  std::unique_ptr<ByteTrie> first_;  // null when every token's first text is its inner one
  std::vector<TokenId> end_tokens_;
  std::int32_t vocab_;
  std::size_t cache_budget_;
  mutable std::unordered_map<State, std::shared_ptr<const Mask>> masks_;
  mutable std::size_t cached_bytes_ = 0;
  mutable std::unordered_map<std::uint64_t, StateId> advanced_;
};

}  // namespace

std::shared_ptr<const TokenConstraint> grammar_constraint(std::string_view gbnf,
                                                          const std::string& source,
                                                          const Tokenizer& tokenizer,
                                                          std::span<const TokenId> end_tokens,
                                                          std::size_t cache_mib) {
  return std::make_shared<GrammarConstraint>(grammar::parse_gbnf(gbnf, source), source, tokenizer,
                                             end_tokens, cache_mib);
}

void check_grammar(std::string_view gbnf, const std::string& source) {
  grammar::GrammarMatcher matcher(grammar::parse_gbnf(gbnf, source));
  (void)matcher;
}

namespace {

class GrammarConstraintPlugin final : public Constraint {
 public:
  GrammarConstraintPlugin(std::string gbnf, std::string source, std::size_t cache_mib)
      : gbnf_(std::move(gbnf)), source_(std::move(source)), cache_mib_(cache_mib) {
    check_grammar(gbnf_, source_);
  }
  std::shared_ptr<const TokenConstraint> bind(const Tokenizer& tokenizer,
                                              std::span<const TokenId> end_tokens) const override {
    return grammar_constraint(gbnf_, source_, tokenizer, end_tokens, cache_mib_);
  }

 private:
  std::string gbnf_, source_;
  std::size_t cache_mib_;
};

}  // namespace

Constraint* grammar_constraint_plugin(std::string gbnf, std::string source, std::size_t cache_mib) {
  return new GrammarConstraintPlugin(std::move(gbnf), std::move(source), cache_mib);
}

ConstraintText constraint_text(const Params& params, const std::string& inline_key,
                               const std::string& what) {
  const std::string& inline_text = params.get_string(inline_key);
  const std::string& file = params.get_string("file");
  if (inline_text.empty() == file.empty())
    throw ConfigError("give the " + what + " either inline (constraint." + inline_key +
                      ") or as a file (constraint.file)");
  if (!inline_text.empty()) return {inline_text, "constraint." + inline_key};
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(file + ": cannot read the " + what + " file");
  std::ostringstream text;
  text << in.rdbuf();
  return {text.str(), file};
}

}  // namespace masque

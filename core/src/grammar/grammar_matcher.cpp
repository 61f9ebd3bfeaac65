#include "grammar/grammar_matcher.hpp"

#include <algorithm>
#include <string>

#include "masque/error.hpp"

namespace masque::grammar {

std::size_t GrammarMatcher::KeyHash::operator()(const std::vector<std::uint32_t>& key) const {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (std::uint32_t w : key) {
    h ^= w;
    h *= 1099511628211ull;
  }
  return static_cast<std::size_t>(h);
}

GrammarMatcher::GrammarMatcher(Grammar grammar) : grammar_(std::move(grammar)) {
  nodes_.push_back({});   // node 0: the empty stack
  states_.push_back({});  // state 0: dead
  next_.push_back(nullptr);
  std::vector<std::uint32_t> tops;
  next_stamp();
  for (std::uint32_t start : grammar_.alternatives[grammar_.root])
    expand(continuation(0, start), tops);
  start_ = intern({.stacks = std::move(tops)});
}

void GrammarMatcher::next_stamp() {
  step_first_node_ = nodes_.size();
  if (++stamp_ == 0) {  // wrapped: forget every mark
    std::fill(seen_.begin(), seen_.end(), 0);
    stamp_ = 1;
  }
}

std::uint32_t GrammarMatcher::node(std::uint32_t parent, std::uint32_t pos) {
  const std::uint64_t key = (std::uint64_t{parent} << 32) | pos;
  const auto [it, added] = node_ids_.emplace(key, static_cast<std::uint32_t>(nodes_.size()));
  if (added) {
    // Nested repetitions of optional items (`("a"?{3000}){3000}`) multiply frames: refuse them
    // in bounded memory rather than grow for minutes.
    if (nodes_.size() - step_first_node_ >= kMaxNodesPerStep) {
      node_ids_.erase(it);
      throw ConfigError(grammar_.source + ": one step of the grammar needs more than " +
                        std::to_string(kMaxNodesPerStep) +
                        " new parse-stack frames (repetitions of optional items nested in other "
                        "repetitions?): write it with fewer nested counts");
    }
    nodes_.push_back({parent, pos});
  }
  return it->second;
}

std::uint32_t GrammarMatcher::continuation(std::uint32_t parent, std::uint32_t pos) {
  return grammar_.elements[pos].kind == Element::Kind::end ? parent : node(parent, pos);
}

void GrammarMatcher::expand(std::uint32_t top, std::vector<std::uint32_t>& out) {
  // Depth first over an explicit worklist: a long chain of nullable items (`x?{200}{200}`) would
  // otherwise recurse once per item and overflow the stack. A frame reached twice in one step
  // expands to the same stacks: once is enough (a chain of optional items would otherwise be
  // walked once per combination: 2^n).
  pending_.assign(1, top);
  while (!pending_.empty()) {
    const std::uint32_t t = pending_.back();
    pending_.pop_back();
    if (t >= seen_.size()) seen_.resize(nodes_.size() + 1024, 0);
    if (seen_[t] == stamp_) continue;
    seen_[t] = stamp_;
    if (t == 0) {
      out.push_back(0);
      continue;
    }
    const Node frame = nodes_[t];
    const Element& e = grammar_.elements[frame.pos];
    if (e.kind == Element::Kind::chars) {
      out.push_back(t);
      continue;
    }
    const std::uint32_t after = continuation(frame.parent, frame.pos + 1);
    const auto& starts = grammar_.alternatives[e.index];
    for (auto it = starts.rbegin(); it != starts.rend(); ++it)
      pending_.push_back(continuation(after, *it));
  }
}

const CharSet& GrammarMatcher::waiting_on(std::uint32_t top) const {
  return grammar_.charsets[grammar_.elements[nodes_[top].pos].index];
}

GrammarMatcher::StateId GrammarMatcher::intern(State state) {
  if (state.stacks.empty()) return kDead;
  std::sort(state.stacks.begin(), state.stacks.end());
  state.stacks.erase(std::unique(state.stacks.begin(), state.stacks.end()), state.stacks.end());
  std::vector<std::uint32_t> key = state.stacks;
  key.push_back(static_cast<std::uint32_t>(state.partial));
  key.push_back(state.pending | (std::uint32_t{state.length} << 8));
  const auto [it, added] = state_ids_.emplace(std::move(key), static_cast<StateId>(states_.size()));
  if (added) {
    states_.push_back(std::move(state));
    next_.push_back(nullptr);
  }
  return it->second;
}

GrammarMatcher::StateId GrammarMatcher::step_code_point(const State& from, char32_t c) {
  State to;
  next_stamp();
  for (std::uint32_t top : from.stacks) {
    if (top == 0 || !waiting_on(top).matches(c)) continue;
    const Node frame = nodes_[top];
    expand(continuation(frame.parent, frame.pos + 1), to.stacks);
  }
  return intern(std::move(to));
}

namespace {

// The smallest code point a UTF-8 sequence of `length` bytes may encode (shorter forms of the
// same code point are not UTF-8, and a tokenizer decodes them as U+FFFD).
char32_t smallest_code_point(std::uint8_t length) {
  return length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
}

bool is_surrogate(char32_t c) {
  return c >= 0xD800 && c <= 0xDFFF;
}

}  // namespace

GrammarMatcher::StateId GrammarMatcher::step_partial(const State& from, char32_t bits,
                                                     std::uint8_t pending, std::uint8_t length) {
  // The code points this sequence can still become, as UTF-8 allows them.
  const char32_t lo = std::max<char32_t>(bits << (6 * pending), smallest_code_point(length));
  const char32_t hi =
      std::min<char32_t>((bits << (6 * pending)) | ((char32_t{1} << (6 * pending)) - 1), 0x10FFFF);
  if (lo > hi || (is_surrogate(lo) && is_surrogate(hi))) return kDead;
  State to{.stacks = {}, .partial = bits, .pending = pending, .length = length};
  for (std::uint32_t top : from.stacks)
    if (top != 0 && waiting_on(top).matches_any_in(lo, hi)) to.stacks.push_back(top);
  return intern(std::move(to));
}

GrammarMatcher::StateId GrammarMatcher::compute_step(StateId id, std::uint8_t byte) {
  const State from = states_[id];  // a copy: interning may move states_
  if (from.pending > 0) {
    if ((byte & 0xC0) != 0x80) return kDead;
    const char32_t bits = (from.partial << 6) | (byte & 0x3F);
    const auto pending = static_cast<std::uint8_t>(from.pending - 1);
    if (pending > 0) return step_partial(from, bits, pending, from.length);
    if (bits < smallest_code_point(from.length) || is_surrogate(bits) || bits > 0x10FFFF)
      return kDead;
    return step_code_point(from, bits);
  }
  if (byte < 0x80) return step_code_point(from, byte);
  if (byte >= 0xC2 && byte <= 0xDF) return step_partial(from, byte & 0x1F, 1, 2);
  if (byte >= 0xE0 && byte <= 0xEF) return step_partial(from, byte & 0x0F, 2, 3);
  if (byte >= 0xF0 && byte <= 0xF4) return step_partial(from, byte & 0x07, 3, 4);
  return kDead;  // a continuation byte first, or a byte UTF-8 never holds
}

GrammarMatcher::StateId GrammarMatcher::step_slow(StateId state, std::uint8_t byte) {
  if (state == kDead) return kDead;
  if (!next_[state]) {
    next_[state] = std::make_unique<std::array<StateId, 256>>();
    next_[state]->fill(kUnknown);
  }
  StateId& memo = (*next_[state])[byte];
  if (memo == kUnknown) {
    const StateId to = compute_step(state, byte);
    (*next_[state])[byte] = to;  // next_ may have grown: index again
    return to;
  }
  return memo;
}

GrammarMatcher::StateId GrammarMatcher::step(StateId state, std::string_view bytes) {
  for (char b : bytes) {
    state = step(state, static_cast<std::uint8_t>(b));
    if (state == kDead) break;
  }
  return state;
}

bool GrammarMatcher::accepts(StateId state) const {
  const State& s = states_[state];
  return s.pending == 0 && !s.stacks.empty() && s.stacks.front() == 0;
}

bool GrammarMatcher::complete(StateId state) const {
  return accepts(state) && states_[state].stacks.size() == 1;
}

}  // namespace masque::grammar

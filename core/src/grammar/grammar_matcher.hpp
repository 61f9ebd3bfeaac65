// Runs a Grammar over bytes: a state is the set of parse stacks that the text so far leaves
// (a pushdown automaton's configurations, each stack waiting on a character class), plus an
// unfinished UTF-8 sequence. Stacks and states are interned, so a state is a small id, equal
// texts' states compare equal, and byte steps are memoized per state: the token masks built
// on it (GrammarConstraint) are cached per state id.
//
// Not thread-safe: its owner serializes calls.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/gbnf.hpp"

namespace masque::grammar {

class GrammarMatcher {
 public:
  using StateId = std::uint32_t;
  static constexpr StateId kDead = 0;  // no parse goes on: every later byte is rejected

  explicit GrammarMatcher(Grammar grammar);

  StateId start() const { return start_; }
  // Inline for the memoized case: the token-mask walk takes millions of steps.
  StateId step(StateId state, std::uint8_t byte) {
    if (state != kDead && next_[state]) {
      const StateId known = (*next_[state])[byte];
      if (known != kUnknown) return known;
    }
    return step_slow(state, byte);
  }
  StateId step(StateId state, std::string_view bytes);
  // The text so far is a whole sentence of the grammar.
  bool accepts(StateId state) const;
  // Nothing may follow: a whole sentence that no longer one extends.
  bool complete(StateId state) const;
  std::size_t num_states() const { return states_.size(); }

 private:
  struct Node {  // a stack frame: a position in Grammar::elements over its parent frame
    std::uint32_t parent = 0;
    std::uint32_t pos = 0;
  };
  struct State {
    std::vector<std::uint32_t> stacks;  // sorted top nodes; 0 = an empty stack (accepted)
    char32_t partial = 0;               // an unfinished UTF-8 sequence's bits so far
    std::uint8_t pending = 0;           // its continuation bytes still to come
    std::uint8_t length = 0;            // and its length in bytes (2 to 4)
  };
  struct KeyHash {
    std::size_t operator()(const std::vector<std::uint32_t>& key) const;
  };

  std::uint32_t node(std::uint32_t parent, std::uint32_t pos);
  void next_stamp();  // a new expansion pass: seen_ marks from earlier ones no longer count
  // The frame that continues at `pos` over `parent`: none when `pos` ends its alternative
  // (so right recursion keeps stacks flat).
  std::uint32_t continuation(std::uint32_t parent, std::uint32_t pos);
  // The stacks `top` expands to, each waiting on a character class (or empty).
  void expand(std::uint32_t top, std::vector<std::uint32_t>& out);
  StateId intern(State state);
  StateId step_code_point(const State& from, char32_t c);
  StateId step_partial(const State& from, char32_t bits, std::uint8_t pending, std::uint8_t length);
  StateId compute_step(StateId state, std::uint8_t byte);
  StateId step_slow(StateId state, std::uint8_t byte);
  const CharSet& waiting_on(std::uint32_t top) const;

  // Frames one step may add (~12 MB): a bound on a pathological grammar, not on a long run.
  static constexpr std::size_t kMaxNodesPerStep = std::size_t{1} << 18;

  Grammar grammar_;
  std::vector<Node> nodes_;
  std::unordered_map<std::uint64_t, std::uint32_t> node_ids_;
  std::vector<State> states_;
  std::unordered_map<std::vector<std::uint32_t>, StateId, KeyHash> state_ids_;
  static constexpr StateId kUnknown = 0xFFFFFFFFu;
  std::vector<std::unique_ptr<std::array<StateId, 256>>> next_;  // memoized steps, per state
  StateId start_ = kDead;
  std::vector<std::uint32_t> seen_;  // per node: the stamp of the step that last expanded it
  std::uint32_t stamp_ = 0;
  std::size_t step_first_node_ = 0;     // nodes_.size() when this step began
  std::vector<std::uint32_t> pending_;  // expand's worklist, kept to reuse its storage
};

}  // namespace masque::grammar

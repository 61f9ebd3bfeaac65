// Leftmost-longest matching of many literal strings in a text (header only), as Hugging Face's
// added-token splitting does with Aho-Corasick (MatchKind::LeftmostLongest): at the leftmost
// position where any string starts, the longest one; then on after it. A byte trie with a
// first-byte filter, so texts without candidates cost one table lookup per byte.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace masque::tok {

class LiteralMatcher {
 public:
  struct Match {
    std::size_t begin = 0, end = 0;
    std::int64_t value = -1;
  };

  // Adds `text` (not empty) with `value` (>= 0); adding the same text again keeps the first value.
  void add(std::string_view text, std::int64_t value) {
    if (text.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    std::uint32_t node = 0;
    for (unsigned char c : text) {
      std::uint32_t child = find_child(node, c);
      if (child == 0) {
        child = static_cast<std::uint32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& kids = nodes_[node].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), Edge{c, 0},
                                     [](const Edge& a, const Edge& b) { return a.byte < b.byte; }),
                    Edge{c, child});
      }
      node = child;
    }
    if (nodes_[node].value >= 0) return;
    nodes_[node].value = value;
    first_[static_cast<unsigned char>(text[0])] = true;
    ++count_;
  }
  bool empty() const { return count_ == 0; }

  // The first match starting at or after `pos`, or false.
  bool next(std::string_view text, std::size_t pos, Match& m) const {
    if (count_ == 0) return false;
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    for (std::size_t i = pos; i < text.size(); ++i) {
      if (!first_[s[i]]) continue;
      std::uint32_t node = 0;
      std::size_t best_end = 0;
      std::int64_t best = -1;
      for (std::size_t j = i; j < text.size(); ++j) {
        node = find_child(node, s[j]);
        if (node == 0) break;
        if (nodes_[node].value >= 0) {
          best = nodes_[node].value;
          best_end = j + 1;
        }
      }
      if (best >= 0) {
        m = {i, best_end, best};
        return true;
      }
    }
    return false;
  }

 private:
  struct Edge {
    unsigned char byte;
    std::uint32_t node;
  };
  struct Node {
    std::vector<Edge> children;
    std::int64_t value = -1;
  };
  std::uint32_t find_child(std::uint32_t node, unsigned char c) const {
    const auto& kids = nodes_[node].children;
    if (kids.size() <= 8) {
      for (const Edge& e : kids)
        if (e.byte == c) return e.node;
      return 0;
    }
    auto it = std::lower_bound(kids.begin(), kids.end(), Edge{c, 0},
                               [](const Edge& a, const Edge& b) { return a.byte < b.byte; });
    return it != kids.end() && it->byte == c ? it->node : 0;
  }
  std::vector<Node> nodes_;
  bool first_[256] = {};
  std::size_t count_ = 0;
};

}  // namespace masque::tok

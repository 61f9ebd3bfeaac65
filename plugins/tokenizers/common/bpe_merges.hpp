// BPE merging shared by `bpe` and `tokenizer-json` (header only): the merge table (pair of ids ->
// rank and merged id) and the merge loop, which applies the lowest-ranked adjacent pair first,
// the leftmost of equal ones (Hugging Face's and OpenAI's order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

#include "masque/tokenizer.hpp"

namespace masque::tok {

inline constexpr std::uint32_t kNoRank = std::numeric_limits<std::uint32_t>::max();

// Pair of token ids -> (rank, merged id): open addressing, linear probing.
class MergeTable {
 public:
  struct Entry {
    std::uint64_t key = kEmpty;
    std::uint32_t rank = 0;
    TokenId merged = -1;
  };
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};

  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
  }
  // False when the pair is already there.
  bool insert(TokenId a, TokenId b, std::uint32_t rank, TokenId merged) {
    if (slots_.empty()) reserve(16);
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const std::uint64_t key = make_key(a, b);
    for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return false;
      if (slots_[i].key == kEmpty) {
        slots_[i] = {key, rank, merged};
        ++size_;
        return true;
      }
    }
  }
  // Inserts, or gives an existing pair the new rank and merged id.
  void insert_or_assign(TokenId a, TokenId b, std::uint32_t rank, TokenId merged) {
    if (!insert(a, b, rank, merged)) {
      const std::uint64_t key = make_key(a, b);
      for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_)
        if (slots_[i].key == key) {
          slots_[i].rank = rank;
          slots_[i].merged = merged;
          return;
        }
    }
  }
  const Entry* find(TokenId a, TokenId b) const {
    if (slots_.empty()) return nullptr;
    const std::uint64_t key = make_key(a, b);
    for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }
  std::size_t size() const { return size_; }
  std::size_t memory_bytes() const { return slots_.capacity() * sizeof(Entry); }

 private:
  static std::uint64_t make_key(TokenId a, TokenId b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
           static_cast<std::uint32_t>(b);
  }
  static std::size_t hash(std::uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  void grow() {
    std::vector<Entry> old = std::move(slots_);
    slots_.assign(old.size() * 2, Entry{});
    mask_ = slots_.size() - 1;
    for (const Entry& e : old) {
      if (e.key == kEmpty) continue;
      std::size_t i = hash(e.key) & mask_;
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = e;
    }
  }
  std::vector<Entry> slots_;
  std::size_t mask_ = 0, size_ = 0;
};

namespace detail {

// Long words: a heap of candidate pairs over a linked list of symbols.
inline void merge_with_heap(const MergeTable& merges, std::vector<TokenId>& ids,
                            std::vector<std::uint32_t>* lens) {
  const std::size_t n = ids.size();
  std::vector<std::int32_t> prev(n), next(n);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<std::int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1;
  }
  using Item = std::pair<std::uint32_t, std::int32_t>;  // (rank, left position)
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  auto consider = [&](std::int32_t left) {
    if (left < 0 || next[left] < 0) return;
    if (const MergeTable::Entry* e = merges.find(ids[left], ids[next[left]]))
      heap.emplace(e->rank, left);
  };
  for (std::size_t i = 0; i + 1 < n; ++i) consider(static_cast<std::int32_t>(i));
  std::vector<bool> gone(n, false);
  while (!heap.empty()) {
    const auto [rank, left] = heap.top();
    heap.pop();
    if (gone[left] || next[left] < 0) continue;
    const std::int32_t right = next[left];
    const MergeTable::Entry* e = merges.find(ids[left], ids[right]);
    if (!e || e->rank != rank) continue;  // stale: the pair changed since it was queued
    ids[left] = e->merged;
    if (lens) (*lens)[left] += (*lens)[right];
    gone[right] = true;
    next[left] = next[right];
    if (next[right] >= 0) prev[next[right]] = left;
    consider(prev[left]);
    consider(left);
  }
  std::size_t m = 0;
  for (std::int32_t i = 0; i >= 0; i = next[i]) {
    ids[m] = ids[i];
    if (lens) (*lens)[m] = (*lens)[i];
    ++m;
  }
  ids.resize(m);
  if (lens) lens->resize(m);
}

}  // namespace detail

// Merges the symbols `ids` in place. `lens` (optional, one entry per symbol) are summed along.
// Short words: a linear scan per merge; long ones: a heap.
inline void merge_symbols(const MergeTable& merges, std::vector<TokenId>& ids,
                          std::vector<std::uint32_t>* lens = nullptr) {
  const std::size_t n = ids.size();
  if (n < 2) return;
  if (n > 64) {
    detail::merge_with_heap(merges, ids, lens);
    return;
  }
  std::uint32_t ranks[64];
  TokenId merged[64];
  std::size_t m = n;
  auto rate = [&](std::size_t k) {
    const MergeTable::Entry* e = merges.find(ids[k], ids[k + 1]);
    ranks[k] = e ? e->rank : kNoRank;
    merged[k] = e ? e->merged : -1;
  };
  for (std::size_t k = 0; k + 1 < m; ++k) rate(k);
  while (m > 1) {
    std::size_t best = 0;
    for (std::size_t k = 1; k + 1 < m; ++k)
      if (ranks[k] < ranks[best]) best = k;
    if (ranks[best] == kNoRank) break;
    ids[best] = merged[best];
    if (lens) (*lens)[best] += (*lens)[best + 1];
    for (std::size_t k = best + 1; k + 1 < m; ++k) {
      ids[k] = ids[k + 1];
      if (lens) (*lens)[k] = (*lens)[k + 1];
      ranks[k] = ranks[k + 1];
      merged[k] = merged[k + 1];
    }
    --m;
    if (best > 0) rate(best - 1);
    if (best + 1 < m) rate(best);
  }
  ids.resize(m);
  if (lens) lens->resize(m);
}

}  // namespace masque::tok

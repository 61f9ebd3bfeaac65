// A cache of piece -> ids shared by all threads (header only), used by the BPE tokenizers.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <vector>

#include "masque/tokenizer.hpp"
#include "token_files.hpp"

namespace masque::tok {

// Cache of piece -> ids shared by all threads: a fixed table of 64-byte slots, two per set,
// each holding a short piece and its ids inline (one cache line per probe, no allocation).
// Lock stripes guard groups of sets; a full set drops its older entry.
class PieceCache {
 public:
  static constexpr std::size_t kMaxPieceBytes = 22;
  static constexpr std::size_t kMaxIds = 8;

  PieceCache() : slots_(2 * kSets) {}

  bool find(std::string_view piece, std::uint64_t hash, std::vector<TokenId>& out) const {
    const std::size_t set = hash & (kSets - 1);
    std::shared_lock lock(stripes_[set % kStripes]);
    for (std::size_t way = 0; way < 2; ++way) {
      const Slot& s = slots_[2 * set + way];
      if (s.count > 0 && s.hash == hash && s.length == piece.size() &&
          same_bytes(s.bytes, piece.data(), piece.size())) {
        out.assign(s.ids, s.ids + s.count);
        return true;
      }
    }
    return false;
  }
  void prefetch(std::uint64_t hash) const { __builtin_prefetch(&slots_[2 * (hash & (kSets - 1))]); }
  void insert(std::string_view piece, std::uint64_t hash, const std::vector<TokenId>& ids) const {
    if (piece.size() > kMaxPieceBytes || ids.empty() || ids.size() > kMaxIds) return;
    const std::size_t set = hash & (kSets - 1);
    std::unique_lock lock(stripes_[set % kStripes]);
    Slot* way = &slots_[2 * set];
    if (way[0].count > 0) way[1] = way[0];  // the newest entry goes first
    Slot& s = way[0];
    s.hash = hash;
    s.length = static_cast<std::uint8_t>(piece.size());
    s.count = static_cast<std::uint8_t>(ids.size());
    std::memcpy(s.bytes, piece.data(), piece.size());
    std::copy(ids.begin(), ids.end(), s.ids);
  }

 private:
  static constexpr std::size_t kSets = 1 << 14;  // 2 MiB in all
  static constexpr std::size_t kStripes = 64;
  struct alignas(64) Slot {
    std::uint64_t hash = 0;
    std::uint8_t length = 0, count = 0;  // count 0: empty
    char bytes[kMaxPieceBytes];
    TokenId ids[kMaxIds];
  };
  static_assert(sizeof(Slot) == 64);
  mutable std::vector<Slot> slots_;
  mutable std::array<std::shared_mutex, kStripes> stripes_;
};

}  // namespace masque::tok

#include "masque/mask.hpp"

#include "masque/error.hpp"

namespace masque {

bool SequenceMask::allowed(std::size_t i, std::size_t j) const {
  if (role[j] == TokenRole::pad || role[i] == TokenRole::pad) return false;
  const std::size_t n = rank.size();
  if (!dense.empty()) return dense[i * n + j] != 0;
  if (i == j) return true;
  return rank_rule_allows(role[i], rank[i], role[j], rank[j], window);
}

void AttentionLayout::reset(std::int32_t b, std::int32_t t) {
  batch = b;
  length = t;
  rank.assign(static_cast<std::size_t>(b) * t, 0);
  role.assign(static_cast<std::size_t>(b) * t, TokenRole::pad);
  dense.clear();
  window = 0;
}

void AttentionLayout::set_row(std::int32_t b, const SequenceMask& mask) {
  const std::size_t n = mask.size();
  if (b < 0 || b >= batch || n > static_cast<std::size_t>(length))
    throw RuntimeError("AttentionLayout::set_row: row " + std::to_string(b) + " of " +
                       std::to_string(n) + " tokens does not fit a batch of " +
                       std::to_string(batch) + " x " + std::to_string(length));
  if (mask.window > 0) window = mask.window;
  const std::size_t base = static_cast<std::size_t>(b) * length;
  for (std::size_t i = 0; i < n; ++i) {
    rank[base + i] = mask.rank[i];
    role[base + i] = mask.role[i];
  }
  if (!mask.dense.empty()) {
    const std::size_t T = length;
    if (dense.empty()) {
      // Rows set before this one were rank-based: materialise them so the batch has one form.
      dense.assign(static_cast<std::size_t>(batch) * T * T, 0);
      for (std::int32_t r = 0; r < batch; ++r) {
        if (r == b) continue;
        for (std::size_t i = 0; i < T; ++i)
          for (std::size_t j = 0; j < T; ++j) {
            const std::size_t bi = r * T + i, bj = r * T + j;
            bool ok = role[bj] != TokenRole::pad && role[bi] != TokenRole::pad &&
                      (i == j || rank_rule_allows(role[bi], rank[bi], role[bj], rank[bj], window));
            dense[r * T * T + i * T + j] = ok;
          }
      }
    }
    std::uint8_t* d = dense.data() + static_cast<std::size_t>(b) * T * T;
    for (std::size_t i = 0; i < T; ++i)
      for (std::size_t j = 0; j < T; ++j)
        d[i * T + j] = (i < n && j < n) ? mask.dense[i * n + j] : 0;
  } else if (!dense.empty()) {
    const std::size_t T = length;
    std::uint8_t* d = dense.data() + static_cast<std::size_t>(b) * T * T;
    for (std::size_t i = 0; i < T; ++i)
      for (std::size_t j = 0; j < T; ++j) d[i * T + j] = (i < n && j < n) && mask.allowed(i, j);
  }
}

bool AttentionLayout::allowed(std::int32_t b, std::int32_t i, std::int32_t j) const {
  const std::size_t T = length;
  const std::size_t bi = b * T + i, bj = b * T + j;
  if (role[bj] == TokenRole::pad || role[bi] == TokenRole::pad) return false;
  if (!dense.empty()) return dense[b * T * T + i * T + j] != 0;
  if (i == j) return true;
  return rank_rule_allows(role[bi], rank[bi], role[bj], rank[bj], window);
}

}  // namespace masque

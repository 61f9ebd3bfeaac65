// KV cache: per layer [slots, capacity, width] keys and values (row b in slot slot_of_[b]) plus
// per row and column rank and role.
#include "masque/kv_cache.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "masque/error.hpp"

namespace masque {

namespace {

constexpr std::int32_t kMinCapacity = 16;

// The bytes of element `i` of a token buffer (f32 or bf16).
const std::byte* at(const Tensor& t, std::int64_t i) {
  return static_cast<const std::byte*>(t.raw()) +
         i * static_cast<std::int64_t>(dtype_size(t.dtype()));
}
std::byte* at(Tensor& t, std::int64_t i) {
  return static_cast<std::byte*>(t.raw()) + i * static_cast<std::int64_t>(dtype_size(t.dtype()));
}

// Copies `columns` columns of `width` values of every row from one [rows, cap, width] buffer to
// another of the same type with a different capacity (or a different row order: new row r = old
// row from[r]); with `first`, new row r's columns before first[r] (padding) are left as they are.
void copy_rows(const Tensor& src, std::int32_t src_cap, Tensor& dst, std::int32_t dst_cap,
               std::int64_t width, std::int32_t columns, std::span<const std::int32_t> from,
               std::span<const std::int32_t> first = {}) {
  for (std::size_t r = 0; r < from.size(); ++r) {
    const std::int64_t skip = first.empty() ? 0 : first[r] * width;
    std::memcpy(at(dst, static_cast<std::int64_t>(r) * dst_cap * width + skip),
                at(src, static_cast<std::int64_t>(from[r]) * src_cap * width + skip),
                dtype_size(src.dtype()) * (columns * width - skip));
  }
}

template <typename T>
std::vector<T> gather_columns(const std::vector<T>& src, std::int32_t src_cap, std::int32_t dst_cap,
                              std::int32_t columns, std::span<const std::int32_t> from, T fill) {
  std::vector<T> dst(from.size() * static_cast<std::size_t>(dst_cap), fill);
  for (std::size_t r = 0; r < from.size(); ++r)
    std::copy_n(src.begin() + static_cast<std::ptrdiff_t>(from[r]) * src_cap, columns,
                dst.begin() + static_cast<std::ptrdiff_t>(r) * dst_cap);
  return dst;
}

bool is_prefix(std::span<const std::int32_t> rows) {
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i] != static_cast<std::int32_t>(i)) return false;
  return true;
}

// Whether `t` (owned, not shared) can take `values` values without a new allocation.
bool fits(const Tensor& t, std::int64_t values) {
  return !t.empty() && !t.shares_buffer() &&
         t.capacity() >= static_cast<std::size_t>(values) * dtype_size(t.dtype());
}

// Resizes `t` to `shape` in `dtype`; a new allocation gets half as many rows again in reserve,
// so that continuous batching's next rows join in place.
void reserve_rows(Tensor& t, Shape shape, DType dtype = DType::f32) {
  if (t.dtype() != dtype || !fits(t, num_elements(shape))) {
    Shape roomy = shape;
    roomy[0] += roomy[0] / 2;
    t = Tensor(std::move(roomy), dtype);
  }
  t.resize(std::move(shape));
}

std::vector<std::int32_t> identity(std::int32_t n) {
  std::vector<std::int32_t> rows(n);
  for (std::int32_t i = 0; i < n; ++i) rows[i] = i;
  return rows;
}

}  // namespace

KvCache::KvCache(std::int32_t layers, std::int32_t kv_heads, std::int32_t head_dim,
                 std::int32_t rows, DType dtype)
    : layers_(layers), rows_(rows), width_(std::int64_t{kv_heads} * head_dim), dtype_(dtype) {
  if (dtype != DType::f32 && dtype != DType::bf16)
    throw RuntimeError(std::string("KvCache: keys and values are held in f32 or bf16, not ") +
                       to_string(dtype));
  if (layers <= 0 || kv_heads <= 0 || head_dim <= 0 || rows < 0)
    throw RuntimeError("KvCache: invalid dimensions (" + std::to_string(layers) + " layers, " +
                       std::to_string(kv_heads) + " kv heads of " + std::to_string(head_dim) +
                       ", " + std::to_string(rows) + " rows)");
  keys_.resize(layers);
  values_.resize(layers);
  cross_keys_.resize(layers);
  cross_values_.resize(layers);
  next_rank_.assign(rows, 0);
  next_position_.assign(rows, 0);
  slot_of_ = identity(rows);
  source_of_ = identity(rows);
  slots_ = rows;
}

void KvCache::check_layer(std::int32_t layer, const char* what) const {
  if (layer < 0 || layer >= layers_)
    throw RuntimeError(std::string("KvCache::") + what + ": layer " + std::to_string(layer) +
                       " of " + std::to_string(layers_));
}

void KvCache::check_idle(const char* what) const {
  if (layers_ == 0) throw RuntimeError(std::string("KvCache::") + what + " on an empty cache");
  if (pending_ != 0)
    throw RuntimeError(std::string("KvCache::") + what + " during an append (call end() first)");
}

void KvCache::reserve(std::int32_t columns) {
  if (columns <= capacity_) return;
  const std::int32_t cap = std::max({columns, 2 * capacity_, kMinCapacity});
  const auto rows = identity(rows_);
  // The rows move to slots 0 .. rows - 1 of the new buffers; free slots are not kept.
  for (auto* buffers : {&keys_, &values_}) {
    for (auto& buffer : *buffers) {
      Tensor grown;  // with spare slots for rows that select() replicates
      reserve_rows(grown, {rows_, cap, width_}, dtype_);
      if (length_ > 0 && !buffer.empty())
        copy_rows(buffer, capacity_, grown, cap, width_, length_, slot_of_);
      buffer = std::move(grown);
    }
  }
  rank_ = gather_columns(rank_, capacity_, cap, length_, rows, 0);
  role_ = gather_columns(role_, capacity_, cap, length_, rows, TokenRole::pad);
  slot_of_ = rows;
  token_slots_ = rows_;
  capacity_ = cap;
}

void KvCache::note_kept(std::int32_t row, std::int32_t col) {
  const std::size_t at = static_cast<std::size_t>(row) * capacity_ + col;
  if (role_[at] != TokenRole::content) return;
  next_rank_[row] = std::max(next_rank_[row], rank_[at] + 1);
  const std::int32_t position = pending_positions_[row * pending_ + (col - length_)];
  next_position_[row] = std::max(next_position_[row], position + 1);
}

void KvCache::begin(const AttentionLayout& layout, std::span<const std::int32_t> positions) {
  check_idle("begin");
  if (layout.window > 0) window_ = layout.window;
  if (layout.batch != rows_)
    throw RuntimeError("KvCache::begin: a batch of " + std::to_string(layout.batch) +
                       " rows for a cache of " + std::to_string(rows_));
  if (!layout.dense.empty())
    throw RuntimeError("KvCache::begin: a dense attention mask cannot be decoded incrementally");
  const std::int32_t n = layout.length;
  if (positions.size() != static_cast<std::size_t>(rows_) * n)
    throw RuntimeError("KvCache::begin: " + std::to_string(positions.size()) + " positions for " +
                       std::to_string(rows_) + " x " + std::to_string(n) + " tokens");
  reserve(length_ + n);
  for (std::int32_t b = 0; b < rows_; ++b)
    for (std::int32_t t = 0; t < n; ++t) {
      const std::size_t at = static_cast<std::size_t>(b) * capacity_ + length_ + t;
      rank_[at] = layout.rank[static_cast<std::size_t>(b) * n + t];
      role_[at] = layout.role[static_cast<std::size_t>(b) * n + t];
    }
  pending_positions_.assign(positions.begin(), positions.end());
  pending_ = n;
}

void KvCache::begin_step(TokenRole role, std::span<const std::int32_t> positions,
                         std::span<const std::int32_t> ranks) {
  check_idle("begin_step");
  if (role == TokenRole::pad)
    throw RuntimeError("KvCache::begin_step: a step token cannot be a pad");
  if ((!positions.empty() && positions.size() != static_cast<std::size_t>(rows_)) ||
      (!ranks.empty() && ranks.size() != static_cast<std::size_t>(rows_)))
    throw RuntimeError("KvCache::begin_step: positions and ranks need one entry per row (" +
                       std::to_string(rows_) + ")");
  reserve(length_ + 1);
  pending_positions_.resize(rows_);
  for (std::int32_t b = 0; b < rows_; ++b) {
    const std::size_t at = static_cast<std::size_t>(b) * capacity_ + length_;
    rank_[at] = ranks.empty() ? next_rank_[b] : ranks[b];
    role_[at] = role;
    pending_positions_[b] = positions.empty() ? next_position_[b] : positions[b];
  }
  pending_ = 1;
}

void KvCache::write(std::int32_t layer, SeqView k, SeqView v) {
  check_layer(layer, "write");
  if (pending_ == 0) throw RuntimeError("KvCache::write outside an append");
  for (auto [buffer, view] : {std::pair{&keys_[layer], k}, std::pair{&values_[layer], v}})
    for (std::int32_t b = 0; b < rows_; ++b)
      for (std::int32_t t = 0; t < pending_; ++t) {
        const std::int64_t i = (std::int64_t{slot_of_[b]} * capacity_ + length_ + t) * width_;
        const float* from = view.data + b * view.batch_stride + t * view.token_stride;
        if (dtype_ == DType::bf16)
          round_to_bf16(from, width_, reinterpret_cast<std::uint16_t*>(at(*buffer, i)));
        else
          std::memcpy(at(*buffer, i), from, sizeof(float) * width_);
      }
}

// bf16 keys or values widened to f32 for the kernel: each row's columns, kept and pending, in
// its slot of `out` (the same strides as the cache's own buffers).
const float* KvCache::widened(const Tensor& buffer, Tensor& out) const {
  const std::int32_t columns = length_ + pending_;
  if (out.dtype() != DType::f32 || !fits(out, std::int64_t{token_slots_} * capacity_ * width_))
    out = Tensor({token_slots_, capacity_, width_});
  else
    out.resize({token_slots_, capacity_, width_});
  for (std::int32_t b = 0; b < rows_; ++b) {
    const std::int64_t first = std::int64_t{slot_of_[b]} * capacity_ * width_;
    widen_bf16(reinterpret_cast<const std::uint16_t*>(at(buffer, first)), columns * width_,
               out.f32() + first);
  }
  return out.f32();
}

MaskView KvCache::mask() const {
  MaskView m;
  m.batch = rows_;
  m.q_len = pending_;
  m.k_len = length_ + pending_;
  m.key_role = role_.data();
  m.key_rank = rank_.data();
  m.key_stride = capacity_;
  m.query_role = role_.data() + length_;
  m.query_rank = rank_.data() + length_;
  m.query_stride = capacity_;
  m.self_offset = length_;
  m.window = window_;
  return m;
}

SeqView KvCache::keys(std::int32_t layer) const {
  check_layer(layer, "keys");
  const Tensor& t = keys_[layer];
  const float* data = t.empty()               ? nullptr
                      : dtype_ == DType::bf16 ? widened(t, widened_keys_)
                                              : t.f32();
  return {data, capacity_ * width_, width_, slot_of_.data()};
}

SeqView KvCache::values(std::int32_t layer) const {
  check_layer(layer, "values");
  const Tensor& t = values_[layer];
  const float* data = t.empty()               ? nullptr
                      : dtype_ == DType::bf16 ? widened(t, widened_values_)
                                              : t.f32();
  return {data, capacity_ * width_, width_, slot_of_.data()};
}

void KvCache::end(bool keep) {
  if (keep) {
    for (std::int32_t b = 0; b < rows_; ++b)
      for (std::int32_t t = 0; t < pending_; ++t) note_kept(b, length_ + t);
    length_ += pending_;
  } else {
    for (std::int32_t b = 0; b < rows_; ++b)
      for (std::int32_t t = 0; t < pending_; ++t)
        role_[static_cast<std::size_t>(b) * capacity_ + length_ + t] = TokenRole::pad;
  }
  pending_ = 0;
  pending_positions_.clear();
}

std::int32_t KvCache::next_rank(std::int32_t row) const {
  return next_rank_.at(row);
}
std::int32_t KvCache::next_position(std::int32_t row) const {
  return next_position_.at(row);
}

void KvCache::set_source(const AttentionLayout& source) {
  check_idle("set_source");
  if (source.batch != rows_)
    throw RuntimeError("KvCache::set_source: a source batch of " + std::to_string(source.batch) +
                       " rows for a cache of " + std::to_string(rows_));
  source_length_ = source.length;
  source_role_ = source.role;
  source_rank_ = source.rank;
  source_of_ = identity(rows_);
  slots_ = rows_;
  for (auto* buffers : {&cross_keys_, &cross_values_})
    for (auto& buffer : *buffers) buffer = Tensor();
}

void KvCache::set_cross(std::int32_t layer, SeqView k, SeqView v) {
  check_layer(layer, "set_cross");
  if (slots_ != rows_ || !is_prefix(source_of_))
    throw RuntimeError("KvCache::set_cross: call set_source first, before rows are selected");
  const std::int32_t s = source_length_;
  const std::size_t bytes = sizeof(float) * width_;
  for (auto [buffer, view] :
       {std::pair{&cross_keys_[layer], k}, std::pair{&cross_values_[layer], v}}) {
    *buffer = Tensor({rows_, s, width_});
    for (std::int32_t b = 0; b < rows_; ++b)
      for (std::int32_t t = 0; t < s; ++t)
        std::memcpy(buffer->f32() + (std::int64_t{b} * s + t) * width_,
                    view.data + b * view.batch_stride + t * view.token_stride, bytes);
  }
}

SeqView KvCache::cross_keys(std::int32_t layer) const {
  check_layer(layer, "cross_keys");
  const Tensor& t = cross_keys_[layer];
  if (t.empty() && source_length_ > 0 && rows_ > 0)
    throw RuntimeError("KvCache::cross_keys: layer " + std::to_string(layer) + " not set");
  return {t.empty() ? nullptr : t.f32(), source_length_ * width_, width_, source_of_.data()};
}

SeqView KvCache::cross_values(std::int32_t layer) const {
  check_layer(layer, "cross_values");
  const Tensor& t = cross_values_[layer];
  if (t.empty() && source_length_ > 0 && rows_ > 0)
    throw RuntimeError("KvCache::cross_values: layer " + std::to_string(layer) + " not set");
  return {t.empty() ? nullptr : t.f32(), source_length_ * width_, width_, source_of_.data()};
}

MaskView KvCache::cross_mask(std::int32_t q_len) const {
  MaskView m;
  m.batch = rows_;
  m.q_len = q_len;
  m.k_len = source_length_;
  m.key_role = source_role_.data();
  m.key_rank = source_rank_.data();
  m.key_stride = source_length_;
  return m;
}

void KvCache::select(std::span<const std::int32_t> rows) {
  check_idle("select");
  for (auto r : rows)
    if (r < 0 || r >= rows_)
      throw RuntimeError("KvCache::select: row " + std::to_string(r) + " of " +
                         std::to_string(rows_));
  const auto n = static_cast<std::int32_t>(rows.size());
  if (is_prefix(rows)) {  // the last rows leave: nothing moves
    truncate(n);
    return;
  }
  assign_slots(rows);
  rank_ = gather_columns(rank_, capacity_, capacity_, length_, rows, 0);
  role_ = gather_columns(role_, capacity_, capacity_, length_, rows, TokenRole::pad);
  // The encoder memory stays where it is: rows only change which slot they read.
  bool same_sources = n == rows_;
  for (std::int32_t i = 0; i < n && same_sources; ++i)
    same_sources = source_of_[rows[i]] == source_of_[i];
  if (!same_sources) {
    const std::int32_t s = source_length_;
    source_role_ = gather_columns(source_role_, s, s, s, rows, TokenRole::pad);
    source_rank_ = gather_columns(source_rank_, s, s, s, rows, 0);
    std::vector<std::int32_t> source_of(n);
    for (std::int32_t i = 0; i < n; ++i) source_of[i] = source_of_[rows[i]];
    source_of_ = std::move(source_of);
  }
  std::vector<std::int32_t> next_rank(n), next_position(n);
  for (std::int32_t i = 0; i < n; ++i) {
    next_rank[i] = next_rank_[rows[i]];
    next_position[i] = next_position_[rows[i]];
  }
  next_rank_ = std::move(next_rank);
  next_position_ = std::move(next_position);
  rows_ = n;
}

KvCache KvCache::shaped_like(std::int32_t rows) const {
  KvCache c;
  c.layers_ = layers_;
  c.rows_ = rows;
  c.length_ = length_;
  c.capacity_ = capacity_;
  c.width_ = width_;
  c.window_ = window_;
  c.dtype_ = dtype_;
  return c;
}

KvCache KvCache::fork() const {
  check_idle("fork");
  KvCache copy = shaped_like(rows_);
  for (const auto* src : {&keys_, &values_, &cross_keys_, &cross_values_}) {
    std::vector<Tensor> cloned;
    for (const auto& t : *src) cloned.push_back(t.empty() ? Tensor() : t.clone());
    if (src == &keys_)
      copy.keys_ = std::move(cloned);
    else if (src == &values_)
      copy.values_ = std::move(cloned);
    else if (src == &cross_keys_)
      copy.cross_keys_ = std::move(cloned);
    else
      copy.cross_values_ = std::move(cloned);
  }
  copy.slot_of_ = slot_of_;
  copy.token_slots_ = token_slots_;
  copy.rank_ = rank_;
  copy.role_ = role_;
  copy.next_rank_ = next_rank_;
  copy.next_position_ = next_position_;
  copy.source_length_ = source_length_;
  copy.source_role_ = source_role_;
  copy.source_rank_ = source_rank_;
  copy.source_of_ = source_of_;
  copy.slots_ = slots_;
  return copy;
}

void KvCache::truncate(std::int32_t n) {
  const auto rows = static_cast<std::size_t>(n);
  rank_.resize(rows * capacity_);
  role_.resize(rows * capacity_);
  source_role_.resize(rows * source_length_);
  source_rank_.resize(rows * source_length_);
  slot_of_.resize(rows);
  source_of_.resize(rows);
  next_rank_.resize(rows);
  next_position_.resize(rows);
  rows_ = n;  // the buffers keep their rows: the next select or append reuses them
}

void KvCache::assign_slots(std::span<const std::int32_t> rows) {
  const auto n = static_cast<std::int32_t>(rows.size());
  if (token_slots_ == 0) {  // no buffers yet: nothing to keep
    slot_of_ = identity(n);
    return;
  }
  std::vector<std::int32_t> slot(rows.size(), -1), again;
  std::vector<char> taken(static_cast<std::size_t>(token_slots_), 0);
  for (std::int32_t i = 0; i < n; ++i) {
    const std::int32_t s = slot_of_[rows[i]];
    if (taken[s])
      again.push_back(i);
    else
      taken[s] = 1, slot[i] = s;
  }
  if (!again.empty()) {
    std::vector<std::int32_t> free;
    for (std::int32_t s = 0; s < token_slots_ && free.size() < again.size(); ++s)
      if (!taken[s]) free.push_back(s);
    std::int32_t slots = token_slots_;
    while (free.size() < again.size()) free.push_back(slots++);
    grow_slots(slots);
    // A row's leading padding (rows joined by append_rows are right-aligned) is not copied:
    // attention never reads a padding key, so what those columns hold does not matter.
    for (std::size_t k = 0; k < again.size(); ++k) {
      const std::int32_t i = again[k];
      slot[i] = free[k];
      const std::int64_t first = first_used_column(rows[i]);
      const std::int64_t from = (std::int64_t{slot_of_[rows[i]]} * capacity_ + first) * width_;
      const std::int64_t to = (std::int64_t{free[k]} * capacity_ + first) * width_;
      const std::int64_t values = (length_ - first) * width_;
      for (auto* buffers : {&keys_, &values_})
        for (Tensor& buffer : *buffers)
          if (!buffer.empty() && values > 0)
            std::memcpy(at(buffer, to), at(buffer, from), dtype_size(buffer.dtype()) * values);
    }
  }
  slot_of_ = std::move(slot);
}

void KvCache::grow_slots(std::int32_t slots) {
  if (slots <= token_slots_) return;
  const std::int32_t grown = std::max(slots, token_slots_ + token_slots_ / 2);
  const std::int64_t values = std::int64_t{grown} * capacity_ * width_;
  for (auto* buffers : {&keys_, &values_})
    for (Tensor& buffer : *buffers) {
      if (buffer.empty()) continue;
      if (fits(buffer, values)) {  // resize() keeps the contents within the allocation
        buffer.resize({grown, capacity_, width_});
        continue;
      }
      Tensor bigger;
      reserve_rows(bigger, {grown, capacity_, width_}, dtype_);
      copy_rows(buffer, capacity_, bigger, capacity_, width_, length_,
                identity(token_slots_));  // the kept columns only
      buffer = std::move(bigger);
    }
  token_slots_ = grown;
}

KvCache KvCache::split(std::span<const std::int32_t> rows) {
  check_idle("split");
  std::vector<char> leaving(static_cast<std::size_t>(rows_), 0);
  for (auto r : rows) {
    if (r < 0 || r >= rows_ || leaving[r])
      throw RuntimeError("KvCache::split: row " + std::to_string(r) + " of " +
                         std::to_string(rows_) + " (or twice)");
    leaving[r] = 1;
  }
  const auto count = static_cast<std::int32_t>(rows.size());
  KvCache first = shaped_like(count);
  std::vector<std::int32_t> from(rows.size()), slots(rows.size());
  for (std::int32_t i = 0; i < count; ++i) {
    from[i] = first_used_column(rows[i]);
    slots[i] = slot_of_[rows[i]];
  }
  for (auto [mine, theirs] : {std::pair{&keys_, &first.keys_}, std::pair{&values_, &first.values_}})
    for (const Tensor& buffer : *mine) {
      theirs->emplace_back();
      if (buffer.empty()) continue;
      theirs->back() = Tensor({count, capacity_, width_}, dtype_);
      copy_rows(buffer, capacity_, theirs->back(), capacity_, width_, length_, slots, from);
    }
  first.slot_of_ = identity(count);
  first.token_slots_ = token_slots_ > 0 ? count : 0;
  first.rank_ = gather_columns(rank_, capacity_, capacity_, length_, rows, 0);
  first.role_ = gather_columns(role_, capacity_, capacity_, length_, rows, TokenRole::pad);
  const std::int32_t s = source_length_;
  first.source_length_ = s;
  first.source_role_ = gather_columns(source_role_, s, s, s, rows, TokenRole::pad);
  first.source_rank_ = gather_columns(source_rank_, s, s, s, rows, 0);
  first.cross_keys_ = cross_keys_;  // shared: the buffers, not copies
  first.cross_values_ = cross_values_;
  first.slots_ = slots_;
  for (auto r : rows) {
    first.next_rank_.push_back(next_rank_[r]);
    first.next_position_.push_back(next_position_[r]);
    first.source_of_.push_back(source_of_[r]);
  }
  std::vector<std::int32_t> rest;
  for (std::int32_t r = 0; r < rows_; ++r)
    if (!leaving[r]) rest.push_back(r);
  select(rest);
  return first;
}

std::int32_t KvCache::used_source_length() const {
  std::int32_t used = 0;
  for (std::int32_t r = 0; r < rows_; ++r) {
    const TokenRole* role = source_role_.data() + static_cast<std::size_t>(r) * source_length_;
    for (std::int32_t t = source_length_; t > used; --t)
      if (role[t - 1] != TokenRole::pad) {
        used = t;
        break;
      }
  }
  return used;
}

std::int32_t KvCache::first_used_column(std::int32_t row) const {
  const TokenRole* role = role_.data() + static_cast<std::size_t>(row) * capacity_;
  std::int32_t c = 0;
  while (c < length_ && role[c] == TokenRole::pad) ++c;
  return c;
}

std::int32_t KvCache::first_used_column() const {
  std::int32_t first = length_;
  for (std::int32_t b = 0; b < rows_ && first > 0; ++b)
    first = std::min(first, first_used_column(b));
  return first;
}

namespace {

// Slots `from_slots` of `src` ([.., src_cap, width], columns [from, from + columns)) into slots
// `to_slots` of `dst` ([.., cap, width]), at column `at`.
void place_rows(const Tensor& src, std::span<const std::int32_t> from_slots, std::int32_t src_cap,
                std::int32_t from, std::int32_t columns, Tensor& dst,
                std::span<const std::int32_t> to_slots, std::int32_t cap, std::int32_t at,
                std::int64_t width) {
  if (src.empty() || columns <= 0) return;
  for (std::size_t r = 0; r < from_slots.size(); ++r)
    std::memcpy(masque::at(dst, (std::int64_t{to_slots[r]} * cap + at) * width),
                masque::at(src, (std::int64_t{from_slots[r]} * src_cap + from) * width),
                dtype_size(src.dtype()) * columns * width);
}

// Slots `from` of `src` ([.., src_len, width]) into slots `to` of `dst` ([.., len, width]): the
// first min(src_len, len) columns (the rest of a longer slot is padding no row reads); the
// columns past src_len (pads no query reads) are zeroed.
void place_slots(const Tensor& src, std::span<const std::int32_t> from, std::int32_t src_len,
                 Tensor& dst, std::span<const std::int32_t> to, std::int32_t len,
                 std::int64_t width) {
  for (std::size_t i = 0; i < from.size(); ++i) {
    float* out = dst.f32() + std::int64_t{to[i]} * len * width;
    const std::int64_t copied = src.empty() ? 0 : std::int64_t{std::min(src_len, len)} * width;
    if (copied > 0)
      std::memcpy(out, src.f32() + std::int64_t{from[i]} * src_len * width, sizeof(float) * copied);
    std::memset(out + copied, 0, sizeof(float) * (len * width - copied));
  }
}

}  // namespace

Tensor& KvCache::spare_buffer(std::size_t i, Shape shape, DType dtype) {
  if (i >= spare_.size()) spare_.resize(i + 1);
  reserve_rows(spare_[i], std::move(shape), dtype);
  return spare_[i];
}

void KvCache::append_rows(KvCache&& other) {
  check_idle("append_rows");
  other.check_idle("append_rows");
  if (other.layers_ != layers_ || other.width_ != width_ || other.dtype_ != dtype_)
    throw RuntimeError("KvCache::append_rows: caches of different shapes or types (" +
                       std::to_string(layers_) + " x " + std::to_string(width_) + " and " +
                       std::to_string(other.layers_) + " x " + std::to_string(other.width_) + ")");
  join_tokens(other);
  join_sources(other);
  next_rank_.insert(next_rank_.end(), other.next_rank_.begin(), other.next_rank_.end());
  next_position_.insert(next_position_.end(), other.next_position_.begin(),
                        other.next_position_.end());
  window_ = std::max(window_, other.window_);
  rows_ += other.rows_;
  other = KvCache();
}

void KvCache::join_tokens(const KvCache& other) {
  const std::int32_t skip = first_used_column(), other_skip = other.first_used_column();
  const std::int32_t mine = length_ - skip, theirs = other.length_ - other_skip;
  const std::int32_t rows = rows_ + other.rows_;
  // In place, their rows take the free slots, then new ones after.
  std::vector<std::int32_t> to;
  std::vector<char> taken(static_cast<std::size_t>(token_slots_), 0);
  for (std::int32_t b = 0; b < rows_ && token_slots_ > 0; ++b) taken[slot_of_[b]] = 1;
  for (std::int32_t slot = 0; slot < token_slots_ && std::ssize(to) < other.rows_; ++slot)
    if (!taken[slot]) to.push_back(slot);
  std::int32_t slots = token_slots_;
  while (std::ssize(to) < other.rows_) to.push_back(slots++);
  // In place: the new rows fit the columns and the buffers' allocations, and at most half the
  // columns are ones no row uses any more (else the join drops them).
  bool in_place = rows_ > 0 && token_slots_ > 0 && theirs <= length_ && 2 * skip <= length_;
  for (const auto* buffers : {&keys_, &values_})
    for (const Tensor& buffer : *buffers)
      in_place = in_place && fits(buffer, std::int64_t{slots} * capacity_ * width_);
  if (!in_place) {  // the rebuilt buffers hold mine, then theirs
    slots = rows;
    for (std::int32_t r = 0; r < other.rows_; ++r) to[r] = rows_ + r;
  }
  // Right-aligned: every row's newest token in the last column.
  const std::int32_t length = in_place ? length_ : std::max(mine, theirs);
  const std::int32_t cap = in_place ? capacity_ : std::max(length + kMinCapacity, capacity_);
  std::size_t spare = 0;
  for (std::int32_t l = 0; l < layers_; ++l)
    for (auto [buffer, theirs_buffer] :
         {std::pair{&keys_[l], &other.keys_[l]}, std::pair{&values_[l], &other.values_[l]}}) {
      if (in_place) {
        buffer->resize({slots, cap, width_});
      } else {
        Tensor& joined = spare_buffer(spare++, {rows, cap, width_}, dtype_);
        place_rows(*buffer, slot_of_, capacity_, skip, mine, joined, identity(rows_), cap,
                   length - mine, width_);
        std::swap(*buffer, joined);
      }
      place_rows(*theirs_buffer, other.slot_of_, other.capacity_, other_skip, theirs, *buffer, to,
                 cap, length - theirs, width_);
    }
  auto place_meta = [&](const KvCache& c, std::vector<std::int32_t>& rank,
                        std::vector<TokenRole>& role, std::int32_t row0, std::int32_t from,
                        std::int32_t n) {
    for (std::int32_t r = 0; r < c.rows_; ++r) {
      const std::size_t src = static_cast<std::size_t>(r) * c.capacity_ + from;
      const std::size_t dst = (static_cast<std::size_t>(row0) + r) * cap + (length - n);
      std::copy_n(c.rank_.begin() + src, n, rank.begin() + dst);
      std::copy_n(c.role_.begin() + src, n, role.begin() + dst);
    }
  };
  if (in_place) {
    rank_.resize(static_cast<std::size_t>(rows) * cap, 0);
    role_.resize(rank_.size(), TokenRole::pad);
  } else {
    std::vector<std::int32_t> rank(static_cast<std::size_t>(rows) * cap, 0);
    std::vector<TokenRole> role(rank.size(), TokenRole::pad);
    place_meta(*this, rank, role, 0, skip, mine);
    rank_ = std::move(rank);
    role_ = std::move(role);
  }
  place_meta(other, rank_, role_, rows_, other_skip, theirs);
  if (!in_place) slot_of_ = identity(rows_);
  slot_of_.insert(slot_of_.end(), to.begin(), to.end());
  token_slots_ = slots;
  length_ = length;
  capacity_ = cap;
}

void KvCache::join_sources(const KvCache& other) {
  // The encoder memories still read (finished records' and those of rows split off are
  // dropped in a rebuild): this cache's, then the new ones.
  std::vector<std::int32_t> live, slot_of(static_cast<std::size_t>(slots_), -1);
  std::vector<std::int32_t> their_live, their_slot_of(static_cast<std::size_t>(other.slots_), -1);
  auto find_live = [](const KvCache& c, std::vector<std::int32_t>& list,
                      std::vector<std::int32_t>& slot) {
    for (std::int32_t r = 0; r < c.rows_; ++r)
      if (slot[c.source_of_[r]] < 0) {
        slot[c.source_of_[r]] = static_cast<std::int32_t>(list.size());
        list.push_back(c.source_of_[r]);
      }
  };
  find_live(*this, live, slot_of);
  find_live(other, their_live, their_slot_of);
  // The columns some row still attends to: a memory as long as a finished record's source
  // costs every cross-attention query a look at its padding.
  const std::int32_t their_used = other.used_source_length();
  const std::int32_t used = std::max(used_source_length(), their_used);
  const std::int32_t rows = rows_ + other.rows_;
  // In place: the new memories go to finished records' slots, then after the others, in
  // buffers no split shares, and at most a fifth of the columns are padding. Else the live
  // memories are packed first.
  std::vector<std::int32_t> to;  // the slot of each of their_live
  for (std::int32_t slot = 0; slot < slots_ && to.size() < their_live.size(); ++slot)
    if (slot_of[slot] < 0) to.push_back(slot);
  std::int32_t slots = slots_;
  while (to.size() < their_live.size()) to.push_back(slots++);
  bool in_place = rows_ > 0 && their_used <= source_length_ && 5 * source_length_ <= 4 * used + 4;
  for (const auto* buffers : {&cross_keys_, &cross_values_})
    for (const Tensor& buffer : *buffers)
      in_place = in_place && fits(buffer, std::int64_t{slots} * source_length_ * width_);
  if (!in_place) {
    slots = static_cast<std::int32_t>(live.size());
    for (std::size_t i = 0; i < to.size(); ++i) to[i] = slots++;
  }
  const std::int32_t s = in_place ? source_length_ : used;
  const auto packed = identity(static_cast<std::int32_t>(live.size()));
  std::size_t spare = 2 * static_cast<std::size_t>(layers_);  // after the tokens' (select's)
  for (std::int32_t l = 0; l < layers_ && s > 0; ++l)
    for (auto [buffer, theirs_buffer] : {std::pair{&cross_keys_[l], &other.cross_keys_[l]},
                                         std::pair{&cross_values_[l], &other.cross_values_[l]}}) {
      if (buffer->empty() && theirs_buffer->empty()) continue;
      if (in_place) {
        buffer->resize({slots, s, width_});
      } else {
        Tensor& joined = spare_buffer(spare++, {slots, s, width_});
        place_slots(*buffer, live, source_length_, joined, packed, s, width_);
        std::swap(*buffer, joined);
        if (joined.shares_buffer()) joined = Tensor();  // still read elsewhere (split): no spare
      }
      place_slots(*theirs_buffer, their_live, other.source_length_, *buffer, to, s, width_);
    }
  // Per row: which slot, and the source's roles and ranks (what the cross mask reads).
  std::vector<TokenRole> source_role(static_cast<std::size_t>(rows) * s, TokenRole::pad);
  std::vector<std::int32_t> source_rank(source_role.size(), 0);
  std::vector<std::int32_t> source_of(rows);
  for (const KvCache* c : {static_cast<const KvCache*>(this), &other}) {
    const std::int32_t row0 = c == this ? 0 : rows_;
    for (std::int32_t r = 0; r < c->rows_; ++r) {
      const std::int32_t slot = c->source_of_[r];
      source_of[row0 + r] = c == this ? (in_place ? slot : slot_of[slot]) : to[their_slot_of[slot]];
      const std::size_t src = static_cast<std::size_t>(r) * c->source_length_;
      const std::size_t dst = static_cast<std::size_t>(row0 + r) * s;
      const std::int32_t n = std::min(c->source_length_, s);
      std::copy_n(c->source_role_.begin() + src, n, source_role.begin() + dst);
      std::copy_n(c->source_rank_.begin() + src, n, source_rank.begin() + dst);
    }
  }
  source_role_ = std::move(source_role);
  source_rank_ = std::move(source_rank);
  source_length_ = s;
  source_of_ = std::move(source_of);
  slots_ = slots;
}

}  // namespace masque

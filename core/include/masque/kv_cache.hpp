// Key/value cache for incremental decoding.
//
// Per layer, K and V of every cached token of every row, plus per row and column the token's
// rank, role and position, so that the mask rule (mask.hpp) holds incrementally: a new token
// attends to the cached keys its rank allows. All rows have the same number of columns; a row
// that is shorter (right-padded prefill) keeps role `pad` in its extra columns.
//
// One append (a prefill batch, or one step token per row) goes
//
//   cache.begin(layout, positions)  or  cache.begin_step(role, positions, ranks)
//   for each layer l:
//     k, v = projections of the new tokens (RoPE applied with cache.pending_positions())
//     cache.write(l, k, v)
//     attention(dims, cache.mask(), q, cache.keys(l), cache.values(l), out)
//   cache.end(keep)   // keep = false: the tokens were queries that are not kept
//
// Each row's K/V live in a slot of the layer's buffers, which the attention reads through a slot
// map (SeqView::row_of): select() (beams reordered, replicated or dropped) moves no token a row
// keeps, and copies a row's tokens only when a second row continues it (a replicated beam). Cross-
// attention K/V (computed once from the encoder memory) live alongside, once per source: rows map
// to their source's slot, so select() never copies them. A cache is used by one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <boost/config.hpp>

#include "masque/attention.hpp"
#include "masque/mask.hpp"
#include "masque/tensor.hpp"

namespace masque {

class BOOST_SYMBOL_VISIBLE KvCache {
 public:
  KvCache() = default;
  // `rows` rows with no columns yet. `dtype`: what the self-attention keys and values are held
  // in, f32 or bf16 (rounded to nearest even when written, widened to f32 for the kernel when
  // read: half the memory of long contexts and large batches). Cross-attention memory is f32.
  KvCache(std::int32_t layers, std::int32_t kv_heads, std::int32_t head_dim, std::int32_t rows,
          DType dtype = DType::f32);
  KvCache(KvCache&&) noexcept = default;
  KvCache& operator=(KvCache&&) noexcept = default;
  KvCache(const KvCache&) = delete;  // copies are explicit: fork()
  KvCache& operator=(const KvCache&) = delete;

  std::int32_t layers() const { return layers_; }
  std::int32_t rows() const { return rows_; }
  std::int32_t length() const { return length_; }    // kept columns
  std::int32_t pending() const { return pending_; }  // columns of the append in progress
  std::int64_t width() const { return width_; }      // kv_heads * head_dim
  DType dtype() const { return dtype_; }

  // ---- appending ----------------------------------------------------------------------------
  // A prefilled batch: layout.length columns per row (layout.batch == rows()); ranks and roles
  // from the layout, positions one per token (B*T). A dense layout cannot be cached
  // (RuntimeError): use the full forward instead.
  void begin(const AttentionLayout& layout, std::span<const std::int32_t> positions);
  // One token per row with `role` (content, or query for a token that is not kept). Empty
  // `ranks`: each row's highest rank + 1; empty `positions`: each row's next position (one past
  // its highest content position).
  void begin_step(TokenRole role, std::span<const std::int32_t> positions = {},
                  std::span<const std::int32_t> ranks = {});
  // Position ids of the pending tokens, row-major [rows][pending].
  std::span<const std::int32_t> pending_positions() const { return pending_positions_; }
  // K and V of the pending tokens of `layer`: pending() tokens per row, Hkv*d features each.
  void write(std::int32_t layer, SeqView k, SeqView v);
  // Queries = the pending tokens, keys = kept + pending columns.
  MaskView mask() const;
  SeqView keys(std::int32_t layer) const;
  SeqView values(std::int32_t layer) const;
  // keep: the pending columns join the cache; otherwise they are forgotten.
  void end(bool keep = true);

  // Rank a new token gets by default, and the next position of a row.
  std::int32_t next_rank(std::int32_t row) const;
  std::int32_t next_position(std::int32_t row) const;

  // ---- cross-attention memory ---------------------------------------------------------------
  // The source batch (rows() x S) whose pads cross-attention must mask. Call before set_cross.
  void set_source(const AttentionLayout& source);
  // K and V of the source for `layer` (S tokens per row).
  void set_cross(std::int32_t layer, SeqView k, SeqView v);
  std::int32_t source_length() const { return source_length_; }
  SeqView cross_keys(std::int32_t layer) const;
  SeqView cross_values(std::int32_t layer) const;
  MaskView cross_mask(std::int32_t q_len) const;

  // ---- rows ---------------------------------------------------------------------------------
  // New row i = old row rows[i] (beam reorder, replicate, drop). Not during an append. Only a
  // row picked a second time copies tokens (into a free slot).
  void select(std::span<const std::int32_t> rows);
  // An independent deep copy.
  KvCache fork() const;
  // `rows` leave for a new cache (its row i = old row rows[i], as fork() then select(rows) would
  // make it); this one keeps the others in their order, without copying them when they are its
  // first rows. Both read the same encoder memory, which neither writes.
  KvCache split(std::span<const std::int32_t> rows);
  // Continuous batching: the rows of `other` (a newly prefilled batch with the same layers and
  // width, or part of one: split()) join after this cache's rows. Both sides are right-aligned, so
  // every row's newest token sits in the last kept column and the distances between a row's columns
  // (what position biases see) are kept; leading columns that no row uses any more are dropped. The
  // source memories are joined too, padded to the longer source. Not during an append.
  void append_rows(KvCache&& other);

 private:
  void reserve(std::int32_t columns);
  void truncate(std::int32_t rows);              // rows past `rows` leave
  KvCache shaped_like(std::int32_t rows) const;  // this cache's dimensions, no buffers yet
  // select() of the tokens' K/V: each picked row keeps its slot, a row picked again gets a copy
  // in a free one.
  void assign_slots(std::span<const std::int32_t> rows);
  void grow_slots(std::int32_t slots);  // the token buffers hold at least `slots` slots
  // append_rows: the tokens' K/V (spares 0 .. 2L-1), then the encoder
  // memories (spares from 2L on).
  void join_tokens(const KvCache& other);
  void join_sources(const KvCache& other);
  Tensor& spare_buffer(std::size_t i, Shape shape, DType dtype = DType::f32);  // spare_[i]
  const float* widened(const Tensor& buffer, Tensor& out) const;  // bf16 -> f32 for the kernel
  void check_layer(std::int32_t layer, const char* what) const;
  void check_idle(const char* what) const;
  void note_kept(std::int32_t row, std::int32_t col);
  std::int32_t first_used_column() const;  // the leftmost column some row does not pad
  std::int32_t first_used_column(std::int32_t row) const;  // that row's (length_: none)
  std::int32_t used_source_length() const;  // past the last source column a row attends to

  std::int32_t layers_ = 0, rows_ = 0, length_ = 0, pending_ = 0, capacity_ = 0;
  std::int64_t width_ = 0;
  DType dtype_ = DType::f32;
  mutable Tensor widened_keys_, widened_values_;  // bf16 caches: what keys()/values() return
  std::int32_t window_ = 0;            // the prefill layout's sliding window, kept for the steps
  std::vector<Tensor> keys_, values_;  // per layer [token_slots_, capacity, width]
  std::vector<std::int32_t> slot_of_;  // per row: its slot in keys_/values_ (distinct)
  std::int32_t token_slots_ = 0;       // slots in keys_/values_ (0 before the first append)
  std::vector<std::int32_t> rank_;     // [rows, capacity]
  std::vector<TokenRole> role_;        // [rows, capacity]
  std::vector<std::int32_t> pending_positions_;          // [rows, pending]
  std::vector<std::int32_t> next_rank_, next_position_;  // per row, over the kept content

  std::int32_t source_length_ = 0;
  std::vector<TokenRole> source_role_;  // [rows, S]
  std::vector<std::int32_t> source_rank_;
  std::vector<Tensor> cross_keys_, cross_values_;  // per layer [slots, S, width]
  // The cross-memory slot each row reads (the cross views' row_of). Slots of finished records
  // linger until the next append_rows.
  std::vector<std::int32_t> source_of_;
  std::int32_t slots_ = 0;     // slots in cross_keys_/cross_values_
  std::vector<Tensor> spare_;  // buffers a join replaced, reused by the next join
};

}  // namespace masque

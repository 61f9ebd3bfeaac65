// What the decoder-only model plugins (gpt2, llama) share around their layers: checking and
// copying a batch's tokens into the workspace, gathering output rows, a reusable logits
// buffer, and ending a KV cache append on every path. Header-only, compiled into each plugin
// (plugins share no library).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "masque/error.hpp"
#include "masque/kv_cache.hpp"
#include "masque/model.hpp"
#include "masque/tensor.hpp"

namespace masque::decoder_only {

// What a model calls its context length in config.json, for messages.
struct ModelNames {
  const char* model;      // "gpt2"
  const char* positions;  // "n_positions"
};

// Where a token sits, for messages: "(row 1, column 3)" or "(step, row 1)".
inline std::string where(std::int64_t row, std::int64_t column) {
  return column < 0 ? "(step, row " + std::to_string(row) + ")"
                    : "(row " + std::to_string(row) + ", column " + std::to_string(column) + ")";
}

// RecordErrors for tokens the model cannot take; messages are only built on failure.
inline void check_token(TokenId id, const ModelInfo& info, std::int64_t row, std::int64_t column) {
  if (id < 0 || id >= info.vocab_size)
    throw RecordError("token id " + std::to_string(id) + " " + where(row, column) +
                      " is outside the model's vocabulary of " + std::to_string(info.vocab_size) +
                      " ids");
}

inline void check_position(std::int32_t position, const ModelInfo& info, const ModelNames& names,
                           std::int64_t row, std::int64_t column) {
  if (position < 0 || position >= info.max_positions)
    throw RecordError("position " + std::to_string(position) + " " + where(row, column) +
                      " is outside the model's " + std::to_string(info.max_positions) +
                      " positions (" + names.positions + ")");
}

// Copies the batch's ids and positions, checking every non-pad token; pads become 0 (their
// value is arbitrary, but must index the tables).
inline void prepare_tokens(const Batch& batch, const ModelInfo& info, const ModelNames& names,
                           std::vector<TokenId>& ids, std::vector<std::int32_t>& positions) {
  const std::int64_t n = std::int64_t{batch.batch} * batch.length;
  if (batch.batch < 0 || batch.length < 0 || batch.ids.size() != static_cast<std::size_t>(n) ||
      batch.positions.size() != static_cast<std::size_t>(n) ||
      batch.attention.batch != batch.batch || batch.attention.length != batch.length ||
      batch.attention.role.size() != static_cast<std::size_t>(n))
    throw RuntimeError(std::string(names.model) + ": a " + std::to_string(batch.batch) + " x " +
                       std::to_string(batch.length) + " batch needs that many ids (" +
                       std::to_string(batch.ids.size()) + "), positions (" +
                       std::to_string(batch.positions.size()) + ") and layout entries");
  ids.resize(n);
  positions.resize(n);
  for (std::int64_t i = 0; i < n; ++i) {
    if (batch.attention.role[i] == TokenRole::pad) {
      ids[i] = 0;
      positions[i] = 0;
      continue;
    }
    check_token(batch.ids[i], info, i / batch.length, i % batch.length);
    check_position(batch.positions[i], info, names, i / batch.length, i % batch.length);
    ids[i] = batch.ids[i];
    positions[i] = batch.positions[i];
  }
}

// One token per row for a step: ids as given, positions as given or each row's next one.
inline void prepare_step(const StepInput& input, const KvCache& cache, const ModelInfo& info,
                         const ModelNames& names, std::vector<TokenId>& ids,
                         std::vector<std::int32_t>& positions) {
  const auto rows = static_cast<std::size_t>(cache.rows());
  if (input.tokens.size() != rows || (!input.positions.empty() && input.positions.size() != rows))
    throw RuntimeError(
        std::string(names.model) + ": a step takes one token (and position) per row: " +
        std::to_string(input.tokens.size()) + " tokens, " + std::to_string(input.positions.size()) +
        " positions for " + std::to_string(rows) + " rows");
  ids.resize(rows);
  positions.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const auto row = static_cast<std::int32_t>(r);
    ids[r] = input.tokens[r];
    positions[r] = input.positions.empty() ? cache.next_position(row) : input.positions[r];
    check_token(ids[r], info, row, -1);
    check_position(positions[r], info, names, row, -1);
  }
}

// `rows` of x (all of x when empty), gathered into `out` if needed.
inline const Tensor& select_rows(const Tensor& x, std::span<const std::int32_t> rows, Tensor& out,
                                 const ModelNames& names) {
  if (rows.empty()) return x;
  const std::int64_t width = x.dim(-1), total = x.numel() / width;
  out.resize({static_cast<std::int64_t>(rows.size()), width});
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= total)
      throw RuntimeError(std::string(names.model) + ": output row " + std::to_string(rows[i]) +
                         " of a batch of " + std::to_string(total) + " tokens");
    std::memcpy(out.f32() + i * width, x.f32() + rows[i] * width, sizeof(float) * width);
  }
  return out;
}

// A [rows, width] tensor for forward()'s logits in memory this thread reuses from call to call,
// unless a caller still holds the previous logits. Scoring batches have hundreds of MB of
// logits: a fresh buffer each time costs a page fault per 4 KiB (a tenth of a bf16 batch).
inline Tensor reusable_output(std::int64_t rows, std::int64_t width) {
  thread_local std::shared_ptr<void> buffer;
  thread_local std::size_t capacity = 0;
  const std::size_t bytes = static_cast<std::size_t>(rows * width) * sizeof(float);
  if (!buffer || buffer.use_count() > 1 || capacity < bytes) {
    buffer.reset();  // the old buffer goes first: peak memory stays one buffer
    const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, rounded);
    if (!data) throw std::bad_alloc();
    buffer.reset(data, std::free);
    capacity = rounded;
  }
  return Tensor::view(buffer.get(), {rows, width}, DType::f32, buffer);
}

// Ends the append in progress unless it completed (an exception leaves the cache usable).
class AppendGuard {
 public:
  explicit AppendGuard(KvCache& cache) : cache_(cache) {}
  ~AppendGuard() {
    if (!done_) cache_.end(false);
  }
  AppendGuard(const AppendGuard&) = delete;
  AppendGuard& operator=(const AppendGuard&) = delete;
  void end(bool keep) {
    cache_.end(keep);
    done_ = true;
  }

 private:
  KvCache& cache_;
  bool done_ = false;
};

}  // namespace masque::decoder_only

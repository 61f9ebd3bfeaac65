#include "rnn_encoder.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "masque/threading.hpp"

namespace masque::rnn {

Encoder::Encoder(Tensor embeddings, std::vector<EncoderLayer> layers, std::int64_t gate_table_bytes)
    : embeddings_(std::move(embeddings)), layers_(std::move(layers)) {
  const EncoderLayer& first = layers_.front();
  const std::int64_t vocab = embeddings_.dim(0), width = first.forward.gate_width();
  if (2 * vocab * width * static_cast<std::int64_t>(sizeof(float)) > gate_table_bytes) return;
  gate_table_forward_ = Tensor({vocab, width});
  gate_table_backward_ = Tensor({vocab, width});
  first.forward.input_gates(embeddings_.f32(), vocab, gate_table_forward_.f32());
  first.backward.input_gates(embeddings_.f32(), vocab, gate_table_backward_.f32());
}

void Encoder::list_linears(LinearList& out) const {
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const std::string name = "encoder.rnn.l" + std::to_string(l);
    layers_[l].forward.list_linears(name, out);
    layers_[l].backward.list_linears(name + "_reverse", out);
  }
}

// The batch's rows in torch's packed-sequence layout (RnnLayer::recur): slot s holds row row_of[s]
// (slots sorted longest first), of length len[s]; its step t is packed row at(t, s). Both
// directions have the same lengths, the backward one reading each row's tokens reversed: its
// packed row p holds the token of forward packed row reversed[p].
struct Encoder::Packing {
  std::vector<std::int32_t> row_of, len;
  std::vector<std::int64_t> offsets, reversed;
  std::vector<TokenId> ids;  // the token of each forward packed row
  std::int64_t total = 0;

  explicit Packing(const std::vector<std::vector<TokenId>>& rows) {
    const auto B = static_cast<std::int32_t>(rows.size());
    row_of.resize(rows.size());
    std::iota(row_of.begin(), row_of.end(), 0);
    std::stable_sort(row_of.begin(), row_of.end(), [&](std::int32_t a, std::int32_t b) {
      return rows[a].size() > rows[b].size();
    });
    for (std::int32_t s = 0; s < B; ++s)
      len.push_back(static_cast<std::int32_t>(rows[row_of[s]].size()));
    offsets = packed_offsets(len);
    total = offsets.back();
    reversed.resize(static_cast<std::size_t>(total));
    ids.resize(reversed.size());
    each_step([&](std::int32_t t, std::int32_t s, std::int64_t p, std::int64_t r) {
      reversed[p] = r;
      ids[p] = rows[row_of[s]][t];
    });
  }
  std::int64_t at(std::int32_t t, std::int32_t s) const { return offsets[t] + s; }
  // Visits every slot's real steps: f(t, s, position of step t, of step len - 1 - t).
  template <typename F>
  void each_step(F&& f) const {
    for (std::size_t s = 0; s < len.size(); ++s)
      for (std::int32_t t = 0; t < len[s]; ++t)
        f(t, static_cast<std::int32_t>(s), at(t, static_cast<std::int32_t>(s)),
          at(len[s] - 1 - t, static_cast<std::int32_t>(s)));
  }
};

EncoderOutput Encoder::encode(const std::vector<std::vector<TokenId>>& rows) const {
  EncoderOutput out;
  const auto B = static_cast<std::int32_t>(rows.size());
  out.batch = B;
  for (const auto& row : rows) {
    out.lengths.push_back(static_cast<std::int32_t>(row.size()));
    out.length = std::max(out.length, out.lengths.back());
  }
  const std::int32_t T = out.length;
  const std::int64_t W = 2 * hidden_size(), vocab = embeddings_.dim(0);
  for (const auto& row : rows)
    for (const TokenId id : row)
      if (id < 0 || id >= vocab)
        throw RecordError("id " + std::to_string(id) + " is outside the source vocabulary of " +
                          std::to_string(vocab) + " tokens");
  out.memory = Tensor({B, T, W});
  out.final_state = Tensor::zeros({B, W});
  // Only the pads are not written below.
  for (std::int32_t b = 0; b < B; ++b)
    std::fill(out.memory.f32() + (std::int64_t{b} * T + out.lengths[b]) * W,
              out.memory.f32() + std::int64_t{b + 1} * T * W, 0.0f);
  if (B == 0 || T == 0) return out;
  const Packing packing(rows);
  run_layers(packing, out);
  // The top layer's final states: forward after the last token, backward after the first.
  const std::int64_t H = hidden_size();
  for (std::int32_t b = 0; b < B; ++b) {
    if (out.lengths[b] == 0) continue;
    const float* last = out.memory.f32() + (std::int64_t{b} * T + out.lengths[b] - 1) * W;
    const float* first = out.memory.f32() + std::int64_t{b} * T * W;
    std::copy_n(last, H, out.final_state.f32() + b * W);
    std::copy_n(first + H, H, out.final_state.f32() + b * W + H);
  }
  return out;
}

namespace {

// One direction of a layer in a batch: where each packed row's input gates are read and its
// state written.
struct Direction {
  Tensor gates;                    // the product's input gates, in source order
  std::vector<const float*> rows;  // packed row p's input gates
  std::vector<float*> out;         // packed row p's state

  // Rows of the first layer's gate `table` (row = token id), or of one product over the layer's
  // `input` in source order (table null). Packed row p reads source row at[p]: p itself forward,
  // Packing::reversed[p] backward.
  void input_gates(const RnnLayer& rnn, const float* table, std::span<const TokenId> ids,
                   const Tensor& input, std::span<const std::int64_t> at) {
    const auto total = static_cast<std::int64_t>(at.size());
    const std::int64_t G = rnn.gate_width();
    rows.resize(at.size());
    if (table) {
      for (std::int64_t p = 0; p < total; ++p) rows[p] = table + std::int64_t{ids[at[p]]} * G;
      return;
    }
    gates.resize({total, G});
    rnn.input_gates(input.f32(), total, gates.f32());
    for (std::int64_t p = 0; p < total; ++p) rows[p] = gates.f32() + at[p] * G;
  }
};

}  // namespace

// Each layer's input gates for both directions come from one product each over the layer's
// input in source order (or from the first layer's tables), the backward direction reading its
// rows reversed; the recurrences write their states straight into the next layer's input, and
// the top layer's into the memory. No row is copied between layers. The two directions share
// only the layer's input, so with two or more intra-op threads they run at the same time (the
// gates of both are taken before either recurrence overwrites the input).
void Encoder::run_layers(const Packing& packing, EncoderOutput& out) const {
  const std::int64_t total = packing.total, H = hidden_size(), W = 2 * H;
  const std::int32_t T = out.length;
  // Scratch kept per thread (fresh buffers of a batch's size cost page faults on every call),
  // named by reference: the directions may run on other threads.
  thread_local Tensor layer_input_scratch;
  thread_local Direction forward_scratch, backward_scratch;
  thread_local std::vector<std::int64_t> in_order_scratch;
  thread_local std::vector<float*> memory_rows_scratch;
  Tensor& layer_input = layer_input_scratch;
  Direction& forward = forward_scratch;
  Direction& backward = backward_scratch;
  std::vector<std::int64_t>& in_order = in_order_scratch;
  std::vector<float*>& memory_rows = memory_rows_scratch;  // of each forward packed row
  in_order.resize(static_cast<std::size_t>(total));
  std::iota(in_order.begin(), in_order.end(), std::int64_t{0});
  memory_rows.resize(static_cast<std::size_t>(total));
  packing.each_step([&](std::int32_t t, std::int32_t s, std::int64_t p, std::int64_t) {
    memory_rows[p] = out.memory.f32() + (std::int64_t{packing.row_of[s]} * T + t) * W;
  });
  const bool tables = has_gate_tables();
  if (!tables) embedding(embeddings_, packing.ids, layer_input);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const EncoderLayer& layer = layers_[l];
    const bool first_table = tables && l == 0;
    run_pair(
        [&] {
          forward.input_gates(layer.forward, first_table ? gate_table_forward_.f32() : nullptr,
                              packing.ids, layer_input, in_order);
        },
        [&] {
          backward.input_gates(layer.backward, first_table ? gate_table_backward_.f32() : nullptr,
                               packing.ids, layer_input, packing.reversed);
        });
    // The input has been read: the states overwrite it, or go to the memory at the top.
    const bool top = l + 1 == layers_.size();
    if (!top) layer_input.resize({total, W});
    const auto destination = [&](std::int64_t p) {
      return top ? memory_rows[p] : layer_input.f32() + p * W;
    };
    forward.out.resize(static_cast<std::size_t>(total));
    backward.out.resize(forward.out.size());
    for (std::int64_t p = 0; p < total; ++p) {
      forward.out[p] = destination(p);
      backward.out[p] = destination(packing.reversed[p]) + H;
    }
    run_pair([&] { layer.forward.recur(packing.len, forward.rows, forward.out); },
             [&] { layer.backward.recur(packing.len, backward.rows, backward.out); });
  }
}

}  // namespace masque::rnn

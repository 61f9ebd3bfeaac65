#include "rnn_encoder.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "masque/error.hpp"
#include "masque/ops.hpp"

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

// Each layer's input gates for both directions come from one product each over the layer's
// input in source order (or from the first layer's tables), the backward direction reading its
// rows reversed; the recurrences write their states straight into the next layer's input, and
// the top layer's into the memory. No row is copied between layers.
void Encoder::run_layers(const Packing& packing, EncoderOutput& out) const {
  const std::int64_t total = packing.total, H = hidden_size(), W = 2 * H;
  const std::int32_t T = out.length;
  // Scratch kept per thread: fresh buffers of a batch's size cost page faults on every call.
  thread_local Tensor layer_input, gates_forward, gates_backward;
  thread_local std::vector<const float*> forward_gates, backward_gates;
  thread_local std::vector<float*> forward_out, backward_out;
  forward_gates.resize(static_cast<std::size_t>(total));
  backward_gates.resize(forward_gates.size());
  forward_out.resize(forward_gates.size());
  backward_out.resize(forward_gates.size());
  // The memory row of each forward packed row.
  thread_local std::vector<float*> memory_rows;
  memory_rows.resize(forward_gates.size());
  packing.each_step([&](std::int32_t t, std::int32_t s, std::int64_t p, std::int64_t) {
    memory_rows[p] = out.memory.f32() + (std::int64_t{packing.row_of[s]} * T + t) * W;
  });
  const bool tables = has_gate_tables();
  if (!tables) embedding(embeddings_, packing.ids, layer_input);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const EncoderLayer& layer = layers_[l];
    const std::int64_t G = layer.forward.gate_width();
    const TokenId* ids = packing.ids.data();
    if (tables && l == 0) {
      const float* forward_base = gate_table_forward_.f32();
      const float* backward_base = gate_table_backward_.f32();
      for (std::int64_t p = 0; p < total; ++p) {
        forward_gates[p] = forward_base + std::int64_t{ids[p]} * G;
        backward_gates[p] = backward_base + std::int64_t{ids[packing.reversed[p]]} * G;
      }
    } else {
      gates_forward.resize({total, G});
      gates_backward.resize({total, G});
      layer.forward.input_gates(layer_input.f32(), total, gates_forward.f32());
      layer.backward.input_gates(layer_input.f32(), total, gates_backward.f32());
      for (std::int64_t p = 0; p < total; ++p) {
        forward_gates[p] = gates_forward.f32() + p * G;
        backward_gates[p] = gates_backward.f32() + packing.reversed[p] * G;
      }
    }
    // The input has been read: the states overwrite it, or go to the memory at the top.
    const bool top = l + 1 == layers_.size();
    if (!top) layer_input.resize({total, W});
    const auto destination = [&](std::int64_t p) {
      return top ? memory_rows[p] : layer_input.f32() + p * W;
    };
    for (std::int64_t p = 0; p < total; ++p) {
      forward_out[p] = destination(p);
      backward_out[p] = destination(packing.reversed[p]) + H;
    }
    layer.forward.recur(packing.len, forward_gates, forward_out);
    layer.backward.recur(packing.len, backward_gates, backward_out);
  }
}

}  // namespace masque::rnn

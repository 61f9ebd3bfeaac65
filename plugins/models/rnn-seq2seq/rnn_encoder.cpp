#include "rnn_encoder.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "masque/ops.hpp"

namespace masque::rnn {

Encoder::Encoder(Tensor embeddings, std::vector<EncoderLayer> layers, std::int64_t gate_table_bytes)
    : embeddings_(std::move(embeddings)), layers_(std::move(layers)) {
  const EncoderLayer& first = layers_.front();
  const std::int64_t vocab = embeddings_.dim(0), width = first.forward.gate_width();
  if (!first.forward.has_input_gates() ||
      2 * vocab * width * static_cast<std::int64_t>(sizeof(float)) > gate_table_bytes)
    return;
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

EncoderOutput Encoder::encode(const std::vector<std::vector<TokenId>>& rows) const {
  EncoderOutput out;
  const auto B = static_cast<std::int32_t>(rows.size());
  out.batch = B;
  for (const auto& row : rows) {
    out.lengths.push_back(static_cast<std::int32_t>(row.size()));
    out.length = std::max(out.length, out.lengths.back());
  }
  const std::int32_t T = out.length;
  const std::int64_t H = hidden_size(), W = 2 * H;
  out.memory = Tensor::zeros({B, T, W});
  out.final_state = Tensor::zeros({B, W});
  if (B == 0 || T == 0) return out;

  // The layers run on slots sorted longest first, as a packed sequence (RnnLayer::run): slot s
  // holds row row_of[s], of length len[s]; its step t is packed row at(t, s). Both directions
  // have the same lengths, the backward one reading each row's tokens reversed.
  std::vector<std::int32_t> row_of(static_cast<std::size_t>(B)), len(row_of.size());
  std::iota(row_of.begin(), row_of.end(), 0);
  std::stable_sort(row_of.begin(), row_of.end(),
                   [&](std::int32_t a, std::int32_t b) { return out.lengths[a] > out.lengths[b]; });
  for (std::int32_t s = 0; s < B; ++s) len[s] = out.lengths[row_of[s]];
  const std::vector<std::int64_t> offsets = packed_offsets(len);
  const std::int64_t total = offsets[T];
  const auto at = [&](std::int32_t t, std::int32_t s) { return offsets[t] + s; };
  // Visits every slot's real steps: f(t, s, position of step t, of step len - 1 - t).
  const auto each_step = [&](auto&& f) {
    for (std::int32_t s = 0; s < B; ++s)
      for (std::int32_t t = 0; t < len[s]; ++t) f(t, s, at(t, s), at(len[s] - 1 - t, s));
  };
  // Scratch kept per thread: fresh buffers of a batch's size cost page faults on every call.
  thread_local std::vector<TokenId> forward_ids, backward_ids;
  forward_ids.resize(static_cast<std::size_t>(total));
  backward_ids.resize(forward_ids.size());
  each_step([&](std::int32_t t, std::int32_t s, std::int64_t p, std::int64_t) {
    forward_ids[p] = rows[row_of[s]][t];
    backward_ids[p] = rows[row_of[s]][len[s] - 1 - t];
  });
  thread_local Tensor x_forward, x_backward, y_forward, y_backward, next;
  // The first layer's input: its gates gathered from the tables, or the embeddings.
  const bool gates = has_gate_tables();
  embedding(gates ? gate_table_forward_ : embeddings_, forward_ids, x_forward);
  embedding(gates ? gate_table_backward_ : embeddings_, backward_ids, x_backward);
  y_forward.resize({total, H});
  y_backward.resize({total, H});
  // Row p of `from` into row q of `to` (rows: the last dimension), from `column` on.
  const auto copy_row = [](const Tensor& from, std::int64_t p, Tensor& to, std::int64_t q,
                           std::int64_t column = 0) {
    const std::int64_t width = from.dim(-1);
    std::memcpy(to.f32() + q * to.dim(-1) + column, from.f32() + p * width, width * sizeof(float));
  };
  for (const EncoderLayer& layer : layers_) {
    if (gates && &layer == &layers_.front()) {
      layer.forward.run_from_gates(len, x_forward.f32(), y_forward.f32());
      layer.backward.run_from_gates(len, x_backward.f32(), y_backward.f32());
    } else {
      layer.forward.run(len, x_forward.f32(), y_forward.f32());
      layer.backward.run(len, x_backward.f32(), y_backward.f32());
    }
    // The next input at step t: [forward(t) | backward(t)], the backward state of token t being
    // step len - 1 - t of the reversed run; and the same reversed for the backward direction.
    next.resize({total, W});
    each_step([&](std::int32_t, std::int32_t, std::int64_t p, std::int64_t reversed) {
      copy_row(y_forward, p, next, p);
      copy_row(y_backward, reversed, next, p, H);
    });
    std::swap(x_forward, next);
    x_backward.resize({total, W});
    each_step([&](std::int32_t, std::int32_t, std::int64_t p, std::int64_t reversed) {
      copy_row(x_forward, reversed, x_backward, p);
    });
  }

  // Batch-major memory for the attention, in the rows' own order; the top layer's final states.
  each_step([&](std::int32_t t, std::int32_t s, std::int64_t p, std::int64_t) {
    copy_row(x_forward, p, out.memory, static_cast<std::int64_t>(row_of[s]) * T + t);
  });
  for (std::int32_t s = 0; s < B; ++s) {
    if (len[s] == 0) continue;
    const std::int64_t last = at(len[s] - 1, s);
    copy_row(y_forward, last, out.final_state, row_of[s]);
    copy_row(y_backward, last, out.final_state, row_of[s], H);
  }
  return out;
}

}  // namespace masque::rnn

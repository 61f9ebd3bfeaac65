#include "rnn_encoder.hpp"

#include <algorithm>
#include <cstring>

#include "masque/ops.hpp"

namespace masque::rnn {

namespace {

// Copies row b's real steps of `in` ([T][B][W], time-major) into `out` in reverse order:
// out[t][b] = in[len_b - 1 - t][b] for t < len_b, zeros after.
void reverse_rows(const float* in, std::int32_t T, std::int32_t B, std::int64_t W,
                  const std::vector<std::int32_t>& lengths, float* out) {
  for (std::int32_t t = 0; t < T; ++t)
    for (std::int32_t b = 0; b < B; ++b) {
      float* dst = out + (static_cast<std::int64_t>(t) * B + b) * W;
      const std::int32_t len = lengths[b];
      if (t < len)
        std::memcpy(dst, in + (static_cast<std::int64_t>(len - 1 - t) * B + b) * W,
                    W * sizeof(float));
      else
        std::fill(dst, dst + W, 0.0f);
    }
}

}  // namespace

Encoder::Encoder(Tensor embeddings, std::vector<EncoderLayer> layers)
    : embeddings_(std::move(embeddings)), layers_(std::move(layers)) {}

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

  // Time-major ids of both directions; pad slots read row 0 of the table (their outputs are
  // never used).
  std::vector<TokenId> forward_ids(static_cast<std::size_t>(T) * B, 0), backward_ids(forward_ids);
  for (std::int32_t b = 0; b < B; ++b)
    for (std::int32_t t = 0; t < out.lengths[b]; ++t) {
      forward_ids[static_cast<std::size_t>(t) * B + b] = rows[b][t];
      backward_ids[static_cast<std::size_t>(t) * B + b] = rows[b][out.lengths[b] - 1 - t];
    }
  Tensor x_forward, x_backward;
  embedding(embeddings_, forward_ids, x_forward);
  embedding(embeddings_, backward_ids, x_backward);

  Tensor y_forward({T, B, H}), y_backward({T, B, H});
  Tensor next({T, B, W});
  for (const EncoderLayer& layer : layers_) {
    layer.forward.run(T, B, x_forward.f32(), y_forward.f32());
    layer.backward.run(T, B, x_backward.f32(), y_backward.f32());
    // next[t][b] = [forward(t) | backward(t)], the backward state of token t being step
    // len_b - 1 - t of the reversed run.
    float* n = next.f32();
    for (std::int32_t t = 0; t < T; ++t)
      for (std::int32_t b = 0; b < B; ++b) {
        float* dst = n + (static_cast<std::int64_t>(t) * B + b) * W;
        const std::int32_t len = out.lengths[b];
        if (t >= len) {
          std::fill(dst, dst + W, 0.0f);
          continue;
        }
        const auto at = [&](std::int32_t step) {
          return (static_cast<std::int64_t>(step) * B + b) * H;
        };
        std::memcpy(dst, y_forward.f32() + at(t), H * sizeof(float));
        std::memcpy(dst + H, y_backward.f32() + at(len - 1 - t), H * sizeof(float));
      }
    x_forward.resize({T, B, W});
    std::memcpy(x_forward.f32(), n, next.bytes());
    x_backward.resize({T, B, W});
    reverse_rows(x_forward.f32(), T, B, W, out.lengths, x_backward.f32());
  }

  // Batch-major memory for the attention; the final states of the top layer.
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int32_t len = out.lengths[b];
    for (std::int32_t t = 0; t < len; ++t)
      std::memcpy(out.memory.f32() + (static_cast<std::int64_t>(b) * T + t) * W,
                  x_forward.f32() + (static_cast<std::int64_t>(t) * B + b) * W, W * sizeof(float));
    if (len == 0) continue;
    float* final_row = out.final_state.f32() + b * W;
    const std::int64_t last = (static_cast<std::int64_t>(len - 1) * B + b) * H;
    std::memcpy(final_row, y_forward.f32() + last, H * sizeof(float));
    std::memcpy(final_row + H, y_backward.f32() + last, H * sizeof(float));
  }
  return out;
}

}  // namespace masque::rnn

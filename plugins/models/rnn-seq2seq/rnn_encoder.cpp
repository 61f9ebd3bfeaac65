#include "rnn_encoder.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

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

  // The layers run on slots sorted longest first (a packed sequence, RnnLayer::run): slot s
  // holds row row_of[s], of length len[s]. Time-major ids of both directions; pad slots read
  // row 0 of the table (never run).
  std::vector<std::int32_t> row_of(static_cast<std::size_t>(B)), len(row_of.size());
  std::iota(row_of.begin(), row_of.end(), 0);
  std::stable_sort(row_of.begin(), row_of.end(),
                   [&](std::int32_t a, std::int32_t b) { return out.lengths[a] > out.lengths[b]; });
  for (std::int32_t s = 0; s < B; ++s) len[s] = out.lengths[row_of[s]];
  std::vector<TokenId> forward_ids(static_cast<std::size_t>(T) * B, 0), backward_ids(forward_ids);
  for (std::int32_t s = 0; s < B; ++s)
    for (std::int32_t t = 0; t < len[s]; ++t) {
      forward_ids[static_cast<std::size_t>(t) * B + s] = rows[row_of[s]][t];
      backward_ids[static_cast<std::size_t>(t) * B + s] = rows[row_of[s]][len[s] - 1 - t];
    }
  Tensor x_forward, x_backward;
  embedding(embeddings_, forward_ids, x_forward);
  embedding(embeddings_, backward_ids, x_backward);

  Tensor y_forward({T, B, H}), y_backward({T, B, H});
  Tensor next({T, B, W});
  for (const EncoderLayer& layer : layers_) {
    layer.forward.run(len, x_forward.f32(), y_forward.f32());
    layer.backward.run(len, x_backward.f32(), y_backward.f32());
    // next[t][s] = [forward(t) | backward(t)], the backward state of token t being step
    // len - 1 - t of the reversed run.
    float* n = next.f32();
    for (std::int32_t t = 0; t < T; ++t)
      for (std::int32_t s = 0; s < B; ++s) {
        float* dst = n + (static_cast<std::int64_t>(t) * B + s) * W;
        if (t >= len[s]) {
          std::fill(dst, dst + W, 0.0f);
          continue;
        }
        const auto at = [&](std::int32_t step) {
          return (static_cast<std::int64_t>(step) * B + s) * H;
        };
        std::memcpy(dst, y_forward.f32() + at(t), H * sizeof(float));
        std::memcpy(dst + H, y_backward.f32() + at(len[s] - 1 - t), H * sizeof(float));
      }
    x_forward.resize({T, B, W});
    std::memcpy(x_forward.f32(), n, next.bytes());
    x_backward.resize({T, B, W});
    reverse_rows(x_forward.f32(), T, B, W, len, x_backward.f32());
  }

  // Batch-major memory for the attention, in the rows' own order; the top layer's final states.
  for (std::int32_t s = 0; s < B; ++s) {
    const std::int32_t b = row_of[s];
    for (std::int32_t t = 0; t < len[s]; ++t)
      std::memcpy(out.memory.f32() + (static_cast<std::int64_t>(b) * T + t) * W,
                  x_forward.f32() + (static_cast<std::int64_t>(t) * B + s) * W, W * sizeof(float));
    if (len[s] == 0) continue;
    float* final_row = out.final_state.f32() + b * W;
    const std::int64_t last = (static_cast<std::int64_t>(len[s] - 1) * B + s) * H;
    std::memcpy(final_row, y_forward.f32() + last, H * sizeof(float));
    std::memcpy(final_row + H, y_backward.f32() + last, H * sizeof(float));
  }
  return out;
}

}  // namespace masque::rnn

#include "rnn_attention.hpp"

#include "fast_tanh.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace masque::rnn {

Tensor Attention::keys(const Tensor& memory) const {
  Tensor k;
  const std::int64_t rows = memory.dim(0) * memory.dim(1);
  if (rows == 0) return Tensor::zeros({0, w_.key.out_features()});
  w_.key.forward(memory.reshaped({rows, memory.dim(2)}), k);
  return k;
}

void Attention::weigh(const SourceMemory& source, std::int32_t src, const float* s,
                      const float* query, std::vector<float>& scores) const {
  const std::int32_t len = source.lengths[src];
  const std::int64_t A = w_.key.out_features();
  const float* keys = source.keys.f32() + static_cast<std::int64_t>(src) * source.length * A;
  scores.resize(len);
  for (std::int32_t j = 0; j < len; ++j) {
    const float* k = keys + j * A;
    float score = 0.0f;
    if (w_.kind == AttentionKind::luong) {
      for (std::int64_t i = 0; i < A; ++i) score += s[i] * k[i];
    } else {
      const float* v = w_.v.f32();
      for (std::int64_t i = 0; i < A; ++i) score += v[i] * fast_tanh(query[i] + k[i]);
    }
    scores[j] = score;
  }
  if (len == 0) return;
  const float top = *std::max_element(scores.begin(), scores.end());
  float sum = 0.0f;
  for (float& x : scores) sum += (x = std::exp(x - top));
  for (float& x : scores) x /= sum;
}

void Attention::attend(const SourceMemory& source, std::span<const std::int32_t> source_of,
                       const Tensor& s, AttentionScratch& scratch, Tensor& a) const {
  const std::int64_t rows = s.dim(0), Hd = s.dim(1);
  const std::int64_t M = source.memory.dim(2);
  if (w_.kind == AttentionKind::bahdanau) w_.query.forward(s, scratch.query);
  scratch.joined.resize({rows, M + Hd});
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int32_t src = source_of[r];
    const float* s_row = s.f32() + r * Hd;
    const float* q_row = w_.kind == AttentionKind::bahdanau
                             ? scratch.query.f32() + r * w_.query.out_features()
                             : nullptr;
    weigh(source, src, s_row, q_row, scratch.scores);
    // joined = [context | s]
    float* context = scratch.joined.f32() + r * (M + Hd);
    std::fill(context, context + M, 0.0f);
    const float* memory = source.memory.f32() + static_cast<std::int64_t>(src) * source.length * M;
    for (std::size_t j = 0; j < scratch.scores.size(); ++j) {
      const float alpha = scratch.scores[j];
      const float* h = memory + j * M;
      for (std::int64_t i = 0; i < M; ++i) context[i] += alpha * h[i];
    }
    std::memcpy(context + M, s_row, Hd * sizeof(float));
  }
  w_.output.forward(scratch.joined, a);
  float* out = a.f32();
  for (std::int64_t i = 0; i < a.numel(); ++i) out[i] = std::tanh(out[i]);
}

}  // namespace masque::rnn

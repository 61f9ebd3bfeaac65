#include "rnn_attention.hpp"

#include "fast_tanh.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

namespace masque::rnn {

void Attention::list_linears(LinearList& out) const {
  // Built with append: GCC 12 warns falsely (-Warray-bounds) on `string + literal` here.
  const auto name = [](const char* leaf) { return std::string("decoder.attention.").append(leaf); };
  out.emplace_back(name("key_proj"), &w_.key);
  if (w_.kind == AttentionKind::bahdanau) out.emplace_back(name("query_proj"), &w_.query);
  out.emplace_back(name("out_proj"), &w_.output);
}

Tensor Attention::keys(const Tensor& memory, std::span<const std::int32_t> lengths) const {
  const std::int64_t B = memory.dim(0), T = memory.dim(1), M = memory.dim(2);
  const std::int64_t A = w_.key.out_features();
  Tensor keys({B * T, A});
  const std::int64_t real = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
  if (real == B * T) {
    w_.key.forward(memory.f32(), real, keys.f32());
    return keys;
  }
  // A pad's key is never read; zeroed all the same, so that no garbage is ever in a tensor.
  for (std::int64_t b = 0; b < B; ++b)
    std::fill(keys.f32() + (b * T + lengths[b]) * A, keys.f32() + (b + 1) * T * A, 0.0f);
  if (real == 0) return keys;
  // Only the real positions: the products of the pads would be thrown away. (Scratch kept per
  // thread: fresh buffers of a batch's size cost page faults on every call.)
  thread_local Tensor packed, packed_keys;
  packed.resize({real, M});
  packed_keys.resize({real, A});
  for (std::int64_t b = 0, r = 0; b < B; r += lengths[b], ++b)
    std::memcpy(packed.f32() + r * M, memory.f32() + b * T * M, lengths[b] * M * sizeof(float));
  w_.key.forward(packed.f32(), real, packed_keys.f32());
  for (std::int64_t b = 0, r = 0; b < B; r += lengths[b], ++b)
    std::memcpy(keys.f32() + b * T * A, packed_keys.f32() + r * A, lengths[b] * A * sizeof(float));
  return keys;
}

namespace {

// Partial sums per reduction: the compiler keeps them in one vector register, so the loops
// below vectorize without reassociating floats (the order is fixed by this source).
constexpr int kLanes = 16;

float lane_sum(float* acc) {
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  return acc[0];
}

// Bahdanau: scores[j] = v . tanh(query + k_j) over `len` keys (rows of A floats).
MASQUE_VECTORIZE void additive_scores(const float* keys, std::int32_t len, std::int64_t A,
                                      const float* query, const float* v, float* scores) {
  for (std::int32_t j = 0; j < len; ++j) {
    const float* k = keys + j * A;
    float acc[kLanes] = {};
    std::int64_t i = 0;
    for (; i + kLanes <= A; i += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += v[i + l] * fast_tanh(query[i + l] + k[i + l]);
    for (; i < A; ++i) acc[i % kLanes] += v[i] * fast_tanh(query[i] + k[i]);
    scores[j] = lane_sum(acc);
  }
}

// Luong (general): scores[j] = s . k_j.
MASQUE_VECTORIZE void dot_scores(const float* keys, std::int32_t len, std::int64_t A,
                                 const float* s, float* scores) {
  for (std::int32_t j = 0; j < len; ++j) {
    const float* k = keys + j * A;
    float acc[kLanes] = {};
    std::int64_t i = 0;
    for (; i + kLanes <= A; i += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += s[i + l] * k[i + l];
    for (; i < A; ++i) acc[i % kLanes] += s[i] * k[i];
    scores[j] = lane_sum(acc);
  }
}

// context = sum_j alpha[j] h_j over `len` memory vectors (rows of M floats).
MASQUE_VECTORIZE void weighted_sum(const float* memory, const float* alpha, std::size_t len,
                                   std::int64_t M, float* context) {
  std::fill(context, context + M, 0.0f);
  for (std::size_t j = 0; j < len; ++j) {
    const float* h = memory + j * M;
    for (std::int64_t i = 0; i < M; ++i) context[i] += alpha[j] * h[i];
  }
}

}  // namespace

void Attention::weigh(const SourceMemory& source, std::int32_t src, const float* s,
                      const float* query, std::vector<float>& scores) const {
  const std::int32_t len = source.lengths[src];
  const std::int64_t A = w_.key.out_features();
  const float* keys = source.keys.f32() + static_cast<std::int64_t>(src) * source.length * A;
  scores.resize(len);
  if (len == 0) return;
  if (w_.kind == AttentionKind::luong)
    dot_scores(keys, len, A, s, scores.data());
  else
    additive_scores(keys, len, A, query, w_.v.f32(), scores.data());
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
    const float* memory = source.memory.f32() + static_cast<std::int64_t>(src) * source.length * M;
    weighted_sum(memory, scratch.scores.data(), scratch.scores.size(), M, context);
    std::memcpy(context + M, s_row, Hd * sizeof(float));
  }
  w_.output.forward(scratch.joined, a);
  activate(Activation::tanh, a);
}

}  // namespace masque::rnn

// Sliding windows and additive position biases (T5 relative buckets, ALiBi) evaluated inside
// the attention kernel, against a reference loop in double that builds its own rule and bias,
// for a full forward and for KV-cached steps.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "masque/attention.hpp"
#include "masque/kv_cache.hpp"
#include "masque/threading.hpp"
#include "reference.hpp"

using namespace masque;
using namespace masque::test;

namespace {

constexpr double kTol = 2e-5;

using Rule = std::function<bool(int b, int i, int j)>;
using Bias = std::function<double(int h, int i, int j)>;

// softmax(scale q.k + bias) v over the keys `rule` allows; q [B*T, H*d], k/v [B*T, Hkv*d].
std::vector<double> reference(const AttentionDims& dims, int B, int T, const Tensor& q,
                              const Tensor& k, const Tensor& v, const Rule& rule,
                              const Bias& bias) {
  const int H = dims.heads, G = dims.heads / dims.kv_heads, d = dims.head_dim;
  const std::int64_t qw = std::int64_t{H} * d, kw = std::int64_t{dims.kv_heads} * d;
  std::vector<double> out(static_cast<std::size_t>(B) * T * qw, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        std::vector<double> s(T, -INFINITY);
        double mx = -INFINITY;
        for (int j = 0; j < T; ++j) {
          if (!rule(b, i, j)) continue;
          double dot = 0;
          for (int c = 0; c < d; ++c)
            dot += double{q.f32()[(b * T + i) * qw + h * d + c]} *
                   k.f32()[(b * T + j) * kw + (h / G) * d + c];
          s[j] = dot * dims.scale + (bias ? bias(h, i, j) : 0.0);
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j < T; ++j) sum += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - mx);
        for (int j = 0; j < T; ++j) {
          if (s[j] == -INFINITY) continue;
          const double p = std::exp(s[j] - mx) / sum;
          for (int c = 0; c < d; ++c)
            out[(b * T + i) * qw + h * d + c] += p * v.f32()[(b * T + j) * kw + (h / G) * d + c];
        }
      }
  return out;
}

// Rows of lengths `lengths` (right-padded to T), causal ranks.
AttentionLayout causal_rows(int T, const std::vector<int>& lengths, std::int32_t window) {
  AttentionLayout layout;
  layout.reset(static_cast<std::int32_t>(lengths.size()), T);
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    SequenceMask m;
    for (int i = 0; i < lengths[b]; ++i) m.rank.push_back(i);
    m.role.assign(lengths[b], TokenRole::content);
    m.window = window;
    layout.set_row(static_cast<std::int32_t>(b), m);
  }
  return layout;
}

// HF T5Attention._relative_position_bucket, written out again (float32 logarithm).
int t5_bucket(int relative, bool bidirectional, int buckets, int max_distance) {
  int ret = 0;
  if (bidirectional) {
    buckets /= 2;
    ret += relative > 0 ? buckets : 0;
    relative = std::abs(relative);
  } else {
    relative = -std::min(relative, 0);
  }
  const int exact = buckets / 2;
  if (relative < exact) return ret + relative;
  const float large =
      static_cast<float>(exact) + std::log(static_cast<float>(relative) / exact) /
                                      static_cast<float>(std::log(double(max_distance) / exact)) *
                                      static_cast<float>(buckets - exact);
  return ret + std::min(static_cast<int>(large), buckets - 1);
}

struct Dims {
  AttentionDims dims;
  const char* name;
};
const Dims kDims[] = {{{4, 2, 8, 0.35f}, "grouped-query"},
                      {{8, 8, 4, 0.5f}, "tiny heads"},
                      {{2, 2, 16, 0.25f}, "multi-head"}};

}  // namespace

TEST_CASE("T5 relative buckets match Hugging Face's", "[numerics][attention]") {
  // Values of transformers' _relative_position_bucket (run in torch) for 32 buckets, distance 128.
  CHECK(t5_relative_bucket(0, true, 32, 128) == 0);
  CHECK(t5_relative_bucket(-1, true, 32, 128) == 1);
  CHECK(t5_relative_bucket(1, true, 32, 128) == 17);
  CHECK(t5_relative_bucket(-7, true, 32, 128) == 7);
  CHECK(t5_relative_bucket(-8, true, 32, 128) == 8);
  CHECK(t5_relative_bucket(-20, true, 32, 128) == 10);
  CHECK(t5_relative_bucket(500, true, 32, 128) == 31);
  CHECK(t5_relative_bucket(5, false, 32, 128) == 0);
  CHECK(t5_relative_bucket(-40, false, 32, 128) == 23);
  for (int r = -300; r <= 300; ++r)
    for (const bool bi : {true, false})
      REQUIRE(t5_relative_bucket(r, bi, 32, 128) == t5_bucket(r, bi, 32, 128));
}

TEST_CASE("a sliding window hides keys ranked window or more below the query",
          "[numerics][attention][windowed-causal]") {
  const int T = 70;  // past one 64-row block: the sgemm path too
  for (const Dims& c : kDims)
    for (const std::int32_t window : {1, 3, 16}) {
      INFO(c.name << ", window " << window);
      const AttentionLayout layout = causal_rows(T, {T, 9, 1}, window);
      const std::int64_t qw = std::int64_t{c.dims.heads} * c.dims.head_dim;
      const std::int64_t kw = std::int64_t{c.dims.kv_heads} * c.dims.head_dim;
      const Tensor q = random_tensor({3 * T, qw}, 1), k = random_tensor({3 * T, kw}, 2),
                   v = random_tensor({3 * T, kw}, 3);
      Tensor out;
      self_attention(c.dims, layout, q, k, v, out);
      const int lengths[] = {T, 9, 1};
      const auto want =
          reference(c.dims, 3, T, q, k, v,
                    [&](int b, int i, int j) {
                      return j < lengths[b] && i < lengths[b] && j <= i && i - j < window;
                    },
                    {});
      // Padding queries are zeros in both.
      CHECK(relative_error(out, want) <= kTol);
    }
}

TEST_CASE("a sliding window holds on KV-cached steps", "[numerics][attention][windowed-causal]") {
  const AttentionDims dims{4, 2, 8, 0.35f};
  const int prompt = 5, steps = 6, T = prompt + steps, window = 3;
  const std::int64_t qw = 32, kw = 16;
  const Tensor q = random_tensor({T, qw}, 4), k = random_tensor({T, kw}, 5),
               v = random_tensor({T, kw}, 6);
  const auto want = reference(dims, 1, T, q, k, v,
                              [&](int, int i, int j) { return j <= i && i - j < window; }, {});
  KvCache cache(1, dims.kv_heads, dims.head_dim, 1);
  const AttentionLayout layout = causal_rows(prompt, {prompt}, window);
  std::vector<std::int32_t> positions{0, 1, 2, 3, 4};
  cache.begin(layout, positions);
  cache.write(0, seq_view(k, prompt), seq_view(v, prompt));
  Tensor out({prompt, qw});
  attention(dims, cache.mask(), seq_view(q, prompt), cache.keys(0), cache.values(0),
            mutable_seq_view(out, prompt));
  cache.end();
  std::vector<double> got(out.f32(), out.f32() + out.numel());
  for (int t = prompt; t < T; ++t) {
    cache.begin_step(TokenRole::content);
    cache.write(0, SeqView{k.f32() + t * kw, kw, kw}, SeqView{v.f32() + t * kw, kw, kw});
    Tensor o({1, qw});
    attention(dims, cache.mask(), SeqView{q.f32() + t * qw, qw, qw}, cache.keys(0), cache.values(0),
              mutable_seq_view(o, 1));
    cache.end();
    got.insert(got.end(), o.f32(), o.f32() + qw);
  }
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  CHECK(worst < kTol);
}

TEST_CASE("T5 relative-position and ALiBi biases are added per head in the kernel",
          "[numerics][attention][position-bias]") {
  const int T = 70, buckets = 8, max_distance = 20;
  for (const Dims& c : kDims) {
    const int H = c.dims.heads;
    const Tensor table = random_tensor({buckets, H}, 7, 2.0f);
    const Tensor slopes = random_tensor({H}, 8, 0.5f);
    for (const bool alibi : {false, true})
      for (const bool bidirectional : {true, false}) {
        INFO(c.name << (alibi ? ", alibi" : ", t5") << (bidirectional ? " bidirectional" : ""));
        PositionBias bias{
            .kind = alibi ? PositionBias::Kind::alibi : PositionBias::Kind::t5_buckets,
            .table = alibi ? slopes.f32() : table.f32(),
            .heads = H,
            .num_buckets = buckets,
            .max_distance = max_distance,
            .bidirectional = bidirectional};
        AttentionLayout layout = causal_rows(T, {T, 12}, 0);
        if (bidirectional) std::fill(layout.rank.begin(), layout.rank.end(), 0);
        const std::int64_t qw = std::int64_t{H} * c.dims.head_dim;
        const std::int64_t kw = std::int64_t{c.dims.kv_heads} * c.dims.head_dim;
        const Tensor q = random_tensor({2 * T, qw}, 9), k = random_tensor({2 * T, kw}, 10),
                     v = random_tensor({2 * T, kw}, 11);
        MaskView mask = MaskView::self(layout);
        mask.bias = &bias;
        Tensor out({2 * T, qw});
        attention(c.dims, mask, seq_view(q, T), seq_view(k, T), seq_view(v, T),
                  mutable_seq_view(out, T));
        const int lengths[] = {T, 12};
        const auto want = reference(
            c.dims, 2, T, q, k, v,
            [&](int b, int i, int j) {
              return j < lengths[b] && i < lengths[b] && (bidirectional || j <= i);
            },
            [&](int h, int i, int j) {
              return alibi
                         ? double{slopes.f32()[h]} * (j - i)
                         : double{
                               table.f32()[t5_bucket(j - i, bidirectional, buckets, max_distance) *
                                               H +
                                           h]};
            });
        CHECK(relative_error(out, want) <= kTol);
      }
  }
}

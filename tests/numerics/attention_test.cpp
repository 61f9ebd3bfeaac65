#include <catch2/catch.hpp>

#include <numeric>
#include <random>
#include <vector>

#include "masque/attention.hpp"
#include "masque/error.hpp"
#include "masque/threading.hpp"
#include "reference.hpp"

using namespace masque;
using masque::test::random_tensor;
using masque::test::reference_attention;
using masque::test::relative_error;

namespace {

constexpr double kTol = 1e-5;

SequenceMask ranked(std::vector<std::int32_t> rank) {
  SequenceMask m;
  m.role.assign(rank.size(), TokenRole::content);
  m.rank = std::move(rank);
  return m;
}

SequenceMask bidirectional(int n) {
  return ranked(std::vector<std::int32_t>(n, 0));
}

SequenceMask causal(int n) {
  std::vector<std::int32_t> rank(n);
  std::iota(rank.begin(), rank.end(), 0);
  return ranked(rank);
}

// UniLM: rank = cumulative sum of segment ids.
SequenceMask seq2seq(int source, int target) {
  std::vector<std::int32_t> rank;
  for (int i = 0; i < source; ++i) rank.push_back(0);
  for (int i = 1; i <= target; ++i) rank.push_back(i);
  return ranked(rank);
}

// Content in a factorization order, then query tokens predicting `targets` (each sees the
// content earlier in the order, and itself).
SequenceMask permutation(const std::vector<int>& order, const std::vector<int>& targets) {
  std::vector<std::int32_t> rank(order.size());
  for (std::size_t t = 0; t < order.size(); ++t) rank[order[t]] = static_cast<std::int32_t>(t);
  SequenceMask m = ranked(rank);
  for (int p : targets) {
    m.rank.push_back(rank[p] - 1);
    m.role.push_back(TokenRole::query);
  }
  return m;
}

SequenceMask dense(int n, std::uint32_t seed) {
  SequenceMask m = bidirectional(n);
  std::mt19937 rng(seed);
  m.dense.resize(static_cast<std::size_t>(n) * n);
  for (auto& d : m.dense) d = rng() % 3 != 0;
  for (int j = 0; j < n; ++j) m.dense[2 * n + j] = 0;  // a row that sees nothing
  return m;
}

AttentionLayout layout_of(int T, const std::vector<SequenceMask>& rows) {
  AttentionLayout layout;
  layout.reset(static_cast<std::int32_t>(rows.size()), T);
  for (std::size_t b = 0; b < rows.size(); ++b)
    layout.set_row(static_cast<std::int32_t>(b), rows[b]);
  return layout;
}

struct Case {
  const char* name;
  AttentionLayout layout;
};

std::vector<Case> mask_cases() {
  std::vector<Case> cases;
  cases.push_back(
      {"bidirectional", layout_of(7, {bidirectional(7), bidirectional(4), bidirectional(1)})});
  cases.push_back({"causal", layout_of(9, {causal(9), causal(5), causal(2)})});
  cases.push_back({"seq2seq", layout_of(8, {seq2seq(3, 5), seq2seq(4, 1), seq2seq(2, 2)})});
  cases.push_back({"permutation with query tokens",
                   layout_of(9, {permutation({0, 3, 1, 4, 2, 5}, {1, 4, 5}),
                                 permutation({2, 0, 1}, {0}), permutation({1, 0}, {})})});
  cases.push_back({"dense", layout_of(6, {dense(6, 1), dense(4, 2), causal(5)})});
  return cases;
}

struct HeadCase {
  AttentionDims dims;
};

std::vector<AttentionDims> head_cases() {
  return {
      {4, 4, 8, 1.0f / std::sqrt(8.0f)},  // multi-head
      {8, 2, 8, 1.0f / std::sqrt(8.0f)},  // grouped-query (Llama-style)
      {4, 1, 16, 0.25f},                  // multi-query
      {8, 8, 4, 0.5f},                    // tiny heads (the encoder-decoder)
      {8, 8, 2, 0.7f},                    // tiny heads of 2 and of 1
      {8, 8, 1, 0.9f},
      {16, 4, 8, 0.3f},  // grouped-query tiny heads (stories260k has 8 / 4 x 8)
  };
}

// Runs attention on contiguous q/k/v of a layout and compares with the double reference.
double self_attention_error(const AttentionDims& dims, const AttentionLayout& layout,
                            std::uint32_t seed) {
  const std::int64_t tokens = std::int64_t{layout.batch} * layout.length;
  const std::int64_t qw = std::int64_t{dims.heads} * dims.head_dim;
  const std::int64_t kw = std::int64_t{dims.kv_heads} * dims.head_dim;
  Tensor q = random_tensor({tokens, qw}, seed), k = random_tensor({tokens, kw}, seed + 1),
         v = random_tensor({tokens, kw}, seed + 2);
  Tensor out;
  self_attention(dims, layout, q, k, v, out);
  const auto want = reference_attention(dims, MaskView::self(layout), q, k, v, qw, kw);
  return relative_error(out, want);
}

}  // namespace

TEST_CASE("attention under every mask kind and head layout matches the reference",
          "[numerics][attention]") {
  for (const auto& c : mask_cases())
    for (const auto& dims : head_cases()) {
      INFO(c.name << ", heads " << dims.heads << "/" << dims.kv_heads << " x " << dims.head_dim);
      CHECK(self_attention_error(dims, c.layout, 100) <= kTol);
    }
}

TEST_CASE("a query with no visible key gets zeros, not NaN", "[numerics][attention]") {
  const AttentionLayout layout = layout_of(6, {dense(6, 1), bidirectional(3)});
  const AttentionDims dims{2, 2, 4, 0.5f};
  Tensor q = random_tensor({12, 8}, 1), k = random_tensor({12, 8}, 2),
         v = random_tensor({12, 8}, 3);
  Tensor out;
  self_attention(dims, layout, q, k, v, out);
  for (int c = 0; c < 8; ++c) CHECK(out.f32()[2 * 8 + c] == 0.0f);   // the dense row seeing nothing
  for (int c = 0; c < 8; ++c) CHECK(out.f32()[10 * 8 + c] == 0.0f);  // a pad query
  for (std::int64_t i = 0; i < out.numel(); ++i) CHECK(std::isfinite(out.f32()[i]));
}

TEST_CASE("long sequences take the blocked sgemm path and still match", "[numerics][attention]") {
  // 300 tokens: several 64-row query blocks, causal key spans that differ per block, padding.
  const AttentionLayout causal_layout = layout_of(300, {causal(300), causal(170)});
  const AttentionLayout bidir_layout = layout_of(300, {bidirectional(257), bidirectional(300)});
  const AttentionLayout perm_layout = [] {
    std::vector<int> order(150);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(5));
    return layout_of(160, {permutation(order, {3, 77, 140}), causal(160)});
  }();
  for (const AttentionDims& dims :
       {AttentionDims{2, 2, 64, 0.125f}, AttentionDims{4, 2, 32, 0.17f}}) {
    CHECK(self_attention_error(dims, causal_layout, 200) <= kTol);
    CHECK(self_attention_error(dims, bidir_layout, 300) <= kTol);
    CHECK(self_attention_error(dims, perm_layout, 400) <= kTol);
  }
}

TEST_CASE("q, k and v may be column ranges of one fused projection", "[numerics][attention]") {
  const AttentionLayout layout = layout_of(70, {causal(70), causal(33)});
  const AttentionDims dims{4, 2, 16, 0.25f};
  const std::int64_t tokens = 140, qw = 64, kw = 32, width = qw + 2 * kw;
  Tensor qkv = random_tensor({tokens, width}, 7);
  Tensor q({tokens, qw}), k({tokens, kw}), v({tokens, kw});
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::copy_n(qkv.f32() + t * width, qw, q.f32() + t * qw);
    std::copy_n(qkv.f32() + t * width + qw, kw, k.f32() + t * kw);
    std::copy_n(qkv.f32() + t * width + qw + kw, kw, v.f32() + t * kw);
  }
  Tensor out = Tensor::zeros({tokens, qw});
  attention(dims, MaskView::self(layout), seq_view(qkv, 70, 0), seq_view(qkv, 70, qw),
            seq_view(qkv, 70, qw + kw), mutable_seq_view(out, 70));
  CHECK(relative_error(out, reference_attention(dims, MaskView::self(layout), q, k, v, qw, kw)) <=
        kTol);
}

TEST_CASE("cross-attention masks the source padding only", "[numerics][attention]") {
  AttentionLayout source = layout_of(9, {bidirectional(9), bidirectional(4), bidirectional(7)});
  for (const auto& dims : head_cases()) {
    const std::int64_t qw = std::int64_t{dims.heads} * dims.head_dim;
    const std::int64_t kw = std::int64_t{dims.kv_heads} * dims.head_dim;
    for (int q_len : {1, 5, 70}) {
      Tensor q = random_tensor({3 * q_len, qw}, 8), k = random_tensor({27, kw}, 9),
             v = random_tensor({27, kw}, 10);
      Tensor out;
      cross_attention(dims, source, q, q_len, k, v, out);
      const auto want = reference_attention(dims, MaskView::cross(source, q_len), q, k, v, qw, kw);
      CHECK(relative_error(out, want) <= kTol);
    }
  }
}

TEST_CASE("attention probabilities of one head can be returned", "[numerics][attention]") {
  const AttentionLayout layout = layout_of(5, {causal(5), causal(3)});
  // Grouped-query, then tiny heads (multi-head and grouped-query heads of 8).
  for (const AttentionDims& dims :
       {AttentionDims{2, 1, 4, 0.5f}, AttentionDims{8, 8, 4, 0.5f}, AttentionDims{4, 4, 8, 0.3f},
        AttentionDims{8, 2, 8, 0.3f}, AttentionDims{8, 8, 1, 0.9f}, AttentionDims{4, 4, 2, 0.7f}}) {
    const std::int32_t qw = dims.heads * dims.head_dim, kw = dims.kv_heads * dims.head_dim;
    const std::int32_t head = dims.heads - 1, d = dims.head_dim;
    const std::int32_t g = head / (dims.heads / dims.kv_heads);
    Tensor q = random_tensor({10, qw}, 11), k = random_tensor({10, kw}, 12),
           v = random_tensor({10, kw}, 13);
    Tensor out = Tensor::zeros({10, qw});
    std::vector<float> probs(2 * 5 * 5, -1.0f);
    AttentionProbs want_probs{head, probs.data()};
    attention(dims, MaskView::self(layout), seq_view(q, 5), seq_view(k, 5), seq_view(v, 5),
              mutable_seq_view(out, 5), &want_probs);
    const MaskView mask = MaskView::self(layout);
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 5; ++i) {
        INFO("heads " << dims.heads << "/" << dims.kv_heads << ", row " << b << ", query " << i);
        double sum = 0;
        bool any = false;
        for (int j = 0; j < 5; ++j) {
          const float p = probs[(b * 5 + i) * 5 + j];
          if (!mask.allowed(b, i, j)) CHECK(p == 0.0f);
          any = any || mask.allowed(b, i, j);
          sum += p;
        }
        CHECK(std::abs(sum - (any ? 1.0 : 0.0)) < 1e-6);
        // The head's output is its probabilities times V.
        for (int c = 0; c < d; ++c) {
          double o = 0;
          for (int j = 0; j < 5; ++j)
            o += probs[(b * 5 + i) * 5 + j] * v.f32()[(b * 5 + j) * kw + g * d + c];
          CHECK(std::abs(out.f32()[(b * 5 + i) * qw + head * d + c] - o) < 1e-5);
        }
      }
  }
}

TEST_CASE("attention probabilities of a range of heads equal each head's own",
          "[numerics][attention]") {
  // Tiles of queries (a long causal row and a padded one), grouped-query tiles (few queries)
  // and the tiny-head path: every head of a range is written, each equal to one head alone.
  const AttentionLayout layout = layout_of(70, {causal(70), seq2seq(30, 20)});
  const AttentionLayout few = layout_of(4, {causal(4), causal(2)});
  for (const AttentionLayout* l : {&layout, &few})
    for (const AttentionDims& dims : {AttentionDims{4, 2, 16, 0.25f}, AttentionDims{8, 8, 4, 0.5f},
                                      AttentionDims{4, 4, 8, 0.3f}}) {
      const std::int32_t n = l->length, rows = 2 * n;
      const std::int32_t qw = dims.heads * dims.head_dim, kw = dims.kv_heads * dims.head_dim;
      Tensor q = random_tensor({rows, qw}, 21), k = random_tensor({rows, kw}, 22),
             v = random_tensor({rows, kw}, 23);
      Tensor out = Tensor::zeros({rows, qw});
      const std::int32_t first = 1, count = dims.heads - 1;
      const std::size_t plane = std::size_t{2} * n * n;
      std::vector<float> range(count * plane, -1.0f);
      AttentionProbs all{.head = first, .data = range.data(), .heads = count};
      attention(dims, MaskView::self(*l), seq_view(q, n), seq_view(k, n), seq_view(v, n),
                mutable_seq_view(out, n), &all);
      for (std::int32_t h = first; h < first + count; ++h) {
        INFO("heads " << dims.heads << "/" << dims.kv_heads << ", length " << n << ", head " << h);
        std::vector<float> one(plane, -1.0f);
        AttentionProbs single{.head = h, .data = one.data()};
        Tensor again = Tensor::zeros({rows, qw});
        attention(dims, MaskView::self(*l), seq_view(q, n), seq_view(k, n), seq_view(v, n),
                  mutable_seq_view(again, n), &single);
        const float* got = range.data() + (h - first) * plane;
        for (std::size_t x = 0; x < plane; ++x) REQUIRE(got[x] == one[x]);
      }
    }
}

TEST_CASE("attention gives the same result with two intra-op threads",
          "[numerics][attention][threads]") {
  // Large enough (~140 MFLOP) for attention to open a parallel region.
  const AttentionLayout layout =
      layout_of(300, {causal(300), seq2seq(160, 120), bidirectional(250)});
  const AttentionDims dims{4, 2, 32, 0.2f};
  Tensor q = random_tensor({900, 128}, 14), k = random_tensor({900, 64}, 15),
         v = random_tensor({900, 64}, 16);
  Tensor one, two;
  self_attention(dims, layout, q, k, v, one);
  {
    ThreadScope scope(2);
    self_attention(dims, layout, q, k, v, two);
  }
  CHECK(relative_error(two, masque::test::to_double(one)) == 0.0);
  CHECK(relative_error(one, reference_attention(dims, MaskView::self(layout), q, k, v, 128, 64)) <=
        kTol);
}

TEST_CASE("attention rejects inconsistent heads and shapes", "[numerics][attention]") {
  const AttentionLayout layout = layout_of(3, {causal(3)});
  Tensor q = random_tensor({3, 12}, 1), k = random_tensor({3, 8}, 2), v = random_tensor({3, 8}, 3),
         out;
  CHECK_THROWS_AS(self_attention({3, 2, 4, 1.0f}, layout, q, k, v, out), RuntimeError);
  CHECK_THROWS_AS(self_attention({4, 2, 4, 1.0f}, layout, q, k, v, out), RuntimeError);
}

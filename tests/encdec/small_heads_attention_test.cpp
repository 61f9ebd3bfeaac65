// The attention kernel's tiny-head path (core/src/numerics/attention.cpp: heads of 1, 2, 4 or 8
// features, all heads of a query at once), which the encoder-decoder's 8 heads of 4 take. The
// numerics tests cover it under every mask kind; these add what they check on other head
// shapes only: strided fused views, one head's probabilities, threads, queries that see nothing.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <vector>

#include "masque/attention.hpp"
#include "masque/threading.hpp"
#include "reference.hpp"

using namespace masque;
using masque::test::random_tensor;
using masque::test::reference_attention;
using masque::test::relative_error;

namespace {

constexpr double kTol = 1e-5;

SequenceMask causal(int n) {
  SequenceMask m;
  for (int i = 0; i < n; ++i) {
    m.rank.push_back(i);
    m.role.push_back(TokenRole::content);
  }
  return m;
}

AttentionLayout layout_of(int T, const std::vector<SequenceMask>& rows) {
  AttentionLayout layout;
  layout.reset(static_cast<std::int32_t>(rows.size()), T);
  for (std::size_t b = 0; b < rows.size(); ++b)
    layout.set_row(static_cast<std::int32_t>(b), rows[b]);
  return layout;
}

// q|k|v as column ranges of one [B*T, 3*H*d] tensor, out inside a wider row.
double fused_error(const AttentionDims& dims, const AttentionLayout& layout) {
  const int T = layout.length;
  const std::int64_t tokens = std::int64_t{layout.batch} * T;
  const std::int64_t w = std::int64_t{dims.heads} * dims.head_dim;
  const Tensor qkv = random_tensor({tokens, 3 * w}, 21);
  Tensor q({tokens, w}), k({tokens, w}), v({tokens, w});
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t c = 0; c < w; ++c) {
      q.f32()[t * w + c] = qkv.f32()[t * 3 * w + c];
      k.f32()[t * w + c] = qkv.f32()[t * 3 * w + w + c];
      v.f32()[t * w + c] = qkv.f32()[t * 3 * w + 2 * w + c];
    }
  Tensor wide = Tensor::zeros({tokens, w + 8});
  attention(dims, MaskView::self(layout), seq_view(qkv, T, 0), seq_view(qkv, T, w),
            seq_view(qkv, T, 2 * w), mutable_seq_view(wide, T, 4));
  Tensor out({tokens, w});
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t c = 0; c < w; ++c) out.f32()[t * w + c] = wide.f32()[t * (w + 8) + 4 + c];
    // The columns around the output are untouched.
    for (int c : {0, 1, 2, 3}) CHECK(wide.f32()[t * (w + 8) + c] == 0.0f);
    for (int c : {0, 1, 2, 3}) CHECK(wide.f32()[t * (w + 8) + 4 + w + c] == 0.0f);
  }
  return relative_error(out, reference_attention(dims, MaskView::self(layout), q, k, v, w, w));
}

}  // namespace

TEST_CASE("tiny heads read fused q|k|v column ranges and write strided outputs",
          "[encdec][attention]") {
  const AttentionLayout layout = layout_of(7, {causal(7), causal(3), causal(5)});
  for (const AttentionDims& dims : {AttentionDims{8, 8, 4, 0.5f}, AttentionDims{16, 16, 1, 1.0f},
                                    AttentionDims{8, 8, 2, 0.7f}, AttentionDims{4, 4, 8, 0.35f}}) {
    INFO(dims.heads << " heads of " << dims.head_dim);
    CHECK(fused_error(dims, layout) <= kTol);
  }
}

TEST_CASE("tiny heads return one head's probabilities", "[encdec][attention]") {
  const AttentionLayout layout = layout_of(6, {causal(6), causal(4)});
  const AttentionDims dims{8, 8, 4, 0.5f};
  Tensor q = random_tensor({12, 32}, 31), k = random_tensor({12, 32}, 32),
         v = random_tensor({12, 32}, 33);
  Tensor out({12, 32});
  std::vector<float> probs(2 * 6 * 6, -1.0f);
  const AttentionProbs want_head{3, probs.data()};
  attention(dims, MaskView::self(layout), seq_view(q, 6), seq_view(k, 6), seq_view(v, 6),
            mutable_seq_view(out, 6), &want_head);
  const MaskView mask = MaskView::self(layout);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 6; ++i) {
      // Head 3's probabilities in double: softmax of 0.5 * q.k over the allowed keys.
      std::vector<double> s(6, 0.0);
      double mx = -INFINITY, sum = 0.0;
      for (int j = 0; j < 6; ++j) {
        if (!mask.allowed(b, i, j)) continue;
        for (int c = 12; c < 16; ++c)
          s[j] += 0.5 * q.f32()[(b * 6 + i) * 32 + c] * k.f32()[(b * 6 + j) * 32 + c];
        mx = std::max(mx, s[j]);
      }
      for (int j = 0; j < 6; ++j)
        if (mask.allowed(b, i, j)) sum += std::exp(s[j] - mx);
      for (int j = 0; j < 6; ++j) {
        const double want = mask.allowed(b, i, j) ? std::exp(s[j] - mx) / sum : 0.0;
        CHECK(std::abs(probs[(b * 6 + i) * 6 + j] - want) <= 1e-6);
      }
    }
}

TEST_CASE("tiny heads give the same result with two intra-op threads",
          "[encdec][attention][threads]") {
  const AttentionLayout layout = layout_of(40, {causal(40), causal(17), causal(33)});
  const AttentionDims dims{8, 8, 4, 0.5f};
  Tensor q = random_tensor({120, 32}, 41), k = random_tensor({120, 32}, 42),
         v = random_tensor({120, 32}, 43);
  Tensor one, two;
  self_attention(dims, layout, q, k, v, one);
  {
    ThreadScope scope(2);
    self_attention(dims, layout, q, k, v, two);
  }
  CHECK(relative_error(two, masque::test::to_double(one)) == 0.0);
  CHECK(relative_error(one, reference_attention(dims, MaskView::self(layout), q, k, v, 32, 32)) <=
        kTol);
}

TEST_CASE("tiny heads give zeros to pad queries and to queries that see nothing",
          "[encdec][attention]") {
  AttentionLayout layout = layout_of(5, {causal(5), causal(2)});  // row 1: 3 pad queries
  layout.dense.assign(2 * 5 * 5, 1);
  for (int j = 0; j < 5; ++j) layout.dense[(0 * 5 + 2) * 5 + j] = 0;  // row 0, query 2: no key
  const AttentionDims dims{8, 8, 4, 0.5f};
  Tensor q = random_tensor({10, 32}, 51), k = random_tensor({10, 32}, 52),
         v = random_tensor({10, 32}, 53);
  Tensor out;
  self_attention(dims, layout, q, k, v, out);
  for (int t : {2, 7, 8, 9})
    for (int c = 0; c < 32; ++c) CHECK(out.f32()[t * 32 + c] == 0.0f);
  CHECK(relative_error(out, reference_attention(dims, MaskView::self(layout), q, k, v, 32, 32)) <=
        kTol);
}

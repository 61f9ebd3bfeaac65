// Training attention (forward with log-sum-exp, backward) under every mask kind, against torch
// autograd on the same layouts (reference_ops.py builds the mask from mask.hpp's rule).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "masque/threading.hpp"
#include "masque/train/attention.hpp"
#include "train_support.hpp"

using namespace masque;
using namespace masque::test;

namespace {

struct Layout {
  std::vector<TokenRole> key_role, query_role;
  std::vector<std::int32_t> key_rank, query_rank;
  std::vector<std::uint8_t> dense;
  MaskView view;
};

std::vector<TokenRole> roles(const nlohmann::json& rows) {
  std::vector<TokenRole> out;
  for (const auto& row : rows)
    for (int r : row) out.push_back(static_cast<TokenRole>(r));
  return out;
}
std::vector<std::int32_t> flat_ints(const nlohmann::json& rows) {
  std::vector<std::int32_t> out;
  for (const auto& row : rows)
    for (int r : row) out.push_back(r);
  return out;
}

void build(const nlohmann::json& c, Layout& l) {
  MaskView& m = l.view;
  m.batch = c["batch"];
  m.q_len = c["q_len"];
  m.k_len = c["k_len"];
  l.key_role = roles(c["key_role"]);
  l.key_rank = flat_ints(c["key_rank"]);
  m.key_role = l.key_role.data();
  m.key_rank = l.key_rank.data();
  m.key_stride = m.k_len;
  if (!c["query_role"].is_null()) {
    l.query_role = roles(c["query_role"]);
    l.query_rank = flat_ints(c["query_rank"]);
    m.query_role = l.query_role.data();
    m.query_rank = l.query_rank.data();
    m.query_stride = m.q_len;
  }
  m.self_offset = c["self_offset"];
  if (!c["dense"].is_null()) {
    for (const auto& b : c["dense"])
      for (const auto& row : b)
        for (int x : row) l.dense.push_back(static_cast<std::uint8_t>(x));
    m.dense = l.dense.data();
  }
}

void check_case(const std::string& name, int threads) {
  INFO(name << " with " << threads << " thread(s)");
  const auto c = train_fixture(name);
  Layout layout;
  build(c, layout);
  const MaskView& m = layout.view;
  const AttentionDims dims{c["heads"], c["kv_heads"], c["head_dim"], c["scale"].get<float>()};
  const std::int64_t qw = std::int64_t{dims.heads} * dims.head_dim;
  const std::int64_t kw = std::int64_t{dims.kv_heads} * dims.head_dim;
  const Tensor q = tensor(c["q"], {m.batch * std::int64_t{m.q_len}, qw});
  const Tensor k = tensor(c["k"], {m.batch * std::int64_t{m.k_len}, kw});
  const Tensor v = tensor(c["v"], {m.batch * std::int64_t{m.k_len}, kw});
  const Tensor dout = tensor(c["dout"], q.shape());
  // Garbage in the outputs: everything must be written.
  Tensor out(q.shape()), dq(q.shape()), dk(k.shape()), dv(v.shape());
  for (Tensor* t : {&out, &dq, &dk, &dv}) std::fill(t->f32(), t->f32() + t->numel(), 1e30f);
  std::vector<float> lse(std::size_t(m.batch) * dims.heads * m.q_len, 7.0f);
  ThreadScope scope(threads);
  train::attention_forward(dims, m, seq_view(q, m.q_len), seq_view(k, m.k_len),
                           seq_view(v, m.k_len), mutable_seq_view(out, m.q_len), lse.data());
  CHECK(relative_error(out.f32(), doubles(c["out"])) < kRelTol);
  CHECK(relative_error(lse, doubles(c["lse"])) < kRelTol);
  train::attention_backward(dims, m, seq_view(q, m.q_len), seq_view(k, m.k_len),
                            seq_view(v, m.k_len), seq_view(out, m.q_len), seq_view(dout, m.q_len),
                            lse.data(), mutable_seq_view(dq, m.q_len),
                            mutable_seq_view(dk, m.k_len), mutable_seq_view(dv, m.k_len));
  CHECK(relative_error(dq.f32(), doubles(c["dq"])) < kRelTol);
  CHECK(relative_error(dk.f32(), doubles(c["dk"])) < kRelTol);
  CHECK(relative_error(dv.f32(), doubles(c["dv"])) < kRelTol);
}

const char* kCases[] = {"attn_bidirectional_pads", "attn_causal_gqa", "attn_seq2seq",
                        "attn_permutation_query",  "attn_dense",      "attn_cross_mqa",
                        "attn_long_causal_offset"};

}  // namespace

TEST_CASE("train attention: forward and backward match torch under every mask kind",
          "[train][attention]") {
  for (const char* name : kCases)
    for (int threads : {1, 2}) check_case(name, threads);
}

TEST_CASE("train attention: results do not depend on the thread count", "[train][attention]") {
  // A case large enough to run in parallel: bitwise equal with 1 and 2 threads.
  const std::int32_t B = 8, T = 128, H = 8, d = 64;  // past the parallel threshold
  AttentionLayout layout;
  layout.reset(B, T);
  for (std::int32_t b = 0; b < B; ++b)
    for (std::int32_t t = 0; t < T - 7 * b; ++t) {
      layout.role[b * T + t] = TokenRole::content;
      layout.rank[b * T + t] = t;
    }
  const MaskView m = MaskView::self(layout);
  const AttentionDims dims{H, H, d, 0.125f};
  Tensor q({B * T, H * d}), k(q.shape()), v(q.shape()), dout(q.shape());
  std::uint32_t state = 1;
  for (Tensor* t : {&q, &k, &v, &dout})
    for (std::int64_t i = 0; i < t->numel(); ++i) {
      state = state * 1664525u + 1013904223u;
      t->f32()[i] = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    }
  auto run = [&](int threads) {
    ThreadScope scope(threads);
    Tensor out(q.shape()), dq(q.shape()), dk(q.shape()), dv(q.shape());
    std::vector<float> lse(std::size_t(B) * H * T);
    train::attention_forward(dims, m, seq_view(q, T), seq_view(k, T), seq_view(v, T),
                             mutable_seq_view(out, T), lse.data());
    train::attention_backward(dims, m, seq_view(q, T), seq_view(k, T), seq_view(v, T),
                              seq_view(out, T), seq_view(dout, T), lse.data(),
                              mutable_seq_view(dq, T), mutable_seq_view(dk, T),
                              mutable_seq_view(dv, T));
    std::vector<float> all;
    for (const Tensor* t : {&out, &dq, &dk, &dv})
      all.insert(all.end(), t->f32(), t->f32() + t->numel());
    return all;
  };
  CHECK(run(1) == run(2));
}

TEST_CASE("train attention: heads that do not divide are a clear error", "[train][attention]") {
  AttentionLayout layout;
  layout.reset(1, 2);
  Tensor q({2, 6}), k({2, 4});
  std::vector<float> lse(6);
  CHECK_THROWS_WITH(
      train::attention_forward({3, 2, 2, 1.0f}, MaskView::self(layout), seq_view(q, 2),
                               seq_view(k, 2), seq_view(k, 2), mutable_seq_view(q, 2), lse.data()),
      Catch::Contains("3 query heads cannot share 2 kv heads"));
}

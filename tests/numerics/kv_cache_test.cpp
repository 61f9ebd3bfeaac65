#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "masque/error.hpp"
#include "masque/kv_cache.hpp"
#include "reference.hpp"

using namespace masque;
using masque::test::random_tensor;
using masque::test::reference_attention;
using masque::test::relative_error;

namespace {

constexpr double kTol = 1e-5;
DType g_kv_dtype = DType::f32;  // what the helpers' caches hold keys and values in
constexpr int kLayers = 2;
constexpr int kVocab = 50;

// A toy network: each token id has fixed q, k, v vectors per layer, so any prefix can be
// recomputed from scratch and compared with the incremental result.
struct Toy {
  AttentionDims dims{6, 2, 8, 0.35f};
  std::int64_t qw = 48, kw = 16;
  std::vector<Tensor> q, k, v;  // per layer [kVocab, width]

  // bf16_exact: k and v rounded to bf16 values, so that a bf16 cache holds them exactly.
  explicit Toy(bool bf16_exact = false) {
    for (int l = 0; l < kLayers; ++l) {
      q.push_back(random_tensor({kVocab, qw}, 10 + l));
      k.push_back(random_tensor({kVocab, kw}, 20 + l));
      v.push_back(random_tensor({kVocab, kw}, 30 + l));
      if (bf16_exact)
        for (Tensor* t : {&k.back(), &v.back()}) *t = round_trip_bf16(*t);
    }
  }

  static Tensor round_trip_bf16(const Tensor& t) {
    std::vector<std::uint16_t> half(static_cast<std::size_t>(t.numel()));
    round_to_bf16(t.f32(), t.numel(), half.data());
    Tensor out(t.shape());
    widen_bf16(half.data(), t.numel(), out.f32());
    return out;
  }

  // Rows of `width` floats for `ids` (id -1: a pad column, zeros).
  static Tensor gather(const Tensor& table, const std::vector<int>& ids) {
    const std::int64_t width = table.dim(1);
    Tensor out = Tensor::zeros({static_cast<std::int64_t>(ids.size()), width});
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= 0) std::copy_n(table.f32() + ids[i] * width, width, out.f32() + i * width);
    return out;
  }

  // Attention of query `id` over `keys` (all visible), in double.
  std::vector<double> attend_all(int layer, int id, const std::vector<int>& keys) const {
    AttentionLayout one;
    one.reset(1, static_cast<std::int32_t>(keys.size()) + 1);
    for (std::size_t j = 0; j <= keys.size(); ++j) one.role[j] = TokenRole::content;
    std::vector<int> all = keys;
    all.push_back(id);
    Tensor qs = gather(q[layer], all), ks = gather(k[layer], all), vs = gather(v[layer], all);
    auto out = reference_attention(dims, MaskView::self(one), qs, ks, vs, qw, kw);
    return std::vector<double>(out.end() - qw, out.end());
  }
  std::vector<double> attend_keys(int layer, int id, const std::vector<int>& keys) const {
    AttentionLayout source;
    source.reset(1, static_cast<std::int32_t>(keys.size()));
    for (std::size_t j = 0; j < keys.size(); ++j) source.role[j] = TokenRole::content;
    Tensor qs = gather(q[layer], {id}), ks = gather(k[layer], keys), vs = gather(v[layer], keys);
    return reference_attention(dims, MaskView::cross(source, 1), qs, ks, vs, qw, kw);
  }
};

// Prefills `rows` (right-padded to the longest) under a causal layout; checks the prefill
// outputs against a full computation.
KvCache prefill(const Toy& toy, const std::vector<std::vector<int>>& rows) {
  std::int32_t T = 0;
  for (const auto& r : rows) T = std::max<std::int32_t>(T, static_cast<std::int32_t>(r.size()));
  const auto B = static_cast<std::int32_t>(rows.size());
  AttentionLayout layout;
  layout.reset(B, T);
  std::vector<int> ids;
  std::vector<std::int32_t> positions;
  for (std::int32_t b = 0; b < B; ++b)
    for (std::int32_t t = 0; t < T; ++t) {
      const bool real = t < static_cast<std::int32_t>(rows[b].size());
      ids.push_back(real ? rows[b][t] : -1);
      positions.push_back(t);
      if (real) {
        layout.role[b * T + t] = TokenRole::content;
        layout.rank[b * T + t] = t;
      }
    }
  KvCache cache(kLayers, toy.dims.kv_heads, toy.dims.head_dim, B, g_kv_dtype);
  cache.begin(layout, positions);
  for (int l = 0; l < kLayers; ++l) {
    Tensor qs = Toy::gather(toy.q[l], ids), ks = Toy::gather(toy.k[l], ids),
           vs = Toy::gather(toy.v[l], ids);
    cache.write(l, seq_view(ks, T), seq_view(vs, T));
    Tensor out = Tensor::zeros({B * T, toy.qw});
    attention(toy.dims, cache.mask(), seq_view(qs, T), cache.keys(l), cache.values(l),
              mutable_seq_view(out, T));
    CHECK(relative_error(out, reference_attention(toy.dims, MaskView::self(layout), qs, ks, vs,
                                                  toy.qw, toy.kw)) <= kTol);
  }
  cache.end(true);
  return cache;
}

// One step: token ids[b] for row b, compared with attending over the whole row from scratch.
// `rows` holds each row's kept tokens and is updated when the step is kept.
void step(const Toy& toy, KvCache& cache, std::vector<std::vector<int>>& rows,
          const std::vector<int>& ids, TokenRole role = TokenRole::content,
          const std::vector<std::vector<int>>* source = nullptr) {
  const auto B = static_cast<std::int32_t>(ids.size());
  REQUIRE(cache.rows() == B);
  cache.begin_step(role);
  for (std::int32_t b = 0; b < B; ++b)
    CHECK(cache.pending_positions()[b] == static_cast<std::int32_t>(rows[b].size()));
  for (int l = 0; l < kLayers; ++l) {
    Tensor qs = Toy::gather(toy.q[l], ids), ks = Toy::gather(toy.k[l], ids),
           vs = Toy::gather(toy.v[l], ids);
    cache.write(l, seq_view(ks, 1), seq_view(vs, 1));
    Tensor out = Tensor::zeros({B, toy.qw});
    attention(toy.dims, cache.mask(), seq_view(qs, 1), cache.keys(l), cache.values(l),
              mutable_seq_view(out, 1));
    for (std::int32_t b = 0; b < B; ++b) {
      INFO("layer " << l << ", row " << b);
      CHECK(relative_error(out.f32() + b * toy.qw, toy.attend_all(l, ids[b], rows[b])) <= kTol);
    }
    if (source) {
      Tensor cross = Tensor::zeros({B, toy.qw});
      attention(toy.dims, cache.cross_mask(1), seq_view(qs, 1), cache.cross_keys(l),
                cache.cross_values(l), mutable_seq_view(cross, 1));
      for (std::int32_t b = 0; b < B; ++b)
        CHECK(relative_error(cross.f32() + b * toy.qw, toy.attend_keys(l, ids[b], (*source)[b])) <=
              kTol);
    }
  }
  const bool keep = role == TokenRole::content;
  cache.end(keep);
  if (keep)
    for (std::int32_t b = 0; b < B; ++b) rows[b].push_back(ids[b]);
}

// A cache with no decoder tokens yet whose rows attend to `source` (one encoder memory per
// row, padded to the longest).
KvCache encode(const Toy& toy, const std::vector<std::vector<int>>& source) {
  const auto B = static_cast<std::int32_t>(source.size());
  std::int32_t S = 0;
  for (const auto& s : source) S = std::max<std::int32_t>(S, static_cast<std::int32_t>(s.size()));
  AttentionLayout layout;
  layout.reset(B, S);
  std::vector<int> ids;
  for (std::int32_t b = 0; b < B; ++b)
    for (std::int32_t t = 0; t < S; ++t) {
      const bool real = t < static_cast<std::int32_t>(source[b].size());
      ids.push_back(real ? source[b][t] : -1);
      layout.role[b * S + t] = real ? TokenRole::content : TokenRole::pad;
    }
  KvCache cache(kLayers, toy.dims.kv_heads, toy.dims.head_dim, B, g_kv_dtype);
  cache.set_source(layout);
  for (int l = 0; l < kLayers; ++l) {
    Tensor ks = Toy::gather(toy.k[l], ids), vs = Toy::gather(toy.v[l], ids);
    cache.set_cross(l, seq_view(ks, S), seq_view(vs, S));
  }
  return cache;
}

}  // namespace

TEST_CASE("incremental decoding with a KV cache equals full recomputation",
          "[numerics][kv_cache]") {
  const Toy toy;
  std::vector<std::vector<int>> rows{{1, 2, 3, 4, 5}, {6, 7}, {8, 9, 10}};
  KvCache cache = prefill(toy, rows);
  CHECK(cache.length() == 5);
  CHECK(cache.next_position(1) == 2);
  CHECK(cache.next_rank(1) == 2);
  // Enough steps to grow the capacity several times.
  for (int s = 0; s < 40; ++s) step(toy, cache, rows, {(s * 7) % kVocab, (s * 3 + 1) % kVocab, 11});
  CHECK(cache.length() == 45);
}

TEST_CASE("a query step sees the cache and itself and is not kept", "[numerics][kv_cache]") {
  const Toy toy;
  std::vector<std::vector<int>> rows{{1, 2, 3}, {4}};
  KvCache cache = prefill(toy, rows);
  step(toy, cache, rows, {5, 6});
  step(toy, cache, rows, {40, 41}, TokenRole::query);
  CHECK(cache.length() == 4);
  CHECK(rows[0].size() == 4);
  step(toy, cache, rows, {7, 8});  // the query left no trace
  CHECK(cache.length() == 5);
}

TEST_CASE("select reorders, replicates and drops rows, fork is independent",
          "[numerics][kv_cache]") {
  const Toy toy;
  std::vector<std::vector<int>> rows{{1, 2, 3, 4}, {5, 6}, {7, 8, 9}};
  KvCache cache = prefill(toy, rows);
  step(toy, cache, rows, {10, 11, 12});

  const std::vector<std::int32_t> pick{2, 0, 0, 1};
  cache.select(pick);
  std::vector<std::vector<int>> picked;
  for (auto r : pick) picked.push_back(rows[r]);
  CHECK(cache.rows() == 4);
  CHECK(cache.next_position(0) == 4);
  step(toy, cache, picked, {13, 14, 15, 16});

  KvCache copy = cache.fork();
  std::vector<std::vector<int>> copy_rows = picked;
  step(toy, copy, copy_rows, {17, 18, 19, 20});
  step(toy, copy, copy_rows, {21, 22, 23, 24});
  CHECK(copy.length() == cache.length() + 2);
  step(toy, cache, picked, {25, 26, 27, 28});  // the original did not see the fork's steps

  // Reorders where most rows keep their place (a swap), then a row is replaced by a copy of
  // another.
  for (const std::vector<std::int32_t>& order :
       {std::vector<std::int32_t>{1, 0, 2, 3}, {0, 1, 2, 0}, {0, 3, 2, 3}}) {
    cache.select(order);
    std::vector<std::vector<int>> reordered;
    for (auto r : order) reordered.push_back(picked[r]);
    picked = reordered;
    step(toy, cache, picked, {30, 31, 32, 33});
  }

  cache.select(std::vector<std::int32_t>{3});
  std::vector<std::vector<int>> last{picked[3]};
  step(toy, cache, last, {29});
  CHECK_THROWS_AS(cache.select(std::vector<std::int32_t>{1}), RuntimeError);
}

TEST_CASE("cross-attention memory follows select", "[numerics][kv_cache]") {
  const Toy toy;
  const std::vector<std::vector<int>> source{{30, 31, 32}, {33}, {34, 35}};
  AttentionLayout layout;
  layout.reset(3, 3);
  std::vector<int> ids;
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 3; ++t) {
      const bool real = t < static_cast<int>(source[b].size());
      ids.push_back(real ? source[b][t] : -1);
      if (real) layout.role[b * 3 + t] = TokenRole::content;
    }
  KvCache cache(kLayers, toy.dims.kv_heads, toy.dims.head_dim, 3);
  cache.set_source(layout);
  for (int l = 0; l < kLayers; ++l) {
    Tensor ks = Toy::gather(toy.k[l], ids), vs = Toy::gather(toy.v[l], ids);
    cache.set_cross(l, seq_view(ks, 3), seq_view(vs, 3));
  }
  // The decoder starts empty: the first step sees only itself.
  std::vector<std::vector<int>> rows(3);
  step(toy, cache, rows, {1, 1, 1}, TokenRole::content, &source);
  step(toy, cache, rows, {2, 3, 4}, TokenRole::content, &source);
  cache.select(std::vector<std::int32_t>{1, 1, 2});
  std::vector<std::vector<int>> picked{rows[1], rows[1], rows[2]};
  const std::vector<std::vector<int>> picked_source{source[1], source[1], source[2]};
  step(toy, cache, picked, {5, 6, 7}, TokenRole::content, &picked_source);
}

TEST_CASE("KV cache misuse is reported", "[numerics][kv_cache]") {
  KvCache cache(1, 1, 4, 2);
  AttentionLayout layout;
  layout.reset(3, 2);
  CHECK_THROWS_AS(cache.begin(layout, std::vector<std::int32_t>(6, 0)), RuntimeError);
  layout.reset(2, 2);
  layout.dense.assign(8, 1);
  CHECK_THROWS_AS(cache.begin(layout, std::vector<std::int32_t>(4, 0)), RuntimeError);
  cache.begin_step(TokenRole::content);
  CHECK_THROWS_AS(cache.select(std::vector<std::int32_t>{0}), RuntimeError);
  CHECK_THROWS_AS(cache.write(1, {}, {}), RuntimeError);
  cache.end(false);
  CHECK(cache.length() == 0);
  CHECK_THROWS_AS(cache.begin_step(TokenRole::pad), RuntimeError);
}

TEST_CASE("append_rows joins a new prefill after decoding rows and drops unused columns",
          "[numerics][kv_cache]") {
  const Toy toy;
  std::vector<std::vector<int>> rows{{1, 2, 3, 4, 5, 6}, {7, 8}};
  KvCache cache = prefill(toy, rows);
  for (int s = 0; s < 5; ++s) step(toy, cache, rows, {(s * 5) % kVocab, (s * 9 + 2) % kVocab});
  CHECK(cache.length() == 11);
  // The long row finishes; the short one keeps columns 0-1 (its prompt) and 6-10.
  cache.select(std::vector<std::int32_t>{1});
  rows = {rows[1]};
  std::vector<std::vector<int>> joining{{20, 21, 22}, {23}};
  KvCache incoming = prefill(toy, joining);
  cache.append_rows(std::move(incoming));
  rows.insert(rows.end(), joining.begin(), joining.end());
  CHECK(cache.rows() == 3);
  CHECK(cache.length() == 11);  // nothing unused at the left yet: row 0 starts at column 0
  CHECK(cache.next_position(0) == 7);
  CHECK(cache.next_position(1) == 3);
  CHECK(cache.next_position(2) == 1);
  for (int s = 0; s < 20; ++s) step(toy, cache, rows, {s % kVocab, (s + 30) % kVocab, 49 - s});
  // Row 0 leaves: the 8 columns before the others' prompts are a quarter of the 31, so the
  // next join writes in place and keeps them.
  cache.select(std::vector<std::int32_t>{1, 2});
  rows = {rows[1], rows[2]};
  std::vector<std::vector<int>> more{{40, 41, 42, 43}};
  cache.append_rows(prefill(toy, more));
  rows.push_back(more[0]);
  CHECK(cache.length() == 31);
  for (int s = 0; s < 3; ++s) step(toy, cache, rows, {s, s + 1, s + 2});
  // Only the newest row stays: 27 of its 34 columns are unused, and the next join drops them.
  cache.select(std::vector<std::int32_t>{2});
  rows = {rows[2]};
  std::vector<std::vector<int>> two{{44, 45}};
  cache.append_rows(prefill(toy, two));
  rows.push_back(two[0]);
  CHECK(cache.length() == 7);  // the row's prompt of 4 and 3 steps, right-aligned
  for (int s = 0; s < 3; ++s) step(toy, cache, rows, {s + 10, s + 20});
  // Into an empty cache (every row finished), and joining caches of another shape fails.
  cache.select(std::vector<std::int32_t>{});
  cache.append_rows(prefill(toy, {{1, 2}}));
  std::vector<std::vector<int>> fresh{{1, 2}};
  step(toy, cache, fresh, {3});
  KvCache other(kLayers + 1, toy.dims.kv_heads, toy.dims.head_dim, 1);
  CHECK_THROWS_AS(cache.append_rows(std::move(other)), RuntimeError);
}

namespace {

// Beam-search-like churn: rows keep their slots, replicated rows get copies in freed ones,
// the buffers grow and are compacted, new prefills join into free slots. Every step is
// checked against attending over each row's whole history.
void churn_rows(const Toy& toy) {
  std::mt19937 rng(7);
  std::vector<std::vector<int>> rows{{1, 2, 3}, {4, 5}, {6}};
  KvCache cache = prefill(toy, rows);
  for (int round = 0; round < 60; ++round) {
    INFO("round " << round);
    const auto live = static_cast<std::int32_t>(rows.size());
    std::vector<std::int32_t> pick;
    const int count = std::uniform_int_distribution<int>(1, 6)(rng);
    for (int i = 0; i < count; ++i)
      pick.push_back(std::uniform_int_distribution<std::int32_t>(0, live - 1)(rng));
    cache.select(pick);
    std::vector<std::vector<int>> picked;
    for (auto r : pick) picked.push_back(rows[r]);
    rows = std::move(picked);
    if (round % 7 == 3) {
      std::vector<std::vector<int>> joining{{(round + 1) % kVocab, (round + 2) % kVocab},
                                            {round % kVocab}};
      cache.append_rows(prefill(toy, joining));
      rows.insert(rows.end(), joining.begin(), joining.end());
    }
    std::vector<int> ids;
    for (std::size_t b = 0; b < rows.size(); ++b)
      ids.push_back(static_cast<int>((round * 5 + b * 3) % kVocab));
    step(toy, cache, rows, ids);
  }
}

}  // namespace

TEST_CASE("rows picked, replicated, dropped and joined at random keep their tokens",
          "[numerics][kv_cache]") {
  churn_rows(Toy());
}

TEST_CASE("append_rows joins cross-attention memories of different source lengths",
          "[numerics][kv_cache]") {
  const Toy toy;
  auto start = [&](const std::vector<std::vector<int>>& source) { return encode(toy, source); };
  std::vector<std::vector<int>> source{{30, 31}, {32}};
  KvCache cache = start(source);
  std::vector<std::vector<int>> rows(2);
  step(toy, cache, rows, {1, 2}, TokenRole::content, &source);
  step(toy, cache, rows, {3, 4}, TokenRole::content, &source);
  std::vector<std::vector<int>> joining{{33, 34, 35, 36}};
  cache.append_rows(start(joining));
  source.push_back(joining[0]);
  rows.emplace_back();
  CHECK(cache.source_length() == 4);
  step(toy, cache, rows, {5, 6, 7}, TokenRole::content, &source);
  cache.select(std::vector<std::int32_t>{2, 0});
  std::vector<std::vector<int>> picked{rows[2], rows[0]}, picked_source{source[2], source[0]};
  step(toy, cache, picked, {8, 9}, TokenRole::content, &picked_source);
}

namespace {

// Continuous batching: a batch of records is started at once (`started`) and handed out a
// few rows at a time to the cache being decoded (`decoding`); both keep decoding correctly.
void split_and_join(const Toy& toy) {
  std::vector<std::vector<int>> started_source{{30, 31}, {32, 33, 34}, {35}, {36, 37, 38, 39}};
  KvCache started = encode(toy, started_source);
  std::vector<std::vector<int>> started_rows(4);
  step(toy, started, started_rows, {1, 1, 1, 1}, TokenRole::content, &started_source);
  std::vector<std::vector<int>> source{{40, 41, 42}};
  KvCache decoding = encode(toy, source);
  std::vector<std::vector<int>> rows(1);
  step(toy, decoding, rows, {2}, TokenRole::content, &source);
  step(toy, decoding, rows, {3}, TokenRole::content, &source);

  auto hand_out = [&](std::vector<std::int32_t> leaving) {
    KvCache part = started.split(leaving);
    CHECK(part.rows() == static_cast<std::int32_t>(leaving.size()));
    std::vector<std::vector<int>> kept_source, kept_rows;
    std::vector<char> left(started_source.size(), 0);
    for (auto r : leaving) {
      left[r] = 1;
      source.push_back(started_source[r]);
      rows.push_back(started_rows[r]);
    }
    for (std::size_t r = 0; r < left.size(); ++r)
      if (!left[r]) {
        kept_source.push_back(started_source[r]);
        kept_rows.push_back(started_rows[r]);
      }
    started_source = kept_source;
    started_rows = kept_rows;
    decoding.append_rows(std::move(part));
  };
  hand_out({3, 2});  // the last rows, in reverse: the others stay where they are
  CHECK(started.rows() == 2);
  CHECK(decoding.rows() == 3);
  step(toy, decoding, rows, {4, 5, 6}, TokenRole::content, &source);
  step(toy, started, started_rows, {7, 8}, TokenRole::content, &started_source);
  // Beams: a record's rows share its memory; a finished record leaves.
  decoding.select(std::vector<std::int32_t>{1, 1, 2});
  rows = {rows[1], rows[1], rows[2]};
  source = {source[1], source[1], source[2]};
  step(toy, decoding, rows, {9, 10, 11}, TokenRole::content, &source);
  hand_out({0});  // from the front: the rest is copied
  step(toy, decoding, rows, {12, 13, 14, 15}, TokenRole::content, &source);
  step(toy, started, started_rows, {16}, TokenRole::content, &started_source);
  hand_out({0});
  CHECK(started.rows() == 0);
  started = KvCache();  // the memory the last rows shared is freed: decoding holds its own
  step(toy, decoding, rows, {17, 18, 19, 20, 21}, TokenRole::content, &source);

  // A cache that came from a split (the first admission) rebuilds its memory on a join without
  // ever writing the buffers the rest of its batch still reads.
  std::vector<std::vector<int>> pool_source{
      {20, 21, 22}, {1, 2, 3, 4, 5, 6}, {7, 8}, {13, 14, 15, 16, 17}},
      pool_rows(4);
  KvCache pool = encode(toy, pool_source);
  step(toy, pool, pool_rows, {1, 2, 3, 4}, TokenRole::content, &pool_source);
  KvCache front = pool.split(std::vector<std::int32_t>{3});
  std::vector<std::vector<int>> front_source{pool_source[3]}, front_rows{pool_rows[3]};
  pool_source.pop_back();
  pool_rows.pop_back();
  // The second join's memory (3 slots of 7) would fit the buffer the pool still reads (4 of 6).
  for (const std::vector<int>& joining :
       {std::vector<int>{26, 27, 28, 29}, {30, 31, 32, 33, 34, 35, 36}}) {
    front.append_rows(encode(toy, {joining}));  // shared, then a longer source: rebuilt
    // The pool's 6 columns shrink to what the rows read: the split row's 5, the joining row's.
    CHECK(front.source_length() == std::max<std::int32_t>(5, static_cast<int>(joining.size())));
    front_source.push_back(joining);
    front_rows.emplace_back();
    step(toy, front, front_rows, std::vector<int>(front_rows.size(), 4), TokenRole::content,
         &front_source);
    front.select(std::vector<std::int32_t>{1, 0, 1});  // reorder: the spares are reused
    front.select(std::vector<std::int32_t>{1, 2});
  }
  step(toy, pool, pool_rows, {5, 6, 7}, TokenRole::content, &pool_source);
  CHECK_THROWS_AS(decoding.split(std::vector<std::int32_t>{5}), RuntimeError);
  CHECK_THROWS_AS(decoding.split(std::vector<std::int32_t>{1, 1}), RuntimeError);
}

}  // namespace

TEST_CASE("split hands rows to a new cache that reads the same encoder memory",
          "[numerics][kv_cache]") {
  split_and_join(Toy());
}

TEST_CASE("a bf16 cache holds keys and values in bf16 through select split and append_rows",
          "[numerics][kv_cache]") {
  struct Bf16Caches {  // the helpers' caches are bf16 for this test only
    Bf16Caches() { g_kv_dtype = DType::bf16; }
    ~Bf16Caches() { g_kv_dtype = DType::f32; }
  } scope;
  // Keys and values that bf16 holds exactly: every step equals the f32 reference, so each copy
  // the cache makes (select, grow, split, append_rows) moved whole values.
  const Toy exact(true);
  churn_rows(exact);
  split_and_join(exact);
  // Others are rounded to nearest even when written and widened when read.
  const Toy toy;
  KvCache cache = prefill(Toy(true), {{1, 2, 3}});
  CHECK(cache.dtype() == DType::bf16);
  cache.begin_step(TokenRole::content);
  for (int l = 0; l < kLayers; ++l) {
    Tensor ks = Toy::gather(toy.k[l], {7}), vs = Toy::gather(toy.v[l], {7});
    cache.write(l, seq_view(ks, 1), seq_view(vs, 1));
    const Tensor want_k = Toy::round_trip_bf16(ks), want_v = Toy::round_trip_bf16(vs);
    const SeqView k = cache.keys(l), v = cache.values(l);
    const float* kr = k.row(0) + 3 * k.token_stride;
    const float* vr = v.row(0) + 3 * v.token_stride;
    CHECK(std::vector<float>(kr, kr + toy.kw) ==
          std::vector<float>(want_k.f32(), want_k.f32() + toy.kw));
    CHECK(std::vector<float>(vr, vr + toy.kw) ==
          std::vector<float>(want_v.f32(), want_v.f32() + toy.kw));
    CHECK(std::vector<float>(kr, kr + toy.kw) != std::vector<float>(ks.f32(), ks.f32() + toy.kw));
  }
  cache.end(true);
  CHECK_THROWS_AS(KvCache(1, 1, 8, 1, DType::f16), RuntimeError);
}

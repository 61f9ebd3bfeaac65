// Incremental decoding with the bert plugin: the query stream, and start()/step() with a KV
// cache against full forwards under the causal, UniLM seq2seq and permutation masks.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "bert_support.hpp"

using namespace bert_test;
using masque::Tensor;

namespace {

// Two float32 computations of the same numbers, batched and ordered differently.
constexpr double kTolerance = 1e-5;
constexpr std::int32_t kMask = 103;  // [MASK] in both vocabularies

using Ids = std::vector<std::int32_t>;

// The reference input's 10 real tokens and their token types.
struct Sequence {
  Ids ids, types;
};
Sequence reference_sequence(const std::string& model) {
  const auto& input = reference(model)["input"];
  const std::int32_t real = input["real_length"];
  auto ids = input["input_ids"].get<Ids>();
  auto types = input["token_type_ids"].get<Ids>();
  return {Ids(ids.begin(), ids.begin() + real), Ids(types.begin(), types.begin() + real)};
}
const Ids kOrder{0, 3, 1, 4, 9, 2, 6, 5, 8, 7};

Ids iota(std::int32_t n, std::int32_t from = 0) {
  Ids v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// One row of a batch: tokens, their positions and types, and the mask built for them.
struct Row {
  Ids ids, positions, types;
  masque::SequenceMask mask;
};

masque::Batch make_batch(const std::vector<Row>& rows, std::int32_t extra_pads = 0) {
  std::int32_t length = 0;
  for (const Row& r : rows) length = std::max<std::int32_t>(length, r.mask.size());
  length += extra_pads;
  masque::Batch b;
  b.batch = static_cast<std::int32_t>(rows.size());
  b.length = length;
  const std::size_t n = rows.size() * static_cast<std::size_t>(length);
  b.ids.assign(n, 0);
  b.positions.assign(n, 0);
  b.token_types.assign(n, 0);
  b.attention.reset(b.batch, length);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t t = 0; t < rows[r].ids.size(); ++t) {
      b.ids[r * length + t] = rows[r].ids[t];
      b.positions[r * length + t] = rows[r].positions[t];
      b.token_types[r * length + t] = rows[r].types[t];
    }
    b.attention.set_row(static_cast<std::int32_t>(r), rows[r].mask);
  }
  return b;
}

// Logits [tokens][vocab] of one sequence in a full forward (positions 0..n-1 unless given).
std::vector<std::vector<float>> full_logits(const masque::Model& model, Row row) {
  const std::int32_t vocab = model.info().vocab_size;
  if (row.positions.empty()) row.positions = iota(static_cast<std::int32_t>(row.ids.size()));
  const Tensor logits = model.forward(make_batch({row}, 1)).logits;
  std::vector<std::vector<float>> out;
  for (std::size_t t = 0; t < row.ids.size(); ++t)
    out.emplace_back(logits.f32() + t * vocab, logits.f32() + (t + 1) * vocab);
  return out;
}

double row_diff(const Tensor& logits, std::int32_t row, const std::vector<float>& expected) {
  REQUIRE(logits.dim(-1) == static_cast<std::int64_t>(expected.size()));
  return max_abs_diff(logits.f32() + row * expected.size(), expected.data(), expected.size());
}

Row slice(const Sequence& s, std::int32_t from, std::int32_t to) {
  return {Ids(s.ids.begin() + from, s.ids.begin() + to),
          iota(to - from, from),
          Ids(s.types.begin() + from, s.types.begin() + to),
          {}};
}

}  // namespace

TEST_CASE("bert query stream equals one forward per step with a MASK token at the target",
          "[bert][decode]") {
  const std::string name = GENERATE(as<std::string>{}, "tiny-bert-uncased", "tiny-bert-chinese");
  INFO(name);
  auto model = load_model(model_dir(name));
  auto query = load_mask("permutation", {{"stream", std::string("query")}});
  auto content = load_mask("permutation");
  const Sequence s = reference_sequence(name);
  const std::int32_t n = static_cast<std::int32_t>(s.ids.size());

  Row stream{s.ids, iota(n), s.types, build_mask(*query, n, {}, kOrder)};
  REQUIRE(stream.mask.query_positions == kOrder);
  for (std::int32_t p : stream.mask.query_positions) {
    stream.ids.push_back(kMask);
    stream.positions.push_back(p);
    stream.types.push_back(s.types[p]);
  }
  masque::Batch batch = make_batch({stream}, 2);
  batch.output_rows = iota(n, n);  // the query tokens only
  const Tensor logits = model->forward(batch).logits;
  REQUIRE(logits.dim(0) == n);

  double worst = 0;
  for (std::int32_t t = 0; t < n; ++t) {
    // The content of steps < t in generation order, then the [MASK] for step t.
    Row alone;
    for (std::int32_t u = 0; u < t; ++u) {
      alone.ids.push_back(s.ids[kOrder[u]]);
      alone.positions.push_back(kOrder[u]);
      alone.types.push_back(s.types[kOrder[u]]);
    }
    alone.ids.push_back(kMask);
    alone.positions.push_back(kOrder[t]);
    alone.types.push_back(s.types[kOrder[t]]);
    alone.mask = build_mask(*content, t + 1, {}, iota(t + 1));
    const auto expected = full_logits(*model, alone);
    const double d = row_diff(logits, t, expected.back());
    INFO("step " << t);
    CHECK(d <= kTolerance);
    worst = std::max(worst, d);
  }
  std::printf("%s query stream vs separate forwards: max |error| %.2e\n", name.c_str(), worst);
}

TEST_CASE(
    "bert causal generation with a KV cache equals the full forward and survives select and fork",
    "[bert][decode]") {
  auto model = load_model(model_dir("tiny-bert-uncased"));
  auto causal = load_mask("causal");
  const Sequence a = reference_sequence("tiny-bert-uncased");
  const Sequence b{{101, 7592, 2088, 2003, 1037, 3231, 102, 2009, 2515},
                   {0, 0, 0, 0, 0, 0, 0, 1, 1}};
  auto full = [&](const Sequence& s) {
    return full_logits(*model, {s.ids, {}, s.types, build_mask(*causal, s.ids.size())});
  };
  const auto full_a = full(a), full_b = full(b);

  // Prefixes of different lengths: row 1 is right-padded in the prefill.
  Row pa = slice(a, 0, 4), pb = slice(b, 0, 2);
  pa.mask = build_mask(*causal, 4);
  pb.mask = build_mask(*causal, 2);
  masque::Batch prompt = make_batch({pa, pb});
  prompt.output_rows = {0, 1, 2, 3, 4, 5};
  Tensor logits;
  auto state = model->start(prompt, &logits);
  REQUIRE(state->rows() == 2);
  for (std::int32_t t = 0; t < 4; ++t) CHECK(row_diff(logits, t, full_a[t]) <= kTolerance);
  for (std::int32_t t = 0; t < 2; ++t) CHECK(row_diff(logits, 4 + t, full_b[t]) <= kTolerance);

  std::int32_t na = 4, nb = 2;  // tokens of each row in the cache
  auto step_both = [&](masque::DecodeState& st) {
    const Ids tokens{a.ids[na], b.ids[nb]}, types{a.types[na], b.types[nb]};
    model->step(st, step_input(tokens, {}, types), logits);
    CHECK(row_diff(logits, 0, full_a[na]) <= kTolerance);
    CHECK(row_diff(logits, 1, full_b[nb]) <= kTolerance);
    ++na;
    ++nb;
  };
  step_both(*state);
  step_both(*state);

  // A fork reordered to rows (b, a, b) continues both sequences independently.
  auto forked = state->fork();
  const std::vector<std::int32_t> pick{1, 0, 1};
  forked->select(pick);
  REQUIRE(forked->rows() == 3);
  {
    const Ids tokens{b.ids[nb], a.ids[na], b.ids[nb]}, types{b.types[nb], a.types[na], b.types[nb]};
    model->step(*forked, step_input(tokens, {}, types), logits);
    CHECK(row_diff(logits, 0, full_b[nb]) <= kTolerance);
    CHECK(row_diff(logits, 1, full_a[na]) <= kTolerance);
    CHECK(row_diff(logits, 2, full_b[nb]) <= kTolerance);
  }
  // The original state did not see the fork's step.
  step_both(*state);
  step_both(*state);
  step_both(*state);
  CHECK(na == 9);

  // Dropping a row keeps the other one going.
  const std::vector<std::int32_t> keep_a{0};
  state->select(keep_a);
  const Ids last{a.ids[9]}, last_type{a.types[9]};
  model->step(*state, step_input(last, {}, last_type), logits);
  CHECK(logits.dim(0) == 1);
  CHECK(row_diff(logits, 0, full_a[9]) <= kTolerance);

  // With every row dropped a step is empty, not an error.
  state->select({});
  model->step(*state, step_input({}), logits);
  CHECK(logits.shape() == masque::Shape{0, model->info().vocab_size});
}

TEST_CASE("bert UniLM seq2seq: cached target steps with token type 1 equal the full forward",
          "[bert][decode]") {
  auto model = load_model(model_dir("tiny-bert-uncased"));
  auto seq2seq = load_mask("seq2seq");
  // Source (segment 0) then target (segment 1); the token types are the segments.
  const Sequence a{reference_sequence("tiny-bert-uncased").ids, {0, 0, 0, 0, 0, 0, 1, 1, 1, 1}};
  const Sequence b{{101, 7592, 2088, 102, 2023, 2003, 2019, 102}, {0, 0, 0, 0, 1, 1, 1, 1}};
  auto full = [&](const Sequence& s) {
    return full_logits(*model, {s.ids, {}, s.types, build_mask(*seq2seq, s.ids.size(), s.types)});
  };
  const auto full_a = full(a), full_b = full(b);

  Row sa = slice(a, 0, 6), sb = slice(b, 0, 4);
  sa.mask = build_mask(*seq2seq, 6, sa.types);
  sb.mask = build_mask(*seq2seq, 4, sb.types);
  masque::Batch source = make_batch({sa, sb});
  source.output_rows = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  Tensor logits;
  auto state = model->start(source, &logits);
  for (std::int32_t t = 0; t < 6; ++t) CHECK(row_diff(logits, t, full_a[t]) <= kTolerance);
  for (std::int32_t t = 0; t < 4; ++t) CHECK(row_diff(logits, 6 + t, full_b[t]) <= kTolerance);

  const Ids target_type{1, 1};
  for (std::int32_t k = 0; k < 4; ++k) {
    const Ids tokens{a.ids[6 + k], b.ids[4 + k]};
    model->step(*state, step_input(tokens, {}, target_type), logits);
    INFO("target token " << k);
    CHECK(row_diff(logits, 0, full_a[6 + k]) <= kTolerance);
    CHECK(row_diff(logits, 1, full_b[4 + k]) <= kTolerance);
  }
}

TEST_CASE("bert permutation generation: query steps equal the query stream", "[bert][decode]") {
  auto model = load_model(model_dir("tiny-bert-uncased"));
  auto query = load_mask("permutation", {{"stream", std::string("query")}});
  auto content = load_mask("permutation");
  const Sequence s = reference_sequence("tiny-bert-uncased");
  const std::int32_t n = static_cast<std::int32_t>(s.ids.size());

  // One pass: content logits per position and query logits per step.
  Row stream{s.ids, iota(n), s.types, build_mask(*query, n, {}, kOrder)};
  for (std::int32_t p : kOrder) {
    stream.ids.push_back(kMask);
    stream.positions.push_back(p);
    stream.types.push_back(s.types[p]);
  }
  const Tensor all = model->forward(make_batch({stream})).logits;
  auto expected = [&](std::int32_t row) {
    const std::int32_t vocab = model->info().vocab_size;
    return std::vector<float>(all.f32() + row * vocab, all.f32() + (row + 1) * vocab);
  };

  // Start with the first `prefix` steps of the order (fed in generation order), or nothing.
  const std::int32_t prefix = GENERATE(0, 3);
  INFO("prefix of " << prefix << " steps");
  Row start;
  for (std::int32_t u = 0; u < prefix; ++u) {
    start.ids.push_back(s.ids[kOrder[u]]);
    start.positions.push_back(kOrder[u]);
    start.types.push_back(s.types[kOrder[u]]);
  }
  start.mask = build_mask(*content, prefix, {}, iota(prefix));
  Tensor logits;
  auto state = model->start(make_batch({start}), &logits);
  REQUIRE(logits.dim(0) == prefix);
  for (std::int32_t u = 0; u < prefix; ++u)
    CHECK(row_diff(logits, u, expected(kOrder[u])) <= kTolerance);

  double worst = 0;
  for (std::int32_t t = prefix; t < n; ++t) {
    const std::int32_t p = kOrder[t];
    const Ids position{p}, type{s.types[p]}, mask{kMask}, token{s.ids[p]};
    INFO("step " << t << ", position " << p);
    model->step(*state, step_input(mask, position, type, false), logits);
    const double d = row_diff(logits, 0, expected(n + t));
    CHECK(d <= kTolerance);
    worst = std::max(worst, d);
    model->step(*state, step_input(token, position, type), logits);
    CHECK(row_diff(logits, 0, expected(p)) <= kTolerance);
  }
  std::printf("permutation query steps (prefix %d) vs query stream: max |error| %.2e\n", prefix,
              worst);
}

namespace {

// A step of `width` tokens per row (StepInput::length); the spans must outlive the call.
masque::StepInput block_input(std::span<const masque::TokenId> tokens, std::int32_t width,
                              std::span<const std::int32_t> types, bool append) {
  masque::StepInput in = step_input(tokens, {}, types, append);
  in.length = width;
  return in;
}

}  // namespace

TEST_CASE("bert block-causal: block steps over the KV cache equal the full forward",
          "[bert][decode]") {
  auto model = load_model(model_dir("tiny-bert-uncased"));
  auto blocks = load_mask("block-causal", {{"block_size", std::int64_t{3}}});
  // Sources of 4 and 3 tokens (segment 0), targets of 6 and 5 (segment 1, token type 1): blocks
  // a[4..6] a[7..9] and b[3..5] b[6..7].
  const Sequence a{reference_sequence("tiny-bert-uncased").ids, {0, 0, 0, 0, 1, 1, 1, 1, 1, 1}};
  const Sequence b{{101, 7592, 2088, 2003, 1037, 3231, 102, 2009}, {0, 0, 0, 1, 1, 1, 1, 1}};
  auto full = [&](const Sequence& s) {
    return full_logits(*model, {s.ids, {}, s.types, build_mask(*blocks, s.ids.size(), s.types)});
  };
  const auto full_a = full(a), full_b = full(b);

  Row sa = slice(a, 0, 4), sb = slice(b, 0, 3);
  sa.mask = build_mask(*blocks, 4, sa.types);
  sb.mask = build_mask(*blocks, 3, sb.types);
  auto state = model->start(make_batch({sa, sb}), nullptr);

  // The first blocks, not kept: each row's next rank, so the three tokens see each other; only
  // the logits asked for, in their order.
  const Ids first{a.ids[4], a.ids[5], a.ids[6], b.ids[3], b.ids[4], b.ids[5]};
  const Ids types(6, 1);
  masque::StepInput in = block_input(first, 3, types, false);
  const std::vector<std::int32_t> asked{0, 2, 4};
  in.output_rows = asked;
  Tensor logits;
  model->step(*state, in, logits);
  REQUIRE(logits.dim(0) == 3);
  CHECK(row_diff(logits, 0, full_a[4]) <= kTolerance);
  CHECK(row_diff(logits, 1, full_a[6]) <= kTolerance);
  CHECK(row_diff(logits, 2, full_b[4]) <= kTolerance);

  // The same blocks join the cache, without logits: the tensor is left alone.
  in = block_input(first, 3, types, true);
  in.want_logits = false;
  model->step(*state, in, logits);
  CHECK(logits.dim(0) == 3);

  // The second blocks: row b has two tokens and a pad; ranks and positions from the mask.
  const Ids second{a.ids[7], a.ids[8], a.ids[9], b.ids[6], b.ids[7], 0};
  const masque::SequenceMask ma = build_mask(*blocks, 10, a.types);
  const masque::SequenceMask mb = build_mask(*blocks, 8, b.types);
  const std::vector<std::int32_t> ranks{ma.rank[7], ma.rank[8], ma.rank[9],
                                        mb.rank[6], mb.rank[7], 0};
  const std::vector<std::int32_t> positions{7, 8, 9, 6, 7, 0};
  const std::vector<masque::TokenRole> roles(5, masque::TokenRole::content);
  std::vector<masque::TokenRole> padded = roles;
  padded.push_back(masque::TokenRole::pad);
  in = block_input(second, 3, types, true);
  in.ranks = ranks;
  in.positions = positions;
  in.roles = padded;
  model->step(*state, in, logits);
  REQUIRE(logits.dim(0) == 6);
  for (std::int32_t t = 0; t < 3; ++t) CHECK(row_diff(logits, t, full_a[7 + t]) <= kTolerance);
  for (std::int32_t t = 0; t < 2; ++t) CHECK(row_diff(logits, 3 + t, full_b[6 + t]) <= kTolerance);
}

TEST_CASE("bert causal: a step of several tokens with rising ranks equals one token a step",
          "[bert][decode]") {
  auto model = load_model(model_dir("tiny-bert-uncased"));
  auto causal = load_mask("causal");
  const Sequence a = reference_sequence("tiny-bert-uncased");
  const auto full_a = full_logits(*model, {a.ids, {}, a.types, build_mask(*causal, 10)});
  Row pa = slice(a, 0, 4);
  pa.mask = build_mask(*causal, 4);
  auto state = model->start(make_batch({pa}), nullptr);
  // Tokens 4..6 at once, each ranked above the one before: each sees the earlier ones only.
  const Ids tokens(a.ids.begin() + 4, a.ids.begin() + 7),
      types(a.types.begin() + 4, a.types.begin() + 7);
  const std::vector<std::int32_t> ranks{4, 5, 6};
  masque::StepInput in = block_input(tokens, 3, types, true);
  in.ranks = ranks;
  Tensor logits;
  model->step(*state, in, logits);
  REQUIRE(logits.dim(0) == 3);
  for (std::int32_t t = 0; t < 3; ++t) CHECK(row_diff(logits, t, full_a[4 + t]) <= kTolerance);
  // The cache holds them: the next one-token step continues at position 7, rank 7.
  const Ids next{a.ids[7]}, next_type{a.types[7]};
  model->step(*state, step_input(next, {}, next_type), logits);
  CHECK(row_diff(logits, 0, full_a[7]) <= kTolerance);
}

// Batching must not change any row's results: a padded batch of 32 sources of different
// lengths, rows selected (dropped, replicated, reordered) mid-decoding, and forked states all
// give each row the logits it gets when decoded alone.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "encdec_support.hpp"

using namespace masque;
using namespace masque::test::encdec;

namespace {

constexpr double kTol = 1e-5;

double max_diff(const float* got, const std::vector<float>& want) {
  double d = 0.0;
  for (std::size_t v = 0; v < want.size(); ++v)
    d = std::max(d, std::abs(static_cast<double>(got[v]) - want[v]));
  return d;
}

// Each source decoded alone: its greedy tokens and the logits of every step.
struct Singles {
  std::vector<std::vector<TokenId>> sources;
  std::vector<Greedy> runs;
  // The token row `i` is fed at `step` (step 0: <s>; past its end: </s>, a filler).
  TokenId input(std::size_t i, std::size_t step) const {
    if (step == 0) return kStart;
    return step <= runs[i].tokens.size() ? runs[i].tokens[step - 1] : kEnd;
  }
  // Whether row `i` still has logits to compare at `step`.
  bool alive(std::size_t i, std::size_t step) const { return step < runs[i].logits.size(); }
};

Singles decode_alone(const Model& model, std::size_t n) {
  Singles s;
  s.sources = bench_sources(n);
  for (const auto& source : s.sources) s.runs.push_back(greedy(model, source));
  return s;
}

// One step of `state`, row r fed the single run of rows[r]; returns the largest logit
// difference over the rows still alive.
double step_and_compare(const Model& model, DecodeState& state, const Singles& singles,
                        const std::vector<std::int32_t>& rows, std::size_t step) {
  std::vector<TokenId> tokens;
  for (auto r : rows) tokens.push_back(singles.input(r, step));
  Tensor logits;
  model.step(state, step_input(tokens), logits);
  REQUIRE(logits.dim(0) == static_cast<std::int64_t>(rows.size()));
  double worst = 0.0;
  const std::int64_t vocab = logits.dim(1);
  for (std::size_t r = 0; r < rows.size(); ++r)
    if (singles.alive(rows[r], step))
      worst =
          std::max(worst, max_diff(logits.f32() + r * vocab, singles.runs[rows[r]].logits[step]));
  return worst;
}

std::vector<std::int32_t> all_rows(std::size_t n) {
  std::vector<std::int32_t> rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i] = static_cast<std::int32_t>(i);
  return rows;
}

}  // namespace

TEST_CASE("a padded batch of 32 sources decodes each row as if it were alone", "[encdec]") {
  const LoadedModel model = load_model();
  const Singles singles = decode_alone(*model, 32);
  std::size_t shortest = 99, longest = 0;
  for (const auto& s : singles.sources) {
    shortest = std::min(shortest, s.size());
    longest = std::max(longest, s.size());
  }
  REQUIRE(shortest < longest);  // the batch really is padded

  const std::int32_t vocab = model->info().vocab_size;
  auto state = model->start(source_batch(singles.sources), nullptr);
  std::vector<std::vector<TokenId>> outputs(32);
  std::vector<bool> done(32, false);
  std::vector<TokenId> next(32, kStart);
  double worst = 0.0;
  Tensor logits;
  for (std::size_t step = 0; step < 256 && std::count(done.begin(), done.end(), false); ++step) {
    model->step(*state, step_input(next), logits);
    for (std::size_t r = 0; r < 32; ++r) {
      if (done[r]) continue;
      float* row = logits.f32() + r * vocab;
      worst = std::max(worst, max_diff(row, singles.runs[r].logits[step]));
      block_end_at_first_step(row, static_cast<std::int32_t>(step));
      next[r] = static_cast<TokenId>(std::max_element(row, row + vocab) - row);
      if (next[r] == kEnd)
        done[r] = true;
      else
        outputs[r].push_back(next[r]);
    }
  }
  INFO("largest logit difference " << worst);
  CHECK(worst <= kTol);
  for (std::size_t r = 0; r < 32; ++r) {
    INFO("row " << r);
    CHECK(done[r]);
    CHECK(outputs[r] == singles.runs[r].tokens);
  }
}

TEST_CASE("select drops, replicates and reorders rows mid-decoding", "[encdec]") {
  const LoadedModel model = load_model();
  const Singles singles = decode_alone(*model, 32);
  auto state = model->start(source_batch(singles.sources), nullptr);
  std::vector<std::int32_t> rows = all_rows(32);
  double worst = 0.0;
  for (std::size_t step = 0; step < 3; ++step)
    worst = std::max(worst, step_and_compare(*model, *state, singles, rows, step));

  rows = {5, 0, 0, 31, 17, 17, 17, 2, 9};  // every other row dropped
  state->select(rows);
  CHECK(state->rows() == 9);
  for (std::size_t step = 3; step < 6; ++step)
    worst = std::max(worst, step_and_compare(*model, *state, singles, rows, step));

  // A selection of the current rows (as beam search does every step).
  const std::vector<std::int32_t> again{8, 1, 1, 0, 4};
  state->select(again);
  std::vector<std::int32_t> picked;
  for (auto r : again) picked.push_back(rows[r]);
  for (std::size_t step = 6; step < 12; ++step)
    worst = std::max(worst, step_and_compare(*model, *state, singles, picked, step));
  CHECK(worst <= kTol);

  // All rows dropped: a step has nothing to compute.
  state->select(std::vector<std::int32_t>{});
  Tensor logits;
  model->step(*state, step_input({}), logits);
  CHECK(logits.numel() == 0);
}

TEST_CASE("a forked state decodes independently of its original", "[encdec]") {
  const LoadedModel model = load_model();
  const Singles singles = decode_alone(*model, 6);
  const std::vector<std::int32_t> rows = all_rows(6);
  auto state = model->start(source_batch(singles.sources), nullptr);
  double worst = step_and_compare(*model, *state, singles, rows, 0);

  auto fork = state->fork();
  // The original goes astray for two steps; the fork continues as if nothing happened.
  const std::vector<TokenId> astray(6, 7);
  Tensor logits;
  model->step(*state, step_input(astray), logits);
  model->step(*state, step_input(astray), logits);
  for (std::size_t step = 1; step < 4; ++step)
    worst = std::max(worst, step_and_compare(*model, *fork, singles, rows, step));

  // And the other way round: a fork of the fork, stepped, leaves its source intact.
  auto second = fork->fork();
  model->step(*second, step_input(astray), logits);
  for (std::size_t step = 4; step < 8; ++step)
    worst = std::max(worst, step_and_compare(*model, *fork, singles, rows, step));
  CHECK(worst <= kTol);
  CHECK(state->rows() == 6);
}

TEST_CASE("explicit step positions and query steps follow the StepInput contract", "[encdec]") {
  const LoadedModel model = load_model();
  const Singles singles = decode_alone(*model, 4);
  const std::vector<std::int32_t> rows = all_rows(4);
  auto state = model->start(source_batch(singles.sources), nullptr);
  double worst = 0.0;
  for (std::size_t step = 0; step < 5; ++step) {
    // A query (append = false) sees the cache and itself and leaves no trace.
    const std::vector<TokenId> query(4, 9);
    StepInput peek = step_input(query);
    peek.append = false;
    Tensor ignored;
    model->step(*state, peek, ignored);
    // Explicit positions equal to the step index are what the cache would pick.
    std::vector<TokenId> tokens;
    for (auto r : rows) tokens.push_back(singles.input(r, step));
    const std::vector<std::int32_t> positions(4, static_cast<std::int32_t>(step));
    StepInput input = step_input(tokens);
    input.positions = positions;
    Tensor logits;
    model->step(*state, input, logits);
    for (std::size_t r = 0; r < rows.size(); ++r)
      if (singles.alive(r, step))
        worst = std::max(worst,
                         max_diff(logits.f32() + r * logits.dim(1), singles.runs[r].logits[step]));
  }
  CHECK(worst <= kTol);
}

TEST_CASE("a step of several target tokens with rising ranks equals one token a step", "[encdec]") {
  const LoadedModel model = load_model();
  const Singles singles = decode_alone(*model, 4);
  auto state = model->start(source_batch(singles.sources), nullptr);
  const std::vector<TokenId> start(4, kStart);
  Tensor logits;
  model->step(*state, step_input(start), logits);
  // Steps 1..3 of every row at once: each token sees the earlier ones and the source memory.
  constexpr std::int32_t kWidth = 3;
  std::vector<TokenId> tokens;
  std::vector<std::int32_t> ranks;
  for (std::size_t r = 0; r < 4; ++r)
    for (std::int32_t t = 0; t < kWidth; ++t) {
      tokens.push_back(singles.input(r, 1 + static_cast<std::size_t>(t)));
      ranks.push_back(1 + t);
    }
  StepInput input = step_input(tokens);
  input.length = kWidth;
  input.ranks = ranks;
  model->step(*state, input, logits);
  REQUIRE(logits.dim(0) == 4 * kWidth);
  double worst = 0.0;
  std::size_t compared = 0;
  for (std::size_t r = 0; r < 4; ++r)
    for (std::int32_t t = 0; t < kWidth; ++t) {
      const std::size_t step = 1 + static_cast<std::size_t>(t);
      if (!singles.alive(r, step)) continue;
      worst = std::max(worst, max_diff(logits.f32() + (r * kWidth + t) * logits.dim(1),
                                       singles.runs[r].logits[step]));
      ++compared;
    }
  CHECK(compared > 4);
  CHECK(worst <= kTol);
}

TEST_CASE("beam-style selects keep each row's memory and history together", "[encdec]") {
  // Two records replicated into beams that diverge, then reordered within a record (the KV
  // cache leaves the cross memory in place) and across records (it moves it).
  const LoadedModel model = load_model();
  const auto sources = bench_sources(2);
  auto state = model->start(source_batch(sources), nullptr);
  Tensor logits, expected, got;
  model->step(*state, step_input(std::vector<TokenId>{kStart, kStart}), logits);
  state->select(std::vector<std::int32_t>{0, 0, 0, 1, 1, 1});
  model->step(*state, step_input(std::vector<TokenId>{5, 6, 7, 8, 9, 10}), logits);

  for (const std::vector<std::int32_t>& order :
       {std::vector<std::int32_t>{2, 0, 1, 4, 5, 3}, std::vector<std::int32_t>{3, 4, 5, 0, 1, 2},
        std::vector<std::int32_t>{5, 5, 0, 1, 1, 2}}) {
    auto reference = state->fork();  // never selected: row r is the original row r
    state->select(order);
    const std::vector<TokenId> next{11, 12, 13, 14, 15, 16};
    std::vector<TokenId> unselected(6);
    model->step(*state, step_input(next), got);
    for (std::size_t i = 0; i < 6; ++i) {
      // Row i of the selected state is original row order[i] fed next[i].
      unselected.assign(6, next[i]);
      model->step(*reference->fork(), step_input(unselected), expected);
      const std::int64_t vocab = got.dim(1);
      std::vector<float> want(expected.f32() + order[i] * vocab,
                              expected.f32() + (order[i] + 1) * vocab);
      CHECK(max_diff(got.f32() + i * vocab, want) <= kTol);
    }
  }
}

TEST_CASE("one model decodes batches on several threads at once", "[encdec][threads]") {
  const LoadedModel model = load_model();
  const auto sources = bench_sources(16);
  std::vector<Greedy> alone;
  for (const auto& s : sources) alone.push_back(greedy(*model, s));
  std::vector<Greedy> concurrent(sources.size());
  {
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (std::size_t i = t; i < sources.size(); i += 4)
          concurrent[i] = greedy(*model, sources[i]);
      });
    for (auto& th : threads) th.join();
  }
  for (std::size_t i = 0; i < sources.size(); ++i) {
    CHECK(concurrent[i].tokens == alone[i].tokens);
    CHECK(concurrent[i].logits == alone[i].logits);
  }
}

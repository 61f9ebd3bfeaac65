// Decoding with the KV cache (start/step, select, fork, query steps) and attention layouts other
// than causal, for the gpt2 and llama plugins: every result is compared with a full forward of
// the same tokens, which the reference tests pin to float64 references.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lm_reference.hpp"
#include "masque/threading.hpp"
#include "model_plugin.hpp"

using namespace masque;
using namespace masque::test;

namespace {

constexpr double kTol = 1e-4;

struct ModelCase {
  std::string plugin;
  std::filesystem::path folder;
  TokenId first_id;  // random tokens are drawn from [first_id, vocab)
};

std::vector<ModelCase> model_cases() {
  return {{"gpt2", shared_dir() / "models" / "tiny-gpt2", 0},
          {"llama", shared_dir() / "models" / "stories260k", 3}};
}

// One intra-op thread: the parallel paths are the numerics' concern and oversubscribed OpenMP
// threads make small models crawl on a busy machine.
struct Harness {
  explicit Harness(const ModelCase& c)
      : model(load_model(c.plugin, c.folder)), first_id(c.first_id), rng(7) {}

  std::vector<TokenId> random_tokens(std::size_t n) {
    std::uniform_int_distribution<TokenId> pick(first_id, model->info().vocab_size - 1);
    std::vector<TokenId> ids(n);
    for (auto& id : ids) id = pick(rng);
    return ids;
  }

  // Logits of the last token of `ids` (positions 0..n-1, or `positions`), by a full forward
  // under the causal layout.
  std::vector<float> full_last(const std::vector<TokenId>& ids,
                               const std::vector<std::int32_t>& positions = {}) {
    Batch batch = make_batch(*causal, {ids});
    if (!positions.empty()) batch.positions = positions;
    batch.output_rows = {batch.length - 1};
    const ForwardResult out = model->forward(batch);
    const auto row = row_of(out.logits, 0);
    return {row.begin(), row.end()};
  }

  ThreadScope threads{1};
  LoadedPlugin<Model> model;
  LoadedPlugin<MaskStrategy> causal = load_mask("causal");
  TokenId first_id;
  std::mt19937 rng;
};

double max_diff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, double{std::abs(a[i] - b[i])});
  return d;
}

// Every row of `logits` against a full forward of that row's tokens so far.
double check_rows(Harness& h, const Tensor& logits,
                  const std::vector<std::vector<TokenId>>& sequences) {
  REQUIRE(logits.dim(0) == static_cast<std::int64_t>(sequences.size()));
  double worst = 0;
  for (std::size_t r = 0; r < sequences.size(); ++r)
    worst = std::max(worst, max_diff(row_of(logits, r), h.full_last(sequences[r])));
  CHECK(worst < kTol);
  return worst;
}

// A prefill of `prompts` (right-padded) that asks for each row's last token.
std::unique_ptr<DecodeState> start(Harness& h, const std::vector<std::vector<TokenId>>& prompts,
                                   Tensor& logits) {
  Batch batch = make_batch(*h.causal, prompts);
  for (std::size_t r = 0; r < prompts.size(); ++r)
    batch.output_rows.push_back(
        static_cast<std::int32_t>(r * batch.length + prompts[r].size() - 1));
  return h.model->start(batch, &logits);
}

// One token per row appended to `state` and `sequences`.
void step(Harness& h, DecodeState& state, std::vector<std::vector<TokenId>>& sequences,
          Tensor& logits) {
  const std::vector<TokenId> tokens = h.random_tokens(sequences.size());
  StepInput input;
  input.tokens = tokens;
  h.model->step(state, input, logits);
  for (std::size_t r = 0; r < sequences.size(); ++r) sequences[r].push_back(tokens[r]);
}

}  // namespace

TEST_CASE("models: cached steps equal full forwards, rows of different prompt lengths") {
  for (const ModelCase& c : model_cases()) {
    DYNAMIC_SECTION(c.plugin) {
      Harness h(c);
      std::vector<std::vector<TokenId>> seqs = {h.random_tokens(5), h.random_tokens(11),
                                                h.random_tokens(1)};
      Tensor logits;
      auto state = start(h, seqs, logits);
      REQUIRE(state->rows() == 3);
      double worst = check_rows(h, logits, seqs);
      for (int s = 0; s < 12; ++s) {
        step(h, *state, seqs, logits);
        REQUIRE(logits.shape() == Shape{3, h.model->info().vocab_size});
        worst = std::max(worst, check_rows(h, logits, seqs));
      }
      WARN(c.plugin << ": incremental vs full forward, max |logit diff| " << worst);
    }
  }
}

TEST_CASE("models: select() reorders, replicates and drops rows mid-way") {
  for (const ModelCase& c : model_cases()) {
    DYNAMIC_SECTION(c.plugin) {
      Harness h(c);
      std::vector<std::vector<TokenId>> seqs = {h.random_tokens(4), h.random_tokens(9),
                                                h.random_tokens(2)};
      Tensor logits;
      auto state = start(h, seqs, logits);
      for (int s = 0; s < 3; ++s) step(h, *state, seqs, logits);

      const std::vector<std::int32_t> pick = {2, 0, 0, 1};
      state->select(pick);
      REQUIRE(state->rows() == 4);
      seqs = {seqs[2], seqs[0], seqs[0], seqs[1]};
      for (int s = 0; s < 4; ++s) {  // the replicated rows now diverge
        step(h, *state, seqs, logits);
        check_rows(h, logits, seqs);
      }
      const std::vector<std::int32_t> keep = {3, 1};
      state->select(keep);
      seqs = {seqs[3], seqs[1]};
      for (int s = 0; s < 2; ++s) {
        step(h, *state, seqs, logits);
        check_rows(h, logits, seqs);
      }
      // Every row finished: a step on no rows is empty.
      state->select({});
      REQUIRE(state->rows() == 0);
      seqs.clear();
      step(h, *state, seqs, logits);
      CHECK(logits.shape() == Shape{0, h.model->info().vocab_size});
    }
  }
}

TEST_CASE("models: fork() gives an independent copy of the cache") {
  for (const ModelCase& c : model_cases()) {
    DYNAMIC_SECTION(c.plugin) {
      Harness h(c);
      std::vector<std::vector<TokenId>> seqs = {h.random_tokens(6), h.random_tokens(3)};
      Tensor logits;
      auto state = start(h, seqs, logits);
      step(h, *state, seqs, logits);

      auto copy = state->fork();
      REQUIRE(copy->rows() == 2);
      auto copy_seqs = seqs;
      for (int s = 0; s < 3; ++s) {
        step(h, *copy, copy_seqs, logits);
        check_rows(h, logits, copy_seqs);
      }
      for (int s = 0; s < 2; ++s) {  // the original did not see the copy's tokens
        step(h, *state, seqs, logits);
        check_rows(h, logits, seqs);
      }
      REQUIRE(seqs != copy_seqs);
    }
  }
}

TEST_CASE("models: a query step (append = false) is seen by nothing that follows") {
  for (const ModelCase& c : model_cases()) {
    DYNAMIC_SECTION(c.plugin) {
      Harness h(c);
      std::vector<std::vector<TokenId>> seqs = {h.random_tokens(7), h.random_tokens(4)};
      Tensor logits;
      auto state = start(h, seqs, logits);
      step(h, *state, seqs, logits);

      // A query at each row's next position sees the cache and itself.
      const std::vector<TokenId> queries = h.random_tokens(2);
      StepInput query;
      query.tokens = queries;
      query.append = false;
      h.model->step(*state, query, logits);
      for (std::size_t r = 0; r < 2; ++r) {
        auto with_query = seqs[r];
        with_query.push_back(queries[r]);
        CHECK(max_diff(row_of(logits, r), h.full_last(with_query)) < kTol);
      }
      // A query for a later position (predicting a chosen position of a permutation order).
      const std::vector<std::int32_t> later = {11, 9};
      query.positions = later;
      h.model->step(*state, query, logits);
      for (std::size_t r = 0; r < 2; ++r) {
        auto ids = seqs[r];
        ids.push_back(queries[r]);
        std::vector<std::int32_t> positions(ids.size());
        for (std::size_t t = 0; t < positions.size(); ++t) positions[t] = static_cast<int>(t);
        positions.back() = later[r];
        CHECK(max_diff(row_of(logits, r), h.full_last(ids, positions)) < kTol);
      }
      // The next kept token is computed as if the queries had never been there.
      for (int s = 0; s < 3; ++s) {
        step(h, *state, seqs, logits);
        check_rows(h, logits, seqs);
      }
    }
  }
}

TEST_CASE(
    "models: non-causal layouts (permutation order, query stream) through forward and cache") {
  for (const ModelCase& c : model_cases()) {
    DYNAMIC_SECTION(c.plugin) {
      Harness h(c);
      const std::vector<TokenId> x = h.random_tokens(6);
      const std::vector<std::int32_t> order = {3, 1, 5, 0, 2, 4};
      Params params;
      params.set("order", std::string("3,1,5,0,2,4"));
      params.set("seed", std::int64_t{0});
      params.set("stream", std::string("content"));
      auto permutation = load_mask("permutation", params);

      // Token pi_t sees pi_0..pi_t: the causal run over the permuted tokens, original positions.
      const std::vector<TokenId> prompt = x;
      Batch batch = make_batch(*permutation, {prompt});
      const ForwardResult out = h.model->forward(batch);
      for (std::size_t t = 0; t < order.size(); ++t) {
        std::vector<TokenId> ids;
        std::vector<std::int32_t> positions;
        for (std::size_t i = 0; i <= t; ++i) {
          ids.push_back(x[order[i]]);
          positions.push_back(order[i]);
        }
        CHECK(max_diff(row_of(out.logits, order[t]), h.full_last(ids, positions)) < kTol);
      }

      // Cached: a step token ranks above the whole permuted prompt.
      batch.output_rows = {order.back()};
      Tensor logits;
      auto state = h.model->start(batch, &logits);
      const std::vector<TokenId> next = h.random_tokens(1);
      StepInput input;
      input.tokens = next;
      h.model->step(*state, input, logits);
      std::vector<TokenId> ids;
      std::vector<std::int32_t> positions;
      for (auto p : order) {
        ids.push_back(x[p]);
        positions.push_back(p);
      }
      ids.push_back(next[0]);
      positions.push_back(6);  // the row's next position: one past its highest
      CHECK(max_diff(row_of(logits, 0), h.full_last(ids, positions)) < kTol);

      // Query stream: query t carries position pi_t and sees the content of pi_0..pi_{t-1}.
      params.set("stream", std::string("query"));
      auto query_stream = load_mask("permutation", params);
      MaskRequest request;
      request.length = 6;
      const SequenceMask mask = query_stream->build(request);
      REQUIRE(mask.size() == 12);
      const TokenId query_id = h.random_tokens(1)[0];
      Batch q;
      q.batch = 1;
      q.length = 12;
      q.ids = x;
      q.positions = {0, 1, 2, 3, 4, 5};
      for (std::size_t t = 0; t < 6; ++t) {
        q.ids.push_back(query_id);
        q.positions.push_back(mask.query_positions[t]);
      }
      q.attention.reset(1, 12);
      q.attention.set_row(0, mask);
      const ForwardResult qout = h.model->forward(q);
      for (std::size_t t = 0; t < 6; ++t) {
        std::vector<TokenId> seen;
        std::vector<std::int32_t> seen_positions;
        for (std::size_t i = 0; i < t; ++i) {
          seen.push_back(x[order[i]]);
          seen_positions.push_back(order[i]);
        }
        seen.push_back(query_id);
        seen_positions.push_back(order[t]);
        CHECK(max_diff(row_of(qout.logits, 6 + t), h.full_last(seen, seen_positions)) < kTol);
      }
    }
  }
}

TEST_CASE("models: concurrent forward() and step() calls on different batches and states") {
  for (const ModelCase& c : model_cases()) {
    DYNAMIC_SECTION(c.plugin) {
      Harness h(c);
      constexpr int kThreads = 3;
      std::vector<std::vector<std::vector<TokenId>>> batches;
      std::vector<std::vector<TokenId>> steps;
      for (int i = 0; i < kThreads; ++i) {
        batches.push_back({h.random_tokens(3 + 4 * i), h.random_tokens(8)});
        steps.push_back(h.random_tokens(2 * 5));
      }
      // Serial results first.
      auto run = [&](int i, Tensor& forward_logits, Tensor& step_logits) {
        const Batch batch = make_batch(*h.causal, batches[i]);
        forward_logits = h.model->forward(batch).logits;
        auto state = h.model->start(batch, nullptr);
        for (int s = 0; s < 5; ++s) {
          StepInput input;
          input.tokens = std::span<const TokenId>(steps[i]).subspan(2 * s, 2);
          h.model->step(*state, input, step_logits);
        }
      };
      std::vector<Tensor> want_forward(kThreads), want_step(kThreads);
      for (int i = 0; i < kThreads; ++i) run(i, want_forward[i], want_step[i]);

      std::vector<Tensor> got_forward(kThreads), got_step(kThreads);
      std::vector<std::thread> threads;
      for (int i = 0; i < kThreads; ++i)
        threads.emplace_back([&, i] {
          ThreadScope one(1);
          for (int repeat = 0; repeat < 3; ++repeat) run(i, got_forward[i], got_step[i]);
        });
      for (auto& t : threads) t.join();
      for (int i = 0; i < kThreads; ++i) {
        REQUIRE(got_forward[i].shape() == want_forward[i].shape());
        for (std::int64_t r = 0; r < want_forward[i].dim(0); ++r)
          CHECK(max_diff(row_of(got_forward[i], r), row_of(want_forward[i], r)) < 1e-6);
        for (std::int64_t r = 0; r < 2; ++r)
          CHECK(max_diff(row_of(got_step[i], r), row_of(want_step[i], r)) < 1e-6);
      }
    }
  }
}

TEST_CASE("models: two intra-op threads give the one-thread numbers") {
  for (const ModelCase& c : model_cases()) {
    DYNAMIC_SECTION(c.plugin) {
      Harness h(c);
      const Batch batch = make_batch(*h.causal, {h.random_tokens(20), h.random_tokens(13)});
      const ForwardResult one = h.model->forward(batch);
      ThreadScope two(2);
      const ForwardResult both = h.model->forward(batch);
      REQUIRE(both.logits.shape() == one.logits.shape());
      for (std::int64_t r = 0; r < one.logits.dim(0); ++r)
        CHECK(max_diff(row_of(both.logits, r), row_of(one.logits, r)) < 1e-5);
    }
  }
}

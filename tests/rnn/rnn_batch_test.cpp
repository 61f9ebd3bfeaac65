// Padding never changes a result: a batch of mixed-length sources decodes every record as it
// decodes alone; select(), fork() and query steps (append = false) keep rows independent.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "masque/threading.hpp"
#include "rnn_support.hpp"

using namespace masque;
using namespace masque::test::rnn;

namespace {

constexpr double kLowPrecisionBatchTolerance = 1e-2;

// Teacher-forced logits of every record, all in one batch: rows[r][step] = logits.
std::vector<std::vector<std::vector<float>>> batched_logits(
    const Model& model, const std::vector<std::vector<TokenId>>& sources,
    const std::vector<std::vector<TokenId>>& targets) {
  const std::int32_t vocab = model.info().vocab_size;
  auto state = model.start(source_batch(sources, 7), nullptr);  // pads hold a real id
  std::size_t steps = 0;
  for (const auto& t : targets) steps = std::max(steps, t.size() + 1);
  std::vector<std::vector<std::vector<float>>> out(sources.size());
  for (std::size_t s = 0; s < steps; ++s) {
    std::vector<TokenId> tokens;
    for (const auto& t : targets)  // past its target a row is fed </s> (and not compared)
      tokens.push_back(s == 0 ? model.info().decoder_start
                              : (s - 1 < t.size() ? t[s - 1] : model.info().eos));
    Tensor logits;
    StepInput input;
    input.tokens = tokens;
    model.step(*state, input, logits);
    for (std::size_t r = 0; r < sources.size(); ++r)
      if (s <= targets[r].size())
        out[r].emplace_back(logits.f32() + r * vocab, logits.f32() + (r + 1) * vocab);
  }
  return out;
}

}  // namespace

TEST_CASE("rnn-seq2seq: a batch of mixed lengths equals one record at a time", "[rnn]") {
  const std::string dtype = GENERATE(as<std::string>{}, "f32", "bf16", "int8");
  if (dtype == "bf16" && !test::cpu_has_bf16_matmuls()) return;  // rnn_bf16_test: the error
  // int8 on the fixtures whose products are wide enough to run in int8.
  for (const std::string& name : dtype == "int8" ? wide_fixture_names() : fixture_names()) {
    const auto loaded = load_model(name, dtype);
    std::vector<std::vector<TokenId>> sources, targets;
    const auto e = expected(name);  // (not a temporary: the loop would read a dead object)
    REQUIRE(e["records"].size() == 7);
    for (const auto& r : e["records"]) {
      sources.push_back(r["source"].get<std::vector<TokenId>>());
      targets.push_back(r["target"].get<std::vector<TokenId>>());
    }
    const auto together = batched_logits(*loaded, sources, targets);
    double worst = 0;
    for (std::size_t r = 0; r < sources.size(); ++r) {
      const auto alone = batched_logits(*loaded, {sources[r]}, {targets[r]});
      REQUIRE(alone[0].size() == together[r].size());
      for (std::size_t s = 0; s < alone[0].size(); ++s)
        for (std::size_t v = 0; v < alone[0][s].size(); ++v)
          worst = std::max(worst, double{std::abs(alone[0][s][v] - together[r][s][v])});
    }
    INFO(name << " " << dtype << ": worst |logit alone - logit in a batch| = " << worst);
    // Only the GEMM blocking of a different row count may differ: float rounding (in bf16 also
    // where that rounding tips a state element's bfloat16 rounding the other way; in int8, where
    // it tips an element's quantization; each row is quantized with its own scale).
    CHECK(worst < (dtype == "f32" ? 1e-5 : kLowPrecisionBatchTolerance));
  }
}

TEST_CASE("rnn-seq2seq: the encoder's input-gate tables change no result", "[rnn]") {
  // The fixtures' vocabularies are small, so the tables are on by default; gate_table_mib 0
  // computes the first layer's input gates per call instead (one product over the batch).
  const std::string dtype = GENERATE(as<std::string>{}, "f32", "bf16", "int8");
  if (dtype == "bf16" && !test::cpu_has_bf16_matmuls()) return;  // rnn_bf16_test: the error
  for (const std::string& name : dtype == "int8" ? wide_fixture_names() : fixture_names()) {
    const auto tables = load_model(name, dtype);
    const auto per_call = load_model(name, dtype, 0);
    std::vector<std::vector<TokenId>> sources, targets;
    const auto e = expected(name);  // (not a temporary: the loop would read a dead object)
    for (const auto& r : e["records"]) {
      sources.push_back(r["source"].get<std::vector<TokenId>>());
      targets.push_back(r["target"].get<std::vector<TokenId>>());
    }
    const auto a = batched_logits(*tables, sources, targets);
    const auto b = batched_logits(*per_call, sources, targets);
    double worst = 0;
    for (std::size_t r = 0; r < a.size(); ++r)
      for (std::size_t s = 0; s < a[r].size(); ++s)
        for (std::size_t v = 0; v < a[r][s].size(); ++v)
          worst = std::max(worst, double{std::abs(a[r][s][v] - b[r][s][v])});
    INFO(name << " " << dtype << ": worst |logit with tables - logit without| = " << worst);
    // The same products on the same rows: only the GEMM blocking of another row count differs
    // (in bf16 and int8 that rounding may tip a later rounding, as in a batch).
    CHECK(worst < (dtype == "f32" ? 1e-5 : kLowPrecisionBatchTolerance));
  }
  CHECK_THROWS_WITH(load_model("gru-luong", "f32", -5),
                    Catch::Contains("gate_table_mib must be >= 0"));
}

TEST_CASE("rnn-seq2seq: the encoder's directions on two threads give one thread's results",
          "[rnn]") {
  // With two intra-op threads the encoder runs its forward and backward directions at the same
  // time (masque::run_pair); the first layer's gates come from the tables or from products.
  const std::string dtype = GENERATE(as<std::string>{}, "f32", "bf16", "int8");
  if (dtype == "bf16" && !test::cpu_has_bf16_matmuls()) return;  // rnn_bf16_test: the error
  for (const std::string& name : dtype == "int8" ? wide_fixture_names() : fixture_names())
    for (const std::int64_t table_mib : {std::int64_t{-1}, std::int64_t{0}}) {
      const auto loaded = table_mib < 0 ? load_model(name, dtype) : load_model(name, dtype, 0);
      std::vector<std::vector<TokenId>> sources, targets;
      const auto e = expected(name);  // (not a temporary: the loop would read a dead object)
      for (const auto& r : e["records"]) {
        sources.push_back(r["source"].get<std::vector<TokenId>>());
        targets.push_back(r["target"].get<std::vector<TokenId>>());
      }
      const auto one = batched_logits(*loaded, sources, targets);
      std::vector<std::vector<std::vector<float>>> two;
      {
        ThreadScope threads(2);
        two = batched_logits(*loaded, sources, targets);
      }
      double worst = 0;
      for (std::size_t r = 0; r < one.size(); ++r)
        for (std::size_t s = 0; s < one[r].size(); ++s)
          for (std::size_t v = 0; v < one[r][s].size(); ++v)
            worst = std::max(worst, double{std::abs(one[r][s][v] - two[r][s][v])});
      INFO(name << " " << dtype << " tables " << (table_mib < 0 ? "on" : "off")
                << ": worst |logit on 1 thread - on 2| = " << worst);
      // The directions' products run on one thread either way; the products after the encoder
      // (attention keys, decoder) may block their sums otherwise on two.
      CHECK(worst < (dtype == "f32" ? 1e-5 : kLowPrecisionBatchTolerance));
    }
}

TEST_CASE("rnn-seq2seq: select() replicates and drops rows, fork() is a deep copy", "[rnn]") {
  const auto loaded = load_model("lstm-luong");
  const Model& model = *loaded;
  const std::int32_t vocab = model.info().vocab_size;
  auto state = model.start(source_batch({{4, 5, 6}, {7, 8}}), nullptr);
  const TokenId start[] = {1, 1};
  Tensor logits;
  StepInput input;
  input.tokens = start;
  model.step(*state, input, logits);

  auto copy = state->fork();
  const std::int32_t rows[] = {1, 1, 0};
  state->select(rows);
  REQUIRE(state->rows() == 3);
  const TokenId next[] = {9, 9, 9};
  input.tokens = next;
  Tensor selected;
  model.step(*state, input, selected);

  const TokenId next2[] = {9, 9};
  input.tokens = next2;
  Tensor original;
  model.step(*copy, input, original);  // the fork did not see select()
  for (std::int32_t v = 0; v < vocab; ++v) {
    CHECK(selected.f32()[v] == original.f32()[vocab + v]);
    CHECK(selected.f32()[vocab + v] == original.f32()[vocab + v]);
    CHECK(selected.f32()[2 * vocab + v] == original.f32()[v]);
  }
  const std::int32_t bad[] = {3};
  CHECK_THROWS_AS(state->select(bad), RuntimeError);
}

TEST_CASE("rnn-seq2seq: a query step (append = false) leaves the state as it was", "[rnn]") {
  const auto loaded = load_model("gru-bahdanau");
  const Model& model = *loaded;
  auto a = model.start(source_batch({{4, 5, 6}}), nullptr);
  auto b = a->fork();
  const TokenId start[] = {1}, query[] = {13}, next[] = {5};
  Tensor la, lb;
  StepInput input;
  input.tokens = start;
  model.step(*a, input, la);
  model.step(*b, input, lb);
  input.tokens = query;
  input.append = false;
  model.step(*a, input, la);  // not kept
  input.tokens = next;
  input.append = true;
  model.step(*a, input, la);
  model.step(*b, input, lb);
  for (std::int32_t v = 0; v < model.info().vocab_size; ++v) CHECK(la.f32()[v] == lb.f32()[v]);
}

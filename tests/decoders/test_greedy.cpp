// The greedy decoder on hand-computed cases of the story model.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

#include "decoder_test_helpers.hpp"

using namespace masque;
using namespace masque::test;

namespace {

double ln(double p) {
  return std::log(p);
}

void require_logprobs(const Hypothesis& h, const std::vector<double>& expected) {
  REQUIRE(h.logprobs.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i)
    REQUIRE(h.logprobs[i] == Approx(expected[i]).margin(1e-6));
}

double sum(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0);
}

Hypothesis greedy_one(const Overrides& overrides, FakeRecord record = {},
                      LogitsModel model = story_model()) {
  auto results = decode_with("greedy", overrides, kStoryVocab, {record}, std::move(model));
  REQUIRE(results.size() == 1);
  REQUIRE(results[0].hypotheses.size() == 1);
  return results[0].hypotheses[0];
}

}  // namespace

TEST_CASE("greedy follows the most likely token and scores like CTranslate2") {
  const Hypothesis h = greedy_one({});
  REQUIRE(h.tokens == std::vector<TokenId>{A, C, D});
  REQUIRE(h.finished);
  const std::vector<double> lp{ln(0.5), ln(0.9), ln(0.9), ln(0.9)};  // </s> included
  require_logprobs(h, lp);
  REQUIRE(h.score == Approx(sum(lp) / 4).margin(1e-6));  // length counts </s>
}

TEST_CASE("greedy length_penalty changes the normalization only") {
  const Hypothesis raw = greedy_one({{"length_penalty", 0.0}});
  REQUIRE(raw.tokens == std::vector<TokenId>{A, C, D});
  REQUIRE(raw.score == Approx(ln(0.5 * 0.9 * 0.9 * 0.9)).margin(1e-6));
  const Hypothesis half = greedy_one({{"length_penalty", 0.5}});
  REQUIRE(half.score == Approx(ln(0.5 * 0.9 * 0.9 * 0.9) / 2).margin(1e-6));
}

TEST_CASE("greedy stops at max_new_tokens without finishing") {
  const Hypothesis h = greedy_one({{"max_new_tokens", std::int64_t{2}}});
  REQUIRE(h.tokens == std::vector<TokenId>{A, C});
  REQUIRE_FALSE(h.finished);
  require_logprobs(h, {ln(0.5), ln(0.9)});
  REQUIRE(h.score == Approx((ln(0.5) + ln(0.9)) / 2).margin(1e-6));
}

TEST_CASE("the stepper's max_steps limits a record too") {
  FakeRecord rec;
  rec.max_steps = 1;
  const Hypothesis h = greedy_one({}, rec);
  REQUIRE(h.tokens == std::vector<TokenId>{A});
  REQUIRE_FALSE(h.finished);
}

TEST_CASE("greedy min_new_tokens blocks the end token and renormalizes") {
  const Hypothesis h = greedy_one({{"min_new_tokens", std::int64_t{5}}});
  // </s> is blocked at steps 0-4, so the other probabilities are renormalized there; after d
  // (step 3), a takes 0.03 / 0.1. Steps 5 and 6 are free: d, then </s>.
  REQUIRE(h.tokens == std::vector<TokenId>{A, C, D, A, C, D});
  REQUIRE(h.finished);
  const std::vector<double> lp{ln(0.5 / 0.99), ln(0.9 / 0.96), ln(0.9 / 0.95), ln(0.3),
                               ln(0.9 / 0.96), ln(0.9),        ln(0.9)};
  require_logprobs(h, lp);
  REQUIRE(h.score == Approx(sum(lp) / 7).margin(1e-6));
}

TEST_CASE("any of several end tokens ends a hypothesis") {
  const Hypothesis h = greedy_one({{"end_tokens", std::vector<std::int64_t>{END, D}}});
  REQUIRE(h.tokens == std::vector<TokenId>{A, C});
  REQUIRE(h.finished);
  require_logprobs(h, {ln(0.5), ln(0.9), ln(0.9)});
  REQUIRE(h.score == Approx((ln(0.5) + 2 * ln(0.9)) / 3).margin(1e-6));
}

TEST_CASE("end_tokens replaces the stepper's default end tokens") {
  // With only x as end token, </s> is an ordinary token: after d comes </s>, then a (0.25).
  const Hypothesis h = greedy_one(
      {{"end_tokens", std::vector<std::int64_t>{X}}, {"max_new_tokens", std::int64_t{6}}});
  REQUIRE(h.tokens == std::vector<TokenId>{A, C, D, END, A, C});
  REQUIRE_FALSE(h.finished);
}

TEST_CASE("a forced prefix is emitted, not scored, and counted in the length") {
  FakeRecord rec;
  rec.prefix = {B, D};  // forced, even though b -> d is unlikely
  const Hypothesis h = greedy_one({}, rec);
  REQUIRE(h.tokens == std::vector<TokenId>{B, D});
  REQUIRE(h.finished);
  require_logprobs(h, {ln(0.9)});                        // only the </s> after d is scored
  REQUIRE(h.score == Approx(ln(0.9) / 3).margin(1e-6));  // b, d, </s>
}

TEST_CASE("an end token inside the forced prefix does not end the hypothesis") {
  FakeRecord rec;
  rec.prefix = {END};
  const Hypothesis h = greedy_one({}, rec);
  // After </s> the most likely token is a (0.25), then c, d, </s>.
  REQUIRE(h.tokens == std::vector<TokenId>{END, A, C, D});
  REQUIRE(h.finished);
  require_logprobs(h, {ln(0.25), ln(0.9), ln(0.9), ln(0.9)});
}

TEST_CASE("a forced prefix longer than the limit is cut") {
  FakeRecord rec;
  rec.prefix = {B, D, A, C};
  const Hypothesis h = greedy_one({{"max_new_tokens", std::int64_t{3}}}, rec);
  REQUIRE(h.tokens == std::vector<TokenId>{B, D, A});
  REQUIRE_FALSE(h.finished);
  REQUIRE(h.logprobs.empty());
  REQUIRE(h.score == 0.0);
}

TEST_CASE("min_new_tokens counts the forced prefix") {
  FakeRecord rec;
  rec.prefix = {A, C, D};
  // Step 3 (after the prefix) is not below min_new_tokens = 3: </s> is allowed at once.
  const Hypothesis h = greedy_one({{"min_new_tokens", std::int64_t{3}}}, rec);
  REQUIRE(h.tokens == std::vector<TokenId>{A, C, D});
  REQUIRE(h.finished);
}

TEST_CASE("greedy repetition_penalty discourages tokens of the prompt and the output") {
  //                     x     a     </s>   b     c     d
  const std::vector<float> logits{0.1f, 2.0f, -1.0f, 1.5f, 0.3f, -0.5f};
  FakeRecord rec;
  rec.context = {A};
  const Hypothesis h =
      greedy_one({{"repetition_penalty", 2.0}, {"max_new_tokens", std::int64_t{3}}}, rec,
                 constant_model(logits));
  // Step 0: a (in the prompt) drops to 1.0 and b (1.5) wins; step 1: b drops to 0.75, a wins.
  REQUIRE(h.tokens == std::vector<TokenId>{B, A, A});
  const std::vector<double> step0{0.1, 1.0, -1.0, 1.5, 0.3, -0.5};
  double z = 0;
  for (double x : step0) z += std::exp(x);
  REQUIRE(h.logprobs[0] == Approx(1.5 - std::log(z)).margin(1e-6));
}

TEST_CASE("greedy no_repeat_ngram_size avoids repeating bigrams") {
  const std::vector<float> logits{0.f, 2.f, -1.f, 1.f, 0.5f, -0.5f};
  const Overrides limit{{"max_new_tokens", std::int64_t{4}}};
  REQUIRE(greedy_one(limit, {}, constant_model(logits)).tokens == std::vector<TokenId>{A, A, A, A});
  Overrides blocked = limit;
  blocked["no_repeat_ngram_size"] = std::int64_t{2};
  REQUIRE(greedy_one(blocked, {}, constant_model(logits)).tokens ==
          std::vector<TokenId>{A, A, B, A});
}

TEST_CASE("a fixed-length stepper gets exactly max_steps tokens, end tokens are ordinary") {
  FakeRecord rec;
  rec.max_steps = 6;
  FakeStepper stepper(kStoryVocab, {rec}, story_model(), {END}, /*fixed_length=*/true);
  auto results = make_decoder("greedy", {{"end_tokens", std::vector<std::int64_t>{END}},
                                         {"max_new_tokens", std::int64_t{2}}})
                     ->decode(stepper);
  const Hypothesis& h = results[0].hypotheses[0];
  REQUIRE(h.tokens == std::vector<TokenId>{A, C, D, END, A, C});
  REQUIRE(h.logprobs.size() == 6);
  REQUIRE_FALSE(h.finished);
}

TEST_CASE("greedy drops finished rows from the stepper") {
  std::vector<FakeRecord> records(3);
  records[0].max_steps = 1;
  records[1].max_steps = 3;
  records[2].max_steps = 5;
  FakeStepper stepper(8, records, hashed_model(7), {});
  auto results = make_decoder("greedy")->decode(stepper);
  REQUIRE(stepper.rows_per_step() == std::vector<std::size_t>{3, 2, 2, 1, 1});
  for (std::size_t r = 0; r < 3; ++r)
    REQUIRE(results[r].hypotheses[0].tokens.size() ==
            static_cast<std::size_t>(records[r].max_steps));
}

TEST_CASE("a record with nothing to decode gets one empty hypothesis") {
  std::vector<FakeRecord> records(2);
  records[0].max_steps = 0;
  FakeStepper stepper(kStoryVocab, records, story_model());
  auto results = make_decoder("greedy")->decode(stepper);
  REQUIRE(results[0].hypotheses.size() == 1);
  REQUIRE(results[0].hypotheses[0].tokens.empty());
  REQUIRE(results[0].hypotheses[0].score == 0.0);
  REQUIRE(results[1].hypotheses[0].tokens == std::vector<TokenId>{A, C, D});
  REQUIRE(stepper.rows_per_step().front() == 1);
}

TEST_CASE("greedy results do not depend on the batch") {
  const auto records = varied_records(9, 11, 5, true);
  const Overrides o{{"repetition_penalty", 1.3}, {"no_repeat_ngram_size", std::int64_t{2}}};
  const auto batch = decode_with("greedy", o, 11, records, hashed_model(3), {2, 5});
  for (std::size_t r = 0; r < records.size(); ++r) {
    const auto alone = decode_with("greedy", o, 11, {records[r]}, hashed_model(3), {2, 5});
    require_same(alone[0], batch[r]);
  }
}

TEST_CASE("greedy ends a hypothesis where the stepper's stop strings say, keeping its token") {
  FakeStepper stepper(kStoryVocab, {FakeRecord{}}, story_model(), {END});
  stepper.set_stop_rule([](std::span<const TokenId> t) {
    return t.size() >= 2 && t[t.size() - 2] == A && t.back() == C;
  });
  const auto results = make_decoder("greedy", {})->decode(stepper);
  const Hypothesis& h = results.at(0).hypotheses.at(0);
  REQUIRE(h.tokens == std::vector<TokenId>{A, C});
  REQUIRE(h.finished);
  require_logprobs(h, {ln(0.5), ln(0.9)});
  REQUIRE(h.score == Approx((ln(0.5) + ln(0.9)) / 2).margin(1e-6));  // no end token to count
  REQUIRE(stepper.rows_per_step().size() == 2);                      // no step after the stop
}

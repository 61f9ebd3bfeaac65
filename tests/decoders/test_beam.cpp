// The beam decoder: hand-traced cases of CTranslate2's algorithm on the story model, an
// exhaustive regime checked against brute force, and a plain reference implementation on
// many option combinations.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <thread>

#include "decoder_test_helpers.hpp"
#include "masque/error.hpp"
#include "reference_search.hpp"

using namespace masque;
using namespace masque::test;

namespace {

double ln(double p) {
  return std::log(p);
}

std::vector<Hypothesis> beam_story(const Overrides& overrides, FakeRecord record = {}) {
  auto results = decode_with("beam", overrides, kStoryVocab, {record}, story_model());
  REQUIRE(results.size() == 1);
  return results[0].hypotheses;
}

void require_hypothesis(const Hypothesis& h, const std::vector<TokenId>& tokens, double score) {
  REQUIRE(h.tokens == tokens);
  REQUIRE(h.score == Approx(score).margin(1e-6));
}

Overrides beam_options(std::int64_t k, double patience, double lp, std::int64_t n) {
  return {{"beam_size", k}, {"patience", patience}, {"length_penalty", lp}, {"num_hypotheses", n}};
}

}  // namespace

TEST_CASE("beam search finds the likelier short story greedy misses") {
  // Step 1 candidates: a c (.45), b </s> (.405), a </s> (.02), a b (.015): b </s> finishes
  // and its slot goes to a b (a </s> is an end token). Step 2: a c </s> finishes second.
  const auto hyps = beam_story(beam_options(2, 1.0, 1.0, 2));
  REQUIRE(hyps.size() == 2);
  require_hypothesis(hyps[0], {B}, ln(0.45 * 0.9) / 2);
  REQUIRE(hyps[0].finished);
  REQUIRE(hyps[0].logprobs.size() == 2);
  REQUIRE(hyps[0].logprobs[0] == Approx(ln(0.45)).margin(1e-6));
  REQUIRE(hyps[0].logprobs[1] == Approx(ln(0.9)).margin(1e-6));
  require_hypothesis(hyps[1], {A, C}, ln(0.5 * 0.9 * 0.05) / 3);
}

TEST_CASE("patience keeps the beam going until more hypotheses are finished") {
  // round(2 * 2) = 4 finished: a c d </s> (step 3) and a c d b </s> (step 4) join.
  const auto hyps = beam_story(beam_options(2, 2.0, 1.0, 3));
  REQUIRE(hyps.size() == 3);
  require_hypothesis(hyps[0], {A, C, D}, ln(0.5 * 0.9 * 0.9 * 0.9) / 4);
  require_hypothesis(hyps[1], {B}, ln(0.45 * 0.9) / 2);
  require_hypothesis(hyps[2], {A, C, D, B}, ln(0.5 * 0.9 * 0.9 * 0.025 * 0.9) / 5);
}

TEST_CASE("length_penalty 0 ranks raw sums and stops once the top beam finished") {
  // Candidate 0 first finishes at step 3 (a c d </s>); by then b and a c are finished too.
  for (double patience : {1.0, 2.0}) {
    const auto hyps = beam_story(beam_options(2, patience, 0.0, 2));
    REQUIRE(hyps.size() == 2);
    require_hypothesis(hyps[0], {B}, ln(0.45 * 0.9));
    require_hypothesis(hyps[1], {A, C, D}, ln(0.5 * 0.9 * 0.9 * 0.9));
  }
}

TEST_CASE("beam with a forced prefix: no score, counted length, secondary </s> demoted") {
  FakeRecord rec;
  rec.prefix = {A};
  // At the first free step the candidates are c, </s>, b, x of beam 0: the </s> in position 1
  // becomes token 0 with score -1e10, so "a" alone never finishes.
  const auto hyps = beam_story(beam_options(2, 1.0, 1.0, 2), rec);
  REQUIRE(hyps.size() == 2);
  require_hypothesis(hyps[0], {A, C, D}, ln(0.9 * 0.9 * 0.9) / 4);
  REQUIRE(hyps[0].logprobs.size() == 3);  // c, d, </s>
  require_hypothesis(hyps[1], {A, C}, ln(0.9 * 0.05) / 3);
}

TEST_CASE("beam records with different prefixes, limits and finishing steps") {
  std::vector<FakeRecord> records(3);
  records[0].prefix = {A};
  records[1].max_steps = 2;
  records[2].prefix = {B, D, A};
  FakeStepper stepper(kStoryVocab, records, story_model());
  const auto results = make_decoder("beam", beam_options(2, 1.0, 1.0, 1))->decode(stepper);
  require_hypothesis(results[0].hypotheses[0], {A, C, D}, ln(0.9 * 0.9 * 0.9) / 4);
  // Limit 2: both slots finish at step 1; a c (.45, unfinished) beats b </s> (.405).
  require_hypothesis(results[1].hypotheses[0], {A, C}, ln(0.5 * 0.9) / 2);
  REQUIRE_FALSE(results[1].hypotheses[0].finished);
  require_hypothesis(results[2].hypotheses[0], {B, D, A, C, D}, ln(0.9 * 0.9 * 0.9) / 6);
}

TEST_CASE("beam_size 1 is greedy search, exactly") {
  for (std::uint64_t seed : {1, 2, 3}) {
    const auto records = varied_records(10, 11, seed, true);
    for (const Overrides& o :
         {Overrides{}, Overrides{{"length_penalty", 0.0}},
          Overrides{{"length_penalty", 0.7}, {"min_new_tokens", std::int64_t{3}}},
          Overrides{{"repetition_penalty", 1.4},
                    {"no_repeat_ngram_size", std::int64_t{2}},
                    {"max_new_tokens", std::int64_t{6}}}}) {
      Overrides beam = o;
      beam["beam_size"] = std::int64_t{1};
      require_same(decode_with("beam", beam, 11, records, hashed_model(seed), {2, 5}),
                   decode_with("greedy", o, 11, records, hashed_model(seed), {2, 5}));
    }
  }
}

TEST_CASE("an exhaustive beam finds the brute-force best hypotheses") {
  // With K = 64 over 4 tokens and 4 steps every real prefix stays in the beam, and patience
  // 4 (256 finished) cannot stop the search before the last step.
  const std::int32_t vocab = 4;
  for (double lp : {1.0, 0.5, 2.0}) {
    for (double penalty : {1.0, 1.5}) {
      INFO("length_penalty " << lp << ", repetition_penalty " << penalty);
      SearchSpec spec;
      spec.vocab = vocab;
      spec.model = hashed_model(17);
      spec.end_tokens = {2};
      spec.options.max_new_tokens = 4;
      spec.options.length_penalty = lp;
      spec.options.repetition_penalty = penalty;
      std::vector<FakeRecord> records(3);
      records[1].context = {1, 3};
      records[2].context = {0};
      const auto results = decode_with("beam",
                                       {{"beam_size", std::int64_t{64}},
                                        {"patience", 4.0},
                                        {"num_hypotheses", std::int64_t{5}},
                                        {"length_penalty", lp},
                                        {"repetition_penalty", penalty},
                                        {"max_new_tokens", std::int64_t{4}}},
                                       vocab, records, spec.model, {2});
      for (std::size_t r = 0; r < records.size(); ++r) {
        const auto expected = brute_force(spec, records[r], 5);
        REQUIRE(results[r].hypotheses.size() == 5);
        for (std::size_t i = 0; i < 5; ++i) {
          const Hypothesis& got = results[r].hypotheses[i];
          REQUIRE(got.tokens == expected[i].tokens);
          REQUIRE(got.finished == expected[i].finished);
          REQUIRE(got.score == Approx(expected[i].score).epsilon(1e-12));
        }
      }
    }
  }
}

TEST_CASE("beam search matches the plain reference on many option combinations") {
  int combination = 0;
  for (std::int32_t vocab : {5, 9, 12}) {
    for (std::int32_t k : {1, 2, 3, 4}) {
      for (double patience : {0.5, 1.0, 1.5, 2.0}) {
        for (double lp : {0.0, 0.6, 1.0, 1.4}) {
          ++combination;
          SearchSpec spec;
          spec.vocab = vocab;
          spec.model = hashed_model(static_cast<std::uint64_t>(combination));
          spec.end_tokens =
              combination % 3 == 0 ? std::vector<TokenId>{2, 4} : std::vector<TokenId>{2};
          spec.beam_size = k;
          spec.patience = patience;
          const auto most = static_cast<std::int32_t>(std::round(static_cast<float>(k * patience)));
          if (most < 1) continue;
          spec.num_hypotheses = 1 + combination % most;
          spec.options.length_penalty = lp;
          spec.options.max_new_tokens = std::vector<std::int32_t>{3, 6, 256}[combination % 3];
          spec.options.min_new_tokens = combination % 4 == 1 ? 2 : 0;
          spec.options.repetition_penalty = combination % 5 == 2 ? 1.3 : 1.0;
          spec.options.no_repeat_ngram_size = combination % 7 == 3 ? 2 : 0;
          const auto records =
              varied_records(8, vocab, static_cast<std::uint64_t>(combination), true);
          std::vector<std::int64_t> ends(spec.end_tokens.begin(), spec.end_tokens.end());
          const Overrides o{
              {"beam_size", std::int64_t{k}},
              {"patience", patience},
              {"length_penalty", lp},
              {"num_hypotheses", std::int64_t{spec.num_hypotheses}},
              {"max_new_tokens", std::int64_t{spec.options.max_new_tokens}},
              {"min_new_tokens", std::int64_t{spec.options.min_new_tokens}},
              {"repetition_penalty", spec.options.repetition_penalty},
              {"no_repeat_ngram_size", std::int64_t{spec.options.no_repeat_ngram_size}},
              {"end_tokens", ends}};
          const auto results = decode_with("beam", o, vocab, records, spec.model, {});
          for (std::size_t r = 0; r < records.size(); ++r) {
            INFO("combination " << combination << " (vocab " << vocab << ", K " << k
                                << ", patience " << patience << ", lp " << lp << "), record " << r);
            DecodeResult expected{reference_beam(spec, records[r])};
            require_same(results[r], expected);
          }
        }
      }
    }
  }
}

TEST_CASE("beam n-best lists are sorted and distinct") {
  const auto records = varied_records(12, 11, 40, false);
  const auto results =
      decode_with("beam", beam_options(4, 1.0, 1.0, 4), 11, records, hashed_model(40), {2});
  std::size_t multi = 0;
  for (const auto& r : results) {
    std::set<std::vector<TokenId>> seen;
    for (std::size_t i = 0; i < r.hypotheses.size(); ++i) {
      if (i > 0) REQUIRE(r.hypotheses[i - 1].score >= r.hypotheses[i].score);
      REQUIRE(seen.insert(r.hypotheses[i].tokens).second);
    }
    multi += r.hypotheses.size() > 1;
  }
  REQUIRE(multi > 6);
}

TEST_CASE("more patience never gives a worse best hypothesis") {
  const auto records = varied_records(12, 11, 50, false);
  const auto base =
      decode_with("beam", beam_options(3, 1.0, 1.0, 1), 11, records, hashed_model(50), {2});
  const auto patient =
      decode_with("beam", beam_options(3, 3.0, 1.0, 1), 11, records, hashed_model(50), {2});
  int better = 0;
  for (std::size_t r = 0; r < records.size(); ++r) {
    REQUIRE(patient[r].hypotheses[0].score >= base[r].hypotheses[0].score);
    better += patient[r].hypotheses[0].score > base[r].hypotheses[0].score;
  }
  REQUIRE(better > 0);
}

TEST_CASE("beam drops finished records from the stepper") {
  std::vector<FakeRecord> records(3);
  records[0].max_steps = 1;
  records[1].max_steps = 3;
  records[2].max_steps = 5;
  FakeStepper stepper(8, records, hashed_model(7), {});
  make_decoder("beam", beam_options(2, 1.0, 1.0, 1))->decode(stepper);
  // One row per record at the first step, then two beams per live record.
  REQUIRE(stepper.rows_per_step() == std::vector<std::size_t>{3, 4, 4, 2, 2});
}

TEST_CASE("beam on a fixed-length stepper returns max_steps tokens for every hypothesis") {
  std::vector<FakeRecord> records(2);
  records[0].max_steps = 5;
  records[1].max_steps = 2;
  FakeStepper stepper(kStoryVocab, records, story_model(), {END}, /*fixed_length=*/true);
  const auto results = make_decoder("beam", beam_options(3, 1.0, 1.0, 3))->decode(stepper);
  for (std::size_t r = 0; r < 2; ++r) {
    REQUIRE(results[r].hypotheses.size() == 3);
    for (const Hypothesis& h : results[r].hypotheses) {
      REQUIRE(h.tokens.size() == static_cast<std::size_t>(records[r].max_steps));
      REQUIRE_FALSE(h.finished);
    }
  }
  // a c d </s> a: the end token is an ordinary token here.
  REQUIRE(results[0].hypotheses[0].tokens == std::vector<TokenId>{A, C, D, END, A});
}

TEST_CASE("one beam decoder serves concurrent decodes") {
  auto decoder = make_decoder("beam", beam_options(3, 1.5, 1.0, 2));
  const auto records = varied_records(9, 10, 60, true);
  FakeStepper reference_stepper(10, records, hashed_model(60), {2});
  const auto expected = decoder->decode(reference_stepper);
  std::vector<DecodeResult> got[2];
  std::thread workers[2];
  for (int t = 0; t < 2; ++t)
    workers[t] = std::thread([&, t] {
      for (int repeat = 0; repeat < 20; ++repeat) {
        FakeStepper stepper(10, records, hashed_model(60), {2});
        got[t] = decoder->decode(stepper);
      }
    });
  for (auto& w : workers) w.join();
  require_same(got[0], expected);
  require_same(got[1], expected);
}

TEST_CASE("beam rejects more hypotheses than it can finish") {
  REQUIRE_THROWS_AS(make_decoder("beam", beam_options(2, 1.0, 1.0, 3)), ConfigError);
  REQUIRE_NOTHROW(make_decoder("beam", beam_options(2, 1.5, 1.0, 3)));
  REQUIRE_THROWS_AS(make_decoder("beam", beam_options(2, 0.0, 1.0, 1)), ConfigError);
}

TEST_CASE("beam search finishes a candidate at the stepper's stop strings, keeping its token") {
  // Step 1: a c (.45) completes the stop "ends in c" and b </s> (.405) ends: two finished, as
  // many as beam_size and patience 1 ask for.
  FakeStepper stepper(kStoryVocab, {FakeRecord{}}, story_model(), {END});
  stepper.set_stop_rule([](std::span<const TokenId> t) { return !t.empty() && t.back() == C; });
  const auto results = make_decoder("beam", beam_options(2, 1.0, 1.0, 2))->decode(stepper);
  const auto& hyps = results.at(0).hypotheses;
  REQUIRE(hyps.size() == 2);
  require_hypothesis(hyps[0], {A, C}, ln(0.5 * 0.9) / 2);  // its length has no end token
  REQUIRE(hyps[0].finished);
  require_hypothesis(hyps[1], {B}, ln(0.45 * 0.9) / 2);
  REQUIRE(hyps[1].finished);
}

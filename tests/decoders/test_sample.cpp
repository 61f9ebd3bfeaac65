// The sample decoder: reproducibility per record, and the support and frequencies of its
// draws (fixed seeds, so these checks are deterministic).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

#include "decoder_test_helpers.hpp"

using namespace masque;
using namespace masque::test;

namespace {

constexpr std::int32_t kVocab = 13;

// `draws` one-token samples from fixed logits, one record each (records differ by id only).
std::map<TokenId, int> draw_counts(const Overrides& overrides, const std::vector<float>& logits,
                                   int draws) {
  std::vector<FakeRecord> records(static_cast<std::size_t>(draws));
  for (int i = 0; i < draws; ++i) {
    records[i].id = static_cast<std::uint64_t>(i);
    records[i].max_steps = 1;
  }
  const auto results = decode_with("sample", overrides, static_cast<std::int32_t>(logits.size()),
                                   records, constant_model(logits), {});
  std::map<TokenId, int> counts;
  for (const auto& r : results) ++counts[r.hypotheses[0].tokens.at(0)];
  return counts;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p;
  double z = 0;
  for (float x : logits) z += std::exp(x / temperature);
  for (float x : logits) p.push_back(std::exp(x / temperature) / z);
  return p;
}

// The observed count is within 5 standard deviations of the binomial expectation.
void require_frequency(int count, int draws, double p) {
  const double mean = draws * p;
  const double sd = std::sqrt(draws * p * (1 - p));
  INFO("count " << count << ", expected " << mean << " +- " << sd);
  REQUIRE(std::abs(count - mean) <= 5 * sd + 1);
}

}  // namespace

TEST_CASE("sampling a record does not depend on its batch, position or thread") {
  const Overrides o{{"seed", std::int64_t{1234}}, {"max_new_tokens", std::int64_t{12}}};
  auto batch = varied_records(8, kVocab, 11, true);
  FakeRecord target;
  target.id = 42;
  target.context = {3, 1};
  batch[3] = target;
  const auto alone = decode_with("sample", o, kVocab, {target}, hashed_model(9));
  const auto in_batch = decode_with("sample", o, kVocab, batch, hashed_model(9));
  require_same(alone[0], in_batch[3]);
  REQUIRE(alone[0].hypotheses[0].tokens.size() > 1);

  // One decoder object, two threads, each with its own stepper.
  auto decoder = make_decoder("sample", o);
  std::vector<DecodeResult> from_thread[2];
  std::vector<FakeRecord> inputs[2] = {batch, {batch[5], target}};
  std::thread workers[2];
  for (int t = 0; t < 2; ++t)
    workers[t] = std::thread([&, t] {
      for (int repeat = 0; repeat < 20; ++repeat) {
        FakeStepper stepper(kVocab, inputs[t], hashed_model(9));
        from_thread[t] = decoder->decode(stepper);
      }
    });
  for (auto& w : workers) w.join();
  require_same(from_thread[0], in_batch);
  require_same(from_thread[1][1], alone[0]);
  require_same(from_thread[1][0], in_batch[5]);
}

TEST_CASE("different seeds give different samples") {
  const auto records = varied_records(8, kVocab, 2, false);
  std::vector<std::vector<DecodeResult>> runs;
  for (std::int64_t seed : {0, 1, 2})
    runs.push_back(decode_with("sample", {{"seed", seed}, {"max_new_tokens", std::int64_t{10}}},
                               kVocab, records, hashed_model(4), {}));
  auto tokens = [](const std::vector<DecodeResult>& run) {
    std::vector<std::vector<TokenId>> out;
    for (const auto& r : run) out.push_back(r.hypotheses[0].tokens);
    return out;
  };
  REQUIRE(tokens(runs[0]) != tokens(runs[1]));
  REQUIRE(tokens(runs[1]) != tokens(runs[2]));
  REQUIRE(tokens(runs[0]) != tokens(runs[2]));
  // And the same seed again gives the same samples.
  require_same(
      runs[1],
      decode_with("sample", {{"seed", std::int64_t{1}}, {"max_new_tokens", std::int64_t{10}}},
                  kVocab, records, hashed_model(4), {}));
}

TEST_CASE("sampling at temperature 0, near 0, or with top_k 1 is greedy") {
  const auto records = varied_records(7, kVocab, 8, true);
  const Overrides shared{{"repetition_penalty", 1.2}, {"min_new_tokens", std::int64_t{2}}};
  const auto greedy = decode_with("greedy", shared, kVocab, records, hashed_model(6), {2});
  for (const Overrides& extra : {Overrides{{"temperature", 0.0}}, Overrides{{"temperature", 1e-6}},
                                 Overrides{{"top_k", std::int64_t{1}}}}) {
    Overrides o = shared;
    o.insert(extra.begin(), extra.end());
    require_same(decode_with("sample", o, kVocab, records, hashed_model(6), {2}), greedy);
  }
}

TEST_CASE("unrestricted sampling follows softmax(logits / temperature)") {
  const std::vector<float> logits{1.0f, 0.2f, -0.5f, 2.0f, 0.0f};
  const int draws = 6000;
  for (double temperature : {1.0, 0.5, 2.0}) {
    INFO("temperature " << temperature);
    const auto counts = draw_counts({{"temperature", temperature}}, logits, draws);
    const auto p = softmax(logits, temperature);
    for (std::size_t t = 0; t < logits.size(); ++t)
      require_frequency(counts.count(t) ? counts.at(t) : 0, draws, p[t]);
  }
}

TEST_CASE("top_k restricts the draws to the k best tokens") {
  const std::vector<float> logits{1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 0.9f};
  const int draws = 4000;
  const auto counts = draw_counts({{"top_k", std::int64_t{3}}}, logits, draws);
  REQUIRE(counts.size() == 3);  // tokens 3, 0 and 5
  const double z = std::exp(2.0) + std::exp(1.0) + std::exp(0.9);
  require_frequency(counts.at(3), draws, std::exp(2.0) / z);
  require_frequency(counts.at(0), draws, std::exp(1.0) / z);
  require_frequency(counts.at(5), draws, std::exp(0.9) / z);
}

TEST_CASE("top_p keeps the smallest set of best tokens reaching the mass") {
  //                          0.5           0.3           0.1           0.05          0.05
  const std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.1f), std::log(0.05f),
                                  std::log(0.05f)};
  const int draws = 4000;
  const auto counts = draw_counts({{"top_p", 0.75}}, logits, draws);
  REQUIRE(counts.size() == 2);  // 0.5 < 0.75 <= 0.8
  require_frequency(counts.at(0), draws, 0.5 / 0.8);
  // With top_k 3 first, the mass is over 0.9: 0.5/0.9 < 0.85 <= 0.8/0.9.
  const auto both = draw_counts({{"top_p", 0.85}, {"top_k", std::int64_t{3}}}, logits, draws);
  REQUIRE(both.size() == 2);
  REQUIRE(draw_counts({{"top_p", 0.92}}, logits, draws).size() == 4);  // 0.9 < 0.92
}

TEST_CASE("top_p finds nuclei larger than its first guess") {
  // 300 tokens with slowly decreasing logits: the 0.9 nucleus has far more than 64 tokens.
  std::vector<float> logits(300);
  for (std::size_t t = 0; t < logits.size(); ++t)
    logits[t] = -0.01f * static_cast<float>((t * 37) % 300);
  std::vector<std::size_t> order(logits.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return logits[a] > logits[b]; });
  const auto p = softmax(logits, 1.0);
  double mass = 0;
  std::size_t nucleus = 0;
  while (mass < 0.9) mass += p[order[nucleus++]];
  REQUIRE(nucleus > 128);
  const auto counts = draw_counts({{"top_p", 0.9}}, logits, 3000);
  for (const auto& [token, count] : counts) {
    const auto rank = std::find(order.begin(), order.end(), token) - order.begin();
    REQUIRE(static_cast<std::size_t>(rank) < nucleus);
  }
  REQUIRE(counts.size() > nucleus / 2);
}

TEST_CASE("num_hypotheses gives independent samples, best first") {
  const auto records = varied_records(5, kVocab, 21, true);
  const Overrides one{{"seed", std::int64_t{77}}, {"max_new_tokens", std::int64_t{8}}};
  Overrides many = one;
  many["num_hypotheses"] = std::int64_t{4};
  const auto single = decode_with("sample", one, kVocab, records, hashed_model(2));
  const auto multi = decode_with("sample", many, kVocab, records, hashed_model(2));
  bool any_differ = false;
  for (std::size_t r = 0; r < records.size(); ++r) {
    const auto& hyps = multi[r].hypotheses;
    REQUIRE(hyps.size() == 4);
    for (std::size_t i = 1; i < hyps.size(); ++i) REQUIRE(hyps[i - 1].score >= hyps[i].score);
    // Sample 0 of the four is the single sample (same stream), wherever it was ranked.
    const auto& s = single[r].hypotheses[0];
    REQUIRE(std::any_of(hyps.begin(), hyps.end(), [&](const Hypothesis& h) {
      return h.tokens == s.tokens && h.logprobs == s.logprobs;
    }));
    for (std::size_t i = 1; i < hyps.size(); ++i) any_differ |= hyps[i].tokens != hyps[0].tokens;
  }
  REQUIRE(any_differ);
}

TEST_CASE("num_hypotheses above 1 where sampling is greedy is refused, not N copies") {
  const auto records = varied_records(2, kVocab, 5, true);
  for (const Overrides& extra :
       {Overrides{{"temperature", 0.0}}, Overrides{{"top_k", std::int64_t{1}}}}) {
    Overrides o{{"num_hypotheses", std::int64_t{3}}};
    o.insert(extra.begin(), extra.end());
    REQUIRE_THROWS_WITH(decode_with("sample", o, kVocab, records, hashed_model(2)),
                        Catch::Contains("(greedy) gives identical hypotheses"));
  }
}

TEST_CASE("sampled log-probs are those of the processed logits, before temperature") {
  FakeRecord rec;
  rec.max_steps = 1;
  const std::vector<float> logits{0.5f, 1.5f, -0.25f};
  const auto r =
      decode_with("sample", {{"temperature", 3.0}}, 3, {rec}, constant_model(logits), {});
  const Hypothesis& h = r[0].hypotheses[0];
  const auto p = softmax(logits, 1.0);
  REQUIRE(h.logprobs.at(0) == Approx(std::log(p[h.tokens.at(0)])).margin(1e-6));
}

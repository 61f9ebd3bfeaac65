// rnn-seq2seq against the float64 torch reference (reference_rnn.py): teacher-forced log-probs,
// greedy and beam-4 outputs of every fixture, within 1e-4.
#include <catch2/catch.hpp>

#include <cmath>

#include "rnn_support.hpp"

using namespace masque;
using namespace masque::test::rnn;

namespace {

constexpr double kTolerance = 1e-4;

std::vector<TokenId> ids(const nlohmann::json& j) {
  return j.get<std::vector<TokenId>>();
}

double worst(const std::vector<double>& got, const nlohmann::json& want) {
  REQUIRE(got.size() == want.size());
  double w = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    w = std::max(w, std::abs(got[i] - want[i].get<double>()));
  return w;
}

}  // namespace

TEST_CASE("rnn-seq2seq: info() reports the fixture's settings", "[rnn]") {
  const auto loaded = load_model("lstm-bahdanau");
  const ModelInfo& info = loaded->info();
  CHECK(info.architecture == "rnn-seq2seq");
  CHECK(info.kind == ModelKind::encoder_decoder);
  CHECK(info.vocab_size == 24);
  CHECK(info.source_vocab_size == 20);
  CHECK(info.hidden_size == 20);
  CHECK(info.num_layers == 2);
  CHECK(info.decoder_start == 1);
  CHECK(info.eos == 2);
  CHECK(info.pad == 0);
  CHECK_THROWS_AS(loaded->forward(Batch{}), ConfigError);
}

TEST_CASE("rnn-seq2seq: teacher-forced log-probs match the float64 torch reference", "[rnn]") {
  for (const std::string& name : fixture_names()) {
    const auto loaded = load_model(name);
    double w = 0;
    const auto e = expected(name);  // (not a temporary: the loop would read a dead object)
    REQUIRE(e["records"].size() == 7);
    for (const auto& r : e["records"])
      w = std::max(w, worst(teacher_forced(*loaded, ids(r["source"]), ids(r["target"])),
                            r["teacher_forced"]));
    INFO(name << ": worst |log p - reference| = " << w);
    CHECK(w < kTolerance);
  }
}

TEST_CASE("rnn-seq2seq: greedy outputs match the float64 torch reference", "[rnn]") {
  for (const std::string& name : fixture_names()) {
    const auto loaded = load_model(name);
    const auto e = expected(name);
    REQUIRE(e["records"].size() == 7);
    for (const auto& r : e["records"]) {
      INFO(name << " source " << r["source"].dump());
      const Greedy g = greedy(*loaded, ids(r["source"]), e["max_steps"].get<int>());
      CHECK(g.tokens == ids(r["greedy"]));
      CHECK(worst(g.logprobs, r["greedy_logprobs"]) < kTolerance);
    }
  }
}

TEST_CASE("rnn-seq2seq: beam-4 outputs match the float64 torch reference (select())", "[rnn]") {
  for (const std::string& name : fixture_names()) {
    const auto loaded = load_model(name);
    const auto e = expected(name);
    REQUIRE(e["records"].size() == 7);
    for (const auto& r : e["records"]) {
      INFO(name << " source " << r["source"].dump());
      const Hypothesis h =
          beam(*loaded, ids(r["source"]), e["beam_size"].get<int>(), e["max_steps"].get<int>());
      CHECK(h.tokens == ids(r["beam"]));
      CHECK(std::abs(h.score - r["beam_score"].get<double>()) < kTolerance);
    }
  }
}

// The aren-transliteration model against its reference outputs (examples.jsonl): teacher-forced
// per-token log-probs and plain greedy decoding.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "encdec_support.hpp"
#include "masque/error.hpp"

using namespace masque;
using namespace masque::test::encdec;

namespace {

constexpr double kTol = 1e-5;

}  // namespace

TEST_CASE("the model describes itself from config.json", "[encdec]") {
  const LoadedModel model = load_model();
  const ModelInfo& info = model->info();
  CHECK(info.kind == ModelKind::encoder_decoder);
  CHECK(info.vocab_size == 43);
  CHECK(info.source_vocab_size == 51);
  CHECK(info.hidden_size == 32);
  CHECK(info.decoder_start == 1);
  CHECK(info.eos == 2);
  CHECK(info.pad == 0);
  CHECK_THROWS_AS(model->forward(source_batch({{3, 4}})), ConfigError);
}

TEST_CASE("teacher-forced log-probs match examples.jsonl", "[encdec]") {
  const LoadedModel model = load_model();
  for (const auto& ex : examples()) {
    INFO(ex["name"].get<std::string>());
    const auto got = teacher_forced(*model, source_vocab().ids(ex["source_tokens"]),
                                    target_vocab().ids(ex["expected"]));
    const auto want = ex["expected_token_log_probs"].get<std::vector<double>>();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("token " << i << ": " << got[i] << " vs " << want[i]);
      CHECK(std::abs(got[i] - want[i]) <= kTol);
    }
  }
}

TEST_CASE("greedy decoding reproduces the expected outputs and scores", "[encdec]") {
  const LoadedModel model = load_model();
  for (const auto& r : greedy_examples(*model)) {
    INFO(r.name);
    REQUIRE(r.finished);
    CHECK(r.text == r.expected);
    CHECK(r.score_error <= kTol);
  }
}

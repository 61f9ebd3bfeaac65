// The roberta plugin against float64 references from a plain-torch RoBERTa
// (roberta_reference.py, run by the models_roberta_fixture test): a RobertaForMaskedLM folder's
// logits, an XLMRobertaModel folder's hidden states (no head, no `roberta.` prefix), and a
// RobertaForSequenceClassification folder's labels, each sequence alone and right-padded in a
// batch (positions numbered from padding_idx + 1, as HF numbers them).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "lm_reference.hpp"
#include "masque/threading.hpp"
#include "model_plugin.hpp"

using namespace masque;
using namespace masque::test;
using nlohmann::json;

namespace {

constexpr double kTol = 1e-4;
const std::filesystem::path kFixture = MASQUE_ROBERTA_FIXTURE;

const json& reference() {
  static const json ref = read_json(kFixture / "reference.json");
  return ref;
}

LoadedPlugin<Model> load_roberta(const std::string& name, bool head) {
  Params params;
  params.set("path", (kFixture / name).string());
  params.set("mlm_head", head);
  return load_plugin<Model>("model", "roberta", params);
}

// Largest |x - want| over rows [first, first + want.size()) of `values` ([rows, width]).
double error(const Tensor& values, std::int64_t first, const json& want) {
  double worst = 0;
  for (std::size_t t = 0; t < want.size(); ++t) {
    const auto row = row_of(values, first + static_cast<std::int64_t>(t));
    const auto expected = want[t].get<std::vector<double>>();
    REQUIRE(row.size() == expected.size());
    for (std::size_t v = 0; v < expected.size(); ++v)
      worst = std::max(worst, std::abs(row[v] - expected[v]));
  }
  return worst;
}

std::vector<std::vector<TokenId>> sequences(const json& variant) {
  std::vector<std::vector<TokenId>> out;
  for (const auto& s : variant["sequences"]) out.push_back(s["ids"].get<std::vector<TokenId>>());
  return out;
}

}  // namespace

TEST_CASE("roberta: masked-LM logits match the float64 reference, alone and batched", "[roberta]") {
  const ThreadScope one(1);
  const json& variant = reference()["roberta-mlm"];
  auto model = load_roberta("roberta-mlm", true);
  CHECK(model->info().architecture == "roberta");
  CHECK(model->info().max_positions == 18);  // 20 rows from padding_idx + 1 = 2 on
  auto mask = load_mask("bidirectional");
  const auto rows = sequences(variant);
  const Batch batch = make_batch(*mask, rows, 1, 0);
  const ForwardResult all = model->forward(batch);
  double worst = 0;
  for (std::size_t b = 0; b < rows.size(); ++b) {
    const auto& want = variant["sequences"][b]["logits"];
    worst = std::max(worst, error(all.logits, static_cast<std::int64_t>(b) * batch.length, want));
    worst = std::max(worst, error(model->forward(make_batch(*mask, {rows[b]})).logits, 0, want));
  }
  CHECK(worst < kTol);
}

TEST_CASE("roberta: an XLMRobertaModel folder's hidden states match the reference", "[roberta]") {
  const ThreadScope one(1);
  const json& variant = reference()["xlmr-model"];
  auto model = load_roberta("xlmr-model", false);
  auto mask = load_mask("bidirectional");
  const auto rows = sequences(variant);
  Batch batch = make_batch(*mask, rows, 1, 0);
  batch.want_hidden = true;
  batch.want_logits = false;
  const ForwardResult all = model->forward(batch);
  double worst = 0;
  for (std::size_t b = 0; b < rows.size(); ++b)
    worst = std::max(worst, error(all.hidden, static_cast<std::int64_t>(b) * batch.length,
                                  variant["sequences"][b]["hidden"]));
  CHECK(worst < kTol);
}

TEST_CASE("roberta: a RobertaForSequenceClassification folder's labels match the reference",
          "[roberta]") {
  const ThreadScope one(1);
  const json& variant = reference()["roberta-classifier"];
  auto model = load_roberta("roberta-classifier", true);
  CHECK(model->info().vocab_size == 3);
  auto mask = load_mask("bidirectional");
  const auto rows = sequences(variant);
  Batch batch = make_batch(*mask, rows, 1, 0);
  for (std::size_t b = 0; b < rows.size(); ++b)
    batch.output_rows.push_back(static_cast<std::int32_t>(b) * batch.length);  // <s>
  const ForwardResult all = model->forward(batch);
  double worst = 0;
  for (std::size_t b = 0; b < rows.size(); ++b)
    worst = std::max(worst, error(all.logits, static_cast<std::int64_t>(b),
                                  json::array({variant["sequences"][b]["labels"]})));
  CHECK(worst < kTol);
}

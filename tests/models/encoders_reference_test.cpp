// The roberta and distilbert plugins against float64 references from plain-torch RoBERTa and
// DistilBERT (encoders_reference.py, run by the models_encoders_fixture test): *ForMaskedLM
// folders' logits, an XLMRobertaModel folder's hidden states (no head, no `roberta.` prefix),
// and *ForSequenceClassification folders' labels, each sequence alone and right-padded in a
// batch (RoBERTa's positions numbered from padding_idx + 1, as HF numbers them).
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
const std::filesystem::path kFixture = MASQUE_ENCODERS_FIXTURE;

const json& reference() {
  static const json ref = read_json(kFixture / "reference.json");
  return ref;
}

// The variant's folder through its family's plugin (the name's first word).
LoadedPlugin<Model> load_encoder(const std::string& name, bool head) {
  Params params;
  params.set("path", (kFixture / name).string());
  params.set("mlm_head", head);
  const std::string plugin =
      name.substr(0, name.find('-')) == "xlmr" ? "roberta" : name.substr(0, name.find('-'));
  return load_plugin<Model>("model", plugin, params);
}

}  // namespace

TEST_CASE("roberta and distilbert: masked-LM logits match the float64 reference",
          "[roberta][distilbert]") {
  const ThreadScope one(1);
  for (const std::string name : {"roberta-mlm", "distilbert-mlm"}) {
    DYNAMIC_SECTION(name) {
      const json& variant = reference()[name];
      auto model = load_encoder(name, true);
      const bool roberta = name == "roberta-mlm";
      CHECK(model->info().architecture == (roberta ? "roberta" : "distilbert"));
      // RoBERTa's rows are numbered from padding_idx + 1 = 2: 18 of the table's 20 are usable.
      CHECK(model->info().max_positions == (roberta ? 18 : 20));
      auto mask = load_mask("bidirectional");
      const auto rows = sequence_ids(variant);
      const Batch batch = make_batch(*mask, rows, 1, 0);
      const ForwardResult all = model->forward(batch);
      double worst = 0;
      for (std::size_t b = 0; b < rows.size(); ++b) {
        const auto& want = variant["sequences"][b]["logits"];
        worst = std::max(
            worst, max_row_error(all.logits, static_cast<std::int64_t>(b) * batch.length, want));
        worst = std::max(
            worst, max_row_error(model->forward(make_batch(*mask, {rows[b]})).logits, 0, want));
      }
      CHECK(worst < kTol);
    }
  }
}

TEST_CASE("roberta: an XLMRobertaModel folder's hidden states match the reference", "[roberta]") {
  const ThreadScope one(1);
  const json& variant = reference()["xlmr-model"];
  // A folder without lm_head.* loads as the encoder alone, with the head asked for or not.
  auto model = load_encoder("xlmr-model", true);
  auto mask = load_mask("bidirectional");
  const auto rows = sequence_ids(variant);
  Batch batch = make_batch(*mask, rows, 1, 0);
  batch.want_hidden = true;
  batch.want_logits = false;
  const ForwardResult all = model->forward(batch);
  double worst = 0;
  for (std::size_t b = 0; b < rows.size(); ++b)
    worst = std::max(worst, max_row_error(all.hidden, static_cast<std::int64_t>(b) * batch.length,
                                          variant["sequences"][b]["hidden"]));
  CHECK(worst < kTol);
}

TEST_CASE("roberta and distilbert: classifier folders' labels match the reference",
          "[roberta][distilbert]") {
  const ThreadScope one(1);
  for (const std::string name : {"roberta-classifier", "distilbert-classifier"}) {
    DYNAMIC_SECTION(name) {
      const json& variant = reference()[name];
      auto model = load_encoder(name, true);
      CHECK(model->info().vocab_size == 3);
      auto mask = load_mask("bidirectional");
      const auto rows = sequence_ids(variant);
      Batch batch = make_batch(*mask, rows, 1, 0);
      for (std::size_t b = 0; b < rows.size(); ++b)
        batch.output_rows.push_back(static_cast<std::int32_t>(b) * batch.length);  // <s> / [CLS]
      const ForwardResult all = model->forward(batch);
      double worst = 0;
      for (std::size_t b = 0; b < rows.size(); ++b)
        worst = std::max(worst, max_row_error(all.logits, static_cast<std::int64_t>(b),
                                              json::array({variant["sequences"][b]["labels"]})));
      CHECK(worst < kTol);
    }
  }
}

TEST_CASE("sentence-transformers folders: masque run --task embed gives what encode() gives",
          "[roberta][embed]") {
  for (const std::string name :
       {"xlmr-sentence-mean", "xlmr-sentence-max", "xlmr-sentence-dense"}) {
    DYNAMIC_SECTION(name) {
      const json& variant = reference()[name];
      std::string ids;
      for (const auto& s : variant["sequences"]) {
        for (const auto& id : s["ids"]) ids += std::to_string(id.get<int>()) + " ";
        ids += "\n";
      }
      // The folder's modules.json (Pooling, Dense, Normalize) sets the task: nothing given here.
      const RunResult r = run_masque({"run", "--task", "embed", "--model",
                                      (kFixture / name).string(), "--input-format", "ids"},
                                     ids);
      INFO(r.err);
      REQUIRE(r.exit_code == 0);
      const auto out = parse_jsonl(r.out);
      REQUIRE(out.size() == variant["sequences"].size());
      double worst = 0;
      for (std::size_t i = 0; i < out.size(); ++i) {
        const auto got = out[i]["embedding"].get<std::vector<double>>();
        const auto want = variant["sequences"][i]["embedding"].get<std::vector<double>>();
        REQUIRE(got.size() == want.size());
        for (std::size_t k = 0; k < got.size(); ++k)
          worst = std::max(worst, std::abs(got[k] - want[k]));
      }
      CHECK(worst < 1e-5);
    }
  }
}

TEST_CASE("sentence-transformers folders: the default prompt and include_prompt false",
          "[roberta][embed]") {
  // config_sentence_transformers.json's default prompt goes before each text; 1_Pooling's
  // include_prompt: false leaves its tokens (and [CLS]) out of the mean, as encode() does.
  const json& variant = reference()["xlmr-sentence-prompt"];
  std::string texts;
  for (const auto& s : variant["sequences"]) texts += s["text"].get<std::string>() + "\n";
  const RunResult r = run_masque(
      {"run", "--task", "embed", "--model", (kFixture / "xlmr-sentence-prompt").string()}, texts);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == variant["sequences"].size());
  double worst = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto& want = variant["sequences"][i];
    CHECK(out[i]["tokens"] == want["ids"].size());
    const auto got = out[i]["embedding"].get<std::vector<double>>();
    const auto expected = want["embedding"].get<std::vector<double>>();
    REQUIRE(got.size() == expected.size());
    for (std::size_t k = 0; k < got.size(); ++k)
      worst = std::max(worst, std::abs(got[k] - expected[k]));
  }
  CHECK(worst < 1e-5);
}

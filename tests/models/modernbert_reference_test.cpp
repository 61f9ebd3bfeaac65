// The modernbert plugin against float64 references from a plain-torch ModernBERT
// (modernbert_reference.py, run by the models_modernbert_fixture test): a ModernBertForMaskedLM
// folder's logits and a bare ModernBertModel folder's hidden states (biases, no `model.` prefix),
// each sequence alone and right-padded in a batch; local layers see keys within
// local_attention / 2 tokens, under global and local RoPE bases.
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
const std::filesystem::path kFixture = MASQUE_MODERNBERT_FIXTURE;

const json& reference() {
  static const json ref = read_json(kFixture / "reference.json");
  return ref;
}

// The folder with its head asked for (a folder without one loads as the encoder alone).
LoadedPlugin<Model> load_modernbert(const std::string& name) {
  Params params;
  params.set("path", (kFixture / name).string());
  params.set("mlm_head", true);
  return load_plugin<Model>("model", "modernbert", params);
}

}  // namespace

TEST_CASE("modernbert: logits and hidden states match the float64 reference alone and padded",
          "[modernbert]") {
  const ThreadScope one(1);
  auto mask = load_mask("bidirectional");
  for (const std::string name : {"modernbert", "modernbert-biases"}) {
    DYNAMIC_SECTION(name) {
      const json& variant = reference()[name];
      const bool head = variant["head"].get<bool>();
      auto model = load_modernbert(name);
      CHECK(model->info().architecture == "modernbert");
      std::vector<std::vector<TokenId>> rows;
      for (const auto& s : variant["sequences"])
        rows.push_back(s["ids"].get<std::vector<TokenId>>());
      auto run = [&](const Batch& batch) {
        Batch b = batch;
        b.want_hidden = !head;
        b.want_logits = head;
        const ForwardResult out = model->forward(b);
        return head ? out.logits : out.hidden;
      };
      const Batch batch = make_batch(*mask, rows);
      const Tensor all = run(batch);
      double worst = 0;
      for (std::size_t b = 0; b < rows.size(); ++b) {
        const json& want = variant["sequences"][b]["output"];
        worst =
            std::max(worst, max_row_error(all, static_cast<std::int64_t>(b) * batch.length, want));
        worst = std::max(worst, max_row_error(run(make_batch(*mask, {rows[b]})), 0, want));
      }
      INFO("max |output - reference| " << worst);
      CHECK(worst < kTol);
    }
  }
}

TEST_CASE("modernbert: a folder without its head is told by tensor name when logits are asked",
          "[modernbert]") {
  auto model = load_modernbert("modernbert-biases");
  auto mask = load_mask("bidirectional");
  const Batch batch = make_batch(*mask, {{1, 5, 7}});
  CHECK_THROWS_WITH(model->forward(batch), Catch::Contains("head.dense.weight"));
}

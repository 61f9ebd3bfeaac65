// The gemma plugin (Gemma, Gemma 2, Gemma 3 text and a Gemma 3 multimodal folder's text model)
// against float64 references from a plain-torch transcription of modeling_gemma*.py
// (gemma_reference.py, run by the models_gemma_fixture test): (1 + w) norms, scaled embeddings,
// sandwich norms, soft-capped scores and logits, alternating sliding windows, per-layer RoPE
// bases and q/k norms; logits alone and right-padded in a batch, under the windowed-causal mask
// strategy too, and greedy steps on the KV cache against full forwards.
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
const std::filesystem::path kFixture = MASQUE_GEMMA_FIXTURE;
const char* const kVariants[] = {"gemma", "gemma2", "gemma2-untied", "gemma3", "gemma3-multimodal"};

const json& reference() {
  static const json ref = read_json(kFixture / "reference.json");
  return ref;
}

Params window_params(std::int64_t window) {
  Params p;
  p.set("window", window);
  return p;
}

}  // namespace

TEST_CASE("gemma: logits match the float64 reference alone and right-padded in a batch",
          "[gemma]") {
  const ThreadScope one(1);
  auto causal = load_mask("causal");
  auto windowed = load_mask("windowed-causal", window_params(3));
  for (const char* name : kVariants) {
    DYNAMIC_SECTION(name) {
      const json& variant = reference()[name];
      auto model = load_model("gemma", kFixture / name);
      CHECK(model->info().sliding_window == variant["sliding_window"].get<std::int32_t>());
      const auto rows = sequence_ids(variant);
      const Batch batch = make_batch(*causal, rows, 7, 3);  // pads must change nothing
      const ForwardResult all = model->forward(batch);
      const Batch narrow_batch = make_batch(*windowed, rows);
      const ForwardResult narrow = model->forward(narrow_batch);
      double worst = 0, worst_window3 = 0;
      for (std::size_t b = 0; b < rows.size(); ++b) {
        const auto row = static_cast<std::int32_t>(b);
        const json& expected = variant["sequences"][b];
        worst = std::max(
            worst, max_row_error(all.logits, std::int64_t{row} * batch.length, expected["logits"]));
        const ForwardResult alone = model->forward(make_batch(*causal, {rows[b]}));
        worst = std::max(worst, max_row_error(alone.logits, 0, expected["logits"]));
        worst_window3 = std::max(
            worst_window3, max_row_error(narrow.logits, std::int64_t{row} * narrow_batch.length,
                                         expected["window3_logits"]));
      }
      INFO("max |logit - reference| " << worst << ", under windowed-causal 3 " << worst_window3);
      CHECK(worst < kTol);
      CHECK(worst_window3 < kTol);
    }
  }
}

TEST_CASE(
    "gemma: greedy steps on the KV cache give the reference tokens and the full-forward "
    "logits past the window",
    "[gemma]") {
  const ThreadScope one(1);
  auto causal = load_mask("causal");
  for (const char* name : kVariants) {
    DYNAMIC_SECTION(name) {
      const json& variant = reference()[name];
      auto model = load_model("gemma", kFixture / name);
      std::vector<TokenId> ids = variant["prompt"].get<std::vector<TokenId>>();
      Batch prompt = make_batch(*causal, {ids});
      prompt.output_rows = {prompt.length - 1};
      Tensor logits;
      auto state = model->start(prompt, &logits);
      double worst = 0;
      std::vector<TokenId> generated;
      for (int step = 0; step < 10; ++step) {
        Batch full = make_batch(*causal, {ids});
        full.output_rows = {full.length - 1};
        const ForwardResult recomputed = model->forward(full);
        const auto cached = row_of(logits, 0), fresh = row_of(recomputed.logits, 0);
        for (std::size_t v = 0; v < cached.size(); ++v)
          worst = std::max(worst, double{std::abs(cached[v] - fresh[v])});
        generated.push_back(top_ids(cached, 1)[0]);
        ids.push_back(generated.back());
        StepInput input;
        input.tokens = std::span(&generated.back(), 1);
        model->step(*state, input, logits);
      }
      INFO("max |cached - recomputed| " << worst);
      CHECK(worst < kTol);
      CHECK(generated == variant["greedy_ids"].get<std::vector<TokenId>>());
    }
  }
}

TEST_CASE("gemma: a malformed config is a ConfigError naming the file and key", "[gemma]") {
  namespace fs = std::filesystem;
  const json good = read_json(kFixture / "gemma3-multimodal" / "config.json");
  const std::pair<const char*, json> cases[] = {
      {"text_config",
       [&] {
         json c = good;
         c.erase("text_config");
         return c;
       }()},
      {"sliding_window_pattern",
       [&] {
         json c = good;
         c["text_config"]["sliding_window_pattern"] = 0;
         return c;
       }()},
      {"rope_scaling",
       [&] {
         json c = good;
         c["text_config"]["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
         return c;
       }()},
  };
  for (const auto& [key, config] : cases) {
    DYNAMIC_SECTION(key) {
      const fs::path dir = scratch_dir(std::string("gemma-bad-") + key);
      write_file(dir / "config.json", config.dump(1));
      fs::remove(dir / "model.safetensors");
      fs::create_symlink(kFixture / "gemma3-multimodal" / "model.safetensors",
                         dir / "model.safetensors");
      CHECK_THROWS_WITH(load_model("gemma", dir),
                        Catch::Contains("config.json") && Catch::Contains(key));
    }
  }
}

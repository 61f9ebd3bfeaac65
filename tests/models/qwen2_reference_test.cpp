// The qwen2, qwen3, mistral and phi3 plugins (and llama with a Mistral-style sliding_window, and
// with Llama 3.1's and linear rope_scaling) against float64 references from a plain-torch Qwen2
// (qwen2_reference.py, run by the models_qwen2_fixture test): logits of single and batched
// sequences, the sliding window of the config and of the windowed-causal mask strategy, greedy
// decoding, and KV-cached steps against full forwards.
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
const std::filesystem::path kFixture = MASQUE_QWEN2_FIXTURE;

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

TEST_CASE("qwen2: logits match the float64 reference, alone and right-padded in a batch",
          "[qwen2]") {
  const ThreadScope one(1);
  for (const char* name : {"qwen2-tied", "qwen2-window", "llama-window", "mistral", "llama3-rope",
                           "llama-linear-rope", "qwen3", "phi3"}) {
    DYNAMIC_SECTION(name) {
      const json& variant = reference()[name];
      auto model = load_model(variant["plugin"].get<std::string>(), kFixture / name);
      CHECK(model->info().architecture == variant["plugin"].get<std::string>());
      // A sliding_window counts for qwen2 only with use_sliding_window; for llama always.
      const bool windowed = std::string(name).find("window") != std::string::npos ||
                            std::string(name) == "mistral" || std::string(name) == "qwen3" ||
                            std::string(name) == "phi3";
      CHECK(model->info().sliding_window == (windowed ? 4 : 0));
      auto causal = load_mask("causal");
      const auto rows = sequence_ids(variant);
      const Batch batch = make_batch(*causal, rows, 7, 3);  // pads must change nothing
      const ForwardResult all = model->forward(batch);
      double worst = 0;
      for (std::size_t b = 0; b < rows.size(); ++b) {
        worst =
            std::max(worst, max_row_error(all.logits, static_cast<std::int64_t>(b) * batch.length,
                                          variant["sequences"][b]["logits"]));
        const ForwardResult alone = model->forward(make_batch(*causal, {rows[b]}));
        worst = std::max(worst, max_row_error(alone.logits, 0, variant["sequences"][b]["logits"]));
      }
      INFO("max |logit - reference| " << worst);
      CHECK(worst < kTol);
    }
  }
}

TEST_CASE("qwen2: the windowed-causal mask strategy matches the reference's window of 3",
          "[qwen2][windowed-causal]") {
  const ThreadScope one(1);
  auto mask = load_mask("windowed-causal", window_params(3));
  for (const char* name :
       {"qwen2-tied", "qwen2-window", "llama-window", "mistral", "qwen3", "phi3"}) {
    DYNAMIC_SECTION(name) {
      const json& variant = reference()[name];
      auto model = load_model(variant["plugin"].get<std::string>(), kFixture / name);
      const auto rows = sequence_ids(variant);
      const Batch batch = make_batch(*mask, rows);
      const ForwardResult out = model->forward(batch);
      double worst = 0;
      for (std::size_t b = 0; b < rows.size(); ++b)
        worst =
            std::max(worst, max_row_error(out.logits, static_cast<std::int64_t>(b) * batch.length,
                                          variant["sequences"][b]["window3_logits"]));
      INFO("max |logit - reference| " << worst);
      CHECK(worst < kTol);
    }
  }
}

TEST_CASE(
    "qwen2: greedy steps on the KV cache give the reference tokens and the full-forward "
    "logits, also past the window",
    "[qwen2]") {
  const ThreadScope one(1);
  auto causal = load_mask("causal");
  auto windowed = load_mask("windowed-causal", window_params(3));
  for (const char* name :
       {"qwen2-tied", "qwen2-window", "llama-window", "mistral", "llama3-rope", "qwen3", "phi3"}) {
    for (const MaskStrategy* mask : {causal.get(), windowed.get()}) {
      const bool window3 = mask == windowed.get();
      DYNAMIC_SECTION(name << (window3 ? " under windowed-causal 3" : " under causal")) {
        const json& variant = reference()[name];
        auto model = load_model(variant["plugin"].get<std::string>(), kFixture / name);
        std::vector<TokenId> ids = variant["prompt"].get<std::vector<TokenId>>();
        Batch prompt = make_batch(*mask, {ids});
        prompt.output_rows = {prompt.length - 1};
        Tensor logits;
        auto state = model->start(prompt, &logits);
        double worst = 0;
        std::vector<TokenId> generated;
        for (int step = 0; step < 10; ++step) {
          // The cached row against a full forward of the same tokens under the same mask.
          Batch full = make_batch(*mask, {ids});
          full.output_rows = {full.length - 1};
          const ForwardResult recomputed = model->forward(full);
          const auto cached = row_of(logits, 0), fresh = row_of(recomputed.logits, 0);
          for (std::size_t v = 0; v < cached.size(); ++v)
            worst = std::max(worst, double{std::abs(cached[v] - fresh[v])});
          const TokenId next = top_ids(cached, 1)[0];
          generated.push_back(next);
          ids.push_back(next);
          StepInput input;
          input.tokens = std::span(&generated.back(), 1);
          model->step(*state, input, logits);
        }
        INFO("max |cached - recomputed| " << worst);
        CHECK(worst < kTol);
        if (!window3) CHECK(generated == variant["greedy_ids"].get<std::vector<TokenId>>());
      }
    }
  }
}

TEST_CASE(
    "mistral: without sliding_window in config.json the window is MistralConfig's 4096, null is "
    "none",
    "[qwen2][mistral]") {
  namespace fs = std::filesystem;
  for (const bool null_window : {false, true}) {
    const fs::path dir = scratch_dir(null_window ? "mistral-null-window" : "mistral-no-window");
    json config = read_json(kFixture / "mistral" / "config.json");
    if (null_window)
      config["sliding_window"] = nullptr;
    else
      config.erase("sliding_window");
    write_file(dir / "config.json", config.dump(1));
    fs::remove(dir / "model.safetensors");
    fs::create_symlink(kFixture / "mistral" / "model.safetensors", dir / "model.safetensors");
    CHECK(load_model("mistral", dir)->info().sliding_window == (null_window ? 0 : 4096));
  }
}

TEST_CASE("qwen2: a bf16 KV cache keeps the greedy tokens and the logits near the f32 cache's",
          "[qwen2][kv_cache]") {
  const ThreadScope one(1);
  auto causal = load_mask("causal");
  for (const char* name : {"qwen2-tied", "qwen2-window", "qwen3"}) {
    DYNAMIC_SECTION(name) {
      const json& variant = reference()[name];
      const std::string plugin = variant["plugin"].get<std::string>();
      Params params;
      params.set("path", (kFixture / name).string());
      params.set("kv_cache_dtype", std::string("bf16"));
      auto model = load_plugin<Model>("model", plugin, params);
      std::vector<TokenId> ids = variant["prompt"].get<std::vector<TokenId>>();
      Batch prompt = make_batch(*causal, {ids});
      prompt.output_rows = {prompt.length - 1};
      Tensor logits;
      auto state = model->start(prompt, &logits);
      double worst = 0, scale = 0;
      std::vector<TokenId> generated;
      for (int step = 0; step < 10; ++step) {
        Batch full = make_batch(*causal, {ids});
        full.output_rows = {full.length - 1};
        const ForwardResult exact = model->forward(full);  // no cache: f32 throughout
        const auto cached = row_of(logits, 0), fresh = row_of(exact.logits, 0);
        for (std::size_t v = 0; v < cached.size(); ++v) {
          worst = std::max(worst, double{std::abs(cached[v] - fresh[v])});
          scale = std::max(scale, double{std::abs(fresh[v])});
        }
        generated.push_back(top_ids(cached, 1)[0]);
        ids.push_back(generated.back());
        StepInput input;
        input.tokens = std::span(&generated.back(), 1);
        model->step(*state, input, logits);
      }
      INFO("max |bf16-cached - f32| " << worst << " of logits up to " << scale);
      CHECK(worst > 0);  // the cache does round
      CHECK(worst < 1e-2 * scale);
      CHECK(generated == variant["greedy_ids"].get<std::vector<TokenId>>());
    }
  }
}

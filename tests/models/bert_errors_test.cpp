// Loading variants and failures of the bert plugin: tensor-name prefixes, shards, an untied
// decoder, no MLM head; bad folders (ConfigError naming file and key or tensor) and bad inputs
// (RecordError, leaving a decode state usable).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "bert_support.hpp"
#include "masque/error.hpp"
#include "test_support.hpp"

using namespace bert_test;
using Catch::Matchers::Contains;

namespace {

constexpr double kTolerance = 1e-5;
const std::string kModel = "tiny-bert-uncased";

template <typename Error>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("no error thrown");
  return "";
}

std::string load_error(const std::filesystem::path& folder,
                       const std::map<std::string, masque::ParamValue>& extra = {}) {
  return error_of<masque::ConfigError>([&] { load_model(folder, extra); });
}

// Ten tokens of the reference input under the bidirectional mask.
masque::Batch sample_batch() {
  const auto& input = reference(kModel)["input"];
  masque::Batch b;
  b.batch = 1;
  b.length = 10;
  const auto ids = input["input_ids"].get<std::vector<std::int32_t>>();
  const auto types = input["token_type_ids"].get<std::vector<std::int32_t>>();
  b.ids.assign(ids.begin(), ids.begin() + 10);
  b.token_types.assign(types.begin(), types.begin() + 10);
  b.positions.resize(10);
  std::iota(b.positions.begin(), b.positions.end(), 0);
  auto mask = load_mask("bidirectional");
  b.attention = one_row_layout(build_mask(*mask, 10), 10);
  b.want_hidden = true;
  return b;
}

double diff(const masque::Tensor& a, const masque::Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  return max_abs_diff(a.f32(), b.f32(), a.numel());
}

}  // namespace

TEST_CASE("bert loads tensors without the bert. prefix and from shards and with an untied decoder",
          "[bert][load]") {
  const masque::Batch batch = sample_batch();
  const auto expected = load_model(model_dir(kModel))->forward(batch);
  const nlohmann::json config = read_config(model_dir(kModel));
  const TensorMap tensors = read_tensors(model_dir(kModel));

  SECTION("no prefix (BertModel names)") {
    TensorMap plain;
    for (const auto& [name, t] : tensors)
      plain[name.rfind("bert.", 0) == 0 ? name.substr(5) : name] = t;
    const auto out = load_model(make_folder("bert_no_prefix", config, plain))->forward(batch);
    CHECK(diff(out.logits, expected.logits) == 0.0);
    CHECK(diff(out.hidden, expected.hidden) == 0.0);
  }
  SECTION("sharded through model.safetensors.index.json") {
    const auto dir = masque::test::scratch_dir("bert_sharded");
    masque::test::write_file(dir / "config.json", config.dump());
    TensorMap first, second;
    nlohmann::json index;
    for (const auto& [name, t] : tensors) {
      const bool one = name.find("encoder.layer.1") == std::string::npos;
      (one ? first : second)[name] = t;
      index["weight_map"][name] =
          one ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
    write_safetensors(dir / "model-00001-of-00002.safetensors", first);
    write_safetensors(dir / "model-00002-of-00002.safetensors", second);
    masque::test::write_file(dir / "model.safetensors.index.json", index.dump());
    const auto out = load_model(dir)->forward(batch);
    CHECK(diff(out.logits, expected.logits) == 0.0);
  }
  SECTION("an untied cls.predictions.decoder.weight") {
    // decoder = 2 x word embeddings: logits = 2 (tied logits - bias) + bias.
    nlohmann::json untied = config;
    untied["tie_word_embeddings"] = false;
    TensorMap with_decoder = tensors;
    StoredTensor decoder = tensors.at("bert.embeddings.word_embeddings.weight");
    for (float& v : decoder.data) v *= 2.0f;
    with_decoder["cls.predictions.decoder.weight"] = decoder;
    const auto out = load_model(make_folder("bert_untied", untied, with_decoder))->forward(batch);
    const std::vector<float>& bias = tensors.at("cls.predictions.bias").data;
    double worst = 0;
    for (std::int64_t i = 0; i < out.logits.numel(); ++i) {
      const double b = bias[i % bias.size()];
      worst =
          std::max(worst, std::abs(out.logits.f32()[i] - (2 * (expected.logits.f32()[i] - b) + b)));
    }
    CHECK(worst <= kTolerance);
    CHECK(diff(out.hidden, expected.hidden) == 0.0);
    // Untied without a stored decoder is an error, not a silent tie.
    with_decoder.erase("cls.predictions.decoder.weight");
    CHECK_THAT(load_error(make_folder("bert_untied_missing", untied, with_decoder)),
               Contains("cls.predictions.decoder.weight") && Contains("model.safetensors"));
  }
  SECTION("a folder without cls.* (BertModel) loads as an encoder; logits name the tensor") {
    TensorMap encoder;
    for (const auto& [name, t] : tensors)
      if (name.rfind("cls.", 0) != 0) encoder[name] = t;
    const auto dir = make_folder("bert_encoder_only", config, encoder);
    for (const bool head : {true, false}) {
      auto model = load_model(dir, {{"mlm_head", head}});
      masque::Batch hidden_only = batch;
      hidden_only.want_logits = false;
      const auto out = model->forward(hidden_only);
      CHECK(out.logits.empty());
      CHECK(diff(out.hidden, expected.hidden) == 0.0);
      CHECK_THAT(
          error_of<masque::ConfigError>([&] { model->forward(batch); }),
          Contains(head ? "no tensor 'cls.predictions.transform.dense.weight'" : "mlm_head"));
    }
    // A head that is there but incomplete is still an error naming the tensor.
    TensorMap partial = tensors;
    partial.erase("cls.predictions.transform.LayerNorm.weight");
    CHECK_THAT(load_error(make_folder("bert_partial_head", config, partial)),
               Contains("cls.predictions.transform.LayerNorm.weight"));
  }
}

TEST_CASE("bert reports bad model folders with the file and the key or tensor", "[bert][load]") {
  const nlohmann::json config = read_config(model_dir(kModel));
  const TensorMap tensors = read_tensors(model_dir(kModel));

  SECTION("missing config.json") {
    const auto dir = masque::test::scratch_dir("bert_no_config");
    write_safetensors(dir / "model.safetensors", tensors);
    CHECK_THAT(load_error(dir), Contains((dir / "config.json").string()));
  }
  SECTION("missing weights") {
    const auto dir = masque::test::scratch_dir("bert_no_weights");
    masque::test::write_file(dir / "config.json", config.dump());
    CHECK_THAT(load_error(dir), Contains(dir.string()) && Contains("model.safetensors"));
  }
  SECTION("missing tensor") {
    TensorMap missing = tensors;
    missing.erase("bert.encoder.layer.1.attention.self.key.weight");
    const auto dir = make_folder("bert_missing_tensor", config, missing);
    CHECK_THAT(load_error(dir), Contains((dir / "model.safetensors").string()) &&
                                    Contains("bert.encoder.layer.1.attention.self.key.weight"));
  }
  SECTION("wrong shape") {
    TensorMap reshaped = tensors;
    reshaped["bert.encoder.layer.0.intermediate.dense.weight"].shape = {32, 64};
    const auto dir = make_folder("bert_wrong_shape", config, reshaped);
    CHECK_THAT(load_error(dir), Contains((dir / "model.safetensors").string()) &&
                                    Contains("bert.encoder.layer.0.intermediate.dense.weight") &&
                                    Contains("[32, 64]") && Contains("[64, 32]"));
  }
  SECTION("config values the plugin refuses") {
    struct Case {
      const char* key;
      nlohmann::json value;
    };
    const Case cases[] = {{"position_embedding_type", "relative_key"},
                          {"position_embedding_type", "relative_key_query"},
                          {"hidden_act", "mish"},
                          {"model_type", "roberta"},
                          {"num_attention_heads", 5},
                          {"hidden_size", "32"}};
    for (const Case& c : cases) {
      nlohmann::json bad = config;
      bad[c.key] = c.value;
      const auto dir = make_folder("bert_bad_config", bad, tensors);
      INFO(c.key << " = " << c.value.dump());
      CHECK_THAT(load_error(dir), Contains((dir / "config.json").string()) && Contains(c.key));
    }
    nlohmann::json missing = config;
    missing.erase("num_hidden_layers");
    const auto dir = make_folder("bert_bad_config", missing, tensors);
    CHECK_THAT(load_error(dir),
               Contains((dir / "config.json").string()) && Contains("num_hidden_layers"));
  }
}

TEST_CASE("bert rejects inputs outside its tables with RecordError", "[bert]") {
  auto model = load_model(model_dir(kModel));
  const masque::Batch good = sample_batch();

  masque::Batch bad = good;
  bad.ids[3] = 30522;
  CHECK_THAT(error_of<masque::RecordError>([&] { model->forward(bad); }),
             Contains("30522") && Contains("vocabulary"));
  bad = good;
  bad.positions[9] = 128;
  CHECK_THAT(error_of<masque::RecordError>([&] { model->forward(bad); }),
             Contains("128") && Contains("max_position_embeddings"));
  bad = good;
  bad.token_types[0] = 2;
  CHECK_THAT(error_of<masque::RecordError>([&] { model->forward(bad); }),
             Contains("type_vocab_size"));

  // Pads are never looked at: any filler is accepted and changes nothing.
  masque::Batch padded = good;
  padded.length = 12;
  padded.ids.insert(padded.ids.end(), {-1, 99999});
  padded.positions.insert(padded.positions.end(), {-5, 1000});
  padded.token_types.insert(padded.token_types.end(), {7, -1});
  auto mask = load_mask("bidirectional");
  padded.attention = one_row_layout(build_mask(*mask, 10), 12);
  padded.output_rows = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const auto expected = model->forward(good);
  CHECK(diff(model->forward(padded).logits, expected.logits) <= kTolerance);

  // A dense layout has no ranks to extend: no KV cache for it.
  masque::Batch dense = good;
  dense.attention.dense.assign(100, 1);
  CHECK(diff(model->forward(dense).logits, expected.logits) <= kTolerance);
  CHECK_THROWS_AS(model->start(dense, nullptr), masque::RuntimeError);

  // A failed step leaves the state as it was.
  masque::Batch prompt = good;
  prompt.length = 9;
  prompt.ids.resize(9);
  prompt.positions.resize(9);
  prompt.token_types.resize(9);
  auto causal = load_mask("causal");
  prompt.attention = one_row_layout(build_mask(*causal, 9), 9);
  auto state = model->start(prompt, nullptr);
  masque::Tensor logits;
  const std::vector<std::int32_t> too_big{40000}, too_far{200}, last{good.ids[9]},
      last_type{good.token_types[9]};
  CHECK_THROWS_AS(model->step(*state, step_input(too_big), logits), masque::RecordError);
  CHECK_THROWS_AS(model->step(*state, step_input(last, too_far), logits), masque::RecordError);
  model->step(*state, step_input(last, {}, last_type), logits);
  masque::Batch full = good;
  full.attention = one_row_layout(build_mask(*causal, 10), 10);
  full.output_rows = {9};
  CHECK(diff(logits, model->forward(full).logits) <= kTolerance);
}

// forward(), start() and step() are const: several threads share one model.
TEST_CASE("bert serves concurrent forwards and decode states from one model", "[bert]") {
  auto model = load_model(model_dir(kModel));
  auto causal = load_mask("causal");
  const masque::Batch bidirectional = sample_batch();
  masque::Batch left_to_right = sample_batch();
  left_to_right.attention = one_row_layout(build_mask(*causal, 10), 10);
  const auto expected_a = model->forward(bidirectional);
  const auto expected_b = model->forward(left_to_right);

  masque::Batch prompt = left_to_right;
  prompt.length = 5;
  prompt.ids.resize(5);
  prompt.positions.resize(5);
  prompt.token_types.resize(5);
  prompt.attention = one_row_layout(build_mask(*causal, 5), 5);

  // Catch2 assertions are not thread-safe: the threads only record their largest difference.
  auto apart = [](const masque::Tensor& x, const masque::Tensor& y) {
    if (x.shape() != y.shape()) return std::numeric_limits<double>::infinity();
    return max_abs_diff(x.f32(), y.f32(), x.numel());
  };
  constexpr int kRounds = 20;
  std::vector<double> worst(3, 0.0);  // per thread
  auto forwards = [&](const masque::Batch& batch, const masque::ForwardResult& expected,
                      double& out) {
    for (int i = 0; i < kRounds; ++i) {
      const auto r = model->forward(batch);
      out = std::max({out, apart(r.logits, expected.logits), apart(r.hidden, expected.hidden)});
    }
  };
  auto decode = [&](double& out) {
    for (int i = 0; i < kRounds / 4; ++i) {
      auto state = model->start(prompt, nullptr);
      masque::Tensor logits;
      for (std::int32_t t = 5; t < 10; ++t) {
        const std::vector<std::int32_t> token{left_to_right.ids[t]},
            type{left_to_right.token_types[t]};
        model->step(*state, step_input(token, {}, type), logits);
        const std::int64_t vocab = expected_b.logits.dim(1);
        out = logits.numel() != vocab
                  ? std::numeric_limits<double>::infinity()
                  : std::max(out, max_abs_diff(logits.f32(), expected_b.logits.f32() + t * vocab,
                                               vocab));
      }
    }
  };
  std::thread a([&] { forwards(bidirectional, expected_a, worst[0]); });
  std::thread b([&] { forwards(left_to_right, expected_b, worst[1]); });
  std::thread c([&] { decode(worst[2]); });
  a.join();
  b.join();
  c.join();
  CHECK(worst[0] == 0.0);  // the same computation, whichever workspace it got
  CHECK(worst[1] == 0.0);
  CHECK(worst[2] <= kTolerance);
}

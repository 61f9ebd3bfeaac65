// The bert plugin against the float64 references of tiny-bert-uncased and tiny-bert-chinese
// under the four masks, with layouts built by the real mask plugins.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "bert_support.hpp"

using namespace bert_test;

namespace {

// README: the float32 reference differs from float64 by 2.2e-7 (logits) / 6.6e-7 (hidden);
// a float32 implementation should match to about 1e-5.
constexpr double kTolerance = 1e-5;

// The same as a dense layout: the reference's `allowed` matrix over the real tokens.
masque::AttentionLayout dense_layout(const nlohmann::json& entry, std::int32_t length,
                                     std::int32_t real) {
  masque::SequenceMask mask;
  mask.rank.assign(real, 0);
  mask.role.assign(real, masque::TokenRole::content);
  for (std::int32_t i = 0; i < real; ++i)
    for (std::int32_t j = 0; j < real; ++j)
      mask.dense.push_back(static_cast<std::uint8_t>(entry["allowed"][i][j].get<int>()));
  return one_row_layout(mask, length);
}

ReferenceErrors check_mask(const std::string& model_name, const std::string& mask_name,
                           bool dense) {
  const nlohmann::json& ref = reference(model_name);
  const nlohmann::json& input = ref["input"];
  const nlohmann::json& entry = ref["masks"][mask_name];
  const std::int32_t length = input["length"], real = input["real_length"];
  auto model = load_model(model_dir(model_name));
  const std::int32_t vocab = model->info().vocab_size;

  const masque::Batch batch = reference_batch(
      ref, mask_name,
      dense ? dense_layout(entry, length, real) : reference_layout(mask_name, entry, length, real));

  // The plugin's layout is the reference's `allowed` on every real query row.
  for (std::int32_t i = 0; i < real; ++i)
    for (std::int32_t j = 0; j < length; ++j) {
      INFO("query " << i << ", key " << j);
      CHECK(batch.attention.allowed(0, i, j) == (entry["allowed"][i][j].get<int>() != 0));
    }

  const masque::ForwardResult out = model->forward(batch);
  REQUIRE(out.logits.shape() == masque::Shape{length, vocab});
  REQUIRE(out.hidden.shape() == masque::Shape{length, model->info().hidden_size});

  // The id order is only meaningful where the reference's gaps exceed our error.
  for (const auto& pos : entry["positions"]) {
    if (pos["is_pad"].get<bool>() || pos["top10_min_gap"].get<double>() <= 4 * kTolerance) continue;
    const std::int32_t p = pos["position"];
    const float* logits = out.logits.f32() + static_cast<std::size_t>(p) * vocab;
    std::vector<std::int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 10, order.end(),
                      [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
    order.resize(10);
    INFO("position " << p);
    CHECK(order == ints(pos["top10_ids"]));
  }
  const ReferenceErrors err =
      reference_errors(out, ref, mask_name, vocab, model->info().hidden_size);
  std::printf("%s / %s%s: max |error| logits %.2e, logsumexp %.2e, hidden %.2e\n",
              model_name.c_str(), mask_name.c_str(), dense ? " (dense layout)" : "", err.logits,
              err.logsumexp, err.hidden);
  return err;
}

}  // namespace

TEST_CASE("bert matches the float64 reference under every mask", "[bert][reference]") {
  const std::string model = GENERATE(as<std::string>{}, "tiny-bert-uncased", "tiny-bert-chinese");
  const std::string mask =
      GENERATE(as<std::string>{}, "bidirectional", "causal", "seq2seq", "permutation");
  INFO(model << " under " << mask);
  const ReferenceErrors err = check_mask(model, mask, false);
  CHECK(err.logits <= kTolerance);
  CHECK(err.logsumexp <= kTolerance);
  CHECK(err.hidden <= kTolerance);
}

TEST_CASE("bert takes dense layouts", "[bert][reference]") {
  const std::string mask =
      GENERATE(as<std::string>{}, "bidirectional", "causal", "seq2seq", "permutation");
  INFO("the allowed matrix of " << mask);
  const ReferenceErrors err = check_mask("tiny-bert-uncased", mask, true);
  CHECK(err.logits <= kTolerance);
  CHECK(err.logsumexp <= kTolerance);
  CHECK(err.hidden <= kTolerance);
}

TEST_CASE("bert model info comes from config.json", "[bert]") {
  auto model = load_model(model_dir("tiny-bert-chinese"));
  const masque::ModelInfo& info = model->info();
  CHECK(info.architecture == "bert");
  CHECK(info.kind == masque::ModelKind::encoder_only);
  CHECK(info.vocab_size == 21128);
  CHECK(info.source_vocab_size == 21128);
  CHECK(info.hidden_size == 32);
  CHECK(info.num_layers == 2);
  CHECK(info.max_positions == 128);
  CHECK(info.uses_token_types);
  CHECK(info.pad == 0);
}

// The test's own float64 BERT (used below for hidden_act variants) must agree with the
// fixture before it can be trusted as a reference.
TEST_CASE("the tests' float64 BERT reproduces the fixture", "[bert][reference]") {
  const nlohmann::json& ref = reference("tiny-bert-uncased");
  const nlohmann::json& entry = ref["masks"]["permutation"];
  const auto& input = ref["input"];
  const auto allowed = entry["allowed"].get<std::vector<std::vector<int>>>();
  const DoubleResult r =
      double_forward(model_dir("tiny-bert-uncased"), "gelu", ints(input["input_ids"]),
                     ints(input["position_ids"]), ints(entry["token_type_ids"]), allowed);
  for (const auto& pos : entry["positions"]) {
    if (pos["is_pad"].get<bool>()) continue;
    const std::int32_t p = pos["position"];
    for (std::size_t k = 0; k < 10; ++k)
      CHECK(std::abs(r.logits[p][pos["top10_ids"][k].get<int>()] -
                     pos["top10_logits"][k].get<double>()) < 1e-12);
  }
  for (std::size_t k = 0; k < 4; ++k)
    for (std::size_t c = 0; c < 32; ++c)
      CHECK(std::abs(r.hidden[k][c] - entry["hidden_states"]["values"][k][c].get<double>()) <
            1e-12);
}

// hidden_act is honoured: each activation against the float64 model with the same one. The
// fixture's pre-activations are so small that erf and tanh GELU agree to ~1e-5, so the
// activation inputs are scaled up until the variants differ by far more than the tolerance.
TEST_CASE("bert applies hidden_act gelu or gelu_new or relu", "[bert]") {
  const std::string act = GENERATE(as<std::string>{}, "gelu", "gelu_new", "relu");
  nlohmann::json config = read_config(model_dir("tiny-bert-uncased"));
  config["hidden_act"] = act;
  TensorMap tensors = read_tensors(model_dir("tiny-bert-uncased"));
  for (auto& [name, t] : tensors)
    if (name.find("intermediate.dense.weight") != std::string::npos ||
        name == "cls.predictions.transform.dense.weight")
      for (float& v : t.data) v *= 3.0f;
  const auto folder = make_folder("bert_act_" + act, config, tensors);
  auto model = load_model(folder);
  auto causal = load_mask("causal");
  const std::vector<std::int32_t> ids{101, 1037, 1038, 1039, 30521, 102, 1041, 1042};
  std::vector<std::int32_t> positions(ids.size()), types(ids.size(), 0);
  std::iota(positions.begin(), positions.end(), 0);
  masque::Batch batch;
  batch.batch = 1;
  batch.length = static_cast<std::int32_t>(ids.size());
  batch.ids = ids;
  batch.positions = positions;
  batch.attention = one_row_layout(build_mask(*causal, batch.length), batch.length);
  batch.want_hidden = true;
  const auto out = model->forward(batch);
  std::vector<std::vector<int>> allowed(ids.size(), std::vector<int>(ids.size()));
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = 0; j <= i; ++j) allowed[i][j] = 1;
  const DoubleResult r = double_forward(folder, act, ids, positions, types, allowed);
  double logits = 0, hidden = 0;
  const std::int32_t vocab = model->info().vocab_size;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    for (std::int32_t v = 0; v < vocab; ++v)
      logits = std::max(logits, std::abs(out.logits.f32()[t * vocab + v] - r.logits[t][v]));
    for (std::int32_t c = 0; c < 32; ++c)
      hidden = std::max(hidden, std::abs(out.hidden.f32()[t * 32 + c] - r.hidden[t][c]));
  }
  INFO(act << ": logits " << logits << ", hidden " << hidden);
  CHECK(logits <= kTolerance);
  CHECK(hidden <= kTolerance);
  // The check above can tell the activations apart.
  const DoubleResult other =
      double_forward(folder, act == "gelu" ? "gelu_new" : "gelu", ids, positions, types, allowed);
  double apart = 0;
  for (std::size_t t = 0; t < ids.size(); ++t)
    for (std::int32_t c = 0; c < 32; ++c)
      apart = std::max(apart, std::abs(other.hidden[t][c] - r.hidden[t][c]));
  CHECK(apart > 10 * kTolerance);
  std::printf("hidden_act %s: max |error| logits %.2e, hidden %.2e (vs the other GELU: %.2e)\n",
              act.c_str(), logits, hidden, apart);
}

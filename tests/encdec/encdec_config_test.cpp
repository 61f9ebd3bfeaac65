// Architecture settings of config.json are honoured: equivalent checkpoints written with other
// settings (learned positions, a tied output projection) give the reference results, and
// settings that change the network change them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "encdec_support.hpp"

using namespace masque;
using namespace masque::test::encdec;

namespace {

constexpr double kTol = 1e-5;

double reference_error(const std::string& name, const nlohmann::json& edits) {
  return worst_log_prob_error(*load_model(write_model(name, edits, original_tensors())));
}

// The README's sinusoid, written out here independently of the plugin: float32 steps,
// p = t + 1, [sin | cos].
Tensor readme_sinusoid(std::int64_t rows, std::int64_t offset) {
  const int half = 16;
  Tensor table = Tensor::zeros({rows + offset, 32});
  for (std::int64_t r = 0; r < offset; ++r)
    for (int c = 0; c < 32; ++c) table.f32()[r * 32 + c] = 100.0f;  // rows before the offset
  const float inc = std::log(10000.0f) / static_cast<float>(half - 1);
  for (std::int64_t t = 0; t < rows; ++t)
    for (int j = 0; j < half; ++j) {
      const float inv = static_cast<float>(std::exp(static_cast<double>(-inc * j)));
      const float angle = static_cast<float>(t + 1) * inv;
      table.f32()[(t + offset) * 32 + j] = static_cast<float>(std::sin(static_cast<double>(angle)));
      table.f32()[(t + offset) * 32 + half + j] =
          static_cast<float>(std::cos(static_cast<double>(angle)));
    }
  return table;
}

}  // namespace

TEST_CASE("learned position tables with a BART-style offset", "[encdec][config]") {
  auto tensors = original_tensors();
  tensors["encoder.embed_positions.weight"] = readme_sinusoid(64, 2);
  tensors["decoder.embed_positions.weight"] = readme_sinusoid(64, 2);
  const nlohmann::json edits = {{"position_encoding", "learned"},
                                {"position_encoding_learned", true},
                                {"position_encoding_offset", 2},
                                {"max_position_embeddings", 64}};
  const LoadedModel model = load_model(write_model("learned", edits, tensors));
  CHECK(model->info().max_positions == 64);
  CHECK(worst_log_prob_error(*model) <= kTol);
}

TEST_CASE("a tied output projection reads the target embeddings", "[encdec][config]") {
  auto untied = original_tensors();
  untied["lm_head.weight"] = untied["decoder.embed_tokens.weight"];
  auto tied = untied;
  tied.erase("lm_head.weight");
  const LoadedModel a = load_model(write_model("untied", {}, untied));
  const LoadedModel b = load_model(write_model("tied", {{"tie_output_projection", true}}, tied));
  const auto sources = bench_sources(4);
  for (const auto& source : sources) {
    const Greedy ga = greedy(*a, source, 12), gb = greedy(*b, source, 12);
    REQUIRE(ga.logits.size() == gb.logits.size());
    for (std::size_t s = 0; s < ga.logits.size(); ++s) CHECK(ga.logits[s] == gb.logits[s]);
  }
}

TEST_CASE("the defaults are the documented ones", "[encdec][config]") {
  // attention_scale 1/sqrt(head_dim), embedding_scale sqrt(d_model), final norms = pre_norm,
  // concat_sin_cos, max timescale 10000, half_minus_one.
  CHECK(reference_error("defaults", {{"attention_scale", nullptr},
                                     {"embedding_scale", nullptr},
                                     {"encoder_final_layer_norm", nullptr},
                                     {"decoder_final_layer_norm", nullptr},
                                     {"position_encoding_layout", nullptr},
                                     {"position_encoding_max_timescale", nullptr},
                                     {"head_dim", nullptr}}) <= kTol);
}

TEST_CASE("settings that change the network change the results", "[encdec][config]") {
  // The README: other position conventions move log-probs by about 1 to 10 nats.
  CHECK(reference_error("first-0", {{"position_encoding_first_position", 0}}) > 1e-2);
  CHECK(reference_error("interleaved", {{"position_encoding_layout", "interleaved"}}) > 1e-2);
  CHECK(reference_error("half", {{"position_encoding_timescale_denominator", "half"}}) > 1e-2);
  CHECK(reference_error("post-norm", {{"pre_norm", false}}) > 1e-2);
  CHECK(reference_error("gelu", {{"activation", "gelu"}}) > 1e-3);
  CHECK(reference_error("scale", {{"attention_scale", 0.25}}) > 1e-3);
  CHECK(reference_error("embedding-scale", {{"embedding_scale", 1.0}}) > 1e-3);
}

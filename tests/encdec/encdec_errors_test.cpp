// Bad model folders are ConfigErrors that name the file and the key or tensor; bad inputs are
// RecordErrors that leave the decoding state usable.
#include <catch2/catch.hpp>

#include <string>

#include "encdec_support.hpp"
#include "masque/error.hpp"
#include "test_support.hpp"

using namespace masque;
using namespace masque::test::encdec;
using Catch::Matchers::Contains;

namespace {

// The message of the ConfigError that loading `folder` throws ("" if it loads).
std::string load_error(const std::filesystem::path& folder) {
  const auto library = open_plugin();  // loaded until the error is handled
  try {
    load_model(library, folder);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string config_error(const std::string& name, const nlohmann::json& edits) {
  return load_error(write_model(name, edits, original_tensors()));
}

}  // namespace

TEST_CASE("config.json problems name the file and the key", "[encdec][errors]") {
  SECTION("a missing key") {
    const std::string e = config_error("missing-key", {{"d_model", nullptr}});
    CHECK_THAT(e, Contains("config.json") && Contains("d_model"));
  }
  SECTION("an unknown position layout") {
    const std::string e = config_error("layout", {{"position_encoding_layout", "cos_then_sin"}});
    CHECK_THAT(e, Contains("config.json") && Contains("position_encoding_layout") &&
                      Contains("cos_then_sin"));
  }
  SECTION("an unknown position encoding") {
    const std::string e = config_error("rotary", {{"position_encoding", "rotary"}});
    CHECK_THAT(e, Contains("config.json") && Contains("'position_encoding'"));
  }
  SECTION("an unsupported activation") {
    const std::string e = config_error("activation", {{"activation", "tanhshrink"}});
    CHECK_THAT(e, Contains("config.json") && Contains("activation") && Contains("tanhshrink"));
  }
  SECTION("a value of the wrong type") {
    const std::string e = config_error("type", {{"pre_norm", "yes"}});
    CHECK_THAT(e, Contains("config.json") && Contains("pre_norm"));
  }
  SECTION("a special token outside the vocabulary") {
    const std::string e = config_error("eos", {{"eos_token_id", 43}});
    CHECK_THAT(e, Contains("config.json") && Contains("eos_token_id"));
  }
  SECTION("shared embeddings with two vocabulary sizes") {
    const std::string e = config_error("shared", {{"shared_embeddings", true}});
    CHECK_THAT(e, Contains("config.json") && Contains("shared_embeddings"));
  }
  SECTION("no config.json at all") {
    const auto dir = masque::test::scratch_dir("encdec-no-config");
    CHECK_THAT(load_error(dir), Contains("config.json"));
  }
}

TEST_CASE("checkpoint problems name the file and the tensor", "[encdec][errors]") {
  auto tensors = original_tensors();
  SECTION("a missing tensor") {
    tensors.erase("decoder.layers.3.encoder_attn.k_proj.bias");
    const std::string e = load_error(write_model("missing-tensor", {}, tensors));
    CHECK_THAT(
        e, Contains("model.safetensors") && Contains("decoder.layers.3.encoder_attn.k_proj.bias"));
  }
  SECTION("a tensor of the wrong shape") {
    tensors["decoder.layers.2.fc1.weight"] =
        tensors["decoder.layers.2.fc1.weight"].reshaped({32, 128});
    const std::string e = load_error(write_model("wrong-shape", {}, tensors));
    CHECK_THAT(e, Contains("model.safetensors") && Contains("decoder.layers.2.fc1.weight") &&
                      Contains("[128, 32]") && Contains("[32, 128]"));
  }
  SECTION("a vocabulary size that does not fit the embeddings") {
    const std::string e = load_error(write_model("vocab", {{"target_vocab_size", 44}}, tensors));
    CHECK_THAT(e, Contains("model.safetensors") && Contains("decoder.embed_tokens.weight"));
  }
  SECTION("a missing final layer norm") {
    tensors.erase("encoder.layer_norm.weight");
    const std::string e = load_error(write_model("final-norm", {}, tensors));
    CHECK_THAT(e, Contains("encoder.layer_norm.weight"));
    // Without the final norm configured, the tensor is not needed.
    CHECK(load_error(
              write_model("no-final-norm", {{"encoder_final_layer_norm", false}}, tensors)) == "");
  }
}

TEST_CASE("bad ids are record errors and leave the state usable", "[encdec][errors]") {
  const LoadedModel model = load_model();
  CHECK_THROWS_AS(model->start(source_batch({{3, 4}, {51}}), nullptr), RecordError);

  const std::vector<TokenId> source{12, 7, 30};
  const Greedy alone = greedy(*model, source);
  auto state = model->start(source_batch({source}), nullptr);
  Tensor logits;
  const std::vector<TokenId> bad{43}, negative{-1}, start{kStart};
  CHECK_THROWS_AS(model->step(*state, step_input(bad), logits), RecordError);
  CHECK_THROWS_AS(model->step(*state, step_input(negative), logits), RecordError);
  StepInput far = step_input(start);
  const std::vector<std::int32_t> position{model->info().max_positions};
  far.positions = position;
  CHECK_THROWS_AS(model->step(*state, far, logits), RecordError);
  model->step(*state, step_input(start), logits);  // as if nothing had happened
  for (std::size_t v = 0; v < alone.logits[0].size(); ++v)
    CHECK(logits.f32()[v] == alone.logits[0][v]);
}

// Bad folders and bad inputs: ConfigErrors naming the file and the key or tensor, RecordErrors
// for ids outside the vocabularies (checked before the state changes).
#include <catch2/catch.hpp>

#include <fstream>

#include "rnn_support.hpp"
#include "test_support.hpp"

using namespace masque;
using namespace masque::test;
using namespace masque::test::rnn;
namespace fs = std::filesystem;

namespace {

// A copy of a fixture with config.json edited (null deletes a key); the checkpoint is linked.
fs::path edited(const std::string& fixture, const nlohmann::json& edits) {
  const fs::path dir =
      scratch_dir("rnn-" + fixture + "-" + std::to_string(std::hash<std::string>{}(edits.dump())));
  auto config = nlohmann::json::parse(read_file(fixture_dir(fixture) / "config.json"));
  for (const auto& [key, value] : edits.items()) {
    if (value.is_null())
      config.erase(key);
    else
      config[key] = value;
  }
  write_file(dir / "config.json", config.dump(2));
  fs::create_symlink(fixture_dir(fixture) / "model.safetensors", dir / "model.safetensors");
  return dir;
}

// The ConfigError message of loading `dir` (empty when it loads).
std::string load_error(const fs::path& dir) {
  const auto library = open_plugin();
  try {
    load_model(library, dir);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("rnn-seq2seq: bad config.json settings name the file and the key", "[rnn]") {
  struct Case {
    nlohmann::json edits;
    std::string key;
  };
  const std::vector<Case> cases{
      {{{"cell", "rnn_tanh"}}, "'cell'"},
      {{{"cell", nullptr}}, "cell"},
      {{{"attention", "dot"}}, "'attention'"},
      {{{"bridge", "mean"}}, "'bridge'"},
      {{{"encoder_layers", 0}}, "'encoder_layers'"},
      {{{"eos_token_id", 24}}, "'eos_token_id'"},
      {{{"architecture", "transformer"}}, "'architecture'"},
      {{{"tie_output_projection", true}}, "'tie_output_projection'"},  // 16 != 20
      {{{"input_feeding", "yes"}}, "input_feeding"},
  };
  for (const Case& c : cases) {
    INFO(c.edits.dump());
    const std::string error = load_error(edited("lstm-bahdanau", c.edits));
    CHECK_THAT(error, Catch::Contains("config.json"));
    CHECK_THAT(error, Catch::Contains(c.key));
  }
}

TEST_CASE("rnn-seq2seq: a missing or misshapen tensor names the checkpoint and the tensor",
          "[rnn]") {
  // gru-bahdanau has no bridge; its out_proj has no bias.
  const std::string missing_bridge = load_error(edited("gru-bahdanau", {{"bridge", "dense"}}));
  CHECK_THAT(missing_bridge, Catch::Contains("model.safetensors"));
  CHECK_THAT(missing_bridge, Catch::Contains("bridge.weight"));
  const std::string missing_bias =
      load_error(edited("gru-bahdanau", {{"attention_output_bias", true}}));
  CHECK_THAT(missing_bias, Catch::Contains("decoder.attention.out_proj.bias"));
  // lstm-bahdanau's encoder is 12 wide per direction and its cell an LSTM.
  const std::string wide = load_error(edited("lstm-bahdanau", {{"encoder_hidden_size", 13}}));
  CHECK_THAT(wide, Catch::Contains("encoder.rnn.weight_ih_l0"));
  CHECK_THAT(wide, Catch::Contains("[52, 16]"));
  const std::string cell = load_error(edited("lstm-bahdanau", {{"cell", "gru"}}));
  CHECK_THAT(cell, Catch::Contains("encoder.rnn.weight_ih_l0"));
  const std::string deep = load_error(edited("lstm-bahdanau", {{"decoder_layers", 3}}));
  CHECK_THAT(deep, Catch::Contains("bridge.weight"));
}

TEST_CASE("rnn-seq2seq: ids outside the vocabularies are record errors", "[rnn]") {
  const auto loaded = load_model("lstm-luong");
  CHECK_THROWS_AS(loaded->start(source_batch({{4, 20}}), nullptr), RecordError);
  auto state = loaded->start(source_batch({{4, 5}}), nullptr);
  const TokenId bad[] = {24};
  Tensor logits;
  StepInput input;
  input.tokens = bad;
  CHECK_THROWS_AS(loaded->step(*state, input, logits), RecordError);
  const TokenId two[] = {1, 1};
  input.tokens = two;
  CHECK_THROWS_AS(loaded->step(*state, input, logits), RuntimeError);
  const TokenId good[] = {1};
  input.tokens = good;
  loaded->step(*state, input, logits);  // the state survived the errors
  CHECK(logits.dim(0) == 1);
}

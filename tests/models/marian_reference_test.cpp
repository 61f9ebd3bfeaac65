// The marian plugin against float64 references from a plain-torch MarianMTModel
// (marian_reference.py, run by the models_marian_fixture test): teacher-forced decoder logits on
// the KV cache for sources of different lengths, alone and in one padded batch; greedy decoding;
// ConfigErrors naming the key for configs the plugin cannot run; the spec names every
// checkpoint tensor once.
#include <catch2/catch.hpp>

#include "masque/threading.hpp"
#include "seq2seq_reference.hpp"

using namespace masque;
using namespace masque::test;
using namespace masque::test::seq2seq;
using nlohmann::json;

namespace {

const std::filesystem::path kFixture = MASQUE_MARIAN_FIXTURE;
constexpr const char* kVariants[] = {"marian-shared", "marian-separate"};

const json& reference() {
  static const json ref = read_json(kFixture / "reference.json");
  return ref;
}

}  // namespace

TEST_CASE("marian: teacher-forced logits match the float64 reference, alone and in a padded batch",
          "[marian]") {
  const ThreadScope one(1);
  for (const char* name : kVariants) {
    DYNAMIC_SECTION(name) {
      auto model = load_model("marian", kFixture / name);
      const ModelInfo& info = model->info();
      const bool shared = std::string(name) == "marian-shared";
      CHECK(info.architecture == "marian");
      CHECK(info.kind == ModelKind::encoder_decoder);
      CHECK(info.source_vocab_size == 80);
      CHECK(info.vocab_size == (shared ? 80 : 72));  // decoder_vocab_size when not shared
      CHECK(info.decoder_start == info.pad);
      CHECK(info.pad == (shared ? 79 : 71));
      CHECK(info.eos == 0);
      CHECK(info.max_positions == 64);
      check_spec_names(*model, kFixture / name);
      check_teacher_forced(*model, reference()[name]);
    }
  }
}

TEST_CASE("marian: greedy decoding on the KV cache gives the reference tokens", "[marian]") {
  const ThreadScope one(1);
  for (const char* name : kVariants) {
    DYNAMIC_SECTION(name) {
      auto model = load_model("marian", kFixture / name);
      check_greedy(*model, reference()[name]);
    }
  }
}

TEST_CASE("marian: a source longer than max_position_embeddings is a record error", "[marian]") {
  auto model = load_model("marian", kFixture / "marian-shared");
  const std::vector<TokenId> long_source(65, 5);
  CHECK_THROWS_WITH(model->start(source_batch({long_source}, model->info().pad), nullptr),
                    Catch::Contains("max_position_embeddings"));
}

TEST_CASE("marian: configs the plugin cannot run are ConfigErrors naming the key",
          "[marian][errors]") {
  const auto base = kFixture / "marian-shared";
  const struct {
    const char* name;
    json edits;
    const char* expected;
  } cases[] = {
      {"pre_norm", {{"normalize_before", true}}, "key 'normalize_before': true is not supported"},
      {"activation", {{"activation_function", "swoosh"}}, "key 'activation_function'"},
      {"heads",
       {{"decoder_attention_heads", 5}},
       "key 'decoder_attention_heads': 5 heads do not divide d_model 32"},
      {"odd",
       {{"d_model", 33}, {"encoder_attention_heads", 3}, {"decoder_attention_heads", 3}},
       "key 'd_model': sinusoidal positions need an even d_model"},
      {"pad", {{"pad_token_id", 80}}, "key 'pad_token_id': token id 80 is outside"},
      {"model_type", {{"model_type", "t5"}}, "key 'model_type': expected 'marian', got 't5'"},
      {"layers", {{"encoder_layers", nullptr}}, "encoder_layers"},
      // Separate tables that this checkpoint (one shared table) does not have.
      {"separate",
       {{"share_encoder_decoder_embeddings", false}},
       "model.encoder.embed_tokens.weight"},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string error =
          load_error("marian", edited_folder(base, std::string("marian_") + c.name, c.edits));
      INFO(error);
      CHECK(error.find(c.expected) != std::string::npos);
      CHECK((error.find("config.json") != std::string::npos ||
             error.find("model.safetensors") != std::string::npos));
    }
  }
}

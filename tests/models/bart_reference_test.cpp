// The bart, mbart and m2m_100 plugins against float64 references from plain-torch transcriptions
// of HF's BART, mBART and M2M-100 (bart_reference.py, run by the models_bart_fixture test):
// teacher-forced decoder logits on the KV cache for sources of different lengths, alone and in
// one padded batch; greedy decoding with the forced first token; a BartModel folder without the
// head; ConfigErrors naming the key for configs the plugins cannot run; the spec names every
// checkpoint tensor once.
#include <catch2/catch.hpp>

#include "masque/threading.hpp"
#include "seq2seq_reference.hpp"

using namespace masque;
using namespace masque::test;
using namespace masque::test::seq2seq;
using nlohmann::json;

namespace {

const std::filesystem::path kFixture = MASQUE_BART_FIXTURE;
constexpr const char* kVariants[] = {"bart-tied", "bart-untied", "mbart", "m2m_100", "nllb"};

const json& reference() {
  static const json ref = read_json(kFixture / "reference.json");
  return ref;
}

std::string plugin_of(const char* name) {
  return reference()[name]["plugin"];
}

}  // namespace

TEST_CASE("bart families: teacher-forced logits match the float64 reference alone and batched",
          "[bart][m2m_100]") {
  const ThreadScope one(1);
  for (const char* name : kVariants) {
    DYNAMIC_SECTION(name) {
      auto model = load_model(plugin_of(name), kFixture / name);
      const ModelInfo& info = model->info();
      CHECK(info.architecture == plugin_of(name));
      CHECK(info.kind == ModelKind::encoder_decoder);
      CHECK(info.vocab_size == 90);
      CHECK(info.source_vocab_size == 90);
      CHECK(info.pad == 1);
      CHECK(info.bos == 0);
      CHECK(info.eos == 2);
      CHECK(info.decoder_start == 2);
      CHECK(info.forced_bos == reference()[name]["forced_bos"].get<TokenId>());
      CHECK(info.max_positions == 64);
      check_spec_names(*model, kFixture / name);
      check_teacher_forced(*model, reference()[name]);
    }
  }
}

TEST_CASE("bart families: greedy decoding on the KV cache gives the reference tokens",
          "[bart][m2m_100]") {
  const ThreadScope one(1);
  for (const char* name : kVariants) {
    DYNAMIC_SECTION(name) {
      auto model = load_model(plugin_of(name), kFixture / name);
      check_greedy(*model, reference()[name]);
    }
  }
}

TEST_CASE("bart: the forced_bos_token_id parameter replaces the config's", "[bart]") {
  Params params;
  params.set("path", (kFixture / "bart-tied").string());
  params.set("forced_bos_token_id", std::int64_t{7});
  auto model = load_plugin<Model>("model", "bart", params);
  CHECK(model->info().forced_bos == 7);
  params.set("forced_bos_token_id", std::int64_t{90});
  CHECK_THROWS_WITH(load_plugin<Model>("model", "bart", params),
                    Catch::Contains("forced_bos_token_id: 90 is outside the vocabulary of 90"));
}

TEST_CASE("bart: a BartModel folder loads without the head and says so when logits are asked",
          "[bart]") {
  auto model = load_model("bart", kFixture / "bart-model");
  const auto* network = dynamic_cast<const transformer::TransformerModel*>(model.get());
  REQUIRE(network != nullptr);
  CHECK_FALSE(network->spec().head.present());
  CHECK(network->spec().encoder.embeddings.tokens.name == "shared.weight");
  auto state = model->start(source_batch({{5, 6, 2}}, model->info().pad), nullptr);
  const TokenId start = model->info().decoder_start;
  StepInput input;
  input.tokens = std::span(&start, 1);
  Tensor logits;
  CHECK_THROWS_WITH(model->step(*state, input, logits),
                    Catch::Contains("no tensor 'model.shared.weight'"));
}

TEST_CASE("bart families: a source longer than max_position_embeddings is a record error",
          "[bart][m2m_100]") {
  for (const char* name : {"bart-tied", "m2m_100"}) {
    DYNAMIC_SECTION(name) {
      auto model = load_model(plugin_of(name), kFixture / name);
      const std::vector<TokenId> long_source(65, 5);
      CHECK_THROWS_WITH(model->start(source_batch({long_source}, model->info().pad), nullptr),
                        Catch::Contains("max_position_embeddings"));
    }
  }
}

TEST_CASE("bart families: configs the plugins cannot run are ConfigErrors naming the key",
          "[bart][m2m_100][errors]") {
  const struct {
    const char* name;
    const char* variant;
    json edits;
    const char* expected;
  } cases[] = {
      {"activation", "bart-tied", {{"activation_function", "swoosh"}}, "key 'activation_function'"},
      {"heads",
       "mbart",
       {{"decoder_attention_heads", 5}},
       "key 'decoder_attention_heads': 5 heads do not divide d_model 32"},
      {"odd",
       "m2m_100",
       {{"d_model", 33}, {"encoder_attention_heads", 3}, {"decoder_attention_heads", 3}},
       "key 'd_model': sinusoidal positions need an even d_model"},
      {"pad", "bart-tied", {{"pad_token_id", 90}}, "key 'pad_token_id': token id 90 is outside"},
      {"forced", "mbart", {{"forced_bos_token_id", 95}}, "key 'forced_bos_token_id'"},
      {"model_type", "mbart", {{"model_type", "bart"}}, "key 'model_type': expected 'mbart'"},
      {"layers", "m2m_100", {{"encoder_layers", nullptr}}, "encoder_layers"},
      // An untied head that this checkpoint (tied) does not have.
      {"untied", "m2m_100", {{"tie_word_embeddings", false}}, "no tensor 'lm_head.weight'"},
      // More layers than the checkpoint holds.
      {"deeper", "bart-tied", {{"decoder_layers", 3}}, "model.decoder.layers.2"},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string error =
          load_error(plugin_of(c.variant),
                     edited_folder(kFixture / c.variant, std::string("bart_") + c.name, c.edits));
      INFO(error);
      CHECK(error.find(c.expected) != std::string::npos);
      CHECK((error.find("config.json") != std::string::npos ||
             error.find("model.safetensors") != std::string::npos));
    }
  }
}

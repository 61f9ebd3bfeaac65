// The t5 plugin against float64 references from a plain-torch T5ForConditionalGeneration
// (t5_reference.py, run by the models_t5_fixture test): teacher-forced decoder logits on the KV
// cache for sources of different lengths, alone and in one padded batch; greedy decoding; and
// ConfigErrors naming the key for configs the plugin cannot run. The spec names every
// checkpoint tensor once (layer 0's relative bias table too).
#include <catch2/catch.hpp>

#include "masque/threading.hpp"
#include "seq2seq_reference.hpp"

using namespace masque;
using namespace masque::test;
using namespace masque::test::seq2seq;
using nlohmann::json;

namespace {

const std::filesystem::path kFixture = MASQUE_T5_FIXTURE;
constexpr const char* kVariants[] = {"t5-v1_0", "t5-v1_1"};

const json& reference() {
  static const json ref = read_json(kFixture / "reference.json");
  return ref;
}

}  // namespace

TEST_CASE("t5: teacher-forced logits match the float64 reference, alone and in a padded batch",
          "[t5]") {
  const ThreadScope one(1);
  for (const char* name : kVariants) {
    DYNAMIC_SECTION(name) {
      auto model = load_model("t5", kFixture / name);
      const ModelInfo& info = model->info();
      CHECK(info.architecture == "t5");
      CHECK(info.kind == ModelKind::encoder_decoder);
      CHECK(info.vocab_size == 64);
      CHECK(info.decoder_start == 0);  // the pad id
      CHECK(info.pad == 0);
      CHECK(info.eos == 1);
      CHECK(info.max_positions == 0);  // relative positions: no limit
      check_spec_names(*model, kFixture / name);
      check_teacher_forced(*model, reference()[name]);
    }
  }
}

TEST_CASE("t5: greedy decoding on the KV cache gives the reference tokens", "[t5]") {
  const ThreadScope one(1);
  for (const char* name : kVariants) {
    DYNAMIC_SECTION(name) {
      auto model = load_model("t5", kFixture / name);
      check_greedy(*model, reference()[name]);
    }
  }
}

TEST_CASE("t5: configs the plugin cannot run are ConfigErrors naming the key", "[t5][errors]") {
  const auto base = kFixture / "t5-v1_1";
  const struct {
    const char* name;
    json edits;
    const char* expected;
  } cases[] = {
      {"ffp_unknown",
       {{"feed_forward_proj", "gated-swoosh"}},
       "key 'feed_forward_proj': unsupported value 'gated-swoosh'"},
      {"ffp_shape",
       {{"feed_forward_proj", "double-gated-gelu"}},
       "key 'feed_forward_proj': 'double-gated-gelu' is not ACT or gated-ACT"},
      {"buckets",
       {{"relative_attention_num_buckets", 2}},
       "key 'relative_attention_num_buckets': must be at least 4"},
      {"distance",
       {{"relative_attention_max_distance", 16}},
       "key 'relative_attention_max_distance': must exceed relative_attention_num_buckets / 2"},
      {"model_type", {{"model_type", "bart"}}, "key 'model_type': expected 't5', got 'bart'"},
      {"d_kv", {{"d_kv", nullptr}}, "d_kv"},
      {"start",
       {{"decoder_start_token_id", 64}},
       "key 'decoder_start_token_id': token id 64 is outside vocab_size 64"},
      // The checkpoint was saved with a separate lm_head: tying would read the wrong table,
      // and the gated MLP's tensors do not exist under the v1.0 names.
      {"relu", {{"feed_forward_proj", "relu"}}, "DenseReluDense.wi.weight"},
      {"bias_shape", {{"relative_attention_num_buckets", 16}}, "relative_attention_bias.weight"},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const std::string error =
          load_error("t5", edited_folder(base, std::string("t5_") + c.name, c.edits));
      INFO(error);
      CHECK(error.find(c.expected) != std::string::npos);
      CHECK((error.find("config.json") != std::string::npos ||
             error.find("model.safetensors") != std::string::npos));
    }
  }
  // A config whose head is untied while the checkpoint has no lm_head.
  const std::string untied = load_error(
      "t5", edited_folder(kFixture / "t5-v1_0", "t5_untied", {{"tie_word_embeddings", false}}));
  CHECK(untied.find("key 'tie_word_embeddings': false, but") != std::string::npos);
}

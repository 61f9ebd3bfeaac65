// Model folders the gpt2 and llama plugins must read (sharded, unprefixed, separate heads,
// biases, generation_config.json) or reject with a ConfigError naming the file and the key or
// tensor; and inputs they must reject with a RecordError.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "lm_reference.hpp"
#include "masque/error.hpp"
#include "masque/safetensors.hpp"
#include "masque/threading.hpp"
#include "model_plugin.hpp"

using namespace masque;
using namespace masque::test;
namespace fs = std::filesystem;

namespace {

using Tensors = std::vector<std::pair<std::string, Tensor>>;

fs::path gpt2_folder() {
  return shared_dir() / "models" / "tiny-gpt2";
}
fs::path llama_folder() {
  return shared_dir() / "models" / "stories260k";
}

Tensors read_tensors(const fs::path& folder) {
  const SafeTensors st = SafeTensors::open(folder);
  Tensors out;
  for (const auto& name : st.names()) out.emplace_back(name, st.get_f32(name).clone());
  return out;
}

// A standard safetensors file of F32 tensors.
void write_safetensors(const fs::path& file, const Tensors& tensors) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {
        {"dtype", "F32"}, {"shape", t.shape()}, {"data_offsets", {offset, offset + t.bytes()}}};
    offset += t.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(file, std::ios::binary);
  const std::uint64_t size = text.size();
  out.write(reinterpret_cast<const char*>(&size), 8);  // little-endian host
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : tensors)
    out.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.bytes()));
  REQUIRE(out.good());
}

void write_json(const fs::path& file, const nlohmann::json& j) {
  write_file(file, j.dump(2));
}

// A scratch copy of `source` with config.json and the tensors edited (a null editor keeps the
// original file, linked rather than copied).
fs::path edited_folder(const std::string& name, const fs::path& source,
                       const std::function<void(nlohmann::json&)>& edit_config,
                       const std::function<void(Tensors&)>& edit_tensors) {
  const fs::path dir = scratch_dir("models-" + name);
  nlohmann::json config = read_json(source / "config.json");
  if (edit_config) edit_config(config);
  write_json(dir / "config.json", config);
  if (edit_tensors) {
    Tensors tensors = read_tensors(source);
    edit_tensors(tensors);
    write_safetensors(dir / "model.safetensors", tensors);
  } else {
    fs::create_symlink(source / "model.safetensors", dir / "model.safetensors");
  }
  return dir;
}

Tensor& find(Tensors& tensors, const std::string& name) {
  for (auto& [n, t] : tensors)
    if (n == name) return t;
  FAIL("no tensor " << name);
  throw std::logic_error("unreachable");
}

void remove_tensor(Tensors& tensors, const std::string& name) {
  std::erase_if(tensors, [&](const auto& p) { return p.first == name; });
}

Tensor scaled(const Tensor& t, float factor) {
  Tensor out = t.clone();
  for (std::int64_t i = 0; i < out.numel(); ++i) out.f32()[i] *= factor;
  return out;
}

// All logits of a fixed sequence under the causal layout.
Tensor logits_of(const Model& model, const std::vector<TokenId>& ids) {
  auto causal = load_mask("causal");
  return model.forward(make_batch(*causal, {ids})).logits;
}

double max_diff(const Tensor& a, const Tensor& b, float b_factor = 1.0f) {
  REQUIRE(a.shape() == b.shape());
  double d = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i)
    d = std::max(d, double{std::abs(a.f32()[i] - b_factor * b.f32()[i])});
  return d;
}

// The ConfigError create() throws for `folder`.
std::string config_error(const std::string& plugin, const fs::path& folder) {
  try {
    load_model(plugin, folder);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL(plugin << " accepted " << folder);
  return {};
}

const std::vector<TokenId> kGpt2Ids = {464, 2068, 7586, 21831, 50256, 0, 318, 13};
const std::vector<TokenId> kLlamaIds = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};

}  // namespace

TEST_CASE("models: gpt2 reads unprefixed, sharded and separate-head folders") {
  ThreadScope one(1);
  const Tensor want = logits_of(*load_model("gpt2", gpt2_folder()), kGpt2Ids);

  SECTION("tensor names without 'transformer.'") {
    const fs::path dir = edited_folder("gpt2-unprefixed", gpt2_folder(), nullptr, [](Tensors& t) {
      for (auto& [name, tensor] : t)
        if (name.rfind("transformer.", 0) == 0) name = name.substr(12);
    });
    CHECK(max_diff(logits_of(*load_model("gpt2", dir), kGpt2Ids), want) < 1e-6);
  }
  SECTION("sharded through model.safetensors.index.json") {
    const fs::path dir = scratch_dir("models-gpt2-sharded");
    fs::copy_file(gpt2_folder() / "config.json", dir / "config.json");
    Tensors all = read_tensors(gpt2_folder());
    const Tensors first(all.begin(), all.begin() + 10), second(all.begin() + 10, all.end());
    write_safetensors(dir / "model-00001-of-00002.safetensors", first);
    write_safetensors(dir / "model-00002-of-00002.safetensors", second);
    nlohmann::json map;
    for (const auto& [name, t] : first) map[name] = "model-00001-of-00002.safetensors";
    for (const auto& [name, t] : second) map[name] = "model-00002-of-00002.safetensors";
    write_json(dir / "model.safetensors.index.json", {{"metadata", {}}, {"weight_map", map}});
    CHECK(max_diff(logits_of(*load_model("gpt2", dir), kGpt2Ids), want) < 1e-6);
  }
  SECTION("a separate lm_head when tie_word_embeddings is false") {
    const fs::path dir = edited_folder(
        "gpt2-head", gpt2_folder(), [](nlohmann::json& c) { c["tie_word_embeddings"] = false; },
        [](Tensors& t) {
          t.emplace_back("lm_head.weight", scaled(find(t, "transformer.wte.weight"), 2));
        });
    CHECK(max_diff(logits_of(*load_model("gpt2", dir), kGpt2Ids), want, 2.0f) < 1e-5);
  }
  SECTION("an explicit n_inner and generation_config.json's eos list") {
    const fs::path dir = edited_folder(
        "gpt2-generation", gpt2_folder(), [](nlohmann::json& c) { c["n_inner"] = 128; }, nullptr);
    write_json(dir / "generation_config.json", {{"eos_token_id", {50, 50256}}});
    auto model = load_model("gpt2", dir);
    CHECK(model->info().eos == 50);                                   // the first of a list
    CHECK(model->info().end_ids == std::vector<TokenId>{50, 50256});  // all of it ends generation
    CHECK(model->info().bos == 50256);
    CHECK(max_diff(logits_of(*model, kGpt2Ids), want) < 1e-6);
  }
}

TEST_CASE("models: llama reads separate heads, zero biases, rope_scaling default") {
  ThreadScope one(1);
  const Tensor want = logits_of(*load_model("llama", llama_folder()), kLlamaIds);

  SECTION("a separate lm_head when tie_word_embeddings is false") {
    const fs::path dir = edited_folder(
        "llama-head", llama_folder(), [](nlohmann::json& c) { c["tie_word_embeddings"] = false; },
        [](Tensors& t) {
          t.emplace_back("lm_head.weight", scaled(find(t, "model.embed_tokens.weight"), 2));
        });
    CHECK(max_diff(logits_of(*load_model("llama", dir), kLlamaIds), want, 2.0f) < 1e-4);
  }
  SECTION("attention_bias and mlp_bias read their (here zero) biases") {
    const fs::path dir = edited_folder(
        "llama-bias", llama_folder(),
        [](nlohmann::json& c) {
          c["attention_bias"] = true;
          c["mlp_bias"] = true;
        },
        [](Tensors& t) {
          const std::pair<const char*, std::int64_t> biases[] = {
              {"self_attn.q_proj", 64}, {"self_attn.k_proj", 32}, {"self_attn.v_proj", 32},
              {"self_attn.o_proj", 64}, {"mlp.gate_proj", 172},   {"mlp.up_proj", 172},
              {"mlp.down_proj", 64}};
          for (int l = 0; l < 5; ++l)
            for (const auto& [name, n] : biases)
              t.emplace_back("model.layers." + std::to_string(l) + "." + name + ".bias",
                             Tensor::zeros({n}));
        });
    CHECK(max_diff(logits_of(*load_model("llama", dir), kLlamaIds), want) < 1e-6);
    // Without them the folder is incomplete.
    const fs::path bare = edited_folder(
        "llama-bias-missing", llama_folder(), [](nlohmann::json& c) { c["mlp_bias"] = true; },
        nullptr);
    const std::string error = config_error("llama", bare);
    CHECK_THAT(error, Catch::Contains("model.layers.0.mlp.gate_proj.bias"));
  }
  SECTION("rope_scaling of type default is plain RoPE") {
    const fs::path dir = edited_folder(
        "llama-rope-default", llama_folder(),
        [](nlohmann::json& c) {
          c["rope_scaling"] = {{"rope_type", "default"}};
        },
        nullptr);
    CHECK(max_diff(logits_of(*load_model("llama", dir), kLlamaIds), want) < 1e-6);
  }
}

TEST_CASE("models: bad folders are ConfigErrors naming the file and the key or tensor") {
  SECTION("missing config.json") {
    for (const auto& [plugin, source] :
         {std::pair{"gpt2", gpt2_folder()}, std::pair{"llama", llama_folder()}}) {
      const fs::path dir = scratch_dir(std::string("models-noconfig-") + plugin);
      fs::create_symlink(source / "model.safetensors", dir / "model.safetensors");
      const std::string error = config_error(plugin, dir);
      CHECK_THAT(error, Catch::Contains((dir / "config.json").string()));
    }
  }
  SECTION("missing tensor") {
    const fs::path gpt2 = edited_folder("gpt2-missing", gpt2_folder(), nullptr, [](Tensors& t) {
      remove_tensor(t, "transformer.h.1.mlp.c_fc.bias");
    });
    std::string error = config_error("gpt2", gpt2);
    CHECK_THAT(error, Catch::Contains("model.safetensors") &&
                          Catch::Contains("transformer.h.1.mlp.c_fc.bias"));
    const fs::path llama = edited_folder("llama-missing", llama_folder(), nullptr, [](Tensors& t) {
      remove_tensor(t, "model.layers.3.self_attn.k_proj.weight");
    });
    error = config_error("llama", llama);
    CHECK_THAT(error, Catch::Contains("model.safetensors") &&
                          Catch::Contains("model.layers.3.self_attn.k_proj.weight"));
  }
  SECTION("tied head switched off without lm_head.weight") {
    const fs::path dir = edited_folder(
        "gpt2-nohead", gpt2_folder(), [](nlohmann::json& c) { c["tie_word_embeddings"] = false; },
        nullptr);
    CHECK_THAT(config_error("gpt2", dir), Catch::Contains("lm_head.weight"));
  }
  SECTION("wrong tensor shape") {
    const fs::path gpt2 = edited_folder("gpt2-shape", gpt2_folder(), nullptr, [](Tensors& t) {
      Tensor& w = find(t, "transformer.h.0.attn.c_attn.weight");
      w = w.reshaped({96, 32});  // an nn.Linear-style [out, in] weight where Conv1D's belongs
    });
    std::string error = config_error("gpt2", gpt2);
    CHECK_THAT(error, Catch::Contains("transformer.h.0.attn.c_attn.weight") &&
                          Catch::Contains("[96, 32]") && Catch::Contains("[32, 96]"));
    const fs::path llama = edited_folder("llama-shape", llama_folder(), nullptr, [](Tensors& t) {
      Tensor& w = find(t, "model.layers.2.mlp.down_proj.weight");
      w = w.reshaped({172, 64});
    });
    error = config_error("llama", llama);
    CHECK_THAT(error, Catch::Contains("model.layers.2.mlp.down_proj.weight") &&
                          Catch::Contains("[172, 64]"));
  }
  SECTION("unsupported or incomplete rope_scaling") {
    // {rope_scaling, what the error names}
    for (const auto& [scaling, named] : std::vector<std::pair<nlohmann::json, std::string>>{
             {{{"type", "dynamic"}, {"factor", 2.0}}, "dynamic"},
             {{{"rope_type", "yarn"}, {"factor", 4.0}}, "yarn"},
             {{{"rope_type", "llama3"}, {"factor", 8.0}}, "rope_scaling.low_freq_factor"},
             {{{"type", "linear"}, {"factor", -1.0}}, "rope_scaling.factor"},
             {{{"rope_type", "llama3"},
               {"factor", 8.0},
               {"low_freq_factor", 4.0},
               {"high_freq_factor", 1.0},
               {"original_max_position_embeddings", 8192}},
              "rope_scaling.high_freq_factor"}}) {
      const nlohmann::json& entry = scaling;  // (clang 14 cannot capture a structured binding)
      const fs::path dir = edited_folder(
          "llama-rope", llama_folder(), [&](nlohmann::json& c) { c["rope_scaling"] = entry; },
          nullptr);
      const std::string error = config_error("llama", dir);
      CHECK_THAT(error, Catch::Contains((dir / "config.json").string()) &&
                            Catch::Contains("rope_scaling") && Catch::Contains(named));
    }
  }
  SECTION("a negative token id other than -1 (none)") {
    const fs::path eos = edited_folder(
        "llama-eos", llama_folder(), [](nlohmann::json& c) { c["eos_token_id"] = -5; }, nullptr);
    CHECK_THAT(config_error("llama", eos), Catch::Contains("config.json") &&
                                               Catch::Contains("eos_token_id") &&
                                               Catch::Contains("-5"));
    const fs::path none = edited_folder(
        "llama-pad-none", llama_folder(), [](nlohmann::json& c) { c["pad_token_id"] = -1; },
        nullptr);
    CHECK(load_model("llama", none)->info().pad == -1);
  }
  SECTION("inconsistent settings") {
    const fs::path gpt2 = edited_folder(
        "gpt2-heads", gpt2_folder(), [](nlohmann::json& c) { c["n_head"] = 5; }, nullptr);
    CHECK_THAT(config_error("gpt2", gpt2),
               Catch::Contains("config.json") && Catch::Contains("n_head"));
    const fs::path act = edited_folder(
        "gpt2-act", gpt2_folder(), [](nlohmann::json& c) { c["activation_function"] = "mish"; },
        nullptr);
    CHECK_THAT(config_error("gpt2", act),
               Catch::Contains("activation_function") && Catch::Contains("mish"));
    const fs::path llama = edited_folder(
        "llama-kv", llama_folder(), [](nlohmann::json& c) { c["num_key_value_heads"] = 3; },
        nullptr);
    CHECK_THAT(config_error("llama", llama),
               Catch::Contains("config.json") && Catch::Contains("num_key_value_heads"));
    const fs::path type = edited_folder(
        "llama-type", llama_folder(), [](nlohmann::json& c) { c["model_type"] = "mistral"; },
        nullptr);
    CHECK_THAT(config_error("llama", type), Catch::Contains("model_type"));
  }
  SECTION("a norm epsilon that is not positive") {
    const fs::path gpt2 = edited_folder(
        "gpt2-eps", gpt2_folder(), [](nlohmann::json& c) { c["layer_norm_epsilon"] = -1; },
        nullptr);
    CHECK_THAT(config_error("gpt2", gpt2), Catch::Contains("layer_norm_epsilon"));
    const fs::path llama = edited_folder(
        "llama-eps", llama_folder(), [](nlohmann::json& c) { c["rms_norm_eps"] = 0; }, nullptr);
    CHECK_THAT(config_error("llama", llama), Catch::Contains("rms_norm_eps"));
  }
  SECTION("fewer layers in config.json than in the checkpoint") {
    const fs::path gpt2 = edited_folder(
        "gpt2-layers", gpt2_folder(), [](nlohmann::json& c) { c["n_layer"] = 1; }, nullptr);
    CHECK_THAT(config_error("gpt2", gpt2),
               Catch::Contains("transformer.h.1.") && Catch::Contains("fewer layers"));
    const fs::path llama = edited_folder(
        "llama-layers", llama_folder(), [](nlohmann::json& c) { c["num_hidden_layers"] = 2; },
        nullptr);
    CHECK_THAT(config_error("llama", llama),
               Catch::Contains("model.layers.2.") && Catch::Contains("fewer layers"));
  }
  SECTION("a weight that is NaN or infinite") {
    const fs::path gpt2 = edited_folder("gpt2-nan", gpt2_folder(), nullptr, [](Tensors& t) {
      find(t, "transformer.ln_f.weight").f32()[3] = std::numeric_limits<float>::quiet_NaN();
    });
    CHECK_THAT(config_error("gpt2", gpt2),
               Catch::Contains("transformer.ln_f.weight") && Catch::Contains("NaN at element 3"));
    const fs::path llama = edited_folder("llama-inf", llama_folder(), nullptr, [](Tensors& t) {
      find(t, "model.layers.1.mlp.up_proj.weight").f32()[0] =
          -std::numeric_limits<float>::infinity();
    });
    CHECK_THAT(config_error("llama", llama), Catch::Contains("model.layers.1.mlp.up_proj.weight") &&
                                                 Catch::Contains("an infinity at element 0"));
  }
  SECTION("an end token outside the vocabulary") {
    const fs::path gpt2 = edited_folder(
        "gpt2-eos", gpt2_folder(), [](nlohmann::json& c) { c["eos_token_id"] = 99999; }, nullptr);
    CHECK_THAT(config_error("gpt2", gpt2),
               Catch::Contains("eos_token_id 99999") && Catch::Contains("outside the vocabulary"));
  }
}

TEST_CASE("models: ids and positions the model cannot take are RecordErrors") {
  ThreadScope one(1);
  auto causal = load_mask("causal");
  for (const auto& [plugin, source, vocab, max_positions] :
       {std::tuple{"gpt2", gpt2_folder(), 50257, 128},
        std::tuple{"llama", llama_folder(), 512, 512}}) {
    DYNAMIC_SECTION(plugin) {
      auto model = load_model(plugin, source);
      Batch batch = make_batch(*causal, {{1, 2, 3}, {4, 5}});
      batch.ids[1 * 3 + 1] = vocab + 17;
      const auto size = vocab;  // (clang 14 cannot capture a structured binding)
      CHECK_THROWS_MATCHES(model->forward(batch), RecordError,
                           Catch::Matchers::Predicate<RecordError>([&](const RecordError& e) {
                             const std::string m = e.what();
                             return m.find(std::to_string(size + 17)) != std::string::npos &&
                                    m.find(std::to_string(size)) != std::string::npos;
                           }));
      batch.ids[1 * 3 + 1] = -3;
      CHECK_THROWS_AS(model->start(batch, nullptr), RecordError);
      batch.ids[1 * 3 + 1] = 5;
      batch.positions[2] = max_positions;
      CHECK_THROWS_WITH(model->forward(batch), Catch::Contains(std::to_string(max_positions)));

      // A failed step leaves the state usable.
      batch.positions[2] = 2;
      Tensor logits;
      auto state = model->start(batch, nullptr);
      const std::vector<TokenId> bad = {7, vocab};
      StepInput input;
      input.tokens = bad;
      CHECK_THROWS_AS(model->step(*state, input, logits), RecordError);
      const std::vector<std::int32_t> too_far = {3, max_positions};
      const std::vector<TokenId> good = {7, 8};
      input.tokens = good;
      input.positions = too_far;
      CHECK_THROWS_AS(model->step(*state, input, logits), RecordError);
      input.positions = {};
      model->step(*state, input, logits);
      const Tensor full = model->forward(make_batch(*causal, {{1, 2, 3, 7}, {4, 5, 8}})).logits;
      const std::int64_t v = vocab;
      double diff = 0;
      for (std::int64_t i = 0; i < v; ++i) {
        diff = std::max(diff, double{std::abs(logits.f32()[i] - full.f32()[3 * v + i])});
        diff = std::max(diff, double{std::abs(logits.f32()[v + i] - full.f32()[(4 + 2) * v + i])});
      }
      CHECK(diff < 1e-4);
    }
  }
}

// Fuzz target: config.json. The input is parsed by JsonConfig (every typed getter is tried on
// the keys models read), then given as config.json to one of the model plugins (chosen by the
// first byte) next to the matching real checkpoint from ../shared, so the plugins' own config
// checks see it too. Anything but a ConfigError (or a working model) is a finding.
#include <array>

#include "fuzz_support.hpp"
#include "masque/config_json.hpp"
#include "masque/error.hpp"
#include "masque/model.hpp"
#include "pipeline.hpp"

namespace {

namespace fs = std::filesystem;

struct ModelFolder {
  const char* plugin;
  const char* checkpoint;  // folder in ../shared/models
};
constexpr std::array<ModelFolder, 4> kModels = {{{"gpt2", "tiny-gpt2"},
                                                 {"llama", "stories260k"},
                                                 {"bert", "tiny-bert-uncased"},
                                                 {"encoder-decoder", "aren-transliteration"}}};

// A folder per model plugin holding the real weights (a symlink) and the fuzzed config.json.
fs::path model_folder(std::size_t k) {
  const fs::path dir = masque::fuzz::scratch_dir() / kModels[k].plugin;
  if (!fs::exists(dir)) {
    fs::create_directories(dir);
    fs::create_symlink(
        masque::fuzz::shared_dir() / "models" / kModels[k].checkpoint / "model.safetensors",
        dir / "model.safetensors");
  }
  return dir;
}

// Every getter on keys of every kind: only ConfigError may come out.
void read_keys(const masque::JsonConfig& config) {
  static const char* const keys[] = {
      "vocab_size",   "hidden_size", "n_embd",         "num_attention_heads", "eos_token_id",
      "rope_scaling", "model_type",  "layer_norm_eps", "tie_word_embeddings", "d_model"};
  for (const char* key : keys) {
    auto attempt = [](auto&& f) {
      try {
        f();
      } catch (const masque::ConfigError&) {
      }
    };
    attempt([&] { (void)config.get_int(key); });
    attempt([&] { (void)config.get_int(key, 7); });
    attempt([&] { (void)config.get_number(key); });
    attempt([&] { (void)config.get_number(key, 0.5); });
    attempt([&] { (void)config.get_bool(key); });
    attempt([&] { (void)config.get_bool(key, true); });
    attempt([&] { (void)config.get_string(key); });
    attempt([&] { (void)config.get_string(key, "x"); });
    attempt([&] { (void)config.get_int_list(key); });
    (void)config.has(key);
  }
}

void create_model(std::size_t k, std::string_view text) {
  const fs::path dir = model_folder(k);
  masque::fuzz::write_bytes(dir / "config.json", text);
  const masque::PluginEntry& entry =
      masque::fuzz::registry().find(masque::PluginKind::model, kModels[k].plugin);
  masque::Params params = masque::default_params(*entry.descriptor);
  params.set("path", dir.string());
  auto model = masque::fuzz::registry().create(entry, params);
  const auto& info = dynamic_cast<const masque::Model&>(*model).info();
  MASQUE_FUZZ_CHECK(info.vocab_size > 0);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (std::size_t k = 0; k < kModels.size(); ++k) model_folder(k);
  (void)masque::fuzz::registry();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text = masque::fuzz::as_text(data + 1, size - 1);
  try {
    read_keys(masque::JsonConfig::parse(text, "config.json"));
  } catch (const masque::ConfigError&) {
    return 0;  // not a JSON object: the plugins would stop at the same point
  }
  try {
    create_model(data[0] % kModels.size(), text);
  } catch (const masque::ConfigError&) {
  }
  return 0;
}

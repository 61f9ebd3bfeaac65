// The weights tests' folders (weights_support.hpp).
#include "weights_support.hpp"

#include <catch2/catch.hpp>

#include <cctype>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "masque/safetensors.hpp"

namespace masque::test {

namespace fs = std::filesystem;

namespace {

struct Stored {
  std::string name;
  Shape shape;
  std::vector<std::uint16_t> bf16;  // the weights, exactly representable in bfloat16
};

// Llama-shaped random weights (seeded), rounded to bfloat16 so F32 and BF16 files hold the same
// numbers.
std::vector<Stored> make_weights() {
  std::mt19937 rng(20261202);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<Stored> out;
  auto add = [&](std::string name, Shape shape, bool ones) {
    Stored s{std::move(name), std::move(shape), {}};
    std::vector<float> values(static_cast<std::size_t>(num_elements(s.shape)));
    for (float& v : values) v = ones ? 1.0f + 0.1f * normal(rng) : normal(rng);
    s.bf16.resize(values.size());
    round_to_bf16(values.data(), static_cast<std::int64_t>(values.size()), s.bf16.data());
    out.push_back(std::move(s));
  };
  const int head_dim = kHidden / kHeads;
  add("model.embed_tokens.weight", {kVocab, kHidden}, false);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {kHidden}, true);
    add(p + "self_attn.q_proj.weight", {kHidden, kHidden}, false);
    add(p + "self_attn.k_proj.weight", {kKvHeads * head_dim, kHidden}, false);
    add(p + "self_attn.v_proj.weight", {kKvHeads * head_dim, kHidden}, false);
    add(p + "self_attn.o_proj.weight", {kHidden, kHidden}, false);
    add(p + "post_attention_layernorm.weight", {kHidden}, true);
    add(p + "mlp.gate_proj.weight", {kInner, kHidden}, false);
    add(p + "mlp.up_proj.weight", {kInner, kHidden}, false);
    add(p + "mlp.down_proj.weight", {kHidden, kInner}, false);
  }
  add("model.norm.weight", {kHidden}, true);
  return out;
}

// One safetensors file of `tensors` as F32 or BF16 (data aligned to 8 bytes as HF writes it).
std::size_t write_safetensors(const fs::path& file, const std::vector<const Stored*>& tensors,
                              bool bf16) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  std::size_t offset = 0;
  for (const Stored* t : tensors) {
    const std::size_t bytes = t->bf16.size() * (bf16 ? 2 : 4);
    header[t->name] = {{"dtype", bf16 ? "BF16" : "F32"},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(file, std::ios::binary);
  const std::uint64_t size = text.size();
  out.write(reinterpret_cast<const char*>(&size), 8);  // little-endian host
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const Stored* t : tensors) {
    if (bf16) {
      out.write(reinterpret_cast<const char*>(t->bf16.data()),
                static_cast<std::streamsize>(t->bf16.size() * 2));
    } else {
      std::vector<float> f(t->bf16.size());
      widen_bf16(t->bf16.data(), static_cast<std::int64_t>(f.size()), f.data());
      out.write(reinterpret_cast<const char*>(f.data()),
                static_cast<std::streamsize>(f.size() * 4));
    }
  }
  REQUIRE(out.good());
  return 8 + text.size() + offset;
}

void write_config(const fs::path& dir) {
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                 {"model_type", "llama"},
                                 {"hidden_size", kHidden},
                                 {"intermediate_size", kInner},
                                 {"num_hidden_layers", kLayers},
                                 {"num_attention_heads", kHeads},
                                 {"num_key_value_heads", kKvHeads},
                                 {"vocab_size", kVocab},
                                 {"max_position_embeddings", 256},
                                 {"rms_norm_eps", 1e-5},
                                 {"rope_theta", 10000.0},
                                 {"tie_word_embeddings", true},
                                 {"bos_token_id", 1},
                                 {"eos_token_id", 2}};
  write_file(dir / "config.json", config.dump(2));
}

}  // namespace

const Folders& folders() {
  static const Folders made = [] {
    const std::vector<Stored> weights = make_weights();
    std::vector<const Stored*> all;
    for (const auto& w : weights) all.push_back(&w);
    Folders f{scratch_dir("weights-f32"), scratch_dir("weights-bf16"),
              scratch_dir("weights-sharded"), 0};
    for (const fs::path& dir : {f.f32, f.bf16, f.sharded}) write_config(dir);
    write_safetensors(f.f32 / "model.safetensors", all, false);
    f.bf16_bytes = write_safetensors(f.bf16 / "model.safetensors", all, true);
    // Three shards, as Hugging Face writes them, named by an index.
    nlohmann::json map;
    const std::size_t per = (all.size() + 2) / 3;
    for (std::size_t s = 0; s < 3; ++s) {
      const std::string shard = "model-0000" + std::to_string(s + 1) + "-of-00003.safetensors";
      const std::vector<const Stored*> part(all.begin() + std::min(all.size(), s * per),
                                            all.begin() + std::min(all.size(), (s + 1) * per));
      write_safetensors(f.sharded / shard, part, true);
      for (const Stored* t : part) map[t->name] = shard;
    }
    write_file(f.sharded / "model.safetensors.index.json",
               nlohmann::json{{"metadata", {}}, {"weight_map", map}}.dump());
    return f;
  }();
  return made;
}

Tensor logits_of(const Model& model) {
  auto causal = load_mask("causal");
  const std::vector<TokenId> a = {1, 400, 7, 16000, 2, 88, 1234}, b = {1, 9, 10};
  return model.forward(make_batch(*causal, {a, b})).logits;
}

LoadedPlugin<Model> load_llama(const fs::path& dir, const std::string& matmul_dtype,
                               std::int64_t group) {
  Params params;
  params.set("path", dir.string());
  params.set("matmul_dtype", matmul_dtype);
  if (group > 0) params.set("int4_group_size", group);
  return load_plugin<Model>("model", "llama", params);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

std::size_t resident_kb(const fs::path& file) {
  std::ifstream in("/proc/self/smaps");
  const std::string name = fs::canonical(file).string();
  std::string line;
  bool ours = false;
  std::size_t kb = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find('-') <
            line.find(' ')) {  // a mapping's header: "lo-hi perms offset dev inode path"
      ours = line.size() >= name.size() &&
             line.compare(line.size() - name.size(), name.size(), name) == 0;
    } else if (ours && line.rfind("Rss:", 0) == 0) {
      kb += std::stoull(line.substr(4));
    }
  }
  return kb;
}

}  // namespace masque::test

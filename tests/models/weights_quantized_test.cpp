// Quantized folders (`masque quantize`, masque/transformer/quantized_folder.hpp): quantize then
// load gives the bits of quantizing at load, single-file and sharded; the folder runs in its own
// type and says so; malformed quantized tensors are refused naming the file and the tensor.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "masque/error.hpp"
#include "masque/safetensors.hpp"
#include "masque/safetensors_writer.hpp"
#include "masque/threading.hpp"
#include "masque/transformer/model.hpp"
#include "masque/transformer/quantized_folder.hpp"
#include "weights_support.hpp"

using namespace masque;
using namespace masque::test;
namespace fs = std::filesystem;

namespace {

std::string type_name(const MatmulType& t) {
  return t.compute == DType::i4 ? "int4" : "int8";
}

// `source` quantized by the library (the code `masque quantize` runs) into a new folder.
fs::path quantized(const fs::path& source, const MatmulType& type, const std::string& name,
                   std::uint64_t max_shard_bytes = 4ull << 30) {
  const fs::path out = own_scratch_dir("quantized") / name;
  const auto model =
      load_llama(source, type_name(type), type.compute == DType::i4 ? type.group_size : 0);
  const auto& tier = dynamic_cast<const transformer::TransformerModel&>(*model);
  transformer::QuantizeOptions options;
  options.type = type;
  options.max_shard_bytes = max_shard_bytes;
  transformer::write_quantized_folder(tier.spec(), transformer::open_checkpoint(source), source,
                                      out, options);
  return out;
}

nlohmann::json config_of(const fs::path& dir) {
  std::ifstream in(dir / "config.json");
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("quantized folders: quantize then load gives load-time quantization's bits",
          "[weights][quantize]") {
  ThreadScope one(1);
  const Folders& f = folders();
  // int4 in groups of 96 quantizes only the layers of 768 inputs (down_proj): the others stay f32.
  for (const MatmulType type :
       {MatmulType(DType::i8), MatmulType(DType::i4, 32), MatmulType(DType::i4, 96)}) {
    const std::string name = type_name(type) + "-" + std::to_string(type.group_size);
    INFO(name);
    const auto at_load =
        load_llama(f.bf16, type_name(type), type.compute == DType::i4 ? type.group_size : 0);
    const Tensor want = logits_of(*at_load);
    const fs::path dir = quantized(f.bf16, type, name);
    const nlohmann::json q = config_of(dir)["quantization"];
    CHECK(q["format"] == "masque");
    CHECK(q["dtype"] == type_name(type));
    const auto loaded = load_llama(dir, "auto");
    CHECK(same_bits(logits_of(*loaded), want));
    // The same layers in the same types, and the same memory.
    const LinearList a = at_load->linear_layers(), b = loaded->linear_layers();
    REQUIRE(a.size() == b.size());
    std::size_t low_bits = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].first == b[i].first);
      CHECK(a[i].second->compute() == b[i].second->compute());
      CHECK(a[i].second->weight_bytes() == b[i].second->weight_bytes());
      low_bits += b[i].second->compute() != DType::f32;
    }
    CHECK(q["quantized_layers"] == low_bits);
    CHECK(q["kept_layers"] == a.size() - low_bits);
    if (type.group_size == 96) {
      CHECK(low_bits == kLayers);  // down_proj only
    } else {
      CHECK(low_bits == a.size());
    }
    // Its own type is the one it runs in: the same type is accepted, another is refused.
    CHECK(same_bits(logits_of(*load_llama(dir, type_name(type),
                                          type.compute == DType::i4 ? type.group_size : 0)),
                    want));
    CHECK_THROWS_WITH(load_llama(dir, "f32"), Catch::Contains("config.json: quantization") &&
                                                  Catch::Contains("matmul_dtype auto"));
  }
}

TEST_CASE("quantized folders: sharded output, from sharded and F32 sources, same bits",
          "[weights][quantize]") {
  ThreadScope one(1);
  const Folders& f = folders();
  const MatmulType type(DType::i4, 32);
  const Tensor want = logits_of(*load_llama(f.f32, "int4", 32));
  // 1 MiB shards: several files and an index.
  const fs::path sharded = quantized(f.sharded, type, "sharded", 1 << 20);
  CHECK(fs::exists(sharded / "model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(sharded / "model.safetensors"));
  CHECK(same_bits(logits_of(*load_llama(sharded, "auto")), want));
  const fs::path from_f32 = quantized(f.f32, type, "from-f32");
  CHECK(same_bits(logits_of(*load_llama(from_f32, "auto")), want));
  // The tied head's table stays beside its quantized form (the embeddings read it).
  const SafeTensors st = SafeTensors::open(from_f32);
  CHECK(st.contains("model.embed_tokens.weight"));
  CHECK(st.entry("model.embed_tokens.weight_quantized").dtype_name == "U8");
  CHECK(st.entry("model.embed_tokens.weight_scale").dtype_name == "BF16");
  CHECK_FALSE(st.contains("model.layers.0.self_attn.q_proj.weight"));
  CHECK(st.entry("model.layers.0.self_attn.q_proj.weight_quantized").shape ==
        Shape{kHidden, kHidden / 2});
}

TEST_CASE("quantized folders: malformed or mismatched tensors are refused by file and name",
          "[weights][quantize]") {
  ThreadScope one(1);
  const Folders& f = folders();
  const fs::path good = quantized(f.bf16, MatmulType(DType::i8), "good");
  const SafeTensors st = SafeTensors::open(good);
  // A copy of the folder whose checkpoint has `name` replaced by `tensor` (or dropped).
  auto variant = [&](const std::string& label, const std::string& name, const Tensor* tensor) {
    const fs::path dir = own_scratch_dir("bad-" + label);
    fs::copy_file(good / "config.json", dir / "config.json");
    std::vector<NamedTensor> tensors;
    for (const std::string& n : st.names())
      if (n != name) tensors.push_back({n, st.get(n)});
    if (tensor) tensors.push_back({name, *tensor});
    write_safetensors(dir / "model.safetensors", tensors,
                      {{"masque.quantization", st.metadata().at("masque.quantization")}});
    return dir;
  };
  const std::string q = "model.layers.1.mlp.up_proj.weight_quantized";
  const std::string s = "model.layers.1.mlp.up_proj.weight_scale";
  const Tensor short_scales({kInner / 2});
  const Tensor float_values({kInner, kHidden});
  const Tensor wrong_shape({kHidden, kHidden}, DType::i8);
  for (const auto& [label, name, tensor, says] :
       std::vector<std::tuple<std::string, std::string, const Tensor*, std::string>>{
           {"scales", s, &short_scales, s},
           {"dtype", q, &float_values, q},
           {"shape", q, &wrong_shape, q},
           {"missing-scale", s, nullptr, s}}) {
    INFO(label);
    const fs::path dir = variant(label, name, tensor);
    CHECK_THROWS_AS(load_llama(dir, "auto"), ConfigError);
    CHECK_THROWS_WITH(
        load_llama(dir, "auto"),
        Catch::Contains((dir / "model.safetensors").string()) && Catch::Contains(says));
  }
  // A fused projection of which one part is quantized and another not.
  {
    const fs::path dir = own_scratch_dir("bad-mixed");
    fs::copy_file(good / "config.json", dir / "config.json");
    const SafeTensors source = SafeTensors::open(f.bf16);
    std::vector<NamedTensor> tensors;
    for (const std::string& n : st.names())
      if (n.rfind("model.layers.2.self_attn.k_proj.weight_", 0) != 0)
        tensors.push_back({n, st.get(n)});
    tensors.push_back({"model.layers.2.self_attn.k_proj.weight",
                       source.get("model.layers.2.self_attn.k_proj.weight")});
    write_safetensors(dir / "model.safetensors", tensors,
                      {{"masque.quantization", st.metadata().at("masque.quantization")}});
    CHECK_THROWS_WITH(load_llama(dir, "auto"),
                      Catch::Contains("not all quantized") &&
                          Catch::Contains("model.layers.2.self_attn.q_proj.weight"));
  }
  // Quantizing twice, or over an existing folder.
  const auto model = load_llama(good, "auto");
  const auto& tier = dynamic_cast<const transformer::TransformerModel&>(*model);
  transformer::QuantizeOptions options;
  options.type = DType::i8;
  const fs::path twice = own_scratch_dir("twice") / "out";
  CHECK_THROWS_WITH(transformer::write_quantized_folder(tier.spec(), st, good, twice, options),
                    Catch::Contains("already quantized"));
  CHECK_THROWS_WITH(transformer::write_quantized_folder(
                        tier.spec(), transformer::open_checkpoint(f.bf16), f.bf16, good, options),
                    Catch::Contains("exists"));
  CHECK_FALSE(fs::exists(twice));
  CHECK_FALSE(fs::exists(twice.string() + ".partial"));
}

TEST_CASE("masque quantize: the command writes a folder that runs, and explains bad usage",
          "[weights][quantize][cli]") {
  const Folders& f = folders();
  const fs::path base = scratch_dir("quantize-cli");
  const fs::path source = base / "source";
  fs::copy(f.bf16, source, fs::copy_options::recursive);
  write_file(source / "tokenizer_config.json", "{}");
  write_file(source / "pytorch_model.bin", "not copied");
  const fs::path out = base / "int4";
  const RunResult made =
      run_masque({"quantize", source.string(), "--to", "int4", "-o", out.string()});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  CHECK_THAT(made.err, Catch::Contains("int4 in groups of 32: 17 of 17 linear layers quantized"));
  CHECK_THAT(made.err, Catch::Contains("not copied: pytorch_model.bin"));
  CHECK(fs::exists(out / "tokenizer_config.json"));
  CHECK_FALSE(fs::exists(out / "pytorch_model.bin"));
  CHECK_FALSE(fs::exists(out.string() + ".partial"));
  const RunResult inspected = run_masque({"inspect", out.string(), "--json"});
  REQUIRE(inspected.exit_code == 0);
  const auto j = nlohmann::json::parse(inspected.out);
  CHECK(j["matmuls"]["summary"].get<std::string>().rfind("int4", 0) == 0);

  for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"quantize", source.string(), "--to", "int4", "-o", out.string()}, "exists"},
           {{"quantize", source.string(), "--to", "int3", "-o", out.string() + "x"}, "int3"},
           {{"quantize", source.string(), "-o", out.string() + "x"}, "--to"},
           {{"quantize", source.string(), "--to", "int4", "--group-size", "48", "-o",
             out.string() + "x"},
            "48"},
           {{"quantize", out.string(), "--to", "int8", "-o", out.string() + "x"},
            "already quantized"}}) {
    const RunResult r = run_masque(args);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(says));
  }
  CHECK_FALSE(fs::exists(out.string() + "x"));
}

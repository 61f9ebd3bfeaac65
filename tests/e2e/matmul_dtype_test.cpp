// matmul_dtype=int8 keeps narrow linear layers f32 (int8_pays): `masque inspect --matmul-dtype`
// and the run summary say which layers run int8, on a GPT-2 folder wide enough for int8 in its
// blocks (random weights, written here) and on the narrow models of ../shared.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "masque/layers.hpp"
#include "masque/safetensors_writer.hpp"
#include "test_support.hpp"

using namespace masque;
using namespace masque::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

Tensor random_tensor(Shape shape, unsigned seed, float stddev) {
  Tensor t(std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
  return t;
}

// A one-block GPT-2 (GPT2Model tensor names) of width 256 and a 64-token vocabulary: its four
// block projections are large enough for int8, its tied head (256 x 64 weights) is not.
fs::path write_wide_gpt2() {
  const fs::path dir = own_scratch_dir("int8-wide-gpt2");
  const std::int64_t c = 256, vocab = 64, positions = 32;
  write_file(dir / "config.json", json{{"model_type", "gpt2"},
                                       {"architectures", {"GPT2LMHeadModel"}},
                                       {"vocab_size", vocab},
                                       {"n_embd", c},
                                       {"n_layer", 1},
                                       {"n_head", 4},
                                       {"n_positions", positions},
                                       {"bos_token_id", 0},
                                       {"eos_token_id", 0}}
                                      .dump(2));
  unsigned seed = 1;
  std::vector<NamedTensor> t;
  auto add = [&](const std::string& name, Shape shape, float stddev) {
    t.push_back({name, random_tensor(std::move(shape), seed++, stddev)});
  };
  add("wte.weight", {vocab, c}, 0.02f);
  add("wpe.weight", {positions, c}, 0.01f);
  for (const char* norm : {"h.0.ln_1", "h.0.ln_2", "ln_f"}) {
    t.push_back({std::string(norm) + ".weight", Tensor::zeros({c})});
    std::fill(t.back().tensor.f32(), t.back().tensor.f32() + c, 1.0f);
    add(std::string(norm) + ".bias", {c}, 0.01f);
  }
  add("h.0.attn.c_attn.weight", {c, 3 * c}, 0.02f);
  add("h.0.attn.c_attn.bias", {3 * c}, 0.01f);
  add("h.0.attn.c_proj.weight", {c, c}, 0.02f);
  add("h.0.attn.c_proj.bias", {c}, 0.01f);
  add("h.0.mlp.c_fc.weight", {c, 4 * c}, 0.02f);
  add("h.0.mlp.c_fc.bias", {4 * c}, 0.01f);
  add("h.0.mlp.c_proj.weight", {4 * c, c}, 0.02f);
  add("h.0.mlp.c_proj.bias", {c}, 0.01f);
  write_safetensors(dir / "model.safetensors", t);
  return dir;
}

std::string model(const char* name) {
  return (shared_dir() / "models" / name).string();
}

}  // namespace

TEST_CASE("inspect --matmul-dtype int8: wide layers int8, narrow ones kept f32",
          "[e2e][inspect][int8]") {
  const fs::path dir = write_wide_gpt2();
  const auto r = run_masque({"inspect", dir.string(), "--matmul-dtype", "int8", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json m = json::parse(r.out)["matmuls"];
  const std::string rule = std::string("kept f32 (") + kInt8Rule + ")";
  CHECK(m["asked"] == "int8");
  CHECK(m["summary"] == "int8: 4 of 5 linear layers; 1 " + rule);
  CHECK(m["by_dtype"] == json{{"f32", 1}, {"int8", 4}});
  REQUIRE(m["list"].size() == 5);
  CHECK(m["list"][0] ==
        json{{"name", "0.self_attention.qkv"}, {"in", 256}, {"out", 768}, {"dtype", "int8"}});
  CHECK(m["list"][4] == json{{"name", "head.output"}, {"in", 256}, {"out", 64}, {"dtype", "f32"}});

  const auto text = run_masque({"inspect", dir.string(), "--matmul-dtype", "int8"});
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("matmuls         int8: 4 of 5 linear layers; 1 " + rule));
  const auto f32 = run_masque({"inspect", dir.string()});
  CHECK_THAT(f32.out, Catch::Contains("matmuls         f32: 5 linear layers"));

  const auto bad = run_masque({"inspect", dir.string(), "--matmul-dtype", "int3"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--matmul-dtype") && Catch::Contains("int3"));
}

TEST_CASE("inspect --matmul-dtype int8: the narrow shared models stay f32",
          "[e2e][inspect][int8]") {
  // aren-transliteration, width 32: 6 encoder blocks of qkv, out and the MLP's two, 6 decoder
  // blocks with cross-attention's q, kv and out besides, and the head: 6 * 4 + 6 * 7 + 1 = 67.
  const auto r =
      run_masque({"inspect", model("aren-transliteration"), "--matmul-dtype", "int8", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json m = json::parse(r.out)["matmuls"];
  CHECK(m["summary"] ==
        std::string("int8: 0 of 67 linear layers; 67 kept f32 (") + kInt8Rule + ")");
  CHECK(m["list"][0]["name"] == "encoder.0.self_attention.qkv");
  CHECK(m["list"][27]["name"] == "decoder.0.cross_attention.kv");
}

TEST_CASE("int8 on the wide layers scores near f32, and the summary says which ran int8",
          "[e2e][int8]") {
  const fs::path dir = write_wide_gpt2();
  write_file(dir / "score.yaml", "task: lm-score\nmodel: {plugin: gpt2, path: " + dir.string() +
                                     "}\nmask: {plugin: causal}\n");
  const std::string ids = "1 5 9 13 2 7 30 41\n3 3 8 60 12 19 25 40 44 2 9\n";
  auto score = [&](const std::string& dtype) {
    return run_masque({"run", (dir / "score.yaml").string(), "--input-format", "ids", "--set",
                       "model.matmul_dtype=" + dtype},
                      ids);
  };
  const auto f32 = score("f32"), int8 = score("int8");
  INFO(int8.err);
  REQUIRE(f32.exit_code == 0);
  REQUIRE(int8.exit_code == 0);
  CHECK_THAT(int8.err, Catch::Contains(std::string("masque: matmuls int8: 4 of 5 linear layers; "
                                                   "1 kept f32 (") +
                                       kInt8Rule + ")"));
  CHECK_THAT(f32.err, !Catch::Contains("matmuls"));
  const auto a = parse_jsonl(f32.out), b = parse_jsonl(int8.out);
  REQUIRE(a.size() == 2);
  REQUIRE(b.size() == 2);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double nll32 = a[i]["nll"].get<double>(), nll8 = b[i]["nll"].get<double>();
    const double per_token = std::fabs(nll8 - nll32) / (a[i]["tokens"].get<double>() - 1);
    CAPTURE(i, nll32, nll8);
    CHECK(nll8 != nll32);     // the int8 layers ran int8
    CHECK(per_token < 0.05);  // lm_int8_test's tolerance per scored token
  }
}

TEST_CASE("the run summary names the linear layers kept f32 under int8", "[e2e][int8]") {
  const auto r = run_masque({"run", "--task", "lm-score", "--model", model("stories260k"), "--set",
                             "model.matmul_dtype=int8", "--format", "text"},
                            "Once upon a time\n");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  // 5 blocks of qkv, o, gate_up and down, and the head; the widest input is 172.
  CHECK_THAT(r.err, Catch::Contains("masque: matmuls int8: 0 of 21 linear layers; 21 kept f32"));
  const auto f32 = run_masque({"run", "--task", "lm-score", "--model", model("stories260k")},
                              "Once upon a time\n");
  REQUIRE(f32.exit_code == 0);
  CHECK_THAT(f32.err, !Catch::Contains("matmuls"));
}

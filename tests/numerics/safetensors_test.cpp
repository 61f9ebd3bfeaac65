#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "masque/error.hpp"
#include "masque/safetensors.hpp"
#include "test_support.hpp"

using namespace masque;
namespace fs = std::filesystem;

namespace {

std::string u64_le(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i) & 0xff);
  return s;
}

// A safetensors file: 8-byte header length, the header (padded to 8), then `data`.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string h = header;
  while ((8 + h.size()) % 8) h += ' ';
  return u64_le(h.size()) + h + data;
}

std::string floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

fs::path write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  const fs::path path = dir / name;
  masque::test::write_file(path, bytes);
  return path;
}

// Opens `path` and expects a ConfigError whose message holds every string of `parts`.
void expect_error(const fs::path& path, const std::vector<std::string>& parts) {
  try {
    SafeTensors::open(path);
    FAIL("no error for " << path);
  } catch (const ConfigError& e) {
    INFO(e.what());
    CHECK_THAT(e.what(), Catch::Contains(path.filename().string()));
    for (const auto& p : parts) CHECK_THAT(e.what(), Catch::Contains(p));
  }
}

const char* kGood = R"({"__metadata__":{"format":"pt"},)"
                    R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                    R"("b":{"dtype":"F32","shape":[3],"data_offsets":[16,28]}})";

}  // namespace

TEST_CASE("a valid safetensors file reads zero-copy", "[numerics][safetensors]") {
  const fs::path dir = masque::test::scratch_dir("safetensors_valid");
  const fs::path file =
      write(dir, "model.safetensors", safetensors_bytes(kGood, floats({1, 2, 3, 4, 5, 6, 7})));
  Tensor a, b;
  {
    SafeTensors st = SafeTensors::open(file);
    CHECK(st.names() == std::vector<std::string>{"a", "b"});
    CHECK(st.metadata().at("format") == "pt");
    CHECK(st.entry("b").shape == Shape{3});
    a = st.get_f32("a", {2, 2});
    b = st.get("b");
    CHECK_THROWS_AS(st.get("c"), ConfigError);
    CHECK_THROWS_AS(st.get_f32("a", {4}), ConfigError);
  }
  // The mapping outlives the reader through the tensors.
  CHECK(a.shape() == Shape{2, 2});
  CHECK(a.f32()[3] == 4.0f);
  CHECK(b.f32()[2] == 7.0f);
  // Opening the folder finds model.safetensors.
  CHECK(SafeTensors::open(dir).contains("a"));
}

TEST_CASE("F16 and BF16 tensors convert to f32 on request", "[numerics][safetensors]") {
  const fs::path dir = masque::test::scratch_dir("safetensors_half");
  // 1.5 and -2.0: F16 0x3E00 0xC000; BF16 0x3FC0 0xC000.
  std::string data;
  for (std::uint16_t h : {0x3E00, 0xC000, 0x3FC0, 0xC000})
    data += std::string{static_cast<char>(h & 0xff), static_cast<char>(h >> 8)};
  const fs::path file =
      write(dir, "half.safetensors",
            safetensors_bytes(R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                              R"("g":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]},)"
                              R"("i":{"dtype":"I64","shape":[0],"data_offsets":[8,8]}})",
                              data));
  SafeTensors st = SafeTensors::open(file);
  CHECK(st.get("h").dtype() == DType::f16);
  for (const char* name : {"h", "g"}) {
    Tensor t = st.get_f32(name);
    CHECK(t.dtype() == DType::f32);
    CHECK(t.f32()[0] == 1.5f);
    CHECK(t.f32()[1] == -2.0f);
  }
  // A dtype masque cannot hold is listed, and named when asked for.
  CHECK(st.entry("i").dtype_name == "I64");
  try {
    st.get("i");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("'i'") && Catch::Contains("I64"));
  }
}

TEST_CASE("corrupt safetensors files give clear errors", "[numerics][safetensors]") {
  const fs::path dir = masque::test::scratch_dir("safetensors_corrupt");
  const std::string data = floats({1, 2, 3, 4, 5, 6, 7});

  SECTION("truncated") {
    expect_error(write(dir, "short.safetensors", "\x10\x00\x00"), {"shorter than"});
  }
  SECTION("header length past the end") {
    expect_error(write(dir, "long.safetensors", u64_le(4096) + "{}"),
                 {"header length 4096", "past the end"});
  }
  SECTION("invalid JSON") {
    expect_error(write(dir, "json.safetensors", safetensors_bytes(R"({"a":{"dtype":)", data)),
                 {"invalid JSON"});
  }
  SECTION("header that is not an object") {
    expect_error(write(dir, "array.safetensors", safetensors_bytes("[1,2]", data)),
                 {"not an object"});
  }
  SECTION("non-object entry") {
    expect_error(write(dir, "entry.safetensors", safetensors_bytes(R"({"w":5})", data)),
                 {"'w'", "not an object"});
  }
  SECTION("unknown dtype") {
    expect_error(
        write(dir, "dtype.safetensors",
              safetensors_bytes(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", data)),
        {"'w'", "unknown dtype 'F33'"});
  }
  SECTION("shape and byte span disagree") {
    expect_error(write(dir, "size.safetensors",
                       safetensors_bytes(
                           R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data)),
                 {"'w'", "needs 12 bytes", "span 16"});
  }
  SECTION("offsets past the end of the data") {
    expect_error(write(dir, "offsets.safetensors",
                       safetensors_bytes(
                           R"({"w":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}})", data)),
                 {"'w'", "past the end of the data"});
  }
  SECTION("reversed offsets") {
    expect_error(
        write(dir, "reversed.safetensors",
              safetensors_bytes(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", data)),
        {"'w'", "end before they begin"});
  }
  SECTION("negative shape") {
    expect_error(write(dir, "negative.safetensors",
                       safetensors_bytes(
                           R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", data)),
                 {"'w'", "'shape'"});
  }
  SECTION("overlapping spans") {
    expect_error(
        write(dir, "overlap.safetensors",
              safetensors_bytes(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                R"("y":{"dtype":"F32","shape":[3],"data_offsets":[12,24]}})",
                                data)),
        {"'y'", "overlaps tensor 'x'"});
  }
  SECTION("missing file") {
    expect_error(dir / "absent.safetensors", {"no such file"});
  }
  SECTION("folder without weights") {
    expect_error(dir, {"no model.safetensors"});
  }
}

TEST_CASE("sharded checkpoints load through the index", "[numerics][safetensors]") {
  const fs::path dir = masque::test::scratch_dir("safetensors_sharded");
  write(
      dir, "model-00001-of-00002.safetensors",
      safetensors_bytes(
          R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
          floats({1, 2})));
  write(
      dir, "model-00002-of-00002.safetensors",
      safetensors_bytes(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", floats({3})));
  nlohmann::json index = {
      {"metadata", {{"total_size", 12}}},
      {"weight_map",
       {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}};
  write(dir, "model.safetensors.index.json", index.dump());
  SafeTensors st = SafeTensors::open(dir);
  CHECK(st.size() == 2);
  CHECK(st.get_f32("a").f32()[1] == 2.0f);
  CHECK(st.get_f32("b").f32()[0] == 3.0f);
  CHECK(st.entry("b").file.filename() == "model-00002-of-00002.safetensors");

  SECTION("an index naming a missing shard") {
    index["weight_map"]["c"] = "model-00003-of-00003.safetensors";
    const fs::path path = write(dir, "model.safetensors.index.json", index.dump());
    expect_error(path, {"'c'", "missing shard 'model-00003-of-00003.safetensors'"});
  }
  SECTION("an index naming a tensor its shard lacks") {
    index["weight_map"]["d"] = "model-00002-of-00002.safetensors";
    const fs::path path = write(dir, "model.safetensors.index.json", index.dump());
    expect_error(path, {"'d'", "not there"});
  }
  SECTION("an index without weight_map") {
    expect_error(write(dir, "model.safetensors.index.json", "{}"), {"weight_map"});
  }
}

TEST_CASE("the shared checkpoints load with the documented shapes", "[numerics][safetensors]") {
  const fs::path models = masque::test::shared_dir() / "models";
  struct Expect {
    const char* model;
    const char* tensor;
    Shape shape;
  };
  const Expect expects[] = {
      {"tiny-gpt2", "transformer.wte.weight", {50257, 32}},
      {"tiny-gpt2", "transformer.h.0.attn.c_attn.weight", {32, 96}},
      {"stories260k", "model.layers.0.self_attn.k_proj.weight", {32, 64}},
      {"stories260k", "model.layers.4.mlp.down_proj.weight", {64, 172}},
      {"tiny-bert-uncased", "bert.embeddings.word_embeddings.weight", {30522, 32}},
      {"aren-transliteration", "decoder.layers.5.encoder_attn.k_proj.weight", {32, 32}},
      {"aren-transliteration", "lm_head.bias", {43}},
  };
  for (const auto& e : expects) {
    INFO(e.model << " " << e.tensor);
    SafeTensors st = SafeTensors::open(models / e.model);
    Tensor t = st.get_f32(e.tensor, e.shape);
    CHECK(t.shape() == e.shape);
    // The view reads the bytes the header points at.
    const SafeTensorEntry& entry = st.entry(e.tensor);
    std::ifstream in(entry.file, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(entry.offset + entry.size - 4));
    float last;
    in.read(reinterpret_cast<char*>(&last), 4);
    CHECK(t.f32()[t.numel() - 1] == last);
  }
  CHECK(SafeTensors::open(models / "stories260k").size() == 47);
  CHECK(SafeTensors::open(models / "tiny-gpt2" / "model.safetensors").size() == 28);
}

#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include "masque/error.hpp"
#include "masque/safetensors.hpp"
#include "masque/safetensors_writer.hpp"
#include "test_support.hpp"

using namespace masque;
namespace fs = std::filesystem;

namespace {

Tensor filled(Shape shape, DType dtype, int seed) {
  Tensor t(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw());
  for (std::size_t i = 0; i < t.bytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 7 + seed);
  return t;
}

}  // namespace

TEST_CASE("safetensors writer: what it writes, the reader reads back bit for bit") {
  const fs::path dir = test::scratch_dir("st_writer_roundtrip");
  const fs::path file = dir / "model.safetensors";
  std::vector<NamedTensor> tensors = {{"z.weight", filled({3, 5}, DType::f32, 1)},
                                      {"a.bias", filled({7}, DType::bf16, 2)},
                                      {"m.ids", filled({2, 2}, DType::i32, 3)}};
  write_safetensors(file, tensors, {{"format", "pt"}});

  const SafeTensors st = SafeTensors::open(file);
  REQUIRE(st.names() == std::vector<std::string>{"a.bias", "m.ids", "z.weight"});
  CHECK(st.metadata().at("format") == "pt");
  for (const NamedTensor& t : tensors) {
    const Tensor back = st.get(t.name);
    REQUIRE(back.shape() == t.tensor.shape());
    REQUIRE(back.dtype() == t.tensor.dtype());
    CHECK(std::memcmp(back.raw(), t.tensor.raw(), t.tensor.bytes()) == 0);
  }
  // The data section starts 8-byte aligned, as the format asks.
  std::ifstream in(file, std::ios::binary);
  std::uint64_t header = 0;
  in.read(reinterpret_cast<char*>(&header), sizeof header);
  CHECK(header % 8 == 0);
  // No temporary is left next to the file.
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);
}

TEST_CASE("safetensors writer: bad names are refused and an existing file is left whole") {
  const fs::path dir = test::scratch_dir("st_writer_errors");
  const fs::path file = dir / "model.safetensors";
  write_safetensors(file, {{"x", filled({4}, DType::f32, 0)}});
  const std::string before = test::read_file(file);

  CHECK_THROWS_WITH(write_safetensors(file, {{"x", filled({1}, DType::f32, 0)},
                                             {"x", filled({1}, DType::f32, 0)}}),
                    Catch::Contains("tensor 'x' is given twice"));
  CHECK_THROWS_AS(write_safetensors(file, {{"", filled({1}, DType::f32, 0)}}), ConfigError);
  CHECK(test::read_file(file) == before);
  // A folder that does not exist: an error naming the file, nothing created.
  CHECK_THROWS_WITH(
      write_safetensors(dir / "missing" / "m.safetensors", {{"x", filled({1}, DType::f32, 0)}}),
      Catch::Contains("missing"));
}

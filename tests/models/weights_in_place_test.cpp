// Weights used where they lie: the same weights as one F32 file, one memory-mapped BF16 file and
// a sharded BF16 folder give bit-identical logits at the same matmul type, and a loaded model
// does not keep the mapped checkpoint resident beside its packed copy.
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
#include "masque/threading.hpp"
#include "weights_support.hpp"

using namespace masque;
using namespace masque::test;
namespace fs = std::filesystem;

TEST_CASE("weights: F32, memory-mapped BF16 and sharded BF16 folders give the same bits",
          "[weights]") {
  ThreadScope one(1);
  const Folders& f = folders();
  for (const std::string dtype : {"f32", "int8", "int4"}) {
    INFO("matmul_dtype " << dtype);
    const Tensor want = logits_of(*load_llama(f.f32, dtype));
    CHECK(same_bits(logits_of(*load_llama(f.bf16, dtype)), want));
    CHECK(same_bits(logits_of(*load_llama(f.sharded, dtype)), want));
  }
}

TEST_CASE(
    "weights: matmul_dtype auto computes a BF16 folder in bf16 where the CPU has bf16 matmuls, "
    "an F32 folder in f32",
    "[weights]") {
  ThreadScope one(1);
  const Folders& f = folders();
  const DType bf16_folder = bf16_matmul_supported() ? DType::bf16 : DType::f32;
  for (const auto& [dir, want] : {std::pair{f.bf16, bf16_folder}, std::pair{f.sharded, bf16_folder},
                                  std::pair{f.f32, DType::f32}}) {
    INFO(dir.filename().string());
    const auto model = load_llama(dir, "auto");
    for (const auto& [name, layer] : model->linear_layers()) CHECK(layer->compute() == want);
    // The same numbers as asking for that type.
    CHECK(same_bits(logits_of(*model),
                    logits_of(*load_llama(dir, want == DType::bf16 ? "bf16" : "f32"))));
  }
}

TEST_CASE("weights: a loaded model does not keep its mapped checkpoint resident", "[weights]") {
  ThreadScope one(1);
  const Folders& f = folders();
  auto model = load_llama(f.bf16, "f32");
  const std::size_t loaded = resident_kb(f.bf16 / "model.safetensors");
  const Tensor logits = logits_of(*model);
  const std::size_t kb = f.bf16_bytes / 1024, resident = resident_kb(f.bf16 / "model.safetensors");
  INFO(resident << " kB of the " << kb << " kB checkpoint resident (" << loaded
                << " kB after loading)");
  // Loaded: the packed copies replaced the linear layers' pages, the embedding table was
  // released after its check (what stays is pages that small tensors share with neighbours).
  CHECK(loaded < kb / 20);
  // Running reads rows of the embedding table in place (the kernel maps whole page-cache folios
  // around each) and nothing else of the file.
  const std::size_t table_kb = std::size_t{kVocab} * kHidden * 2 / 1024;
  CHECK(resident > loaded);
  CHECK(resident <= loaded + table_kb);
  CHECK(logits.numel() > 0);
}

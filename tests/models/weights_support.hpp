// Llama-shaped random-weight folders shared by the weights tests: the same weights as one F32
// file, one BF16 file and three BF16 shards, and the helpers that load and compare them.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include "masque/model.hpp"
#include "model_plugin.hpp"

namespace masque::test {

inline constexpr int kHidden = 256, kInner = 768, kLayers = 4, kHeads = 8, kKvHeads = 4,
                     kVocab = 16384;

struct Folders {
  std::filesystem::path f32, bf16, sharded;
  std::size_t bf16_bytes = 0;
};

// Made once per process (in the scratch directory).
const Folders& folders();

// The logits of a fixed two-row batch under the causal mask.
Tensor logits_of(const Model& model);

// The llama plugin over `dir` with model.matmul_dtype = `matmul_dtype` (and, when positive,
// int4_group_size = `group`).
LoadedPlugin<Model> load_llama(const std::filesystem::path& dir, const std::string& matmul_dtype,
                               std::int64_t group = 0);

bool same_bits(const Tensor& a, const Tensor& b);

// kB of `file` this process has resident (the Rss of its mappings in /proc/self/smaps).
std::size_t resident_kb(const std::filesystem::path& file);

}  // namespace masque::test

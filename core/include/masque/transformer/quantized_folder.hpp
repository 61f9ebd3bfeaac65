// Quantized model folders: what `masque quantize DIR --to int8|int4 -o OUT` writes, and what the
// tier loads without quantizing again (docs/precision.md, "Quantized folders").
//
// Each matmul weight W that the tier quantizes (quantizes(): the int8 rule, and int4 groups)
// is stored in place of W as two tensors, QuantizedWeight's: "W_quantized" (I8 [out, in], or
// U8 [out, in / 2] for int4) and "W_scale" (F32 [out], or BF16 [out, in / group]). Everything
// else (embeddings, norms, biases, the layers the rule keeps f32, tensors the model does not
// read) is copied as the source stores it; a tied head keeps its table and gains the quantized
// pair. config.json gains the `quantization` entry below; every shard's __metadata__ repeats it
// as "masque.quantization" (its JSON text), which the tier reads the int8 levels from.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "masque/layers.hpp"
#include "masque/safetensors.hpp"
#include "masque/transformer/spec.hpp"

namespace masque::transformer {

// The tensor names of a quantized weight W: "W_quantized" and "W_scale".
std::string quantized_values_name(std::string_view weight);
std::string quantized_scales_name(std::string_view weight);

// config.json's `quantization` entry:
//   {"format": "masque", "version": 1, "dtype": "int8" | "int4", "group_size": 32,
//    "int8_levels": 127, "quantized_layers": N, "kept_layers": M}
// group_size matters for int4, int8_levels (the largest |q|: 127, or 63 on CPUs without VNNI)
// for int8; the layer counts are for people.
struct FolderQuantization {
  MatmulType type;  // i8 or i4, with its group size
  std::int32_t int8_levels = 127;
  std::int64_t quantized_layers = 0, kept_layers = 0;
};

// The entry of a parsed config.json, or nullopt without one. ConfigError naming `file` and the
// key for a malformed one.
std::optional<FolderQuantization> read_quantization(const nlohmann::json& config,
                                                    const std::filesystem::path& file);
nlohmann::json quantization_json(const FolderQuantization& q);

struct QuantizeOptions {
  MatmulType type;                             // i8 or i4
  std::uint64_t max_shard_bytes = 4ull << 30;  // a shard holds at most this (one tensor more)
  // Called after each tensor is written: tensors written, of total.
  std::function<void(std::size_t done, std::size_t total)> progress;
};

struct QuantizeSummary {
  FolderQuantization quantization;
  std::uint64_t bytes = 0;         // of the tensors written
  std::vector<std::string> files;  // the safetensors files written
  // What was not copied: other weight formats' files, tensors of dtypes masque cannot hold.
  std::vector<std::string> skipped;
};

// Writes the quantized folder of `source` (a model folder whose weights `checkpoint` holds and
// whose network `spec` describes) to `out`, which must not exist: everything goes to
// `out`.partial first and is renamed at the end, so `out` is whole or absent. The other files of
// `source` (tokenizer, generation_config.json, sentence-transformers modules, ...) are copied;
// other weight formats (*.bin, *.pt, *.gguf, ...) are not. ConfigError for a folder that is
// already quantized, an `out` that exists, or a weight that cannot be quantized.
QuantizeSummary write_quantized_folder(const TransformerSpec& spec, const SafeTensors& checkpoint,
                                       const std::filesystem::path& source,
                                       const std::filesystem::path& out,
                                       const QuantizeOptions& options);

}  // namespace masque::transformer

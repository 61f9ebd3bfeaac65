// The `matmul_dtype` parameter shared by the model plugins: the type every Linear computes in.
#pragma once

#include <optional>
#include <string>

#include "masque/config_json.hpp"
#include "masque/error.hpp"
#include "masque/layers.hpp"
#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "masque/safetensors.hpp"
#include "masque/tensor.hpp"
#include "masque/transformer/quantized_folder.hpp"

namespace masque::models {

inline constexpr ParamSpec kMatmulDtypeParam{
    .name = "matmul_dtype",
    .type = ParamType::string,
    .default_value = "auto",
    .help =
        "type of the weights and inputs of every matmul, the output head included "
        "(attention, norms and activations stay f32): auto (the default) is the folder's own "
        "type: the type of a folder written by `masque quantize` (which runs in no other), "
        "bf16 for a folder whose weights are stored in bf16, on a CPU with AVX-512 BF16 "
        "or AMX, f32 otherwise (f16 folders are widened to f32 once, at load); the run summary "
        "and `masque inspect` say which was taken; f32 (exact); bf16 for half the "
        "weight memory and AMX / AVX-512 BF16 speed at about 3 significant digits (logits "
        "differ from f32 by ~1e-2; needs AVX-512, elsewhere loading fails with a clear "
        "error); int8 for a quarter of the weight memory and AMX / VNNI int8 speed in the "
        "linear layers with at least 128 inputs, 64 outputs and 32768 weights; smaller layers "
        "stay f32, because there quantizing the inputs and scaling the outputs cost more than "
        "int8 saves (a rule on shapes, decided at load, never on timings; `masque inspect "
        "--matmul-dtype int8` and the run summary say which layers run int8): weights "
        "quantized per output feature at load (to 7 bits on CPUs without VNNI, whose int8 "
        "kernels would otherwise saturate), each input row per call with its own scale "
        "(results still independent of the batch), about 2 significant digits in those layers "
        "(with every layer int8, stories260k's NLL moved by up to 0.03 nats per token and a "
        "small transliteration model changed 10% of its greedy outputs: check on your data; "
        "the small models in ../shared run f32 throughout); int4 for an eighth of f32's weight "
        "memory: weights quantized at load to 4 bits in groups of int4_group_size inputs with "
        "one bf16 scale per group, inputs per row as for int8, the same rule for which layers "
        "stay f32 (and layers whose inputs do not split into groups); docs/precision.md has "
        "the format and its measured error",
    .choices = "auto|f32|bf16|int8|int4"};

inline constexpr ParamSpec kKvCacheDtypeParam{
    .name = "kv_cache_dtype",
    .type = ParamType::string,
    .default_value = "f32",
    .help =
        "what decoding holds self-attention keys and values in: f32 (exact), or bf16 for half "
        "the cache memory of long contexts and large batches (rounded to nearest even when "
        "written, widened to f32 when the attention reads them; logits move by about 1e-3 "
        "relative; it saves memory, not time); the encoder memory of cross-attention stays f32",
    .choices = "f32|bf16"};

// The kv_cache_dtype parameter as a DType (f32 when the plugin was given none).
inline DType kv_cache_dtype(const Params& params) {
  if (!params.has("kv_cache_dtype")) return DType::f32;
  const std::string v = params.get_string("kv_cache_dtype");
  if (v == "bf16") return DType::bf16;
  if (v == "f32") return DType::f32;
  throw ConfigError("kv_cache_dtype: expected f32 or bf16, got '" + v + "'");
}

inline constexpr ParamSpec kInt4GroupParam{
    .name = "int4_group_size",
    .type = ParamType::integer,
    .default_value = "32",
    .help =
        "matmul_dtype int4: inputs that share one scale (a multiple of 32; smaller groups "
        "are more exact and hold more scales)",
    .min = 32,
    .max = 4096};

// What matmul_dtype auto takes for these weights: bf16 when most of their floating-point bytes
// are BF16 and the CPU has bf16 matmuls, f32 otherwise.
inline DType folder_matmul_dtype(const SafeTensors& weights) {
  std::size_t bf16 = 0, floats = 0;
  for (const std::string& name : weights.names()) {
    const SafeTensorEntry& e = weights.entry(name);
    if (!e.dtype || !is_floating(*e.dtype)) continue;
    floats += e.size;
    if (*e.dtype == DType::bf16) bf16 += e.size;
  }
  return 2 * bf16 > floats && bf16_matmul_supported() ? DType::bf16 : DType::f32;
}

// The parameters' matmul type; auto is the folder's (folder_matmul_dtype), or f32 without one.
// A quantized folder (`masque quantize`, its config's `quantization`) runs in its own type: auto
// takes it, and another type is a ConfigError naming the config.
inline MatmulType matmul_dtype(const Params& params, const SafeTensors* weights = nullptr,
                               const JsonConfig* config = nullptr) {
  const std::string name = params.get_string("matmul_dtype");
  const std::optional<transformer::FolderQuantization> quantized =
      config ? transformer::read_quantization(config->json(), config->file()) : std::nullopt;
  MatmulType type = DType::f32;  // choices are validated before create()
  if (name == "bf16") type = DType::bf16;
  if (name == "int8") type = DType::i8;
  if (name == "int4") {
    const auto group = params.has("int4_group_size") ? params.get_int("int4_group_size") : 32;
    if (group % 32 != 0)
      throw ConfigError("int4_group_size: " + std::to_string(group) + " is not a multiple of 32");
    type = MatmulType(DType::i4, static_cast<std::int32_t>(group));
  }
  if (!quantized) return name == "auto" && weights ? folder_matmul_dtype(*weights) : type;
  const MatmulType own = quantized->type;
  const bool same = type.compute == own.compute &&
                    (own.compute != DType::i4 || type.group_size == own.group_size);
  if (name != "auto" && !same)
    throw ConfigError(config->file().string() + ": quantization: the folder holds " +
                      (own.compute == DType::i4
                           ? "int4 weights in groups of " + std::to_string(own.group_size)
                           : std::string("int8 weights")) +
                      " (masque quantize); matmul_dtype " + name +
                      " cannot run them: use matmul_dtype auto (the default), or the original "
                      "folder");
  return own;
}

}  // namespace masque::models

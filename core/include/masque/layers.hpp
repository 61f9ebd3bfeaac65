// Layers: ops bound to their weights, prepared once at load time and then const.
//
// A layer is cheap to copy (its prepared state is shared), and forward() is const and safe to
// call from several threads at once. Typical model code:
//
//   SafeTensors st = SafeTensors::open(dir);
//   Linear q(st.get_f32("...q_proj.weight"), st.get_f32("...q_proj.bias"));   // nn.Linear
//   Linear fc(st.get_f32("...c_fc.weight"), st.get_f32("...c_fc.bias"),
//             {.activation = Activation::gelu_tanh, .layout = WeightLayout::in_out});  // Conv1D
//   q.forward(h, q_out);  // h [rows, in] -> q_out [rows, out]
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <boost/config.hpp>

#include "masque/ops.hpp"
#include "masque/tensor.hpp"

namespace masque {

// How a weight matrix is stored.
enum class WeightLayout : std::uint8_t {
  out_in,  // [out_features, in_features]: torch nn.Linear (y = x W^T)
  in_out,  // [in_features, out_features]: GPT-2's Conv1D (y = x W)
};

struct LinearOptions {
  Activation activation = Activation::none;  // fused into the matmul
  WeightLayout layout = WeightLayout::out_in;
  // The matmul's input and weight type: f32; bf16 (weights packed as bfloat16, inputs
  // rounded to it per call, f32 accumulation and output) for half the weight memory traffic
  // and AMX/AVX-512 BF16 speed, at about 3 significant digits (needs AVX-512; elsewhere the
  // constructor throws); or i8 (weights quantized once with one symmetric scale per output
  // feature to int8_weight_levels(), each input row quantized per call with its own scale to
  // 127 levels, exact int32 accumulation; bias and activation in f32) for a quarter of the
  // weight memory and AMX/VNNI int8 speed, at about 2 significant digits; or i4 (weights
  // quantized once to 4 bits in groups of `group_size` inputs, one bf16 scale per group, inputs
  // per row as for i8; numerics/int4_product.hpp) for about an eighth of f32's weight memory.
  DType compute = DType::f32;
  std::int32_t group_size = 32;  // i4: inputs per scale, a multiple of 32
};

// Whether this CPU has the bf16 instructions (AVX-512 BF16 or AMX) oneDNN's fast bf16 matmuls
// need; elsewhere a bf16 Linear is refused.
BOOST_SYMBOL_VISIBLE bool bf16_matmul_supported();

// The largest |q| of int8 weights on this CPU: 127 with VNNI; 63 without (AVX2, AVX-512 before
// Cascade Lake), where oneDNN adds pairs of int8 products in saturating 16 bits and 7-bit
// weights keep those sums exact.
BOOST_SYMBOL_VISIBLE int int8_weight_levels();

// Whether an int8 layer of this shape is faster than f32 at every row count (the rule the models
// apply to `matmul_dtype=int8`, layer by layer at load: a layer that fails it stays f32). An int8
// call adds two passes to the product, quantizing the input rows (rows x in) and scaling the
// output rows (rows x out), and a second oneDNN call; only a large enough product pays for them:
// at least kInt8MinInputs inputs, kInt8MinOutputs outputs and kInt8MinWeights weights. Shape
// only, never timing, so a run's output does not depend on machine noise. bench/int8 measured
// the thresholds (AMD Zen 4, AVX-512 VNNI): every shape inside them ran int8 at <= 0.80 of f32
// at 1 to 512 rows; 64 x 256 and 64 x 1024 came out even at one row, 32 x 32 and 64 x 64 up to
// 2x slower.
inline constexpr std::int64_t kInt8MinInputs = 128;
inline constexpr std::int64_t kInt8MinOutputs = 64;
inline constexpr std::int64_t kInt8MinWeights = 1 << 15;
// Why a layer failed the rule, as inspect and the run summary say it.
inline constexpr const char* kInt8Rule = "fewer than 128 inputs, 64 outputs or 32768 weights";
BOOST_SYMBOL_VISIBLE bool int8_pays(std::int64_t in, std::int64_t out);

// The matmul type a model's layers are built with (a model plugin's matmul_dtype): the compute
// type and, for i4, the inputs per scale.
struct MatmulType {
  DType compute = DType::f32;
  std::int32_t group_size = 32;
  MatmulType() = default;
  MatmulType(DType type, std::int32_t group = 32) : compute(type), group_size(group) {}  // NOLINT
};

// What LinearOptions::compute = i8 (or i4) means for one layer: that type always, or only where
// int8_pays() and f32 elsewhere (what the models' matmul_dtype=int8 / int4 does; an i4 layer whose
// inputs do not split into groups of group_size also stays f32).
enum class Int8Policy : std::uint8_t { always, where_it_pays };

// Whether Int8Policy::where_it_pays quantizes a layer of `in` inputs and `out` outputs to
// `type` (i8 or i4): int8_pays() and, for i4, inputs that split into groups of group_size.
BOOST_SYMBOL_VISIBLE bool quantizes(std::int64_t in, std::int64_t out, MatmulType type);

// A matmul's weight as Linear quantizes it (LinearOptions::compute i8 or i4), held apart from
// a Linear: what `masque quantize` writes and a quantized folder loads without quantizing again.
// i8: `values` I8 [out, in] (|q| <= levels) and `scales` F32 [out], w = q * scale; i4: `values`
// U8 [out, in / 2] packed as numerics/int4_product.hpp says and `scales` BF16
// [out, in / group_size] (docs/precision.md).
struct QuantizedWeight {
  DType type = DType::i8;
  Tensor values, scales;
  std::int32_t group_size = 32;  // i4
  std::int32_t levels = 127;     // i8: int8_weight_levels() of the CPU that quantized it
};

// `weight` (F32/F16/BF16 in `layout`, finite) quantized exactly as a Linear of compute type
// `type.compute` (i8 or i4) quantizes it on this CPU.
BOOST_SYMBOL_VISIBLE QuantizedWeight quantize_weight(const Tensor& weight, WeightLayout layout,
                                                     MatmulType type);

// y = act(x W^T + b). The weight is packed once, at construction, into oneDNN's preferred
// layout and type (a copy: the source tensor, e.g. a mapped file, may go away). oneDNN primitives
// are created once per (rows, thread count) and reused.
// Told, while a Linear quantizes its weight in order, that the weight's first `bytes` will not
// be read again (a memory-mapped source can drop those pages: SafeTensors::release).
using SourceRelease = std::function<void(std::size_t bytes)>;

class BOOST_SYMBOL_VISIBLE Linear {
 public:
  Linear() = default;
  // `weight` F32/F16/BF16 in `options.layout`; `bias` [out] or empty.
  Linear(const Tensor& weight, const Tensor& bias = {}, LinearOptions options = {});
  Linear(const Tensor& weight, const Tensor& bias, LinearOptions options, Int8Policy policy);
  Linear(const Tensor& weight, const Tensor& bias, LinearOptions options, Int8Policy policy,
         const SourceRelease& release);
  // Several projections of the same input as one matmul (e.g. q, k, v): the weights (all
  // [out_i, in] or all [in, out_i] as `options.layout` says) are concatenated along `out`, and so
  // are the biases (all given or all empty). The output columns follow the order given.
  static Linear concat(std::span<const Tensor> weights, std::span<const Tensor> biases,
                       LinearOptions options = {});
  static Linear concat(std::span<const Tensor> weights, std::span<const Tensor> biases,
                       LinearOptions options, Int8Policy policy);
  // From weights quantized by quantize_weight() (all of one type, input count, group size and
  // levels), concatenated along `out` like concat(): bit for bit the Linear that quantizing the
  // source weights at construction gives. An i8 weight quantized to more levels than this CPU
  // takes (int8_weight_levels()) is widened and quantized again. RuntimeError naming `what`
  // for parts that disagree or do not have the shapes and types above.
  static Linear quantized(std::span<const QuantizedWeight> parts, const Tensor& bias,
                          Activation activation, const std::string& what);

  bool empty() const { return impl_ == nullptr; }
  std::int64_t in_features() const;
  std::int64_t out_features() const;
  Activation activation() const;
  DType compute() const;    // the type its matmul runs in
  DType requested() const;  // LinearOptions::compute as asked (i8 may run in f32: Int8Policy)
  // Whether a one-row product (decoding) streams the packed weights with masque's own kernel
  // rather than oneDNN's matmul: f32 layers on AVX-512, int8 layers on CPUs without VNNI, where
  // that kernel was checked (at the first one-row call, which this makes) to give oneDNN's
  // numbers bit for bit (so a row's result does not depend on its batch).
  bool streams_one_row() const;
  // Bytes the layer holds for its weights (packed or quantized, with their scales and bias).
  std::size_t weight_bytes() const;

  // x [..., in] -> y [..., out] (y resized; y must not alias x).
  void forward(const Tensor& x, Tensor& y) const;
  // Raw form: `rows` contiguous rows of in_features floats -> rows of out_features floats.
  void forward(const float* x, std::int64_t rows, float* y) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// A network's Linear layers, each named by where it sits ("decoder.3.self_attention.qkv").
using LinearList = std::vector<std::pair<std::string, const Linear*>>;

// The matmul types of `layers` (Model::linear_layers()) in one line: "int8: 24 of 36 linear
// layers; 12 kept f32 (fewer than 128 inputs, ...)" (kInt8Rule) when int8 was asked
// (Int8Policy::where_it_pays), else e.g. "f32: 36 linear layers".
BOOST_SYMBOL_VISIBLE std::string matmul_summary(const LinearList& layers);

struct BOOST_SYMBOL_VISIBLE LayerNorm {
  Tensor weight;  // [dim]
  Tensor bias;    // [dim] or empty
  float eps = 1e-5f;
  void forward(const Tensor& x, Tensor& y) const { layer_norm(x, weight, bias, eps, y); }
};

struct BOOST_SYMBOL_VISIBLE RmsNorm {
  Tensor weight;  // [dim]
  float eps = 1e-6f;
  void forward(const Tensor& x, Tensor& y) const { rms_norm(x, weight, eps, y); }
};

struct BOOST_SYMBOL_VISIBLE Embedding {
  Tensor table;  // [rows, dim] f32
  std::int64_t size() const { return table.dim(0); }
  std::int64_t dim() const { return table.dim(1); }
  void forward(std::span<const std::int32_t> ids, Tensor& out) const { embedding(table, ids, out); }
  void add_to(std::span<const std::int32_t> ids, Tensor& out) const {
    add_embedding(table, ids, out);
  }
};

// Rotary position embedding, Hugging Face `rotate_half` convention: within each head the first
// `rotary_dim` features are rotated as pairs (i, i + rotary_dim/2) by angle
// position * f_i, f_i = theta^(-2i/rotary_dim) (rescaled as a RopeScaling says); features past
// rotary_dim are left alone.
// Angles are computed in double; a table covers positions < min(max_positions,
// kRotaryTableRows) and others are computed on the fly (the same floats), so memory does not
// grow with what a config claims.
inline constexpr std::int32_t kRotaryTableRows = 4096;

// A rescaling of the rotary frequencies, as Hugging Face's `rope_scaling` configures it (its
// _compute_*_parameters): linear divides every frequency by `factor`; llama3 (Llama 3.1 and
// later) divides the frequencies whose wavelength 2 pi / f exceeds original_max_positions /
// low_freq_factor by `factor`, keeps those under original_max_positions / high_freq_factor, and
// blends the band between: f ((1 - a) / factor + a), a = (original_max_positions / wavelength -
// low_freq_factor) / (high_freq_factor - low_freq_factor). Neither scales the angles' cos / sin.
struct RopeScaling {
  enum class Kind : std::uint8_t { none, linear, llama3 };
  Kind kind = Kind::none;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_positions = 8192.0;
};

class BOOST_SYMBOL_VISIBLE Rotary {
 public:
  Rotary() = default;
  Rotary(std::int32_t head_dim, double theta, std::int32_t max_positions = 2048,
         std::int32_t rotary_dim = 0 /* 0: head_dim */);
  Rotary(std::int32_t head_dim, double theta, std::int32_t max_positions, std::int32_t rotary_dim,
         const RopeScaling& scaling);

  std::int32_t head_dim() const { return head_dim_; }
  std::int32_t rotary_dim() const { return rotary_dim_; }

  // x: rows of `heads * head_dim` features (head h at columns h*head_dim...), rotated in place;
  // positions has one id per row (negative: RecordError).
  void apply(Tensor& x, std::int32_t heads, std::span<const std::int32_t> positions) const;
  // Strided form: row r starts at x + r * row_stride (e.g. the q or k part of a fused qkv).
  void apply(float* x, std::int64_t rows, std::int64_t row_stride, std::int32_t heads,
             std::span<const std::int32_t> positions) const;

 private:
  void angles(std::int32_t position, float* cos_out, float* sin_out) const;
  std::int32_t head_dim_ = 0, rotary_dim_ = 0, max_positions_ = 0;
  double theta_ = 10000.0;
  std::vector<double> inv_freq_;
  std::shared_ptr<const std::vector<float>> table_;  // [max_positions][cos (half) | sin (half)]
};

// Concatenates 2-D tensors along dimension 0 (e.g. to fuse q/k/v weights): in their type when
// they share one (a BF16 checkpoint's weights stay BF16), else as f32.
Tensor concat_rows(std::span<const Tensor> parts);

}  // namespace masque

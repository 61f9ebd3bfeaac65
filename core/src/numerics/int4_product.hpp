// Products with 4-bit weights (internal): the int4 matmul type of Linear.
//
// Quantization (docs/precision.md): weight-only, per output feature n in groups of `group`
// inputs (a multiple of 32; 32 by default). A group's scale is s = bf16(max |w| / 7) (rounded to
// nearest even; 0 for an all-zero group) and each weight q = round_even(w / s) clamped to
// [-7, 7] (0 when s is 0): 4 bits a weight plus 16 bits a group (4.5 bits at group 32, like
// llama.cpp's Q4_0). Storage: per feature, per group, per 32 inputs k0..k0+31 16 bytes, byte j =
// (q[k0+j] + 8) | (q[k0+16+j] + 8) << 4; the scales as bf16, [out][in / group].
//
// A product takes the input rows quantized as int8 does (each row with its own scale
// sx = max |x| / 127, qx = round_even(x / sx)) and computes, for each row and feature, per group
// g (in order) d = the exact int32 sum of qx[k] q[k] over the group's inputs, then
// acc = fma(float(d), s_g, acc) from acc = 0; y = acc * sx, then the bias and the activation.
// Every kernel (AVX-512 VNNI, AVX2, portable C++) computes exactly this, so a row's result
// depends neither on its batch nor on the thread count or the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "masque/layers.hpp"

namespace masque::numerics {

struct Int4Weights {
  std::int64_t in = 0, out = 0, group = 32;
  std::vector<std::uint8_t> nibbles;  // out * in / 2
  std::vector<std::uint16_t> scales;  // out * (in / group), bf16
};

// Whether a layer of `in` inputs can be stored in groups of `group` (a positive multiple of 32
// that divides `in`).
bool int4_fits(std::int64_t in, std::int64_t group);

// Quantizes a weight of finite floats stored as `layout` ([out, in] or [in, out]).
Int4Weights quantize_int4(const float* w, WeightLayout layout, std::int64_t in, std::int64_t out,
                          std::int64_t group);
// The kernels, all giving the same bits; run() takes the best this CPU has.
enum class Int4Kernel { portable, avx2, avx512_vnni };
const char* kernel_name(Int4Kernel kernel);

class Int4Product {
 public:
  // A product of this shape with all weights 0: set_feature() gives each its values.
  // `bias`: out floats or null (copied). RuntimeError when `in` does not split into groups.
  Int4Product(std::int64_t in, std::int64_t out, std::int64_t group, const float* bias,
              Activation activation);
  // Weights in the stored layout, copied into the kernels' (tiles of 16 features,
  // int4_product.cpp).
  Int4Product(const Int4Weights& weights, const float* bias, Activation activation);
  // Feature n's weights in the stored layout: in / 2 bytes of nibbles, in / group bf16 scales.
  void set_feature(std::int64_t n, const std::uint8_t* nibbles, const std::uint16_t* scales);

  // y[rows, out] from int8 rows qx[rows, in] with their scales sx[rows], on the calling
  // thread's intra-op threads (output features split between them).
  void run(const std::int8_t* qx, const float* sx, std::int64_t rows, float* y) const;
  // The same with a given kernel (RuntimeError when this CPU cannot run it): for tests.
  void run(Int4Kernel kernel, const std::int8_t* qx, const float* sx, std::int64_t rows,
           float* y) const;
  static Int4Kernel best_kernel();
  static bool runs_here(Int4Kernel kernel);

  std::size_t bytes() const;  // what the weights, scales and bias hold

 private:
  // Tiles [t0, t1) of 16 features of the rows, before the bias and the activation.
  // `offsets`: per row and group, the vector kernels' starting sums (int4_product.cpp).
  void tiles(Int4Kernel kernel, const std::int8_t* qx, const std::int32_t* offsets, const float* sx,
             std::int64_t rows, std::int64_t t0, std::int64_t t1, float* y) const;

  std::int64_t in_, out_, group_;
  std::shared_ptr<void> nibbles_storage_;
  std::uint8_t* nibbles_ = nullptr;  // [tile][in / 8][64]
  std::size_t nibbles_bytes_ = 0;
  std::vector<std::uint16_t> scales_;  // [tile][group][16], bf16
  std::vector<float> bias_;
  Activation activation_;
};

// Quantizes a weight in its stored type (F32, BF16, F16), a feature at a time: an [out, in]
// BF16 or F16 weight is never widened whole, and `release` (if set) is told as its rows are
// done. RuntimeError for a value that is not finite.
Int4Weights quantize_int4(const Tensor& w, WeightLayout layout, std::int64_t group,
                          const SourceRelease& release = {});
// The same straight into a product's layout (no stored-layout copy of the whole weight).
std::unique_ptr<Int4Product> quantize_int4_product(const Tensor& w, WeightLayout layout,
                                                   std::int64_t group, const float* bias,
                                                   Activation activation,
                                                   const SourceRelease& release = {});

}  // namespace masque::numerics

// One-row f32 products read straight from oneDNN's packed weights (internal).
//
// Decoding multiplies one row by every weight matrix once per token: a memory-bound product.
// oneDNN 2.6's brgemm matmul streams its packed weights at about half of what one core can read
// for a single row (bench/lm), so a one-row product runs here instead, on the same packed
// memory (no copy), and must give the very numbers oneDNN gives for that row in any batch, or a
// record's result would depend on its batch. oneDNN sums each output in K blocks (each block
// in input order from zero, the blocks added in order, then the bias, then the activation);
// the block size depends on the shape, so it is found by calibration (Linear does it at the first
// one-row call): candidate block sizes are tried against oneDNN's own one-row result on a probe
// row and the one that matches bit for bit on every probed output is kept. No match (another
// oneDNN, another layout, another CPU) leaves the layer on oneDNN.
#pragma once

#include <cstdint>
#include <memory>

#include <oneapi/dnnl/dnnl.hpp>

namespace masque::numerics {

class RowProduct {
 public:
  // Null unless `weights` is an f32 [K, N] memory in oneDNN's BA16a64b layout (AVX-512 brgemm's
  // f32 choice) and the CPU has AVX-512. `bias` (N floats) may be null; `activation` (undef for
  // none) is applied by a oneDNN eltwise primitive with `alpha`, as the matmul's post-op is.
  static std::unique_ptr<RowProduct> over(const dnnl::memory& weights, const float* bias,
                                          dnnl::algorithm activation, float alpha);

  // Finds the K block with which run() reproduces `reference` (oneDNN's y for the row x); false
  // when none does (the object must then not be used).
  bool calibrate(const float* x, const float* reference);

  // y[0, N) = act(x W + b) for one row x[0, K), on the calling thread's intra-op threads.
  void run(const float* x, float* y) const;

  std::int64_t k_block() const { return k_block_; }

 private:
  RowProduct() = default;
  // The 64 output columns of column block `block` (fewer in the last) into y, before the
  // activation, summed in K blocks of k_block.
  void columns(const float* x, std::int64_t block, std::int64_t k_block, float* y) const;

  const float* weights_ = nullptr;  // oneDNN's buffer, kept alive by the layer
  std::int64_t k_ = 0, n_ = 0, blocks_ = 0, block_stride_ = 0;
  std::int64_t k_block_ = 0;
  const float* bias_ = nullptr;
  dnnl::algorithm activation_ = dnnl::algorithm::undef;
  float alpha_ = 0.0f;
  dnnl::eltwise_forward eltwise_;  // over [1, N], when there is an activation
};

}  // namespace masque::numerics

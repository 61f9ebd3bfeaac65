// One-row f32 and bf16 products read straight from oneDNN's packed weights (internal).
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
//
// A bf16 layer may be several products over consecutive input slices (Linear's parts), each
// added onto the output in order: part 0 adds the bias, each later part's sums are added onto
// the output so far, and the activation comes last. Each part's block size is calibrated alone.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace masque::numerics {

class RowProduct {
 public:
  // Null unless `parts` is one f32 [K, N] memory in oneDNN's BA16a64b layout (AVX-512 brgemm's
  // f32 choice) on a CPU with AVX-512, or bf16 [K_i, N] memories in BA16a64b2a (its bf16 choice)
  // over consecutive input slices on a CPU with AVX-512 BF16. `bias` (N floats) may be null;
  // `activation` (undef for none) is applied by a oneDNN eltwise primitive with `alpha`, as the
  // matmul's post-op is.
  static std::unique_ptr<RowProduct> over(const std::vector<dnnl::memory>& parts, const float* bias,
                                          dnnl::algorithm activation, float alpha);

  // oneDNN's y for part `part` of the probe row alone, added onto zeros: the bias in part 0, the
  // activation in the last part.
  using PartReference = std::function<void(std::size_t part, float* y)>;

  // Finds the K blocks with which run() reproduces oneDNN on the row x (f32 or bf16, as the
  // weights): each part's against `part_reference`, then the whole against `reference`, oneDNN's
  // y for x. False when none does (the object must then not be used).
  bool calibrate(const void* x, const PartReference& part_reference, const float* reference);

  // y[0, N) = act(x W + b) for one row x[0, K) (f32 or bf16, as the weights), on the calling
  // thread's intra-op threads.
  void run(const void* x, float* y) const;

  std::int64_t k_block(std::size_t part = 0) const { return parts_[part].k_block; }

 private:
  struct Part {
    const void* weights = nullptr;  // oneDNN's buffer, kept alive by the layer
    std::int64_t begin = 0, depth = 0, block_stride = 0;
    std::int64_t k_block = 0;
  };
  RowProduct() = default;
  // Part `part`'s sums over the 64 output columns of column block `block` (fewer in the last),
  // in K blocks of `k_block`, into y: written (part 0, with the bias) or added onto y.
  void part_columns(const void* x, std::size_t part, std::int64_t block, std::int64_t k_block,
                    float* y) const;
  void columns(const void* x, std::int64_t block, float* y) const;

  std::vector<Part> parts_;
  bool bf16_ = false;
  std::int64_t n_ = 0, blocks_ = 0;
  const float* bias_ = nullptr;
  dnnl::algorithm activation_ = dnnl::algorithm::undef;
  float alpha_ = 0.0f;
  dnnl::eltwise_forward eltwise_;  // over [1, N], when there is an activation
};

}  // namespace masque::numerics

// One-row int8 products where oneDNN's int8 matmul is its gemm driver (internal).
//
// Without VNNI (AVX2, AVX-512 before Cascade Lake) oneDNN 2.6 runs an s8 matmul on gemm:jit,
// which repacks the weights on every call: one row of a 896 x 4864 layer took 5 ms, where
// reading its 4 MB of weights takes a fraction of one. Decoding multiplies one row per token, so
// such a row runs here instead, on oneDNN's own weight buffer (Linear asks for the plain
// [out][in] layout on those CPUs, so there is one copy). The sums of int8 products are exact
// int32 in any order (|x| <= 127, |w| <= 127: no 16-bit pair sum saturates), so they are
// oneDNN's integers; the output scale is one multiply, y[n] = float(sum) * scale[n], which
// Linear checks against oneDNN's own result on a probe row before using this.
#pragma once

#include <cstdint>

namespace masque::numerics {

class Int8RowProduct {
 public:
  // `weights`: out rows of `in` int8 values (feature n's inputs at n * in); `scales`: out floats.
  // Both are kept as pointers: the caller keeps them alive.
  Int8RowProduct(const std::int8_t* weights, std::int64_t in, std::int64_t out,
                 const float* scales);
  static bool runs_here();  // AVX2

  // y[n] = float(sum_k qx[k] w[n][k]) * scales[n], on the calling thread's intra-op threads.
  void run(const std::int8_t* qx, float* y) const;

 private:
  void features(const std::int8_t* qx, std::int64_t n_begin, std::int64_t n_end, float* y) const;

  const std::int8_t* weights_;
  std::int64_t in_, out_;
  const float* scales_;
};

}  // namespace masque::numerics

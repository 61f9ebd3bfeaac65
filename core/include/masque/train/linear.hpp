// Linear layers for training: forward and backward on plain row-major f32 weights.
//
// A trained weight changes every optimizer step, so nothing is packed at load time (the
// inference Linear of layers.hpp packs once): every product reads the weight where it lives, in
// either layout, through oneDNN matmul primitives whose memory descriptors carry the transposes
// as strides. Primitives are created once per (shape, transposes, accumulate, bias, thread count)
// and reused. Packing the weight per step was timed (bench/train/README.md) and loses: oneDNN's
// brgemm runs the plain layout as fast as its blocked one, so the reorder is pure extra work.
//
// Accumulation semantics (every backward in masque/train): gradients of parameters are added
// (`+=`) into caller buffers, so micro-batches sum into one buffer; the gradient of an activation
// (dx) is written (`=`), so the caller adds residual branches itself.
#pragma once

#include <cstdint>

#include "masque/layers.hpp"
#include "masque/tensor.hpp"

namespace masque::train {

// The shape of one training linear layer: `in` -> `out` features, weight in `layout`
// ([out, in] for WeightLayout::out_in as torch nn.Linear; [in, out] for GPT-2's Conv1D), and the
// type its products take their operands in: f32, or bf16 (x, W and dy rounded to bfloat16 per
// call, to nearest even; products accumulated and written in f32, so y, dx, dW and db stay f32
// and dW still accumulates in f32). bf16 needs bf16_matmul_supported()
// (masque/layers.hpp).
struct LinearShape {
  std::int64_t in = 0, out = 0;
  WeightLayout layout = WeightLayout::out_in;
  DType compute = DType::f32;
};

// y[rows, out] = x[rows, in] W^T + b. `bias` may be null. y must not alias x.
void linear_forward(const LinearShape& shape, const float* x, std::int64_t rows, const float* w,
                    const float* bias, float* y);

// Backward of linear_forward given dy[rows, out]:
//   dx[rows, in]  = dy W              (written; skipped when dx is null)
//   dW            += dy^T x  in W's layout   (skipped when dw is null)
//   db[out]       += sum over rows of dy      (skipped when db is null)
// x is the forward input. dx must not alias x or dy.
void linear_backward(const LinearShape& shape, const float* x, const float* dy, std::int64_t rows,
                     const float* w, float* dx, float* dw, float* db);

// General product on oneDNN: C[m, n] (=, or += when accumulate) op(A) op(B), where op(A) is
// A [m, k] or, transposed, A stored [k, m]; likewise op(B) is B [k, n] or B stored [n, k]. All
// operands dense row-major. `bias` [n] (may be null) is added to every row (not with
// accumulate). Primitives are cached per shape and thread count.
void matmul(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, bool transpose_a,
            const float* b, bool transpose_b, float* c, bool accumulate,
            const float* bias = nullptr);

// Tensor conveniences: x [..., in] -> y [..., out] (y resized).
void linear_forward(const LinearShape& shape, const Tensor& x, const Tensor& w, const Tensor& bias,
                    Tensor& y);
// dx resized to x's shape (pass an empty Tensor* to skip); dw and db must already have w's and
// [out]'s sizes (typically zeroed before the first micro-batch).
void linear_backward(const LinearShape& shape, const Tensor& x, const Tensor& dy, const Tensor& w,
                     Tensor* dx, Tensor* dw, Tensor* db);

}  // namespace masque::train

// Backward passes of the element-wise and per-row ops the models use (ops.hpp, layers.hpp), and
// seeded dropout.
//
// Conventions as in ops.hpp (row-major f32, last dimension = features) plus, for every backward:
// activation gradients (dx) are written (`=`), parameter gradients (dgamma, dbeta, embedding
// tables) are added (`+=`) into caller buffers so micro-batches sum. The backward of an op takes
// the op's forward input, never a saved intermediate, unless stated: norms recompute their row
// statistics (two reductions per row, cheaper than storing them next to every activation).
// Parameter gradients are summed over rows in double, in row order: they depend neither on the
// thread count nor on the batch split.
#pragma once

#include <cstdint>
#include <span>

#include "masque/layers.hpp"
#include "masque/ops.hpp"
#include "masque/tensor.hpp"

namespace masque::train {

// ---- normalisation -------------------------------------------------------------------------

// Backward of layer_norm(x, weight, bias, eps) (ops.hpp): dx written (resized like x);
// dweight [dim] and dbias [dim] accumulated (dbias may be null: a norm without bias).
void layer_norm_backward(const Tensor& x, const Tensor& weight, float eps, const Tensor& dy,
                         Tensor& dx, Tensor& dweight, Tensor* dbias);
// Backward of rms_norm(x, weight, eps): dx written, dweight accumulated.
void rms_norm_backward(const Tensor& x, const Tensor& weight, float eps, const Tensor& dy,
                       Tensor& dx, Tensor& dweight);

// ---- activations ---------------------------------------------------------------------------

// dx = dy * act'(x) for x the activation's input (core's forms: relu, exact and tanh GELU,
// SiLU; none copies dy). dx may be dy (in place).
void activation_backward(Activation activation, const Tensor& x, const Tensor& dy, Tensor& dx);

// Backward of swiglu(gate, up) = silu(gate) * up: dgate and dup written (shapes of gate).
void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate,
                     Tensor& dup);
// Backward of swiglu_fused: rows of gate_up are [gate (n) | up (n)], dout [rows, n];
// dgate_up written like gate_up.
void swiglu_fused_backward(const Tensor& gate_up, const Tensor& dout, Tensor& dgate_up);

// ---- positions and embeddings ----------------------------------------------------------------

// Backward of Rotary::apply: the rotation is orthogonal, so the gradient is rotated back (by
// the same angles, negated) in place. Same layouts and positions as the forward.
void rotary_backward(const Rotary& rotary, Tensor& dx, std::int32_t heads,
                     std::span<const std::int32_t> positions);
void rotary_backward(const Rotary& rotary, float* dx, std::int64_t rows, std::int64_t row_stride,
                     std::int32_t heads, std::span<const std::int32_t> positions);

// Backward of embedding / add_embedding (token, learned position and token-type tables):
// dtable[ids[i]] += dy[i], rows added in the order of ids (deterministic). dy is [ids.size(),
// dim]; an id outside the table is a RecordError.
void embedding_backward(std::span<const std::int32_t> ids, const Tensor& dy, Tensor& dtable);

// ---- dropout -----------------------------------------------------------------------------------

// Which elements dropout keeps is a pure function of (seed, step, tensor, index): a counter-based
// generator (Philox-4x32-10 keyed by the seed, counting (step, tensor, index / 4)), so threads,
// batch splits and resumption never change it, and the backward regenerates the mask instead
// of storing it. Element `index` is kept when its uniform draw u in [0, 1) is >= p, and kept
// values are scaled by 1 / (1 - p) as torch.nn.Dropout does.
struct DropoutKey {
  std::uint64_t seed = 0;
  std::uint64_t step = 0;    // optimizer step (or any per-call counter)
  std::uint64_t tensor = 0;  // which dropout site (layer, sub-layer, micro-batch)
};

// y = x * keep / (1 - p), in place allowed (y may be x). p in [0, 1); p == 0 copies.
void dropout_forward(const DropoutKey& key, float p, const Tensor& x, Tensor& y);
// dx = dy * keep / (1 - p) with the same mask; dx may be dy.
void dropout_backward(const DropoutKey& key, float p, const Tensor& dy, Tensor& dx);
// The uniform draw of element `index` (for tests and for callers that build their own masks).
float dropout_uniform(const DropoutKey& key, std::uint64_t index);
// A run of elements numbered first .. first + n - 1 (a row of a larger tensor whose numbering
// the caller chooses, dropout.hpp): y = x * keep / (1 - p), y may be x; the same call on the
// gradient is the backward. p == 0 copies.
void dropout_span(const DropoutKey& key, float p, std::uint64_t first, const float* x,
                  std::int64_t n, float* y);
// factors[c] = 1 / (1 - p) for a kept element first + c, else 0.
void dropout_factors(const DropoutKey& key, float p, std::uint64_t first, std::int64_t n,
                     float* factors);

}  // namespace masque::train

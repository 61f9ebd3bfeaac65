// Shape checks shared by the ops (internal).
#pragma once

#include <cstdint>
#include <string>

#include "masque/error.hpp"
#include "masque/tensor.hpp"

namespace masque::numerics {

// The feature (last) dimension of an activation tensor; the tensor must be f32 and non-scalar.
inline std::int64_t features(const Tensor& x, const char* op) {
  if (x.dtype() != DType::f32)
    throw RuntimeError(std::string(op) + ": expected an F32 tensor, got " + to_string(x.dtype()));
  if (x.rank() == 0)
    throw RuntimeError(std::string(op) + ": expected a tensor with a feature dimension");
  return x.dim(-1);
}

inline std::int64_t rows(const Tensor& x, std::int64_t features) {
  return features == 0 ? 0 : x.numel() / features;
}

inline void require_vector(const Tensor& v, std::int64_t n, const char* op, const char* what) {
  if (v.dtype() != DType::f32 || v.numel() != n)
    throw RuntimeError(std::string(op) + ": " + what + " must be F32 with " + std::to_string(n) +
                       " elements, got " + to_string(v.dtype()) + " " + to_string(v.shape()));
}

inline void require_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  if (a.numel() != b.numel() || a.dtype() != DType::f32 || b.dtype() != DType::f32)
    throw RuntimeError(std::string(op) + ": F32 tensors of the same size expected, got " +
                       to_string(a.shape()) + " and " + to_string(b.shape()));
}

// Gives `out` the shape of `like` (keeping its buffer when possible), unless it is `like`.
inline void resize_f32(Tensor& out, Shape shape) {
  if (out.dtype() != DType::f32)
    out = Tensor(std::move(shape));
  else
    out.resize(std::move(shape));
}
inline void shape_like(Tensor& out, const Tensor& like) {
  if (&out != &like) resize_f32(out, like.shape());
}

}  // namespace masque::numerics

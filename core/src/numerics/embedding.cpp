// Embedding lookups (token, position and token-type tables).
#include <cstring>
#include <vector>

#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "numerics/simd.hpp"
#include "numerics/tensor_checks.hpp"

namespace masque {

using namespace numerics;

namespace {

// A table is read where it lies (a checkpoint's mapping), in its stored type: rows are widened
// to f32 as they are looked up, so no f32 copy of a large vocabulary is ever held.
std::int64_t check_table(const Tensor& table, const char* op) {
  const DType t = table.dtype();
  if (table.rank() != 2 || (t != DType::f32 && t != DType::bf16 && t != DType::f16))
    throw RuntimeError(std::string(op) + ": the table must be a 2-D F32, BF16 or F16 tensor, got " +
                       to_string(table.dtype()) + " " + to_string(table.shape()));
  return table.dim(1);
}

void check_id(const Tensor& table, std::int32_t id) {
  if (id < 0 || id >= table.dim(0))
    throw RecordError("id " + std::to_string(id) + " is outside the embedding table of " +
                      std::to_string(table.dim(0)) + " rows");
}

// Row `id` of the table as f32 into `out` (dim floats).
void read_row(const Tensor& table, std::int32_t id, float* out) {
  const std::int64_t dim = table.dim(1);
  const std::int64_t first = static_cast<std::int64_t>(id) * dim;
  switch (table.dtype()) {
    case DType::f32:
      std::memcpy(out, table.f32() + first, dim * sizeof(float));
      return;
    case DType::bf16:
      widen_bf16(static_cast<const std::uint16_t*>(table.raw()) + first, dim, out);
      return;
    default:
      widen_f16(static_cast<const std::uint16_t*>(table.raw()) + first, dim, out);
  }
}

MASQUE_VECTORIZE void add_row(float* __restrict y, const float* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += x[i];
}

MASQUE_VECTORIZE void scale_row(float* y, float s, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] *= s;
}

}  // namespace

void embedding(const Tensor& table, std::span<const std::int32_t> ids, Tensor& out, float scale) {
  const std::int64_t dim = check_table(table, "embedding");
  // Check every id before writing: a bad record leaves `out` untouched.
  for (auto id : ids) check_id(table, id);
  resize_f32(out, {static_cast<std::int64_t>(ids.size()), dim});
  float* o = out.f32();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    read_row(table, ids[i], o + i * dim);
    if (scale != 1.0f) scale_row(o + i * dim, scale, dim);
  }
}

void add_embedding(const Tensor& table, std::span<const std::int32_t> ids, Tensor& out) {
  const std::int64_t dim = check_table(table, "add_embedding");
  if (out.dtype() != DType::f32 || out.numel() != static_cast<std::int64_t>(ids.size()) * dim)
    throw RuntimeError("add_embedding: output " + to_string(out.shape()) + " does not hold " +
                       std::to_string(ids.size()) + " rows of " + std::to_string(dim));
  for (auto id : ids) check_id(table, id);
  float* o = out.f32();
  if (table.dtype() == DType::f32) {
    for (std::size_t i = 0; i < ids.size(); ++i)
      add_row(o + i * dim, table.f32() + static_cast<std::int64_t>(ids[i]) * dim, dim);
    return;
  }
  std::vector<float> row(dim);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    read_row(table, ids[i], row.data());
    add_row(o + i * dim, row.data(), dim);
  }
}

}  // namespace masque

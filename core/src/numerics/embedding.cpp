// Embedding lookups (token, position and token-type tables).
#include <cstring>

#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "numerics/simd.hpp"
#include "numerics/tensor_checks.hpp"

namespace masque {

using namespace numerics;

namespace {

std::int64_t check_table(const Tensor& table, const char* op) {
  if (table.rank() != 2 || table.dtype() != DType::f32)
    throw RuntimeError(std::string(op) + ": the table must be a 2-D F32 tensor, got " +
                       to_string(table.dtype()) + " " + to_string(table.shape()));
  return table.dim(1);
}

const float* row_of(const Tensor& table, std::int32_t id) {
  if (id < 0 || id >= table.dim(0))
    throw RecordError("id " + std::to_string(id) + " is outside the embedding table of " +
                      std::to_string(table.dim(0)) + " rows");
  return table.f32() + static_cast<std::int64_t>(id) * table.dim(1);
}

MASQUE_VECTORIZE void add_row(float* __restrict y, const float* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace

void embedding(const Tensor& table, std::span<const std::int32_t> ids, Tensor& out) {
  const std::int64_t dim = check_table(table, "embedding");
  // Check every id before writing: a bad record leaves `out` untouched.
  for (auto id : ids) row_of(table, id);
  resize_f32(out, {static_cast<std::int64_t>(ids.size()), dim});
  float* o = out.f32();
  for (std::size_t i = 0; i < ids.size(); ++i)
    std::memcpy(o + i * dim, row_of(table, ids[i]), dim * sizeof(float));
}

void add_embedding(const Tensor& table, std::span<const std::int32_t> ids, Tensor& out) {
  const std::int64_t dim = check_table(table, "add_embedding");
  if (out.dtype() != DType::f32 || out.numel() != static_cast<std::int64_t>(ids.size()) * dim)
    throw RuntimeError("add_embedding: output " + to_string(out.shape()) + " does not hold " +
                       std::to_string(ids.size()) + " rows of " + std::to_string(dim));
  for (auto id : ids) row_of(table, id);
  float* o = out.f32();
  for (std::size_t i = 0; i < ids.size(); ++i) add_row(o + i * dim, row_of(table, ids[i]), dim);
}

}  // namespace masque

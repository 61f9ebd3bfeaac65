// A small dense tensor: a shape, a dtype and a (possibly shared or mapped) buffer.
//
// Tensors are row-major and contiguous. A tensor either owns a 64-byte aligned buffer or views
// memory kept alive by `keepalive` (e.g. a memory-mapped safetensors file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <boost/config.hpp>

namespace masque {

// i8 and i4 name computation types (LinearOptions::compute); tensors hold f32, f16, bf16 or i32,
// and i8 or u8 bytes (quantized weights, as `masque quantize` stores them; u8 packs two 4-bit
// values).
enum class DType : std::uint8_t { f32, f16, bf16, i32, i8, i4, u8 };

// F32, F16 or BF16.
inline bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

std::size_t dtype_size(DType dtype);
const char* to_string(DType dtype);

using Shape = std::vector<std::int64_t>;

std::int64_t num_elements(const Shape& shape);

// bfloat16 conversions of n floats: rounded to nearest even, as oneDNN's reorders do (a NaN
// stays a quiet NaN); widened exactly.
BOOST_SYMBOL_VISIBLE void round_to_bf16(const float* x, std::int64_t n, std::uint16_t* out);
BOOST_SYMBOL_VISIBLE void widen_bf16(const std::uint16_t* x, std::int64_t n, float* out);
// IEEE half widened exactly.
BOOST_SYMBOL_VISIBLE void widen_f16(const std::uint16_t* x, std::int64_t n, float* out);
std::string to_string(const Shape& shape);  // "[2, 3]"

class BOOST_SYMBOL_VISIBLE Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape, DType dtype = DType::f32);  // uninitialised contents

  static Tensor zeros(Shape shape, DType dtype = DType::f32);
  // A view of external memory; `keepalive` owns it (may be null if the caller guarantees it).
  static Tensor view(void* data, Shape shape, DType dtype, std::shared_ptr<void> keepalive = {});

  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  std::int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  std::size_t bytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  bool empty() const { return numel_ == 0; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  float* f32();
  const float* f32() const;
  std::int32_t* i32();
  const std::int32_t* i32() const;

  // Changes the shape; reuses the buffer when it is large enough (owned tensors only).
  void resize(Shape shape);
  // Whether another tensor (a copy or a view) holds this buffer too: writing one shows in both.
  bool shares_buffer() const { return storage_.use_count() > 1; }
  // Bytes the buffer holds (what resize() can grow to without allocating); 0 for views.
  std::size_t capacity() const { return capacity_; }
  // Same data, new shape with the same number of elements.
  Tensor reshaped(Shape shape) const;
  // A copy that owns its buffer.
  Tensor clone() const;
  // Converts to an owned f32 tensor (f16 / bf16 widened; f32 copied).
  Tensor to_f32() const;

 private:
  void check(DType expected) const;
  std::shared_ptr<void> storage_;
  std::size_t capacity_ = 0;  // bytes owned by storage_, 0 for views
  void* data_ = nullptr;
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
};

}  // namespace masque

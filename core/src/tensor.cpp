#include "masque/tensor.hpp"

#include <bit>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "masque/error.hpp"
#include "numerics/simd.hpp"

namespace masque {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i8:
    case DType::u8:
    case DType::i4:  // a computation type: two to a byte in Linear's own storage
      return 1;
  }
  return 0;
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i8:
      return "I8";
    case DType::i4:
      return "I4";
    case DType::u8:
      return "U8";
  }
  return "?";
}

std::int64_t num_elements(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw RuntimeError("negative dimension in shape " + to_string(shape));
    n *= d;
  }
  return n;
}

std::string to_string(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

namespace {
std::shared_ptr<void> allocate(std::size_t bytes) {
  std::size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw RuntimeError("out of memory allocating " + std::to_string(bytes) + " bytes");
  return std::shared_ptr<void>(p, std::free);
}
}  // namespace

Tensor::Tensor(Shape shape, DType dtype)
    : shape_(std::move(shape)), numel_(num_elements(shape_)), dtype_(dtype) {
  capacity_ = bytes();
  storage_ = allocate(capacity_);
  data_ = storage_.get();
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t(std::move(shape), dtype);
  std::memset(t.data_, 0, t.bytes());
  return t;
}

Tensor Tensor::view(void* data, Shape shape, DType dtype, std::shared_ptr<void> keepalive) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.numel_ = num_elements(t.shape_);
  t.dtype_ = dtype;
  t.storage_ = std::move(keepalive);
  t.capacity_ = 0;
  t.data_ = data;
  return t;
}

void Tensor::check(DType expected) const {
  if (dtype_ != expected)
    throw RuntimeError(std::string("tensor is ") + to_string(dtype_) + ", expected " +
                       to_string(expected));
}

float* Tensor::f32() {
  check(DType::f32);
  return static_cast<float*>(data_);
}
const float* Tensor::f32() const {
  check(DType::f32);
  return static_cast<const float*>(data_);
}
std::int32_t* Tensor::i32() {
  check(DType::i32);
  return static_cast<std::int32_t*>(data_);
}
const std::int32_t* Tensor::i32() const {
  check(DType::i32);
  return static_cast<const std::int32_t*>(data_);
}

void Tensor::resize(Shape shape) {
  std::int64_t n = num_elements(shape);
  std::size_t need = static_cast<std::size_t>(n) * dtype_size(dtype_);
  if (capacity_ == 0 && data_ != nullptr && need > bytes())
    throw RuntimeError("cannot grow a tensor view");
  if (need > capacity_ && !(capacity_ == 0 && data_ != nullptr)) {
    capacity_ = need + need / 4;
    storage_ = allocate(capacity_);
    data_ = storage_.get();
  }
  shape_ = std::move(shape);
  numel_ = n;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (num_elements(shape) != numel_)
    throw RuntimeError("cannot reshape " + to_string(shape_) + " to " + to_string(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_);
  if (bytes()) std::memcpy(t.data_, data_, bytes());
  return t;
}

namespace {
float half_to_float(std::uint16_t h) {
  std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1f;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<std::uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
}  // namespace

MASQUE_VECTORIZE void round_to_bf16(const float* __restrict x, std::int64_t n,
                                    std::uint16_t* __restrict out) {
  for (std::int64_t i = 0; i < n; ++i) {
    const auto u = std::bit_cast<std::uint32_t>(x[i]);
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    out[i] = static_cast<std::uint16_t>(x[i] != x[i] ? (u >> 16) | 0x40u : rounded);
  }
}

MASQUE_VECTORIZE void widen_bf16(const std::uint16_t* __restrict x, std::int64_t n,
                                 float* __restrict out) {
  for (std::int64_t i = 0; i < n; ++i)
    out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(x[i]) << 16);
}

void widen_f16(const std::uint16_t* x, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = half_to_float(x[i]);
}

Tensor Tensor::to_f32() const {
  if (dtype_ == DType::f32) return clone();
  Tensor t(shape_, DType::f32);
  float* out = t.f32();
  const auto* in = static_cast<const std::uint16_t*>(data_);
  if (dtype_ == DType::bf16) {
    widen_bf16(in, numel_, out);
  } else if (dtype_ == DType::f16) {
    widen_f16(in, numel_, out);
  } else {
    throw RuntimeError("cannot convert a tensor of " + std::string(to_string(dtype_)) + " to F32");
  }
  return t;
}

}  // namespace masque

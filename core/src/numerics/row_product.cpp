#include "numerics/row_product.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "masque/threading.hpp"
#include "numerics/dnnl_context.hpp"

namespace masque::numerics {

namespace {

using dt = dnnl::memory::data_type;

constexpr std::int64_t kBlockColumns = 64;  // BA16a64b(2a): 64 output columns per block
constexpr std::int64_t kBlockDepth = 16;    // and 16 inputs per inner tile

// Whether `md` is [K, N] of `type` in BA16a64b (f32) or BA16a64b2a (bf16): inside a column
// block, inputs k-major (pairs of inputs side by side for bf16), element (k, n) at
// (n / 64) * block_stride + k * 64 + n % 64 (f32) or (k / 2) * 128 + (n % 64) * 2 + k % 2 (bf16).
bool is_packed_by_columns(const dnnl::memory::desc& md, dnnl_data_type_t type,
                          std::int64_t& block_stride) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.ndims != 2 || d.data_type != type || d.format_kind != dnnl_blocked || d.offset0 != 0)
    return false;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  const bool pairs = type == dnnl_bf16;
  if (b.inner_nblks != (pairs ? 3 : 2) || b.inner_blks[0] != kBlockDepth || b.inner_idxs[0] != 0 ||
      b.inner_blks[1] != kBlockColumns || b.inner_idxs[1] != 1)
    return false;
  if (pairs && (b.inner_blks[2] != 2 || b.inner_idxs[2] != 0)) return false;
  if (b.strides[0] != kBlockDepth * kBlockColumns * (pairs ? 2 : 1) ||
      d.padded_dims[1] % kBlockColumns != 0 || d.padded_dims[0] % (pairs ? 2 : 1) != 0)
    return false;
  block_stride = b.strides[1];
  return block_stride >= d.padded_dims[0] * kBlockColumns;
}

dnnl::eltwise_forward eltwise_over(std::int64_t columns, dnnl::algorithm algorithm, float alpha) {
  const dnnl::memory::desc md({1, columns}, dt::f32, dnnl::memory::format_tag::ab);
  return dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, algorithm, md, alpha, 0.0f),
      cpu_engine()));
}

void apply(const dnnl::eltwise_forward& eltwise, float* y, std::int64_t columns) {
  const dnnl::memory::desc md({1, columns}, dt::f32, dnnl::memory::format_tag::ab);
  dnnl::memory m(md, cpu_engine(), y);
  auto& stream = thread_stream();
  eltwise.execute(stream, {{DNNL_ARG_SRC, m}, {DNNL_ARG_DST, m}});
  stream.wait();
}

// 64 columns' sums, written with the bias (`first`) or added onto y; `valid` columns are real.
__attribute__((target("avx512f"))) void finish(const __m512 (&sums)[4], const float* bias,
                                               bool first, std::int64_t valid, float* y) {
  for (int q = 0; q < 4; ++q) {
    const std::int64_t left = std::clamp<std::int64_t>(valid - 16 * q, 0, 16);
    const __mmask16 mask = static_cast<__mmask16>((1u << left) - 1u);
    if (!mask) break;
    __m512 s = sums[q];
    if (first) {
      if (bias) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(mask, bias + 16 * q));
    } else {
      s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(mask, y + 16 * q));
    }
    _mm512_mask_storeu_ps(y + 16 * q, mask, s);
  }
}

// Sums of 64 columns: each K block summed from zero in input order, the blocks added in order,
// as oneDNN's brgemm does; `tile` points at the column block.
__attribute__((target("avx512f"))) void block_sums(const float* x, const float* tile,
                                                   std::int64_t k, std::int64_t k_block,
                                                   __m512 (&c)[4]) {
  for (std::int64_t begin = 0; begin < k; begin += k_block) {
    const std::int64_t end = std::min(k, begin + k_block);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (std::int64_t i = begin; i < end; ++i) {
      const __m512 xi = _mm512_set1_ps(x[i]);
      const float* row = tile + i * kBlockColumns;
      a0 = _mm512_fmadd_ps(xi, _mm512_loadu_ps(row), a0);
      a1 = _mm512_fmadd_ps(xi, _mm512_loadu_ps(row + 16), a1);
      a2 = _mm512_fmadd_ps(xi, _mm512_loadu_ps(row + 32), a2);
      a3 = _mm512_fmadd_ps(xi, _mm512_loadu_ps(row + 48), a3);
    }
    if (begin == 0) {
      c[0] = a0, c[1] = a1, c[2] = a2, c[3] = a3;
    } else {
      c[0] = _mm512_add_ps(c[0], a0), c[1] = _mm512_add_ps(c[1], a1);
      c[2] = _mm512_add_ps(c[2], a2), c[3] = _mm512_add_ps(c[3], a3);
    }
  }
}

// Inputs i and i + 1 as a bf16 pair in every lane; the second zero past the row's end `k`.
__attribute__((target("avx512f,avx512bf16"))) inline __m512bh pair_at(const std::uint16_t* x,
                                                                      std::int64_t i,
                                                                      std::int64_t k) {
  std::uint32_t bits = x[i];
  if (i + 1 < k) bits |= static_cast<std::uint32_t>(x[i + 1]) << 16;
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(bits));  // NOLINT: a vector cast
}

// 16 columns' weights for the pair of inputs at i, columns [16 q, 16 q + 16) of the block.
__attribute__((target("avx512f,avx512bf16"))) inline __m512bh pair_weights(
    const std::uint16_t* tile, std::int64_t i, int q) {
  return (__m512bh)_mm512_loadu_si512(tile + i * kBlockColumns + 32 * q);  // NOLINT: vector cast
}

// The same for bf16: a pair of inputs per step (vdpbf16ps, as oneDNN's avx512_core_bf16
// kernel), the second of an odd last pair zero (the weights' padding is zero, the row ends).
__attribute__((target("avx512f,avx512bf16"))) void block_sums(const std::uint16_t* x,
                                                              const std::uint16_t* tile,
                                                              std::int64_t k, std::int64_t k_block,
                                                              __m512 (&c)[4]) {
  for (std::int64_t begin = 0; begin < k; begin += k_block) {
    const std::int64_t end = std::min(k, begin + k_block);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (std::int64_t i = begin; i < end; i += 2) {
      const __m512bh xi = pair_at(x, i, k);
      a0 = _mm512_dpbf16_ps(a0, pair_weights(tile, i, 0), xi);
      a1 = _mm512_dpbf16_ps(a1, pair_weights(tile, i, 1), xi);
      a2 = _mm512_dpbf16_ps(a2, pair_weights(tile, i, 2), xi);
      a3 = _mm512_dpbf16_ps(a3, pair_weights(tile, i, 3), xi);
    }
    if (begin == 0) {
      c[0] = a0, c[1] = a1, c[2] = a2, c[3] = a3;
    } else {
      c[0] = _mm512_add_ps(c[0], a0), c[1] = _mm512_add_ps(c[1], a1);
      c[2] = _mm512_add_ps(c[2], a2), c[3] = _mm512_add_ps(c[3], a3);
    }
  }
}

}  // namespace

std::unique_ptr<RowProduct> RowProduct::over(const std::vector<dnnl::memory>& parts,
                                             const float* bias, dnnl::algorithm activation,
                                             float alpha) {
  if (parts.empty() || !__builtin_cpu_supports("avx512f")) return nullptr;
  const bool bf16 = parts[0].get_desc().data.data_type == dnnl_bf16;
  if (bf16 && !__builtin_cpu_supports("avx512bf16")) return nullptr;
  if (!bf16 && parts.size() != 1) return nullptr;
  std::unique_ptr<RowProduct> p(new RowProduct);
  p->bf16_ = bf16;
  std::int64_t begin = 0;
  for (const dnnl::memory& m : parts) {
    const dnnl::memory::desc md = m.get_desc();
    Part part{.weights = m.get_data_handle(), .begin = begin, .depth = md.data.dims[0]};
    if (!is_packed_by_columns(md, bf16 ? dnnl_bf16 : dnnl_f32, part.block_stride)) return nullptr;
    if (p->n_ != 0 && md.data.dims[1] != p->n_) return nullptr;
    p->n_ = md.data.dims[1];
    begin += part.depth;
    p->parts_.push_back(part);
  }
  p->blocks_ = (p->n_ + kBlockColumns - 1) / kBlockColumns;
  p->bias_ = bias;
  p->activation_ = activation;
  p->alpha_ = alpha;
  if (activation != dnnl::algorithm::undef) p->eltwise_ = eltwise_over(p->n_, activation, alpha);
  return p;
}

void RowProduct::part_columns(const void* x, std::size_t part, std::int64_t block,
                              std::int64_t k_block, float* y) const {
  const Part& p = parts_[part];
  const std::int64_t first = block * kBlockColumns;
  __m512 sums[4];
  if (bf16_)
    block_sums(static_cast<const std::uint16_t*>(x) + p.begin,
               static_cast<const std::uint16_t*>(p.weights) + block * p.block_stride, p.depth,
               k_block, sums);
  else
    block_sums(static_cast<const float*>(x) + p.begin,
               static_cast<const float*>(p.weights) + block * p.block_stride, p.depth, k_block,
               sums);
  finish(sums, bias_ ? bias_ + first : nullptr, part == 0, std::min(kBlockColumns, n_ - first),
         y + first);
}

void RowProduct::columns(const void* x, std::int64_t block, float* y) const {
  for (std::size_t part = 0; part < parts_.size(); ++part)
    part_columns(x, part, block, parts_[part].k_block, y);
}

bool RowProduct::calibrate(const void* x, const PartReference& part_reference,
                           const float* reference) {
  // Each candidate is tried on the part's first column block (activation included where the
  // part is the last), and one that matches there on every column of the layer.
  std::vector<float> y(static_cast<std::size_t>(blocks_ * kBlockColumns)),
      expected(static_cast<std::size_t>(n_));
  const std::int64_t first = std::min(kBlockColumns, n_);
  const bool act = activation_ != dnnl::algorithm::undef;
  const dnnl::eltwise_forward first_eltwise =
      act ? eltwise_over(first, activation_, alpha_) : dnnl::eltwise_forward();
  for (std::size_t part = 0; part < parts_.size(); ++part) {
    const bool last = part + 1 == parts_.size();
    part_reference(part, expected.data());
    auto matches = [&](std::int64_t k_block, std::int64_t blocks) {
      std::fill(y.begin(), y.end(), 0.0f);
      for (std::int64_t b = 0; b < blocks; ++b) part_columns(x, part, b, k_block, y.data());
      const std::int64_t columns = std::min(blocks * kBlockColumns, n_);
      if (act && last) apply(blocks == 1 ? first_eltwise : eltwise_, y.data(), columns);
      return std::memcmp(y.data(), expected.data(), sizeof(float) * columns) == 0;
    };
    const std::int64_t k = parts_[part].depth;
    parts_[part].k_block = 0;
    for (std::int64_t candidate = k; candidate > 0;
         candidate = candidate == k ? (k - 1) / kBlockDepth * kBlockDepth : candidate - kBlockDepth)
      if (matches(candidate, 1) && matches(candidate, blocks_)) {
        parts_[part].k_block = candidate;
        break;
      }
    if (parts_[part].k_block == 0) return false;
  }
  run(x, y.data());
  return std::memcmp(y.data(), reference, sizeof(float) * n_) == 0;
}

void RowProduct::run(const void* x, float* y) const {
  const int threads = static_cast<int>(std::min<std::int64_t>(thread_count(), blocks_));
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (std::int64_t b = 0; b < blocks_; ++b) columns(x, b, y);
  if (activation_ != dnnl::algorithm::undef) apply(eltwise_, y, n_);
}

}  // namespace masque::numerics

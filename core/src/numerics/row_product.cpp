#include "numerics/row_product.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "masque/threading.hpp"
#include "numerics/dnnl_context.hpp"

namespace masque::numerics {

namespace {

using dt = dnnl::memory::data_type;

constexpr std::int64_t kBlockColumns = 64;  // BA16a64b: 64 output columns per block
constexpr std::int64_t kBlockDepth = 16;    // and 16 inputs per inner tile

// Whether `md` is f32 [K, N] in BA16a64b with 16 x 64 tiles stored k-major inside a column
// block: element (k, n) at (n / 64) * block_stride + k * 64 + n % 64.
bool is_ba16a64b(const dnnl::memory::desc& md, std::int64_t& block_stride) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.ndims != 2 || d.data_type != dnnl_f32 || d.format_kind != dnnl_blocked || d.offset0 != 0)
    return false;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  if (b.inner_nblks != 2 || b.inner_blks[0] != kBlockDepth || b.inner_idxs[0] != 0 ||
      b.inner_blks[1] != kBlockColumns || b.inner_idxs[1] != 1)
    return false;
  if (b.strides[0] != kBlockDepth * kBlockColumns || d.padded_dims[1] % kBlockColumns != 0)
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

// Sums of 64 columns: each K block summed from zero in input order, the blocks added in order,
// then the bias, as oneDNN's brgemm does; `tile` points at the column block.
__attribute__((target("avx512f"))) void block_sums(const float* x, const float* tile,
                                                   std::int64_t k, std::int64_t k_block,
                                                   const float* bias, std::int64_t valid,
                                                   float* y) {
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
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
      c0 = a0, c1 = a1, c2 = a2, c3 = a3;
    } else {
      c0 = _mm512_add_ps(c0, a0), c1 = _mm512_add_ps(c1, a1);
      c2 = _mm512_add_ps(c2, a2), c3 = _mm512_add_ps(c3, a3);
    }
  }
  const __m512 sums[4] = {c0, c1, c2, c3};
  for (int q = 0; q < 4; ++q) {
    const std::int64_t left = std::clamp<std::int64_t>(valid - 16 * q, 0, 16);
    const __mmask16 mask = static_cast<__mmask16>((1u << left) - 1u);
    if (!mask) break;
    __m512 s = sums[q];
    if (bias) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(mask, bias + 16 * q));
    _mm512_mask_storeu_ps(y + 16 * q, mask, s);
  }
}

}  // namespace

std::unique_ptr<RowProduct> RowProduct::over(const dnnl::memory& weights, const float* bias,
                                             dnnl::algorithm activation, float alpha) {
  if (!__builtin_cpu_supports("avx512f")) return nullptr;
  const dnnl::memory::desc md = weights.get_desc();
  std::int64_t block_stride = 0;
  if (!is_ba16a64b(md, block_stride)) return nullptr;
  std::unique_ptr<RowProduct> p(new RowProduct);
  p->weights_ = static_cast<const float*>(weights.get_data_handle());
  p->k_ = md.data.dims[0];
  p->n_ = md.data.dims[1];
  p->blocks_ = (p->n_ + kBlockColumns - 1) / kBlockColumns;
  p->block_stride_ = block_stride;
  p->bias_ = bias;
  p->activation_ = activation;
  p->alpha_ = alpha;
  if (activation != dnnl::algorithm::undef) p->eltwise_ = eltwise_over(p->n_, activation, alpha);
  return p;
}

void RowProduct::columns(const float* x, std::int64_t block, std::int64_t k_block, float* y) const {
  const std::int64_t first = block * kBlockColumns;
  block_sums(x, weights_ + block * block_stride_, k_, k_block, bias_ ? bias_ + first : nullptr,
             std::min(kBlockColumns, n_ - first), y + first);
}

bool RowProduct::calibrate(const float* x, const float* reference) {
  // Each candidate is tried on the first column block (activation included), and one that
  // matches there on every column of the layer.
  std::vector<float> y(static_cast<std::size_t>(blocks_ * kBlockColumns));
  const std::int64_t first = std::min(kBlockColumns, n_);
  const dnnl::eltwise_forward first_eltwise = activation_ == dnnl::algorithm::undef
                                                  ? dnnl::eltwise_forward()
                                                  : eltwise_over(first, activation_, alpha_);
  for (std::int64_t candidate = k_; candidate > 0;
       candidate = candidate == k_ ? (k_ - 1) / kBlockDepth * kBlockDepth
                                   : candidate - kBlockDepth) {
    columns(x, 0, candidate, y.data());
    if (activation_ != dnnl::algorithm::undef) apply(first_eltwise, y.data(), first);
    if (std::memcmp(y.data(), reference, sizeof(float) * first) != 0) continue;
    k_block_ = candidate;
    run(x, y.data());
    if (std::memcmp(y.data(), reference, sizeof(float) * n_) == 0) return true;
  }
  k_block_ = 0;
  return false;
}

void RowProduct::run(const float* x, float* y) const {
  const int threads = static_cast<int>(std::min<std::int64_t>(thread_count(), blocks_));
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (std::int64_t b = 0; b < blocks_; ++b) columns(x, b, k_block_, y);
  if (activation_ != dnnl::algorithm::undef) apply(eltwise_, y, n_);
}

}  // namespace masque::numerics

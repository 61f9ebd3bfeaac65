// Training linear layers on oneDNN matmul primitives over plain, strided f32 operands.
#include "masque/train/linear.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "masque/error.hpp"
#include "masque/threading.hpp"
#include "numerics/dnnl_context.hpp"
#include "numerics/parallel.hpp"
#include "numerics/simd.hpp"

namespace masque::train {

namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// Cached primitives are few (a model has a handful of shapes); past this the cache starts afresh.
constexpr std::size_t kMaxCached = 512;

struct Product {
  dnnl::matmul primitive;
  dnnl::memory::desc a_md, b_md, c_md, bias_md;
  std::size_t scratchpad_bytes = 0;
};

// m, n, k, transpose_a, transpose_b, accumulate, bias, threads, bf16 operands
using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool, bool, bool, int, bool>;

std::shared_ptr<const Product> create(const Key& key) {
  const auto [m, n, k, ta, tb, accumulate, bias, threads, bf16] = key;
  (void)threads;
  const dt operand = bf16 ? dt::bf16 : dt::f32;
  auto p = std::make_shared<Product>();
  p->a_md = dnnl::memory::desc({m, k}, operand, ta ? dims{1, m} : dims{k, 1});
  p->b_md = dnnl::memory::desc({k, n}, operand, tb ? dims{1, k} : dims{n, 1});
  p->c_md = dnnl::memory::desc({m, n}, dt::f32, dims{n, 1});
  if (bias) p->bias_md = dnnl::memory::desc({1, n}, dt::f32, dims{n, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const auto desc = bias ? dnnl::matmul::desc(p->a_md, p->b_md, p->bias_md, p->c_md)
                         : dnnl::matmul::desc(p->a_md, p->b_md, p->c_md);
  const dnnl::matmul::primitive_desc pd(desc, attr, numerics::cpu_engine());
  p->primitive = dnnl::matmul(pd);
  p->scratchpad_bytes = pd.scratchpad_desc().get_size();
  return p;
}

std::shared_ptr<const Product> product(const Key& key) {
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const Product>> cache;
  {
    std::lock_guard lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  auto p = create(key);  // outside the lock; a racing thread's twin is equally valid
  std::lock_guard lock(mutex);
  if (cache.size() >= kMaxCached) cache.clear();
  return cache.emplace(key, std::move(p)).first->second;
}

// db[n] += sum over rows of dy[r, n]; rows are added in order, in double, so db does not depend
// on the thread count and keeps its digits over thousands of rows.
MASQUE_VECTORIZE void add_column_sums_range(const float* __restrict dy, std::int64_t rows,
                                            std::int64_t n, std::int64_t begin, std::int64_t end,
                                            float* __restrict db) {
  constexpr std::int64_t kChunk = 256;
  double acc[kChunk];
  for (std::int64_t c0 = begin; c0 < end; c0 += kChunk) {
    const std::int64_t w = std::min(kChunk, end - c0);
    for (std::int64_t c = 0; c < w; ++c) acc[c] = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = dy + r * n + c0;
      for (std::int64_t c = 0; c < w; ++c) acc[c] += row[c];
    }
    for (std::int64_t c = 0; c < w; ++c) db[c0 + c] += static_cast<float>(acc[c]);
  }
}

// Columns split over the intra-op threads; every column still sums its rows in order.
void add_column_sums(const float* dy, std::int64_t rows, std::int64_t n, float* db) {
  numerics::parallel_range(n, 2.0 * rows * n, [&](std::int64_t begin, std::int64_t end) {
    add_column_sums_range(dy, rows, n, begin, end, db);
  });
}

void require(bool ok, const std::string& what) {
  if (!ok) throw RuntimeError("train linear: " + what);
}

// The calling thread's bf16 copies of a product's operands (slot 0, 1, 2), kept between calls.
const std::uint16_t* to_bf16(int slot, const float* x, std::int64_t n) {
  thread_local std::vector<std::uint16_t> buffers[3];
  std::vector<std::uint16_t>& buffer = buffers[slot];
  if (buffer.size() < static_cast<std::size_t>(n)) buffer.resize(n);
  round_to_bf16(x, n, buffer.data());
  return buffer.data();
}

// C (f32) = or += op(A) op(B) [+ bias] with A and B f32, or bf16 when `bf16`.
void product(std::int64_t m, std::int64_t n, std::int64_t k, const void* a, bool transpose_a,
             const void* b, bool transpose_b, float* c, bool accumulate, const float* bias,
             bool bf16) {
  require(m >= 0 && n >= 0 && k >= 0, "negative matmul dimensions");
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: C stays (accumulate) or becomes the bias / zeros
    if (!accumulate)
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) c[i * n + j] = bias ? bias[j] : 0.0f;
    return;
  }
  require(!(accumulate && bias), "a bias cannot be added onto an accumulated product");
  const Key key{m,   n, k, transpose_a, transpose_b, accumulate, bias != nullptr, thread_count(),
                bf16};
  const std::shared_ptr<const Product> p = product(key);
  const dnnl::engine& engine = numerics::cpu_engine();
  dnnl::stream& stream = numerics::thread_stream();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(p->a_md, engine, const_cast<void*>(a))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(p->b_md, engine, const_cast<void*>(b))},
      {DNNL_ARG_DST, dnnl::memory(p->c_md, engine, c)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p->bias_md, engine, const_cast<float*>(bias)));
  if (p->scratchpad_bytes > 0) {
    const dnnl::memory::desc md({static_cast<dnnl::memory::dim>(p->scratchpad_bytes)}, dt::u8,
                                dnnl::memory::format_tag::a);
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(md, engine, numerics::thread_scratchpad(p->scratchpad_bytes)));
  }
  p->primitive.execute(stream, args);
  stream.wait();
}

}  // namespace

void matmul(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, bool transpose_a,
            const float* b, bool transpose_b, float* c, bool accumulate, const float* bias) {
  product(m, n, k, a, transpose_a, b, transpose_b, c, accumulate, bias, false);
}

namespace {

// A product's operand in the layer's compute type: f32 as it is, bf16 rounded into `slot`.
const void* operand(const LinearShape& s, int slot, const float* x, std::int64_t n) {
  return s.compute == DType::bf16 ? static_cast<const void*>(to_bf16(slot, x, n)) : x;
}

void require_compute(const LinearShape& s) {
  require(s.in > 0 && s.out > 0, "empty layer");
  require(s.compute == DType::f32 || s.compute == DType::bf16,
          std::string("products compute in f32 or bf16, not ") + to_string(s.compute));
}

}  // namespace

void linear_forward(const LinearShape& s, const float* x, std::int64_t rows, const float* w,
                    const float* bias, float* y) {
  require_compute(s);
  const bool bf16 = s.compute == DType::bf16;
  // out_in: W is [out, in], so x W^T reads it transposed; in_out: W is [in, out] as it is.
  product(rows, s.out, s.in, operand(s, 0, x, rows * s.in), false, operand(s, 1, w, s.in * s.out),
          s.layout == WeightLayout::out_in, y, false, bias, bf16);
}

void linear_backward(const LinearShape& s, const float* x, const float* dy, std::int64_t rows,
                     const float* w, float* dx, float* dw, float* db) {
  require_compute(s);
  const bool bf16 = s.compute == DType::bf16, out_in = s.layout == WeightLayout::out_in;
  const void* dy_op = operand(s, 0, dy, rows * s.out);  // rounded once for both products
  // dx [rows, in] = dy [rows, out] W', where W' = W [out, in] as stored (out_in) or W^T.
  if (dx)
    product(rows, s.in, s.out, dy_op, false, operand(s, 1, w, s.in * s.out), !out_in, dx, false,
            nullptr, bf16);
  if (dw) {
    const void* x_op = operand(s, 2, x, rows * s.in);
    if (out_in)  // dW [out, in] += dy^T x
      product(s.out, s.in, rows, dy_op, true, x_op, false, dw, true, nullptr, bf16);
    else  // dW [in, out] += x^T dy
      product(s.in, s.out, rows, x_op, true, dy_op, false, dw, true, nullptr, bf16);
  }
  if (db) add_column_sums(dy, rows, s.out, db);
}

void linear_forward(const LinearShape& s, const Tensor& x, const Tensor& w, const Tensor& bias,
                    Tensor& y) {
  require(x.dtype() == DType::f32 && x.rank() >= 1 && x.dim(-1) == s.in,
          "x " + to_string(x.shape()) + " does not have " + std::to_string(s.in) + " features");
  require(w.dtype() == DType::f32 && w.numel() == s.in * s.out,
          "weight " + to_string(w.shape()) + " is not " + std::to_string(s.in) + " x " +
              std::to_string(s.out));
  require(bias.empty() || (bias.dtype() == DType::f32 && bias.numel() == s.out),
          "bias " + to_string(bias.shape()) + " is not [" + std::to_string(s.out) + "]");
  Shape shape = x.shape();
  shape.back() = s.out;
  if (y.dtype() != DType::f32)
    y = Tensor(shape);
  else
    y.resize(shape);
  linear_forward(s, x.f32(), x.numel() / s.in, w.f32(), bias.empty() ? nullptr : bias.f32(),
                 y.f32());
}

void linear_backward(const LinearShape& s, const Tensor& x, const Tensor& dy, const Tensor& w,
                     Tensor* dx, Tensor* dw, Tensor* db) {
  require(x.dtype() == DType::f32 && x.rank() >= 1 && x.dim(-1) == s.in, "x has the wrong shape");
  const std::int64_t rows = x.numel() / s.in;
  require(dy.dtype() == DType::f32 && dy.numel() == rows * s.out,
          "dy " + to_string(dy.shape()) + " does not fit " + std::to_string(rows) + " rows of " +
              std::to_string(s.out));
  require(w.numel() == s.in * s.out, "the weight has the wrong size");
  if (dw) require(dw->dtype() == DType::f32 && dw->numel() == w.numel(), "dW has the wrong size");
  if (db) require(db->dtype() == DType::f32 && db->numel() == s.out, "db has the wrong size");
  if (dx) {
    if (dx->dtype() != DType::f32)
      *dx = Tensor(x.shape());
    else
      dx->resize(x.shape());
  }
  linear_backward(s, x.f32(), dy.f32(), rows, w.f32(), dx ? dx->f32() : nullptr,
                  dw ? dw->f32() : nullptr, db ? db->f32() : nullptr);
}

}  // namespace masque::train

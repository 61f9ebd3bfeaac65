// Linear layer on oneDNN matmul with weights pre-packed at load time.
//
// Packing: the weight is reordered once into the layout oneDNN's matmul prefers (format_tag
// any), which is 10-20% faster than plain row-major weights on large shapes. Primitives: one per
// (rows, thread count), created on first use and kept; executing never creates anything except
// two memory handles. A bf16 layer packs bfloat16 weights and rounds each call's input rows to
// bfloat16 in a per-thread buffer (oneDNN 2.6 wants both operands in one type).
//
// Parts: oneDNN's bf16 matmul splits a deep product (more than about 1024 inputs) into chunks
// whose size depends on the row count and thread count, so a row's result would depend on its
// batch. A bf16 layer deeper than kMaxBf16Depth is therefore computed as several products over
// input slices of at most that depth, each added onto the output (a sum post-op) in a fixed
// order. An f32 layer is one part.
//
// int8: the weight is quantized once, one symmetric scale per output feature (the matmul's
// output scales); each call quantizes every input row with its own scale, so a row's numbers
// never depend on the other rows, and int32 accumulation is exact, so they do not depend on how
// oneDNN splits the product either. oneDNN 2.6's fast kernels take no per-row scale, hence a
// second primitive (binary) finishes y = act(y * row_scale + bias). One part. Without VNNI
// (AVX2, AVX-512 before Cascade Lake) oneDNN multiplies int8 pairs into saturating 16-bit sums,
// so weights there get 7 bits (|q| <= 63), which keeps every sum exact, as oneDNN's own int8
// convolutions do.
//
// Convolution: without AVX-512, oneDNN 2.6 runs an f32 matmul on its gemm driver, whose kernels
// accumulate a row differently depending on the row count (one row, tails of 1-3 rows), so a
// row's result would depend on its batch. There an f32 layer is a 1x1 convolution over the
// rows as pixels (nhwc: the same memory as [rows, in]); its kernel accumulates every output in
// input order whatever the rows and threads, and is as fast or faster (bench/numerics).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "masque/error.hpp"
#include "masque/layers.hpp"
#include "masque/threading.hpp"
#include "numerics/dnnl_context.hpp"
#include "numerics/int4_product.hpp"
#include "numerics/int8_row_product.hpp"
#include "numerics/parallel.hpp"
#include "numerics/release_in_order.hpp"
#include "numerics/row_product.hpp"
#include "numerics/simd.hpp"
#include "numerics/tensor_checks.hpp"

namespace masque {

using numerics::cpu_engine;
using numerics::thread_stream;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

// The rows a weight is packed for; oneDNN 2.6 picks the same blocked layout for every row count
// of a shape, and a primitive that wants another one gets its own reordered copy.
constexpr std::int64_t kPackRows = 64;
// Fewer rows than this: a memory-bound product, which one thread serves best unless its
// weights are large enough that a second core's memory bandwidth outweighs waking it.
constexpr std::int64_t kParallelMinRows = 16;
constexpr double kParallelMinWeightBytes = 1 << 19;
// Primitives kept per layer; beyond this the cache starts afresh (row counts are usually few).
constexpr std::size_t kMaxCachedPrimitives = 256;
// A primitive is created per row count (with its own JIT kernels, up to ~1 MB in bf16), and
// the products over a batch's tokens (scoring, prefill, an encoder) see a new count with almost
// every batch: above kSplitRows rows a product runs as a multiple of kRowQuantum rows and the
// rest, so a corpus reuses a few dozen primitives instead of keeping hundreds. Decoding steps
// (fewer rows) keep one call.
constexpr std::int64_t kSplitRows = 256;
constexpr std::int64_t kRowQuantum = 32;
// The deepest bf16 product whose result oneDNN 2.6 computes the same way for every row count
// (measured with AMX; see Parts above).
constexpr std::int64_t kMaxBf16Depth = 1024;

dnnl::algorithm eltwise_of(Activation a) {
  switch (a) {
    case Activation::relu:
      return dnnl::algorithm::eltwise_relu;
    case Activation::gelu:
      return dnnl::algorithm::eltwise_gelu_erf;
    case Activation::gelu_tanh:
      return dnnl::algorithm::eltwise_gelu_tanh;
    case Activation::silu:
      return dnnl::algorithm::eltwise_swish;
    case Activation::tanh:
      return dnnl::algorithm::eltwise_tanh;
    case Activation::none:
      break;
  }
  return dnnl::algorithm::undef;
}

// accumulate: add onto the output (a later part); activation: applied last (the last part).
dnnl::primitive_attr make_attr(bool accumulate, Activation activation) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops ops;
  if (accumulate) ops.append_sum(1.0f);
  if (activation != Activation::none) {
    // swish(x) = x * sigmoid(alpha x): alpha 1 is SiLU; alpha is ignored by the others.
    ops.append_eltwise(1.0f, eltwise_of(activation), activation == Activation::silu ? 1.0f : 0.0f,
                       0.0f);
  }
  if (ops.len() > 0) attr.set_post_ops(ops);
  return attr;
}

// A 1x1 convolution over one image of `rows` pixels in a row: nhwc src and dst are the
// row-major [rows, in] and [rows, out]. `bias` may be a zero desc.
dnnl::convolution_forward::desc one_by_one(std::int64_t rows, std::int64_t in, std::int64_t out,
                                           const dnnl::memory::desc& weights,
                                           const dnnl::memory::desc& bias) {
  const dnnl::memory::desc src({1, in, 1, rows}, dt::f32, tag::nhwc);
  const dnnl::memory::desc dst({1, out, 1, rows}, dt::f32, tag::nhwc);
  const auto kind = dnnl::prop_kind::forward_inference;
  const auto algo = dnnl::algorithm::convolution_direct;
  const dnnl::memory::dims ones{1, 1}, zeros{0, 0};
  return bias.is_zero()
             ? dnnl::convolution_forward::desc(kind, algo, src, weights, dst, ones, zeros, zeros)
             : dnnl::convolution_forward::desc(kind, algo, src, weights, bias, dst, ones, zeros,
                                               zeros);
}

}  // namespace

struct Linear::Impl {
  std::int64_t in = 0, out = 0;
  Activation activation = Activation::none;
  DType requested = DType::f32;      // LinearOptions::compute
  dt compute = dt::f32;              // input and weight type
  bool convolution = false;          // a 1x1 convolution rather than a matmul (see above)
  std::vector<float> weight_scales;  // s8: one per output feature
  std::unique_ptr<numerics::Int4Product> int4;  // i4: the whole product (no oneDNN parts)
  // The product over inputs [begin, begin + depth): the first part adds the bias, later ones
  // add onto the output, the last applies the activation.
  struct Part {
    std::int64_t begin = 0, depth = 0;
    dnnl::memory::desc weights_md;  // packed
    dnnl::memory weights;
    std::shared_ptr<void> storage;  // owns the weights' buffer when oneDNN does not
  };
  std::vector<Part> parts;
  dnnl::memory::desc bias_md;  // zero desc when there is no bias
  dnnl::memory bias;
  // f32 or bf16: one-row products at memory speed, calibrated to oneDNN's numbers (or null).
  // Made at the first one-row call, so that runs which never decode do not pay for it.
  mutable std::once_flag row_product_once;
  mutable std::unique_ptr<numerics::RowProduct> row_product;
  std::unique_ptr<numerics::RowProduct> make_row_product() const;
  const numerics::RowProduct* one_row() const {
    std::call_once(row_product_once, [this] { row_product = make_row_product(); });
    return row_product.get();
  }
  // s8 on oneDNN's gemm driver (no VNNI), one part: one-row products on the plain [out][in]
  // weights, checked against oneDNN on a probe row (or null). Made at the first one-row call.
  mutable std::once_flag int8_row_once;
  mutable std::unique_ptr<numerics::Int8RowProduct> int8_row;
  std::unique_ptr<numerics::Int8RowProduct> make_int8_row() const;
  const numerics::Int8RowProduct* one_row_s8() const {
    std::call_once(int8_row_once, [this] { int8_row = make_int8_row(); });
    return int8_row.get();
  }

  struct Executable {
    dnnl::primitive product;  // matmul or convolution
    dnnl::memory::desc src_md, dst_md;
    std::size_t scratchpad_bytes = 0;
    dnnl::memory weights;  // the packed weights, or a copy in the layout this primitive wants
    std::shared_ptr<void> storage;  // the buffer of `weights`
    dnnl::binary epilogue;          // s8: y = act(y * row_scale + bias), in place
    dnnl::memory::desc row_scales_md;
  };
  using Key = std::tuple<std::int64_t, int, std::size_t>;  // rows, threads, part
  mutable std::mutex mutex;
  mutable std::map<Key, std::shared_ptr<const Executable>> cache;

  // Construction: the bias (f32, f16 or bf16 [out], or empty); the int4 product; the parts'
  // packed weights from the stored weight (f32 and bf16 layers: F32, BF16 or F16, converted by
  // the packing reorder) or from s8 (int8 layers, quantized).
  void set_bias(const Tensor& bias);
  // The int4 product, built by `build` from the bias as f32 (or null).
  void make_int4(const Tensor& bias,
                 const std::function<std::unique_ptr<numerics::Int4Product>(const float*)>& build);
  // `s8_storage`: the buffer of an s8 weight made for this layer, adopted as the packed weights
  // where their layout is its own (else s8 is reordered and the buffer dropped).
  // `release`: told as an [out, in] 16-bit weight's rows are packed (one part only).
  void pack(const Tensor& w, WeightLayout layout, const dnnl::memory& s8,
            std::shared_ptr<void>* s8_storage = nullptr, const SourceRelease& release = {});
  void pack_widened(const Tensor& w, WeightLayout layout, const Part& part,
                    const SourceRelease& release) const;

  dnnl::primitive_desc describe(std::int64_t rows, std::size_t part,
                                const dnnl::memory::desc& wmd) const;
  dnnl::primitive_desc describe_convolution(std::int64_t rows, const dnnl::memory::desc& wmd) const;
  // The weights of a part in any layout the primitive likes.
  dnnl::memory::desc any_weights(std::size_t part) const;
  std::shared_ptr<const Executable> create(std::int64_t rows, std::size_t part) const;
  std::shared_ptr<const Executable> get(std::int64_t rows, std::size_t part) const;
  dnnl::binary describe_epilogue(std::int64_t rows) const;
  // One part's product: x (rows x the part's depth, dense) into y; row_scales: s8 only.
  void run(std::int64_t rows, std::size_t part, const void* x, float* y,
           const float* row_scales = nullptr) const;
  // s8: y = act(y * row_scale + bias), in place (the epilogue of every s8 product).
  void epilogue(std::int64_t rows, float* y, const float* row_scales) const;
  // x rounded to bfloat16 in the calling thread's buffer, part by part: part p's columns of
  // every row, rows x depth, start at rows * begin (a dense operand for each product).
  const std::uint16_t* to_bf16(const float* x, std::int64_t rows) const;
  // x quantized to int8 row by row in the calling thread's buffers: the rows and their scales.
  std::pair<const std::int8_t*, const float*> to_s8(const float* x, std::int64_t rows) const;
};

dnnl::primitive_desc Linear::Impl::describe(std::int64_t rows, std::size_t part,
                                            const dnnl::memory::desc& wmd) const {
  if (convolution) return describe_convolution(rows, wmd);
  const bool first = part == 0, last = part + 1 == parts.size();
  dnnl::memory::desc src({rows, parts[part].depth}, compute, tag::ab);
  dnnl::memory::desc dst({rows, out}, dt::f32, tag::ab);
  if (compute == dt::s8) {  // bias and activation come after the row scales (the epilogue)
    dnnl::primitive_attr attr = make_attr(false, Activation::none);
    attr.set_output_scales(1 << 1, weight_scales);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wmd, dst), attr, cpu_engine());
  }
  dnnl::matmul::desc desc = bias_md.is_zero() || !first
                                ? dnnl::matmul::desc(src, wmd, dst)
                                : dnnl::matmul::desc(src, wmd, bias_md, dst);
  return dnnl::matmul::primitive_desc(desc, make_attr(!first, last ? activation : Activation::none),
                                      cpu_engine());
}

dnnl::primitive_desc Linear::Impl::describe_convolution(std::int64_t rows,
                                                        const dnnl::memory::desc& wmd) const {
  return dnnl::convolution_forward::primitive_desc(one_by_one(rows, in, out, wmd, bias_md),
                                                   make_attr(false, activation), cpu_engine());
}

dnnl::memory::desc Linear::Impl::any_weights(std::size_t part) const {
  if (convolution) return dnnl::memory::desc({out, in, 1, 1}, dt::f32, tag::any);
  return dnnl::memory::desc({parts[part].depth, out}, compute, tag::any);
}

dnnl::binary Linear::Impl::describe_epilogue(std::int64_t rows) const {
  dnnl::memory::desc y({rows, out}, dt::f32, tag::ab), scales({rows, 1}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  dnnl::post_ops ops;
  if (!bias_md.is_zero()) ops.append_binary(dnnl::algorithm::binary_add, bias_md);
  if (activation != Activation::none)
    ops.append_eltwise(1.0f, eltwise_of(activation), activation == Activation::silu ? 1.0f : 0.0f,
                       0.0f);
  if (ops.len() > 0) attr.set_post_ops(ops);
  return dnnl::binary(dnnl::binary::primitive_desc(
      dnnl::binary::desc(dnnl::algorithm::binary_mul, y, scales, y), attr, cpu_engine()));
}

namespace {

// Copies packed weights into another layout. oneDNN 2.6 reorders s8 between two blocked
// layouts only through a plain one.
void repack(dnnl::memory from, dnnl::memory to) {  // handles: copies share the buffer
  auto& stream = thread_stream();
  try {
    dnnl::reorder(from, to).execute(stream, from, to);
  } catch (const dnnl::error&) {
    const dnnl::memory::dims dims = from.get_desc().dims();
    dnnl::memory plain({dims, from.get_desc().data_type(), tag::ab}, cpu_engine());
    dnnl::reorder(from, plain).execute(stream, from, plain);
    dnnl::reorder(plain, to).execute(stream, plain, to);
  }
  stream.wait();
}

}  // namespace

std::shared_ptr<const Linear::Impl::Executable> Linear::Impl::create(std::int64_t rows,
                                                                     std::size_t part) const {
  auto exe = std::make_shared<Executable>();
  const Part& p = parts[part];
  dnnl::primitive_desc pd;
  bool packed_ok = true;
  try {
    pd = describe(rows, part, p.weights_md);
    packed_ok = std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
  } catch (const dnnl::error&) {
    packed_ok = false;
  }
  if (packed_ok) {
    exe->weights = p.weights;
    exe->storage = p.storage;
  } else {
    // This row count wants another layout: give it its own copy (rare; memory over speed).
    pd = describe(rows, part, any_weights(part));
    exe->weights = numerics::layer_memory(pd.weights_desc(), exe->storage);
    repack(p.weights, exe->weights);
  }
  exe->product = dnnl::primitive(pd);
  exe->src_md = pd.src_desc();
  exe->dst_md = pd.dst_desc();
  exe->scratchpad_bytes = pd.scratchpad_desc().get_size();
  if (compute == dt::s8) {
    exe->epilogue = describe_epilogue(rows);
    exe->row_scales_md = dnnl::memory::desc({rows, 1}, dt::f32, tag::ab);
  }
  return exe;
}

std::shared_ptr<const Linear::Impl::Executable> Linear::Impl::get(std::int64_t rows,
                                                                  std::size_t part) const {
  const Key key{rows, thread_count(), part};
  {
    std::lock_guard lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  // Created outside the lock: another thread may race to the same key; both are valid.
  auto exe = create(rows, part);
  std::lock_guard lock(mutex);
  if (cache.size() >= kMaxCachedPrimitives) cache.clear();
  return cache.emplace(key, std::move(exe)).first->second;
}

namespace {

dt compute_type(DType compute) {
  if (compute == DType::f32) return dt::f32;
  if (compute == DType::bf16) return dt::bf16;
  if (compute == DType::i8) return dt::s8;
  throw RuntimeError(std::string("Linear: matmuls compute in f32, bf16 or i8, not ") +
                     to_string(compute));
}

// Rows [begin, begin + depth) of an F32 weight as a [K, N] f32 memory in its stored layout (a
// view of the tensor's data, whose full shape is in x out in `layout`); for a convolution, the
// whole weight as [N, K, 1, 1].
dnnl::memory source_weights(const Tensor& w32, WeightLayout layout, std::int64_t in,
                            std::int64_t out, std::int64_t begin, std::int64_t depth,
                            bool convolution) {
  const bool out_in = layout == WeightLayout::out_in;  // element (k, n) at n * in + k
  const std::int64_t k_stride = out_in ? 1 : out, n_stride = out_in ? in : 1;
  float* data = const_cast<float*>(w32.f32()) + begin * k_stride;
  if (convolution)
    return dnnl::memory({{out, in, 1, 1}, dt::f32, {n_stride, k_stride, 1, 1}}, cpu_engine(), data);
  return dnnl::memory({{depth, out}, dt::f32, {k_stride, n_stride}}, cpu_engine(), data);
}

// Whether oneDNN runs an f32 matmul of this shape on its gemm driver (no AVX-512), whose
// results depend on the row count, while a 1x1 convolution has a jit kernel that does not.
bool prefer_convolution(std::int64_t in, std::int64_t out) {
  try {
    const dnnl::matmul::primitive_desc matmul(
        dnnl::matmul::desc({{kPackRows, in}, dt::f32, tag::ab}, {{in, out}, dt::f32, tag::any},
                           {{kPackRows, out}, dt::f32, tag::ab}),
        cpu_engine());
    if (std::string(matmul.impl_info_str()).rfind("gemm", 0) != 0) return false;
    const dnnl::convolution_forward::primitive_desc convolution(
        one_by_one(kPackRows, in, out, {{out, in, 1, 1}, dt::f32, tag::any}, {}), cpu_engine());
    return std::string(convolution.impl_info_str()).rfind("jit_1x1", 0) == 0;
  } catch (const dnnl::error&) {
    return false;
  }
}

// Rounds to the nearest integer, halves to even (for |v| < 2^22, in the default rounding mode),
// in a form that vectorises.
inline float round_even(float v) {
  return (v + 12582912.0f) - 12582912.0f;  // 1.5 * 2^23
}

// The largest |q| of input rows; weights take int8_weight_levels().
constexpr float kRowLevels = 127.0f;

// x * inverse rounded into [-levels, levels]: one int8 value.
inline std::int8_t to_int8(float x, float inverse, float levels) {
  return static_cast<std::int8_t>(std::min(levels, std::max(-levels, round_even(x * inverse))));
}

// The symmetric int8 scale of n values: max |x| / levels (0 for all zeros; NaN when one is not
// finite, which makes that row's results NaN as in f32).
MASQUE_VECTORIZE float int8_scale(const float* x, std::int64_t n, float levels) {
  return numerics::abs_max_of(x, n) / levels;
}

// q[i] = round(x[i] * (1 / scale)) in [-levels, levels]; zeros when the scale is 0 or NaN.
MASQUE_VECTORIZE void quantize_s8(const float* __restrict x, std::int64_t n, float scale,
                                  float levels, std::int8_t* __restrict q) {
  if (!(scale > 0.0f)) {
    std::memset(q, 0, n);
    return;
  }
  const float inverse = 1.0f / scale;
  for (std::int64_t i = 0; i < n; ++i) q[i] = to_int8(x[i], inverse, levels);
}

// Quantizes the columns of a row-major [rows, cols] matrix, column n with scales[n] (as
// quantize_s8 does a row: the same products and rounding).
MASQUE_VECTORIZE void quantize_columns(const float* __restrict w, std::int64_t rows,
                                       std::int64_t cols, const float* __restrict scales,
                                       float levels, std::int8_t* __restrict q) {
  std::vector<float> inverse(cols);
  for (std::int64_t n = 0; n < cols; ++n) inverse[n] = scales[n] > 0.0f ? 1.0f / scales[n] : 0.0f;
  for (std::int64_t k = 0; k < rows; ++k)
    for (std::int64_t n = 0; n < cols; ++n)
      q[k * cols + n] = to_int8(w[k * cols + n], inverse[n], levels);
}

// The largest |w| of each column of a row-major [rows, cols] matrix of finite values.
MASQUE_VECTORIZE void column_abs_max(const float* __restrict w, std::int64_t rows,
                                     std::int64_t cols, float* __restrict amax) {
  std::fill(amax, amax + cols, 0.0f);
  for (std::int64_t k = 0; k < rows; ++k)
    for (std::int64_t n = 0; n < cols; ++n) amax[n] = std::max(amax[n], std::fabs(w[k * cols + n]));
}

// Elements [first, first + n) of a weight in its stored type (F32, BF16, F16) as f32 into `out`.
void widen_span(const Tensor& w, std::int64_t first, std::int64_t n, float* out) {
  if (w.dtype() == DType::f32) {
    std::memcpy(out, w.f32() + first, static_cast<std::size_t>(n) * sizeof(float));
    return;
  }
  const auto* bits = static_cast<const std::uint16_t*>(w.raw()) + first;
  if (w.dtype() == DType::bf16)
    widen_bf16(bits, n, out);
  else
    widen_f16(bits, n, out);
}

// Row r of a row-major matrix of `cols` values as f32: a view for F32, else widened into
// `buffer`.
const float* widened_row(const Tensor& w, std::int64_t r, std::int64_t cols,
                         std::vector<float>& buffer) {
  if (w.dtype() == DType::f32) return w.f32() + r * cols;
  buffer.resize(static_cast<std::size_t>(cols));
  widen_span(w, r * cols, cols, buffer.data());
  return buffer.data();
}

[[noreturn]] void fail_not_finite() {
  throw RuntimeError(
      "Linear: the weight has values that are not finite; they cannot be quantized to int8");
}

// The weight quantized per output feature, as a [K, N] s8 memory in the weight's own layout, and
// the scales (into `scales`; the buffer into `storage`). Read a stored row at a time: a BF16
// weight is never widened whole.
dnnl::memory quantize_weights(const Tensor& w, WeightLayout layout, std::int64_t in,
                              std::int64_t out, std::vector<float>& scales,
                              std::shared_ptr<void>& storage, const SourceRelease& release = {}) {
  const auto levels = static_cast<float>(int8_weight_levels());
  const bool out_in = layout == WeightLayout::out_in;
  const dnnl::memory::desc md({in, out}, dt::s8,
                              out_in ? dnnl::memory::dims{1, in} : dnnl::memory::dims{out, 1});
  // Allocated as packed weights are: where the packed layout is this one, it is adopted.
  dnnl::memory m = numerics::layer_memory(md, storage);
  auto* q = static_cast<std::int8_t*>(m.get_data_handle());
  scales.resize(out);
  std::vector<float> buffer;
  const std::size_t row_bytes = static_cast<std::size_t>(out_in ? in : out) * dtype_size(w.dtype());
  numerics::ReleaseInOrder done(release, row_bytes);
  if (out_in) {
    for (std::int64_t n = 0; n < out; ++n) {
      const float* row = widened_row(w, n, in, buffer);
      scales[n] = int8_scale(row, in, levels);
      if (std::isnan(scales[n])) fail_not_finite();
      quantize_s8(row, in, scales[n], levels, q + n * in);
      done.row(n);
    }
  } else {
    std::vector<float> amax(out, 0.0f);
    for (std::int64_t k = 0; k < in; ++k) {
      const float* row = widened_row(w, k, out, buffer);
      if (std::isnan(numerics::abs_max_of(row, out))) fail_not_finite();
      column_abs_max(row, 1, out, scales.data());
      for (std::int64_t n = 0; n < out; ++n) amax[n] = std::max(amax[n], scales[n]);
    }
    for (std::int64_t n = 0; n < out; ++n) scales[n] = amax[n] / levels;
    for (std::int64_t k = 0; k < in; ++k) {
      quantize_columns(widened_row(w, k, out, buffer), 1, out, scales.data(), levels, q + k * out);
      done.row(k);
    }
  }
  return m;
}

// The input slices of the parts: one for f32; slices of at most kMaxBf16Depth for bf16, equal
// up to a multiple of 32 (the depth of one AMX bf16 step).
std::vector<std::pair<std::int64_t, std::int64_t>> input_slices(std::int64_t in, dt compute) {
  if (compute != dt::bf16 || in <= kMaxBf16Depth) return {{0, in}};
  const std::int64_t count = (in + kMaxBf16Depth - 1) / kMaxBf16Depth;
  const std::int64_t depth = std::min(kMaxBf16Depth, ((in + count - 1) / count + 31) / 32 * 32);
  std::vector<std::pair<std::int64_t, std::int64_t>> slices;
  for (std::int64_t begin = 0; begin < in; begin += depth)
    slices.emplace_back(begin, std::min(depth, in - begin));
  return slices;
}

}  // namespace

namespace {

// An int8 product's speed over f32's: about 8x with AMX (measured), 4x with VNNI (four
// multiply-adds per 32-bit lane where an FMA does one) and below.
double int8_rate() {
  static const double rate =
      dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx ? 8.0 : 4.0;
  return rate;
}

}  // namespace

bool bf16_matmul_supported() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_bf16:
    case dnnl::cpu_isa::avx512_core_amx:
      return true;
    default:
      return false;
  }
}

int int8_weight_levels() {
  static const int levels = [] {
    switch (dnnl::get_effective_cpu_isa()) {
      case dnnl::cpu_isa::avx2_vnni:
      case dnnl::cpu_isa::avx512_core_vnni:
      case dnnl::cpu_isa::avx512_core_bf16:
      case dnnl::cpu_isa::avx512_core_amx:
        return 127;  // VNNI: int8 products summed in 32 bits
      default:
        return 63;  // pairs of u8 x s8 products summed in saturating 16 bits
    }
  }();
  return levels;
}

// The layer's one-row product when it reproduces oneDNN's: calibrated on a probe row whose
// values span several magnitudes, so that a wrong summation order shows in the roundings.
std::unique_ptr<numerics::RowProduct> Linear::Impl::make_row_product() const {
  if ((compute != dt::f32 && compute != dt::bf16) || convolution) return nullptr;
  const float* b = bias_md.is_zero() ? nullptr : static_cast<const float*>(bias.get_data_handle());
  std::vector<dnnl::memory> weights;
  for (const Part& part : parts) weights.push_back(part.weights);
  auto product = numerics::RowProduct::over(weights, b, eltwise_of(activation),
                                            activation == Activation::silu ? 1.0f : 0.0f);
  if (!product) return nullptr;
  std::vector<float> x(static_cast<std::size_t>(in)), reference(static_cast<std::size_t>(out));
  std::uint32_t state = 12345;
  for (float& v : x) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<std::int32_t>(state >> 8) - (1 << 23)) *
        std::ldexp(1.0f, static_cast<int>(state % 7) - 26);
  }
  std::vector<std::uint16_t> x16;
  const void* row = x.data();
  if (compute == dt::bf16) {
    x16.resize(x.size());
    round_to_bf16(x.data(), in, x16.data());
    row = x16.data();
  }
  ThreadScope one(1);
  const auto part_reference = [&](std::size_t part, float* y) {
    std::fill(y, y + out, 0.0f);
    if (compute == dt::f32) return run(1, part, x.data(), y);
    run(1, part, x16.data() + parts[part].begin, y);
  };
  if (compute == dt::f32) {
    run(1, 0, x.data(), reference.data());
  } else {
    for (std::size_t part = 0; part < parts.size(); ++part)
      run(1, part, x16.data() + parts[part].begin, reference.data());
  }
  return product->calibrate(row, part_reference, reference.data()) ? std::move(product) : nullptr;
}

std::unique_ptr<numerics::Int8RowProduct> Linear::Impl::make_int8_row() const {
  if (compute != dt::s8 || parts.size() != 1 || !numerics::Int8RowProduct::runs_here() ||
      parts[0].weights_md != dnnl::memory::desc({in, out}, dt::s8, tag::ba))
    return nullptr;
  auto product = std::make_unique<numerics::Int8RowProduct>(
      static_cast<const std::int8_t*>(parts[0].weights.get_data_handle()), in, out,
      weight_scales.data());
  // A probe row over the whole int8 range, against oneDNN's own product of it.
  std::vector<std::int8_t> q(static_cast<std::size_t>(in));
  std::uint32_t state = 54321;
  for (auto& v : q) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<std::int8_t>(static_cast<int>(state >> 24) % 255 - 127);
  }
  const float row_scale = 0.0123f;
  std::vector<float> reference(static_cast<std::size_t>(out)), ours(reference.size());
  {
    ThreadScope one(1);
    run(1, 0, q.data(), reference.data(), &row_scale);
    product->run(q.data(), ours.data());
    epilogue(1, ours.data(), &row_scale);
  }
  return std::memcmp(ours.data(), reference.data(), ours.size() * sizeof(float)) == 0
             ? std::move(product)
             : nullptr;
}

std::string matmul_summary(const LinearList& layers) {
  std::size_t asked = 0, quantized = 0;
  DType type = DType::i8;
  for (const auto& [name, linear] : layers) {
    const DType requested = linear->requested();
    if (requested == DType::i8 || requested == DType::i4) {
      ++asked;
      type = requested;
      quantized += linear->compute() == requested;
    }
  }
  const std::string total =
      std::to_string(layers.size()) + " linear layer" + (layers.size() == 1 ? "" : "s");
  if (asked == 0) {
    const DType kind = layers.empty() ? DType::f32 : layers.front().second->compute();
    return std::string(kind == DType::bf16 ? "bf16" : "f32") + ": " + total;
  }
  const std::string name = type == DType::i4 ? "int4" : "int8";
  if (quantized == layers.size()) return name + ": all " + total;
  return name + ": " + std::to_string(quantized) + " of " + total + "; " +
         std::to_string(layers.size() - quantized) + " kept f32 (" + kInt8Rule +
         (type == DType::i4 ? ", or inputs not a multiple of the group size" : "") + ")";
}

bool int8_pays(std::int64_t in, std::int64_t out) {
  return in >= kInt8MinInputs && out >= kInt8MinOutputs && in * out >= kInt8MinWeights;
}

Linear::Linear(const Tensor& weight, const Tensor& bias, LinearOptions options)
    : Linear(weight, bias, options, Int8Policy::always) {}

bool quantizes(std::int64_t in, std::int64_t out, MatmulType type) {
  return (type.compute == DType::i8 || type.compute == DType::i4) && int8_pays(in, out) &&
         (type.compute == DType::i8 || numerics::int4_fits(in, type.group_size));
}

Linear::Linear(const Tensor& weight, const Tensor& bias, LinearOptions options, Int8Policy policy)
    : Linear(weight, bias, options, policy, SourceRelease()) {}

Linear::Linear(const Tensor& weight, const Tensor& bias, LinearOptions options, Int8Policy policy,
               const SourceRelease& release) {
  if (weight.rank() != 2 || !is_floating(weight.dtype()))
    throw RuntimeError("Linear: the weight must be a 2-D floating-point tensor, got " +
                       std::string(to_string(weight.dtype())) + " " + to_string(weight.shape()));
  auto impl = std::make_shared<Impl>();
  const bool out_in = options.layout == WeightLayout::out_in;
  impl->in = weight.dim(out_in ? 1 : 0);
  impl->out = weight.dim(out_in ? 0 : 1);
  impl->activation = options.activation;
  impl->requested = options.compute;
  const bool low_bits = options.compute == DType::i8 || options.compute == DType::i4;
  if (low_bits && policy == Int8Policy::where_it_pays &&
      !quantizes(impl->in, impl->out, {options.compute, options.group_size}))
    options.compute = DType::f32;
  if (impl->in == 0 || impl->out == 0)
    throw RuntimeError("Linear: empty weight " + to_string(weight.shape()));

  if (options.compute == DType::i4) {  // quantized from the stored type, a feature at a time
    impl->make_int4(bias, [&](const float* b) {
      return numerics::quantize_int4_product(weight, options.layout, options.group_size, b,
                                             options.activation, release);
    });
    impl_ = std::move(impl);
    return;
  }
  impl->compute = compute_type(options.compute);
  impl->convolution = impl->compute == dt::f32 && prefer_convolution(impl->in, impl->out);
  impl->set_bias(bias);
  std::shared_ptr<void> quantized;  // s8: the weight quantized, before packing
  dnnl::memory s8_weights;
  if (impl->compute == dt::s8)
    s8_weights = quantize_weights(weight, options.layout, impl->in, impl->out, impl->weight_scales,
                                  quantized, release);
  impl->pack(weight, options.layout, s8_weights, &quantized, release);
  impl_ = std::move(impl);
}

void Linear::Impl::set_bias(const Tensor& b) {
  if (b.empty()) return;
  const Tensor b32 = b.dtype() == DType::f32 ? b : b.to_f32();
  numerics::require_vector(b32, out, "Linear", "bias");
  bias_md = convolution ? dnnl::memory::desc({out}, dt::f32, tag::a)
                        : dnnl::memory::desc({1, out}, dt::f32, tag::ab);
  bias = dnnl::memory(bias_md, cpu_engine());
  std::memcpy(bias.get_data_handle(), b32.f32(), b32.bytes());
}

void Linear::Impl::make_int4(
    const Tensor& b,
    const std::function<std::unique_ptr<numerics::Int4Product>(const float*)>& build) {
  compute = dt::s8;  // the input rows' type
  Tensor b32;
  if (!b.empty()) {
    b32 = b.dtype() == DType::f32 ? b : b.to_f32();
    numerics::require_vector(b32, out, "Linear", "bias");
  }
  int4 = build(b32.empty() ? nullptr : b32.f32());
}

void Linear::Impl::pack(const Tensor& w, WeightLayout layout, const dnnl::memory& s8,
                        std::shared_ptr<void>* s8_storage, const SourceRelease& release) {
  for (const auto& [begin, depth] : input_slices(in, compute))
    parts.push_back(
        {.begin = begin, .depth = depth, .weights_md = {}, .weights = {}, .storage = {}});
  for (std::size_t i = 0; i < parts.size(); ++i) {
    Part& part = parts[i];
    dnnl::primitive_desc pd;
    try {
      pd = describe(kPackRows, i, any_weights(i));
    } catch (const dnnl::error& e) {
      throw RuntimeError(std::string("Linear: oneDNN has no ") +
                         (compute == dt::s8     ? "int8"
                          : compute == dt::bf16 ? "bf16"
                                                : "f32") +
                         " matmul on this CPU (" + e.what() + ")");
    }
    // Without VNNI oneDNN's s8 matmul is its gemm driver, which repacks any layout per call:
    // the plain [out][in] one lets one-row products read the same buffer (Int8RowProduct).
    if (compute == dt::s8 && parts.size() == 1 &&
        std::string(pd.impl_info_str()).rfind("gemm", 0) == 0)
      pd = describe(kPackRows, i, dnnl::memory::desc({in, out}, dt::s8, tag::ba));
    part.weights_md = pd.weights_desc();
    if (compute == dt::s8 && s8_storage && parts.size() == 1 && s8.get_desc() == part.weights_md) {
      part.weights = s8;  // quantized in the packed layout: no second copy
      part.storage = std::move(*s8_storage);
      continue;
    }
    part.weights = numerics::layer_memory(part.weights_md, part.storage);
    if (compute != dt::s8 && w.dtype() != DType::f32) {
      const bool in_order = parts.size() == 1 && layout == WeightLayout::out_in;
      try {
        pack_widened(w, layout, part, in_order ? release : SourceRelease());
        continue;
      } catch (const dnnl::error&) {
        // A packed layout whose slices oneDNN cannot address: the whole weight widened at once.
      }
    }
    // s8, an F32 weight's view, or (the fallback) the whole 16-bit weight widened.
    const Tensor w32 = compute == dt::s8 || w.dtype() == DType::f32 ? w : w.to_f32();
    dnnl::memory src = compute == dt::s8 ? s8
                                         : source_weights(w32, layout, in, out, part.begin,
                                                          part.depth, convolution);
    dnnl::reorder(src, part.weights).execute(thread_stream(), src, part.weights);
    thread_stream().wait();  // before w32 goes
  }
}

// A BF16 or F16 weight packed a slice of output features at a time, each slice widened to f32
// and reordered into its place: oneDNN 2.6 has no fast reorder from 16-bit types to blocked
// layouts (the reference one took 40 s for a 0.5B model), and a slice, unlike the whole weight
// widened at once, adds little to the memory the packed copy takes.
void Linear::Impl::pack_widened(const Tensor& w, WeightLayout layout, const Part& part,
                                const SourceRelease& release) const {
  // Slices start at multiples of every block oneDNN 2.6 packs features in (16, 32, 48, 64).
  constexpr std::int64_t kSliceBytes = std::int64_t{16} << 20, kAlign = 192;
  const bool out_in = layout == WeightLayout::out_in;
  const std::int64_t depth = part.depth;
  const std::int64_t slice =
      std::max(kAlign, kSliceBytes / (depth * std::int64_t{sizeof(float)}) / kAlign * kAlign);
  // The padding of a blocked layout must be zeros; slices write only their own features.
  std::memset(part.weights.get_data_handle(), 0, part.weights_md.get_size());
  std::vector<float> buffer;
  for (std::int64_t n0 = 0; n0 < out; n0 += slice) {
    const std::int64_t c = std::min(slice, out - n0);
    buffer.resize(static_cast<std::size_t>(c * depth));
    // out_in: feature n0 + i's inputs [begin, begin + depth); in_out: input begin + i's
    // features [n0, n0 + c). Only the slice's own values are widened.
    const std::int64_t lines = out_in ? c : depth, span = out_in ? depth : c;
    for (std::int64_t i = 0; i < lines; ++i)
      widen_span(w, out_in ? (n0 + i) * in + part.begin : (part.begin + i) * out + n0, span,
                 buffer.data() + i * span);
    // Element (k, n) of the slice: at n * depth + k (out_in) or k * c + n (in_out).
    const std::int64_t k_stride = out_in ? 1 : c, n_stride = out_in ? depth : 1;
    dnnl::memory src = convolution
                           ? dnnl::memory({{c, depth, 1, 1}, dt::f32, {n_stride, k_stride, 1, 1}},
                                          cpu_engine(), buffer.data())
                           : dnnl::memory({{depth, c}, dt::f32, {k_stride, n_stride}}, cpu_engine(),
                                          buffer.data());
    dnnl::memory dst(convolution ? part.weights_md.submemory_desc({c, depth, 1, 1}, {n0, 0, 0, 0})
                                 : part.weights_md.submemory_desc({depth, c}, {0, n0}),
                     cpu_engine(), part.weights.get_data_handle());
    dnnl::reorder(src, dst).execute(thread_stream(), src, dst);
    thread_stream().wait();
    if (release) release(static_cast<std::size_t>((n0 + c) * in) * dtype_size(w.dtype()));
  }
}

QuantizedWeight quantize_weight(const Tensor& weight, WeightLayout layout, MatmulType type) {
  if (weight.rank() != 2 || !is_floating(weight.dtype()))
    throw RuntimeError("quantize_weight: the weight must be a 2-D floating-point tensor, got " +
                       std::string(to_string(weight.dtype())) + " " + to_string(weight.shape()));
  const bool out_in = layout == WeightLayout::out_in;
  const std::int64_t in = weight.dim(out_in ? 1 : 0), out = weight.dim(out_in ? 0 : 1);
  QuantizedWeight q;
  q.type = type.compute;
  if (type.compute == DType::i4) {
    numerics::Int4Weights w = numerics::quantize_int4(weight, layout, type.group_size);
    q.group_size = type.group_size;
    q.values = Tensor({out, in / 2}, DType::u8);
    std::memcpy(q.values.raw(), w.nibbles.data(), w.nibbles.size());
    q.scales = Tensor({out, in / type.group_size}, DType::bf16);
    std::memcpy(q.scales.raw(), w.scales.data(), w.scales.size() * sizeof(std::uint16_t));
    return q;
  }
  if (type.compute != DType::i8)
    throw RuntimeError(std::string("quantize_weight: ") + to_string(type.compute) +
                       " is not a quantized type (i8, i4)");
  std::vector<float> scales;
  std::shared_ptr<void> storage;
  const dnnl::memory m = quantize_weights(weight, layout, in, out, scales, storage);
  const auto* bytes = static_cast<const std::int8_t*>(m.get_data_handle());
  q.levels = int8_weight_levels();
  q.values = Tensor({out, in}, DType::i8);
  auto* v = static_cast<std::int8_t*>(q.values.raw());
  if (out_in)
    std::memcpy(v, bytes, static_cast<std::size_t>(in * out));
  else  // quantized as [in][out]: transposed
    for (std::int64_t k = 0; k < in; ++k)
      for (std::int64_t n = 0; n < out; ++n) v[n * in + k] = bytes[k * out + n];
  q.scales = Tensor({out});
  std::memcpy(q.scales.f32(), scales.data(), scales.size() * sizeof(float));
  return q;
}

namespace {

// The shapes and types a QuantizedWeight must have; `in` and `out` are its own.
void check_quantized(const QuantizedWeight& q, std::int64_t in, std::int64_t out,
                     const std::string& what) {
  auto fail = [&](const std::string& why) {
    throw RuntimeError(what + ": quantized weight: " + why);
  };
  if (q.type == DType::i4) {
    if (q.values.dtype() != DType::u8 || q.values.shape() != Shape{out, in / 2})
      fail("int4 values must be U8 [out, in / 2], got " + std::string(to_string(q.values.dtype())) +
           " " + to_string(q.values.shape()));
    if (!numerics::int4_fits(in, q.group_size))
      fail(std::to_string(in) + " inputs do not split into groups of " +
           std::to_string(q.group_size));
    if (q.scales.dtype() != DType::bf16 || q.scales.shape() != Shape{out, in / q.group_size})
      fail("int4 scales must be BF16 [out, in / group], got " +
           std::string(to_string(q.scales.dtype())) + " " + to_string(q.scales.shape()));
  } else if (q.type == DType::i8) {
    if (q.values.dtype() != DType::i8 || q.values.shape() != Shape{out, in})
      fail("int8 values must be I8 [out, in], got " + std::string(to_string(q.values.dtype())) +
           " " + to_string(q.values.shape()));
    if (q.scales.dtype() != DType::f32 || q.scales.shape() != Shape{out})
      fail("int8 scales must be F32 [out], got " + std::string(to_string(q.scales.dtype())) + " " +
           to_string(q.scales.shape()));
    if (q.levels < 1 || q.levels > 127) fail("levels " + std::to_string(q.levels));
  } else {
    fail(std::string("type ") + to_string(q.type) + " is not i8 or i4");
  }
}

// The parts' rows one after the other: values and scales as one [sum out, ...] tensor each.
Tensor concat_quantized_rows(std::span<const QuantizedWeight> parts, bool scales) {
  std::int64_t rows = 0;
  for (const QuantizedWeight& p : parts) rows += (scales ? p.scales : p.values).dim(0);
  const Tensor& first = scales ? parts.front().scales : parts.front().values;
  Shape shape = first.shape();
  shape[0] = rows;
  Tensor out(shape, first.dtype());
  auto* o = static_cast<std::uint8_t*>(out.raw());
  for (const QuantizedWeight& p : parts) {
    const Tensor& t = scales ? p.scales : p.values;
    std::memcpy(o, t.raw(), t.bytes());
    o += t.bytes();
  }
  return out;
}

// The weight the parts stand for, widened to f32 [sum out, in] (an i8 weight of more levels than
// this CPU's int8 takes: quantized again from these values).
Tensor dequantize_int8(std::span<const QuantizedWeight> parts, std::int64_t in) {
  const Tensor values = concat_quantized_rows(parts, false);
  const Tensor scales = concat_quantized_rows(parts, true);
  Tensor w({values.dim(0), in});
  const auto* q = static_cast<const std::int8_t*>(values.raw());
  for (std::int64_t n = 0; n < values.dim(0); ++n)
    for (std::int64_t k = 0; k < in; ++k)
      w.f32()[n * in + k] = static_cast<float>(q[n * in + k]) * scales.f32()[n];
  return w;
}

}  // namespace

Linear Linear::quantized(std::span<const QuantizedWeight> parts, const Tensor& bias,
                         Activation activation, const std::string& what) {
  if (parts.empty()) throw RuntimeError(what + ": no quantized weights");
  const QuantizedWeight& first = parts.front();
  const std::int64_t in =
      first.type == DType::i4 ? first.values.dim(1) * 2 : first.values.dim(first.values.rank() - 1);
  std::int64_t out = 0;
  for (const QuantizedWeight& p : parts) {
    if (p.type != first.type || p.group_size != first.group_size || p.levels != first.levels)
      throw RuntimeError(what + ": quantized weights of different types, groups or levels");
    const std::int64_t rows = p.values.rank() == 2 ? p.values.dim(0) : 0;
    check_quantized(p, in, rows, what);
    out += rows;
  }
  if (first.type == DType::i8 && first.levels > int8_weight_levels())
    return Linear(dequantize_int8(parts, in), bias,
                  {.activation = activation, .compute = DType::i8}, Int8Policy::always);
  auto impl = std::make_shared<Impl>();
  impl->in = in;
  impl->out = out;
  impl->activation = activation;
  impl->requested = first.type;
  const Tensor values = concat_quantized_rows(parts, false);
  const Tensor scales = concat_quantized_rows(parts, true);
  Linear linear;
  if (first.type == DType::i4) {
    // From the stored tensors straight into the kernels' layout.
    impl->make_int4(bias, [&](const float* b) {
      auto product =
          std::make_unique<numerics::Int4Product>(in, out, first.group_size, b, activation);
      const auto* nibbles = static_cast<const std::uint8_t*>(values.raw());
      const auto* stored_scales = static_cast<const std::uint16_t*>(scales.raw());
      for (std::int64_t n = 0; n < out; ++n)
        product->set_feature(n, nibbles + n * (in / 2),
                             stored_scales + n * (in / first.group_size));
      return product;
    });
  } else {
    impl->compute = dt::s8;
    impl->set_bias(bias);
    impl->weight_scales.assign(scales.f32(), scales.f32() + out);
    // [out][in] bytes as the [K, N] = [in, out] memory quantize_weights() makes for out_in.
    dnnl::memory s8(dnnl::memory::desc({in, out}, dt::s8, dnnl::memory::dims{1, in}), cpu_engine(),
                    const_cast<void*>(values.raw()));
    impl->pack(Tensor(), WeightLayout::out_in, s8);
  }
  linear.impl_ = std::move(impl);
  return linear;
}

Linear Linear::concat(std::span<const Tensor> weights, std::span<const Tensor> biases,
                      LinearOptions options) {
  return concat(weights, biases, options, Int8Policy::always);
}

Linear Linear::concat(std::span<const Tensor> weights, std::span<const Tensor> biases,
                      LinearOptions options, Int8Policy policy) {
  if (weights.empty()) throw RuntimeError("Linear::concat: no weights");
  if (!biases.empty() && biases.size() != weights.size())
    throw RuntimeError("Linear::concat: " + std::to_string(biases.size()) + " biases for " +
                       std::to_string(weights.size()) + " weights");
  Tensor w;
  if (options.layout == WeightLayout::out_in) {
    w = concat_rows(weights);
  } else {
    // [in, out_i] pieces: concatenate each row.
    std::int64_t in = weights.front().dim(0), out = 0;
    for (const auto& p : weights) {
      if (p.rank() != 2 || p.dim(0) != in)
        throw RuntimeError("Linear::concat: expected [" + std::to_string(in) +
                           ", out] weights, got " + to_string(p.shape()));
      out += p.dim(1);
    }
    DType type = weights.front().dtype();
    for (const auto& p : weights)
      if (p.dtype() != type) type = DType::f32;
    w = Tensor({in, out}, type);
    const std::size_t size = dtype_size(type);
    auto* o = static_cast<std::uint8_t*>(w.raw());
    std::int64_t col = 0;
    for (const auto& p : weights) {
      const Tensor f = p.dtype() == type ? p : p.to_f32();
      const auto* from = static_cast<const std::uint8_t*>(f.raw());
      for (std::int64_t r = 0; r < in; ++r)
        std::memcpy(o + (r * out + col) * size, from + r * f.dim(1) * size, f.dim(1) * size);
      col += f.dim(1);
    }
  }
  Tensor b;
  if (!biases.empty()) {
    std::int64_t total = 0;
    for (const auto& bias : biases) total += bias.numel();
    b = Tensor({total});
    float* o = b.f32();
    for (const auto& bias : biases) {
      const Tensor f = bias.dtype() == DType::f32 ? bias : bias.to_f32();
      std::memcpy(o, f.f32(), f.bytes());
      o += f.numel();
    }
  }
  return Linear(w, b, options, policy);
}

std::int64_t Linear::in_features() const {
  return impl_ ? impl_->in : 0;
}
std::int64_t Linear::out_features() const {
  return impl_ ? impl_->out : 0;
}
Activation Linear::activation() const {
  return impl_ ? impl_->activation : Activation::none;
}
std::size_t Linear::weight_bytes() const {
  if (!impl_) return 0;
  std::size_t bytes = impl_->bias_md.is_zero() ? 0 : impl_->bias_md.get_size();
  bytes += impl_->weight_scales.size() * sizeof(float);
  if (impl_->int4) return bytes + impl_->int4->bytes();
  for (const Impl::Part& p : impl_->parts) bytes += p.weights_md.get_size();
  return bytes;
}

bool Linear::streams_one_row() const {
  return impl_ && (impl_->one_row() || impl_->one_row_s8());
}
DType Linear::compute() const {
  if (!impl_ || impl_->compute == dt::f32) return DType::f32;
  if (impl_->int4) return DType::i4;
  return impl_->compute == dt::bf16 ? DType::bf16 : DType::i8;
}
DType Linear::requested() const {
  return impl_ ? impl_->requested : DType::f32;
}

namespace {

// Memory objects of one primitive, bound in one thread: a call only swaps their data handles
// (creating memory objects and an argument map per call cost as much as a small matmul).
struct Bound {
  std::weak_ptr<const void> owner;
  dnnl::memory src, dst, scratchpad, row_scales;
};

Bound& bound_memories(const std::shared_ptr<const void>& exe, const dnnl::memory::desc& src_md,
                      const dnnl::memory::desc& dst_md, std::size_t scratchpad_bytes,
                      const dnnl::memory::desc& row_scales_md) {
  thread_local std::unordered_map<const void*, Bound> bound;
  Bound& b = bound[exe.get()];
  if (b.owner.lock() != exe) {  // new, or a dead primitive's address reused
    if (bound.size() > 4096)
      std::erase_if(bound, [](const auto& kv) { return kv.second.owner.expired(); });
    Bound& fresh = bound[exe.get()];
    const auto& engine = cpu_engine();
    fresh.owner = exe;
    fresh.src = dnnl::memory(src_md, engine, DNNL_MEMORY_NONE);
    fresh.dst = dnnl::memory(dst_md, engine, DNNL_MEMORY_NONE);
    if (scratchpad_bytes > 0)
      fresh.scratchpad =
          dnnl::memory({{static_cast<dnnl::memory::dim>(scratchpad_bytes)}, dt::u8, tag::a}, engine,
                       DNNL_MEMORY_NONE);
    if (!row_scales_md.is_zero())
      fresh.row_scales = dnnl::memory(row_scales_md, engine, DNNL_MEMORY_NONE);
    return fresh;
  }
  return b;
}

}  // namespace

const std::uint16_t* Linear::Impl::to_bf16(const float* x, std::int64_t rows) const {
  thread_local std::vector<std::uint16_t> buffer;  // kept between calls
  if (buffer.size() < static_cast<std::size_t>(rows * in)) buffer.resize(rows * in);
  if (parts.size() == 1) {
    round_to_bf16(x, rows * in, buffer.data());
    return buffer.data();
  }
  for (const Part& p : parts)
    for (std::int64_t r = 0; r < rows; ++r)
      round_to_bf16(x + r * in + p.begin, p.depth, buffer.data() + rows * p.begin + r * p.depth);
  return buffer.data();
}

std::pair<const std::int8_t*, const float*> Linear::Impl::to_s8(const float* x,
                                                                std::int64_t rows) const {
  thread_local std::vector<std::int8_t> buffer;  // kept between calls
  thread_local std::vector<float> scales;
  if (buffer.size() < static_cast<std::size_t>(rows * in)) buffer.resize(rows * in);
  if (scales.size() < static_cast<std::size_t>(rows)) scales.resize(rows);
  // The calling thread's buffers, filled by the intra-op threads a range of rows each.
  std::int8_t* q = buffer.data();
  float* s = scales.data();
  numerics::parallel_range(rows, 4.0 * rows * in, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      s[r] = int8_scale(x + r * in, in, kRowLevels);
      quantize_s8(x + r * in, in, s[r], kRowLevels, q + r * in);
    }
  });
  return {q, s};
}

void Linear::forward(const float* x, std::int64_t rows, float* y) const {
  if (!impl_) throw RuntimeError("Linear used before construction");
  if (rows <= 0) return;
  if (impl_->int4) {
    const auto [q, scales] = impl_->to_s8(x, rows);
    return impl_->int4->run(q, scales, rows, y);
  }
  if (rows > kSplitRows && rows % kRowQuantum != 0) {
    const std::int64_t head = rows / kRowQuantum * kRowQuantum;
    forward(x, head, y);
    forward(x + head * impl_->in, rows - head, y + head * impl_->out);
    return;
  }
  // Small products are over before a second thread wakes up, and memory-bound ones (few rows)
  // only gain from it when they stream much memory: those run on this thread (and get
  // primitives created for one thread).
  // threads_for() is tuned on f32; an int8 product runs at int8_rate() times its rate.
  const double flops =
      2.0 * rows * impl_->in * impl_->out / (impl_->compute == dt::s8 ? int8_rate() : 1.0);
  const double weight_bytes =
      static_cast<double>(dnnl::memory::data_type_size(impl_->compute)) * impl_->in * impl_->out;
  std::optional<ThreadScope> one;
  // oneDNN's 1x1 convolution does not get faster with a second thread for one row (measured:
  // 33 vs 29 GFLOP/s on 768x768, 13 vs 12 on GPT-2's head).
  const bool one_row_convolution = impl_->convolution && rows == 1;
  if (one_row_convolution || (rows < kParallelMinRows ? weight_bytes < kParallelMinWeightBytes
                                                      : numerics::threads_for(flops) == 1))
    one.emplace(1);
  if (rows == 1 && impl_->compute == dt::f32)
    if (const numerics::RowProduct* kernel = impl_->one_row()) return kernel->run(x, y);
  if (impl_->compute == dt::f32) return impl_->run(rows, 0, x, y);  // one part
  if (impl_->compute == dt::s8) {
    const auto [q, scales] = impl_->to_s8(x, rows);
    // A few rows (decoding a batch or beams) too: oneDNN's gemm driver repacks the weights for
    // each call, which costs more than reading them once per row.
    if (rows < kParallelMinRows)
      if (const numerics::Int8RowProduct* kernel = impl_->one_row_s8()) {
        for (std::int64_t r = 0; r < rows; ++r) kernel->run(q + r * impl_->in, y + r * impl_->out);
        return impl_->epilogue(rows, y, scales);
      }
    return impl_->run(rows, 0, q, y, scales);
  }
  const std::uint16_t* src = impl_->to_bf16(x, rows);
  if (rows == 1)
    if (const numerics::RowProduct* kernel = impl_->one_row()) return kernel->run(src, y);
  for (std::size_t part = 0; part < impl_->parts.size(); ++part)
    impl_->run(rows, part, src + rows * impl_->parts[part].begin, y);
}

void Linear::Impl::run(std::int64_t rows, std::size_t part, const void* x, float* y,
                       const float* row_scales) const {
  auto exe = get(rows, part);
  Bound& b =
      bound_memories(exe, exe->src_md, exe->dst_md, exe->scratchpad_bytes, exe->row_scales_md);
  b.src.set_data_handle(const_cast<void*>(x));
  b.dst.set_data_handle(y);
  dnnl_exec_arg_t args[5];
  int n = 0;
  args[n++] = {DNNL_ARG_SRC, b.src.get()};
  args[n++] = {DNNL_ARG_WEIGHTS, exe->weights.get()};
  args[n++] = {DNNL_ARG_DST, b.dst.get()};
  if (!bias_md.is_zero() && part == 0 && compute != dt::s8) args[n++] = {DNNL_ARG_BIAS, bias.get()};
  if (exe->scratchpad_bytes > 0) {
    b.scratchpad.set_data_handle(numerics::thread_scratchpad(exe->scratchpad_bytes));
    args[n++] = {DNNL_ARG_SCRATCHPAD, b.scratchpad.get()};
  }
  auto& stream = thread_stream();
  if (const dnnl_status_t status =
          dnnl_primitive_execute(exe->product.get(), stream.get(), n, args);
      status != dnnl_success)
    throw RuntimeError("Linear: oneDNN product failed (status " + std::to_string(status) + ")");
  stream.wait();
  if (compute == dt::s8) epilogue(rows, y, row_scales);
}

void Linear::Impl::epilogue(std::int64_t rows, float* y, const float* row_scales) const {
  auto exe = get(rows, 0);
  Bound& b =
      bound_memories(exe, exe->src_md, exe->dst_md, exe->scratchpad_bytes, exe->row_scales_md);
  b.dst.set_data_handle(y);
  b.row_scales.set_data_handle(const_cast<float*>(row_scales));
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC_0, b.dst.get()},
                             {DNNL_ARG_SRC_1, b.row_scales.get()},
                             {DNNL_ARG_DST, b.dst.get()},
                             {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                              bias_md.is_zero() ? nullptr : bias.get()}};
  auto& stream = thread_stream();
  if (dnnl_primitive_execute(exe->epilogue.get(), stream.get(), bias_md.is_zero() ? 3 : 4, args) !=
      dnnl_success)
    throw RuntimeError("Linear: oneDNN binary (int8 row scales) failed");
  stream.wait();
}

void Linear::forward(const Tensor& x, Tensor& y) const {
  if (!impl_) throw RuntimeError("Linear used before construction");
  const std::int64_t in = numerics::features(x, "Linear");
  if (in != impl_->in)
    throw RuntimeError("Linear: input has " + std::to_string(in) + " features, the layer takes " +
                       std::to_string(impl_->in));
  if (&x == &y || (x.raw() == y.raw() && x.raw() != nullptr))
    throw RuntimeError("Linear: output must not alias the input");
  Shape shape = x.shape();
  shape.back() = impl_->out;
  numerics::resize_f32(y, std::move(shape));
  forward(x.f32(), numerics::rows(x, in), y.f32());
}

}  // namespace masque

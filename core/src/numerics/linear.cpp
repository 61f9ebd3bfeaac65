// Linear layer on oneDNN matmul with weights pre-packed at load time.
//
// Packing: the weight is reordered once into the layout oneDNN's matmul prefers (format_tag
// any), which is 10-20% faster than plain row-major weights on large shapes. Primitives: one per
// (rows, thread count), created on first use and kept; executing never creates anything except
// two memory handles.
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "masque/error.hpp"
#include "masque/layers.hpp"
#include "masque/threading.hpp"
#include "numerics/dnnl_context.hpp"
#include "numerics/parallel.hpp"
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
// Fewer rows than this: a memory-bound product that one thread serves best.
constexpr std::int64_t kParallelMinRows = 16;
// Primitives kept per layer; beyond this the cache starts afresh (row counts are usually few).
constexpr std::size_t kMaxCachedPrimitives = 256;

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
    case Activation::none:
      break;
  }
  return dnnl::algorithm::undef;
}

dnnl::primitive_attr make_attr(Activation activation) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (activation != Activation::none) {
    dnnl::post_ops ops;
    // swish(x) = x * sigmoid(alpha x): alpha 1 is SiLU; alpha is ignored by the others.
    ops.append_eltwise(1.0f, eltwise_of(activation), activation == Activation::silu ? 1.0f : 0.0f,
                       0.0f);
    attr.set_post_ops(ops);
  }
  return attr;
}

}  // namespace

struct Linear::Impl {
  std::int64_t in = 0, out = 0;
  Activation activation = Activation::none;
  dnnl::memory::desc weights_md;  // packed
  dnnl::memory weights;
  dnnl::memory::desc bias_md;  // zero desc when there is no bias
  dnnl::memory bias;

  struct Executable {
    dnnl::matmul matmul;
    dnnl::memory::desc src_md, dst_md;
    std::size_t scratchpad_bytes = 0;
    dnnl::memory weights;  // the packed weights, or a copy in the layout this primitive wants
  };
  mutable std::mutex mutex;
  mutable std::map<std::pair<std::int64_t, int>, std::shared_ptr<const Executable>> cache;

  dnnl::matmul::primitive_desc describe(std::int64_t rows, const dnnl::memory::desc& wmd) const;
  std::shared_ptr<const Executable> create(std::int64_t rows) const;
  std::shared_ptr<const Executable> get(std::int64_t rows) const;
};

dnnl::matmul::primitive_desc Linear::Impl::describe(std::int64_t rows,
                                                    const dnnl::memory::desc& wmd) const {
  dnnl::memory::desc src({rows, in}, dt::f32, tag::ab);
  dnnl::memory::desc dst({rows, out}, dt::f32, tag::ab);
  dnnl::matmul::desc desc = bias_md.is_zero() ? dnnl::matmul::desc(src, wmd, dst)
                                              : dnnl::matmul::desc(src, wmd, bias_md, dst);
  return dnnl::matmul::primitive_desc(desc, make_attr(activation), cpu_engine());
}

std::shared_ptr<const Linear::Impl::Executable> Linear::Impl::create(std::int64_t rows) const {
  auto exe = std::make_shared<Executable>();
  dnnl::matmul::primitive_desc pd;
  bool packed_ok = true;
  try {
    pd = describe(rows, weights_md);
    packed_ok = std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
  } catch (const dnnl::error&) {
    packed_ok = false;
  }
  if (packed_ok) {
    exe->weights = weights;
  } else {
    // This row count wants another layout: give it its own copy (rare; memory over speed).
    pd = describe(rows, dnnl::memory::desc({in, out}, dt::f32, tag::any));
    exe->weights = dnnl::memory(pd.weights_desc(), cpu_engine());
    dnnl::memory src = weights;
    dnnl::reorder(src, exe->weights).execute(thread_stream(), src, exe->weights);
    thread_stream().wait();
  }
  exe->matmul = dnnl::matmul(pd);
  exe->src_md = pd.src_desc();
  exe->dst_md = pd.dst_desc();
  exe->scratchpad_bytes = pd.scratchpad_desc().get_size();
  return exe;
}

std::shared_ptr<const Linear::Impl::Executable> Linear::Impl::get(std::int64_t rows) const {
  const auto key = std::make_pair(rows, thread_count());
  {
    std::lock_guard lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  // Created outside the lock: another thread may race to the same key; both are valid.
  auto exe = create(rows);
  std::lock_guard lock(mutex);
  if (cache.size() >= kMaxCachedPrimitives) cache.clear();
  return cache.emplace(key, std::move(exe)).first->second;
}

namespace {

// The weight as a [K, N] f32 memory in its stored layout (a view of the tensor's data).
dnnl::memory source_weights(const Tensor& w32, WeightLayout layout, std::int64_t in,
                            std::int64_t out) {
  dnnl::memory::desc md({in, out}, dt::f32, layout == WeightLayout::out_in ? tag::ba : tag::ab);
  return dnnl::memory(md, cpu_engine(), const_cast<float*>(w32.f32()));
}

}  // namespace

Linear::Linear(const Tensor& weight, const Tensor& bias, LinearOptions options) {
  if (weight.rank() != 2 || weight.dtype() == DType::i32)
    throw RuntimeError("Linear: the weight must be a 2-D floating-point tensor, got " +
                       std::string(to_string(weight.dtype())) + " " + to_string(weight.shape()));
  auto impl = std::make_shared<Impl>();
  const bool out_in = options.layout == WeightLayout::out_in;
  impl->in = weight.dim(out_in ? 1 : 0);
  impl->out = weight.dim(out_in ? 0 : 1);
  impl->activation = options.activation;
  if (impl->in == 0 || impl->out == 0)
    throw RuntimeError("Linear: empty weight " + to_string(weight.shape()));

  const Tensor w32 = weight.dtype() == DType::f32 ? weight : weight.to_f32();
  dnnl::memory src = source_weights(w32, options.layout, impl->in, impl->out);
  if (!bias.empty()) {
    numerics::require_vector(bias.dtype() == DType::f32 ? bias : bias.to_f32(), impl->out, "Linear",
                             "bias");
    impl->bias_md = dnnl::memory::desc({1, impl->out}, dt::f32, tag::ab);
    impl->bias = dnnl::memory(impl->bias_md, cpu_engine());
    const Tensor b32 = bias.dtype() == DType::f32 ? bias : bias.to_f32();
    std::memcpy(impl->bias.get_data_handle(), b32.f32(), b32.bytes());
  }
  auto pd = impl->describe(kPackRows, dnnl::memory::desc({impl->in, impl->out}, dt::f32, tag::any));
  impl->weights_md = pd.weights_desc();
  impl->weights = dnnl::memory(impl->weights_md, cpu_engine());
  dnnl::reorder(src, impl->weights).execute(thread_stream(), src, impl->weights);
  thread_stream().wait();
  impl_ = std::move(impl);
}

Linear Linear::concat(std::span<const Tensor> weights, std::span<const Tensor> biases,
                      LinearOptions options) {
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
    w = Tensor({in, out});
    std::int64_t col = 0;
    for (const auto& p : weights) {
      const Tensor f = p.dtype() == DType::f32 ? p : p.to_f32();
      for (std::int64_t r = 0; r < in; ++r)
        std::memcpy(w.f32() + r * out + col, f.f32() + r * f.dim(1), f.dim(1) * sizeof(float));
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
  return Linear(w, b, options);
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

namespace {

// Memory objects of one primitive, bound in one thread: a call only swaps their data handles
// (creating memory objects and an argument map per call cost as much as a small matmul).
struct Bound {
  std::weak_ptr<const void> owner;
  dnnl::memory src, dst, scratchpad;
};

Bound& bound_memories(const std::shared_ptr<const void>& exe, const dnnl::memory::desc& src_md,
                      const dnnl::memory::desc& dst_md, std::size_t scratchpad_bytes) {
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
    return fresh;
  }
  return b;
}

}  // namespace

void Linear::forward(const float* x, std::int64_t rows, float* y) const {
  if (!impl_) throw RuntimeError("Linear used before construction");
  if (rows <= 0) return;
  // Products with few rows are memory bound and small ones are over before a second thread
  // wakes up: both run on this thread (and get primitives created for one thread).
  const double flops = 2.0 * rows * impl_->in * impl_->out;
  std::optional<ThreadScope> one;
  if (rows < kParallelMinRows || numerics::threads_for(flops) == 1) one.emplace(1);
  auto exe = impl_->get(rows);
  Bound& b = bound_memories(exe, exe->src_md, exe->dst_md, exe->scratchpad_bytes);
  b.src.set_data_handle(const_cast<float*>(x));
  b.dst.set_data_handle(y);
  dnnl_exec_arg_t args[5];
  int n = 0;
  args[n++] = {DNNL_ARG_SRC, b.src.get()};
  args[n++] = {DNNL_ARG_WEIGHTS, exe->weights.get()};
  args[n++] = {DNNL_ARG_DST, b.dst.get()};
  if (!impl_->bias_md.is_zero()) args[n++] = {DNNL_ARG_BIAS, impl_->bias.get()};
  if (exe->scratchpad_bytes > 0) {
    b.scratchpad.set_data_handle(numerics::thread_scratchpad(exe->scratchpad_bytes));
    args[n++] = {DNNL_ARG_SCRATCHPAD, b.scratchpad.get()};
  }
  auto& stream = thread_stream();
  if (dnnl_primitive_execute(exe->matmul.get(), stream.get(), n, args) != dnnl_success)
    throw RuntimeError("Linear: oneDNN matmul failed");
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

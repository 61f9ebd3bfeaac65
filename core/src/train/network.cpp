#include "masque/train/network.hpp"

#include <cmath>
#include <cstring>

#include "masque/attention.hpp"
#include "masque/error.hpp"
#include "masque/layers.hpp"
#include "masque/ops.hpp"
#include "masque/random.hpp"
#include "masque/safetensors_writer.hpp"
#include "masque/train/attention.hpp"
#include "masque/train/dropout.hpp"
#include "masque/train/grad_ops.hpp"
#include "masque/train/linear.hpp"
#include "masque/train/objective.hpp"
#include "masque/transformer/model.hpp"
#include "masque/transformer/network.hpp"
#include "numerics/parallel.hpp"
#include "numerics/simd.hpp"

namespace masque::train {

using namespace transformer;

// ---- ParameterSet -------------------------------------------------------------------------------

bool ParameterSet::Entry::decays() const {
  return role == ParameterRole::matrix || role == ParameterRole::embedding ||
         role == ParameterRole::table;
}

ParameterSet::ParameterSet(std::vector<Entry> entries) : entries_(std::move(entries)) {
  index();
  if (index_.size() != entries_.size()) throw RuntimeError("a parameter set names a tensor twice");
}

void ParameterSet::index() {
  index_.clear();
  for (std::size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

ParameterSet ParameterSet::from_checkpoint(const TransformerSpec& spec,
                                           const SafeTensors& checkpoint) {
  ParameterSet set;
  for (const Parameter& p : parameters(spec)) {
    const Tensor stored = checkpoint.get_f32(p.name, p.shape);
    Tensor value(p.shape);
    std::memcpy(value.raw(), stored.raw(), value.bytes());  // owned: training writes into it
    set.entries_.push_back({p.name, p.role, std::move(value), Tensor::zeros(p.shape)});
  }
  transformer::check_no_extra_layers(checkpoint, spec);
  set.index();
  return set;
}

ParameterSet ParameterSet::initialised(const TransformerSpec& spec, double range,
                                       std::uint64_t seed) {
  ParameterSet set;
  std::uint64_t tensor = 0;
  for (const Parameter& p : parameters(spec)) {
    Tensor value = Tensor::zeros(p.shape);
    float* v = value.f32();
    const bool normal = p.role == ParameterRole::matrix || p.role == ParameterRole::embedding ||
                        p.role == ParameterRole::table;
    if (normal) {
      // One stream per tensor, so adding a tensor does not change the others' values.
      SplitMix64 rng(mix_seed(seed, tensor));
      for (std::int64_t i = 0; i < value.numel(); i += 2) {
        // Box-Muller: two normals from two uniforms (u1 in (0, 1] so the log is finite).
        const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
        const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
        v[i] = static_cast<float>(range * r * std::cos(a));
        if (i + 1 < value.numel()) v[i + 1] = static_cast<float>(range * r * std::sin(a));
      }
    } else if (p.role == ParameterRole::norm_weight) {
      for (std::int64_t i = 0; i < value.numel(); ++i) v[i] = 1.0f;
    }
    ++tensor;
    set.entries_.push_back({p.name, p.role, std::move(value), Tensor::zeros(p.shape)});
  }
  set.index();
  return set;
}

ParameterSet::Entry& ParameterSet::at(const std::string& name) {
  const auto it = index_.find(name);
  if (it == index_.end()) throw RuntimeError("trainable network: no parameter '" + name + "'");
  return entries_[it->second];
}

const ParameterSet::Entry& ParameterSet::at(const std::string& name) const {
  return const_cast<ParameterSet*>(this)->at(name);
}

void ParameterSet::zero_grads() {
  for (Entry& e : entries_) std::memset(e.grad.raw(), 0, e.grad.bytes());
}

std::int64_t ParameterSet::count() const {
  std::int64_t n = 0;
  for (const Entry& e : entries_) n += e.value.numel();
  return n;
}

void ParameterSet::save(const std::filesystem::path& file) const {
  std::vector<NamedTensor> tensors;
  for (const Entry& e : entries_) tensors.push_back({e.name, e.value});
  write_safetensors(file, tensors, {{"format", "pt"}});
}

// ---- layers -------------------------------------------------------------------------------------

namespace {

using Entry = ParameterSet::Entry;

Entry* find(ParameterSet& params, const TensorSpec& t) {
  return t.present() ? &params.at(t.name) : nullptr;
}

// out = a + b, element by element (a residual branch meets its input; out may be a or b).
MASQUE_VECTORIZE void add_range(const float* a, const float* b, std::int64_t n, float* out) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_into(const float* a, const float* b, std::int64_t n, float* out) {
  numerics::parallel_range(n, 2.0 * n, [&](std::int64_t begin, std::int64_t end) {
    add_range(a + begin, b + begin, end - begin, out + begin);
  });
}

void sum_of(const Tensor& a, const Tensor& b, Tensor& out) {
  if (&out != &a && &out != &b) out.resize(a.shape());
  add_into(a.f32(), b.f32(), a.numel(), out.f32());
}

// dst += src.
void accumulate(Tensor& dst, const Tensor& src) {
  add_into(dst.f32(), src.f32(), dst.numel(), dst.f32());
}

void copy(const Tensor& src, Tensor& dst) {
  dst.resize(src.shape());
  std::memcpy(dst.raw(), src.raw(), src.bytes());
}

// The tokens of a padded batch, packed: every layer but attention runs on the real tokens only
// (a batch of short records padded to its longest wastes a quarter or more of the work on pads);
// attention reads and writes the padded layout the mask describes, through scatter and gather.
struct Packing {
  std::vector<std::int32_t> rows;   // the flat padded index of each real token, in order
  std::vector<std::int32_t> index;  // flat padded index -> packed row; -1 for pads
  std::int64_t padded = 0;          // batch * length
  std::int32_t length = 0;          // tokens per batch row

  void build(const AttentionLayout& layout) {
    padded = std::int64_t{layout.batch} * layout.length;
    length = layout.length;
    rows.clear();
    index.assign(static_cast<std::size_t>(padded), -1);
    for (std::int64_t r = 0; r < padded; ++r)
      if (layout.role[r] != TokenRole::pad) {
        index[r] = static_cast<std::int32_t>(rows.size());
        rows.push_back(static_cast<std::int32_t>(r));
      }
  }
  bool identity() const { return static_cast<std::int64_t>(rows.size()) == padded; }
  std::int64_t size() const { return static_cast<std::int64_t>(rows.size()); }
};

// The padded form of packed rows: `packed` itself when nothing is padded, else `buffer` with
// the rows in place and zeros for pads (the kernel multiplies pads' values by 0, so they must
// be finite).
const Tensor& padded_view(const Tensor& packed, const Packing& p, Tensor& buffer) {
  if (p.identity()) return packed;
  const std::int64_t width = packed.dim(-1);
  buffer.resize({p.padded, width});
  const std::size_t row_bytes = sizeof(float) * width;
  for (std::int64_t r = 0; r < p.padded; ++r) {
    float* to = buffer.f32() + r * width;
    if (p.index[r] < 0)
      std::memset(to, 0, row_bytes);
    else
      std::memcpy(to, packed.f32() + std::int64_t{p.index[r]} * width, row_bytes);
  }
  return buffer;
}

// Where a kernel writes padded rows whose packed form is `packed`: `packed` itself when nothing
// is padded, else `buffer`; gather_packed() then moves the real rows into `packed`.
Tensor& padded_target(Tensor& packed, const Packing& p, Tensor& buffer, std::int64_t width) {
  Tensor& target = p.identity() ? packed : buffer;
  target.resize({p.padded, width});
  return target;
}

void gather_packed(const Tensor& padded, const Packing& p, Tensor& packed) {
  if (p.identity()) return;
  const std::int64_t width = padded.dim(-1);
  packed.resize({p.size(), width});
  for (std::int64_t i = 0; i < p.size(); ++i)
    std::memcpy(packed.f32() + i * width, padded.f32() + std::int64_t{p.rows[i]} * width,
                sizeof(float) * width);
}

// The dropout of one training forward: the rates and the context (null: evaluation, none).
struct Drop {
  const DropoutRates* rates = nullptr;
  const DropoutContext* context = nullptr;
};

// One site's dropout over packed rows: row i is token rows[i] % length of batch row
// rows[i] / length, so its mask is that record's (dropout.hpp). In place; the same call on the
// gradient is the backward.
struct RowDropout {
  const DropoutContext* context = nullptr;
  float p = 0;
  std::uint32_t site = 0;
  const Packing* pack = nullptr;

  bool active() const { return context != nullptr && p > 0; }
  void apply(Tensor& x) const {
    if (!active()) return;
    const std::int64_t width = x.dim(-1), rows = x.numel() / width;
    numerics::parallel_range(rows, 8.0 * rows * width, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const std::int32_t flat = pack->rows[static_cast<std::size_t>(i)];
        const DropoutKey key =
            dropout_key(*context, static_cast<std::size_t>(flat / pack->length), site);
        float* row = x.f32() + i * width;
        dropout_span(key, p, hidden_element(flat % pack->length, width, 0), row, width, row);
      }
    });
  }
};

struct TLinear {
  LinearShape shape;
  Entry* w = nullptr;
  Entry* b = nullptr;

  TLinear() = default;
  TLinear(const LinearSpec& spec, ParameterSet& params, DType compute)
      : shape{spec.in_features(), spec.out_features(), spec.layout, compute},
        w(&params.at(spec.weight.name)),
        b(find(params, spec.bias)) {}

  void forward(const Tensor& x, Tensor& y) const {
    linear_forward(shape, x, w->value, b ? b->value : Tensor(), y);
  }
  // dx written (when given); the weight's and bias' gradients accumulated.
  void backward(const Tensor& x, const Tensor& dy, Tensor* dx) const {
    linear_backward(shape, x, dy, w->value, dx, &w->grad, b ? &b->grad : nullptr);
  }
};

struct TNorm {
  NormKind kind = NormKind::layer_norm;
  float eps = 1e-5f;
  Entry* w = nullptr;
  Entry* b = nullptr;

  TNorm() = default;
  TNorm(const NormSpec& spec, ParameterSet& params)
      : kind(spec.kind), eps(spec.eps), w(find(params, spec.weight)), b(find(params, spec.bias)) {
    if (spec.unit_offset)
      throw ConfigError("training: (1 + w) norms (Gemma) are not trainable yet");
  }
  bool present() const { return w != nullptr; }

  void forward(const Tensor& x, Tensor& y) const {
    if (kind == NormKind::layer_norm)
      layer_norm(x, w->value, b ? b->value : Tensor(), eps, y);
    else
      rms_norm(x, w->value, eps, y);
  }
  void backward(const Tensor& x, const Tensor& dy, Tensor& dx) const {
    if (kind == NormKind::layer_norm)
      layer_norm_backward(x, w->value, eps, dy, dx, w->grad, b ? &b->grad : nullptr);
    else
      rms_norm_backward(x, w->value, eps, dy, dx, w->grad);
  }
};

// ---- attention ------------------------------------------------------------------------------

struct AttentionTape {
  Tensor q, k, v;  // packed rows, after rotary; one fused projection keeps q|k|v in q
  Tensor q_pad, k_pad, v_pad, ctx_pad;  // padded copies for the kernel (when there are pads)
  Tensor ctx;                           // packed: the output projection's input
  std::vector<float> lse;
};

// Backward scratch of an attention sub-layer. Layers run their backward one after another, so
// one set per stack serves them all: steps reuse its memory, and the peak holds it once, not
// once per layer.
struct AttentionScratch {
  Tensor dctx, dctx_pad, dq, dk, dv, dq_pad, dk_pad, dv_pad, part;
};

class TAttention {
 public:
  TAttention() = default;
  TAttention(const AttentionSpec& spec, ParameterSet& params, const Rotary* rotary, DType compute)
      : spec_(spec), rotary_(spec.rotary ? rotary : nullptr), out_(spec.output, params, compute) {
    if (spec.window > 0)
      throw ConfigError("training: sliding-window attention is not trainable yet");
    if (spec.relative_bias.kind != RelativeBiasKind::none)
      throw ConfigError("training: relative position biases (T5, ALiBi) are not trainable yet");
    if (spec.q_norm.present() || spec.k_norm.present())
      throw ConfigError("training: per-head q/k norms (Qwen3) are not trainable yet");
    if (spec.band > 0)
      throw ConfigError("training: banded local attention (ModernBERT) is not trainable yet");
    if (spec.softcap > 0.0f || spec.local_rotary)
      throw ConfigError(
          "training: attention soft-capping and local RoPE bases (Gemma) are not trainable yet");
    for (const LinearSpec& p : spec.projections) projections_.emplace_back(p, params, compute);
    dims_ = {spec.heads, spec.kv_heads, spec.head_dim, spec.scale};
  }

  bool fused() const { return projections_.size() == 1; }

  // Self-attention of h (packed rows of `pack`) under `layout`; y = output projection.
  void self_forward(const Tensor& h, const AttentionLayout& layout, const Packing& pack,
                    std::span<const std::int32_t> positions, const AttentionDropout& drop,
                    AttentionTape& t, Tensor& y) const {
    project(h, h, t);
    rotate(t, positions, h.dim(0));
    attend(MaskView::self(layout), layout.length, layout.length, pack, pack, drop, t);
    out_.forward(t.ctx, y);
  }
  // dy -> dh (written).
  void self_backward(const Tensor& h, const AttentionLayout& layout, const Packing& pack,
                     std::span<const std::int32_t> positions, const AttentionDropout& drop,
                     const AttentionTape& t, AttentionScratch& s, const Tensor& dy,
                     Tensor& dh) const {
    attend_backward(MaskView::self(layout), layout.length, layout.length, pack, pack, drop, t, s,
                    dy);
    rotate_back(s, positions, h.dim(0));
    project_backward(h, h, s, dh, nullptr);
  }

  // Cross-attention of h (packed rows of `pack`, q_len per row) to `memory` (packed rows of
  // `source_pack`, source.length per row).
  void cross_forward(const Tensor& h, std::int32_t q_len, const Packing& pack, const Tensor& memory,
                     const AttentionLayout& source, const Packing& source_pack,
                     const AttentionDropout& drop, AttentionTape& t, Tensor& y) const {
    project(h, memory, t);
    attend(MaskView::cross(source, q_len), q_len, source.length, pack, source_pack, drop, t);
    out_.forward(t.ctx, y);
  }
  // dy -> dh (written) and dmemory (added to).
  void cross_backward(const Tensor& h, std::int32_t q_len, const Packing& pack,
                      const Tensor& memory, const AttentionLayout& source,
                      const Packing& source_pack, const AttentionDropout& drop,
                      const AttentionTape& t, AttentionScratch& s, const Tensor& dy, Tensor& dh,
                      Tensor& dmemory) const {
    attend_backward(MaskView::cross(source, q_len), q_len, source.length, pack, source_pack, drop,
                    t, s, dy);
    project_backward(h, memory, s, dh, &dmemory);
  }

 private:
  void project(const Tensor& h, const Tensor& kv_input, AttentionTape& t) const {
    projections_[0].forward(h, t.q);
    if (fused()) return;
    projections_[1].forward(kv_input, t.k);
    projections_[2].forward(kv_input, t.v);
  }

  std::int64_t dims_q() const { return std::int64_t{dims_.heads} * dims_.head_dim; }
  std::int64_t dims_kv() const { return std::int64_t{dims_.kv_heads} * dims_.head_dim; }

  void rotate(AttentionTape& t, std::span<const std::int32_t> positions, std::int64_t rows) const {
    if (!rotary_) return;
    if (fused()) {
      const std::int64_t stride = t.q.dim(-1);
      rotary_->apply(t.q.f32(), rows, stride, dims_.heads, positions);
      rotary_->apply(t.q.f32() + dims_q(), rows, stride, dims_.kv_heads, positions);
      return;
    }
    rotary_->apply(t.q.f32(), rows, t.q.dim(-1), dims_.heads, positions);
    rotary_->apply(t.k.f32(), rows, t.k.dim(-1), dims_.kv_heads, positions);
  }

  void rotate_back(AttentionScratch& t, std::span<const std::int32_t> positions,
                   std::int64_t rows) const {
    if (!rotary_) return;
    if (fused()) {
      const std::int64_t stride = t.dq.dim(-1);
      rotary_backward(*rotary_, t.dq.f32(), rows, stride, dims_.heads, positions);
      rotary_backward(*rotary_, t.dq.f32() + dims_q(), rows, stride, dims_.kv_heads, positions);
      return;
    }
    rotary_backward(*rotary_, t.dq.f32(), rows, t.dq.dim(-1), dims_.heads, positions);
    rotary_backward(*rotary_, t.dk.f32(), rows, t.dk.dim(-1), dims_.kv_heads, positions);
  }

  // q (rows of `qp`), k and v (rows of `kp`) -> ctx (packed like q).
  void attend(const MaskView& mask, std::int32_t q_len, std::int32_t k_len, const Packing& qp,
              const Packing& kp, const AttentionDropout& drop, AttentionTape& t) const {
    const Tensor& q = padded_view(t.q, qp, t.q_pad);
    Tensor& ctx = padded_target(t.ctx, qp, t.ctx_pad, dims_q());
    t.lse.resize(static_cast<std::size_t>(mask.batch) * dims_.heads * q_len);
    if (fused()) {
      attention_forward(dims_, mask, seq_view(q, q_len, 0), seq_view(q, q_len, dims_q()),
                        seq_view(q, q_len, dims_q() + dims_kv()), mutable_seq_view(ctx, q_len),
                        t.lse.data(), &drop);
    } else {
      const Tensor& k = padded_view(t.k, kp, t.k_pad);
      const Tensor& v = padded_view(t.v, kp, t.v_pad);
      attention_forward(dims_, mask, seq_view(q, q_len), seq_view(k, k_len), seq_view(v, k_len),
                        mutable_seq_view(ctx, q_len), t.lse.data(), &drop);
    }
    gather_packed(ctx, qp, t.ctx);
  }

  // dy -> d(ctx) -> t.dq, t.dk, t.dv (packed; fused: all three in dq's columns).
  void attend_backward(const MaskView& mask, std::int32_t q_len, std::int32_t k_len,
                       const Packing& qp, const Packing& kp, const AttentionDropout& drop,
                       const AttentionTape& t, AttentionScratch& s, const Tensor& dy) const {
    out_.backward(t.ctx, dy, &s.dctx);
    // The kernel reads the padded forms the forward left (q_pad, ctx_pad) or the packed ones.
    const Tensor& q = qp.identity() ? t.q : t.q_pad;
    const Tensor& ctx = qp.identity() ? t.ctx : t.ctx_pad;
    const Tensor& dctx = padded_view(s.dctx, qp, s.dctx_pad);
    if (fused()) {
      Tensor& dq = padded_target(s.dq, qp, s.dq_pad, t.q.dim(-1));
      attention_backward(dims_, mask, seq_view(q, q_len, 0), seq_view(q, q_len, dims_q()),
                         seq_view(q, q_len, dims_q() + dims_kv()), seq_view(ctx, q_len),
                         seq_view(dctx, q_len), t.lse.data(), mutable_seq_view(dq, q_len, 0),
                         mutable_seq_view(dq, q_len, dims_q()),
                         mutable_seq_view(dq, q_len, dims_q() + dims_kv()), &drop);
      gather_packed(dq, qp, s.dq);
      return;
    }
    const Tensor& k = kp.identity() ? t.k : t.k_pad;
    const Tensor& v = kp.identity() ? t.v : t.v_pad;
    Tensor& dq = padded_target(s.dq, qp, s.dq_pad, dims_q());
    Tensor& dk = padded_target(s.dk, kp, s.dk_pad, dims_kv());
    Tensor& dv = padded_target(s.dv, kp, s.dv_pad, dims_kv());
    attention_backward(dims_, mask, seq_view(q, q_len), seq_view(k, k_len), seq_view(v, k_len),
                       seq_view(ctx, q_len), seq_view(dctx, q_len), t.lse.data(),
                       mutable_seq_view(dq, q_len), mutable_seq_view(dk, k_len),
                       mutable_seq_view(dv, k_len), &drop);
    gather_packed(dq, qp, s.dq);
    gather_packed(dk, kp, s.dk);
    gather_packed(dv, kp, s.dv);
  }

  // s.dq, s.dk, s.dv -> dh (written) and, for cross-attention, d(memory) (added to).
  void project_backward(const Tensor& h, const Tensor& kv_input, AttentionScratch& t, Tensor& dh,
                        Tensor* dmemory) const {
    projections_[0].backward(h, t.dq, &dh);
    if (fused()) return;
    Tensor& kv_grad = dmemory ? *dmemory : dh;
    projections_[1].backward(kv_input, t.dk, &t.part);
    accumulate(kv_grad, t.part);
    projections_[2].backward(kv_input, t.dv, &t.part);
    accumulate(kv_grad, t.part);
  }

  AttentionSpec spec_;
  AttentionDims dims_;
  const Rotary* rotary_ = nullptr;
  std::vector<TLinear> projections_;
  TLinear out_;
};

// ---- MLP ------------------------------------------------------------------------------------

// What an MLP keeps: its input projections. act(pre) (and act * up) is recomputed in the
// backward rather than kept: one activation pass per layer instead of a [tokens, ffn] tensor per
// layer at the peak (BERT-base, 16 x 128 tokens: 25 MB a layer).
struct MlpTape {
  Tensor pre;  // plain: up(x); gated: gate(x)
  Tensor up;   // gated: up(x)
};

struct MlpScratch {  // one set per stack (see AttentionScratch)
  Tensor act;        // act(pre)
  Tensor mixed;      // gated: act * up
  Tensor dmixed, dpre, dact, dup, part;
};

class TMlp {
 public:
  TMlp() = default;
  TMlp(const MlpSpec& spec, ParameterSet& params, DType compute)
      : kind_(spec.kind), activation_(spec.activation), out_(spec.out, params, compute) {
    if (spec.kind == MlpKind::gated && spec.in.size() != 2)
      throw ConfigError("training: a fused gate|up projection (Phi-3) is not trainable yet");
    for (const LinearSpec& l : spec.in) in_.emplace_back(l, params, compute);
  }

  // `drop`: dropout on the down projection's input (activation_dropout).
  void forward(const Tensor& x, const RowDropout& drop, MlpTape& t, MlpScratch& s,
               Tensor& y) const {
    in_[0].forward(x, t.pre);
    if (kind_ == MlpKind::gated) in_[1].forward(x, t.up);
    out_.forward(down_input(t, drop, s), y);
  }

  void backward(const Tensor& x, const RowDropout& drop, const MlpTape& t, MlpScratch& s,
                const Tensor& dy, Tensor& dx) const {
    const Tensor& down = down_input(t, drop, s);
    out_.backward(down, dy, &s.dmixed);
    drop.apply(s.dmixed);  // d(act), or d(act * up), before the dropout
    if (kind_ == MlpKind::plain) {
      activation_backward(activation_, t.pre, s.dmixed, s.dmixed);  // in place
      in_[0].backward(x, s.dmixed, &dx);
      return;
    }
    copy(s.dmixed, s.dact);
    multiply(s.dact, t.up);  // d(act) = d(mixed) * up
    copy(s.dmixed, s.dup);
    multiply(s.dup, s.act);  // d(up) = d(mixed) * act
    activation_backward(activation_, t.pre, s.dact, s.dpre);
    in_[0].backward(x, s.dpre, &dx);
    in_[1].backward(x, s.dup, &s.part);
    accumulate(dx, s.part);
  }

 private:
  // The down projection's input, computed from the tape: act(pre), or act(pre) * up, then
  // dropped. Plain: the dropped act(pre) is kept in s.mixed, s.act stays act(pre).
  const Tensor& down_input(const MlpTape& t, const RowDropout& drop, MlpScratch& s) const {
    copy(t.pre, s.act);
    activate(activation_, s.act);
    if (kind_ == MlpKind::plain && !drop.active()) return s.act;
    copy(s.act, s.mixed);
    if (kind_ == MlpKind::gated) multiply(s.mixed, t.up);
    drop.apply(s.mixed);
    return s.mixed;
  }

  static void multiply(Tensor& y, const Tensor& x) {
    float* a = y.f32();
    const float* b = x.f32();
    for (std::int64_t i = 0, n = y.numel(); i < n; ++i) a[i] *= b[i];
  }

  MlpKind kind_ = MlpKind::plain;
  Activation activation_ = Activation::none;
  std::vector<TLinear> in_;
  TLinear out_;
};

// ---- residual sub-layers --------------------------------------------------------------------

// x_out = x + f(norm(x)) (pre-norm) or norm(x + f(x)) (post-norm).
struct ResidualTape {
  Tensor in;   // x
  Tensor h;    // f's input: norm(x) (pre-norm); post-norm reads `in`
  Tensor sum;  // post-norm: x + f(x)
};

// The scratch of a stack's step, one set for all its layers (see AttentionScratch).
struct Scratch {
  Tensor y;               // a sub-layer's output, before it joins the residual
  Tensor d_input, dnorm;  // backward: d(f's input), d(norm's input)
  Tensor dropped;         // backward: d(f's output) through the residual dropout
  AttentionScratch attention;
  MlpScratch mlp;
};

// x is swapped into the tape (no copy) and rebuilt in the buffer the tape held before.
template <typename F>
void residual_forward(bool pre, const TNorm& norm, Tensor& x, ResidualTape& t, Scratch& s, F&& f) {
  std::swap(x, t.in);
  if (pre) {
    norm.forward(t.in, t.h);
    f(t.h, s.y);
    sum_of(t.in, s.y, x);
    return;
  }
  f(t.in, s.y);
  sum_of(t.in, s.y, t.sum);
  norm.forward(t.sum, x);
}

// dx (in/out): d(x_out) in, d(x) out. `f_back(f_input, dy, d_input)` writes d_input.
template <typename F>
void residual_backward(bool pre, const TNorm& norm, Tensor& dx, const ResidualTape& t, Scratch& s,
                       F&& f_back) {
  if (pre) {
    f_back(t.h, dx, s.d_input);
    norm.backward(t.in, s.d_input, s.dnorm);
    accumulate(dx, s.dnorm);
    return;
  }
  norm.backward(t.sum, dx, s.dnorm);  // d(sum)
  f_back(t.in, s.dnorm, s.d_input);
  sum_of(s.dnorm, s.d_input, dx);
}

// ---- blocks and stacks ------------------------------------------------------------------------

struct BlockTape {
  ResidualTape self_r, cross_r, mlp_r;
  AttentionTape self_a, cross_a;
  MlpTape mlp;
};

class TBlock {
 public:
  TBlock(const BlockSpec& spec, ParameterSet& params, const Rotary* rotary, DType compute,
         int layer)
      : layer_(layer),
        pre_(spec.pre_norm),
        attention_norm_(spec.attention_norm, params),
        cross_norm_(spec.cross_norm, params),
        mlp_norm_(spec.mlp_norm, params),
        self_(spec.attention, params, rotary, compute),
        mlp_(spec.mlp, params, compute) {
    if (spec.attention_out_norm.present() || spec.mlp_out_norm.present())
      throw ConfigError("training: sandwich norms (Gemma) are not trainable yet");
    if (!spec.attention_norm.present() || !spec.mlp_norm.present())
      throw ConfigError(
          "training: a block without its norms (ModernBERT's first) is not trainable yet");
    if (spec.has_cross()) {
      cross_ = TAttention(spec.cross_attention, params, nullptr, compute);
      has_cross_ = true;
    }
  }

  struct Context {
    const AttentionLayout* layout;
    const Packing* pack;
    std::span<const std::int32_t> positions;  // packed
    const Tensor* memory = nullptr;           // encoder output (cross-attention), packed
    const AttentionLayout* source = nullptr;  // its layout
    const Packing* source_pack = nullptr;
    Tensor* dmemory = nullptr;  // backward: d(memory) accumulates here
    Scratch* scratch = nullptr;
    Drop drop{};
    int stack = 0;
  };

  void forward(Tensor& x, const Context& c, BlockTape& t) const {
    Scratch& s = *c.scratch;
    const Sites d = sites(c);
    residual_forward(pre_, attention_norm_, x, t.self_r, s, [&](const Tensor& h, Tensor& y) {
      self_.self_forward(h, *c.layout, *c.pack, c.positions, d.self_probs, t.self_a, y);
      d.self_out.apply(y);
    });
    if (has_cross_)
      residual_forward(pre_, cross_norm_, x, t.cross_r, s, [&](const Tensor& h, Tensor& y) {
        cross_.cross_forward(h, c.layout->length, *c.pack, *c.memory, *c.source, *c.source_pack,
                             d.cross_probs, t.cross_a, y);
        d.cross_out.apply(y);
      });
    residual_forward(pre_, mlp_norm_, x, t.mlp_r, s, [&](const Tensor& h, Tensor& y) {
      mlp_.forward(h, d.activation, t.mlp, s.mlp, y);
      d.mlp_out.apply(y);
    });
  }

  void backward(Tensor& dx, const Context& c, BlockTape& t) const {
    Scratch& s = *c.scratch;
    const Sites d = sites(c);
    // d(f's output) -> d(f's result before its dropout).
    auto undrop = [&](const RowDropout& r, const Tensor& dy) -> const Tensor& {
      if (!r.active()) return dy;
      copy(dy, s.dropped);
      r.apply(s.dropped);
      return s.dropped;
    };
    residual_backward(pre_, mlp_norm_, dx, t.mlp_r, s,
                      [&](const Tensor& h, const Tensor& dy, Tensor& dh) {
                        mlp_.backward(h, d.activation, t.mlp, s.mlp, undrop(d.mlp_out, dy), dh);
                      });
    if (has_cross_)
      residual_backward(
          pre_, cross_norm_, dx, t.cross_r, s, [&](const Tensor& h, const Tensor& dy, Tensor& dh) {
            cross_.cross_backward(h, c.layout->length, *c.pack, *c.memory, *c.source,
                                  *c.source_pack, d.cross_probs, t.cross_a, s.attention,
                                  undrop(d.cross_out, dy), dh, *c.dmemory);
          });
    residual_backward(pre_, attention_norm_, dx, t.self_r, s,
                      [&](const Tensor& h, const Tensor& dy, Tensor& dh) {
                        self_.self_backward(h, *c.layout, *c.pack, c.positions, d.self_probs,
                                            t.self_a, s.attention, undrop(d.self_out, dy), dh);
                      });
  }

 private:
  // This layer's dropout sites (inactive without a context or at rate 0).
  struct Sites {
    RowDropout self_out, cross_out, mlp_out, activation;
    AttentionDropout self_probs, cross_probs;
  };
  Sites sites(const Context& c) const {
    Sites d;
    if (!c.drop.context) return d;
    const DropoutRates& r = *c.drop.rates;
    auto row = [&](float p, DropoutPlace place) {
      return RowDropout{c.drop.context, p, dropout_site(c.stack, layer_, place), c.pack};
    };
    auto probs = [&](DropoutPlace place) {
      return AttentionDropout{r.attention, c.drop.context, dropout_site(c.stack, layer_, place)};
    };
    d.self_out = row(r.residual, DropoutPlace::attention_output);
    d.cross_out = row(r.residual, DropoutPlace::cross_output);
    d.mlp_out = row(r.residual, DropoutPlace::mlp_output);
    d.activation = row(r.activation, DropoutPlace::activation);
    d.self_probs = probs(DropoutPlace::attention_probs);
    d.cross_probs = probs(DropoutPlace::cross_probs);
    return d;
  }

  int layer_ = 0;
  bool pre_ = true, has_cross_ = false;
  TNorm attention_norm_, cross_norm_, mlp_norm_;
  TAttention self_, cross_;
  TMlp mlp_;
};

struct StackTape {
  Packing pack;
  std::vector<std::int32_t> ids, positions, token_types, table_rows;  // packed
  Tensor embedded;                                                    // before the embedding norm
  std::vector<BlockTape> blocks;
  Tensor x;       // the running hidden state
  Tensor last;    // after the last block, before the final norm
  Tensor output;  // the stack's output (after the final norm), packed rows
  Tensor dx, de;  // backward scratch
  Scratch scratch;
};

class TStack {
 public:
  TStack() = default;
  // `stack`: 0 for the decoder (or the only stack), 1 for an encoder (dropout sites).
  TStack(const StackSpec& spec, ParameterSet& params, DType compute, int stack)
      : spec_(spec),
        stack_(stack),
        tokens_(find(params, spec.embeddings.tokens)),
        learned_(spec.embeddings.positions.kind == PositionKind::learned
                     ? find(params, spec.embeddings.positions.table)
                     : nullptr),
        types_(find(params, spec.embeddings.token_types)),
        embedding_norm_(spec.embeddings.norm, params),
        final_norm_(spec.final_norm, params) {
    const PositionSpec& p = spec.embeddings.positions;
    if (p.kind == PositionKind::sinusoidal)
      sinusoids_ = std::make_unique<Sinusoids>(p, spec.hidden);
    const Rotary* rotary = nullptr;
    for (const BlockSpec& b : spec.blocks)
      if (b.attention.rotary && !rotary_) {
        rotary_ = std::make_unique<Rotary>(b.attention.head_dim, p.rope_theta, 0, p.rotary_dim,
                                           p.rope_scaling);
        rotary = rotary_.get();
      }
    for (const BlockSpec& b : spec.blocks)
      blocks_.emplace_back(b, params, rotary, compute, static_cast<int>(blocks_.size()));
  }

  bool empty() const { return tokens_ == nullptr; }

  // `memory` and `source_pack`: the encoder's output and packing (cross-attention), or null.
  void forward(const Batch& batch, const Tensor* memory, const AttentionLayout* source,
               const Packing* source_pack, const Drop& drop, StackTape& t) const {
    prepare(batch, t);
    embed(t);
    embedding_dropout(drop, t).apply(t.output);
    t.blocks.resize(blocks_.size());
    copy(t.output, t.x);
    const TBlock::Context c{&batch.attention, &t.pack, t.positions, memory, source,
                            source_pack,      nullptr, &t.scratch,  drop,   stack_};
    for (std::size_t l = 0; l < blocks_.size(); ++l) blocks_[l].forward(t.x, c, t.blocks[l]);
    if (final_norm_.present()) {
      std::swap(t.x, t.last);
      final_norm_.forward(t.last, t.output);
    } else {
      std::swap(t.x, t.output);
    }
  }

  // d(output) -> parameters' gradients (and d(memory) for a decoder with cross-attention).
  void backward(const Batch& batch, const Tensor* memory, const AttentionLayout* source,
                const Packing* source_pack, const Drop& drop, StackTape& t, const Tensor& doutput,
                Tensor* dmemory) const {
    if (final_norm_.present())
      final_norm_.backward(t.last, doutput, t.dx);
    else
      copy(doutput, t.dx);
    const TBlock::Context c{&batch.attention, &t.pack, t.positions, memory, source,
                            source_pack,      dmemory, &t.scratch,  drop,   stack_};
    for (std::size_t l = blocks_.size(); l-- > 0;) blocks_[l].backward(t.dx, c, t.blocks[l]);
    embedding_dropout(drop, t).apply(t.dx);
    embed_backward(t, t.dx);
  }

 private:
  RowDropout embedding_dropout(const Drop& drop, const StackTape& t) const {
    if (!drop.context) return {};
    return {drop.context, drop.rates->embedding, dropout_site(stack_, 0, DropoutPlace::embedding),
            &t.pack};
  }

  // The real tokens' ids, positions and token types, packed (pads take no part).
  static void prepare(const Batch& batch, StackTape& t) {
    t.pack.build(batch.attention);
    const std::size_t n = t.pack.rows.size();
    t.ids.resize(n);
    t.positions.resize(n);
    t.token_types.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const std::int32_t r = t.pack.rows[i];
      t.ids[i] = batch.ids[r];
      t.positions[i] = batch.positions[r];
      if (!batch.token_types.empty()) t.token_types[i] = batch.token_types[r];
    }
  }

  void embed(StackTape& t) const {
    const EmbeddingSpec& e = spec_.embeddings;
    embedding(tokens_->value, t.ids, t.embedded);
    if (e.scale != 1.0f) scale(t.embedded, e.scale);
    if (learned_) {
      t.table_rows = t.positions;
      for (std::int32_t& r : t.table_rows) r += e.positions.offset;
      add_embedding(learned_->value, t.table_rows, t.embedded);
    }
    if (sinusoids_) sinusoids_->add_to(t.positions, t.embedded);
    if (types_) add_embedding(types_->value, t.token_types, t.embedded);
    if (embedding_norm_.present())
      embedding_norm_.forward(t.embedded, t.output);
    else
      copy(t.embedded, t.output);
  }

  void embed_backward(StackTape& t, Tensor& dx) const {
    const Tensor* de = &dx;
    if (embedding_norm_.present()) {
      embedding_norm_.backward(t.embedded, dx, t.de);
      de = &t.de;
    }
    if (types_) embedding_backward(t.token_types, *de, types_->grad);
    if (learned_) embedding_backward(t.table_rows, *de, learned_->grad);
    if (spec_.embeddings.scale != 1.0f) {
      if (de != &t.de) copy(*de, t.de);
      scale(t.de, spec_.embeddings.scale);
      de = &t.de;
    }
    embedding_backward(t.ids, *de, tokens_->grad);
  }

  StackSpec spec_;
  int stack_ = 0;
  Entry* tokens_ = nullptr;
  Entry* learned_ = nullptr;
  Entry* types_ = nullptr;
  TNorm embedding_norm_, final_norm_;
  std::unique_ptr<Sinusoids> sinusoids_;
  std::unique_ptr<Rotary> rotary_;
  std::vector<TBlock> blocks_;
};

struct HeadTape {
  std::vector<std::int32_t> rows;  // packed rows of the hidden state
  Tensor picked, transformed_pre, transformed_act, transformed;
  Tensor scaled, dt, dact, dx;  // backward scratch
};

class THead {
 public:
  THead() = default;
  THead(const HeadSpec& spec, ParameterSet& params, DType compute)
      : has_transform_(spec.transform.weight.present()),
        activation_(spec.transform_activation),
        transform_norm_(spec.transform_norm, params),
        output_(spec.output, params, compute),
        logit_scale_(spec.logit_scale) {
    if (spec.softcap > 0.0f)
      throw ConfigError("training: final logit soft-capping (Gemma 2) is not trainable yet");
    if (has_transform_) transform_ = TLinear(spec.transform, params, compute);
  }

  // `rows` are flat padded indices (b * length + t); hidden holds the packed rows of `pack`.
  void forward(const Tensor& hidden, const Packing& pack, std::span<const std::int32_t> rows,
               HeadTape& t, Tensor& logits) const {
    t.rows.resize(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::int32_t r = rows[i];
      if (r < 0 || r >= pack.padded || pack.index[r] < 0)
        throw RuntimeError("trainable network: output row " + std::to_string(r) +
                           (r < 0 || r >= pack.padded ? " is outside the batch" : " is a pad"));
      t.rows[i] = pack.index[r];
    }
    gather_rows(hidden, t.rows, t.picked);
    const Tensor* x = &t.picked;
    if (has_transform_) {
      transform_.forward(t.picked, t.transformed_pre);
      copy(t.transformed_pre, t.transformed_act);
      activate(activation_, t.transformed_act);
      x = &t.transformed_act;  // BERT's pooler (sequence classification) has no norm
      if (transform_norm_.present()) {
        transform_norm_.forward(t.transformed_act, t.transformed);
        x = &t.transformed;
      }
    }
    output_.forward(*x, logits);
    if (logit_scale_ != 1.0f) scale(logits, logit_scale_);
  }

  // dlogits -> d(hidden) [hidden rows, dim] (written: zero outside the picked rows).
  void backward(const Tensor& hidden, HeadTape& t, const Tensor& dlogits, Tensor& dhidden) const {
    const Tensor* dy = &dlogits;
    if (logit_scale_ != 1.0f) {
      copy(dlogits, t.scaled);
      scale(t.scaled, logit_scale_);
      dy = &t.scaled;
    }
    if (has_transform_) {
      if (transform_norm_.present()) {
        output_.backward(t.transformed, *dy, &t.dt);
        transform_norm_.backward(t.transformed_act, t.dt, t.dact);
      } else {
        output_.backward(t.transformed_act, *dy, &t.dact);
      }
      activation_backward(activation_, t.transformed_pre, t.dact, t.dact);  // in place
      transform_.backward(t.picked, t.dact, &t.dx);
    } else {
      output_.backward(t.picked, *dy, &t.dx);
    }
    dhidden.resize(hidden.shape());
    std::memset(dhidden.raw(), 0, dhidden.bytes());
    const std::int64_t width = hidden.dim(-1);
    for (std::size_t i = 0; i < t.rows.size(); ++i) {
      float* to = dhidden.f32() + std::int64_t{t.rows[i]} * width;
      const float* from = t.dx.f32() + static_cast<std::int64_t>(i) * width;
      for (std::int64_t c = 0; c < width; ++c) to[c] += from[c];
    }
  }

 private:
  bool has_transform_ = false;
  Activation activation_ = Activation::none;
  TLinear transform_;
  TNorm transform_norm_;
  TLinear output_;
  float logit_scale_ = 1.0f;
};

// bf16 products need the CPU's bf16 instructions; say so rather than run oneDNN's slow path.
void require_matmul_dtype(DType dtype) {
  if (dtype == DType::f32) return;
  if (dtype != DType::bf16)
    throw ConfigError(std::string("training: matmul_dtype must be f32 or bf16, got ") +
                      to_string(dtype));
  if (!bf16_matmul_supported())
    throw ConfigError(
        "training: matmul_dtype bf16 needs a CPU with AVX-512 BF16 or AMX instructions; this "
        "one has neither (use f32)");
}

}  // namespace

// ---- TrainableTransformer
// ------------------------------------------------------------------------

struct Tape final : NetworkTape {
  StackTape encoder, decoder;
  HeadTape head;
  Tensor dhidden, dmemory;
  const Batch* inputs = nullptr;
  const Batch* source = nullptr;
  DropoutContext dropout;  // the forward's, when it dropped
  bool dropping = false;
};

namespace {
Drop drop_of(const Tape& tape, const DropoutRates& rates) {
  if (!tape.dropping) return {};
  return {&rates, &tape.dropout};
}
}  // namespace

struct TrainableTransformer::Impl {
  Impl(const TransformerSpec& spec, ParameterSet& params, DType compute)
      : decoder(spec.decoder, params, compute, 0), head(spec.head, params, compute) {
    if (spec.encoder_decoder()) encoder = TStack(spec.encoder, params, compute, 1);
    if (!spec.head.present())
      throw ConfigError("training needs the model's output head (" + spec.head.absent_reason + ")");
  }
  TStack encoder, decoder;
  THead head;
};

TrainableTransformer::TrainableTransformer(TransformerSpec spec, ParameterSet& params,
                                           NetworkOptions options)
    : spec_(std::move(spec)), options_(options) {
  require_matmul_dtype(options_.matmul_dtype);
  impl_ = std::make_unique<Impl>(spec_, params, options_.matmul_dtype);
}

TrainableTransformer::~TrainableTransformer() = default;

void TapeDeleter::operator()(Tape* tape) const {
  delete tape;
}

TapePtr TrainableTransformer::make_tape() const {
  return TapePtr(new Tape());
}

void TrainableTransformer::forward(const Batch& inputs, const Batch* source,
                                   std::span<const std::int32_t> rows, Tape& tape, Tensor& logits,
                                   const DropoutContext* dropout) const {
  if (spec_.encoder_decoder() != (source != nullptr))
    throw RuntimeError(spec_.encoder_decoder()
                           ? "training an encoder-decoder needs a source batch"
                           : "a source batch is only for encoder-decoder models");
  tape.inputs = &inputs;
  tape.source = source;
  tape.dropping = dropout != nullptr && options_.dropout.any();
  if (tape.dropping) tape.dropout = *dropout;
  const Drop drop = drop_of(tape, options_.dropout);
  const Tensor* memory = nullptr;
  if (source) {
    impl_->encoder.forward(*source, nullptr, nullptr, nullptr, drop, tape.encoder);
    memory = &tape.encoder.output;
  }
  impl_->decoder.forward(inputs, memory, source ? &source->attention : nullptr,
                         source ? &tape.encoder.pack : nullptr, drop, tape.decoder);
  impl_->head.forward(tape.decoder.output, tape.decoder.pack, rows, tape.head, logits);
}

void TrainableTransformer::backward(Tape& tape, const Tensor& dlogits) const {
  impl_->head.backward(tape.decoder.output, tape.head, dlogits, tape.dhidden);
  const Drop drop = drop_of(tape, options_.dropout);
  if (!tape.source) {
    impl_->decoder.backward(*tape.inputs, nullptr, nullptr, nullptr, drop, tape.decoder,
                            tape.dhidden, nullptr);
    return;
  }
  tape.dmemory.resize(tape.encoder.output.shape());
  std::memset(tape.dmemory.raw(), 0, tape.dmemory.bytes());
  impl_->decoder.backward(*tape.inputs, &tape.encoder.output, &tape.source->attention,
                          &tape.encoder.pack, drop, tape.decoder, tape.dhidden, &tape.dmemory);
  impl_->encoder.backward(*tape.source, nullptr, nullptr, nullptr, drop, tape.encoder, tape.dmemory,
                          nullptr);
}

// ---- as a TrainableNetwork -----------------------------------------------------------------

std::unique_ptr<NetworkTape> TrainableTransformer::new_tape() const {
  return std::make_unique<Tape>();
}

void TrainableTransformer::forward(const TrainingBatch& batch, NetworkTape& tape, Tensor& logits,
                                   const DropoutContext* dropout) const {
  const Batch* source = batch.source.batch > 0 ? &batch.source : nullptr;
  forward(batch.inputs, source, batch.rows, static_cast<Tape&>(tape), logits, dropout);
}

void TrainableTransformer::backward(NetworkTape& tape, const Tensor& dlogits) const {
  backward(static_cast<Tape&>(tape), dlogits);
}

std::unique_ptr<TrainableNetwork> TrainableTransformer::replica(ParameterSet& params) const {
  return std::make_unique<TrainableTransformer>(spec_, params, options_);
}

}  // namespace masque::train

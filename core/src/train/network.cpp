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
#include "masque/train/grad_ops.hpp"
#include "masque/train/linear.hpp"
#include "masque/transformer/network.hpp"

namespace masque::train {

using namespace transformer;

// ---- ParameterSet -------------------------------------------------------------------------------

bool ParameterSet::Entry::decays() const {
  return role == ParameterRole::matrix || role == ParameterRole::embedding ||
         role == ParameterRole::table;
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

// dst += src, element by element (residual branches and gradients that meet).
void accumulate(Tensor& dst, const Tensor& src) {
  add(dst, src);
}

void copy(const Tensor& src, Tensor& dst) {
  dst.resize(src.shape());
  std::memcpy(dst.raw(), src.raw(), src.bytes());
}

struct TLinear {
  LinearShape shape;
  Entry* w = nullptr;
  Entry* b = nullptr;

  TLinear() = default;
  TLinear(const LinearSpec& spec, ParameterSet& params)
      : shape{spec.in_features(), spec.out_features(), spec.layout},
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
      : kind(spec.kind), eps(spec.eps), w(find(params, spec.weight)), b(find(params, spec.bias)) {}
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
  Tensor q, k, v;  // after rotary; self-attention with one fused projection keeps q|k|v in q
  Tensor ctx;
  std::vector<float> lse;
};

// Where q, k and v sit in the tape's buffers.
struct QkvViews {
  SeqView q, k, v;
};

class TAttention {
 public:
  TAttention() = default;
  TAttention(const AttentionSpec& spec, ParameterSet& params, const Rotary* rotary)
      : spec_(spec), rotary_(spec.rotary ? rotary : nullptr), out_(spec.output, params) {
    if (spec.window > 0)
      throw ConfigError("training: sliding-window attention is not trainable yet");
    if (spec.relative_bias.kind != RelativeBiasKind::none)
      throw ConfigError("training: relative position biases (T5, ALiBi) are not trainable yet");
    for (const LinearSpec& p : spec.projections) projections_.emplace_back(p, params);
    dims_ = {spec.heads, spec.kv_heads, spec.head_dim, spec.scale};
  }

  bool fused() const { return projections_.size() == 1; }

  // Self-attention of h (rows of `length` tokens) under `layout`; y = output projection.
  void self_forward(const Tensor& h, const AttentionLayout& layout,
                    std::span<const std::int32_t> positions, AttentionTape& t, Tensor& y) const {
    project(h, h, t);
    rotate(t, positions, h.dim(0));
    const QkvViews views = qkv(t, layout.length, layout.length);
    attend(MaskView::self(layout), views, layout.length, h.dim(0), t);
    out_.forward(t.ctx, y);
  }
  // dy -> dh (written).
  void self_backward(const Tensor& h, const AttentionLayout& layout,
                     std::span<const std::int32_t> positions, AttentionTape& t, const Tensor& dy,
                     Tensor& dh) const {
    Tensor dq, dk, dv;
    attend_backward(MaskView::self(layout), t, dy, layout.length, layout.length, dq, dk, dv);
    rotate_back(dq, dk, t, positions, h.dim(0));
    project_backward(h, h, dq, dk, dv, dh, nullptr);
  }

  // Cross-attention of h (rows of q_len tokens) to `memory` (rows of source.length tokens).
  void cross_forward(const Tensor& h, std::int32_t q_len, const Tensor& memory,
                     const AttentionLayout& source, AttentionTape& t, Tensor& y) const {
    project(h, memory, t);
    const QkvViews views = qkv(t, q_len, source.length);
    attend(MaskView::cross(source, q_len), views, q_len, h.dim(0), t);
    out_.forward(t.ctx, y);
  }
  // dy -> dh (written) and dmemory (added to).
  void cross_backward(const Tensor& h, std::int32_t q_len, const Tensor& memory,
                      const AttentionLayout& source, AttentionTape& t, const Tensor& dy, Tensor& dh,
                      Tensor& dmemory) const {
    Tensor dq, dk, dv;
    attend_backward(MaskView::cross(source, q_len), t, dy, q_len, source.length, dq, dk, dv);
    project_backward(h, memory, dq, dk, dv, dh, &dmemory);
  }

 private:
  void project(const Tensor& h, const Tensor& kv_input, AttentionTape& t) const {
    if (fused()) {
      projections_[0].forward(h, t.q);
      return;
    }
    projections_[0].forward(h, t.q);
    projections_[1].forward(kv_input, t.k);
    projections_[2].forward(kv_input, t.v);
  }

  QkvViews qkv(const AttentionTape& t, std::int32_t q_len, std::int32_t k_len) const {
    if (fused())
      return {seq_view(t.q, q_len, 0), seq_view(t.q, q_len, dims_q()),
              seq_view(t.q, q_len, dims_q() + dims_kv())};
    return {seq_view(t.q, q_len), seq_view(t.k, k_len), seq_view(t.v, k_len)};
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

  void rotate_back(Tensor& dq, Tensor& dk, const AttentionTape& t,
                   std::span<const std::int32_t> positions, std::int64_t rows) const {
    if (!rotary_) return;
    if (fused()) {
      const std::int64_t stride = t.q.dim(-1);
      rotary_backward(*rotary_, dq.f32(), rows, stride, dims_.heads, positions);
      rotary_backward(*rotary_, dq.f32() + dims_q(), rows, stride, dims_.kv_heads, positions);
      return;
    }
    rotary_backward(*rotary_, dq.f32(), rows, dq.dim(-1), dims_.heads, positions);
    rotary_backward(*rotary_, dk.f32(), rows, dk.dim(-1), dims_.kv_heads, positions);
  }

  void attend(const MaskView& mask, const QkvViews& views, std::int32_t q_len, std::int64_t rows,
              AttentionTape& t) const {
    t.ctx.resize({rows, dims_q()});
    t.lse.resize(static_cast<std::size_t>(mask.batch) * dims_.heads * q_len);
    attention_forward(dims_, mask, views.q, views.k, views.v, mutable_seq_view(t.ctx, q_len),
                      t.lse.data());
  }

  // dy -> d(ctx) -> dq, dk, dv (fused: all three in dq's columns).
  void attend_backward(const MaskView& mask, AttentionTape& t, const Tensor& dy, std::int32_t q_len,
                       std::int32_t k_len, Tensor& dq, Tensor& dk, Tensor& dv) const {
    Tensor dctx;
    out_.backward(t.ctx, dy, &dctx);
    const QkvViews views = qkv(t, q_len, k_len);
    if (fused()) {
      dq.resize(t.q.shape());
      attention_backward(dims_, mask, views.q, views.k, views.v, seq_view(t.ctx, q_len),
                         seq_view(dctx, q_len), t.lse.data(), mutable_seq_view(dq, q_len, 0),
                         mutable_seq_view(dq, q_len, dims_q()),
                         mutable_seq_view(dq, q_len, dims_q() + dims_kv()));
      return;
    }
    dq.resize(t.q.shape());
    dk.resize(t.k.shape());
    dv.resize(t.v.shape());
    attention_backward(dims_, mask, views.q, views.k, views.v, seq_view(t.ctx, q_len),
                       seq_view(dctx, q_len), t.lse.data(), mutable_seq_view(dq, q_len),
                       mutable_seq_view(dk, k_len), mutable_seq_view(dv, k_len));
  }

  // dq, dk, dv -> dh (written) and, for cross-attention, d(memory) (added to).
  void project_backward(const Tensor& h, const Tensor& kv_input, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, Tensor& dh, Tensor* dmemory) const {
    if (fused()) {
      projections_[0].backward(h, dq, &dh);
      return;
    }
    projections_[0].backward(h, dq, &dh);
    Tensor part;
    Tensor& kv_grad = dmemory ? *dmemory : dh;
    projections_[1].backward(kv_input, dk, &part);
    accumulate(kv_grad, part);
    projections_[2].backward(kv_input, dv, &part);
    accumulate(kv_grad, part);
  }

  AttentionSpec spec_;
  AttentionDims dims_;
  const Rotary* rotary_ = nullptr;
  std::vector<TLinear> projections_;
  TLinear out_;
};

// ---- MLP ------------------------------------------------------------------------------------

struct MlpTape {
  Tensor pre;    // plain: up(x); gated: gate(x)
  Tensor up;     // gated: up(x)
  Tensor act;    // act(pre)
  Tensor mixed;  // down's input: act (plain) or act * up (gated)
};

class TMlp {
 public:
  TMlp() = default;
  TMlp(const MlpSpec& spec, ParameterSet& params)
      : kind_(spec.kind), activation_(spec.activation), out_(spec.out, params) {
    for (const LinearSpec& l : spec.in) in_.emplace_back(l, params);
  }

  void forward(const Tensor& x, MlpTape& t, Tensor& y) const {
    in_[0].forward(x, t.pre);
    copy(t.pre, t.act);
    activate(activation_, t.act);
    if (kind_ == MlpKind::plain) {
      out_.forward(t.act, y);
      return;
    }
    in_[1].forward(x, t.up);
    copy(t.act, t.mixed);
    multiply(t.mixed, t.up);
    out_.forward(t.mixed, y);
  }

  void backward(const Tensor& x, MlpTape& t, const Tensor& dy, Tensor& dx) const {
    Tensor dmixed, dpre;
    if (kind_ == MlpKind::plain) {
      out_.backward(t.act, dy, &dmixed);
      activation_backward(activation_, t.pre, dmixed, dpre);
      in_[0].backward(x, dpre, &dx);
      return;
    }
    out_.backward(t.mixed, dy, &dmixed);
    Tensor dact, dup;
    copy(dmixed, dact);
    multiply(dact, t.up);  // d(act) = d(mixed) * up
    copy(dmixed, dup);
    multiply(dup, t.act);  // d(up) = d(mixed) * act
    activation_backward(activation_, t.pre, dact, dpre);
    in_[0].backward(x, dpre, &dx);
    Tensor part;
    in_[1].backward(x, dup, &part);
    accumulate(dx, part);
  }

 private:
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
  const Tensor& f_input(bool pre) const { return pre ? h : in; }
};

template <typename F>
void residual_forward(bool pre, const TNorm& norm, Tensor& x, ResidualTape& t, F&& f) {
  copy(x, t.in);
  Tensor y;
  if (pre) {
    norm.forward(t.in, t.h);
    f(t.h, y);
    add(x, y);
    return;
  }
  f(t.in, y);
  copy(t.in, t.sum);
  add(t.sum, y);
  norm.forward(t.sum, x);
}

// dx (in/out): d(x_out) in, d(x) out. `f_back(f_input, dy, d_input)` writes d_input.
template <typename F>
void residual_backward(bool pre, const TNorm& norm, Tensor& dx, ResidualTape& t, F&& f_back) {
  Tensor d_input;
  if (pre) {
    f_back(t.h, dx, d_input);
    Tensor dnorm;
    norm.backward(t.in, d_input, dnorm);
    add(dx, dnorm);
    return;
  }
  Tensor dsum;
  norm.backward(t.sum, dx, dsum);
  f_back(t.in, dsum, d_input);
  copy(dsum, dx);
  add(dx, d_input);
}

// ---- blocks and stacks ------------------------------------------------------------------------

struct BlockTape {
  ResidualTape self_r, cross_r, mlp_r;
  AttentionTape self_a, cross_a;
  MlpTape mlp;
};

class TBlock {
 public:
  TBlock(const BlockSpec& spec, ParameterSet& params, const Rotary* rotary)
      : pre_(spec.pre_norm),
        attention_norm_(spec.attention_norm, params),
        cross_norm_(spec.cross_norm, params),
        mlp_norm_(spec.mlp_norm, params),
        self_(spec.attention, params, rotary),
        mlp_(spec.mlp, params) {
    if (spec.has_cross()) {
      cross_ = TAttention(spec.cross_attention, params, nullptr);
      has_cross_ = true;
    }
  }

  struct Context {
    const AttentionLayout* layout;
    std::span<const std::int32_t> positions;
    const Tensor* memory = nullptr;           // encoder output (cross-attention)
    const AttentionLayout* source = nullptr;  // its layout
    Tensor* dmemory = nullptr;                // backward: d(memory) accumulates here
  };

  void forward(Tensor& x, const Context& c, BlockTape& t) const {
    residual_forward(pre_, attention_norm_, x, t.self_r, [&](const Tensor& h, Tensor& y) {
      self_.self_forward(h, *c.layout, c.positions, t.self_a, y);
    });
    if (has_cross_)
      residual_forward(pre_, cross_norm_, x, t.cross_r, [&](const Tensor& h, Tensor& y) {
        cross_.cross_forward(h, c.layout->length, *c.memory, *c.source, t.cross_a, y);
      });
    residual_forward(pre_, mlp_norm_, x, t.mlp_r,
                     [&](const Tensor& h, Tensor& y) { mlp_.forward(h, t.mlp, y); });
  }

  void backward(Tensor& dx, const Context& c, BlockTape& t) const {
    residual_backward(
        pre_, mlp_norm_, dx, t.mlp_r,
        [&](const Tensor& h, const Tensor& dy, Tensor& dh) { mlp_.backward(h, t.mlp, dy, dh); });
    if (has_cross_)
      residual_backward(pre_, cross_norm_, dx, t.cross_r,
                        [&](const Tensor& h, const Tensor& dy, Tensor& dh) {
                          cross_.cross_backward(h, c.layout->length, *c.memory, *c.source,
                                                t.cross_a, dy, dh, *c.dmemory);
                        });
    residual_backward(pre_, attention_norm_, dx, t.self_r,
                      [&](const Tensor& h, const Tensor& dy, Tensor& dh) {
                        self_.self_backward(h, *c.layout, c.positions, t.self_a, dy, dh);
                      });
  }

 private:
  bool pre_ = true, has_cross_ = false;
  TNorm attention_norm_, cross_norm_, mlp_norm_;
  TAttention self_, cross_;
  TMlp mlp_;
};

struct StackTape {
  std::vector<std::int32_t> ids, positions, token_types, table_rows;
  Tensor embedded;  // before the embedding norm
  std::vector<BlockTape> blocks;
  Tensor last;    // after the last block, before the final norm
  Tensor output;  // the stack's output (after the final norm)
};

class TStack {
 public:
  TStack() = default;
  TStack(const StackSpec& spec, ParameterSet& params)
      : spec_(spec),
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
        rotary_ = std::make_unique<Rotary>(b.attention.head_dim, p.rope_theta, 0, p.rotary_dim);
        rotary = rotary_.get();
      }
    for (const BlockSpec& b : spec.blocks) blocks_.emplace_back(b, params, rotary);
  }

  bool empty() const { return tokens_ == nullptr; }

  void forward(const Batch& batch, const Tensor* memory, const AttentionLayout* source,
               StackTape& t) const {
    prepare(batch, t);
    embed(t);
    t.blocks.resize(blocks_.size());
    Tensor x;
    copy(t.output, x);
    const TBlock::Context c{&batch.attention, t.positions, memory, source, nullptr};
    for (std::size_t l = 0; l < blocks_.size(); ++l) blocks_[l].forward(x, c, t.blocks[l]);
    copy(x, t.last);
    if (final_norm_.present())
      final_norm_.forward(t.last, t.output);
    else
      copy(t.last, t.output);
  }

  // d(output) -> parameters' gradients (and d(memory) for a decoder with cross-attention).
  void backward(const Batch& batch, const Tensor* memory, const AttentionLayout* source,
                StackTape& t, const Tensor& doutput, Tensor* dmemory) const {
    Tensor dx;
    if (final_norm_.present())
      final_norm_.backward(t.last, doutput, dx);
    else
      copy(doutput, dx);
    const TBlock::Context c{&batch.attention, t.positions, memory, source, dmemory};
    for (std::size_t l = blocks_.size(); l-- > 0;) blocks_[l].backward(dx, c, t.blocks[l]);
    embed_backward(t, dx);
  }

 private:
  // Pads keep their (valid) ids and position 0; nothing sees them and their rows get no loss.
  static void prepare(const Batch& batch, StackTape& t) {
    const std::size_t n = batch.ids.size();
    t.ids.assign(batch.ids.begin(), batch.ids.end());
    t.positions.assign(batch.positions.begin(), batch.positions.end());
    t.token_types = batch.token_types;
    if (t.token_types.empty()) t.token_types.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i)
      if (batch.attention.role[i] == TokenRole::pad)
        t.ids[i] = t.positions[i] = t.token_types[i] = 0;
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

  void embed_backward(StackTape& t, const Tensor& dx) const {
    Tensor de;
    if (embedding_norm_.present())
      embedding_norm_.backward(t.embedded, dx, de);
    else
      copy(dx, de);
    if (types_) embedding_backward(t.token_types, de, types_->grad);
    if (learned_) embedding_backward(t.table_rows, de, learned_->grad);
    if (spec_.embeddings.scale != 1.0f) scale(de, spec_.embeddings.scale);
    embedding_backward(t.ids, de, tokens_->grad);
  }

  StackSpec spec_;
  Entry* tokens_ = nullptr;
  Entry* learned_ = nullptr;
  Entry* types_ = nullptr;
  TNorm embedding_norm_, final_norm_;
  std::unique_ptr<Sinusoids> sinusoids_;
  std::unique_ptr<Rotary> rotary_;
  std::vector<TBlock> blocks_;
};

struct HeadTape {
  std::vector<std::int32_t> rows;
  Tensor picked, transformed_pre, transformed_act, transformed;
};

class THead {
 public:
  THead() = default;
  THead(const HeadSpec& spec, ParameterSet& params)
      : has_transform_(spec.transform.weight.present()),
        activation_(spec.transform_activation),
        transform_norm_(spec.transform_norm, params),
        output_(spec.output, params),
        logit_scale_(spec.logit_scale) {
    if (has_transform_) transform_ = TLinear(spec.transform, params);
  }

  void forward(const Tensor& hidden, std::span<const std::int32_t> rows, HeadTape& t,
               Tensor& logits) const {
    t.rows.assign(rows.begin(), rows.end());
    gather_rows(hidden, rows, t.picked);
    const Tensor* x = &t.picked;
    if (has_transform_) {
      transform_.forward(t.picked, t.transformed_pre);
      copy(t.transformed_pre, t.transformed_act);
      activate(activation_, t.transformed_act);
      transform_norm_.forward(t.transformed_act, t.transformed);
      x = &t.transformed;
    }
    output_.forward(*x, logits);
    if (logit_scale_ != 1.0f) scale(logits, logit_scale_);
  }

  // dlogits -> d(hidden) [hidden rows, dim] (written: zero outside the picked rows).
  void backward(const Tensor& hidden, HeadTape& t, const Tensor& dlogits, Tensor& dhidden) const {
    Tensor scaled;
    const Tensor* dy = &dlogits;
    if (logit_scale_ != 1.0f) {
      copy(dlogits, scaled);
      scale(scaled, logit_scale_);
      dy = &scaled;
    }
    Tensor dx;
    if (has_transform_) {
      Tensor dt, dact, dpre;
      output_.backward(t.transformed, *dy, &dt);
      transform_norm_.backward(t.transformed_act, dt, dact);
      activation_backward(activation_, t.transformed_pre, dact, dpre);
      transform_.backward(t.picked, dpre, &dx);
    } else {
      output_.backward(t.picked, *dy, &dx);
    }
    dhidden = Tensor::zeros(hidden.shape());
    const std::int64_t width = hidden.dim(-1);
    for (std::size_t i = 0; i < t.rows.size(); ++i) {
      float* to = dhidden.f32() + std::int64_t{t.rows[i]} * width;
      const float* from = dx.f32() + static_cast<std::int64_t>(i) * width;
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

}  // namespace

// ---- TrainableTransformer
// ------------------------------------------------------------------------

struct Tape {
  StackTape encoder, decoder;
  HeadTape head;
  const Batch* inputs = nullptr;
  const Batch* source = nullptr;
};

struct TrainableTransformer::Impl {
  Impl(const TransformerSpec& spec, ParameterSet& params)
      : decoder(spec.decoder, params), head(spec.head, params) {
    if (spec.encoder_decoder()) encoder = TStack(spec.encoder, params);
    if (!spec.head.present())
      throw ConfigError("training needs the model's output head (" + spec.head.absent_reason + ")");
  }
  TStack encoder, decoder;
  THead head;
};

TrainableTransformer::TrainableTransformer(TransformerSpec spec, ParameterSet& params,
                                           NetworkOptions options)
    : spec_(std::move(spec)), options_(options), impl_(std::make_unique<Impl>(spec_, params)) {}

TrainableTransformer::~TrainableTransformer() = default;

void TapeDeleter::operator()(Tape* tape) const {
  delete tape;
}

TapePtr TrainableTransformer::make_tape() const {
  return TapePtr(new Tape());
}

void TrainableTransformer::forward(const Batch& inputs, const Batch* source,
                                   std::span<const std::int32_t> rows, Tape& tape,
                                   Tensor& logits) const {
  if (spec_.encoder_decoder() != (source != nullptr))
    throw RuntimeError(spec_.encoder_decoder()
                           ? "training an encoder-decoder needs a source batch"
                           : "a source batch is only for encoder-decoder models");
  tape.inputs = &inputs;
  tape.source = source;
  const Tensor* memory = nullptr;
  if (source) {
    impl_->encoder.forward(*source, nullptr, nullptr, tape.encoder);
    memory = &tape.encoder.output;
  }
  impl_->decoder.forward(inputs, memory, source ? &source->attention : nullptr, tape.decoder);
  impl_->head.forward(tape.decoder.output, rows, tape.head, logits);
}

void TrainableTransformer::backward(Tape& tape, const Tensor& dlogits) const {
  Tensor dhidden;
  impl_->head.backward(tape.decoder.output, tape.head, dlogits, dhidden);
  if (!tape.source) {
    impl_->decoder.backward(*tape.inputs, nullptr, nullptr, tape.decoder, dhidden, nullptr);
    return;
  }
  Tensor dmemory = Tensor::zeros(tape.encoder.output.shape());
  impl_->decoder.backward(*tape.inputs, &tape.encoder.output, &tape.source->attention, tape.decoder,
                          dhidden, &dmemory);
  impl_->encoder.backward(*tape.source, nullptr, nullptr, tape.encoder, dmemory, nullptr);
}

}  // namespace masque::train

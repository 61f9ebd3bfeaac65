// Times whole training steps of masque's trainable network (forward, fused cross-entropy,
// backward, clip_grad_norm, AdamW) on three model sizes; torch_model.py runs the same models on
// the same batches in PyTorch. run.sh runs both, one process per case, and compares.
//
//   bench_train_model --model bert-base|gpt2-small|g2p [--threads N] [--steps S] [--warmup W]
//                     [--dtype f32|bf16] [--profile]
//
// Models (random weights, normal(0, 0.02)):
//   bert-base   12 x 768, 12 heads, ffn 3072, vocab 30522, MLM head tied; UniLM seq2seq mask;
//               16 records of 128 tokens: [CLS] 62 source [SEP] | 63 target [SEP]
//   gpt2-small  12 x 768, 12 heads, ffn 3072, vocab 50257, tied head; causal; 8 x 256 tokens
//   g2p         BERT-like 4 x 256, 4 heads, ffn 1024, vocab 80, UniLM; 128 records of
//               [CLS] 5..13 letters [SEP] 4..10 phones [SEP] (about 20 tokens), padded
// The token pattern (data_token) and the lengths are the same formulas as torch_model.py's.
//
// Prints one tab-separated line: model, dtype, threads, median seconds per step (wall), median
// process CPU seconds per step, real (non-pad) input tokens per step, predicted tokens per step,
// model GFLOP per step, peak RSS in KiB (ru_maxrss), first and last step's loss. CPU time is the
// fairer yardstick on a busy machine (one thread). --profile adds per-phase times on stderr.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "masque/error.hpp"
#include "masque/model.hpp"
#include "masque/threading.hpp"
#include "masque/train/loss.hpp"
#include "masque/train/network.hpp"
#include "masque/train/optimizer.hpp"
#include "masque/transformer/spec.hpp"

using namespace masque;
using namespace masque::transformer;

namespace {

struct Config {
  std::string name;
  bool gpt2 = false;  // else BERT-like (post-norm, MLM head, token types)
  std::int32_t vocab = 0, hidden = 0, layers = 0, heads = 0, ffn = 0, max_positions = 0;
  std::int32_t batch = 0, length = 0;  // length: fixed (bert-base, gpt2-small) or 0 (g2p)
};

Config config(const std::string& model) {
  if (model == "bert-base") return {model, false, 30522, 768, 12, 12, 3072, 512, 16, 128};
  if (model == "gpt2-small") return {model, true, 50257, 768, 12, 12, 3072, 1024, 8, 256};
  if (model == "g2p") return {model, false, 80, 256, 4, 4, 1024, 64, 128, 0};
  throw ConfigError("unknown --model '" + model + "' (bert-base, gpt2-small, g2p)");
}

// BERT as plugins/models/bert builds it (with the MLM head), GPT-2 as plugins/models/gpt2.
TransformerSpec bert_spec(const Config& c) {
  const std::int32_t h = c.hidden;
  const float eps = 1e-12f;
  TransformerSpec s{.architecture = "bert", .kind = ModelKind::encoder_only, .vocab_size = c.vocab};
  s.decoder.hidden = h;
  EmbeddingSpec& e = s.decoder.embeddings;
  e.tokens = {"embeddings.word_embeddings.weight", {c.vocab, h}};
  e.positions = {.kind = PositionKind::learned,
                 .max_positions = c.max_positions,
                 .table = {"embeddings.position_embeddings.weight", {c.max_positions, h}}};
  e.token_types = {"embeddings.token_type_embeddings.weight", {2, h}};
  e.norm = norm(NormKind::layer_norm, "embeddings.LayerNorm", h, eps);
  for (std::int32_t l = 0; l < c.layers; ++l) {
    const std::string q = "encoder.layer." + std::to_string(l) + ".";
    BlockSpec& b = s.decoder.blocks.emplace_back();
    b.pre_norm = false;
    b.attention = {.heads = c.heads,
                   .kv_heads = c.heads,
                   .head_dim = h / c.heads,
                   .scale = 1.0f / std::sqrt(static_cast<float>(h / c.heads)),
                   .projections = {linear(q + "attention.self.query", h, h, true),
                                   linear(q + "attention.self.key", h, h, true),
                                   linear(q + "attention.self.value", h, h, true)},
                   .output = linear(q + "attention.output.dense", h, h, true)};
    b.attention_norm = norm(NormKind::layer_norm, q + "attention.output.LayerNorm", h, eps);
    b.mlp = {.kind = MlpKind::plain,
             .activation = Activation::gelu,
             .in = {linear(q + "intermediate.dense", c.ffn, h, true)},
             .out = linear(q + "output.dense", h, c.ffn, true)};
    b.mlp_norm = norm(NormKind::layer_norm, q + "output.LayerNorm", h, eps);
  }
  s.head.transform = linear("cls.predictions.transform.dense", h, h, true);
  s.head.transform_activation = Activation::gelu;
  s.head.transform_norm = norm(NormKind::layer_norm, "cls.predictions.transform.LayerNorm", h, eps);
  s.head.output.weight = e.tokens;
  s.head.output.bias = {"cls.predictions.bias", {c.vocab}};
  return s;
}

TransformerSpec gpt2_spec(const Config& c) {
  const std::int32_t h = c.hidden;
  const float eps = 1e-5f;
  auto conv1d = [](const std::string& name, std::int64_t in, std::int64_t out) {
    return linear(name, out, in, true, WeightLayout::in_out);
  };
  TransformerSpec s{.architecture = "gpt2", .vocab_size = c.vocab};
  s.decoder.hidden = h;
  s.decoder.embeddings.tokens = {"wte.weight", {c.vocab, h}};
  s.decoder.embeddings.positions = {.kind = PositionKind::learned,
                                    .max_positions = c.max_positions,
                                    .table = {"wpe.weight", {c.max_positions, h}}};
  for (std::int32_t l = 0; l < c.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    BlockSpec& b = s.decoder.blocks.emplace_back();
    b.attention_norm = norm(NormKind::layer_norm, p + "ln_1", h, eps);
    b.attention = {.heads = c.heads,
                   .kv_heads = c.heads,
                   .head_dim = h / c.heads,
                   .scale = 1.0f / std::sqrt(static_cast<float>(h / c.heads)),
                   .projections = {conv1d(p + "attn.c_attn", h, 3 * std::int64_t{h})},
                   .output = conv1d(p + "attn.c_proj", h, h)};
    b.mlp_norm = norm(NormKind::layer_norm, p + "ln_2", h, eps);
    b.mlp = {.kind = MlpKind::plain,
             .activation = Activation::gelu_tanh,
             .in = {conv1d(p + "mlp.c_fc", h, c.ffn)},
             .out = conv1d(p + "mlp.c_proj", c.ffn, h)};
  }
  s.decoder.final_norm = norm(NormKind::layer_norm, "ln_f", h, eps);
  s.head.output.weight = s.decoder.embeddings.tokens;
  return s;
}

// ---- batches (the same formulas as torch_model.py) ----------------------------------------------

std::int32_t data_token(std::int32_t vocab, std::int64_t step, std::int64_t record,
                        std::int64_t i) {
  return static_cast<std::int32_t>(5 + (record * 131 + i * 71 + step * 17) % (vocab - 5));
}

struct Record {
  std::vector<std::int32_t> ids, types, ranks;
  std::int32_t first_predicted = 0;  // rows first_predicted .. size - 2 predict the next token
};

// [CLS]=1 source [SEP]=2 target [SEP]=2; ranks: source 0, target token t rank t + 1 (UniLM).
Record seq2seq_record(const Config& c, std::int64_t step, std::int64_t r) {
  std::int32_t src = 62, tgt = 63;
  if (c.length == 0) {
    src = static_cast<std::int32_t>(5 + (r * 7 + step * 3) % 9);
    tgt = static_cast<std::int32_t>(4 + (r * 5 + step) % 7);
  }
  Record rec;
  rec.ids.push_back(1);
  for (std::int32_t i = 0; i < src; ++i) rec.ids.push_back(data_token(c.vocab, step, r, i));
  rec.ids.push_back(2);
  rec.types.assign(rec.ids.size(), 0);
  rec.ranks.assign(rec.ids.size(), 0);
  rec.first_predicted = static_cast<std::int32_t>(rec.ids.size()) - 1;
  for (std::int32_t i = 0; i <= tgt; ++i) {
    rec.ids.push_back(i < tgt ? data_token(c.vocab, step, r, 1000 + i) : 2);
    rec.types.push_back(1);
    rec.ranks.push_back(i + 1);
  }
  return rec;
}

Record causal_record(const Config& c, std::int64_t step, std::int64_t r) {
  Record rec;
  for (std::int32_t i = 0; i < c.length; ++i) {
    rec.ids.push_back(data_token(c.vocab, step, r, i));
    rec.ranks.push_back(i);
  }
  rec.types.assign(rec.ids.size(), 0);
  return rec;
}

struct StepBatch {
  Batch inputs;
  std::vector<std::int32_t> rows, labels;
  std::int64_t real_tokens = 0;
};

StepBatch make_batch(const Config& c, std::int64_t step) {
  std::vector<Record> records;
  std::size_t length = 0;
  for (std::int64_t r = 0; r < c.batch; ++r) {
    records.push_back(c.gpt2 ? causal_record(c, step, r) : seq2seq_record(c, step, r));
    length = std::max(length, records.back().ids.size());
  }
  StepBatch s;
  Batch& b = s.inputs;
  b.batch = c.batch;
  b.length = static_cast<std::int32_t>(length);
  b.ids.assign(c.batch * length, 0);
  b.positions.assign(c.batch * length, 0);
  if (!c.gpt2) b.token_types.assign(c.batch * length, 0);
  b.attention.reset(b.batch, b.length);
  for (std::int32_t r = 0; r < c.batch; ++r) {
    const Record& rec = records[r];
    for (std::size_t i = 0; i < rec.ids.size(); ++i) {
      const std::size_t f = r * length + i;
      b.ids[f] = rec.ids[i];
      b.positions[f] = static_cast<std::int32_t>(i);
      if (!c.gpt2) b.token_types[f] = rec.types[i];
      b.attention.rank[f] = rec.ranks[i];
      b.attention.role[f] = TokenRole::content;
    }
    for (std::size_t p = rec.first_predicted; p + 1 < rec.ids.size(); ++p) {
      s.rows.push_back(static_cast<std::int32_t>(r * length + p));
      s.labels.push_back(rec.ids[p + 1]);
    }
    s.real_tokens += static_cast<std::int64_t>(rec.ids.size());
  }
  return s;
}

// Matmul FLOPs of one training step (forward 2mnk, backward twice that), attention over the
// full padded T x T (what PyTorch's eager attention computes), the head on predicted rows.
double step_flops(const Config& c, const StepBatch& s) {
  const double rows = static_cast<double>(s.inputs.batch) * s.inputs.length;
  const double h = c.hidden, t = s.inputs.length;
  const double per_layer = 2.0 * rows * (4 * h * h + 2 * h * c.ffn) + 4.0 * rows * t * h;
  const double head = 2.0 * s.rows.size() * ((c.gpt2 ? 0 : h * h) + h * c.vocab);
  return 3.0 * (c.layers * per_layer + head);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Options {
  std::string model = "g2p", dtype = "f32";
  int threads = 1, steps = 10, warmup = 2;
  bool profile = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ConfigError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model")
      o.model = value();
    else if (a == "--threads")
      o.threads = std::stoi(value());
    else if (a == "--steps")
      o.steps = std::stoi(value());
    else if (a == "--warmup")
      o.warmup = std::stoi(value());
    else if (a == "--dtype")
      o.dtype = value();
    else if (a == "--profile")
      o.profile = true;
    else
      throw ConfigError("unknown argument '" + a + "'");
  }
  return o;
}

int run(const Options& o) {
  const Config c = config(o.model);
  set_thread_count(o.threads);
  const TransformerSpec spec = c.gpt2 ? gpt2_spec(c) : bert_spec(c);
  train::ParameterSet params = train::ParameterSet::initialised(spec, 0.02, 1);
  train::NetworkOptions net_options;
  if (o.dtype == "bf16")
    net_options.matmul_dtype = DType::bf16;
  else if (o.dtype != "f32")
    throw ConfigError("--dtype must be f32 or bf16");
  const train::TrainableTransformer net(spec, params, net_options);
  train::TapePtr tape = net.make_tape();
  std::vector<std::int64_t> sizes;
  std::vector<std::span<float>> grads;
  std::vector<train::Parameter> update;
  for (auto& e : params.entries()) {
    sizes.push_back(e.value.numel());
    grads.emplace_back(e.grad.f32(), static_cast<std::size_t>(e.grad.numel()));
    update.push_back({e.value.f32(), e.grad.f32(), e.value.numel(), e.decays()});
  }
  train::AdamW adamw({}, sizes);
  const int batches = 4;  // cycled: different lengths and tokens, as a real run sees
  std::vector<StepBatch> data;
  for (int i = 0; i < batches; ++i) data.push_back(make_batch(c, i));

  Tensor logits;
  std::vector<double> times, cpu_times, phase(4, 0.0);
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    const StepBatch& s = data[step % batches];
    const double t0 = now(), c0 = cpu_now();
    params.zero_grads();
    net.forward(s.inputs, nullptr, s.rows, *tape, logits);
    const double t1 = now();
    const train::CrossEntropyResult ce =
        train::cross_entropy(logits, s.labels, static_cast<double>(s.labels.size()), {}, &logits);
    const double t2 = now();
    net.backward(*tape, logits);
    const double t3 = now();
    adamw.step(update, 1e-4, train::clip_coefficient(train::grad_norm(grads), 1.0));
    const double t4 = now();
    if (step == 0) first_loss = ce.loss;
    last_loss = ce.loss;
    if (step >= o.warmup) {
      times.push_back(t4 - t0);
      cpu_times.push_back(cpu_now() - c0);
      phase[0] += t1 - t0;
      phase[1] += t2 - t1;
      phase[2] += t3 - t2;
      phase[3] += t4 - t3;
    }
  }
  std::int64_t real = 0, predicted = 0;
  double flops = 0;
  for (const StepBatch& s : data) {
    real += s.real_tokens;
    predicted += static_cast<std::int64_t>(s.labels.size());
    flops += step_flops(c, s);
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("%s\t%s\t%d\t%.6f\t%.6f\t%.1f\t%.1f\t%.3f\t%ld\t%.6f\t%.6f\n", c.name.c_str(),
              o.dtype.c_str(), o.threads, median(times), median(cpu_times),
              static_cast<double>(real) / batches, static_cast<double>(predicted) / batches,
              flops / batches / 1e9, usage.ru_maxrss, first_loss, last_loss);
  if (o.profile) {
    const double n = static_cast<double>(times.size());
    std::fprintf(stderr, "forward %.1f ms, loss %.1f ms, backward %.1f ms, optimizer %.1f ms\n",
                 1e3 * phase[0] / n, 1e3 * phase[1] / n, 1e3 * phase[2] / n, 1e3 * phase[3] / n);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_model: %s\n", e.what());
    return 2;
  }
}

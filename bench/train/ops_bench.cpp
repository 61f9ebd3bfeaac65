// Times masque's training ops, forward + backward, at BERT-base shapes: attention (16 x 128
// tokens, 12 heads of 64, bidirectional and UniLM seq2seq masks) and the linear layers of a
// layer (768 -> 768, 768 -> 3072, 3072 -> 768 over 2048 rows), plus the packing question
// (a per-step weight reorder before the product). torch_ops.py times the same work in PyTorch.
//
//   bench_train_ops [--threads N] [--repeats R]
//
// Prints one tab-separated line per case: case, threads, median seconds per call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "masque/attention.hpp"
#include "masque/mask.hpp"
#include "masque/threading.hpp"
#include "masque/train/attention.hpp"
#include "masque/train/linear.hpp"

using namespace masque;

namespace {

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::vector<float> v(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& x : v) x = dist(rng);
  return v;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median seconds per call over `repeats` timed calls after one warm-up.
double median_seconds(const std::function<void()>& run, int repeats) {
  run();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const double t = now();
    run();
    times.push_back(now() - t);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

constexpr std::int32_t B = 16, T = 128, H = 12, D = 64;

void bench_attention(const char* name, const AttentionLayout& layout, int threads, int repeats) {
  const std::int64_t width = std::int64_t{H} * D, tokens = std::int64_t{B} * T;
  const MaskView m = MaskView::self(layout);
  // q, k, v as column ranges of one fused qkv projection, as a model holds them.
  const std::vector<float> qkv = random_values(tokens * 3 * width, 1);
  const std::vector<float> dout = random_values(tokens * width, 2);
  std::vector<float> out(tokens * width), dqkv(tokens * 3 * width), lse(std::size_t(B) * H * T);
  const AttentionDims dims{H, H, D, 0.125f};
  const std::int64_t bs = T * 3 * width, ts = 3 * width;
  const SeqView q{qkv.data(), bs, ts}, k{qkv.data() + width, bs, ts},
      v{qkv.data() + 2 * width, bs, ts};
  const MutableSeqView dq{dqkv.data(), bs, ts}, dk{dqkv.data() + width, bs, ts},
      dv{dqkv.data() + 2 * width, bs, ts};
  const MutableSeqView o{out.data(), T * width, width};
  const SeqView oc{out.data(), T * width, width}, dov{dout.data(), T * width, width};
  const double s = median_seconds(
      [&] {
        train::attention_forward(dims, m, q, k, v, o, lse.data());
        train::attention_backward(dims, m, q, k, v, oc, dov, lse.data(), dq, dk, dv);
      },
      repeats);
  std::printf("attention_fwd_bwd_%s\t%d\t%.6f\n", name, threads, s);
  const double f =
      median_seconds([&] { train::attention_forward(dims, m, q, k, v, o, lse.data()); }, repeats);
  std::printf("attention_fwd_%s\t%d\t%.6f\n", name, threads, f);
}

void bench_linear(std::int64_t in, std::int64_t out, int threads, int repeats) {
  const std::int64_t rows = std::int64_t{B} * T;
  const train::LinearShape shape{in, out, WeightLayout::out_in};
  const std::vector<float> x = random_values(rows * in, 3), w = random_values(in * out, 4),
                           b = random_values(out, 5), dy = random_values(rows * out, 6);
  std::vector<float> y(rows * out), dx(rows * in), dw(in * out), db(out);
  const double s = median_seconds(
      [&] {
        train::linear_forward(shape, x.data(), rows, w.data(), b.data(), y.data());
        train::linear_backward(shape, x.data(), dy.data(), rows, w.data(), dx.data(), dw.data(),
                               db.data());
      },
      repeats);
  std::printf("linear_fwd_bwd_%ldx%ld\t%d\t%.6f\n", static_cast<long>(in), static_cast<long>(out),
              threads, s);
  // Packing per step: the inference Linear packs its weight at construction; a trained weight
  // would need that once per step. Time construction (the pack) + the forward on packed weights
  // against the plain-layout forward.
  const Tensor wt = Tensor::view(const_cast<float*>(w.data()), {out, in}, DType::f32);
  const double packed = median_seconds(
      [&] {
        const Linear packed_layer(wt);
        packed_layer.forward(x.data(), rows, y.data());
      },
      repeats);
  const double plain = median_seconds(
      [&] { train::linear_forward(shape, x.data(), rows, w.data(), nullptr, y.data()); }, repeats);
  std::printf("linear_fwd_pack_per_step_%ldx%ld\t%d\t%.6f\n", static_cast<long>(in),
              static_cast<long>(out), threads, packed);
  std::printf("linear_fwd_plain_%ldx%ld\t%d\t%.6f\n", static_cast<long>(in), static_cast<long>(out),
              threads, plain);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_train_ops [--threads N] [--repeats R]\n");
      return 2;
    }
  }
  if (threads < 1 || repeats < 1) {
    std::fprintf(stderr, "bench_train_ops: --threads and --repeats must be >= 1\n");
    return 2;
  }
  set_thread_count(threads);
  AttentionLayout full, unilm;
  full.reset(B, T);
  unilm.reset(B, T);
  for (std::int32_t i = 0; i < B * T; ++i) {
    const std::int32_t t = i % T;
    full.role[i] = unilm.role[i] = TokenRole::content;
    full.rank[i] = 0;
    unilm.rank[i] = t < T / 2 ? 0 : t - T / 2 + 1;  // source half, then the target in order
  }
  bench_attention("bidirectional", full, threads, repeats);
  bench_attention("seq2seq", unilm, threads, repeats);
  bench_linear(768, 768, threads, repeats);
  bench_linear(768, 3072, threads, repeats);
  bench_linear(3072, 768, threads, repeats);
  return 0;
}

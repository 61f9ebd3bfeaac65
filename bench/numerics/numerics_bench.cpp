// Times masque's Linear (pre-packed weights) and attention on transformer-sized shapes, and the
// f32 FMA peak of this CPU as it runs now (the yardstick for the GFLOP/s).
//
//   bench_numerics [--threads N] [--repeats R] [--min-ms MS] [--filter TEXT] [--cpu-clock]
//
// --cpu-clock measures process CPU time rather than wall time: a rough guide on a busy machine
// (one thread only), never for published numbers.
// Prints one tab-separated line per case: kind, shape, threads, median seconds per call,
// GFLOP/s. bench/numerics/run.sh runs it next to the PyTorch script on the same shapes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <latch>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <immintrin.h>
#include <sys/mman.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "common/median_time.hpp"
#include "masque/attention.hpp"
#include "masque/layers.hpp"
#include "masque/threading.hpp"

using namespace masque;

namespace {

struct Options {
  bool cpu_clock = false;  // process CPU time instead of wall time (a busy machine, 1 thread)
  int threads = 1;
  int repeats = 7;
  double min_seconds = 0.1;
  std::string filter;
};

Tensor random_tensor(Shape shape, unsigned seed) {
  Tensor t(std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
  return t;
}

bool use_cpu_clock = false;

double now() {
  if (use_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median_seconds(const Options& o, const std::function<void()>& run) {
  return bench::median_seconds(o.min_seconds, o.repeats, now, run);
}

bool selected(const Options& o, const char* kind, const std::string& shape) {
  return o.filter.empty() || (std::string(kind) + " " + shape).find(o.filter) != std::string::npos;
}

void report(const Options& o, const char* kind, const std::string& shape, double flops,
            const std::function<void()>& run) {
  const double s = median_seconds(o, run);
  std::printf("%s\t%s\t%d\t%.9f\t%.2f\n", kind, shape.c_str(), o.threads, s, flops / s / 1e9);
  std::fflush(stdout);
}

void bench_matmul(const Options& o, std::int64_t m, std::int64_t k, std::int64_t n) {
  const std::string shape = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
  if (!selected(o, "matmul", shape)) return;
  const Tensor w = random_tensor({n, k}, 1);  // nn.Linear layout [out, in], no bias
  const Tensor x = random_tensor({m, k}, 2);
  Tensor y({m, n});
  {
    const Linear linear(w);
    report(o, "matmul", shape, 2.0 * m * k * n, [&] { linear.forward(x, y); });
  }
  // The same product straight on oneDNN, set up the way the quoted oneDNN figures were measured:
  // the weights reordered once into the layout the matmul prefers (format any), one primitive
  // created up front for this thread count and reused. Linear should match it: a gap is its
  // overhead or its thread policy, not the CPU.
  using tag = dnnl::memory::format_tag;
  const auto f32 = dnnl::memory::data_type::f32;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc src_md({m, k}, f32, tag::ab), dst_md({m, n}, f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(src_md, dnnl::memory::desc({k, n}, f32, tag::any), dst_md), engine);
  dnnl::memory plain({{k, n}, f32, tag::ba}, engine, const_cast<float*>(w.f32()));
  dnnl::memory packed(pd.weights_desc(), engine);
  dnnl::reorder(plain, packed).execute(stream, plain, packed);
  stream.wait();
  const dnnl::matmul matmul(pd);
  dnnl::memory src(src_md, engine, const_cast<float*>(x.f32())), dst(dst_md, engine, y.f32());
  report(o, "matmul-onednn", shape, 2.0 * m * k * n, [&] {
    matmul.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_DST, dst}});
    stream.wait();
  });
  // oneDNN's other f32 product: a 1x1 convolution over the rows as pixels (nhwc is [rows, in]),
  // weights packed the same way. Without AVX-512 it beats the matmul (gemm:jit there) and
  // Linear uses it; the faster of the two is the yardstick.
  const auto kind = dnnl::prop_kind::forward_inference;
  const dnnl::memory::desc image_md({1, k, 1, m}, f32, tag::nhwc),
      out_md({1, n, 1, m}, f32, tag::nhwc);
  const dnnl::convolution_forward::primitive_desc cpd(
      dnnl::convolution_forward::desc(kind, dnnl::algorithm::convolution_direct, image_md,
                                      dnnl::memory::desc({n, k, 1, 1}, f32, tag::any), out_md,
                                      {1, 1}, {0, 0}, {0, 0}),
      engine);
  dnnl::memory oihw({{n, k, 1, 1}, f32, tag::oihw}, engine, const_cast<float*>(w.f32()));
  dnnl::memory conv_weights(cpd.weights_desc(), engine);
  dnnl::reorder(oihw, conv_weights).execute(stream, oihw, conv_weights);
  stream.wait();
  const dnnl::convolution_forward convolution(cpd);
  dnnl::memory image(image_md, engine, const_cast<float*>(x.f32())), out(out_md, engine, y.f32());
  report(o, "matmul-onednn-conv", shape, 2.0 * m * k * n, [&] {
    convolution.execute(
        stream, {{DNNL_ARG_SRC, image}, {DNNL_ARG_WEIGHTS, conv_weights}, {DNNL_ARG_DST, out}});
    stream.wait();
  });
}

// Independent FMA chains, enough to keep two FMA units busy (latency 4 x 2 ports); the
// functions are compiled for the ISA they use, the library for baseline x86-64.
constexpr long kPeakIterations = 1 << 22;

__attribute__((target("avx512f"))) float fma_chains_avx512(long iterations) {
  constexpr int kChains = 16;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);
  for (long it = 0; it < iterations; ++it)
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  float lanes[16], sum = 0.0f;
  for (int i = 0; i < kChains; ++i) {
    _mm512_storeu_ps(lanes, acc[i]);
    for (float x : lanes) sum += x;
  }
  return sum;
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(long iterations) {
  constexpr int kChains = 12;  // of 16 ymm registers
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
  for (long it = 0; it < iterations; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  float lanes[8], sum = 0.0f;
  for (int i = 0; i < kChains; ++i) {
    _mm256_storeu_ps(lanes, acc[i]);
    for (float x : lanes) sum += x;
  }
  return sum;
}

// Runs body(t) for t in [0, threads) on that many threads started together.
void run_team(int threads, const std::function<void(int)>& body) {
  if (threads == 1) return body(0);
  std::latch start(threads);
  std::vector<std::thread> team;
  for (int t = 0; t < threads; ++t)
    team.emplace_back([&, t] {
      start.arrive_and_wait();
      body(t);
    });
  for (auto& t : team) t.join();
}

// The f32 FMA peak with `threads` threads, each running the chains: what the CPU delivers at the
// clock it runs at now (under AVX-512 load, on this VM's share of the host).
void bench_peak(const Options& o) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("fma")) return;
  const std::string shape = avx512 ? "fma avx512" : "fma avx2";
  if (!selected(o, "peak", shape)) return;
  const double flops_per_thread = 2.0 * kPeakIterations * (avx512 ? 16 * 16 : 12 * 8);
  std::vector<float> sums(o.threads);
  volatile float sink = 0.0f;  // keeps the chains from being optimised away
  report(o, "peak", shape, flops_per_thread * o.threads, [&] {
    run_team(o.threads, [&](int t) {
      sums[t] = avx512 ? fma_chains_avx512(kPeakIterations) : fma_chains_avx2(kPeakIterations);
    });
    for (float x : sums) sink = sink + x;
  });
}

// Sums n floats (n a multiple of 64) with four independent AVX-512 accumulators.
__attribute__((target("avx512f"))) float read_sum_avx512(const float* p, std::size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i < n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  // (not _mm512_reduce_add_ps: GCC 12's version warns about an uninitialised variable)
  float lanes[16], sum = 0.0f;
  _mm512_storeu_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  for (float x : lanes) sum += x;
  return sum;
}

// The same with AVX2 (eight accumulators of 8 floats).
__attribute__((target("avx2"))) float read_sum_avx2(const float* p, std::size_t n) {
  __m256 a[8];
  for (auto& v : a) v = _mm256_setzero_ps();
  for (std::size_t i = 0; i < n; i += 64)
    for (int j = 0; j < 8; ++j) a[j] = _mm256_add_ps(a[j], _mm256_load_ps(p + i + 8 * j));
  float lanes[8], sum = 0.0f;
  for (int j = 1; j < 8; ++j) a[0] = _mm256_add_ps(a[0], a[j]);
  _mm256_storeu_ps(lanes, a[0]);
  for (float x : lanes) sum += x;
  return sum;
}

// The read bandwidth `threads` cores get from memory: each sums its share of a buffer larger
// than this VM's last-level cache. A one-row product streams its weights once, so this is the
// ceiling of decoding speed. Reported in GB/s (in the GFLOP/s column).
void bench_read_bandwidth(const Options& o) {
  constexpr std::size_t kBytes = std::size_t{1} << 30;
  const std::string shape = "read 1024 MB";
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!(avx512 || __builtin_cpu_supports("avx2")) || !selected(o, "bandwidth", shape)) return;
  const std::size_t n = kBytes / sizeof(float), share = n / o.threads / 64 * 64;
  void* raw = std::aligned_alloc(2 << 20, kBytes);
  if (raw == nullptr) return;
  madvise(raw, kBytes, MADV_HUGEPAGE);
  float* data = static_cast<float*>(raw);
  std::fill(data, data + n, 1.0f);
  std::vector<float> sums(o.threads);
  volatile float sink = 0.0f;
  report(o, "bandwidth", shape, static_cast<double>(share * o.threads * sizeof(float)), [&] {
    run_team(o.threads, [&](int t) {
      sums[t] = avx512 ? read_sum_avx512(data + t * share, share)
                       : read_sum_avx2(data + t * share, share);
    });
    for (float x : sums) sink = sink + x;
  });
  std::free(raw);
}

// Self-attention of one sequence of t tokens, `heads` x `head_dim`, q/k/v token-major.
void bench_attention(const Options& o, const char* mask, std::int32_t t, std::int32_t heads,
                     std::int32_t head_dim) {
  const std::string shape = std::string(mask) + " T=" + std::to_string(t) + " " +
                            std::to_string(heads) + "x" + std::to_string(head_dim);
  if (!selected(o, "attention", shape)) return;
  AttentionLayout layout;
  layout.reset(1, t);
  for (std::int32_t i = 0; i < t; ++i) {
    layout.role[i] = TokenRole::content;
    layout.rank[i] = std::string(mask) == "causal" ? i : 0;
  }
  const std::int64_t width = std::int64_t{heads} * head_dim;
  const Tensor q = random_tensor({t, width}, 3), k = random_tensor({t, width}, 4),
               v = random_tensor({t, width}, 5);
  Tensor out({t, width});
  const AttentionDims dims{heads, heads, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
  // Nominal work of the two products over the full T x T matrix (the PyTorch script counts the
  // same), so GFLOP/s compare directly.
  report(o, "attention", shape, 4.0 * t * t * width,
         [&] { self_attention(dims, layout, q, k, v, out); });
}

// One decoding step: one query per row against `t` cached keys.
void bench_decode(const Options& o, std::int32_t t, std::int32_t heads, std::int32_t head_dim) {
  const std::string shape =
      "step T=" + std::to_string(t) + " " + std::to_string(heads) + "x" + std::to_string(head_dim);
  if (!selected(o, "attention", shape)) return;
  const std::int64_t width = std::int64_t{heads} * head_dim;
  const Tensor q = random_tensor({1, width}, 6), k = random_tensor({t + 1, width}, 7),
               v = random_tensor({t + 1, width}, 8);
  std::vector<TokenRole> role(t + 1, TokenRole::content);
  std::vector<std::int32_t> rank(t + 1);
  for (std::int32_t i = 0; i <= t; ++i) rank[i] = i;
  MaskView mask;
  mask.batch = 1;
  mask.q_len = 1;
  mask.k_len = t + 1;
  mask.key_role = role.data();
  mask.key_rank = rank.data();
  mask.key_stride = t + 1;
  mask.query_role = role.data() + t;
  mask.query_rank = rank.data() + t;
  mask.query_stride = t + 1;
  mask.self_offset = t;
  Tensor out({1, width});
  const AttentionDims dims{heads, heads, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
  report(o, "attention", shape, 4.0 * (t + 1) * width, [&] {
    attention(dims, mask, seq_view(q, 1), seq_view(k, t + 1), seq_view(v, t + 1),
              mutable_seq_view(out, 1));
  });
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads")
      o.threads = std::stoi(value());
    else if (a == "--repeats")
      o.repeats = std::stoi(value());
    else if (a == "--min-ms")
      o.min_seconds = std::stod(value()) / 1000.0;
    else if (a == "--filter")
      o.filter = value();
    else if (a == "--cpu-clock")
      o.cpu_clock = true;
    else {
      std::fprintf(stderr,
                   "usage: bench_numerics [--threads N] [--repeats R] [--min-ms MS] [--filter "
                   "TEXT] [--cpu-clock]\n");
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  use_cpu_clock = o.cpu_clock;
  set_thread_count(o.threads);
  bench_peak(o);
  bench_read_bandwidth(o);
  const std::int64_t shapes[][3] = {
      {2048, 512, 2048}, {2048, 768, 3072}, {512, 768, 768}, {128, 768, 768}, {8, 768, 3072},
      {1, 768, 768},     {1, 768, 50257},   {32, 32, 128},   {64, 64, 172},
  };
  for (const auto& s : shapes) bench_matmul(o, s[0], s[1], s[2]);
  for (const char* mask : {"bidir", "causal"})
    for (std::int32_t t : {128, 256, 512, 1024}) bench_attention(o, mask, t, 12, 64);
  bench_attention(o, "causal", 64, 8, 4);
  for (std::int32_t t : {128, 1024}) bench_decode(o, t, 12, 64);
  return 0;
}

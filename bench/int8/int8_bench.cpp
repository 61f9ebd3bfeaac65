// Times masque's Linear in f32 and in int8 on the layer shapes of the models int8 must not slow
// down (../shared and the benchmarks), at the row counts they run with, and splits the int8
// call into its passes: quantizing the input rows, the s8 matmul (with the weights' scales),
// and the epilogue (row scales, bias, activation: a oneDNN binary). README.md has the results
// and the rule they calibrate (int8_pays() in masque/layers.hpp).
//
//   bench_int8 [--threads N] [--repeats R] [--min-ms MS] [--filter TEXT] [--grid]
//
// One tab-separated line per case: layer, rows, in, out, f32 s, int8 s (Linear, the rule
// ignored), quantize s, matmul s, epilogue s, int8 / f32, what the rule picks, then int4 s and
// int4 / f32 (groups of 32; "-" where the inputs do not split into them).
// --grid adds square and skinny shapes between the models' (the calibration sweep).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "common/median_time.hpp"
#include "masque/layers.hpp"
#include "masque/threading.hpp"

using namespace masque;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

struct Options {
  int threads = 1;
  int repeats = 5;
  double min_seconds = 0.05;
  std::string filter;
  bool grid = false;
};

struct Shape2 {
  std::string layer;
  std::int64_t in, out;
  Activation activation;
  std::vector<std::int64_t> rows;
};

// Row counts: 1 and 4 (decoding at batch 1, beam 4), 32 and 128 (decoding at batch 32, beam 4
// at batch 32), 512 (scoring a batch of sequences; the encoder).
const std::vector<std::int64_t> kDecodeRows{1, 4, 32, 128};
const std::vector<std::int64_t> kAllRows{1, 4, 32, 128, 512};

std::vector<Shape2> model_shapes() {
  const Activation none = Activation::none, relu = Activation::relu, gelu = Activation::gelu_tanh,
                   gelu_erf = Activation::gelu;
  return {
      // aren-transliteration: d_model 32, ffn 128, vocabularies 51 / 43
      {"aren qkv", 32, 96, none, kAllRows},
      {"aren out/cross-q", 32, 32, none, kAllRows},
      {"aren cross-kv", 32, 64, none, kAllRows},
      {"aren fc1", 32, 128, relu, kAllRows},
      {"aren fc2", 128, 32, none, kAllRows},
      {"aren head", 32, 43, none, kDecodeRows},
      // stories260k: hidden 64, intermediate 172, vocabulary 512
      {"stories qkv", 64, 192, none, kAllRows},
      {"stories o", 64, 64, none, kAllRows},
      {"stories gate-up", 64, 344, none, kAllRows},
      {"stories down", 172, 64, none, kAllRows},
      {"stories head", 64, 512, none, kAllRows},
      // tiny-gpt2 / tiny-bert: hidden 32, inner 128 / 64, vocabularies 50257 / 30522
      {"tiny fc", 32, 128, gelu, kAllRows},
      {"tiny-bert fc", 32, 64, gelu_erf, kAllRows},
      {"tiny-bert fc2", 64, 32, none, kAllRows},
      {"tiny-gpt2 head", 32, 50257, none, {1, 4, 32, 128}},
      {"tiny-bert head", 32, 30522, none, {1, 32, 128}},
      // GPT-2 small (bench/lm): 768, 3072, vocabulary 50257
      {"gpt2s qkv", 768, 2304, none, kAllRows},
      {"gpt2s proj", 768, 768, none, kAllRows},
      {"gpt2s fc", 768, 3072, gelu, kAllRows},
      {"gpt2s fc2", 3072, 768, none, kAllRows},
      {"gpt2s head", 768, 50257, none, {1, 32, 128}},
      // Qwen2.5-0.5B (bench/peers): hidden 896, 14 heads of 64, 2 KV heads, intermediate 4864
      {"qwen0.5b qkv", 896, 1152, none, kAllRows},
      {"qwen0.5b o", 896, 896, none, kAllRows},
      {"qwen0.5b gate-up", 896, 9728, none, kAllRows},
      {"qwen0.5b down", 4864, 896, none, kAllRows},
  };
}

std::vector<Shape2> grid_shapes() {
  std::vector<Shape2> shapes;
  for (std::int64_t in : {64, 128, 256, 384, 512, 1024})
    for (std::int64_t out : {64, 128, 256, 512, 1024, 4096})
      shapes.push_back({"grid", in, out, Activation::none, kAllRows});
  return shapes;
}

Tensor random_tensor(masque::Shape shape, unsigned seed) {
  Tensor t(std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
  return t;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median_seconds(const Options& o, const std::function<void()>& run) {
  return bench::median_seconds(o.min_seconds, o.repeats, now, run);
}

// The input rows' quantization as Linear does it: per row max |x|, then x * 127 / max rounded
// half to even (the 1.5 * 2^23 trick, which vectorises) and clamped; compiled for AVX-512 too,
// as libmasque's loops are (numerics/simd.hpp).
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void quantize_rows(const float* __restrict x, std::int64_t rows, std::int64_t in,
                   std::int8_t* __restrict q, float* __restrict scales) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * in;
    float m = 0.0f;
    for (std::int64_t i = 0; i < in; ++i) m = std::max(m, std::fabs(row[i]));
    scales[r] = m / 127.0f;
    const float inverse = m > 0.0f ? 127.0f / m : 0.0f;
    for (std::int64_t i = 0; i < in; ++i) {
      const float v = (row[i] * inverse + 12582912.0f) - 12582912.0f;
      q[r * in + i] = static_cast<std::int8_t>(std::min(127.0f, std::max(-127.0f, v)));
    }
  }
}

// The passes of one int8 call, each on oneDNN as Linear sets them up.
struct Passes {
  double quantize = 0, matmul = 0, epilogue = 0;
};

Passes time_passes(const Options& o, const Shape2& s, std::int64_t rows, const Tensor& x) {
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  std::vector<std::int8_t> q(rows * s.in), w(s.in * s.out, 1);
  std::vector<float> scales(rows, 1.0f), y(rows * s.out), bias(s.out, 0.5f);
  Passes p;
  p.quantize =
      median_seconds(o, [&] { quantize_rows(x.f32(), rows, s.in, q.data(), scales.data()); });

  const dnnl::memory::desc src_md({rows, s.in}, dt::s8, tag::ab),
      dst_md({rows, s.out}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  attr.set_output_scales(1 << 1, std::vector<float>(s.out, 0.01f));
  const dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(src_md, dnnl::memory::desc({s.in, s.out}, dt::s8, tag::any), dst_md), attr,
      engine);
  dnnl::memory plain({{s.in, s.out}, dt::s8, tag::ab}, engine, w.data());
  dnnl::memory packed(pd.weights_desc(), engine);
  dnnl::reorder(plain, packed).execute(stream, plain, packed);
  stream.wait();
  const dnnl::matmul matmul(pd);
  dnnl::memory src(src_md, engine, q.data()), dst(dst_md, engine, y.data());
  p.matmul = median_seconds(o, [&] {
    matmul.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_DST, dst}});
    stream.wait();
  });

  const dnnl::memory::desc row_md({rows, 1}, dt::f32, tag::ab),
      bias_md({1, s.out}, dt::f32, tag::ab);
  dnnl::primitive_attr epilogue_attr;
  dnnl::post_ops ops;
  ops.append_binary(dnnl::algorithm::binary_add, bias_md);
  if (s.activation == Activation::relu)
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0, 0);
  if (s.activation == Activation::gelu_tanh)
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0, 0);
  if (s.activation == Activation::gelu)
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0, 0);
  epilogue_attr.set_post_ops(ops);
  const dnnl::binary epilogue(dnnl::binary::primitive_desc(
      dnnl::binary::desc(dnnl::algorithm::binary_mul, dst_md, row_md, dst_md), epilogue_attr,
      engine));
  dnnl::memory row_scales(row_md, engine, scales.data()), bias_mem(bias_md, engine, bias.data());
  p.epilogue = median_seconds(o, [&] {
    epilogue.execute(stream, {{DNNL_ARG_SRC_0, dst},
                              {DNNL_ARG_SRC_1, row_scales},
                              {DNNL_ARG_DST, dst},
                              {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, bias_mem}});
    stream.wait();
  });
  return p;
}

void bench_shape(const Options& o, const Shape2& s) {
  const Tensor w = random_tensor({s.out, s.in}, 1), b = random_tensor({s.out}, 3);
  const Linear f32(w, b, {.activation = s.activation});
  const Linear i8(w, b, {.activation = s.activation, .compute = DType::i8});
  const bool fits4 = s.in % 32 == 0;
  const Linear i4 =
      fits4 ? Linear(w, b, {.activation = s.activation, .compute = DType::i4}, Int8Policy::always)
            : Linear();
  for (std::int64_t rows : s.rows) {
    char name[160];
    std::snprintf(name, sizeof name, "%s\t%lld\t%lld\t%lld", s.layer.c_str(),
                  static_cast<long long>(rows), static_cast<long long>(s.in),
                  static_cast<long long>(s.out));
    if (!o.filter.empty() && std::string(name).find(o.filter) == std::string::npos) continue;
    const Tensor x = random_tensor({rows, s.in}, 2);
    Tensor y;
    const double t32 = median_seconds(o, [&] { f32.forward(x, y); });
    const double t8 = median_seconds(o, [&] { i8.forward(x, y); });
    const double t4 = fits4 ? median_seconds(o, [&] { i4.forward(x, y); }) : 0.0;
    const Passes p = time_passes(o, s, rows, x);
    std::printf("%s\t%.3e\t%.3e\t%.3e\t%.3e\t%.3e\t%.2f\t%s", name, t32, t8, p.quantize, p.matmul,
                p.epilogue, t8 / t32, int8_pays(s.in, s.out) ? "int8" : "f32");
    if (fits4)
      std::printf("\t%.3e\t%.2f\n", t4, t4 / t32);
    else
      std::printf("\t-\t-\n");
    std::fflush(stdout);
  }
}

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: bench_int8 [--threads N] [--repeats R] [--min-ms MS] [--filter TEXT] "
               "[--grid]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--threads")
      o.threads = std::max(1, std::atoi(value().c_str()));
    else if (a == "--repeats")
      o.repeats = std::max(1, std::atoi(value().c_str()));
    else if (a == "--min-ms")
      o.min_seconds = std::atof(value().c_str()) / 1000.0;
    else if (a == "--filter")
      o.filter = value();
    else if (a == "--grid")
      o.grid = true;
    else
      usage();
  }
  set_thread_count(o.threads);
  std::printf("# isa %d, int8 weight levels %d, threads %d\n",
              static_cast<int>(dnnl::get_effective_cpu_isa()), int8_weight_levels(), o.threads);
  std::printf(
      "layer\trows\tin\tout\tf32_s\tint8_s\tquantize_s\tmatmul_s\tepilogue_s\tint8/"
      "f32\trule\tint4_s\t"
      "int4/f32\n");
  for (const Shape2& s : model_shapes()) bench_shape(o, s);
  if (o.grid)
    for (const Shape2& s : grid_shapes()) bench_shape(o, s);
}

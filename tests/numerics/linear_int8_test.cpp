// Linear with int8 matmuls (LinearOptions::compute = DType::i8): the documented quantization,
// computed exactly, and row results that do not depend on the batch or the thread count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "masque/error.hpp"
#include "masque/layers.hpp"
#include "masque/threading.hpp"
#include "reference.hpp"

using namespace masque;
using masque::test::activation_reference;
using masque::test::random_tensor;
using masque::test::reference_linear;
using masque::test::relative_error;
using masque::test::transpose;

namespace {

// The symmetric scale and int8 values of n floats, as LinearOptions::compute documents it:
// scale = max |x| / levels, q = round-half-even(x * (1 / scale)); levels is 127 for input rows
// and int8_weight_levels() for weights.
float scale_of(const float* x, std::int64_t n, float levels) {
  float amax = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax / levels;
}

std::vector<int> quantize(const float* x, std::int64_t n, float scale, float levels) {
  std::vector<int> q(n, 0);
  if (scale == 0.0f) return q;
  const float inverse = 1.0f / scale;
  for (std::int64_t i = 0; i < n; ++i)
    q[i] = static_cast<int>(std::clamp(std::nearbyint(x[i] * inverse), -levels, levels));
  return q;
}

// act(sum_k qx qw * sw * sx + b), the int8 product in exact integers, the rest in double.
std::vector<double> reference_int8(const Tensor& x, const Tensor& w_out_in, const Tensor& bias,
                                   Activation a) {
  const std::int64_t in = w_out_in.dim(1), out = w_out_in.dim(0), rows = x.numel() / in;
  const auto wl = static_cast<float>(int8_weight_levels());
  std::vector<float> sw(out);
  std::vector<std::vector<int>> qw(out);
  for (std::int64_t o = 0; o < out; ++o) {
    sw[o] = scale_of(w_out_in.f32() + o * in, in, wl);
    qw[o] = quantize(w_out_in.f32() + o * in, in, sw[o], wl);
  }
  std::vector<double> y;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float sx = scale_of(x.f32() + r * in, in, 127.0f);
    const auto qx = quantize(x.f32() + r * in, in, sx, 127.0f);
    for (std::int64_t o = 0; o < out; ++o) {
      std::int64_t acc = 0;
      for (std::int64_t i = 0; i < in; ++i) acc += qx[i] * qw[o][i];
      const double b = bias.empty() ? 0.0 : bias.f32()[o];
      y.push_back(activation_reference(a, static_cast<double>(acc) * sw[o] * sx + b));
    }
  }
  return y;
}

Tensor rows_of(const Tensor& x, std::int64_t begin, std::int64_t count) {
  const std::int64_t in = x.dim(1);
  Tensor part({count, in});
  std::memcpy(part.f32(), x.f32() + begin * in, count * in * sizeof(float));
  return part;
}

constexpr double kTol = 1e-5;  // f32 scaling and activation after an exact integer product

}  // namespace

TEST_CASE("int8 Linear computes the documented quantization exactly", "[numerics][linear][int8]") {
  const std::int64_t in = 200, out = 72;  // in: not a multiple of the kernels' blocks
  Tensor w = random_tensor({out, in}, 71, 0.2f), b = random_tensor({out}, 72);
  for (Activation a : {Activation::none, Activation::gelu_tanh, Activation::silu}) {
    const Linear linear(w, b, {.activation = a, .compute = DType::i8});
    const Linear conv1d(transpose(w), b,
                        {.activation = a, .layout = WeightLayout::in_out, .compute = DType::i8});
    const Linear no_bias(w, Tensor(), {.activation = a, .compute = DType::i8});
    CHECK(linear.compute() == DType::i8);
    for (std::int64_t rows : {1, 5, 64, 131}) {
      INFO("activation " << to_string(a) << ", rows " << rows);
      Tensor x = random_tensor({rows, in}, 73 + static_cast<std::uint32_t>(rows)), y;
      const auto want = reference_int8(x, w, b, a);
      linear.forward(x, y);
      REQUIRE(y.shape() == Shape{rows, out});
      CHECK(relative_error(y, want) <= kTol);
      conv1d.forward(x, y);
      CHECK(relative_error(y, want) <= kTol);
      no_bias.forward(x, y);
      CHECK(relative_error(y, reference_int8(x, w, Tensor(), a)) <= kTol);
    }
  }
}

TEST_CASE("int8 Linear stays within the quantization error of the f32 product",
          "[numerics][linear][int8]") {
  // Per-row and per-feature scales: each product term is off by at most half a step of each
  // factor; the steps' errors add in quadrature, which for this random data comes to about
  // sqrt(1/127^2 + 1/levels^2) of the output's magnitude at most (8-bit weights: 1.1%; 7-bit:
  // 1.8%; numpy over 8 seeds: 0.78-1.0% and 1.2-1.6%).
  Tensor w = random_tensor({256, 768}, 81, 0.05f), b = random_tensor({256}, 82);
  Tensor x = random_tensor({16, 768}, 83), y;
  Linear(w, b, {.compute = DType::i8}).forward(x, y);
  const double error = relative_error(y, reference_linear(x, w, b, Activation::none));
  const double levels = int8_weight_levels();
  CHECK(error > 0.0);
  CHECK(error <= std::sqrt(1.0 / (127.0 * 127.0) + 1.0 / (levels * levels)));
}

TEST_CASE("int8 Linear gives a row the same bits in any batch and with two threads",
          "[numerics][linear][int8][threads]") {
  // Large enough for two threads and for oneDNN to block the product differently per row count;
  // and inputs that are no multiple of 32 (the one-row kernel's tail).
  const std::int64_t rows = 300;
  for (const auto& [in, out] : {std::pair<std::int64_t, std::int64_t>{768, 1024}, {200, 96}}) {
    INFO(in << " inputs, " << out << " outputs");
    Tensor w = random_tensor({out, in}, 91, 0.05f), b = random_tensor({out}, 92);
    const Linear linear(w, b, {.activation = Activation::gelu_tanh, .compute = DType::i8});
    // Without VNNI (7-bit weights) one row runs on masque's kernel (int8_row_product.hpp), which
    // must give oneDNN's bits; with VNNI on oneDNN's brgemm.
    CHECK(linear.streams_one_row() == (int8_weight_levels() == 63));
    Tensor x = random_tensor({rows, in}, 93), all;
    linear.forward(x, all);
    for (int threads : {1, 2}) {
      ThreadScope scope(threads);
      Tensor again;
      linear.forward(x, again);
      CHECK(std::memcmp(again.f32(), all.f32(), all.bytes()) == 0);
      for (std::int64_t begin : {0L, 7L, 299L}) {
        for (std::int64_t count : {1L, 2L}) {
          if (begin + count > rows) continue;
          INFO("threads " << threads << ", rows " << begin << " + " << count);
          Tensor y;
          linear.forward(rows_of(x, begin, count), y);
          CHECK(std::memcmp(y.f32(), all.f32() + begin * out, y.bytes()) == 0);
        }
      }
    }
  }
}

TEST_CASE("int8 Linear: zero rows give the bias, non-finite rows give NaN rows",
          "[numerics][linear][int8]") {
  Tensor w = random_tensor({8, 32}, 101), b = random_tensor({8}, 102);
  const Linear linear(w, b, {.compute = DType::i8});
  Tensor x({3, 32}), y;
  std::fill(x.f32(), x.f32() + x.numel(), 0.5f);
  std::fill(x.f32(), x.f32() + 32, 0.0f);                    // row 0: zeros
  x.f32()[32 + 5] = std::numeric_limits<float>::infinity();  // row 1: an infinity
  linear.forward(x, y);
  for (int o = 0; o < 8; ++o) {
    CHECK(y.f32()[o] == b.f32()[o]);
    CHECK(std::isnan(y.f32()[8 + o]));
    CHECK(std::isfinite(y.f32()[16 + o]));
  }
  Tensor bad = random_tensor({8, 32}, 103);
  bad.f32()[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(Linear(bad, Tensor(), {.compute = DType::i8}), RuntimeError);
}

TEST_CASE("int8 where it pays: small layers stay f32, large ones run int8",
          "[numerics][linear][int8]") {
  CHECK_FALSE(int8_pays(32, 50257));  // tiny-gpt2's head: too few inputs
  CHECK_FALSE(int8_pays(768, 43));    // a small vocabulary: too few outputs
  CHECK_FALSE(int8_pays(172, 64));    // stories260k's down projection: too few weights
  CHECK(int8_pays(kInt8MinInputs, kInt8MinWeights / kInt8MinInputs));
  CHECK_FALSE(int8_pays(kInt8MinInputs - 1, 4096));
  CHECK_FALSE(int8_pays(4096, kInt8MinOutputs - 1));
  CHECK(int8_pays(768, 3072));
  CHECK_THAT(kInt8Rule, Catch::Contains(std::to_string(kInt8MinInputs) + " inputs") &&
                            Catch::Contains(std::to_string(kInt8MinOutputs) + " outputs") &&
                            Catch::Contains(std::to_string(kInt8MinWeights) + " weights"));

  const Tensor narrow_w = random_tensor({40, 32}, 111), narrow_b = random_tensor({40}, 112);
  const Linear narrow(narrow_w, narrow_b, {.compute = DType::i8}, Int8Policy::where_it_pays);
  CHECK(narrow.requested() == DType::i8);
  CHECK(narrow.compute() == DType::f32);
  // Kept f32, it is the f32 layer exactly.
  const Tensor x = random_tensor({5, 32}, 113);
  Tensor y, y32;
  narrow.forward(x, y);
  Linear(narrow_w, narrow_b).forward(x, y32);
  CHECK(std::memcmp(y.f32(), y32.f32(), y.bytes()) == 0);
  // Int8Policy::always (the default) runs int8 whatever the size.
  CHECK(Linear(narrow_w, narrow_b, {.compute = DType::i8}).compute() == DType::i8);

  const std::int64_t in = kInt8MinInputs, out = kInt8MinWeights / kInt8MinInputs + 8;
  const Tensor wide_w = random_tensor({out, in}, 114), wide_b = random_tensor({out}, 115);
  const Linear wide(wide_w, wide_b, {.compute = DType::i8}, Int8Policy::where_it_pays);
  CHECK(wide.requested() == DType::i8);
  CHECK(wide.compute() == DType::i8);
  const Tensor xw = random_tensor({3, in}, 116);
  wide.forward(xw, y);
  CHECK(relative_error(y, reference_int8(xw, wide_w, wide_b, Activation::none)) <= kTol);
  // Concatenated projections are judged by their total size: two halves too small alone.
  const Tensor halves[] = {random_tensor({out / 2, in}, 117), random_tensor({out / 2, in}, 118)};
  CHECK_FALSE(int8_pays(in, out / 2));
  CHECK(Linear::concat(halves, {}, {.compute = DType::i8}, Int8Policy::where_it_pays).compute() ==
        DType::i8);
  // f32 is not affected.
  CHECK(Linear(narrow_w, narrow_b, {}, Int8Policy::where_it_pays).compute() == DType::f32);
}

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "masque/layers.hpp"
#include "masque/ops.hpp"
#include "numerics/simd.hpp"
#include "reference.hpp"

using namespace masque;
using masque::test::random_tensor;
using masque::test::relative_error;

namespace {

constexpr double kTol = 1e-5;

double ref_gelu(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double ref_silu(double x) {
  return x / (1.0 + std::exp(-x));
}

// Values over the range activations see, including large magnitudes and exact zero.
Tensor activation_inputs() {
  Tensor t = random_tensor({7, 131}, 11, 3.0f);
  t.f32()[0] = 0.0f;
  t.f32()[1] = 30.0f;
  t.f32()[2] = -30.0f;
  t.f32()[3] = 1e-8f;
  t.f32()[4] = -9.5f;
  return t;
}

template <typename Op, typename Ref>
void check_activation(Op op, Ref ref) {
  Tensor x = activation_inputs();
  std::vector<double> want;
  for (std::int64_t i = 0; i < x.numel(); ++i) want.push_back(ref(x.f32()[i]));
  op(x);
  CHECK(relative_error(x, want) <= kTol);
  // Activations are also checked relative to each value (small inputs matter as much).
  for (std::int64_t i = 0; i < x.numel(); ++i)
    CHECK(std::abs(x.f32()[i] - want[i]) <= 1e-6 * std::max(1.0, std::abs(want[i])));
}

}  // namespace

TEST_CASE("activations match double references", "[numerics][ops]") {
  check_activation([](Tensor& x) { gelu(x); }, ref_gelu);
  check_activation([](Tensor& x) { gelu_tanh(x); }, ref_gelu_tanh);
  check_activation([](Tensor& x) { silu(x); }, ref_silu);
  check_activation([](Tensor& x) { relu(x); }, [](double x) { return x > 0 ? x : 0.0; });
  check_activation([](Tensor& x) { activate(Activation::gelu, x); }, ref_gelu);
}

TEST_CASE("erf and tanh GELU differ enough for a test to tell them apart", "[numerics][ops]") {
  Tensor x = Tensor::zeros({1, 1});
  x.f32()[0] = 1.5f;
  Tensor y = x.clone();
  gelu(x);
  gelu_tanh(y);
  CHECK(std::abs(x.f32()[0] - ref_gelu(1.5)) < 1e-6);
  CHECK(std::abs(y.f32()[0] - ref_gelu_tanh(1.5)) < 1e-6);
  CHECK(std::abs(ref_gelu(1.5) - ref_gelu_tanh(1.5)) > 1e-4);
}

TEST_CASE("activation names follow Hugging Face", "[numerics][ops]") {
  CHECK(parse_activation("gelu") == Activation::gelu);
  CHECK(parse_activation("gelu_new") == Activation::gelu_tanh);
  CHECK(parse_activation("gelu_pytorch_tanh") == Activation::gelu_tanh);
  CHECK(parse_activation("silu") == Activation::silu);
  CHECK(parse_activation("swish") == Activation::silu);
  CHECK(parse_activation("relu") == Activation::relu);
  CHECK_THROWS_AS(parse_activation("tanhshrink"), ConfigError);
}

TEST_CASE("swiglu computes silu(gate) * up, separate and fused", "[numerics][ops]") {
  Tensor gate = random_tensor({5, 37}, 1, 2.0f), up = random_tensor({5, 37}, 2);
  std::vector<double> want;
  for (std::int64_t i = 0; i < gate.numel(); ++i)
    want.push_back(ref_silu(gate.f32()[i]) * up.f32()[i]);
  Tensor out;
  swiglu(gate, up, out);
  CHECK(out.shape() == Shape{5, 37});
  CHECK(relative_error(out, want) <= kTol);

  Tensor fused({5, 74});
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 37; ++c) {
      fused.f32()[r * 74 + c] = gate.f32()[r * 37 + c];
      fused.f32()[r * 74 + 37 + c] = up.f32()[r * 37 + c];
    }
  Tensor out2;
  swiglu_fused(fused, out2);
  CHECK(out2.shape() == Shape{5, 37});
  CHECK(relative_error(out2, want) <= kTol);
}

TEST_CASE("element-wise add, scaled add, scale and bias", "[numerics][ops]") {
  Tensor y = random_tensor({4, 33}, 3), x = random_tensor({4, 33}, 4),
         bias = random_tensor({33}, 5);
  std::vector<double> want;
  for (std::int64_t i = 0; i < y.numel(); ++i)
    want.push_back((static_cast<double>(y.f32()[i]) + x.f32()[i] - 0.5 * x.f32()[i]) * 3.0 +
                   bias.f32()[i % 33]);
  add(y, x);
  scaled_add(y, x, -0.5f);
  scale(y, 3.0f);
  add_bias(y, bias);
  CHECK(relative_error(y, want) <= kTol);
  Tensor wrong = random_tensor({4, 32}, 6);
  CHECK_THROWS_AS(add(y, wrong), RuntimeError);
}

TEST_CASE("layer norm with and without bias, and RMS norm", "[numerics][ops]") {
  const int rows = 6, n = 96;
  Tensor x = random_tensor({rows, n}, 7, 4.0f);
  for (int c = 0; c < n; ++c) x.f32()[c] += 100.0f;  // a large mean must not hurt
  Tensor w = random_tensor({n}, 8), b = random_tensor({n}, 9);
  for (float eps : {1e-5f, 1e-12f}) {
    std::vector<double> want_ln, want_ln_nobias, want_rms;
    for (int r = 0; r < rows; ++r) {
      const float* xr = x.f32() + r * n;
      double mean = 0, var = 0, sq = 0;
      for (int c = 0; c < n; ++c) mean += xr[c];
      mean /= n;
      for (int c = 0; c < n; ++c)
        var += (xr[c] - mean) * (xr[c] - mean), sq += double(xr[c]) * xr[c];
      var /= n;
      for (int c = 0; c < n; ++c) {
        const double z = (xr[c] - mean) / std::sqrt(var + eps) * w.f32()[c];
        want_ln.push_back(z + b.f32()[c]);
        want_ln_nobias.push_back(z);
        want_rms.push_back(xr[c] / std::sqrt(sq / n + eps) * w.f32()[c]);
      }
    }
    Tensor y;
    layer_norm(x, w, b, eps, y);
    CHECK(relative_error(y, want_ln) <= kTol);
    layer_norm(x, w, Tensor(), eps, y);
    CHECK(relative_error(y, want_ln_nobias) <= kTol);
    rms_norm(x, w, eps, y);
    CHECK(relative_error(y, want_rms) <= kTol);
    Tensor in_place = x.clone();
    LayerNorm{w, b, eps}.forward(in_place, in_place);
    CHECK(relative_error(in_place, want_ln) <= kTol);
    in_place = x.clone();
    RmsNorm{w, eps}.forward(in_place, in_place);
    CHECK(relative_error(in_place, want_rms) <= kTol);
  }
  Tensor short_w = random_tensor({n - 1}, 10), y;
  CHECK_THROWS_AS(layer_norm(x, short_w, Tensor(), 1e-5f, y), RuntimeError);
}

TEST_CASE("softmax and log-softmax over the last dimension", "[numerics][ops]") {
  Tensor x = random_tensor({3, 2, 50}, 12, 5.0f);
  x.f32()[0] = -INFINITY;  // a masked entry
  std::vector<double> want_p, want_lp;
  for (int r = 0; r < 6; ++r) {
    const float* xr = x.f32() + r * 50;
    double mx = -INFINITY, sum = 0;
    for (int c = 0; c < 50; ++c) mx = std::max(mx, double(xr[c]));
    for (int c = 0; c < 50; ++c) sum += std::exp(xr[c] - mx);
    for (int c = 0; c < 50; ++c) {
      want_p.push_back(std::exp(xr[c] - mx) / sum);
      want_lp.push_back(xr[c] - mx - std::log(sum));
    }
  }
  Tensor p = x.clone();
  softmax(p);
  CHECK(relative_error(p, want_p) <= kTol);
  CHECK(p.f32()[0] == 0.0f);
  Tensor lp = x.clone();
  log_softmax(lp);
  CHECK(std::isinf(lp.f32()[0]));
  want_lp[0] = 0;
  lp.f32()[0] = 0;
  CHECK(relative_error(lp, want_lp) <= kTol);

  Tensor all_masked = Tensor::zeros({1, 4});
  std::fill(all_masked.f32(), all_masked.f32() + 4, -INFINITY);
  softmax(all_masked);
  for (int c = 0; c < 4; ++c) CHECK(all_masked.f32()[c] == 0.0f);
}

TEST_CASE("the core's log-sum-exp works in double over a large vocabulary", "[numerics][ops]") {
  Tensor logits = random_tensor({50257}, 13, 4.0f);
  std::span<const float> row(logits.f32(), 50257);
  double mx = -INFINITY, sum = 0;
  for (float v : row) mx = std::max(mx, double(v));
  for (float v : row) sum += std::exp(v - mx);
  const double lse = mx + std::log(sum);
  CHECK(std::abs(decoding::log_sum_exp(row) - lse) < 1e-9 * std::abs(lse) + 1e-9);
}

TEST_CASE("embedding lookups check ids", "[numerics][ops]") {
  Tensor table = random_tensor({10, 6}, 14), positions = random_tensor({4, 6}, 15);
  std::vector<std::int32_t> ids{3, 0, 9, 3};
  Tensor out;
  embedding(table, ids, out);
  REQUIRE(out.shape() == Shape{4, 6});
  add_embedding(positions, std::vector<std::int32_t>{0, 1, 2, 3}, out);
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 6; ++c)
      CHECK(out.f32()[i * 6 + c] == table.f32()[ids[i] * 6 + c] + positions.f32()[i * 6 + c]);
  std::vector<std::int32_t> bad{1, 10};
  try {
    embedding(table, bad, out);
    FAIL("no error");
  } catch (const RecordError& e) {
    CHECK_THAT(e.what(), Catch::Contains("id 10"));
  }
  CHECK_THROWS_AS(embedding(table, std::vector<std::int32_t>{-1}, out), RecordError);
  Embedding layer{table};
  layer.forward(std::vector<std::int32_t>{9}, out);
  CHECK(out.f32()[5] == table.f32()[9 * 6 + 5]);
}

TEST_CASE("rotary embedding follows HF rotate_half", "[numerics][ops]") {
  const int heads = 3, d = 8, rows = 5;
  const double theta = 10000.0;
  Tensor x = random_tensor({rows, heads * d}, 16);
  std::vector<std::int32_t> positions{0, 1, 7, 300, 5000};  // 5000 is past the table
  std::vector<double> want;
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h)
      for (int c = 0; c < d; ++c) {
        const float* xh = x.f32() + r * heads * d + h * d;
        const int i = c % (d / 2);
        const double angle = positions[r] * std::pow(theta, -2.0 * i / d);
        // x * cos(cat(f, f)) + rotate_half(x) * sin(cat(f, f)), rotate_half = cat(-x2, x1)
        const double rot = c < d / 2 ? -xh[c + d / 2] : xh[c - d / 2];
        want.push_back(xh[c] * std::cos(angle) + rot * std::sin(angle));
      }
  Rotary rope(d, theta, 1024);
  Tensor y = x.clone();
  rope.apply(y, heads, positions);
  CHECK(relative_error(y, want) <= kTol);

  // Partial rotation leaves the tail alone; a strided view rotates only its part.
  Rotary partial(d, theta, 64, 4);
  Tensor z = x.clone();
  partial.apply(z.f32() + d, rows, heads * d, 1, positions);  // head 1 only
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < d; ++c) CHECK(z.f32()[r * heads * d + c] == x.f32()[r * heads * d + c]);
    for (int c = 4; c < d; ++c)
      CHECK(z.f32()[r * heads * d + d + c] == x.f32()[r * heads * d + d + c]);
  }
  CHECK_THROWS_AS(rope.apply(y, heads, std::vector<std::int32_t>{1, 2}), RuntimeError);
  CHECK_THROWS_AS(rope.apply(y, heads, std::vector<std::int32_t>{0, 1, 2, 3, -1}), RecordError);
}

TEST_CASE("concat_rows stacks weights", "[numerics][ops]") {
  Tensor a = random_tensor({2, 3}, 17), b = random_tensor({1, 3}, 18);
  Tensor c = concat_rows(std::vector<Tensor>{a, b});
  REQUIRE(c.shape() == Shape{3, 3});
  CHECK(c.f32()[6] == b.f32()[0]);
  CHECK(c.f32()[5] == a.f32()[5]);
}

TEST_CASE("fast_exp: close to std::exp, 0 below its range, NaN for NaN", "[numerics][ops]") {
  for (float x : {-87.0f, -20.0f, -1.0f, 0.0f, 0.5f, 10.0f, 88.0f}) {
    INFO(x);
    CHECK(std::abs(numerics::fast_exp(x) - std::exp(x)) <= 4e-7f * std::exp(x));
  }
  CHECK(numerics::fast_exp(-100.0f) == 0.0f);
  CHECK(numerics::fast_exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  // A NaN (a diverged loss, a corrupt weight) stays NaN, never an int conversion of it.
  CHECK(std::isnan(numerics::fast_exp(std::numeric_limits<float>::quiet_NaN())));
}

// int4 products (numerics/int4_product.hpp) against the plain-numpy transcription of their
// documented quantization and order of sums (int4_reference.py, run at test time), and the
// properties a run relies on: a row's result does not depend on its batch or the thread count.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "masque/layers.hpp"
#include "masque/threading.hpp"
#include "numerics/int4_product.hpp"
#include "test_support.hpp"

using namespace masque;

namespace {

struct Case {
  std::int64_t out, in, group, rows;
  std::vector<float> weight, bias, x, y;
  std::vector<std::uint8_t> nibbles;
  std::vector<std::uint16_t> scales;
};

std::vector<Case> cases() {
  std::ifstream in(std::string(MASQUE_INT4_FIXTURE) + "/int4_cases.json");
  REQUIRE(in);
  const nlohmann::json all = nlohmann::json::parse(in);
  std::vector<Case> out;
  for (const auto& c : all)
    out.push_back({c["out"], c["in"], c["group"], c["rows"], c["weight"], c["bias"], c["x"], c["y"],
                   c["nibbles"], c["scales"]});
  return out;
}

Linear int4_layer(const Case& c) {
  const Tensor w = Tensor::view(const_cast<float*>(c.weight.data()), {c.out, c.in}, DType::f32);
  const Tensor b = Tensor::view(const_cast<float*>(c.bias.data()), {c.out}, DType::f32);
  return Linear(w, b, {.compute = DType::i4, .group_size = static_cast<std::int32_t>(c.group)},
                Int8Policy::always);
}

std::vector<float> forward(const Linear& layer, const float* x, std::int64_t rows) {
  std::vector<float> y(rows * layer.out_features());
  layer.forward(x, rows, y.data());
  return y;
}

}  // namespace

TEST_CASE("int4: weights quantize to the reference's nibbles and bf16 scales", "[linear][int4]") {
  for (const Case& c : cases()) {
    INFO(c.out << " x " << c.in << ", groups of " << c.group);
    const numerics::Int4Weights q =
        numerics::quantize_int4(c.weight.data(), WeightLayout::out_in, c.in, c.out, c.group);
    CHECK(q.nibbles == c.nibbles);
    CHECK(q.scales == c.scales);
    // The same weight stored [in, out] (GPT-2's Conv1D) quantizes the same.
    std::vector<float> transposed(c.weight.size());
    for (std::int64_t n = 0; n < c.out; ++n)
      for (std::int64_t k = 0; k < c.in; ++k) transposed[k * c.out + n] = c.weight[n * c.in + k];
    const numerics::Int4Weights t =
        numerics::quantize_int4(transposed.data(), WeightLayout::in_out, c.in, c.out, c.group);
    CHECK(t.nibbles == c.nibbles);
    CHECK(t.scales == c.scales);
  }
}

TEST_CASE("int4: products equal the numpy reference of the documented sums", "[linear][int4]") {
  ThreadScope one(1);
  for (const Case& c : cases()) {
    INFO(c.out << " x " << c.in << ", groups of " << c.group);
    const Linear layer = int4_layer(c);
    REQUIRE(layer.compute() == DType::i4);
    const std::vector<float> y = forward(layer, c.x.data(), c.rows);
    double worst = 0;
    for (std::size_t i = 0; i < y.size(); ++i)
      worst = std::max(worst, std::abs(double{y[i]} - c.y[i]) / (std::abs(double{c.y[i]}) + 1e-3));
    // The reference emulates each fused multiply-add in float64: equal but for a rare double
    // rounding.
    CHECK(worst <= 1e-6);
  }
}

TEST_CASE("int4: a row's result depends neither on its batch nor on the threads",
          "[linear][int4]") {
  const Case c = cases().front();
  const Linear layer = int4_layer(c);
  std::vector<float> batch, alone;
  {
    ThreadScope one(1);
    batch = forward(layer, c.x.data(), c.rows);
    for (std::int64_t m = 0; m < c.rows; ++m) {
      const std::vector<float> row = forward(layer, c.x.data() + m * c.in, 1);
      alone.insert(alone.end(), row.begin(), row.end());
    }
  }
  CHECK(batch == alone);
  // Many rows and two threads (output features split between them).
  std::vector<float> many;
  for (int copy = 0; copy < 40; ++copy) many.insert(many.end(), c.x.begin(), c.x.end());
  ThreadScope two(2);
  const std::vector<float> y = forward(layer, many.data(), 40 * c.rows);
  for (int copy = 0; copy < 40; ++copy)
    CHECK(std::equal(batch.begin(), batch.end(), y.begin() + copy * batch.size()));
  // A decoding row through a layer large enough (1 MB of weights) to split over two threads.
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor w({2048, 1024}), x({1, 1024});
  for (std::int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = normal(rng);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = normal(rng);
  const Linear large(w, {}, {.compute = DType::i4}, Int8Policy::always);
  const std::vector<float> on_two = forward(large, x.f32(), 1);
  ThreadScope back_to_one(1);
  CHECK(forward(large, x.f32(), 1) == on_two);
}

TEST_CASE("int4: narrow layers and inputs that do not split into groups stay f32",
          "[linear][int4]") {
  const Tensor small = Tensor::zeros({64, 64});
  CHECK(Linear(small, {}, {.compute = DType::i4}, Int8Policy::where_it_pays).compute() ==
        DType::f32);
  const Tensor odd = Tensor::zeros({256, 200});  // 200 inputs: not a multiple of 32
  CHECK(Linear(odd, {}, {.compute = DType::i4}, Int8Policy::where_it_pays).compute() == DType::f32);
  const Tensor fits = Tensor::zeros({256, 256});
  const Linear layer(fits, {}, {.compute = DType::i4}, Int8Policy::where_it_pays);
  CHECK(layer.compute() == DType::i4);
  CHECK(layer.requested() == DType::i4);
  CHECK(matmul_summary({{"a", &layer}}) == "int4: all 1 linear layer");
}

TEST_CASE("int4: every kernel this CPU has gives the portable kernel's bits", "[linear][int4]") {
  using numerics::Int4Kernel;
  ThreadScope one(1);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(-127, 127);
  // Shapes past every tile edge: rows past 2, 4 and 64; features past a tile of 16, blocks of 2
  // and 4 tiles and the last, partial tile; groups of 1-4 blocks of 32.
  for (const auto& [out, in, group, rows] :
       std::vector<std::array<std::int64_t, 4>>{{37, 256, 32, 9},
                                                {16, 128, 128, 4},
                                                {9, 192, 64, 1},
                                                {40, 512, 32, 70},
                                                {3, 32, 32, 2},
                                                {100, 64, 32, 7},
                                                {129, 96, 96, 6}}) {
    INFO(out << " x " << in << ", groups of " << group << ", " << rows << " rows");
    std::vector<float> w(out * in), sx(rows);
    for (float& v : w) v = normal(rng);
    for (float& v : sx) v = std::abs(normal(rng)) / 127.0f;
    std::vector<std::int8_t> qx(rows * in);
    for (auto& v : qx) v = static_cast<std::int8_t>(byte(rng));
    qx[0] = 127;  // the extremes, against the largest weights
    qx[1] = -127;
    const numerics::Int4Product product(
        numerics::quantize_int4(w.data(), WeightLayout::out_in, in, out, group), nullptr,
        Activation::none);
    std::vector<float> portable(rows * out);
    product.run(Int4Kernel::portable, qx.data(), sx.data(), rows, portable.data());
    for (const Int4Kernel kernel : {Int4Kernel::avx2, Int4Kernel::avx512_vnni}) {
      if (!numerics::Int4Product::runs_here(kernel)) {
        CHECK_THROWS_WITH(product.run(kernel, qx.data(), sx.data(), rows, portable.data()),
                          Catch::Contains("cannot run"));
        continue;
      }
      INFO(numerics::kernel_name(kernel));
      std::vector<float> y(rows * out);
      product.run(kernel, qx.data(), sx.data(), rows, y.data());
      CHECK(y == portable);
    }
  }
}

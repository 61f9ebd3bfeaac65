// Linear from weights quantized apart (quantize_weight, Linear::quantized: what quantized
// folders load): the same bits as quantizing at construction, for both layouts, fused parts,
// biases and activations; malformed parts refused by name; int8 weights of more levels than
// this CPU takes still give int8-accurate products.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "masque/error.hpp"
#include "masque/layers.hpp"
#include "masque/threading.hpp"

using namespace masque;

namespace {

Tensor random_tensor(Shape shape, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  Tensor t(std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal(rng);
  return t;
}

// [in, out] of an [out, in] weight.
Tensor transposed(const Tensor& w) {
  Tensor t({w.dim(1), w.dim(0)});
  for (std::int64_t r = 0; r < w.dim(0); ++r)
    for (std::int64_t c = 0; c < w.dim(1); ++c)
      t.f32()[c * w.dim(0) + r] = w.f32()[r * w.dim(1) + c];
  return t;
}

std::vector<float> forward(const Linear& layer, const Tensor& x) {
  std::vector<float> y(static_cast<std::size_t>(x.dim(0) * layer.out_features()));
  layer.forward(x.f32(), x.dim(0), y.data());
  return y;
}

}  // namespace

TEST_CASE("quantized Linear: quantize_weight then Linear::quantized gives construction's bits",
          "[linear][int8]") {
  ThreadScope one(1);
  const std::int64_t in = 256;
  const Tensor x = random_tensor({5, in}, 7);
  for (const MatmulType type :
       {MatmulType(DType::i8), MatmulType(DType::i4, 32), MatmulType(DType::i4, 128)}) {
    for (const WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
      INFO(to_string(type.compute) << " group " << type.group_size << ", layout "
                                   << (layout == WeightLayout::out_in ? "out_in" : "in_out"));
      // q, k, v of widths 128, 64, 64 fused, with biases and an activation.
      std::vector<Tensor> weights, stored, biases;
      for (const std::int64_t out : {128, 64, 64}) {
        weights.push_back(
            random_tensor({out, in}, static_cast<std::uint32_t>(out + weights.size())));
        stored.push_back(layout == WeightLayout::out_in ? weights.back()
                                                        : transposed(weights.back()));
        biases.push_back(random_tensor({out}, static_cast<std::uint32_t>(99 + biases.size())));
      }
      const LinearOptions options{.activation = Activation::gelu,
                                  .layout = layout,
                                  .compute = type.compute,
                                  .group_size = type.group_size};
      const Linear built = Linear::concat(stored, biases, options, Int8Policy::always);
      std::vector<QuantizedWeight> parts;
      for (const Tensor& w : stored) parts.push_back(quantize_weight(w, layout, type));
      Tensor bias({256});
      for (std::size_t p = 0, o = 0; p < biases.size(); o += biases[p].numel(), ++p)
        std::memcpy(bias.f32() + o, biases[p].f32(), biases[p].bytes());
      const Linear loaded = Linear::quantized(parts, bias, Activation::gelu, "qkv");
      CHECK(loaded.compute() == built.compute());
      CHECK(loaded.out_features() == 256);
      CHECK(loaded.weight_bytes() == built.weight_bytes());
      CHECK(forward(loaded, x) == forward(built, x));
      // The stored form: int8 [out, in] values and per-feature f32 scales; int4 nibbles
      // [out, in / 2] and bf16 scales [out, in / group].
      const QuantizedWeight& q = parts.front();
      if (type.compute == DType::i8) {
        CHECK(q.values.dtype() == DType::i8);
        CHECK(q.values.shape() == Shape{128, in});
        CHECK(q.scales.shape() == Shape{128});
        CHECK(q.levels == int8_weight_levels());
      } else {
        CHECK(q.values.dtype() == DType::u8);
        CHECK(q.values.shape() == Shape{128, in / 2});
        CHECK(q.scales.dtype() == DType::bf16);
        CHECK(q.scales.shape() == Shape{128, in / type.group_size});
      }
    }
  }
}

TEST_CASE("quantized Linear: parts that do not fit are refused by name", "[linear][int8]") {
  const Tensor w = random_tensor({64, 256}, 3);
  const QuantizedWeight i8 = quantize_weight(w, WeightLayout::out_in, DType::i8);
  const QuantizedWeight i4 = quantize_weight(w, WeightLayout::out_in, MatmulType(DType::i4, 32));
  auto refused = [](std::vector<QuantizedWeight> parts, const char* why) {
    INFO(why);
    CHECK_THROWS_WITH(Linear::quantized(parts, {}, Activation::none, "layers.3.qkv"),
                      Catch::Contains("layers.3.qkv"));
  };
  refused({i8, i4}, "types differ");
  QuantizedWeight short_scales = i8;
  short_scales.scales = Tensor({32});
  refused({short_scales}, "int8 scales of the wrong length");
  QuantizedWeight wrong_values = i4;
  wrong_values.values = Tensor({64, 128}, DType::i8);
  refused({wrong_values}, "int4 values not U8");
  QuantizedWeight other_group = i4;
  other_group.group_size = 64;
  refused({i4, other_group}, "groups differ");
  refused({}, "no parts");
}

TEST_CASE("quantized Linear: int8 weights of 127 levels run int8-accurate on any CPU",
          "[linear][int8]") {
  // Quantized where int8 products are summed in 32 bits (VNNI); on a CPU without VNNI (the AVX2
  // run of this test) they are quantized again to its 63 levels rather than overflow its 16-bit
  // sums.
  ThreadScope one(1);
  const std::int64_t in = 512, out = 96;
  const Tensor w = random_tensor({out, in}, 11);
  QuantizedWeight q;
  q.type = DType::i8;
  q.levels = 127;
  q.values = Tensor({out, in}, DType::i8);
  q.scales = Tensor({out});
  Tensor widened({out, in});
  auto* v = static_cast<std::int8_t*>(q.values.raw());
  for (std::int64_t n = 0; n < out; ++n) {
    float amax = 0.0f;
    for (std::int64_t k = 0; k < in; ++k) amax = std::max(amax, std::fabs(w.f32()[n * in + k]));
    q.scales.f32()[n] = amax / 127.0f;
    for (std::int64_t k = 0; k < in; ++k) {
      v[n * in + k] =
          static_cast<std::int8_t>(std::lround(w.f32()[n * in + k] / q.scales.f32()[n]));
      widened.f32()[n * in + k] = v[n * in + k] * q.scales.f32()[n];
    }
  }
  // Inputs all of one sign and large: the sums a 16-bit accumulator would saturate on.
  Tensor x({3, in});
  for (std::int64_t i = 0; i < x.numel(); ++i)
    x.f32()[i] = 1.0f + 0.001f * static_cast<float>(i % 7);
  const std::vector<float> got = forward(Linear::quantized({&q, 1}, {}, Activation::none, "w"), x);
  const std::vector<float> exact = forward(Linear(widened), x);
  double worst = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - exact[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(exact[i])));
  }
  INFO("int8 levels here " << int8_weight_levels() << ", max |error| " << worst << " of max |y| "
                           << scale);
  CHECK(worst <= 0.05 * scale);
}

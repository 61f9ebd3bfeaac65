#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

#include "masque/error.hpp"
#include "masque/layers.hpp"
#include "masque/threading.hpp"
#include "reference.hpp"

using namespace masque;
using masque::test::random_tensor;
using masque::test::reference_linear;
using masque::test::relative_error;
using masque::test::transpose;

namespace {

constexpr double kTol = 1e-5;

Tensor to_bf16(const Tensor& t) {
  Tensor h(t.shape(), DType::bf16);
  round_to_bf16(t.f32(), t.numel(), static_cast<std::uint16_t*>(h.raw()));
  return h;
}

}  // namespace

TEST_CASE("Linear matches x W^T + b for nn.Linear and Conv1D layouts", "[numerics][linear]") {
  const std::int64_t in = 48, out = 80;
  Tensor w = random_tensor({out, in}, 21, 0.2f), b = random_tensor({out}, 22);
  for (Activation a : {Activation::none, Activation::relu, Activation::gelu, Activation::gelu_tanh,
                       Activation::silu}) {
    Linear linear(w, b, {.activation = a});
    Linear conv1d(transpose(w), b, {.activation = a, .layout = WeightLayout::in_out});
    Linear no_bias(w, Tensor(), {.activation = a});
    CHECK(linear.in_features() == in);
    CHECK(linear.out_features() == out);
    CHECK(conv1d.in_features() == in);
    for (std::int64_t rows : {1, 3, 17, 64, 130}) {
      INFO("activation " << to_string(a) << ", rows " << rows);
      Tensor x = random_tensor({rows, in}, 23 + static_cast<std::uint32_t>(rows));
      const auto want = reference_linear(x, w, b, a);
      Tensor y;
      linear.forward(x, y);
      REQUIRE(y.shape() == Shape{rows, out});
      CHECK(relative_error(y, want) <= kTol);
      conv1d.forward(x, y);
      CHECK(relative_error(y, want) <= kTol);
      no_bias.forward(x, y);
      CHECK(relative_error(y, reference_linear(x, w, Tensor(), a)) <= kTol);
    }
  }
}

TEST_CASE("Linear keeps leading dimensions and reuses its output buffer", "[numerics][linear]") {
  Tensor w = random_tensor({16, 8}, 31);
  Linear linear(w);
  Tensor x = random_tensor({2, 5, 8}, 32), y;
  linear.forward(x, y);
  CHECK(y.shape() == Shape{2, 5, 16});
  const void* buffer = y.raw();
  Tensor x2 = random_tensor({2, 3, 8}, 33);
  linear.forward(x2, y);
  CHECK(y.shape() == Shape{2, 3, 16});
  CHECK(y.raw() == buffer);
  CHECK(relative_error(y, reference_linear(x2, w, Tensor(), Activation::none)) <= kTol);
  Tensor wrong = random_tensor({4, 7}, 34);
  CHECK_THROWS_AS(linear.forward(wrong, y), RuntimeError);
  CHECK_THROWS_AS(linear.forward(x, x), RuntimeError);
}

TEST_CASE("Linear accepts F16 and BF16 weights", "[numerics][linear]") {
  // Values exactly representable in both half formats.
  Tensor w32({4, 3});
  const float values[] = {0.5f, -1.0f, 2.0f, 0.25f, -0.125f, 1.5f,
                          3.0f, -2.5f, 0.0f, 1.0f,  -0.75f,  4.0f};
  std::copy(values, values + 12, w32.f32());
  Tensor bf16({4, 3}, DType::bf16), f16({4, 3}, DType::f16);
  for (int i = 0; i < 12; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    static_cast<std::uint16_t*>(bf16.raw())[i] = static_cast<std::uint16_t>(bits >> 16);
  }
  const std::uint16_t half_bits[] = {0x3800, 0xBC00, 0x4000, 0x3400, 0xB000, 0x3E00,
                                     0x4200, 0xC100, 0x0000, 0x3C00, 0xBA00, 0x4400};
  std::copy(half_bits, half_bits + 12, static_cast<std::uint16_t*>(f16.raw()));
  Tensor x = random_tensor({2, 3}, 35);
  const auto want = reference_linear(x, w32, Tensor(), Activation::none);
  Tensor y;
  Linear(bf16).forward(x, y);
  CHECK(relative_error(y, want) <= kTol);
  Linear(f16).forward(x, y);
  CHECK(relative_error(y, want) <= kTol);
}

TEST_CASE("Linear::concat fuses projections in order", "[numerics][linear]") {
  Tensor wq = random_tensor({8, 6}, 41), wk = random_tensor({4, 6}, 42),
         wv = random_tensor({4, 6}, 43);
  Tensor bq = random_tensor({8}, 44), bk = random_tensor({4}, 45), bv = random_tensor({4}, 46);
  Tensor x = random_tensor({5, 6}, 47);
  Linear fused = Linear::concat(std::vector<Tensor>{wq, wk, wv}, std::vector<Tensor>{bq, bk, bv});
  Tensor y;
  fused.forward(x, y);
  REQUIRE(y.shape() == Shape{5, 16});
  const auto q = reference_linear(x, wq, bq, Activation::none);
  const auto v = reference_linear(x, wv, bv, Activation::none);
  for (int r = 0; r < 5; ++r) {
    for (int c = 0; c < 8; ++c) CHECK(std::abs(y.f32()[r * 16 + c] - q[r * 8 + c]) < 1e-5);
    for (int c = 0; c < 4; ++c) CHECK(std::abs(y.f32()[r * 16 + 12 + c] - v[r * 4 + c]) < 1e-5);
  }
  // Conv1D pieces [in, out_i] are joined column-wise.
  Linear fused_t =
      Linear::concat(std::vector<Tensor>{transpose(wq), transpose(wk), transpose(wv)},
                     std::vector<Tensor>{bq, bk, bv}, {.layout = WeightLayout::in_out});
  Tensor y2;
  fused_t.forward(x, y2);
  CHECK(relative_error(y2, masque::test::to_double(y)) <= kTol);
}

TEST_CASE("Linear is safe to share between threads with different thread counts",
          "[numerics][linear][threads]") {
  Tensor w = random_tensor({96, 64}, 51, 0.1f), b = random_tensor({96}, 52);
  const Linear linear(w, b, {.activation = Activation::gelu});
  std::vector<Tensor> inputs;
  for (int i = 0; i < 4; ++i) inputs.push_back(random_tensor({7 + 13 * i, 64}, 53 + i));
  std::vector<std::vector<double>> want;
  for (const auto& x : inputs) want.push_back(reference_linear(x, w, b, Activation::gelu));

  std::vector<double> errors(4, 1.0);
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t)
    workers.emplace_back([&, t] {
      ThreadScope scope(t == 3 ? 2 : 1);
      double worst = 0.0;
      Tensor y;
      for (int rep = 0; rep < 20; ++rep)
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          linear.forward(inputs[(i + t) % inputs.size()], y);
          worst = std::max(worst, relative_error(y, want[(i + t) % inputs.size()]));
        }
      errors[t] = worst;
    });
  for (auto& w : workers) w.join();
  for (double e : errors) CHECK(e <= kTol);
}

TEST_CASE("Linear with two intra-op threads matches the reference", "[numerics][linear][threads]") {
  // ~134 MFLOP: large enough for Linear to use both threads.
  Tensor w = random_tensor({512, 512}, 61, 0.05f), b = random_tensor({512}, 62);
  const Linear linear(w, b, {.activation = Activation::silu});
  Tensor x = random_tensor({256, 512}, 63), y;
  {
    ThreadScope scope(2);
    linear.forward(x, y);
  }
  CHECK(relative_error(y, reference_linear(x, w, b, Activation::silu)) <= kTol);
}

// Batching must not change results: a corpus's output may not depend on how its records were
// grouped. (oneDNN's f32 matmul without AVX-512 breaks this for 1-3 row tails; Linear uses its
// 1x1 convolution there.)
TEST_CASE("Linear gives a row the same bits in any batch and with two threads",
          "[numerics][linear][threads]") {
  const std::int64_t in = 768, out = 1024, rows = 200;
  Tensor w = random_tensor({out, in}, 64, 0.05f), b = random_tensor({out}, 65);
  Tensor x = random_tensor({rows, in}, 66);
  const Linear linear(w, b, {.activation = Activation::gelu_tanh});
  const Linear conv1d(transpose(w), b,
                      {.activation = Activation::gelu_tanh, .layout = WeightLayout::in_out});
  Tensor all;
  linear.forward(x, all);
  for (int threads : {1, 2}) {
    ThreadScope scope(threads);
    for (std::int64_t count = 1; count <= 13; ++count) {
      for (std::int64_t begin : {0L, 7L, rows - count}) {
        INFO("threads " << threads << ", rows " << begin << " + " << count);
        Tensor part({count, in}), y;
        std::memcpy(part.f32(), x.f32() + begin * in, part.bytes());
        linear.forward(part, y);
        CHECK(std::memcmp(y.f32(), all.f32() + begin * out, y.bytes()) == 0);
        conv1d.forward(part, y);
        CHECK(std::memcmp(y.f32(), all.f32() + begin * out, y.bytes()) == 0);
      }
    }
    Tensor again;
    linear.forward(x, again);
    CHECK(std::memcmp(again.f32(), all.f32(), all.bytes()) == 0);
  }
}

TEST_CASE("Linear's one-row kernel gives oneDNN's bits for every shape and activation",
          "[numerics][linear][threads]") {
  // Depths that oneDNN sums in one block and in several (its block size depends on the depth),
  // widths with a partial last block of 64 columns, every fused activation.
  struct Shape {
    std::int64_t in, out;
  };
  const Shape shapes[] = {{64, 512}, {100, 70}, {768, 2304}, {1536, 50}, {2304, 130}, {3072, 768}};
  const Activation activations[] = {Activation::none, Activation::gelu_tanh, Activation::gelu,
                                    Activation::silu, Activation::relu};
  // AVX-512 is where oneDNN 2.6 packs f32 weights as BA16a64b (this kernel's input), with AMX
  // too (seen on Xeon family 6 model 207): AMX's tiles are for bf16 and int8 only.
  const bool expect_kernel = dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core ||
                             dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_vnni ||
                             dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_bf16 ||
                             dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_amx;
  std::uint64_t seed = 80;
  for (const Shape& shape : shapes)
    for (const Activation activation : activations) {
      INFO("in " << shape.in << ", out " << shape.out << ", activation "
                 << static_cast<int>(activation));
      Tensor w = random_tensor({shape.out, shape.in}, seed++, 0.05f);
      Tensor b = random_tensor({shape.out}, seed++);
      Tensor x = random_tensor({5, shape.in}, seed++);
      const Linear linear(w, activation == Activation::relu ? Tensor{} : b,
                          {.activation = activation});
      CHECK(linear.streams_one_row() == expect_kernel);
      Tensor all;
      linear.forward(x, all);  // five rows: oneDNN's matmul
      CHECK(
          relative_error(all, reference_linear(x, w, activation == Activation::relu ? Tensor{} : b,
                                               activation)) < kTol);
      for (int threads : {1, 2}) {
        ThreadScope scope(threads);
        for (std::int64_t r = 0; r < 5; ++r) {
          std::vector<float> y(static_cast<std::size_t>(shape.out));
          linear.forward(x.f32() + r * shape.in, 1, y.data());
          CHECK(std::memcmp(y.data(), all.f32() + r * shape.out, sizeof(float) * y.size()) == 0);
        }
      }
    }
}

TEST_CASE("Linear's bf16 one-row kernel gives oneDNN's bits for every shape and activation",
          "[numerics][linear][threads]") {
  if (!bf16_matmul_supported()) return;  // no bf16 matmul on this CPU
  // One part and several (deeper than 1024 inputs, a shorter last one), an odd depth (the last
  // pair half padding), widths with a partial last block of 64 columns.
  struct Shape {
    std::int64_t in, out;
  };
  const Shape shapes[] = {{64, 512}, {101, 70}, {896, 1152}, {2048, 130}, {4864, 200}};
  const Activation activations[] = {Activation::none, Activation::gelu_tanh, Activation::silu};
  // AVX-512 BF16 without AMX is where oneDNN 2.6 packs bf16 weights as BA16a64b2a and sums
  // them with vdpbf16ps; with AMX the kernel is used only if calibration matches its sums.
  const bool expect_kernel = dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_bf16;
  std::uint64_t seed = 180;
  for (const Shape& shape : shapes)
    for (const Activation activation : activations) {
      INFO("in " << shape.in << ", out " << shape.out << ", activation "
                 << static_cast<int>(activation));
      const Tensor w = to_bf16(random_tensor({shape.out, shape.in}, seed++, 0.05f));
      const Tensor b = random_tensor({shape.out}, seed++);
      const Tensor x = random_tensor({5, shape.in}, seed++);
      const Linear linear(w, b, {.activation = activation, .compute = DType::bf16});
      if (expect_kernel) CHECK(linear.streams_one_row());
      Tensor all;
      linear.forward(x, all);  // five rows: oneDNN's matmul
      CHECK(relative_error(all, reference_linear(x, w.to_f32(), b, activation)) < 1e-2);
      for (int threads : {1, 2}) {
        ThreadScope scope(threads);
        for (std::int64_t r = 0; r < 5; ++r) {
          std::vector<float> y(static_cast<std::size_t>(shape.out));
          linear.forward(x.f32() + r * shape.in, 1, y.data());
          CHECK(std::memcmp(y.data(), all.f32() + r * shape.out, sizeof(float) * y.size()) == 0);
        }
      }
    }
}

TEST_CASE("thread counts are per calling thread", "[numerics][threads]") {
  const int before = thread_count();
  {
    ThreadScope scope(2);
    CHECK(thread_count() == 2);
    int seen = 0;
    std::thread([&] {
      set_thread_count(1);
      seen = thread_count();
    }).join();
    CHECK(seen == 1);
    CHECK(thread_count() == 2);
  }
  CHECK(thread_count() == before);
  CHECK_THROWS_AS(set_thread_count(0), ConfigError);
}

TEST_CASE("Linear packs a large BF16 weight slice by slice to its widened weight's bits",
          "[numerics][linear]") {
  // 70,000 features of 64 inputs: more than one 16 MB slice of widened features, and a last
  // slice that is not a multiple of the layout's blocks.
  constexpr std::int64_t kOut = 70000, kIn = 64;
  const Tensor bf16 = to_bf16(random_tensor({kOut, kIn}, 71));
  const Tensor widened = bf16.to_f32();
  const Tensor x = random_tensor({3, kIn}, 72);
  std::vector<DType> types = {DType::f32, DType::i8, DType::i4};
  if (bf16_matmul_supported()) types.push_back(DType::bf16);
  for (const WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
    const bool out_in = layout == WeightLayout::out_in;
    // The [in, out] weight in BF16: exact, its values are bf16 already.
    const Tensor source16 = out_in ? bf16 : to_bf16(transpose(widened));
    const Tensor source32 = source16.to_f32();
    for (const DType type : types) {
      CAPTURE(out_in, to_string(type));
      std::vector<std::size_t> released;
      const LinearOptions options{.layout = layout, .compute = type};
      const Linear from16(source16, Tensor(), options, Int8Policy::always,
                          [&](std::size_t bytes) { released.push_back(bytes); });
      const Linear from32(source32, Tensor(), options);
      Tensor y16, y32;
      from16.forward(x, y16);
      from32.forward(x, y32);
      REQUIRE(y16.shape() == y32.shape());
      CHECK(std::memcmp(y16.raw(), y32.raw(), y16.bytes()) == 0);
      // A weight read in order reports its rows as they are done, never past its end.
      CHECK(std::is_sorted(released.begin(), released.end()));
      for (const std::size_t b : released) CHECK(b <= source16.bytes());
      if (out_in && type != DType::bf16) CHECK(!released.empty());
    }
  }
}

TEST_CASE("Linear::concat keeps BF16 pieces BF16 and gives their widened pieces' bits",
          "[numerics][linear]") {
  const Tensor a = to_bf16(random_tensor({96, 64}, 81)), b = to_bf16(random_tensor({32, 64}, 82));
  const Tensor x = random_tensor({4, 64}, 83);
  CHECK(concat_rows(std::vector<Tensor>{a, b}).dtype() == DType::bf16);
  CHECK(concat_rows(std::vector<Tensor>{a, b.to_f32()}).dtype() == DType::f32);
  for (const WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
    const bool out_in = layout == WeightLayout::out_in;
    auto laid = [&](const Tensor& t) { return out_in ? t : to_bf16(transpose(t.to_f32())); };
    const std::vector<Tensor> halves{laid(a), laid(b)};
    const std::vector<Tensor> floats{halves[0].to_f32(), halves[1].to_f32()};
    Tensor y16, y32;
    Linear::concat(halves, {}, {.layout = layout}).forward(x, y16);
    Linear::concat(floats, {}, {.layout = layout}).forward(x, y32);
    CHECK(std::memcmp(y16.raw(), y32.raw(), y16.bytes()) == 0);
  }
}

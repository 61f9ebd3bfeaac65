// Norm, activation, gated-MLP, rotary and embedding backwards against torch autograd; dropout.
#include <catch2/catch.hpp>

#include <cmath>

#include "masque/error.hpp"
#include "masque/threading.hpp"
#include "masque/train/grad_ops.hpp"
#include "train_support.hpp"

using namespace masque;
using namespace masque::test;

TEST_CASE("train norms: LayerNorm and RMSNorm backward match torch", "[train][norm]") {
  for (const char* name : {"layer_norm", "layer_norm_nobias", "rms_norm"}) {
    INFO(name);
    const auto c = train_fixture(name);
    const std::int64_t rows = c["rows"], n = c["n"];
    const float eps = c["eps"];
    const Tensor x = tensor(c["x"], {rows, n}), w = tensor(c["w"], {n});
    const Tensor dy = tensor(c["dy"], {rows, n});
    Tensor dx, dw = tensor(c["dw0"], {n});
    if (std::string(name) == "rms_norm") {
      train::rms_norm_backward(x, w, eps, dy, dx, dw);
    } else {
      const bool bias = c.contains("b");
      Tensor db = bias ? tensor(c["db0"], {n}) : Tensor();
      train::layer_norm_backward(x, w, eps, dy, dx, dw, bias ? &db : nullptr);
      if (bias) CHECK(relative_error(db.f32(), doubles(c["db"])) < kRelTol);
    }
    CHECK(relative_error(dx.f32(), doubles(c["dx"])) < kRelTol);
    CHECK(relative_error(dw.f32(), doubles(c["dw"])) < kRelTol);
  }
}

TEST_CASE("train activations: GELU (erf, tanh), SiLU, ReLU and SwiGLU backward match torch",
          "[train][activation]") {
  const auto c = train_fixture("activations");
  const auto n = static_cast<std::int64_t>(c["x"].size());
  const Tensor x = tensor(c["x"], {n}), dy = tensor(c["dy"], {n});
  for (auto [name, act] : {std::pair{"relu", Activation::relu},
                           {"gelu", Activation::gelu},
                           {"gelu_tanh", Activation::gelu_tanh},
                           {"silu", Activation::silu}}) {
    INFO(name);
    Tensor dx;
    train::activation_backward(act, x, dy, dx);
    CHECK(relative_error(dx.f32(), doubles(c[name])) < kRelTol);
    Tensor in_place = dy.clone();
    train::activation_backward(act, x, in_place, in_place);
    CHECK(relative_error(in_place.f32(), doubles(c[name])) < kRelTol);
  }
  const Tensor gate = tensor(c["gate"], {7, 24}), up = tensor(c["up"], {7, 24});
  const Tensor dout = tensor(c["dout"], {7, 24});
  Tensor dgate, dup;
  train::swiglu_backward(gate, up, dout, dgate, dup);
  CHECK(relative_error(dgate.f32(), doubles(c["dgate"])) < kRelTol);
  CHECK(relative_error(dup.f32(), doubles(c["dup"])) < kRelTol);
  // The fused layout: rows of [gate | up].
  Tensor fused({7, 48}), dfused;
  for (int r = 0; r < 7; ++r)
    for (int i = 0; i < 24; ++i) {
      fused.f32()[r * 48 + i] = gate.f32()[r * 24 + i];
      fused.f32()[r * 48 + 24 + i] = up.f32()[r * 24 + i];
    }
  train::swiglu_fused_backward(fused, dout, dfused);
  std::vector<float> g, u;
  for (int r = 0; r < 7; ++r) {
    g.insert(g.end(), dfused.f32() + r * 48, dfused.f32() + r * 48 + 24);
    u.insert(u.end(), dfused.f32() + r * 48 + 24, dfused.f32() + r * 48 + 48);
  }
  CHECK(relative_error(g, doubles(c["dgate"])) < kRelTol);
  CHECK(relative_error(u, doubles(c["dup"])) < kRelTol);
}

TEST_CASE("train rotary: the backward rotates back, as torch's autograd of rotate_half",
          "[train][rotary]") {
  const auto c = train_fixture("rotary");
  const std::int32_t rows = c["rows"], heads = c["heads"], d = c["head_dim"];
  const Rotary rotary(d, c["theta"].get<double>(), c["max_positions"], c["rotary_dim"]);
  const std::vector<std::int32_t> positions = ints(c["positions"]);
  Tensor x = tensor(c["x"], {rows, heads * d});
  rotary.apply(x, heads, positions);  // the forward is core's: check the convention first
  CHECK(relative_error(x.f32(), doubles(c["y"])) < kRelTol);
  Tensor dy = tensor(c["dy"], {rows, heads * d});
  train::rotary_backward(rotary, dy, heads, positions);
  CHECK(relative_error(dy.f32(), doubles(c["dx"])) < kRelTol);
}

TEST_CASE("train embeddings: scatter-add in id order matches torch", "[train][embedding]") {
  const auto c = train_fixture("embedding");
  const std::int64_t vocab = c["vocab"], dim = c["dim"];
  const std::vector<std::int32_t> ids = ints(c["ids"]);
  const Tensor dy = tensor(c["dy"], {std::int64_t(ids.size()), dim});
  Tensor dtable = tensor(c["d0"], {vocab, dim});
  train::embedding_backward(ids, dy, dtable);
  CHECK(relative_error(dtable.f32(), doubles(c["dtable"])) < kRelTol);
  const std::vector<std::int32_t> bad{1, 13};
  Tensor dy2({2, dim});
  CHECK_THROWS_AS(train::embedding_backward(bad, dy2, dtable), RecordError);
}

TEST_CASE("train dropout: seeded, thread-independent, rate p, backward uses the same mask",
          "[train][dropout]") {
  const std::int64_t n = (1 << 19) + 3;  // past the parallel threshold, odd tail
  Tensor x({n});
  for (std::int64_t i = 0; i < n; ++i) x.f32()[i] = 1.0f + static_cast<float>(i % 7);
  const train::DropoutKey key{42, 3, 5};
  const float p = 0.1f;
  Tensor y1, y2;
  {
    ThreadScope one(1);
    train::dropout_forward(key, p, x, y1);
  }
  {
    ThreadScope two(2);
    train::dropout_forward(key, p, x, y2);
  }
  REQUIRE(std::equal(y1.f32(), y1.f32() + n, y2.f32()));
  std::int64_t dropped = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const bool keep = train::dropout_uniform(key, i) >= p;
    REQUIRE(y1.f32()[i] == (keep ? x.f32()[i] * (1.0f / (1.0f - p)) : 0.0f));
    dropped += !keep;
  }
  // Binomial(n, 0.1): the standard deviation is ~220; 6 of them is a loose, safe bound.
  CHECK(std::abs(static_cast<double>(dropped) - 0.1 * n) < 6 * std::sqrt(0.09 * n));
  // Another step, tensor or seed gives another mask.
  Tensor other;
  train::dropout_forward({42, 4, 5}, p, x, other);
  CHECK(!std::equal(y1.f32(), y1.f32() + n, other.f32()));
  // Backward: the gradient passes exactly where the forward kept, with the same scale.
  Tensor dx;
  train::dropout_backward(key, p, x, dx);
  CHECK(std::equal(dx.f32(), dx.f32() + n, y1.f32()));
  CHECK_THROWS_WITH(train::dropout_forward(key, 1.0f, x, y1), Catch::Contains("[0, 1)"));
}

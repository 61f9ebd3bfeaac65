// Training Linear (forward, dx, dW +=, db +=) against torch autograd, both weight layouts.
#include <catch2/catch.hpp>

#include "masque/threading.hpp"
#include "masque/train/linear.hpp"
#include "train_support.hpp"

using namespace masque;
using namespace masque::test;

namespace {

void check_case(const std::string& name, int threads) {
  INFO(name << " with " << threads << " thread(s)");
  const auto c = train_fixture(name);
  const std::int64_t rows = c["rows"], in = c["fin"], out = c["fout"];
  const bool out_in = c["layout"] == "out_in";
  const train::LinearShape shape{in, out, out_in ? WeightLayout::out_in : WeightLayout::in_out};
  const Tensor x = tensor(c["x"], {rows, in});
  const Tensor w = tensor(c["w"], out_in ? Shape{out, in} : Shape{in, out});
  const Tensor dy = tensor(c["dy"], {rows, out});
  const bool bias = c["bias"];
  const Tensor b = bias ? tensor(c["b"], {out}) : Tensor();
  ThreadScope scope(threads);

  Tensor y;
  train::linear_forward(shape, x, w, b, y);
  CHECK(relative_error(y.f32(), doubles(c["y"])) < kRelTol);

  Tensor dx, dw = tensor(c["dw0"], w.shape()), db = bias ? tensor(c["db0"], {out}) : Tensor();
  train::linear_backward(shape, x, dy, w, &dx, &dw, bias ? &db : nullptr);
  CHECK(relative_error(dx.f32(), doubles(c["dx"])) < kRelTol);
  CHECK(relative_error(dw.f32(), doubles(c["dw"])) < kRelTol);
  if (bias) CHECK(relative_error(db.f32(), doubles(c["db"])) < kRelTol);
}

}  // namespace

TEST_CASE("train linear: forward and backward match torch autograd", "[train][linear]") {
  for (const char* name :
       {"linear_out_in", "linear_in_out", "linear_wide_nobias", "linear_in_out_one_row"})
    for (int threads : {1, 2}) check_case(name, threads);
}

TEST_CASE("train linear: dW and db accumulate across micro-batches", "[train][linear]") {
  // Two halves of a batch, accumulated, equal the whole batch.
  const auto c = train_fixture("linear_out_in");
  const std::int64_t rows = c["rows"], in = c["fin"], out = c["fout"];
  const train::LinearShape shape{in, out, WeightLayout::out_in};
  const Tensor x = tensor(c["x"], {rows, in}), w = tensor(c["w"], {out, in});
  const Tensor dy = tensor(c["dy"], {rows, out});
  Tensor dw = tensor(c["dw0"], {out, in}), db = tensor(c["db0"], {out});
  const std::int64_t half = rows / 2;
  train::linear_backward(shape, x.f32(), dy.f32(), half, w.f32(), nullptr, dw.f32(), db.f32());
  train::linear_backward(shape, x.f32() + half * in, dy.f32() + half * out, rows - half, w.f32(),
                         nullptr, dw.f32(), db.f32());
  CHECK(relative_error(dw.f32(), doubles(c["dw"])) < kRelTol);
  CHECK(relative_error(db.f32(), doubles(c["db"])) < kRelTol);
}

TEST_CASE("train linear: a weight changed in place is read afresh", "[train][linear]") {
  // Primitives are cached per shape, never the weight: an optimizer step must be seen.
  const train::LinearShape shape{3, 2, WeightLayout::out_in};
  std::vector<float> x{1, 2, 3}, w{1, 0, 0, 0, 1, 0}, y(2);
  train::linear_forward(shape, x.data(), 1, w.data(), nullptr, y.data());
  CHECK(y == std::vector<float>{1, 2});
  w = {0, 0, 1, 1, 1, 1};
  train::linear_forward(shape, x.data(), 1, w.data(), nullptr, y.data());
  CHECK(y == std::vector<float>{3, 6});
}

TEST_CASE("train linear: bad shapes are clear errors", "[train][linear]") {
  const train::LinearShape shape{4, 3, WeightLayout::out_in};
  Tensor x({2, 5}), w({3, 4}), y;
  CHECK_THROWS_WITH(train::linear_forward(shape, x, w, Tensor(), y),
                    Catch::Contains("does not have 4 features"));
}

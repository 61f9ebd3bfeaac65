// Fused softmax cross-entropy (ignore_index, caller's count, label smoothing) against torch.
#include <catch2/catch.hpp>

#include "masque/error.hpp"
#include "masque/train/loss.hpp"
#include "train_support.hpp"

using namespace masque;
using namespace masque::test;

TEST_CASE("train loss: cross-entropy and its gradient match torch", "[train][loss]") {
  for (const char* name : {"ce_plain", "ce_smoothing", "ce_large_logits"}) {
    INFO(name);
    const auto c = train_fixture(name);
    const std::int64_t rows = c["rows"], vocab = c["vocab"];
    const Tensor logits = tensor(c["logits"], {rows, vocab});
    const std::vector<std::int32_t> targets = ints(c["targets"]);
    train::CrossEntropyOptions o;
    o.label_smoothing = c["smoothing"];
    Tensor d;
    const auto r = train::cross_entropy(logits, targets, c["count"].get<double>(), o, &d);
    CHECK(r.counted == c["counted"].get<std::int64_t>());
    CHECK(r.loss == Approx(c["loss"].get<double>()).epsilon(kRelTol));
    CHECK(r.loss_sum == Approx(c["loss_sum"].get<double>()).epsilon(kRelTol));
    CHECK(relative_error(d.f32(), doubles(c["dlogits"])) < kRelTol);
    // In place over the logits, and loss only: the same numbers.
    Tensor inplace = logits.clone();
    const auto r2 = train::cross_entropy(inplace, targets, c["count"].get<double>(), o, &inplace);
    CHECK(r2.loss == r.loss);
    CHECK(std::equal(d.f32(), d.f32() + d.numel(), inplace.f32()));
    CHECK(train::cross_entropy(logits, targets, c["count"].get<double>(), o, nullptr).loss ==
          r.loss);
  }
}

TEST_CASE("train loss: a target outside the vocabulary names its row", "[train][loss]") {
  Tensor logits = Tensor::zeros({2, 4});
  const std::vector<std::int32_t> targets{1, 4};
  CHECK_THROWS_WITH(train::cross_entropy(logits, targets, 2.0, {}, nullptr),
                    Catch::Contains("row 1 has target 4"));
}

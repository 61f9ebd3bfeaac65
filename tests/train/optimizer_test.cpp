// AdamW against torch.optim.AdamW, schedules against Hugging Face's formulas under LambdaLR,
// clipping against clip_grad_norm_, and the fixed-order gradient sum.
#include <catch2/catch.hpp>

#include <sstream>

#include "masque/error.hpp"
#include "masque/threading.hpp"
#include "masque/train/optimizer.hpp"
#include "masque/train/schedule.hpp"
#include "train_support.hpp"

using namespace masque;
using namespace masque::test;

TEST_CASE("train AdamW: six steps match torch.optim.AdamW, and the state round-trips",
          "[train][adamw]") {
  const auto c = train_fixture("adamw");
  std::vector<float> w = floats(c["init"]["w"]), b = floats(c["init"]["b"]);
  const std::vector<std::int64_t> sizes{std::int64_t(w.size()), std::int64_t(b.size())};
  train::AdamWOptions o;
  o.beta1 = c["beta1"];
  o.beta2 = c["beta2"];
  o.eps = c["eps"];
  o.weight_decay = c["weight_decay"];
  train::AdamW adam(o, sizes);
  std::string saved;
  int step_no = 0;
  for (const auto& s : c["steps"]) {
    INFO("step " << step_no);
    const std::vector<float> gw = floats(s["gw"]), gb = floats(s["gb"]);
    const train::Parameter params[] = {{w.data(), gw.data(), sizes[0], true},
                                       {b.data(), gb.data(), sizes[1], false}};
    adam.step(params, s["lr"].get<double>());
    CHECK(relative_error(w, doubles(s["w"])) < kRelTol);
    CHECK(relative_error(b, doubles(s["b"])) < kRelTol);
    if (++step_no == 3) {
      std::ostringstream out;
      adam.save(out);
      saved = out.str();
    }
  }
  CHECK(adam.steps() == 6);
  CHECK(relative_error(std::vector<float>(adam.exp_avg(0).begin(), adam.exp_avg(0).end()),
                       doubles(c["m_w"])) < kRelTol);
  CHECK(relative_error(std::vector<float>(adam.exp_avg_sq(1).begin(), adam.exp_avg_sq(1).end()),
                       doubles(c["v_b"])) < kRelTol);
  std::istringstream in(saved);
  const train::AdamW restored = train::AdamW::load(in, sizes);
  CHECK(restored.steps() == 3);
  CHECK(restored.options().beta2 == o.beta2);
  std::istringstream truncated(saved.substr(0, saved.size() - 5));
  CHECK_THROWS_WITH(train::AdamW::load(truncated, sizes), Catch::Contains("truncated"));
  std::istringstream again(saved);
  const std::vector<std::int64_t> other{sizes[0], sizes[1] + 1};
  CHECK_THROWS_WITH(train::AdamW::load(again, other), Catch::Contains("parameter 1 has"));
}

TEST_CASE("train schedules: Hugging Face's values at each optimizer step", "[train][schedule]") {
  const auto c = train_fixture("schedules");
  for (const auto& s : c["cases"]) {
    train::Schedule schedule;
    schedule.kind = train::parse_schedule(s["kind"].get<std::string>());
    schedule.base_lr = s["base_lr"];
    schedule.warmup_steps = s["warmup"];
    schedule.total_steps = s["total"];
    const std::vector<double> lrs = doubles(s["lrs"]);
    for (std::size_t step = 0; step < lrs.size(); ++step) {
      INFO(s["kind"].get<std::string>() << " warmup " << schedule.warmup_steps << " step " << step);
      CHECK(schedule.lr(static_cast<std::int64_t>(step)) ==
            Approx(lrs[step]).epsilon(1e-12).margin(1e-18));
    }
  }
  CHECK_THROWS_AS(train::parse_schedule("exponential"), ConfigError);
}

TEST_CASE("train clipping: clip_grad_norm_'s norm and coefficient", "[train][clip]") {
  const auto c = train_fixture("clip");
  for (const auto& s : c["cases"]) {
    std::vector<std::vector<float>> grads;
    for (const auto& g : s["grads"]) grads.push_back(floats(g));
    std::vector<std::span<float>> spans(grads.begin(), grads.end());
    const double norm = train::clip_grad_norm(spans, s["max_norm"].get<double>());
    CHECK(norm == Approx(s["norm"].get<double>()).epsilon(1e-12));
    for (std::size_t i = 0; i < grads.size(); ++i)
      CHECK(relative_error(grads[i], doubles(s["clipped"][i])) < kRelTol);
  }
}

TEST_CASE("train clipping fused into AdamW: the same weights as clipping first, bit for bit",
          "[train][clip][adamw]") {
  const std::int64_t n = 1000;
  std::vector<float> w(n), w_fused;
  for (std::int64_t i = 0; i < n; ++i) w[i] = static_cast<float>((i * 37) % 101) * 0.01f - 0.5f;
  w_fused = w;
  const std::vector<std::int64_t> sizes{n};
  train::AdamW clip_first(train::AdamWOptions{}, sizes), fused(train::AdamWOptions{}, sizes);
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    std::vector<float> g(n);  // this step's gradient, its norm far above 1: clipped
    for (std::int64_t i = 0; i < n; ++i)
      g[i] = static_cast<float>((i * 53 + step * 11) % 97) * 0.3f - 14.0f;
    std::vector<float> g_fused = g;
    const std::vector<std::span<float>> grads{std::span<float>(g)};
    const double norm = train::clip_grad_norm(grads, 1.0);
    const train::Parameter p[] = {{w.data(), g.data(), n, true}};
    clip_first.step(p, 1e-2);
    const std::vector<std::span<float>> unclipped{std::span<float>(g_fused)};
    const double total = train::grad_norm(unclipped);
    CHECK(total == norm);
    const float coef = train::clip_coefficient(total, 1.0);
    CHECK(coef < 1.0f);
    const train::Parameter q[] = {{w_fused.data(), g_fused.data(), n, true}};
    fused.step(q, 1e-2, coef);
    CHECK(w_fused == w);
  }
  CHECK(train::clip_coefficient(300.0, 0.0) == 1.0f);  // no clipping asked
  CHECK(train::clip_coefficient(0.5, 1.0) == 1.0f);    // within the bound
}

TEST_CASE("train reduction: micro-batch gradients summed in a fixed order", "[train][reduce]") {
  const std::int64_t n = (1 << 22) + 5;  // past the parallel threshold
  std::vector<std::vector<float>> parts(3, std::vector<float>(n));
  for (std::size_t p = 0; p < parts.size(); ++p)
    for (std::int64_t i = 0; i < n; ++i)
      parts[p][i] = static_cast<float>((i * 7 + p * 13) % 101) * 0.1f + (p == 1 ? 1e7f : 0.0f);
  const float* ptrs[] = {parts[0].data(), parts[1].data(), parts[2].data()};
  std::vector<float> one(n), two(n);
  {
    ThreadScope s(1);
    train::sum_in_order(ptrs, n, one.data());
  }
  {
    ThreadScope s(2);
    train::sum_in_order(ptrs, n, two.data());
  }
  CHECK(one == two);
  for (std::int64_t i : {std::int64_t{0}, n / 2, n - 1})
    CHECK(one[i] == (parts[0][i] + parts[1][i]) + parts[2][i]);
}

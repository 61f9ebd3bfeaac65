// rnn-seq2seq with matmul_dtype=bf16 against the float64 torch reference (reference_rnn.py):
// close at bfloat16's ~3 significant digits, and visibly not f32; a clear error where the CPU
// has no bf16 kernels.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "rnn_support.hpp"

using namespace masque;
using namespace masque::test::rnn;

namespace {

// Measured on the fixtures (AMD Zen 4, AVX-512 BF16): worst |log p - reference| 4.6e-3 and
// 9.5e-3 (LSTM), 2.9e-2 and 1.7e-2 (GRU); only the products' inputs and weights are rounded
// (states stay f32). f32 stays below 1e-5. The bound leaves bf16 a margin and fails a broken
// conversion of a state or of the weights (those move log-probs by 1 and more).
constexpr double kBf16Tolerance = 1e-1;
constexpr double kNotF32 = 1e-5;

}  // namespace

TEST_CASE("rnn-seq2seq bf16: teacher-forced log-probs near the float64 torch reference",
          "[rnn][bf16]") {
  if (!test::cpu_has_bf16_matmuls()) {  // without AVX-512: a clear error at load
    CHECK_THROWS_WITH(load_model("lstm-bahdanau", "bf16"),
                      Catch::Contains("matmul_dtype=bf16 needs a CPU with AVX-512"));
    return;
  }
  for (const std::string& name : fixture_names()) {
    const double worst = worst_teacher_forced(name, "bf16");
    std::printf("%s bf16: worst |log p - reference| %.2e\n", name.c_str(), worst);
    INFO(name << ": worst |log p - reference| = " << worst);
    CHECK(worst > kNotF32);  // the products did run in bf16
    CHECK(worst < kBf16Tolerance);
  }
}

// rnn-seq2seq with matmul_dtype=int8 against the float64 torch reference (reference_rnn.py's
// wide fixtures, whose products pass libmasque's int8 rule): close at int8's ~2 significant
// digits, and visibly not f32.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "rnn_support.hpp"

using namespace masque;
using namespace masque::test::rnn;

namespace {

// Measured on the wide fixtures (AMD Zen 4, AVX-512 VNNI): worst |log p - reference| 3.4e-2
// (LSTM) and 1.0e-1 (GRU, whose hidden state is the one state, requantized every step; running
// its recurrent product in f32 gave 9.2e-2: the error comes from the inputs and projections);
// f32 stays below 1e-5 on them. The bound leaves int8 a margin and fails a wrong scale of a row
// or of a weight column (those move log-probs by 1 and more).
constexpr double kInt8Tolerance = 2.5e-1;
constexpr double kF32Tolerance = 1e-5;

}  // namespace

TEST_CASE("rnn-seq2seq int8: teacher-forced log-probs near the float64 torch reference",
          "[rnn][int8]") {
  for (const std::string& name : wide_fixture_names()) {
    const double f32 = worst_teacher_forced(name, "f32");
    const double int8 = worst_teacher_forced(name, "int8");
    std::printf("%s: worst |log p - reference| f32 %.2e, int8 %.2e\n", name.c_str(), f32, int8);
    INFO(name << ": worst |log p - reference| f32 " << f32 << ", int8 " << int8);
    CHECK(f32 < kF32Tolerance);   // the wide fixture itself is right
    CHECK(int8 > kF32Tolerance);  // the products did run in int8
    CHECK(int8 < kInt8Tolerance);
  }
}

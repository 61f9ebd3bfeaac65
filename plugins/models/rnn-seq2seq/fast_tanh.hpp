// A tanh the compiler vectorizes, for the attention's rows x positions x size scores.
#pragma once

#include "masque/vectorize.hpp"

namespace masque::rnn {

// tanh as a branch-free rational function that the compiler vectorizes (Eigen's float tanh:
// a 13/6 odd/even polynomial ratio on [-7.99, 7.99], within a few ulp of std::tanh). Bahdanau
// scores take rows x source positions x attention-size tanh per step: std::tanh, one call per
// element, was most of a decoding step.
inline float fast_tanh(float x) {
  // Clamped by value: std::clamp selects between references, which GCC leaves as branches.
  x = x < -7.99881172180175781f ? -7.99881172180175781f : x;
  x = x > 7.99881172180175781f ? 7.99881172180175781f : x;
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return p / q;
}

}  // namespace masque::rnn

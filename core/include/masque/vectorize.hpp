// MASQUE_VECTORIZE: compile a hot element-wise loop again for AVX-512 and AVX2+FMA and pick the
// version at load time (GCC function multiversioning). libmasque and its plugins are built for
// baseline x86-64; put the attribute on a function whose loop is branch-free, so that it
// vectorizes. A loop with comparisons (clamps, selects) also needs the file compiled with
// -fno-trapping-math, as libmasque's numerics are (core/CMakeLists.txt), or GCC keeps them as
// branches; pointers the loop writes through may need __restrict__. Empty where the compiler or a
// sanitizer build cannot use it.
#pragma once

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define MASQUE_VECTORIZE \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MASQUE_VECTORIZE
#endif

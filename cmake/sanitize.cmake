# Initial cache (cmake -C) of the one sanitizer build, ./build-asan: the ASan + UBSan test suite
# (scripts/test.sh --sanitize) and the libFuzzer targets (tests/fuzz/run.sh) share its objects,
# so CI compiles the project twice (Release, this), not three times.
#
# clang 14 rather than GCC: libFuzzer needs it, and it compiled instrumented files in 0.4-0.65
# of GCC 12's time (pipeline.cpp 7.3 s against 11.5 s, train/network.cpp 4.8 s against 9.1 s,
# a plugin 4.1 s against 8.6 s, on Zen 3), about what GCC takes for the same file in Release.
# -fsanitize=fuzzer-no-link: libmasque and the plugins report coverage to the fuzzers; in the
# test executables nothing reads the counters.
set(CMAKE_CXX_COMPILER clang++-14 CACHE STRING "")
set(CMAKE_CXX_FLAGS "-fsanitize=fuzzer-no-link" CACHE STRING "")
set(MASQUE_SANITIZE ON CACHE BOOL "")
set(MASQUE_FUZZ ON CACHE BOOL "")
set(MASQUE_BUILD_BENCH OFF CACHE BOOL "")

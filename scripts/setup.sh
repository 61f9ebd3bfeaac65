#!/usr/bin/env bash
# Installs every Debian package masque needs (quiet and quick when they are already there) and
# builds what running masque needs (the CLI, libmasque and the plugins: the `runtime` target)
# into ./build (Release). Idempotent: run it again after a pull. scripts/test.sh builds the rest.
#
#   scripts/setup.sh                       install packages, configure, build the runtime
#   BUILD_TARGET=all scripts/setup.sh      ... and the tests and benchmarks too
#   scripts/setup.sh --sanitize            the ASan + UBSan build (clang) in ./build-asan, which
#                                          the sanitizer suite and the fuzzers share
#                                          (cmake/sanitize.cmake)
#
# Compiles go through ccache (Debian's) when it is installed, so a rebuild after a pull or a
# second build directory recompiles only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake ninja-build pkg-config git ccache
  libdnnl-dev ocl-icd-opencl-dev  # dnnl-config.cmake looks for OpenCL (only Recommended)
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  libyaml-cpp-dev libicu-dev catch2 nlohmann-json3-dev libsentencepiece-dev sentencepiece
  zlib1g-dev libzstd-dev zstd  # .gz and .zst corpora (zstd: the tests' reference tool)
  clang libclang-rt-14-dev libomp-dev  # tests/fuzz: libFuzzer, and OpenMP for clang
  python3 python3-numpy python3-torch
  python3-onnx  # bench/encoders: checks the ONNX files export_onnx.py writes, builds the int8 graph
  python3-jinja2  # the reference renderer of the chat-template tests (tests/chat)
  openmpi-bin libopenmpi-dev  # optional at build time: mpirun masque run (docs/scale-out.md)
  pocketsphinx-en-us  # the CMU Pronouncing Dictionary for the G2P experiment (docs/g2p.md)
  libcld2-dev  # CLD2, the language-identification peer of bench/langid (docs/langid.md)
  lintian man-db bash-completion  # checking the Debian package (scripts/package.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "${1:-}" = "--sanitize" ]; then
  BUILD_DIR=build-asan BUILD_TYPE=RelWithDebInfo
  CMAKE_ARGS="-C cmake/sanitize.cmake ${CMAKE_ARGS:-}"
fi
BUILD_DIR=${BUILD_DIR:-build}
launcher=()
# pch_defines, time_macros: ccache's conditions for caching files built with a precompiled header.
command -v ccache >/dev/null && launcher=(
  "-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_SLOPPINESS=pch_defines,time_macros;ccache")
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "${launcher[@]}" \
  ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${BUILD_TARGET:-runtime}"

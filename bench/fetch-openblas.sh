#!/bin/sh
# Unpacks Debian's OpenBLAS (libopenblas0-pthread) into BUILD_DIR/openblas, without installing
# it: the benchmarks then run PyTorch on it through LD_LIBRARY_PATH, while every other program
# keeps the system's libblas.so.3. Debian's PyTorch runs its float matmuls on whatever
# libblas.so.3 the loader finds; without OpenBLAS that is the reference BLAS (libblas3).
#
#   bench/fetch-openblas.sh [BUILD_DIR]          unpack (once) and print the library directory
#   bench/fetch-openblas.sh --find [BUILD_DIR]   only print it: $OPENBLAS_DIR when set, else the
#                                                unpacked one; exit 1 when it has no libblas.so.3
#   bench/fetch-openblas.sh --coretype LIB_DIR   the OPENBLAS_CORETYPE a benchmark should export
#                                                for this OpenBLAS on this CPU; exit 1 when none
# OpenBLAS 0.3.21 (Debian 12) does not know newer CPUs (e.g. Xeon family 6 model 207) and runs
# its Prescott (SSE3) kernels there, several times slower than the AVX-512 ones the CPU can
# run: --coretype then names the newest kernels the CPU's flags allow, so the peer is not
# handicapped. A CPU it knows, or OPENBLAS_CORETYPE already set, needs nothing.
# (BUILD_DIR defaults to build.) The benchmarks' run.sh scripts find OpenBLAS through --find.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
find_only=no
if [ "${1:-}" = --find ]; then
  find_only=yes
  shift
fi
if [ "${1:-}" = --coretype ]; then
  [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -e "${2:-}/libblas.so.3" ] || exit 1
  core=$(/usr/bin/python3 -c 'import ctypes, sys
blas = ctypes.CDLL(sys.argv[1] + "/libblas.so.3")
blas.openblas_get_corename.restype = ctypes.c_char_p
print(blas.openblas_get_corename().decode())' "$2" 2>/dev/null) || exit 1
  [ "$core" = Prescott ] || exit 1
  flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
  case "$flags" in
  *" avx512_bf16 "*) type=Cooperlake ;;
  *" avx512bw "*) type=SkylakeX ;;
  *" avx2 "*) type=Haswell ;;
  *) exit 1 ;;
  esac
  echo "fetch-openblas.sh: OpenBLAS does not know this CPU and would run its Prescott (SSE3)" \
    "kernels: OPENBLAS_CORETYPE=$type" >&2
  echo "$type"
  exit 0
fi
build=${1:-$root/build}
dest="$build/openblas"
lib="$dest/usr/lib/x86_64-linux-gnu/openblas-pthread"
if [ "$find_only" = yes ]; then
  dir=${OPENBLAS_DIR:-$lib}
  [ -e "$dir/libblas.so.3" ] || exit 1
  echo "$dir"
  exit 0
fi
if [ -e "$lib/libblas.so.3" ]; then
  echo "$lib"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# (apt warns that it downloads as root into a folder its _apt user cannot read: harmless)
(cd "$work" && apt-get download libopenblas0-pthread >"$work/log" 2>&1) ||
  { cat "$work/log" >&2; echo "fetch-openblas.sh: apt-get download libopenblas0-pthread failed" >&2; exit 1; }
mkdir -p "$dest"
dpkg -x "$work"/libopenblas0-pthread_*.deb "$dest"
[ -e "$lib/libblas.so.3" ] || { echo "fetch-openblas.sh: no libblas.so.3 in the package" >&2; exit 1; }
echo "$lib"

#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -fsanitize=fuzzer,address,undefined, in ./build-fuzz) and
# runs each one for SECONDS (default 60), then prints per target: executions, executions/s,
# coverage (cov = covered edges, ft = features, from libFuzzer's last status line) and findings.
#
#   tests/fuzz/run.sh [SECONDS]              all targets, one after the other
#   FUZZ_JOBS=2 tests/fuzz/run.sh 600        two targets at a time (one core each)
#   FUZZ_TARGETS="records pipeline" tests/fuzz/run.sh 30
#
# New inputs go to build-fuzz/corpus/TARGET (the seeds in tests/fuzz/corpus/TARGET are only
# read); crashes, timeouts and out-of-memory inputs to build-fuzz/findings/TARGET/. Fix each
# finding and add its input to tests/fuzz/corpus/TARGET (CTest's "fuzz replay" tests run every
# corpus file once in the normal and the sanitizer builds). Exit status 1 when anything was found.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-60}
jobs=${FUZZ_JOBS:-1}
build=build-fuzz
targets=${FUZZ_TARGETS:-safetensors config_json pipeline tokenizers records plugin_file tokenizer_json}

launcher=()
command -v ccache >/dev/null && launcher=(
  "-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_SLOPPINESS=pch_defines,time_macros;ccache")
# clang++-14 by name: Debian's clang 14 is what libclang-rt-14-dev (libFuzzer) belongs to.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$(command -v clang++-14 || command -v clang++)" "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" \
  -DMASQUE_FUZZ=ON -DMASQUE_SANITIZE=ON -DMASQUE_BUILD_TESTS=OFF -DMASQUE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target fuzzers

# Leaks are findings here (unlike in the test suite): an input that leaks leaks per record.
export ASAN_OPTIONS="abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"

run_one() {
  local t=$1
  mkdir -p "$build/corpus/$t" "$build/findings/$t" "$build/logs"
  # -timeout: an input that takes this long counts as a hang; -rss_limit_mb: as a memory blowup.
  "$build/bin/fuzz_$t" "$build/corpus/$t" "tests/fuzz/corpus/$t" \
    -max_total_time="$seconds" -print_final_stats=1 -timeout=25 -rss_limit_mb=2560 \
    -artifact_prefix="$build/findings/$t/" >"$build/logs/$t.log" 2>&1 || true
}

mkdir -p "$build/logs"
touch "$build/logs/.start"  # findings newer than this are this run's
running=0
for t in $targets; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

status=0
printf '%-12s %8s %10s %8s %7s %7s %8s  %s\n' target seconds execs execs/s cov ft rss_mb findings
for t in $targets; do
  log="$build/logs/$t.log"
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  # A crash prints the final stats twice: take the first.
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | head -1)
  rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log" | head -1)
  rss=$(sed -nE 's/^stat::peak_rss_mb: *([0-9]+)/\1/p' "$log" | head -1)
  found=$(find "$build/findings/$t" -type f -newer "$build/logs/.start" | wc -l)
  [ "$found" -eq 0 ] || status=1
  printf '%-12s %8s %10s %8s %7s %7s %8s  %s\n' "$t" "$seconds" "${execs:-?}" "${rate:-?}" \
    "${cov:-?}" "${ft:-?}" "${rss:-?}" "$found"
done
[ "$status" -eq 0 ] || echo "findings: $build/findings/ (logs in $build/logs/)" >&2
exit "$status"

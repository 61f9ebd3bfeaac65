#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -fsanitize=fuzzer,address,undefined, in ./build-asan) and
# runs each one for SECONDS (default 60), then prints per target: executions, executions/s,
# coverage (cov = covered edges, ft = features, from libFuzzer's last status line) and findings.
#
#   tests/fuzz/run.sh [SECONDS]              all targets, one after the other
#   FUZZ_JOBS=2 tests/fuzz/run.sh 600        two targets at a time (one core each)
#   FUZZ_TARGETS="records pipeline" tests/fuzz/run.sh 30
#
# New inputs go to build-asan/fuzz/corpus/TARGET (the seeds in tests/fuzz/corpus/TARGET are only
# read); crashes, timeouts and out-of-memory inputs to build-asan/fuzz/findings/TARGET/. Fix each
# finding and add its input to tests/fuzz/corpus/TARGET (CTest's "fuzz replay" tests run every
# corpus file once in the normal and the sanitizer builds). Exit status 1 when anything was found.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-60}
jobs=${FUZZ_JOBS:-1}
build=build-asan
out=$build/fuzz
targets=${FUZZ_TARGETS:-safetensors config_json pipeline tokenizers records plugin_file tokenizer_json grammar}

# The sanitizer build (cmake/sanitize.cmake: clang 14, ASan + UBSan, libFuzzer's coverage), the
# one scripts/test.sh --sanitize runs the suite in: after that suite nothing is left to compile.
BUILD_TARGET=fuzzers scripts/setup.sh --sanitize

# Leaks are findings here (unlike in the test suite): an input that leaks leaks per record.
export ASAN_OPTIONS="abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"

run_one() {
  local t=$1
  mkdir -p "$out/corpus/$t" "$out/findings/$t" "$out/logs"
  # -timeout: an input that takes this long counts as a hang; -rss_limit_mb: as a memory blowup.
  "$build/bin/fuzz_$t" "$out/corpus/$t" "tests/fuzz/corpus/$t" \
    -max_total_time="$seconds" -print_final_stats=1 -timeout=25 -rss_limit_mb=2560 \
    -artifact_prefix="$out/findings/$t/" >"$out/logs/$t.log" 2>&1 || true
}

mkdir -p "$out/logs"
touch "$out/logs/.start"  # findings newer than this are this run's
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
  log="$out/logs/$t.log"
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  # A crash prints the final stats twice: take the first.
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | head -1)
  rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log" | head -1)
  rss=$(sed -nE 's/^stat::peak_rss_mb: *([0-9]+)/\1/p' "$log" | head -1)
  found=$(find "$out/findings/$t" -type f -newer "$out/logs/.start" | wc -l)
  [ "$found" -eq 0 ] || status=1
  printf '%-12s %8s %10s %8s %7s %7s %8s  %s\n' "$t" "$seconds" "${execs:-?}" "${rate:-?}" \
    "${cov:-?}" "${ft:-?}" "${rss:-?}" "$found"
done
[ "$status" -eq 0 ] || echo "findings: $out/findings/ (logs in $out/logs/)" >&2
exit "$status"

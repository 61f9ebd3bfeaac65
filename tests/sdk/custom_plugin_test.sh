#!/usr/bin/env bash
# The SDK end to end, as a plugin author uses it:
#  1. `cmake --install` masque into a temporary prefix;
#  2. configure and build examples/custom-plugin against it with find_package(masque);
#  3. through the installed CLI, with MASQUE_PLUGIN_PATH at the example's build: the plugins
#     are listed and documented, the sliding-window mask has exactly its documented pattern and
#     changes lm-score's nll exactly when the window hides part of a scored prefix, and the
#     min-p decoder is reproducible and greedy at min_p = 1;
#  4. `cmake --install` the example (into masque's plugin directory by default, or where
#     MASQUE_PLUGIN_INSTALL_DIR says), move the whole prefix elsewhere and check that the
#     relocated masque still finds its library and every plugin.
source "$(dirname "$0")/sdk_common.sh"

prefix=$work/prefix
example_build=$work/example-build
stories=$MASQUE_SHARED_DIR/models/stories260k
example=$MASQUE_SOURCE_DIR/examples/custom-plugin

# Python reads the JSON outputs (python3 is a masque build dependency, see scripts/setup.sh).
json_check() {
  python3 - "$@" || fail "JSON check failed: $1"
}

build_example() {
  step "configure and build examples/custom-plugin against $prefix"
  local gen=()
  [ -n "${MASQUE_CMAKE_GENERATOR:-}" ] && gen=(-G "$MASQUE_CMAKE_GENERATOR")
  [ -n "${MASQUE_MAKE_PROGRAM:-}" ] && gen+=(-DCMAKE_MAKE_PROGRAM="$MASQUE_MAKE_PROGRAM")
  "$MASQUE_CMAKE" -S "$example" -B "$example_build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="$MASQUE_CXX" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/configure.log" 2>&1 ||
    fail "configuring the example failed: $(cat "$work/configure.log")"
  grep -qx "masque_DIR:PATH=$prefix/lib/cmake/masque" "$example_build/CMakeCache.txt" ||
    fail "find_package(masque) did not use $prefix: $(grep masque_DIR "$example_build/CMakeCache.txt")"
  "$MASQUE_CMAKE" --build "$example_build" >"$work/build.log" 2>&1 ||
    fail "building the example failed: $(cat "$work/build.log")"
  if grep -q "warning:" "$work/build.log"; then fail "the example builds with warnings: $(cat "$work/build.log")"; fi
  for f in libmasque-mask-sliding-window.so libmasque-decoder-min-p.so; do
    [ -f "$example_build/$f" ] || fail "$f was not built into $example_build"
  done
}

check_listing() {
  step "masque plugins lists the custom plugins next to the built-in ones"
  "$masque" plugins >"$work/plugins.txt" 2>"$work/plugins.err" ||
    fail "masque plugins failed: $(cat "$work/plugins.err")"
  grep -Eq '^mask +sliding-window +1\.0\.0 ' "$work/plugins.txt" || fail "no sliding-window: $(cat "$work/plugins.txt")"
  grep -Eq '^decoder +min-p +1\.0\.0 ' "$work/plugins.txt" || fail "no min-p: $(cat "$work/plugins.txt")"
  grep -Eq '^mask +causal ' "$work/plugins.txt" || fail "the built-in plugins are missing: $(cat "$work/plugins.txt")"
  grep -Eq '^model +llama ' "$work/plugins.txt" || fail "no llama model plugin installed: $(cat "$work/plugins.txt")"

  step "masque plugins sliding-window documents 'window'"
  "$masque" plugins sliding-window >"$work/sw.txt"
  grep -q "file         $example_build/libmasque-mask-sliding-window.so" "$work/sw.txt" ||
    fail "not loaded from the example build: $(cat "$work/sw.txt")"
  grep -Eq '^  window$' "$work/sw.txt" || fail "no window parameter: $(cat "$work/sw.txt")"
  grep -q "type int, default 256, range \[1, 65536\]" "$work/sw.txt" ||
    fail "window's type/default/range: $(cat "$work/sw.txt")"
  # The help is wrapped to the terminal: compare it with the line breaks flattened.
  tr -s ' \n' '  ' <"$work/sw.txt" | grep -q "token i sees tokens j with i - window < j <= i" ||
    fail "window's help: $(cat "$work/sw.txt")"

  step "the plugins carry the installed ABI version"
  local abi
  abi=$("$masque" --version | sed -n 's/^plugin ABI //p')
  "$masque" plugins min-p --json >"$work/minp.json"
  json_check "$work/minp.json" "$abi" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["abi"] == sys.argv[2], (d["abi"], sys.argv[2])
names = [p["name"] for p in d["parameters"]]
assert "min_p" in names and "max_new_tokens" in names, names
EOF
}

# mask_json FILE ARGS...: masque mask --format json over the tokens a b c d e.
mask_json() {
  local out=$1
  shift
  "$masque" mask --format json "$@" a b c d e >"$out" || fail "masque mask $* failed"
}

check_mask_pattern() {
  step "masque mask --strategy sliding-window: window 2, 1 and 5 over a b c d e"
  mask_json "$work/w2.json" --strategy sliding-window --set window=2
  mask_json "$work/w1.json" --strategy sliding-window --set window=1
  mask_json "$work/w5.json" --strategy sliding-window --set window=5
  mask_json "$work/causal.json" --strategy causal
  json_check "$work/w2.json" "$work/w1.json" "$work/w5.json" "$work/causal.json" <<'EOF'
import json, sys
w2, w1, w5, causal = (json.load(open(f)) for f in sys.argv[1:5])
assert w2["tokens"] == ["a", "b", "c", "d", "e"], w2["tokens"]
# Token i sees itself and the token before it.
assert w2["allowed"] == [[1, 0, 0, 0, 0],
                         [1, 1, 0, 0, 0],
                         [0, 1, 1, 0, 0],
                         [0, 0, 1, 1, 0],
                         [0, 0, 0, 1, 1]], w2["allowed"]
assert w2["incremental"] is False
assert w1["allowed"] == [[int(i == j) for j in range(5)] for i in range(5)], w1["allowed"]
assert w5["allowed"] == causal["allowed"], (w5["allowed"], causal["allowed"])
EOF

  step "out-of-range parameters are refused by the host before the plugin runs"
  local status=0
  "$masque" mask --strategy sliding-window --set window=0 a b 2>"$work/w0.err" >/dev/null || status=$?
  [ "$status" -eq 2 ] || fail "window=0: expected exit code 2, got $status"
  grep -q "mask.window: expected an integer in \[1, 65536\], got 0" "$work/w0.err" ||
    fail "window=0: $(cat "$work/w0.err")"
}

# score FILE ARGS...: lm-score of the corpus with the example's pipeline (jsonl per record).
score() {
  local out=$1
  shift
  "$masque" run "$example/lm-score-sliding-window.yaml" --quiet -i "$work/corpus.txt" \
    --set model.path="$stories" --set tokenizer.path="$stories" "$@" >"$out" 2>"$work/run.err" ||
    fail "lm-score $* failed: $(cat "$work/run.err")"
}

check_lm_score() {
  step "lm-score on stories260k: sliding-window vs causal"
  cat >"$work/corpus.txt" <<'EOF'
Once upon a time, there was a little girl named Lily. She loved to play outside in the park.
The cat sat on the mat.
Tom had a big red ball and he liked to throw it to his dog every day after school.
EOF
  score "$work/causal.jsonl" --set mask.plugin=causal
  local longest
  longest=$(python3 -c 'import json,sys; print(max(json.loads(l)["tokens"] for l in open(sys.argv[1])))' \
    "$work/causal.jsonl")
  # A record of n tokens scores its tokens 1..n-1 from rows 0..n-2: the window changes nothing
  # exactly when row n-2 still sees token 0, i.e. window >= n - 1. The boundary windows
  # (longest - 2, longest - 1) catch an off-by-one in either direction.
  local windows=(2 4 $((longest - 2)) $((longest - 1)) 512)
  for w in "${windows[@]}"; do
    score "$work/w$w.jsonl" --set mask.window="$w"
    json_check "$work/causal.jsonl" "$work/w$w.jsonl" "$w" <<'EOF'
import json, sys
causal = [json.loads(l) for l in open(sys.argv[1])]
window = [json.loads(l) for l in open(sys.argv[2])]
w = int(sys.argv[3])
assert len(causal) == len(window) == 3, (len(causal), len(window))
for c, s in zip(causal, window):
    assert c["id"] == s["id"] and c["tokens"] == s["tokens"], (c, s)
    diff = abs(c["nll"] - s["nll"])
    if w >= c["tokens"] - 1:
        assert diff <= 1e-6, f"window {w}, record {c['id']} ({c['tokens']} tokens): nll {s['nll']} != causal {c['nll']}"
    else:
        assert diff > 1e-4, f"window {w}, record {c['id']} ({c['tokens']} tokens): nll {s['nll']} == causal {c['nll']}"
EOF
  done
  echo "windows ${windows[*]} checked against causal over records of up to $longest tokens"

  step "a dense mask cannot serve incremental decoding: lm-generate refuses it"
  local status=0
  echo "Once upon a time" | "$masque" run "$example/lm-generate-min-p.yaml" --quiet \
    --set model.path="$stories" --set tokenizer.path="$stories" --set mask.plugin=sliding-window \
    >/dev/null 2>"$work/gen-sw.err" || status=$?
  [ "$status" -eq 2 ] || fail "lm-generate with sliding-window: expected exit code 2, got $status"
  grep -q "does not allow" "$work/gen-sw.err" || fail "lm-generate with sliding-window: $(cat "$work/gen-sw.err")"
}

# generate FILE ARGS...: lm-generate of two prompts with the example's min-p pipeline.
generate() {
  local out=$1
  shift
  printf 'Once upon a time\nThe dog\n' | "$masque" run "$example/lm-generate-min-p.yaml" --quiet \
    --set model.path="$stories" --set tokenizer.path="$stories" --set decoder.max_new_tokens=24 \
    "$@" >"$out" 2>"$work/run.err" || fail "lm-generate $* failed: $(cat "$work/run.err")"
}

check_min_p() {
  step "min-p: reproducible per seed, greedy at min_p = 1"
  generate "$work/minp-a.jsonl" --set decoder.seed=7 --set decoder.temperature=1.5
  generate "$work/minp-b.jsonl" --set decoder.seed=7 --set decoder.temperature=1.5
  cmp -s "$work/minp-a.jsonl" "$work/minp-b.jsonl" || fail "the same seed gave different samples"
  generate "$work/minp-1.jsonl" --set decoder.min_p=1
  generate "$work/greedy.jsonl" --set decoder.plugin=greedy
  json_check "$work/minp-1.jsonl" "$work/greedy.jsonl" <<'EOF'
import json, sys
minp, greedy = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
assert len(minp) == len(greedy) == 2
for m, g in zip(minp, greedy):
    assert m["text"] == g["text"] and m["text"], (m, g)
EOF

  step "the factory's own checks reach the user as configuration errors"
  local status=0
  "$masque" run "$example/lm-generate-min-p.yaml" --quiet --set model.path="$stories" \
    --set tokenizer.path="$stories" --set decoder.temperature=0 --set decoder.num_hypotheses=2 \
    </dev/null >/dev/null 2>"$work/minp.err" || status=$?
  [ "$status" -eq 2 ] || fail "temperature 0 with 2 hypotheses: expected exit code 2, got $status"
  grep -q "num_hypotheses > 1 would return identical copies" "$work/minp.err" ||
    fail "min-p factory error: $(cat "$work/minp.err")"
}

check_installed_example() {
  step "cmake --install the example: into the masque installation's plugin directory"
  "$MASQUE_CMAKE" --install "$example_build" >"$work/install-example.log" ||
    fail "installing the example failed: $(cat "$work/install-example.log")"
  for f in libmasque-mask-sliding-window.so libmasque-decoder-min-p.so; do
    [ -f "$prefix/lib/masque/plugins/$f" ] || fail "$f not installed into $prefix/lib/masque/plugins"
  done

  step "MASQUE_PLUGIN_INSTALL_DIR overrides where the example installs"
  "$MASQUE_CMAKE" -S "$example" -B "$example_build" -DMASQUE_PLUGIN_INSTALL_DIR=lib/my-plugins \
    >"$work/reconfigure.log" 2>&1 || fail "reconfiguring the example failed: $(cat "$work/reconfigure.log")"
  "$MASQUE_CMAKE" --install "$example_build" --prefix "$work/own" >"$work/install-own.log" ||
    fail "installing the example into its own prefix failed: $(cat "$work/install-own.log")"
  [ -f "$work/own/lib/my-plugins/libmasque-mask-sliding-window.so" ] ||
    fail "not installed into $work/own/lib/my-plugins: $(cat "$work/install-own.log")"

  step "relocate the prefix: the installed masque finds its library and all plugins"
  local moved=$work/relocated
  mv "$prefix" "$moved"
  unset MASQUE_PLUGIN_PATH
  masque=$moved/bin/masque
  [ "$("$masque" plugins --paths | head -n 1)" = "$moved/lib/masque/plugins" ] ||
    fail "plugin directory after relocation: $("$masque" plugins --paths)"
  "$masque" plugins >"$work/plugins-moved.txt" || fail "masque plugins fails after relocation"
  grep -Eq '^mask +sliding-window ' "$work/plugins-moved.txt" || fail "sliding-window not found after install"
  grep -Eq '^decoder +min-p ' "$work/plugins-moved.txt" || fail "min-p not found after install"
  mask_json "$work/moved.json" --strategy sliding-window --set window=2
  cmp -s "$work/moved.json" "$work/w2.json" || fail "the relocated install gives another mask"

  step "RPATHs: relative in the binary and the plugins, none into a build tree in libmasque"
  # DT_RPATH (the project links with --disable-new-dtags): it wins over LD_LIBRARY_PATH, which
  # mpirun sets to its prefix's lib directory, so a binary always loads its own libmasque.
  local runpath
  runpath=$(readelf -d "$masque" | sed -n 's/.*(RPATH).*\[\(.*\)\]/\1/p')
  [ "$runpath" = '$ORIGIN/../lib' ] || fail "bin/masque RPATH is '$runpath'"
  if readelf -d "$moved"/lib/libmasque.so | grep -E '(RUNPATH|RPATH)' | grep -q "$MASQUE_BUILD_DIR"; then
    fail "libmasque.so has a RUNPATH into the build tree: $(readelf -d "$moved"/lib/libmasque.so | grep PATH)"
  fi
  # Installed plugins, built-in or not, resolve libmasque in the relocated prefix on their own.
  local plugin found
  for plugin in mask-causal mask-sliding-window decoder-min-p; do
    found=$(ldd "$moved/lib/masque/plugins/libmasque-$plugin.so" | sed -n 's/^\s*libmasque\.so\.[0-9]* => \(\S*\) .*/\1/p')
    [ -n "$found" ] && [ "$(realpath "$found")" = "$(realpath "$moved/lib/libmasque.so")" ] ||
      fail "libmasque-$plugin.so does not find libmasque in $moved/lib: $(ldd "$moved/lib/masque/plugins/libmasque-$plugin.so")"
  done
}

install_masque "$prefix"
masque=$prefix/bin/masque
[ -x "$masque" ] || fail "no $masque after cmake --install"
[ -d "$stories" ] || fail "no model folder $stories (MASQUE_SHARED_DIR)"
build_example
export MASQUE_PLUGIN_PATH=$example_build
check_listing
check_mask_pattern
check_lm_score
check_min_p
check_installed_example
step "ok"

# The table of bench/encdec/run.sh, from its timings file:
#   TIME <config> <engine> <lines> <wall s> <cpu s>     one per process run
#   PEER <config> <CTranslate2 lines/s>                  published figure
#   CHECK <config or decoder> <what> <yes|NO>            output comparisons
# Engines: masque-t<N>, pytorch-t1; with a CTranslate2 peer also masque-int8-t<N>,
# ct2-float32-t<N>, ct2-int8-t<N>.
# Variables: runs, threads (the masque --threads values, space separated).
# A config is "<decoder>-b<batch size>"; the batch 32 ones carry the CTranslate2 target.

$1 == "TIME" {
  key = $2 SUBSEP $3
  count[key]++
  wall[key, count[key]] = $5
  cpu[key, count[key]] = $6
  lines[key] = $4
}
$1 == "PEER" { peer[$2] = $3; order[++configs] = $2 }
$1 == "CHECK" { check[$2, $3] = $4 }

function median(samples, key,   n, v, i, j, t) {
  n = count[key]
  for (i = 1; i <= n; i++) v[i] = samples[key, i]
  for (i = 1; i <= n; i++)
    for (j = i + 1; j <= n; j++)
      if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
  return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}

function rate(config, engine,   key) {
  key = config SUBSEP engine
  return count[key] ? lines[key] / median(wall, key) : 0
}

function verdict(ok) { return ok ? "met" : "MISSED" }

END {
  nt = split(threads, t, " ")
  printf "lines/s, whole-process wall time (model load included), median of %d runs\n", runs
  printf "%-11s", "config"
  for (i = 1; i <= nt; i++) printf " %12s", "masque -t" t[i]
  printf " %12s %12s %14s %14s %10s\n", "PyTorch -t1", "CT2 4.8.1*", "masque/PyTorch",
    "best/CT2*", "= PyTorch"
  for (c = 1; c <= configs; c++) {
    name = order[c]
    best[name] = 0
    printf "%-11s", name
    for (i = 1; i <= nt; i++) {
      r = rate(name, "masque-t" t[i])
      if (r > best[name]) best[name] = r
      printf " %12.0f", r
    }
    torch[name] = rate(name, "pytorch-t1")
    one[name] = rate(name, "masque-t" t[1])
    printf " %12.0f %12d %13.1fx %13.2fx %10s\n", torch[name], peer[name],
      one[name] / torch[name], best[name] / peer[name], check[name, "vs-pytorch"]
  }

  printf "\nCPU seconds (user + sys), median\n%-11s", "config"
  for (i = 1; i <= nt; i++) printf " %12s", "masque -t" t[i]
  printf " %12s\n", "PyTorch -t1"
  for (c = 1; c <= configs; c++) {
    name = order[c]
    printf "%-11s", name
    for (i = 1; i <= nt; i++) printf " %12.2f", median(cpu, name SUBSEP "masque-t" t[i])
    printf " %12.2f\n", median(cpu, name SUBSEP "pytorch-t1")
  }

  printf "\n* CTranslate2 is not installed here (no pip): its column is the published figures " \
    "of\n  ../shared/bench/README.md (4.8.1, one thread, whole process, on the machine kind of\n" \
    "  ../shared/DESIGN.md), not measured in this run.\n"
  printf "masque/PyTorch compares masque -t%s with PyTorch, both on one thread; best = the " \
    "fastest masque -t.\n", t[1]
  printf "masque outputs identical across threads, batch sizes and runs: greedy %s, beam 4 %s\n",
    check["greedy", "masque-all"], check["beam4", "masque-all"]

  # The measured CTranslate2 peer (CT2_TRANSLATOR / CT2_MODEL), when it ran.
  if (count["greedy-b1" SUBSEP "ct2-float32-t" t[1]]) {
    printf "\nCTranslate2 measured in this run: lines/s, whole process, median of %d runs\n", runs
    printf "%-11s %4s %14s %14s %8s %14s %14s %8s %9s\n", "config", "-t", "masque f32",
      "CT2 float32", "ratio", "masque int8", "CT2 int8", "ratio", "= CT2"
    for (c = 1; c <= configs; c++) {
      name = order[c]
      for (i = 1; i <= nt; i++) {
        mf = rate(name, "masque-t" t[i]); cf = rate(name, "ct2-float32-t" t[i])
        mi = rate(name, "masque-int8-t" t[i]); ci = rate(name, "ct2-int8-t" t[i])
        printf "%-11s %4s %14.0f %14.0f %7.2fx %14.0f %14.0f %7.2fx %9s\n", name, t[i], mf, cf,
          cf ? mf / cf : 0, mi, ci, ci ? mi / ci : 0, i == 1 ? check[name, "vs-ct2"] : ""
        if (name ~ /-b32$/) ct2_f32_ok = (ct2_f32_ok == "" ? 1 : ct2_f32_ok) && cf && mf >= 4 * cf
        int8_ok = (int8_ok == "" ? 1 : int8_ok) && mi >= mf
      }
    }
    printf "  issue 23: masque >= 4x CTranslate2 in every f32 cell at batch 32: %s\n",
      verdict(ct2_f32_ok)
    printf "  issue 23: masque int8 >= masque f32 everywhere: %s (not a target of this script)\n",
      verdict(int8_ok)
  }

  printf "\ntargets\n"
  all = 1
  for (c = 1; c <= configs; c++) {
    name = order[c]
    if (name !~ /-b32$/) continue
    ok = best[name] >= 1.25 * peer[name]
    all = all && ok
    printf "  %-11s masque >= 1.25x CTranslate2 (%.0f lines/s): %.0f  %s\n", name,
      1.25 * peer[name], best[name], verdict(ok)
  }
  for (c = 1; c <= configs; c++) {
    name = order[c]
    ok = one[name] >= 2 * torch[name]
    all = all && ok
    printf "  %-11s masque >= 2x PyTorch: %.1fx  %s\n", name, one[name] / torch[name], verdict(ok)
  }
  for (c = 1; c <= configs; c++) {
    name = order[c]
    ok = check[name, "vs-pytorch"] == "yes"
    all = all && ok
    printf "  %-11s outputs identical to PyTorch: %s\n", name, check[name, "vs-pytorch"]
  }
  ok = check["greedy", "masque-all"] == "yes" && check["beam4", "masque-all"] == "yes"
  all = all && ok
  printf "  masque outputs identical across threads and batch sizes: %s\n", verdict(ok)
  printf "all targets: %s\n", verdict(all)
  exit all ? 0 : 1
}

# The table of bench/int8/run.sh from its timings lines "case dtype round run_s wall_s cpu_s": medians
# over rounds, the ratios to f32, and whether int8 <= f32 in every cell (exit 1 when not).
function median(list,    n, a, i, j, t) {
  n = split(list, a, " ")
  for (i = 2; i <= n; i++)
    for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
  if (!($1 in seen)) { seen[$1] = 1; cases[++ncases] = $1 }
  if (!($2 in known)) { known[$2] = 1; types[++ntypes] = $2 }
  run[$1, $2] = run[$1, $2] " " $4
  wall[$1, $2] = wall[$1, $2] " " $5
  cpu[$1, $2] = cpu[$1, $2] " " $6
  rounds[$1, $2]++
}
END {
  header = "| case |"; rule = "|---|"
  for (t = 1; t <= ntypes; t++) { header = header " " types[t] " s (wall, cpu) |"; rule = rule "---:|" }
  for (t = 1; t <= ntypes; t++)
    if (types[t] != "f32") {
      header = header " " types[t] " / f32 (cpu) |"; rule = rule "---:|"
    }
  print header " rounds |"; print rule "---:|"
  bad = 0
  for (c = 1; c <= ncases; c++) {
    k = cases[c]; line = "| " k " |"
    for (t = 1; t <= ntypes; t++)
      line = line sprintf(" %.3f (%.2f, %.2f) |", median(run[k, types[t]]), median(wall[k, types[t]]),
                          median(cpu[k, types[t]]))
    f32 = median(run[k, "f32"]); f32cpu = median(cpu[k, "f32"])
    for (t = 1; t <= ntypes; t++) {
      if (types[t] == "f32") continue
      r = f32 > 0 ? median(run[k, types[t]]) / f32 : 0
      line = line sprintf(" %.2f (%.2f) |", r, f32cpu > 0 ? median(cpu[k, types[t]]) / f32cpu : 0)
      if (types[t] == "int8" && r > 1) { bad = 1; slower = slower " " k }
    }
    print line " " rounds[k, "f32"] " |"
  }
  print ""
  if (bad) { print "int8 slower than f32 in:" slower; exit 1 }
  print "int8 <= f32 in every case (medians of corpus seconds)"
}

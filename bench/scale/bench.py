"""Scale-out benchmark: plain masque run vs mpirun -n 1 and -n 2 on the same corpus.

Every configuration runs the same corpus in each round (interleaved, so a busy neighbour
slows all of them alike); the medians over rounds are reported. Two clocks:
- wall: the whole command, with mpirun's launch, MPI_Init and the model load;
- run: the corpus run itself, from the summary's "seconds" (the first record read to OUT
  written: for mpirun that includes waiting for the last rank and putting OUT together).
Outputs are checked byte for byte against the plain run's.
"""
import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import time


def cpu_name():
    """The model name, family/model numbers and the widest vector unit, from /proc/cpuinfo."""
    info = {}
    try:
        for line in open("/proc/cpuinfo"):
            if ":" in line:
                key, value = (x.strip() for x in line.split(":", 1))
                info.setdefault(key, value)
    except OSError:
        return platform.processor() or "unknown CPU"
    flags = info.get("flags", "").split()
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return "%s (family %s, model %s, %s)" % (info.get("model name", "unknown CPU"),
                                             info.get("cpu family", "?"), info.get("model", "?"),
                                             vector)


def make_inputs(scratch, lines, words):
    rng = random.Random(20)
    vocab = ("once upon a time there was a little girl named Lily she liked to play in the "
             "park with her dog one day the sun was happy and they ran home .").split()
    with open(os.path.join(scratch, "stories.txt"), "w") as f:
        for _ in range(lines):
            f.write(" ".join(rng.choice(vocab) for _ in range(rng.randint(8, 40))) + "\n")
    letters = "س م ي ر ن ا د ة ل ك ب ت ح ع و".split()
    with open(os.path.join(scratch, "words.txt"), "w") as f:
        for _ in range(words):
            f.write(" ".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) + "\n")


MPIRUN = ["mpirun", "--allow-run-as-root", "--mca", "btl", "self,vader,tcp"]


def configurations(masque):
    return [
        ("plain, 1 thread", [masque], ["--threads", "1"]),
        ("mpirun -n 1, 1 thread", MPIRUN + ["-n", "1", "--bind-to", "none", masque],
         ["--threads", "1"]),
        ("mpirun -n 2, 1 thread each", MPIRUN + ["-n", "2", masque], ["--threads", "1"]),
        ("plain, 2 threads", [masque], ["--threads", "2"]),
    ]


def run_once(prefix, extra, task_args, scratch, tag):
    out = os.path.join(scratch, tag + ".out")
    summary = os.path.join(scratch, tag + ".json")
    cmd = prefix + task_args + extra + ["-o", out, "--summary", summary, "--quiet"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    s = json.load(open(summary))
    return {"wall": wall, "run": s["seconds"], "records": s["records"], "out": out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--words", type=int, default=6000)
    a = ap.parse_args()
    os.makedirs(a.scratch, exist_ok=True)
    make_inputs(a.scratch, a.lines, a.words)
    masque = os.path.join(a.build, "bin", "masque")
    p = os.path.join(a.root, "pipelines")
    tasks = [
        ("lm-score, stories260k, %d lines" % a.lines,
         ["run", os.path.join(p, "lm-score.yaml"), "-i", os.path.join(a.scratch, "stories.txt")]),
        ("translate, beam 4, aren-transliteration, %d words" % a.words,
         ["run", os.path.join(p, "translate.yaml"), "-i", os.path.join(a.scratch, "words.txt"),
          "--set", "decoder.beam_size=4"]),
    ]
    print("CPU: %s, %d logical cores; load average at start %.2f" %
          (cpu_name(), os.cpu_count(), os.getloadavg()[0]))
    results = {}
    for tname, targs in tasks:
        times = {c[0]: [] for c in configurations(masque)}
        reference = None
        for r in range(a.rounds):
            for i, (cname, prefix, extra) in enumerate(configurations(masque)):
                m = run_once(prefix, extra, targs, a.scratch, "t%d" % i)
                data = open(m["out"], "rb").read()
                if reference is None:
                    reference = data
                elif data != reference:
                    raise SystemExit("%s / %s: the output differs from the plain run" % (tname, cname))
                times[cname].append(m)
        results[tname] = times
        print("\n### %s (median of %d rounds; load average now %.2f)\n" %
              (tname, a.rounds, os.getloadavg()[0]))
        print("| configuration | records/s (run) | records/s (wall, with launch and load) |")
        print("| --- | ---: | ---: |")
        rate = {}
        for cname, ms in times.items():
            n = ms[0]["records"]
            run_rate = n / statistics.median(m["run"] for m in ms)
            wall_rate = n / statistics.median(m["wall"] for m in ms)
            rate[cname] = (run_rate, wall_rate)
            print("| %s | %.0f | %.0f |" % (cname, run_rate, wall_rate))
        plain, one, two = (rate["plain, 1 thread"], rate["mpirun -n 1, 1 thread"],
                           rate["mpirun -n 2, 1 thread each"])
        print("\n- MPI path at 1 rank vs plain (1 thread): overhead %+.1f %% (run), %+.1f %% (wall)" %
              (100 * (plain[0] / one[0] - 1), 100 * (plain[1] / one[1] - 1)))
        print("- 2 ranks vs 1 rank: %.2fx (run), %.2fx (wall); per-rank efficiency %.0f %% (run)" %
              (two[0] / one[0], two[1] / one[1], 100 * two[0] / (2 * one[0])))
        print("- 2 ranks vs plain with 2 threads: %.2fx (run)" % (two[0] / rate["plain, 2 threads"][0]))
    json.dump({k: {c: [{x: m[x] for x in ("wall", "run", "records")} for m in v]
                   for c, v in t.items()} for k, t in results.items()},
              open(os.path.join(a.scratch, "results.json"), "w"), indent=1)


if __name__ == "__main__":
    main()

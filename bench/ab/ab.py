#!/usr/bin/python3
"""Two masque builds on the work of bench/lm and bench/encdec, in one run (issue 17: the
Transformer tier must keep every speed figure "within run-to-run noise", measured before and
after in the same run).

Each workload runs the BASELINE build's masque, then the CANDIDATE's, ROUNDS times, so both see
the same machine load; it reports each side's median seconds, the ratio baseline/candidate
(> 1: the candidate is faster), the spread of each side's rounds (max/min, the run-to-run
noise) and whether both builds wrote identical outputs (or, for JSON lines that differ only in
floating-point values, the largest relative difference). No PyTorch: bench/lm and bench/encdec
compare against peers; this compares masque with itself.

    bench/ab/run.sh BASELINE_BUILD CANDIDATE_BUILD
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "lm"))
import bench as lm  # noqa: E402  (bench/lm/bench.py: its inputs, pipelines and configurations)

AREN = os.path.join(ROOT, "..", "shared", "bench", "aren-20k.txt")
TRANSLATE = os.path.join(ROOT, "pipelines", "translate.yaml")
ENCDEC_CONFIGS = {  # bench/encdec/run.sh's masque settings
    "greedy-b1": ["--set", "decoder.plugin=greedy", "--set", "task.max_batch_size=1"],
    "greedy-b32": ["--set", "decoder.plugin=greedy", "--set", "task.max_batch_size=32"],
    "beam4-b1": ["--set", "decoder.beam_size=4", "--set", "task.max_batch_size=1"],
    "beam4-b32": ["--set", "decoder.beam_size=4", "--set", "task.max_batch_size=32"],
}


def workloads(scratch, reps):
    """(name, pipeline, input, options, timer): timer 'summary' uses --summary seconds (model
    load excluded, as bench/lm reports), 'wall' the process time (as bench/encdec reports)."""
    s = scratch
    ids = ["--input-format", "ids"]
    out = []
    score = lm.repeated(argparse.Namespace(scratch=s), "score.ids", reps)
    for threads in (1, 2):
        for label, opts in lm.MASQUE_CONFIGS[threads].items():
            out.append((f"lm score 8x256 {label}", os.path.join(s, "gpt2-score.yaml"), score,
                        ids + ["--set", "task.max_batch_size=8"] + opts, "summary"))
    prompt = lm.repeated(argparse.Namespace(scratch=s), "prompt.ids", reps)
    for threads in (1, 2):
        for label, opts in lm.GEN_CONFIGS[threads].items():
            out.append((f"lm generate 128 tokens {label}", os.path.join(s, "gpt2-generate.yaml"),
                        prompt, ids + ["--set", "task.max_batch_size=1",
                                       "--set", f"decoder.max_new_tokens={lm.NEW_TOKENS}",
                                       "--set", f"decoder.min_new_tokens={lm.NEW_TOKENS}"] + opts,
                        "summary"))
    for corpus in lm.corpora(argparse.Namespace(scratch=s), os.path.join(s, "gpt2-small")):
        for batch in (1, 32):
            for threads in (1, 2):
                out.append((f"lm corpus {corpus['name']} batch {batch} --threads {threads}",
                            corpus["pipeline"], corpus["text"],
                            ["--threads", str(threads), "--set", f"task.max_batch_size={batch}"],
                            "summary"))
    for name, opts in ENCDEC_CONFIGS.items():
        for threads in (1, 2):
            out.append((f"encdec {name} --threads {threads}", TRANSLATE, AREN,
                        opts + ["--threads", str(threads), "--format", "text"], "wall"))
    return out


def run(build, scratch, pipeline, input_path, options, timer):
    summary = os.path.join(scratch, "ab-summary.json")
    cmd = [os.path.join(build, "bin", "masque"), "run", pipeline, "-i", input_path, "-q",
           "--summary", summary] + options
    begin = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - begin
    if timer == "wall":
        return wall, out
    with open(summary) as f:
        return json.load(f)["seconds"], out


def max_relative_difference(a, b):
    """0.0 for equal texts; for JSON lines that differ only in floating-point values, the largest
    relative difference among them; None when anything else differs (count, keys, strings)."""
    if a == b:
        return 0.0
    la, lb = a.splitlines(), b.splitlines()
    if len(la) != len(lb):
        return None
    worst = 0.0

    def walk(x, y):
        nonlocal worst
        if isinstance(x, float) or isinstance(y, float):
            if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
                return False
            worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-30))
            return True
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() == y.keys() and all(walk(x[k], y[k]) for k in x)
        if isinstance(x, list) and isinstance(y, list):
            return len(x) == len(y) and all(walk(u, v) for u, v in zip(x, y))
        return x == y

    try:
        same = all(walk(json.loads(u), json.loads(v)) for u, v in zip(la, lb))
    except json.JSONDecodeError:
        return None
    return worst if same else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("baseline")
    ap.add_argument("candidate")
    ap.add_argument("--scratch", default=os.path.join(ROOT, "bench", "out", "lm"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--only", default="", help="run only workloads whose name contains this")
    a = ap.parse_args()
    builds = {"baseline": os.path.abspath(a.baseline), "candidate": os.path.abspath(a.candidate)}
    # Inputs and pipelines as bench/lm makes them (tokenized by the candidate build).
    lm.setup(argparse.Namespace(scratch=a.scratch, build=builds["candidate"]))
    print(f"machine: {lm.machine()}")
    print(f"baseline: {builds['baseline']}\ncandidate: {builds['candidate']}")
    print(f"rounds: {a.rounds}; load before: {lm.loadavg()}")
    print("| workload | baseline s | candidate s | baseline / candidate | spread baseline | "
          "spread candidate | outputs |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, pipeline, input_path, options, timer in workloads(a.scratch, a.reps):
        if a.only and a.only not in name:
            continue
        times = {side: [] for side in builds}
        outputs = {}
        for _ in range(a.rounds):
            for side, build in builds.items():
                seconds, out = run(build, a.scratch, pipeline, input_path, options, timer)
                times[side].append(seconds)
                outputs.setdefault(side, out)
        med = {side: statistics.median(t) for side, t in times.items()}
        spread = {side: max(t) / min(t) for side, t in times.items()}
        diff = max_relative_difference(outputs["baseline"], outputs["candidate"])
        same = ("identical" if diff == 0.0 else "DIFFER" if diff is None else
                f"floats within {diff:.1e} rel")
        print(f"| {name} | {med['baseline']:.3f} | {med['candidate']:.3f} | "
              f"{med['baseline'] / med['candidate']:.3f} | {spread['baseline']:.3f} | "
              f"{spread['candidate']:.3f} | {same} |", flush=True)
    print(f"load after: {lm.loadavg()}")


if __name__ == "__main__":
    main()

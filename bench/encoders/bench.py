#!/usr/bin/python3
"""masque's embed task against ONNX Runtime (onnxruntime-node) on the same BERT weights.

    bench.py --build BUILD_DIR --scratch DIR [--models minilm-l6,bert-base]
             [--dtypes f32,int8,bf16] [--threads 1,2] [--batches 1,8,32,128] [--rounds 3]
             [--sequences 256] [--max-length 128] [--report]

Run through run.sh, which documents the method. Per model shape: the BertModel folder
(make_models.py), its ONNX files (export_onnx.py), the token-id records (make_corpus.py); then
per matmul type, thread count, batch size and round one masque process and one ONNX Runtime
process on the same records in the same batches, the side that goes first alternating. Every
run's CLS vectors are compared with the other side's. Prints markdown tables of medians and
writes every raw measurement to DIR/results.json (after each one).
"""
import argparse
import datetime
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"  # Debian's python3 with python3-torch, python3-numpy, python3-onnx
NODE = shutil.which("node") or "node"
MIB = 1 << 20

# The process runner of bench/peers (quiet-CPU wait, others' CPU share, rusage peak RSS, a
# memory guard) and its machine description and results file: one implementation of each.
_spec = importlib.util.spec_from_file_location("peers_bench",
                                               os.path.join(ROOT, "bench", "peers", "bench.py"))
peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)
log, median, loadavg, select, fmt_ratio = (peers.log, peers.median, peers.loadavg, peers.select,
                                           peers.fmt_ratio)

# masque's model.matmul_dtype -> the ONNX file of the same cell (bf16: masque alone)
ONNX_OF = {"f32": "f32", "int8": "int8", "bf16": None}
F32_TOLERANCE = 1e-4  # max |masque - ORT| over the f32 CLS vectors


# ---- inputs: folders, ONNX files, records, batches --------------------------------------------

def ensure_inputs(a, name):
    models = os.path.join(a.scratch, "models")
    subprocess.run(["nice", "-n", "10", PYTHON, os.path.join(HERE, "make_models.py"), models,
                    name], check=True)
    folder = os.path.join(models, name)
    onnx_dir = os.path.join(a.scratch, "onnx")
    os.makedirs(onnx_dir, exist_ok=True)
    int8 = "int8pc" if a.int8_per_channel else "int8"
    files = {"f32": os.path.join(onnx_dir, f"{name}-f32.onnx"),
             "int8": os.path.join(onnx_dir, f"{name}-{int8}.onnx")}
    weights = os.path.getmtime(os.path.join(folder, "model.safetensors"))
    stale = [k for k, p in files.items()
             if not os.path.exists(p) or os.path.getmtime(p) < weights]
    if stale:
        log(f"bench: exporting {name} to ONNX ...")
        cmd = ["nice", "-n", "10", PYTHON, os.path.join(HERE, "export_onnx.py"), folder,
               files["f32"], "--int8", files["int8"]]
        subprocess.run(cmd + (["--per-channel"] if a.int8_per_channel else []), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return folder, files


def ensure_corpus(a):
    path = os.path.join(a.scratch, f"corpus-{a.sequences}-{a.max_length}.ids")
    script = os.path.join(HERE, "make_corpus.py")
    if not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(script):
        subprocess.run(["nice", "-n", "10", PYTHON, script,
                        "--masque", masque(a), "--vocab", os.path.join(
                            ROOT, "..", "shared", "tokenizers", "bert-base-uncased",
                            "vocab.txt"), "--count", str(a.sequences), "--max-length",
                        str(a.max_length), "--out", path], check=True)
    with open(path) as f:
        lengths = [len(line.split()) for line in f if line.strip()]
    with open(os.path.splitext(path)[0] + ".json") as f:
        return path, lengths, json.load(f)


def masque_batches(lengths, batch, workers):
    """The batches masque's runner cuts (core/src/run/batcher.cpp): windows of 16 x batch
    records in input order (run.read_ahead 0), each stably sorted by length and cut into
    batches of at most `batch` records (run.max_batch_tokens is set high enough never to cut),
    then, while a window has fewer batches than workers, its batch with the most padded tokens
    halved. ONNX Runtime gets workers = 1: one batch at a time, its threads inside it."""
    out = []
    window = 16 * batch
    for w0 in range(0, len(lengths), window):
        order = sorted(range(w0, min(w0 + window, len(lengths))), key=lambda i: lengths[i])
        cut = [order[i:i + batch] for i in range(0, len(order), batch)]
        while len(cut) < workers:
            best, most = None, 0
            for k, b in enumerate(cut):
                if len(b) > 1 and len(b) * lengths[b[-1]] >= most:
                    best, most = k, len(b) * lengths[b[-1]]
            if best is None:
                break
            half = len(cut[best]) // 2
            cut[best:best + 1] = [cut[best][:half], cut[best][half:]]
        out += cut
    return out


# ---- the two sides ---------------------------------------------------------------------------

def masque(a):
    return os.path.join(a.build, "bin", "masque")


class Refused(Exception):
    pass


def run_masque(a, folder, ids, dtype, threads, batch, vectors):
    summary = os.path.join(a.scratch, "summary.json")
    for path in (summary, vectors):
        if os.path.exists(path):
            os.remove(path)
    # workers: `threads` batches at a time, one oneDNN thread each (masque's default and what
    # ../shared/DESIGN.md advises for small models); intra: one batch at a time with `threads`
    # oneDNN threads in it, as ONNX Runtime runs.
    workers, intra = (threads, 1) if a.masque_threading == "workers" else (1, threads)
    cmd = [masque(a), "run", "--task", "embed", "--model", folder, "-i", ids,
           "--input-format", "ids", "-q", "--summary", summary,
           "--set", "task.pooling=cls", "--set", f"task.npy={vectors}",
           "--set", f"model.matmul_dtype={dtype}", "--set", f"run.max_batch_size={batch}",
           "--set", f"run.max_batch_tokens={batch * a.max_length}",
           "--threads", str(workers), "--intra-threads", str(intra)]
    for _ in range(30):  # the build may be relinked under us: wait for the binary
        if os.access(cmd[0], os.X_OK):
            break
        time.sleep(10)
    code, _, err, rss, wall = peers.run(["nice", "-n", "10"] + cmd, a.memory_limit,
                                        stdout_path=os.path.join(a.scratch, "masque.out"))
    if code != 0 or not os.path.exists(summary):
        raise Refused((err.strip().splitlines() or [f"exit code {code}"])[-1])
    with open(summary) as f:
        s = json.load(f)
    if s["failed"]:
        raise Refused(f"{s['failed']} records failed: {err.strip().splitlines()[-1:]}")
    return {"seconds": s["seconds"], "rss": rss, "wall": wall, "cpu": peers.CPU[0],
            "others": peers.OTHERS[0], "cmd": " ".join(cmd)}


def run_ort(a, onnx_file, ids, batches_file, threads, vectors):
    cmd = [NODE, os.path.join(HERE, "ort_peer.mjs"), onnx_file, "--ids", ids, "--batches",
           batches_file, "--threads", str(threads), "--out", vectors]
    code, out, err, rss, wall = peers.run(["nice", "-n", "10"] + cmd, a.memory_limit)
    if code != 0:
        raise Refused((err.strip().splitlines() or [f"exit code {code}"])[-1])
    r = json.loads(out.splitlines()[-1])
    r.update(rss=rss, wall=wall, others=peers.OTHERS[0], cmd=" ".join(cmd))
    return r


def read_vectors(path, n):
    import numpy as np
    if path.endswith(".npy"):
        return np.load(path).astype(np.float64)
    return np.fromfile(path, dtype=np.float32).reshape(n, -1).astype(np.float64)


def max_diff(x, y):
    import numpy as np
    return float(np.abs(x - y).max()) if x is not None and y is not None else float("nan")


# ---- the measurements ------------------------------------------------------------------------

LOAD_CPU = {}  # (model, dtype) -> CPU seconds of a masque process that reads no record
REFERENCE = {}  # model -> the first ORT f32 run's vectors (results do not depend on the batch)


def measure_cell(a, m, dtype, threads, batch, r, masque_first, results, skipped, refused):
    name, n = m["name"], len(m["lengths"])
    tag = f"{name}-{dtype}-t{threads}-b{batch}"
    # ORT's batches; masque cuts the same ones itself (with --threads 2 it halves a window's
    # batch when the window has only one: `split` says when that happened)
    batches = masque_batches(m["lengths"], batch, 1)
    split = (a.masque_threading == "workers" and
             masque_batches(m["lengths"], batch, threads) != batches)
    batches_file = os.path.join(a.scratch, f"batches-{name}-{batch}.json")
    with open(batches_file, "w") as f:
        json.dump(batches, f)
    mq_vec, ort_vec = os.path.join(a.scratch, "masque.npy"), os.path.join(a.scratch, "ort.f32")
    row = {"bench": "speed", "model": name, "dtype": dtype, "threads": threads, "batch": batch,
           "round": r, "records": n, "tokens": sum(m["lengths"]),
           "padded_tokens": sum(len(b) * max(m["lengths"][i] for i in b) for b in batches),
           "masque_split": split, "masque_first": masque_first, "load": loadavg()}
    mq = ort = None
    for side in (("masque", "ort") if masque_first else ("ort", "masque")):
        try:
            if side == "masque" and ("masque", dtype) not in refused:
                if threads == 1 and (name, dtype) not in LOAD_CPU:
                    LOAD_CPU[(name, dtype)] = run_masque(a, m["folder"], m["empty"], dtype, 1, 1,
                                                         mq_vec)["cpu"]
                t = run_masque(a, m["folder"], m["ids"], dtype, threads, batch, mq_vec)
                mq = read_vectors(mq_vec, n)
                row.update(masque_seq_per_s=n / t["seconds"], masque_seconds=t["seconds"],
                           masque_rss=t["rss"], masque_others=t["others"], masque_cmd=t["cmd"])
                if threads == 1:
                    row["masque_cpu_seq_per_s"] = n / (t["cpu"] - LOAD_CPU[(name, dtype)])
            elif side == "ort" and ONNX_OF[dtype] and ("ort", dtype) not in refused:
                t = run_ort(a, m["onnx"][ONNX_OF[dtype]], m["ids"], batches_file, threads,
                            ort_vec)
                ort = read_vectors(ort_vec, n)
                row.update(ort_seq_per_s=n / t["seconds"], ort_seconds=t["seconds"],
                           ort_load_seconds=t["load_seconds"], ort_rss=t["rss"],
                           ort_others=t["others"], ort_version=t["version"], ort_cmd=t["cmd"])
                if threads == 1:
                    row["ort_cpu_seq_per_s"] = n / t["cpu_seconds"]
                if dtype == "f32" and name not in REFERENCE:
                    REFERENCE[name] = ort
        except (Refused, peers.Killed) as e:
            refused[(side, dtype)] = True
            skipped.append(f"{name} {'masque' if side == 'masque' else 'ONNX Runtime'} {dtype}: "
                           f"{e}")
            log("  skipped: " + skipped[-1])
    if mq is not None and ort is not None:
        row["masque_vs_ort"] = max_diff(mq, ort)
    ref = REFERENCE.get(name)
    if dtype != "f32" and ref is not None:
        row["masque_vs_ort_f32"] = max_diff(mq, ref)
        row["ort_vs_ort_f32"] = max_diff(ort, ref)
    row["others_cpu"] = max(row.get("masque_others", 0.0), row.get("ort_others", 0.0))
    results.append(row)
    log(f"  {tag}: masque {row.get('masque_seq_per_s', float('nan')):.2f} seq/s, ORT "
        f"{row.get('ort_seq_per_s', float('nan')):.2f} seq/s, max |diff| "
        f"{row.get('masque_vs_ort', float('nan')):.1e}, others used "
        f"{100 * row['others_cpu']:.0f} % of the CPUs")
    if dtype == "f32" and not row.get("masque_vs_ort", 0.0) <= F32_TOLERANCE:
        log(f"  WARNING: f32 vectors differ by {row.get('masque_vs_ort')} > {F32_TOLERANCE}")


def bench_model(a, name, corpus, results, skipped):
    folder, onnx_files = ensure_inputs(a, name)
    ids, lengths, _ = corpus
    empty = os.path.join(a.scratch, "empty.ids")
    open(empty, "w").close()
    m = {"name": name, "folder": folder, "onnx": onnx_files, "ids": ids, "lengths": lengths,
         "empty": empty}
    cells = [(d, t, b) for d in a.dtypes for t in a.threads for b in a.batches]
    refused = {}
    for r in range(a.rounds):
        for i, (dtype, threads, batch) in enumerate(cells):
            masque_first = (r + i) % 2 == 0
            log(f"{name} {dtype}, {threads} thread(s), batch {batch}, round {r + 1}: "
                f"{'masque' if masque_first else 'ONNX Runtime'} first, load {loadavg()}")
            measure_cell(a, m, dtype, threads, batch, r, masque_first, results, skipped,
                         refused)


# ---- tables ----------------------------------------------------------------------------------

def f(x, digits=1):
    return f"{x:.{digits}f}" if isinstance(x, float) and x == x else "–"


def e(x):
    return f"{x:.1e}" if isinstance(x, float) and x == x else "–"


def table_speed(results, header, model):
    lines = [
        "| masque / ORT | threads | batch | seq/s masque | ORT | ratio | peak RSS MiB masque "
        "| ORT | ratio | max \\|masque − ORT\\| | vs ORT f32: masque / ORT | others' CPU, max |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for dtype in header["dtypes"]:
        for threads in header["threads"]:
            for batch in header["batches"]:
                rows = select(results, bench="speed", model=model, dtype=dtype,
                              threads=threads, batch=batch)
                if not rows:
                    continue

                def med(key):
                    return median([r[key] for r in rows if key in r])

                def worst(key):
                    v = [r[key] for r in rows if key in r and r[key] == r[key]]
                    return max(v) if v else float("nan")
                ms, os_ = med("masque_seq_per_s"), med("ort_seq_per_s")
                mr, orr = med("masque_rss") / MIB, med("ort_rss") / MIB
                pair = f"{dtype} / {ONNX_OF[dtype] or '–'}"
                split = " (split)" if any(r.get("masque_split") for r in rows) else ""
                vs32 = (f"{e(worst('masque_vs_ort_f32'))} / {e(worst('ort_vs_ort_f32'))}"
                        if dtype != "f32" else "")
                lines.append(
                    f"| {pair} | {threads} | {batch}{split} | {f(ms, 2)} | {f(os_, 2)} | "
                    f"{fmt_ratio(ms, os_)} | {f(mr, 0)} | {f(orr, 0)} | {fmt_ratio(mr, orr)} | "
                    f"{e(worst('masque_vs_ort'))} | {vs32} | "
                    f"{100 * worst('others_cpu'):.0f} % |")
    return "\n".join(lines)


def table_cpu(results, header, model):
    if 1 not in header["threads"]:
        return ""
    lines = ["| masque / ORT | batch | seq per CPU second masque | ORT | ratio |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for dtype in header["dtypes"]:
        for batch in header["batches"]:
            rows = select(results, bench="speed", model=model, dtype=dtype, threads=1,
                          batch=batch)
            if not rows:
                continue
            mc = median([r["masque_cpu_seq_per_s"] for r in rows if "masque_cpu_seq_per_s" in r])
            oc = median([r["ort_cpu_seq_per_s"] for r in rows if "ort_cpu_seq_per_s" in r])
            lines.append(f"| {dtype} / {ONNX_OF[dtype] or '–'} | {batch} | {f(mc, 2)} | "
                         f"{f(oc, 2)} | {fmt_ratio(mc, oc)} |")
    return "\n".join(lines)


def report(results, header):
    print(f"date: {header['started']}; machine: {header['machine']}")
    print(f"masque: {header['commit']}, threads as {header['masque_threading']}; "
          f"ONNX Runtime: {header['peer']}, int8 weights "
          f"{'per channel' if header.get('int8_per_channel') else 'per tensor'}")
    print(f"load average at start: {header['load_before']}; at end: "
          f"{header.get('load_after', '(interrupted)')}; rounds: {header['rounds']}")
    c = header["corpus"]
    h = c["histogram"]
    bins = ", ".join(f"{b['tokens']}: {b['records']}" for b in h["bins"])
    print(f"records: {c['count']} paragraphs of {c['doc_root']} ({c['candidates']} found; ids "
          f"sha256 {c['sha256']}), masque's wordpiece on bert-base-uncased's vocabulary, "
          f"[CLS] ... [SEP], at most {c['max_length']} tokens: {h['total_tokens']} tokens, mean "
          f"{h['mean']:.1f}, median {h['median']}, {h['truncated']} truncated; tokens per record "
          f"{bins}")
    for model in header["models"]:
        print(f"\n### {model}: embed, CLS pooling; seq/s = records / the timed part (masque: "
              "its summary's seconds; ORT: the session.run loop), medians over rounds\n")
        print(table_speed(results, header, model))
        t = table_cpu(results, header, model)
        if t:
            print("\nOne thread, by CPU time (each process's own user + system seconds in the "
                  "timed part; masque: the whole process less a run that only loads)\n")
            print(t)
    if any(r.get("masque_split") for r in results):
        print("\n(split): masque's runner halved a window's only batch for its second worker, "
              "so its batches were not ORT's (more sequences than twice the batch avoid it)")
    skipped = header.get("skipped", [])
    if skipped:
        print("\nNot run:")
        for s in dict.fromkeys(skipped):
            print(f"- {s}")
    bad = [r for r in results if r.get("dtype") == "f32" and "masque_vs_ort" in r
           and not r["masque_vs_ort"] <= F32_TOLERANCE]
    print(f"\nf32 agreement (max |masque − ORT| ≤ {F32_TOLERANCE:g} on every run): "
          f"{'FAILED in ' + str(len(bad)) + ' runs' if bad else 'met'}")


def build_source(build):
    """The commit of the sources a build directory was configured from (its CMakeCache), with
    -dirty when they have uncommitted changes, and when the binary was linked: the worktree
    running bench.py need not be the one masque was built from."""
    source = "?"
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as fh:
            for line in fh:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    source = line.split("=", 1)[1].strip()
    except OSError:
        pass
    commit = subprocess.run(["git", "-C", source, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip() or "?"
    linked = datetime.datetime.fromtimestamp(
        os.path.getmtime(os.path.join(build, "bin", "masque"))).isoformat(timespec="minutes")
    return f"{commit} ({source}, binary linked {linked})"


def peer_version():
    try:
        with open(os.path.join(HERE, "node_modules", "onnxruntime-node", "package.json")) as f:
            return f"onnxruntime-node {json.load(f)['version']} (bundled CPU library)"
    except OSError:
        return "onnxruntime-node (not installed)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--models", default="minilm-l6,bert-base")
    ap.add_argument("--dtypes", default="f32,int8,bf16")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sequences", type=int, default=256)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--masque-threading", choices=("workers", "intra"), default="workers")
    ap.add_argument("--int8-per-channel", action="store_true")
    ap.add_argument("--memory-limit-gb", type=float, default=8.0)
    ap.add_argument("--quiet-wait", type=float, default=900)
    ap.add_argument("--results", default="results.json")
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    a.build, a.scratch = os.path.abspath(a.build), os.path.abspath(a.scratch)
    a.memory_limit = a.memory_limit_gb * (1 << 30)
    peers.SCRATCH[0], peers.QUIET_WAIT[0] = a.scratch, a.quiet_wait
    path = os.path.join(a.scratch, a.results)
    if a.report:
        with open(path) as fh:
            saved = json.load(fh)
        report(saved["results"], saved)
        return
    a.models = [x for x in a.models.split(",") if x]
    a.dtypes = [x for x in a.dtypes.split(",") if x]
    a.threads = [int(x) for x in a.threads.split(",") if x]
    a.batches = [int(x) for x in a.batches.split(",") if x]
    for d in a.dtypes:
        if d not in ONNX_OF:
            ap.error(f"--dtypes: {d!r} is not one of {', '.join(ONNX_OF)}")
    os.makedirs(a.scratch, exist_ok=True)
    corpus = ensure_corpus(a)
    commit = build_source(a.build)
    header = {"started": datetime.datetime.now().isoformat(timespec="seconds"),
              "machine": peers.machine(), "commit": commit, "peer": peer_version(),
              "load_before": loadavg(), "rounds": a.rounds, "models": a.models,
              "dtypes": a.dtypes, "threads": a.threads, "batches": a.batches,
              "masque_threading": a.masque_threading, "int8_per_channel": a.int8_per_channel,
              "corpus": corpus[2], "skipped": []}
    results = peers.Results(path, header)
    for name in a.models:
        bench_model(a, name, corpus, results, header["skipped"])
    header["load_after"] = loadavg()
    results.append({"bench": "end"})
    report(results, header)


if __name__ == "__main__":
    main()

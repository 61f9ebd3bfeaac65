#!/usr/bin/python3
"""masque against llama.cpp (node-llama-cpp's prebuilt CPU build) on the same weights.

    bench.py --build BUILD_DIR --scratch DIR [--models M,...] [--dtypes f32,bf16,int8,int4]
             [--threads 1,2] [--rounds 3] [--only logits,speed] [--report]

Run through run.sh, which documents the method. For each model shape: the Hugging Face folder
(make_folder.py), the GGUF files of the same weights (write_gguf.py), then per matmul type,
thread count and round one masque measurement and one llama.cpp measurement, the side that
goes first alternating. Prints markdown tables of medians and writes every raw measurement to
DIR/results.json (after each one, so an interrupted run keeps what it has).
"""
import argparse
import datetime
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"  # Debian's python3 with python3-torch and python3-numpy
NODE = shutil.which("node") or "node"

PREFILL, NEW_TOKENS, LOGIT_POSITIONS = 512, 128, 32
# masque matmul_dtype -> the llama.cpp GGUF type of the same cell
PAIRS = {"f32": "F32", "bf16": "BF16", "int8": "Q8_0", "int4": "Q4_0"}
GGUF_BYTES_PER_WEIGHT = {"F32": 4, "BF16": 2, "Q8_0": 34 / 32, "Q4_0": 18 / 32}
MASQUE_BYTES_PER_WEIGHT = {"f32": 4, "bf16": 2, "int8": 1, "int4": 0.5}
# masque's peak RSS per byte of the bf16 folder before this run has measured one: the 0.5B
# shape's figures here after commit 09c6bdd (weights held once: f32 2.87, int8 1.63) with a
# margin, int4 and bf16 assumed; replaced by the run's own ratio on each model that ran the type.
RSS_PER_FOLDER_BYTE = {"f32": 3.0, "bf16": 2.0, "int8": 1.8, "int4": 1.8}
GIB = 1 << 30


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_busy_seconds():
    """CPU seconds all processes have been busy since boot (/proc/stat: all but idle, iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def wait_quiet(max_wait):
    """Wait (at most max_wait seconds) until the other processes leave the CPUs idle: a
    2-vCPU machine shared with a compiler gives numbers of the compiler, not of the peers.
    Returns the seconds waited."""
    t0 = time.time()
    while True:
        b0, w0 = cpu_busy_seconds(), time.time()
        time.sleep(2)
        busy = (cpu_busy_seconds() - b0) / (time.time() - w0) / os.cpu_count()
        if busy < 0.1 or time.time() - t0 > max_wait:
            return time.time() - t0
        time.sleep(5)


# ---- one child process, its peak RSS, and a guard against running the machine out of memory --

class Killed(Exception):
    pass


def run(cmd, limit_bytes, env=None, stdout_path=None):
    """Run cmd; returns (returncode, stdout, stderr, peak RSS bytes, wall seconds), the peak RSS
    from the child's rusage (ru_maxrss: load and work, the whole process). The child is killed
    (Killed) when its resident memory passes limit_bytes or the machine's available memory
    falls under 1 GiB: a guard, so that a model too large never takes the machine down."""
    out_path = stdout_path or os.path.join(SCRATCH[0], "child.out")
    err_path = os.path.join(SCRATCH[0], "child.err")
    waited = wait_quiet(QUIET_WAIT[0])
    if waited > 10:
        log(f"  (waited {waited:.0f} s for idle CPUs)")
    busy0 = cpu_busy_seconds()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        killed = None
        while True:
            pid, status, rusage = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                break
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    rss = next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmRSS:"))
            except (OSError, StopIteration):
                rss = 0
            if not killed and (rss > limit_bytes or mem_available() < GIB):
                killed = (f"killed at {rss / GIB:.1f} GiB resident (limit "
                          f"{limit_bytes / GIB:.1f} GiB, {mem_available() / GIB:.1f} GiB "
                          "available)")
                os.kill(p.pid, signal.SIGKILL)
            time.sleep(0.05)
        wall = time.perf_counter() - t
    own = rusage.ru_utime + rusage.ru_stime
    CPU[0] = own
    OTHERS[0] = max(0.0, (cpu_busy_seconds() - busy0 - own) / wall / os.cpu_count())
    p.returncode = os.waitstatus_to_exitcode(status)
    with open(err_path) as f:
        stderr = f.read()
    stdout = ""
    if not stdout_path:
        with open(out_path) as f:
            stdout = f.read()
    if killed:
        raise Killed(killed)
    return p.returncode, stdout, stderr, rusage.ru_maxrss * 1024, wall


SCRATCH = ["/tmp"]  # where run() keeps its children's output (set in main)
QUIET_WAIT = [900]  # seconds run() waits at most for idle CPUs (set in main)
OTHERS = [0.0]  # the share of the CPUs other processes used during the last run()
CPU = [0.0]  # the CPU seconds (user + system) of the last run()'s child


# ---- models, folders, GGUF files ------------------------------------------------------------

def model_config(name):
    with open(os.path.join(HERE, "configs", name + ".json")) as f:
        return json.load(f)


def folder_bytes(folder):
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        return json.load(f)["metadata"]["total_size"]


def linear_weights(config):
    """Weights of the linear layers a decoding step streams: q/k/v/o and the MLP of every layer
    and the output head (the embedding table is read one row a step, so it does not count)."""
    c = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    hd = config.get("head_dim") or c // heads
    per_layer = c * hd * (2 * heads + 2 * kv) + 3 * c * config["intermediate_size"]
    return config["num_hidden_layers"] * per_layer + config["vocab_size"] * c


def check_disk(path, need, reserve):
    free = shutil.disk_usage(os.path.dirname(path) or ".").free
    if free - need < reserve:
        sys.exit(f"bench: writing {path} ({need / 1e9:.1f} GB) would leave "
                 f"{(free - need) / 1e9:.1f} GB free, under the {reserve / 1e9:.0f} GB kept "
                 "(DISK_RESERVE_GB); remove older files or lower MODELS/DTYPES")


def ensure_folder(a, name):
    folder = os.path.join(a.models_dir, name)
    if not os.path.exists(os.path.join(folder, "make_folder.json")):
        config = model_config(name)
        n = linear_weights(config) + config["vocab_size"] * config["hidden_size"]
        os.makedirs(folder, exist_ok=True)
        check_disk(os.path.join(folder, "x"), 2 * n, a.disk_reserve)
        log(f"bench: writing the {name} folder to {folder} ...")
        subprocess.run([PYTHON, os.path.join(HERE, "make_folder.py"),
                        os.path.join(HERE, "configs", name + ".json"), folder],
                       check=True)
    return folder


def probe_rope_scaling(a, name, config):
    """Whether masque loads this config's rope_scaling: a one-layer, 64-wide folder with the
    same config (rope_scaling included) through `masque inspect`. Returns (ok, message)."""
    probe = os.path.join(a.scratch, "probe-" + name)
    small = dict(config, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=512)
    os.makedirs(probe, exist_ok=True)
    path = os.path.join(probe, "config.json")
    with open(path, "w") as f:
        json.dump(small, f)
    if not os.path.exists(os.path.join(probe, "make_folder.json")):
        subprocess.run([PYTHON, os.path.join(HERE, "make_folder.py"), path, probe],
                       check=True, stderr=subprocess.DEVNULL)
    r = subprocess.run([masque(a), "inspect", probe, "--json"], capture_output=True, text=True)
    return r.returncode == 0, r.stderr.strip()


def settle_config(a, name, folder, notes):
    """The folder's config.json: the real one, or without rope_scaling when masque refuses it
    (for speed and memory the RoPE frequencies do not matter; both sides then run plain RoPE).
    Returns whether rope_scaling was dropped."""
    config = model_config(name)
    dropped = False
    if config.get("rope_scaling") and a.rope_scaling != "keep":
        ok, message = (False, "dropped by --rope-scaling drop") if a.rope_scaling == "drop" \
            else probe_rope_scaling(a, name, config)
        if not ok:
            dropped = True
            del config["rope_scaling"]
            notes.append(f"{name}: masque refuses the config's rope_scaling "
                         f"({message.splitlines()[-1] if message else '?'}); both sides run "
                         "this shape with plain RoPE (rope_scaling removed from the folder's "
                         "config.json, so the GGUF files have no rope_freqs)")
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        current = json.load(f)
    config["torch_dtype"] = current.get("torch_dtype", config.get("torch_dtype"))
    if current != config:
        with open(path, "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
    return dropped


def gguf_path(a, name, gguf_type, dropped):
    return os.path.join(a.models_dir, "gguf",
                        f"{name}{'-norope' if dropped else ''}-{gguf_type}.gguf")


def ensure_gguf(a, name, folder, gguf_type, dropped):
    path = gguf_path(a, name, gguf_type, dropped)
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        config = model_config(name)
        n = linear_weights(config) + config["vocab_size"] * config["hidden_size"]
        check_disk(path, n * GGUF_BYTES_PER_WEIGHT[gguf_type], a.disk_reserve)
        log(f"bench: writing {path} ...")
        subprocess.run(["nice", "-n", "10", PYTHON, os.path.join(HERE, "write_gguf.py"), folder,
                        path, "--type", gguf_type], check=True)
    return path


def prompt_file(a, name, config):
    """PREFILL random ids below the special tokens (deterministic per model)."""
    path = os.path.join(a.scratch, f"{name}-prompt.ids")
    top = min(i for i in (config.get("bos_token_id"), config.get("eos_token_id"),
                          config["vocab_size"]) if isinstance(i, int))
    r = random.Random(44)
    with open(path, "w") as f:
        f.write(" ".join(str(r.randrange(256, top)) for _ in range(PREFILL)) + "\n")
    head = os.path.join(a.scratch, f"{name}-prompt-{LOGIT_POSITIONS}.ids")
    with open(path) as f, open(head, "w") as g:
        g.write(" ".join(f.read().split()[:LOGIT_POSITIONS]) + "\n")
    return path, head


def end_tokens(config):
    ids = []
    for key in ("eos_token_id", "bos_token_id"):
        v = config.get(key)
        ids += v if isinstance(v, list) else [v] if v is not None else []
    return sorted(set(ids))


def pipelines(a, name, folder, config):
    plugin = {"qwen2": "qwen2", "llama": "llama"}[config["model_type"]]
    out = {}
    for task, extra in (("lm-generate", "decoder: {plugin: greedy}\n"), ("forward", "")):
        path = os.path.join(a.scratch, f"{name}-{task}.yaml")
        with open(path, "w") as f:
            f.write(f"task: {task}\nmodel: {{plugin: {plugin}, path: {folder}}}\n"
                    f"mask: {{plugin: causal}}\n{extra}")
        out[task] = path
    return out


# ---- the two sides ---------------------------------------------------------------------------

def masque(a):
    return os.path.join(a.build, "bin", "masque")


def masque_options(dtype, threads):
    # batch 1: one worker, `threads` oneDNN threads inside it (bench/lm/README.md)
    return ["--threads", "1", "--intra-threads", str(threads),
            "--set", f"model.matmul_dtype={dtype}"]


class Refused(Exception):
    pass


def run_masque_generate(a, pipeline, prompt, dtype, threads, new_tokens, limit):
    summary = os.path.join(a.scratch, "summary.json")
    if os.path.exists(summary):
        os.remove(summary)
    cmd = [masque(a), "run", pipeline, "-i", prompt, "--input-format", "ids", "-q",
           "--summary", summary, "--set", f"decoder.max_new_tokens={new_tokens}",
           "--set", f"decoder.min_new_tokens={new_tokens}"] + masque_options(dtype, threads)
    for _ in range(30):  # the build may be relinked under us: wait for the binary
        if os.access(cmd[0], os.X_OK):
            break
        time.sleep(10)
    code, out, err, rss, wall = run(["nice", "-n", "10"] + cmd, limit)
    others, cpu = OTHERS[0], CPU[0]
    if code != 0 or not os.path.exists(summary):
        raise Refused((err.strip().splitlines() or [f"exit code {code}"])[-1])
    with open(summary) as f:
        seconds = json.load(f)["seconds"]
    lines = out.splitlines()
    tokens = json.loads(lines[0])["tokens"] if lines else []
    return {"seconds": seconds, "rss": rss, "wall": wall, "cpu": cpu, "tokens": tokens,
            "others": others, "cmd": " ".join(cmd)}


def run_llama(a, gguf, prompt, threads, config, limit, extra=()):
    cmd = [NODE, os.path.join(HERE, "llama_peer.mjs"), gguf, "--threads", str(threads),
           "--prompt", prompt, "--new-tokens", str(NEW_TOKENS),
           "--block", ",".join(map(str, end_tokens(config)))] + list(extra)
    code, out, err, rss, wall = run(["nice", "-n", "10"] + cmd, limit)
    if code != 0:
        raise Refused((err.strip().splitlines() or [f"exit code {code}"])[-1])
    r = json.loads(out.splitlines()[-1])
    r.update(rss=rss, wall=wall, others=OTHERS[0], cmd=" ".join(cmd))
    return r


# ---- yardstick: the machine's read bandwidth, measured in the same run ------------------------

def bench_bandwidth(a, results, when):
    tool = os.path.join(a.build, "bin", "bench_numerics")
    for threads in a.threads:
        if os.access(tool, os.X_OK):
            cmd = [tool, "--threads", str(threads), "--filter", "bandwidth"]
            source = "bench_numerics"
        else:
            own = os.path.join(a.scratch, "read_bandwidth")
            if not os.path.exists(own):
                subprocess.run(["cc", "-O3", "-march=native", "-pthread",
                                os.path.join(HERE, "read_bandwidth.c"), "-o", own], check=True)
            cmd, source = [own, str(threads)], "read_bandwidth.c"
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        wait_quiet(QUIET_WAIT[0])
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            f = line.split("\t")
            if f[0] == "bandwidth":
                value = float(f[4] if source == "bench_numerics" else f[2])
                results.append({"bench": "bandwidth", "threads": threads, "value": value,
                                "source": source, "when": when, "load": loadavg()})


def bandwidth(results, threads):
    return median([r["value"] for r in select(results, bench="bandwidth", threads=threads)])


# ---- the measurements ------------------------------------------------------------------------

LOAD_CPU = {}  # (model, dtype) -> CPU seconds of a masque process that only loads the model


def masque_limit(a, name, dtype, nbytes, factors):
    """(estimated peak bytes, allowed): the guard of the masque cells."""
    estimate = factors.get(dtype, RSS_PER_FOLDER_BYTE.get(dtype, 3.0)) * nbytes
    return estimate, estimate <= a.memory_limit


def bench_speed(a, m, results, skipped, factors):
    name = m["name"]
    cells = [(d, t) for d in a.dtypes for t in a.threads]
    refused = {}
    for r in range(a.rounds):
        for i, (dtype, threads) in enumerate(cells):
            gtype = PAIRS[dtype]
            masque_first = (r + i) % 2 == 0
            log(f"{name} {dtype}/{gtype}, {threads} thread(s), round {r + 1}: "
                f"{'masque' if masque_first else 'llama.cpp'} first, load {loadavg()}")
            for side in (("masque", "llama") if masque_first else ("llama", "masque")):
                if side == "masque":
                    measure_masque(a, m, dtype, threads, r, results, skipped, refused, factors)
                else:
                    measure_llama(a, m, gtype, threads, r, results, skipped, refused)


def measure_masque(a, m, dtype, threads, r, results, skipped, refused, factors):
    name = m["name"]
    if ("masque", dtype) in refused:
        return
    estimate, ok = masque_limit(a, name, dtype, m["bytes"], factors)
    if not ok:
        refused[("masque", dtype)] = True
        skipped.append(f"{name} masque {dtype}: estimated peak RSS {estimate / GIB:.1f} GiB "
                       f"> {a.memory_limit / GIB:.0f} GiB (MEMORY_LIMIT_GB): not run")
        log("  " + skipped[-1])
        return
    limit = min(a.memory_limit * 1.1, estimate * 1.5 + 2 * GIB)
    try:
        if threads == 1 and (name, dtype) not in LOAD_CPU:
            # the CPU seconds of loading alone (no record), subtracted from the prefill run's
            LOAD_CPU[(name, dtype)] = run_masque_generate(
                a, m["pipelines"]["lm-generate"], m["empty"], dtype, 1, 1, limit)["cpu"]
        first = run_masque_generate(a, m["pipelines"]["lm-generate"], m["prompt"], dtype,
                                    threads, 1, limit)
        full = run_masque_generate(a, m["pipelines"]["lm-generate"], m["prompt"], dtype,
                                   threads, NEW_TOKENS, limit)
    except (Refused, Killed) as e:
        refused[("masque", dtype)] = True
        skipped.append(f"{name} masque {dtype}: {e}")
        log("  skipped: " + skipped[-1])
        return
    decode = full["seconds"] - first["seconds"]
    cpu_rates = {}
    if threads == 1:
        cpu_rates = {
            "prefill_cpu_tokens_per_second": PREFILL / (first["cpu"] - LOAD_CPU[(name, dtype)]),
            "decode_cpu_tokens_per_second": (NEW_TOKENS - 1) / (full["cpu"] - first["cpu"])}
    row = {"bench": "speed", "model": name, "side": "masque", "dtype": dtype, "threads": threads,
           "round": r, "prefill_tokens_per_second": PREFILL / first["seconds"],
           "decode_tokens_per_second": (NEW_TOKENS - 1) / decode if decode > 0 else float("nan"),
           **cpu_rates, "peak_rss": max(first["rss"], full["rss"]), "tokens": full["tokens"],
           "prefill_seconds": first["seconds"], "generate_seconds": full["seconds"],
           "others_cpu": max(first["others"], full["others"]), "load": loadavg(),
           "cmd": full["cmd"]}
    results.append(row)
    factors[dtype] = row["peak_rss"] / m["bytes"]  # the latest (largest) model's ratio
    log(f"  masque: prefill {row['prefill_tokens_per_second']:.1f} tok/s, decode "
        f"{row['decode_tokens_per_second']:.2f} tok/s, peak RSS {row['peak_rss'] / GIB:.2f} GiB"
        f", others used {100 * row['others_cpu']:.0f} % of the CPUs")


def measure_llama(a, m, gtype, threads, r, results, skipped, refused):
    name = m["name"]
    if ("llama", gtype) in refused:
        return
    path = gguf_path(a, name, gtype, m["dropped"])
    config = m["config"]
    size = (linear_weights(config) + config["vocab_size"] * config["hidden_size"]) * \
        GGUF_BYTES_PER_WEIGHT[gtype]
    if size * 1.15 > a.memory_limit:
        refused[("llama", gtype)] = True
        skipped.append(f"{name} llama.cpp {gtype}: a {size / GIB:.1f} GiB file > "
                       f"{a.memory_limit / GIB:.0f} GiB (MEMORY_LIMIT_GB): not run")
        log("  " + skipped[-1])
        return
    path = ensure_gguf(a, name, m["folder"], gtype, m["dropped"])
    try:
        t = run_llama(a, path, m["prompt"], threads, config, a.memory_limit * 1.1)
    except (Refused, Killed) as e:
        refused[("llama", gtype)] = True
        skipped.append(f"{name} llama.cpp {gtype}: {e}")
        log("  skipped: " + skipped[-1])
        return
    row = {"bench": "speed", "model": name, "side": "llama", "dtype": gtype, "threads": threads,
           "round": r, "prefill_tokens_per_second": t["prefill_tokens"] / t["prefill_seconds"],
           "decode_tokens_per_second": t["decode_steps"] / t["decode_seconds"],
           "prefill_cpu_tokens_per_second": t["prefill_tokens"] / t["prefill_cpu_seconds"],
           "decode_cpu_tokens_per_second": t["decode_steps"] / t["decode_cpu_seconds"],
           "peak_rss": t["rss"], "tokens": t["tokens"], "load_seconds": t["load_seconds"],
           "flash_attention": t["flash_attention"], "kv_type": t["kv_type"],
           "system_info": t["system_info"], "others_cpu": t["others"], "load": loadavg(),
           "cmd": t["cmd"]}
    results.append(row)
    log(f"  llama.cpp: prefill {row['prefill_tokens_per_second']:.1f} tok/s, decode "
        f"{row['decode_tokens_per_second']:.2f} tok/s, peak RSS {row['peak_rss'] / GIB:.2f} GiB"
        f", others used {100 * row['others_cpu']:.0f} % of the CPUs")


def read_logits(path, positions):
    import numpy as np
    x = np.fromfile(path, dtype=np.float32)
    return x.reshape(positions, -1).astype(np.float64)


def masque_logits(a, m, dtype, limit):
    import numpy as np
    out = os.path.join(a.scratch, f"{m['name']}-forward-{dtype}.jsonl")
    cmd = [masque(a), "run", m["pipelines"]["forward"], "-i", m["head"], "--input-format", "ids",
           "-q", "--set", f"task.top_k={m['config']['vocab_size']}"] + masque_options(dtype, 2)
    code, _, err, rss, _ = run(["nice", "-n", "10"] + cmd, limit, stdout_path=out)
    if code != 0:
        raise Refused((err.strip().splitlines() or [f"exit code {code}"])[-1])
    with open(out) as f:
        rec = json.loads(f.readline())
    os.remove(out)
    x = np.zeros((len(rec["positions"]), m["config"]["vocab_size"]))
    for i, p in enumerate(rec["positions"]):
        x[i, p["top_ids"]] = p["top_logits"]
    return x


def compare(x, ref):
    """max over positions of max|x - ref| / max|ref|, each row centred (llama.cpp gives
    log-softmax, i.e. logits up to a constant per position), and the positions whose argmax
    agree."""
    import numpy as np
    xc = x - x.mean(axis=1, keepdims=True)
    rc = ref - ref.mean(axis=1, keepdims=True)
    rel = np.abs(xc - rc).max(axis=1) / np.abs(rc).max(axis=1)
    same = int((x.argmax(axis=1) == ref.argmax(axis=1)).sum())
    return float(rel.max()), same


def kl_per_token(x, ref):
    """Mean over positions of KL(softmax(ref) || softmax(x)) in nats: what quantization costs a
    token's distribution against the float64 reference (llama.cpp's log-probabilities are
    logits up to a constant per position, which softmax ignores)."""
    import numpy as np

    def log_softmax(v):
        v = v - v.max(axis=1, keepdims=True)
        return v - np.log(np.exp(v).sum(axis=1, keepdims=True))
    lr, lx = log_softmax(ref), log_softmax(x)
    return float((np.exp(lr) * (lr - lx)).sum(axis=1).mean())


def bench_logits(a, m, results, skipped, factors):
    """The first LOGIT_POSITIONS positions' logits: masque's forward task, llama.cpp's
    log-probabilities, and a float64 torch reference (reference_torch.py) of the same weights."""
    name, config = m["name"], m["config"]
    ref_path = os.path.join(a.scratch, f"{name}-reference.f32")
    if not os.path.exists(ref_path):
        log(f"{name}: float64 reference logits (reference_torch.py) ...")
        subprocess.run(["nice", "-n", "10", PYTHON, os.path.join(HERE, "reference_torch.py"),
                        m["folder"], m["head"], "--positions", str(LOGIT_POSITIONS),
                        "--out", ref_path], check=True, stdout=subprocess.DEVNULL)
    ref = read_logits(ref_path, LOGIT_POSITIONS)
    for dtype in a.dtypes:
        gtype = PAIRS[dtype]
        row = {"bench": "logits", "model": name, "dtype": dtype, "gguf": gtype}
        estimate, ok = masque_limit(a, name, dtype, m["bytes"], factors)
        mq = None
        if ok:
            try:
                mq = masque_logits(a, m, dtype, min(a.memory_limit * 1.1,
                                                    estimate * 1.5 + 2 * GIB))
                row["masque_vs_reference"], row["masque_argmax_same"] = compare(mq, ref)
                row["masque_kl"] = kl_per_token(mq, ref)
            except (Refused, Killed) as e:
                row["masque_error"] = str(e)
        else:
            row["masque_error"] = f"estimated peak RSS {estimate / GIB:.1f} GiB: not run"
        size = (linear_weights(config) + config["vocab_size"] * config["hidden_size"]) * \
            GGUF_BYTES_PER_WEIGHT[gtype]
        if size * 1.15 <= a.memory_limit:
            gguf = ensure_gguf(a, name, m["folder"], gtype, m["dropped"])
            for label, extra in (("f32", ["--kv-type", "F32", "--flash-attention", "off"]),
                                 ("default", [])):
                out = os.path.join(a.scratch, f"{name}-llama-{gtype}-{label}.f32")
                try:
                    run_llama(a, gguf, m["head"], 2, config, a.memory_limit * 1.1,
                              ["--logits", str(LOGIT_POSITIONS), "--logits-out", out] + extra)
                except (Refused, Killed) as e:
                    row[f"llama_{label}_error"] = str(e)
                    continue
                lp = read_logits(out, LOGIT_POSITIONS)
                os.remove(out)
                row[f"llama_{label}_vs_reference"], row[f"llama_{label}_argmax_same"] = \
                    compare(lp, ref)
                row[f"llama_{label}_kl"] = kl_per_token(lp, ref)
                if mq is not None:
                    row[f"masque_vs_llama_{label}"], _ = compare(mq, lp)
        else:
            row["llama_error"] = f"a {size / GIB:.1f} GiB file: not run"
        results.append(row)
        log(f"{name} logits {dtype}/{gtype}: " + ", ".join(
            f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
            if k not in ("bench", "model", "dtype", "gguf")))


# ---- tables ----------------------------------------------------------------------------------

class Results(list):
    def __init__(self, path, header):
        super().__init__()
        self.path, self.header = path, header

    def append(self, row):
        super().append(row)
        with open(self.path, "w") as f:
            json.dump({**self.header, "results": list(self)}, f, indent=1)


def select(results, **kw):
    return [r for r in results if all(r.get(k) == v for k, v in kw.items())]


def fmt_ratio(x, y):
    return f"**{x / y:.2f}×**" if x == x and y == y and y else "–"


def table_speed(results, header, model):
    if not select(results, bench="speed", model=model):
        return "(no speed measurements)"
    lines = [
        "| masque / llama.cpp | threads | prefill tok/s masque | llama.cpp | ratio "
        "| decode tok/s masque | llama.cpp | ratio | % of read bandwidth masque / llama.cpp "
        "| peak RSS GiB masque | llama.cpp | ratio | same tokens | others' CPU share, max |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- | ---: |"]
    config = model_config(model)
    weights = linear_weights(config)
    for dtype in header["dtypes"]:
        gtype = PAIRS[dtype]
        for threads in header["threads"]:
            ms = select(results, bench="speed", model=model, side="masque", dtype=dtype,
                        threads=threads)
            ls = select(results, bench="speed", model=model, side="llama", dtype=gtype,
                        threads=threads)
            if not ms and not ls:
                continue

            def med(rows, key):
                return median([r[key] for r in rows])

            mp, lp = med(ms, "prefill_tokens_per_second"), med(ls, "prefill_tokens_per_second")
            md, ld = med(ms, "decode_tokens_per_second"), med(ls, "decode_tokens_per_second")
            mr, lr = med(ms, "peak_rss") / GIB, med(ls, "peak_rss") / GIB
            others = max([r.get("others_cpu", 0.0) for r in ms + ls])
            bw = bandwidth(results, threads) * 1e9
            mbw = md * weights * MASQUE_BYTES_PER_WEIGHT[dtype] / bw
            lbw = ld * weights * GGUF_BYTES_PER_WEIGHT[gtype] / bw
            same = "–"
            if ms and ls:
                same = "yes" if all(m["tokens"] == ms[0]["tokens"] for m in ms) and \
                    all(x["tokens"] == ms[0]["tokens"] for x in ls) else \
                    f"first {common_prefix(ms[0]['tokens'], ls[0]['tokens'])}"

            def f(x, digits=1):
                return f"{x:.{digits}f}" if x == x else "–"

            lines.append(
                f"| {dtype} / {gtype} | {threads} | {f(mp)} | {f(lp)} | {fmt_ratio(mp, lp)} | "
                f"{f(md, 2)} | {f(ld, 2)} | {fmt_ratio(md, ld)} | "
                f"{f(100 * mbw, 0)} % / {f(100 * lbw, 0)} % | {f(mr, 2)} | {f(lr, 2)} | "
                f"{fmt_ratio(mr, lr)} | {same} | {100 * others:.0f} % |")
    return "\n".join(lines)


def table_cpu(results, header, model):
    """One thread, rates by CPU time (the process's own seconds on the CPU): what other
    processes on a shared machine change least."""
    if 1 not in header["threads"]:
        return ""
    lines = ["| masque / llama.cpp | prefill tok/s per CPU second masque | llama.cpp | ratio "
             "| decode tok/s per CPU second masque | llama.cpp | ratio |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for dtype in header["dtypes"]:
        gtype = PAIRS[dtype]
        ms = select(results, bench="speed", model=model, side="masque", dtype=dtype, threads=1)
        ls = select(results, bench="speed", model=model, side="llama", dtype=gtype, threads=1)
        if not ms and not ls:
            continue
        v = [median([r[k] for r in rows if k in r])
             for k in ("prefill_cpu_tokens_per_second", "decode_cpu_tokens_per_second")
             for rows in (ms, ls)]
        cells = [f"{x:.1f}" if x == x else "–" for x in v]
        lines.append(f"| {dtype} / {gtype} | {cells[0]} | {cells[1]} | {fmt_ratio(v[0], v[1])} "
                     f"| {cells[2]} | {cells[3]} | {fmt_ratio(v[2], v[3])} |")
    return "\n".join(lines)


def common_prefix(x, y):
    n = 0
    for p, q in zip(x, y):
        if p != q:
            break
        n += 1
    return n


def table_logits(results, model):
    rows = select(results, bench="logits", model=model)
    if not rows:
        return ""
    lines = [
        "| masque / llama.cpp | masque vs llama.cpp (f32 attention) | masque vs llama.cpp "
        "(defaults) | masque vs float64 | llama.cpp (f32 attention) vs float64 "
        "| llama.cpp (defaults) vs float64 | argmax = float64's (masque, llama.cpp f32 att.) "
        "| KL to float64, nats/token: masque | llama.cpp (f32 att.) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]

    def e(r, k):
        v = r.get(k)
        return f"{v:.1e}" if isinstance(v, float) else "–"

    for r in rows:
        lines.append(
            f"| {r['dtype']} / {r['gguf']} | {e(r, 'masque_vs_llama_f32')} | "
            f"{e(r, 'masque_vs_llama_default')} | {e(r, 'masque_vs_reference')} | "
            f"{e(r, 'llama_f32_vs_reference')} | {e(r, 'llama_default_vs_reference')} | "
            f"{r.get('masque_argmax_same', '–')}/{LOGIT_POSITIONS}, "
            f"{r.get('llama_f32_argmax_same', '–')}/{LOGIT_POSITIONS} | "
            f"{e(r, 'masque_kl')} | {e(r, 'llama_f32_kl')} |")
        for k in ("masque_error", "llama_error", "llama_f32_error", "llama_default_error"):
            if k in r:
                lines.append(f"|  | {k.replace('_', ' ')}: {r[k]} | | | | | | | |")
    return "\n".join(lines)


def report(results, header):
    print(f"date: {header['started']}; machine: {header['machine']}")
    print(f"masque: commit {header['commit']}; llama.cpp: {header['peer']}")
    print(f"load average at start: {header['load_before']}; at end: "
          f"{header.get('load_after', '(interrupted)')}; rounds: {header['rounds']}")
    bws = ", ".join(f"{bandwidth(results, t):.1f} GB/s on {t} thread{'s' if t > 1 else ''}"
                    for t in header["threads"])
    src = next((r["source"] for r in results if r.get("bench") == "bandwidth"), "?")
    print(f"read bandwidth measured in the run ({src}, medians): {bws}")
    llama_rows = select(results, bench="speed", side="llama")
    if llama_rows:
        print(f"llama.cpp: {llama_rows[0]['system_info'].strip()} flash attention "
              f"{llama_rows[0]['flash_attention']}, KV cache {llama_rows[0]['kv_type']}")
    for note in header.get("notes", []):
        print(f"note: {note}")
    for model in header["models"]:
        config = model_config(model)
        print(f"\n### {model} (random weights; {linear_weights(config) / 1e9:.2f} G weights in "
              f"the linear layers and head a decoding step reads)\n")
        print(f"prefill {PREFILL} tokens; decode {NEW_TOKENS} greedy tokens at batch 1 "
              "(tokens/s of the 127 steps after the first); medians over rounds\n")
        print(table_speed(results, header, model))
        t = table_cpu(results, header, model)
        if t and select(results, bench="speed", model=model):
            print("\nThe same, one thread, by CPU time instead of wall time (robust to other "
                  "processes on the machine)\n")
            print(t)
        t = table_logits(results, model)
        if t:
            print(f"\nLogits of the first {LOGIT_POSITIONS} positions: max |difference| / max "
                  "|logit| (rows centred), worst position\n")
            print(t)
    skipped = header.get("skipped", [])
    if skipped:
        print("\nNot run:")
        for s in dict.fromkeys(skipped):
            print(f"- {s}")


def machine():
    with open("/proc/cpuinfo") as f:
        lines = f.readlines()
    model = next(l.split(":", 1)[1].strip() for l in lines if l.startswith("model name"))
    family = next((l.split(":", 1)[1].strip() for l in lines if l.startswith("cpu family")), "?")
    number = next((l.split(":", 1)[1].strip() for l in lines if l.startswith("model\t")), "?")
    flags = next((l.split(":", 1)[1].split() for l in lines if l.startswith("flags")), [])
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE"
    extras = [x for x in ("avx512_bf16", "avx512_vnni", "amx_tile") if x in flags]
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 1024 / 1024
    return (f"{os.cpu_count()} vCPU {model} (family {family} model {number}, {isa}"
            f"{' + ' + ', '.join(extras) if extras else ''}), {mem:.0f} GiB, "
            f"{platform.system()} {platform.release()}")


def peer_version():
    try:
        with open(os.path.join(HERE, "node_modules", "node-llama-cpp", "package.json")) as f:
            v = json.load(f)["version"]
        with open(os.path.join(HERE, "node_modules", "node-llama-cpp", "llama",
                               "llama.cpp.info.json")) as f:
            tag = json.load(f)["tag"]
        return f"node-llama-cpp {v} (prebuilt @node-llama-cpp/linux-x64, llama.cpp {tag})"
    except OSError:
        return "node-llama-cpp (not installed)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--models-dir", default=os.environ.get("PEERS_MODELS", "/work/peers-models"))
    ap.add_argument("--models", default="qwen2.5-0.5b,llama-3.2-3b,llama-3.1-8b")
    ap.add_argument("--dtypes", default="f32,bf16,int8,int4")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="logits,speed")
    ap.add_argument("--rope-scaling", choices=("auto", "keep", "drop"), default="auto",
                    help="auto: keep rope_scaling when masque loads it, else drop it")
    ap.add_argument("--memory-limit-gb", type=float, default=20.0)
    ap.add_argument("--disk-reserve-gb", type=float, default=20.0)
    ap.add_argument("--quiet-wait", type=float, default=900,
                    help="seconds to wait at most for idle CPUs before each process")
    ap.add_argument("--results", default="results.json",
                    help="the raw results' file name in --scratch")
    ap.add_argument("--append", action="store_true",
                    help="add to the measurements already in --results")
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    a.build, a.scratch = os.path.abspath(a.build), os.path.abspath(a.scratch)
    a.memory_limit = a.memory_limit_gb * GIB
    a.disk_reserve = a.disk_reserve_gb * 1e9
    SCRATCH[0] = a.scratch
    QUIET_WAIT[0] = a.quiet_wait
    path = os.path.join(a.scratch, a.results)
    if a.report:
        with open(path) as f:
            saved = json.load(f)
        report(saved["results"], saved)
        return
    a.models = [m for m in a.models.split(",") if m]
    a.dtypes = [d for d in a.dtypes.split(",") if d]
    a.threads = [int(t) for t in a.threads.split(",") if t]
    for d in a.dtypes:
        if d not in PAIRS:
            ap.error(f"--dtypes: {d!r} is not one of {', '.join(PAIRS)}")
    for m in a.models:
        if not os.path.exists(os.path.join(HERE, "configs", m + ".json")):
            ap.error(f"--models: no configs/{m}.json")
    parts = a.only.split(",")
    os.makedirs(a.scratch, exist_ok=True)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    header = {"started": datetime.datetime.now().isoformat(timespec="seconds"),
              "machine": machine(), "commit": commit, "peer": peer_version(),
              "load_before": loadavg(), "rounds": a.rounds, "models": a.models,
              "dtypes": a.dtypes, "threads": a.threads, "notes": [], "skipped": []}
    results = Results(path, header)
    if a.append and os.path.exists(path):
        # add to an earlier run's measurements (e.g. one model or thread count per call)
        with open(path) as f:
            saved = json.load(f)
        for key in ("models", "dtypes", "threads"):
            header[key] = list(dict.fromkeys(saved.get(key, []) + header[key]))
        for key in ("notes", "skipped"):
            header[key] = saved.get(key, [])
        header["started"] = saved.get("started", header["started"])
        if saved.get("commit") and saved["commit"] != header["commit"]:
            header["commit"] = f"{saved['commit']}, then {header['commit']}"
        header["load_before"] = saved.get("load_before", header["load_before"])
        for row in saved["results"]:
            if row.get("bench") != "end":
                list.append(results, row)
    bench_bandwidth(a, results, "start")
    factors = {}
    for name in a.models:
        folder = ensure_folder(a, name)
        dropped = settle_config(a, name, folder, header["notes"])
        config = model_config(name)
        if dropped:
            del config["rope_scaling"]
        prompt, head = prompt_file(a, name, config)
        empty = os.path.join(a.scratch, "empty.ids")
        open(empty, "w").close()
        m = {"name": name, "folder": folder, "config": config, "dropped": dropped,
             "bytes": folder_bytes(folder), "prompt": prompt, "head": head, "empty": empty,
             "pipelines": pipelines(a, name, folder, config)}
        if "logits" in parts:  # first: what is timed must compute the same thing
            bench_logits(a, m, results, header["skipped"], factors)
        if "speed" in parts:
            bench_speed(a, m, results, header["skipped"], factors)
    bench_bandwidth(a, results, "end")
    header["load_after"] = loadavg()
    results.append({"bench": "end"})
    report(results, header)


if __name__ == "__main__":
    main()

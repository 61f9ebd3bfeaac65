#!/usr/bin/python3
"""The G2P UniLM model trained by masque and by the plain-torch reference trainer on the same
data, from the same initial weights, for the same steps (issue 19, second "Must show").

Driven by bench/g2p/run.sh; python3-torch only. Subcommands:

  prepare  --data DIR --config CONFIG.json --work WORK [--seed S]
      WORK/train.tsv      DIR/train.tsv in a seeded shuffled order (both trainers then run with
                          shuffle: false, so batch k is lines 64k .. 64k+63 for both)
      WORK/init/          config.json, model.safetensors (initialised as BERT: normal(0,
                          initializer_range) for matrices and embeddings, zero biases, unit
                          norm weights; seeded), tokenizer.json, tokenizer_config.json
  check-ids --work WORK --masque-source S.jsonl --masque-target T.jsonl
      this script's token ids of every training record equal `masque tokenize`'s
  train    --work WORK --pipeline RESOLVED.yaml --threads N
      reference_trainer.train() over the same batches with the task settings masque resolved
      (lr, schedule, warmup, AdamW, clipping, batch, steps), f32, then the validation loss;
      writes WORK/torch/losses.jsonl and WORK/torch/result.json
  report   --work WORK --masque-total S --torch-total S
      the comparison: wall times, tokens/s, validation losses, the step-by-step agreement
"""

import argparse
import json
import math
import random
import re
import shutil
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "trainer"))
sys.path.insert(0, str(REPO / "tests" / "support"))
import reference_trainer as ref  # noqa: E402  (the trajectory tests' reference, unchanged)
from safetensors_file import write_safetensors  # noqa: E402

# ---- data ---------------------------------------------------------------------------------


def read_pairs(path):
    """`letters<TAB>phones` lines -> [(source text, target text)]."""
    pairs = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        source, sep, target = line.partition("\t")
        if not sep:
            raise SystemExit(f"{path}:{n}: expected `letters<TAB>phones`")
        pairs.append((source, target))
    return pairs


class Tokenizer:
    """tokenizer.json as scripts/g2p-data.sh writes it: WhitespaceSplit, then Split on
    `[A-Z]+|.` (isolated), then a WordLevel vocabulary without an unknown token."""

    def __init__(self, path):
        spec = json.loads(Path(path).read_text())
        pre = spec["pre_tokenizer"]
        kinds = [p["type"] for p in pre.get("pretokenizers", [pre])]
        if spec["model"]["type"] != "WordLevel" or kinds != ["WhitespaceSplit", "Split"]:
            raise SystemExit(f"{path}: not the G2P tokenizer of scripts/g2p-data.sh")
        self.pattern = re.compile(pre["pretokenizers"][1]["pattern"]["Regex"])
        self.vocab = spec["model"]["vocab"]
        self.special = {t["content"]: t["id"] for t in spec["added_tokens"]}

    def ids(self, text):
        out = []
        for word in text.split():
            for piece in self.pattern.findall(word):
                if piece not in self.vocab:
                    raise ValueError(f"{piece!r} is not in the vocabulary")
                out.append(self.vocab[piece])
        return out


def examples_of(pairs, tok):
    return [{"source": tok.ids(s), "target": tok.ids(t)} for s, t in pairs]


def input_tokens(example):
    """[CLS] source [SEP] target [SEP]: what masque counts as a record's tokens."""
    return len(example["source"]) + len(example["target"]) + 3


# ---- prepare --------------------------------------------------------------------------------


def init_bert(cfg, seed):
    """BertForMaskedLM's tensors as masque stores them (the decoder is tied to the word
    embeddings), initialised as BERT is: normal(0, initializer_range) for matrices and
    embeddings, zero biases, unit norm weights, drawn in name order from one seeded generator."""
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    shapes = {"bert.embeddings.word_embeddings.weight": [v, h],
              "bert.embeddings.position_embeddings.weight": [cfg["max_position_embeddings"], h],
              "bert.embeddings.token_type_embeddings.weight": [cfg["type_vocab_size"], h],
              "bert.embeddings.LayerNorm.weight": [h], "bert.embeddings.LayerNorm.bias": [h]}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{layer}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            shapes[p + name + ".weight"], shapes[p + name + ".bias"] = [h, h], [h]
        shapes[p + "intermediate.dense.weight"], shapes[p + "intermediate.dense.bias"] = [f, h], [f]
        shapes[p + "output.dense.weight"], shapes[p + "output.dense.bias"] = [h, f], [h]
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[p + norm + ".weight"], shapes[p + norm + ".bias"] = [h], [h]
    shapes.update({"cls.predictions.transform.dense.weight": [h, h],
                   "cls.predictions.transform.dense.bias": [h],
                   "cls.predictions.transform.LayerNorm.weight": [h],
                   "cls.predictions.transform.LayerNorm.bias": [h], "cls.predictions.bias": [v]})
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name in sorted(shapes):  # a fixed draw order
        shape = shapes[name]
        if len(shape) == 2:
            t = torch.empty(shape).normal_(0.0, cfg["initializer_range"], generator=gen)
        elif "LayerNorm.weight" in name:
            t = torch.ones(shape)
        else:
            t = torch.zeros(shape)
        tensors[name] = t
    return tensors


def prepare(a):
    work, data = Path(a.work), Path(a.data)
    work.mkdir(parents=True, exist_ok=True)
    lines = (data / "train.tsv").read_text().splitlines(keepends=True)
    random.Random(a.seed).shuffle(lines)
    (work / "train.tsv").write_text("".join(lines))
    init = work / "init"
    if init.exists():
        shutil.rmtree(init)
    init.mkdir()
    cfg = json.loads(Path(a.config).read_text())
    (init / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    write_safetensors(init / "model.safetensors", init_bert(cfg, a.seed))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(data / "tokenizer" / name, init / name)
    print(f"prepare: {len(lines)} training records shuffled (seed {a.seed}) into "
          f"{work / 'train.tsv'}; initial model {init}")


# ---- check-ids --------------------------------------------------------------------------------


def check_ids(a):
    work = Path(a.work)
    tok = Tokenizer(work / "init" / "tokenizer.json")
    examples = examples_of(read_pairs(work / "train.tsv"), tok)
    cls, sep = tok.special["[CLS]"], tok.special["[SEP]"]
    sides = {"source": (a.masque_source, lambda e: [cls] + e["source"] + [sep]),
             "target": (a.masque_target, lambda e: e["target"])}
    for side, (path, ours) in sides.items():
        got = [json.loads(line)["ids"] for line in Path(path).read_text().splitlines()]
        if len(got) != len(examples):
            raise SystemExit(f"check-ids: masque tokenized {len(got)} {side}s, this script "
                             f"{len(examples)}")
        for n, (g, e) in enumerate(zip(got, examples), 1):
            if g != ours(e):
                raise SystemExit(f"check-ids: {work / 'train.tsv'}:{n}: {side} ids differ: "
                                 f"masque {g}, reference {ours(e)}")
    print(f"token ids: identical for all {len(examples)} training records (source with "
          f"[CLS]/[SEP], target)")


# ---- train ----------------------------------------------------------------------------------


def task_settings(pipeline):
    """The `task:` section of masque's resolved pipeline.yaml (flat `key: value` lines)."""
    out, inside = {}, False
    for line in Path(pipeline).read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            inside = line.rstrip() == "task:"
            continue
        if inside:
            key, _, value = line.strip().partition(":")
            value = value.strip()
            try:
                out[key] = int(value)
            except ValueError:
                try:
                    out[key] = float(value)
                except ValueError:
                    out[key] = value
    return out


def plan_of(task, examples, model, special):
    """reference_trainer's plan for the settings masque ran with."""
    expected = {"objective": "seq2seq", "shuffle": "false", "accumulation": 1,
                "label_smoothing": 0.0, "max_tokens": 0, "matmul_dtype": "f32",
                "dropout": 0.0}
    for key, value in expected.items():
        if task.get(key) != value:
            raise SystemExit(f"train: the bench expects task.{key} = {value}, masque ran with "
                             f"{task.get(key)!r}")
    if task["warmup_steps"] == 0 and task["warmup_ratio"] > 0:
        raise SystemExit("train: warmup_ratio is not mirrored; set warmup_steps")
    return {"model": str(model), "objective": "seq2seq", "mask": "seq2seq",
            "examples": examples, "special": special, "dtype": "float32",
            "batch_size": task["batch_size"], "steps": task["steps"], "lr": task["lr"],
            "betas": [task["adam_beta1"], task["adam_beta2"]], "eps": task["adam_epsilon"],
            "weight_decay": task["weight_decay"], "schedule": task["schedule"],
            "warmup_steps": task["warmup_steps"], "max_grad_norm": task["max_grad_norm"]}


def validation_loss(folder, plan, examples, batch_size):
    """Sum of the token losses over the validation records / their count (batches in file
    order), masque's valid_loss."""
    model = ref.load_model(folder, torch.float32)
    total, count = 0.0, 0
    with torch.no_grad():
        for b in range(0, len(examples), batch_size):
            s, c = ref.batch_loss_sum(model, plan, examples[b:b + batch_size], 0.0)
            total += float(s)
            count += c
    return total / count, count


def train(a):
    work = Path(a.work)
    torch.set_num_threads(a.threads)
    task = task_settings(a.pipeline)
    tok = Tokenizer(work / "init" / "tokenizer.json")
    examples = examples_of(read_pairs(work / "train.tsv"), tok)
    valid = examples_of(read_pairs(task["valid_file"]), tok)
    special = {"cls": tok.special["[CLS]"], "sep": tok.special["[SEP]"],
               "mask": tok.special["[MASK]"]}
    plan = plan_of(task, examples, work / "init", special)
    steps, batch = plan["steps"], plan["batch_size"]
    if steps * batch > len(examples):
        raise SystemExit(f"train: {steps} steps of {batch} records pass the end of the "
                         f"{len(examples)} training records (the bench keeps to one epoch)")
    out = work / "torch"
    out.mkdir(exist_ok=True)
    start = time.perf_counter()
    ref.train(plan, out / "losses.jsonl", weights_out=out / "model.safetensors")
    seconds = time.perf_counter() - start
    final = out / "final"
    final.mkdir(exist_ok=True)
    shutil.copy(work / "init" / "config.json", final / "config.json")
    shutil.move(str(out / "model.safetensors"), final / "model.safetensors")
    loss, count = validation_loss(final, plan, valid, int(task["valid_batch_size"]))
    result = {"train_seconds": seconds, "valid_loss": loss, "valid_tokens": count,
              "input_tokens": sum(input_tokens(e) for e in examples[:steps * batch]),
              "steps": steps, "threads": a.threads, "torch": torch.__version__}
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"torch: {steps} steps in {seconds:.1f} s, valid loss {loss:.4f}")


# ---- report ---------------------------------------------------------------------------------


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def report(a):
    work = Path(a.work)
    metrics = jsonl(work / "masque" / "metrics.jsonl")
    m_steps = [m for m in metrics if "loss" in m]
    m_valid = [m for m in metrics if "valid_loss" in m][-1]
    t_steps = jsonl(work / "torch" / "losses.jsonl")
    t = json.loads((work / "torch" / "result.json").read_text())
    if len(m_steps) != len(t_steps):
        raise SystemExit(f"report: masque ran {len(m_steps)} steps, torch {len(t_steps)}")
    rel = [abs(m["loss"] - r["loss"]) / abs(r["loss"]) for m, r in zip(m_steps, t_steps)]
    lr_diff = max(abs(m["lr"] - r["lr"]) for m, r in zip(m_steps, t_steps))
    if any(m["tokens"] != r["tokens"] for m, r in zip(m_steps, t_steps)):
        raise SystemExit("report: the steps predict different token counts (not the same batches)")
    m_train = m_steps[-1]["seconds"]
    tokens = t["input_tokens"]
    early = min(20, len(rel))
    print(f"CPU: {cpu_model()} ({a.cpus} vCPU); threads: masque --threads {t['threads']}, "
          f"torch {t['torch']} set_num_threads({t['threads']})")
    batch = task_settings(work / "masque" / "pipeline.yaml")["batch_size"]
    print(f"steps: {len(m_steps)} x {batch} records, {tokens} input tokens "
          f"({sum(m['tokens'] for m in m_steps)} predicted)")
    print("\nstep-by-step (same batches, same initial weights; f32):")
    print("  step   masque loss    torch loss     rel. diff")
    for i in range(early):
        print(f"  {i + 1:4d}   {m_steps[i]['loss']:.6f}    {t_steps[i]['loss']:.6f}     {rel[i]:.2e}")
    print(f"  max rel. diff: steps 1-{early} {max(rel[:early]):.2e}, all {len(rel)} steps "
          f"{max(rel):.2e}; last step: masque {m_steps[-1]['loss']:.4f}, torch "
          f"{t_steps[-1]['loss']:.4f}; max |lr diff| {lr_diff:.1e}")
    v_rel = (m_valid["valid_loss"] - t["valid_loss"]) / t["valid_loss"]
    print("\n           train s   total s   tokens/s   valid loss")
    print(f"  masque  {m_train:8.1f}  {a.masque_total:8.1f}  {tokens / m_train:9.0f}   "
          f"{m_valid['valid_loss']:.4f}")
    print(f"  torch   {t['train_seconds']:8.1f}  {a.torch_total:8.1f}  "
          f"{tokens / t['train_seconds']:9.0f}   {t['valid_loss']:.4f}")
    print(f"\nvalid loss: masque vs torch {v_rel:+.2%} relative over {t['valid_tokens']} tokens "
          f"({'within' if abs(v_rel) <= 0.02 else 'NOT within'} 2 %)")
    print(f"wall time torch / masque: training {t['train_seconds'] / m_train:.2f}x, "
          f"total {a.torch_total / a.masque_total:.2f}x")
    ok = abs(v_rel) <= 0.02 and max(rel[:early]) <= 1e-3
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--data", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("check-ids")
    p.add_argument("--work", required=True)
    p.add_argument("--masque-source", required=True)
    p.add_argument("--masque-target", required=True)
    p = sub.add_parser("train")
    p.add_argument("--work", required=True)
    p.add_argument("--pipeline", required=True)
    p.add_argument("--threads", type=int, default=2)
    p = sub.add_parser("report")
    p.add_argument("--work", required=True)
    p.add_argument("--masque-total", type=float, required=True)
    p.add_argument("--torch-total", type=float, required=True)
    p.add_argument("--cpus", type=int, default=0)
    a = ap.parse_args()
    return {"prepare": prepare, "check-ids": check_ids, "train": train,
            "report": report}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())

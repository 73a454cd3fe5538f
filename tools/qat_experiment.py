#!/usr/bin/env python3
"""The QAT insertion-point experiment (issue 11, docs/qat.md): on the bundled corpus and the demo
model, fp32 training against QAT with each single activation point (attn_out, post_norm, ffn_out,
residual — each with the weights fake-quantized too) and with linear_in (the W8A8 scheme an
integer model runs), over several seeds, beside post-training quantization (PTQ W8A8) of the fp32
model. Reported per configuration: steps to a target validation loss, the final validation
perplexity of the model as trained (fake-quantized for QAT), the perplexity of the exported integer
model (where one exists: linear_in, and PTQ), and the share of runs that diverged.

usage: tools/qat_experiment.py [--ete build/ete] [--seeds 1,2,3] [--steps 900] [--out DIR]
                               [--bits 8] [--points attn_out,...,linear_in_lsq] [--fp32-from DIR]
                               [--finetune-steps M [--finetune-lr LR]] [--json results.json]
       tools/qat_experiment.py --report results.json[,more.json] (seeds run apart report as one)

With --finetune-steps, QAT is fine-tuning (as torchao applies it): every configuration, fp32
included, continues the seed's trained fp32 model (model.init_from) for M more steps at
--finetune-lr; PTQ then quantizes the fp32-fine-tuned model, so QAT and PTQ start from the same
weights and spend the same steps.

Only the Python standard library; every number comes from the `ete` binary (train, export int8,
quantize --scheme w8a8, eval).
"""
import argparse
import json
import math
import os
import statistics
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POINTS = ["attn_out", "post_norm", "ffn_out", "residual", "linear_in"]


def run(cmd, log):
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    return r.returncode


def read_shard(path):
    with open(path, "rb") as f:
        head = f.read(24)
        assert head[:8] == b"ETETOK01", path
        width, vocab, n = struct.unpack("<IIQ", head[8:])
        data = f.read(n * width)
    fmt = {1: "B", 2: "H", 4: "I"}[width]
    return vocab, width, list(struct.unpack(f"<{n}{fmt}", data))


def write_shard(path, vocab, width, ids):
    fmt = {1: "B", 2: "H", 4: "I"}[width]
    with open(path, "wb") as f:
        f.write(b"ETETOK01" + struct.pack("<IIQ", width, vocab, len(ids)))
        f.write(struct.pack(f"<{len(ids)}{fmt}", *ids))


def val_shard(out, seq, frac):
    """The trainer's validation windows (data/loader.h) of data/kjv.bin, as their own shard."""
    vocab, width, ids = read_shard(os.path.join(ROOT, "data/kjv.bin"))
    n = len(ids)
    w = (n - 2) // seq
    v = max(1, math.ceil(frac * w))
    start = (w - v) * seq + 1
    path = os.path.join(out, "val.bin")
    write_shard(path, vocab, width, ids[start:start + v * seq + 1])
    return path, (v * seq + 1) // (seq + 1)


def eval_loss(ete, model, val, rows, seq, extra, log):
    cmd = [ete, "eval", "--model", model, "--tokens", val, "--batch", str(rows), "--seq",
           str(seq), "--json"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    with open(log, "w") as f:
        f.write(r.stdout + r.stderr)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])["loss"]


def metrics(run_dir):
    rows = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rows.append(json.loads(line))
    return rows


def collect(a):
    """Trains, quantizes and evaluates every configuration: config -> per-seed entries."""
    os.makedirs(a.out, exist_ok=True)
    seq = 128  # the demo config's train.seq_len
    val, rows = val_shard(a.out, seq, 0.02)
    seeds = [int(s) for s in a.seeds.split(",")]
    common = ["--set", f"train.steps={a.steps}", "--set", f"train.eval_every={a.eval_every}",
              "--set", "train.log_every=100000"]
    results = {}  # config -> list of per-seed dicts

    def train(name, seed, sets):
        out = os.path.join(a.out, f"{name}_s{seed}")
        code = run([a.ete, "train", "--out", out, "--set", f"train.seed={seed}"] + common + sets,
                   out + ".log")
        m = metrics(out) if os.path.exists(os.path.join(out, "metrics.jsonl")) else []
        vals = [(r["step"], r["val_loss"]) for r in m if "val_loss" in r]
        diverged = code != 0 or any(not math.isfinite(r["loss"]) for r in m)
        return out, vals, diverged

    points = [p for p in a.points.split(",") if p]
    for seed in seeds:
        prior = os.path.join(a.fp32_from, f"fp32_s{seed}") if a.fp32_from else ""
        if prior and os.path.exists(os.path.join(prior, "final")):
            out, div = prior, False
            vals = [(r["step"], r["val_loss"]) for r in metrics(out) if "val_loss" in r]
        else:
            out, vals, div = train("fp32", seed, [])
        ft = []
        if a.finetune_steps:
            ft = ["--set", f"model.init_from={out}/final", "--set",
                  f"train.steps={a.finetune_steps}", "--set", f"train.lr={a.finetune_lr}",
                  "--set", f"train.min_lr={a.finetune_lr / 10}", "--set", "train.warmup_steps=10"]
            out, vals, div = train("fp32ft", seed, ft)
        entry = {"seed": seed, "vals": vals, "diverged": div}
        entry["model_loss"] = eval_loss(a.ete, out + "/final", val, rows, seq, [], out + ".eval")
        ptq = os.path.join(a.out, f"fp32_s{seed}_ptq")
        code = run([a.ete, "quantize", "--scheme", "w8a8" if a.bits == 8 else "w4a8",
                    "--weight-granularity", a.granularity, "--model", out + "/final", "--calib", os.path.join(ROOT, "data/kjv.bin"),
                    "--calib-batches", "8", "--batch", "8", "--seq", str(seq), "--out", ptq],
                   ptq + ".log")
        entry["int8_loss"] = (eval_loss(a.ete, ptq, val, rows, seq, [], ptq + ".eval")
                              if code == 0 else None)
        results.setdefault("fp32 / PTQ", []).append(entry)
        for p in points:
            # linear_in_lsq: linear_in with learned weight scales (qat.learnable_scale).
            point = "linear_in" if p == "linear_in_lsq" else p
            sets = ["--set", "qat.enabled=true", "--set", f"qat.points=weight,{point}",
                    "--set", f"qat.weight_bits={a.bits}",
                    "--set", f"qat.weight_granularity={a.granularity}"]
            if p == "linear_in_lsq":
                sets += ["--set", "qat.learnable_scale=true"]
            out, vals, div = train(p, seed, ft + sets)
            entry = {"seed": seed, "vals": vals, "diverged": div}
            entry["model_loss"] = eval_loss(a.ete, out + "/final", val, rows, seq,
                                            ["--fake-quant"], out + ".eval")
            entry["int8_loss"] = None
            if point == "linear_in" and not div:
                code = run([a.ete, "export", "int8", "--run", out, "--out", out + "_int8"],
                           out + "_int8.log")
                if code == 0:
                    entry["int8_loss"] = eval_loss(a.ete, out + "_int8", val, rows, seq, [],
                                                   out + "_int8.eval")
            results.setdefault(f"QAT {p}", []).append(entry)
            print(f"seed {seed} {p}: {entry['model_loss']}", file=sys.stderr, flush=True)

    return results, seeds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ete", default=os.path.join(ROOT, "build/ete"))
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--bits", type=int, default=8, help="QAT weight bits (8 or 4)")
    ap.add_argument("--out", default=os.path.join(ROOT, "runs/qat_experiment"))
    ap.add_argument("--points", default=",".join(POINTS),
                    help="QAT configurations to run (also linear_in_lsq: linear_in with "
                         "qat.learnable_scale)")
    ap.add_argument("--fp32-from", default="",
                    help="reuse the fp32 runs of an earlier --out (same seeds and steps)")
    ap.add_argument("--granularity", default="channel", help="weights: channel or tensor")
    ap.add_argument("--finetune-steps", type=int, default=0)
    ap.add_argument("--finetune-lr", type=float, default=3e-4)
    ap.add_argument("--json", default="")
    ap.add_argument("--report", default="",
                    help="print the tables of an earlier run's --json again, training nothing")
    a = ap.parse_args()
    if a.report:
        # Several --json files of one setting (seeds run in separate processes) report as one.
        j, results, seeds = None, {}, []
        for path in a.report.split(","):
            with open(path) as f:
                part = json.load(f)
            j = j or part
            for k in ("steps", "bits", "granularity", "finetune_steps", "finetune_lr"):
                if part.get(k) != j.get(k):
                    sys.exit(f"--report: {path} has {k} = {part.get(k)}, the first file "
                             f"{j.get(k)}: expected one setting")
            seeds += part["seeds"]
            for name, es in part["results"].items():
                results.setdefault(name, []).extend(es)
        a.steps, a.bits = j["steps"], j["bits"]
        a.granularity = j.get("granularity", a.granularity)
        a.finetune_steps = j.get("finetune_steps", a.finetune_steps)
        a.finetune_lr = j.get("finetune_lr", a.finetune_lr)
    else:
        results, seeds = collect(a)
    # Target: 2% above the median final validation loss of fp32 training.
    fp_final = [e["vals"][-1][1] for e in results["fp32 / PTQ"] if e["vals"]]
    target = 1.02 * statistics.median(fp_final)

    def steps_to(vals):
        for step, v in vals:
            if v <= target:
                return step
        return None

    def med(xs, f=lambda x: x):
        xs = [f(x) for x in xs if x is not None]
        return (statistics.median(xs), min(xs), max(xs)) if xs else None

    def cell(m, fmt):
        if m is None:
            return "—"
        return f"{fmt.format(m[0])} ({fmt.format(m[1])}–{fmt.format(m[2])})"

    how = (f"{a.steps} fp32 steps, then {a.finetune_steps} fine-tuning steps at lr "
           f"{a.finetune_lr:g}" if a.finetune_steps else f"{a.steps} steps")
    print(f"Target validation loss {target:.4f} (1.02 × the fp32 median {target / 1.02:.4f}); "
          f"{len(seeds)} seeds, {how}, W{a.bits}A8 (weights per {a.granularity}); "
          f"median (min–max).\n")
    print("| configuration | steps to target | validation ppl (as trained) | integer-model ppl "
          "| diverged |")
    print("| --- | --- | --- | --- | --- |")
    table = {}
    for name, es in results.items():
        st = [steps_to(e["vals"]) for e in es]
        reached = [s for s in st if s is not None]
        steps_cell = cell(med(reached), "{:.0f}") + (
            f", {len(reached)}/{len(es)} reached" if len(reached) < len(es) else "")
        ppl = cell(med([e["model_loss"] for e in es], math.exp), "{:.2f}")
        ippl = cell(med([e["int8_loss"] for e in es], math.exp), "{:.2f}")
        div = sum(e["diverged"] for e in es)
        print(f"| {name} | {steps_cell} | {ppl} | {ippl} | {div}/{len(es)} |")
        table[name] = es
    # The quality measures: the share of PTQ's perplexity loss that QAT (linear_in, its
    # integer model) recovers, and the integer model's gap to fp32. Paired by seed (each seed's
    # QAT against its own fp32 model and PTQ): the seeds' spread is several times the effect.
    base = {e["seed"]: e for e in results["fp32 / PTQ"]}
    fp = med([e["model_loss"] for e in results["fp32 / PTQ"]], math.exp)
    ptq = med([e["int8_loss"] for e in results["fp32 / PTQ"]], math.exp)
    for name in ("linear_in", "linear_in_lsq"):
        es = [e for e in results.get("QAT " + name, []) if e["int8_loss"] is not None]
        if not (fp and ptq and es):
            continue
        shares = []
        for e in es:
            b = base.get(e["seed"])
            if not b or b["int8_loss"] is None:
                continue
            f0, p0, q0 = (math.exp(b["model_loss"]), math.exp(b["int8_loss"]),
                          math.exp(e["int8_loss"]))
            shares.append((e["seed"], (p0 - q0) / (p0 - f0) if p0 > f0 else float("nan")))
        qat = med([e["int8_loss"] for e in es], math.exp)
        per_seed = ", ".join(f"seed {s} {100 * r:.0f}%" for s, r in shares)
        rec = statistics.median(r for _, r in shares) if shares else float("nan")
        # Pooled over the seeds: Σ (PTQ − QAT) / Σ (PTQ − fp32), every seed weighted by what
        # its PTQ lost (a seed whose PTQ lost little no longer swings the result).
        lost = gained = 0.0
        for e in es:
            b = base.get(e["seed"])
            if b and b["int8_loss"] is not None:
                p0 = math.exp(b["int8_loss"])
                lost += p0 - math.exp(b["model_loss"])
                gained += p0 - math.exp(e["int8_loss"])
        pooled = gained / lost if lost > 0 else float("nan")
        print(f"\nMedians: fp32 ppl {fp[0]:.3f}, PTQ integer {ptq[0]:.3f} "
              f"({100 * (ptq[0] / fp[0] - 1):+.2f}%), QAT {name} integer {qat[0]:.3f} "
              f"({100 * (qat[0] / fp[0] - 1):+.2f}%). Share of PTQ's perplexity loss QAT "
              f"recovers, per seed: {per_seed}; median {100 * rec:.0f}%; pooled "
              f"{100 * pooled:.0f}%.")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"target": target, "seeds": seeds, "steps": a.steps, "bits": a.bits,
                       "granularity": a.granularity, "finetune_steps": a.finetune_steps,
                       "finetune_lr": a.finetune_lr, "results": table}, f, indent=1)


if __name__ == "__main__":
    main()

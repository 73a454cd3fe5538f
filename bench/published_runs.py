#!/usr/bin/env python3
"""bench/published_runs.py — `ete plan`'s predicted step time against published large runs
(issue 32 item 6; the table in docs/planner.md).

For every row below (a model, a cluster and the layout its paper used, with the achieved
throughput the paper reports), this writes the model's `[model]` TOML and a cluster file, runs

    ete plan --model M --cluster C --seq T --global-batch B --layout dp=..,tp=..,pp=..,recompute=..,
             precision=bf16,zero_stage=.. --json

(the micro-batch is the planner's choice: the papers do not all give it) and compares the
predicted step with the published one, derived from the paper's own FLOP count and achieved
FLOP/s: step = FLOPs of one step / (GPUs x achieved FLOP/s per GPU).

Usage: bench/published_runs.py [--ete build/ete] [--gemm-efficiency E] [--json]
No measurement runs here: it takes a few seconds on any machine.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

# Clusters, as their papers describe them (per device, one direction).
CLUSTERS = {
    # NVIDIA Selene (Narayanan et al. 2021, §5): DGX A100 80 GB, 8 GPUs a node on NVSwitch
    # (NVLink 3: 12 links x 25 GB/s), 8 HDR InfiniBand 200 Gb/s adapters a node (one a GPU).
    "selene": dict(devices_per_node=8, device_memory_gib=80, device_peak_tflops=312,
                   intra_node_gbytes_per_s=300, inter_node_gbytes_per_s=25,
                   intra_node_latency_us=5, inter_node_latency_us=10,
                   device_memory_gbytes_per_s=2039),
    # Jean Zay (BLOOM, Le Scao et al. 2022, §3.4): 8 A100 80 GB a node, "four NVLink GPU-to-GPU
    # interconnects" (no NVSwitch: 4 x 25 GB/s between a pair), four Omni-Path 100 Gb/s links a
    # node (50 GB/s a node, 6.25 a GPU).
    "jeanzay": dict(devices_per_node=8, device_memory_gib=80, device_peak_tflops=312,
                    intra_node_gbytes_per_s=100, inter_node_gbytes_per_s=6.25,
                    intra_node_latency_us=5, inter_node_latency_us=10,
                    device_memory_gbytes_per_s=2039),
    # Meta's RoCE cluster (Llama 3, Dubey et al. 2024, §3.3): H100 SXM 80 GB, 8 a server on NVLink
    # (NVLink 4: 450 GB/s), 400 Gb/s a GPU between servers.
    "meta": dict(devices_per_node=8, device_memory_gib=80, device_peak_tflops=989,
                 intra_node_gbytes_per_s=450, inter_node_gbytes_per_s=50,
                 intra_node_latency_us=5, inter_node_latency_us=10,
                 device_memory_gbytes_per_s=3350),
}

# GPT models of Megatron-LM: learned positions, LayerNorm, GELU MLP of 4C, V 51,200, T 2048.
def gpt(c, layers, heads, vocab=51200):
    return dict(arch="gpt2", vocab_size=vocab, hidden_size=c, intermediate_size=4 * c,
                num_layers=layers, num_heads=heads, num_kv_heads=heads,
                max_position_embeddings=2048)


LLAMA3_405B = dict(arch="llama", vocab_size=128256, hidden_size=16384, intermediate_size=53248,
                   num_layers=126, num_heads=128, num_kv_heads=8, max_position_embeddings=8192)


def megatron_flops(b, s, l, h, v):
    """Narayanan et al. 2021, eq. (3): FLOPs of one step with activation recomputation (the
    forward counted twice), as their achieved teraFLOP/s count them."""
    return 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


def palm_flops(b, s, params, l, h):
    """6 per parameter and token plus 12 l h s per token of attention (PaLM, Chowdhery et al.
    2022, appendix B): the usual MFU count; Meta does not say which it used."""
    return b * s * (6 * params + 12 * l * h * s)


def llama3_405b_params():
    c, f, l, v, kv, d = 16384, 53248, 126, 128256, 8, 128
    per_layer = c * c * 2 + 2 * c * kv * d + 3 * c * f + 2 * c
    return l * per_layer + 2 * v * c + c


ROWS = []
# Megatron-LM of 2021 (its README then): the default "local" data-parallel implementation
# all-reduces the gradients after backward (no overlap), in the parameters' dtype under fp16
# (--accumulate-allreduce-grads-in-fp32 off): 2 bytes an element, as ETE's parallel.grad_bf16.
MEGATRON_2021 = ["parallel.overlap=false", "parallel.grad_bf16=true"]
# Megatron-DeepSpeed's pipeline engine (BLOOM) reduces the gradients after the pipeline's flush,
# in fp32 under bf16.
PIPELINE_FLUSH = ["parallel.overlap=false"]
# Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM", SC21), Table 1: weak scaling, fp16 mixed precision, activation recomputation.
for (p, heads, c, layers, tp, pp, gpus, batch, tflops) in [
        ("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137),
        ("3.6B", 32, 3072, 30, 2, 1, 64, 512, 138),
        ("7.5B", 32, 4096, 36, 4, 1, 128, 512, 142),
        ("18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135),
        ("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138),
        ("76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140),
        ("145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148),
        ("310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155),
        ("529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163),
        ("1008B", 160, 25600, 128, 8, 64, 3072, 3072, 163)]:
    ROWS.append(dict(
        source="Megatron-LM 2021, Table 1", model=f"GPT {p}", cluster="selene",
        config=gpt(c, layers, heads), seq=2048, batch=batch, gpus=gpus,
        layout=dict(dp=gpus // (tp * pp), tp=tp, pp=pp, recompute="full", zero_stage=0),
        published_tflops=tflops, sets=MEGATRON_2021,
        published_s=megatron_flops(batch, 2048, layers, c, 51200) / (gpus * tflops * 1e12)))

# BLOOM (BigScience 2022): 176B, 70 layers, C 14336, 112 heads, V 250,680, T 2048, global batch
# 2048, bf16, tp 4 x pp 12 x dp 8 on 384 GPUs, ZeRO stage 1, "about 150 TFLOPs" a GPU
# (Megatron-DeepSpeed's count, eq. (3) with recomputation).
ROWS.append(dict(
    source="BLOOM 2022 (model card, paper §3.4)", model="BLOOM 176B", cluster="jeanzay",
    config=gpt(14336, 70, 112, vocab=250680), seq=2048, batch=2048, gpus=384,
    layout=dict(dp=8, tp=4, pp=12, recompute="full", zero_stage=1), published_tflops=150,
    sets=PIPELINE_FLUSH,
    published_s=megatron_flops(2048, 2048, 70, 14336, 250680) / (384 * 150e12)))

# Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models"), Table 4: 405B, T 8192, 16M tokens a
# step (2048 sequences), TP 8, CP 1, PP 16; DP 64 on 8,192 GPUs at 430 TFLOP/s, DP 128 on 16,384
# at 400 (BF16 MFU 43% and 41%).
for dp, gpus, tflops in [(64, 8192, 430), (128, 16384, 400)]:
    ROWS.append(dict(
        source="Llama 3 2024, Table 4", model="Llama 3 405B", cluster="meta",
        config=LLAMA3_405B, seq=8192, batch=2048, gpus=gpus,
        layout=dict(dp=dp, tp=8, pp=16, recompute="none", zero_stage=1), published_tflops=tflops,
        sets=[],
        published_s=palm_flops(2048, 8192, llama3_405b_params(), 126, 16384) /
        (gpus * tflops * 1e12)))


def toml_section(name, d):
    lines = [f"[{name}]"]
    for k, v in d.items():
        lines.append(f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v}")
    return "\n".join(lines) + "\n"


def plan(ete, work, i, row, eff, memory_gib=None):
    model = os.path.join(work, f"model{i}.toml")
    with open(model, "w") as f:
        f.write(toml_section("model", row["config"]) + '[data]\ntokenizer = ""\n')
    cluster = os.path.join(work, f"cluster{i}.toml")
    spec = dict(nodes=row["gpus"] // CLUSTERS[row["cluster"]]["devices_per_node"],
                **CLUSTERS[row["cluster"]])
    if eff is not None:
        spec["gemm_efficiency"] = eff
    if memory_gib is not None:
        spec["device_memory_gib"] = memory_gib
    with open(cluster, "w") as f:
        f.write(toml_section("cluster", spec))
    pins = ",".join(f"{k}={v}" for k, v in row["layout"].items()) + ",precision=bf16,method=full"
    sets = [x for kv in row["sets"] for x in ("--set", kv)]
    out = subprocess.run([ete, "plan", "--model", model, "--cluster", cluster, "--seq",
                          str(row["seq"]), "--global-batch", str(row["batch"]), "--layout", pins,
                          "--json"] + sets, capture_output=True, text=True)
    if out.returncode != 0:
        # The first rejection (printed before the error) says why.
        m = re.search(r"needs ([0-9.]+) GiB .*?activations ([0-9.]+ [GM]iB)", out.stdout)
        return None, (f"needs {m.group(1)} GiB (activations {m.group(2)})" if m else
                      out.stderr.strip())
    best = json.loads(out.stdout)["best"]
    return best, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ete", default=os.path.join(os.path.dirname(__file__), "..", "build", "ete"))
    ap.add_argument("--gemm-efficiency", type=float, default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    print("| source | model | GPUs | dp | tp | pp | micro-batch | engine | published TFLOP/s a GPU "
          "| published s | predicted s | error | largest terms (s) |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|")
    results = []
    with tempfile.TemporaryDirectory() as work:
        for i, row in enumerate(ROWS):
            best, err = plan(a.ete, work, i, row, a.gemm_efficiency)
            l = row["layout"]
            eng = " ".join(x.replace("parallel.", "") for x in row["sets"]) or "defaults"
            fits = ""
            if best is None and err.startswith("needs"):
                # The layout does not fit ETE's own estimate: its time, on devices that hold it.
                best, _ = plan(a.ete, work, i, row, a.gemm_efficiency, memory_gib=100000)
                fits = f" (does not fit ETE: {err})"
            if best is None:
                print(f"| {row['source']} | {row['model']} | {row['gpus']} | {l['dp']} | "
                      f"{l['tp']} | {l['pp']} | | {eng} | {row['published_tflops']} | "
                      f"{row['published_s']:.2f} | — | — | {err} |")
                continue
            pred = best["predicted_step_s"]
            terms = sorted(((k, v) for k, v in best["cost_s"].items() if k != "dp"),
                           key=lambda kv: -kv[1])
            terms = ", ".join(f"{k} {v:.2f}" for k, v in terms[:4] if v > 0)
            err_pct = 100 * (pred / row["published_s"] - 1)
            results.append(dict(row=row, best=best, error=err_pct))
            print(f"| {row['source']} | {row['model']} | {row['gpus']} | {l['dp']} | {l['tp']} | "
                  f"{l['pp']} | {best['micro_batch'] // l['dp']} | {eng} | "
                  f"{row['published_tflops']} | "
                  f"{row['published_s']:.2f} | {pred:.2f} | {err_pct:+.0f}% | {terms}{fits} |")
    if a.json:
        json.dump(results, sys.stdout, indent=1, default=str)
    within = sum(1 for r in results if abs(r["error"]) <= 20)
    print(f"\n{within} of {len(ROWS)} rows within 20%")


if __name__ == "__main__":
    main()

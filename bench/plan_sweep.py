#!/usr/bin/env python3
"""bench/plan_sweep.py — what `ete plan` chooses for a 7B and a 70B Llama on H100 clusters of 8 to
1,024 GPUs (issue 32 item 6; the table in docs/planner.md): for each model, cluster size and
method (full training, full training pinned to ZeRO-3, LoRA on a bf16 base, QLoRA), the fastest
layout that fits, its predicted step and throughput, its estimated peak, and how long the plan
took.

The cluster: 8 H100 SXM 80 GB a node on NVLink 4 (450 GB/s a direction), 400 Gb/s InfiniBand a
GPU (50 GB/s), dense bf16 peak 989 TFLOP/s (gemm_efficiency left at its default, 0.7), HBM3
3,350 GB/s. The job: T 4096, a global batch of 1024 sequences (4M tokens) a step, --goal finetune
with the method pinned; everything else searched.

Usage: bench/plan_sweep.py [--ete build/ete] [--gpus 8,16,...]
"""

import argparse
import json
import os
import subprocess
import tempfile
import time

MODELS = {
    # Llama 2 7B (HF meta-llama/Llama-2-7b-hf config.json)
    "7B": dict(arch="llama", vocab_size=32000, hidden_size=4096, intermediate_size=11008,
               num_layers=32, num_heads=32, num_kv_heads=32, max_position_embeddings=4096),
    # Llama 3 70B (HF meta-llama/Meta-Llama-3-70B config.json)
    "70B": dict(arch="llama", vocab_size=128256, hidden_size=8192, intermediate_size=28672,
                num_layers=80, num_heads=64, num_kv_heads=8, max_position_embeddings=8192),
}
CLUSTER = dict(devices_per_node=8, device_memory_gib=80, device_peak_tflops=989,
               intra_node_gbytes_per_s=450, inter_node_gbytes_per_s=50,
               intra_node_latency_us=5, inter_node_latency_us=10,
               device_memory_gbytes_per_s=3350)
SEQ, BATCH = 4096, 1024


def toml_section(name, d):
    rows = [f"[{name}]"] + [f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v}"
                            for k, v in d.items()]
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ete", default=os.path.join(os.path.dirname(__file__), "..", "build", "ete"))
    ap.add_argument("--gpus", default="8,16,32,64,128,256,512,1024")
    a = ap.parse_args()
    print("| model | GPUs | method | dp x tp x pp | rows a micro-batch | grad_accum | recompute | "
          "ZeRO | step s | tokens/s a GPU | peak GiB | fit / rejected | plan s |")
    print("|---|---:|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as work:
        for name, cfg in MODELS.items():
            model = os.path.join(work, f"{name}.toml")
            with open(model, "w") as f:
                f.write(toml_section("model", cfg) + '[data]\ntokenizer = ""\n')
            for n in map(int, a.gpus.split(",")):
                cluster = os.path.join(work, f"c{n}.toml")
                with open(cluster, "w") as f:
                    f.write(toml_section("cluster", dict(nodes=max(1, n // 8), **CLUSTER)))
                for method, pins in (("full", "method=full"),
                                     ("full, ZeRO-3", "method=full,zero_stage=3"),
                                     ("lora", "method=lora"), ("qlora", "method=qlora")):
                    t0 = time.monotonic()
                    out = subprocess.run(
                        [a.ete, "plan", "--model", model, "--cluster", cluster, "--seq", str(SEQ),
                         "--global-batch", str(BATCH), "--goal", "finetune", "--layout", pins,
                         "--json"], capture_output=True, text=True)
                    dt = time.monotonic() - t0
                    if out.returncode != 0:
                        print(f"| {name} | {n} | {method} | none fits | | | | | | | | | "
                              f"{dt:.1f} |")
                        continue
                    j = json.loads(out.stdout)
                    b = j["best"]
                    fit = f"{len(j['candidates'])} / {len(j.get('rejected', []))}"
                    print(f"| {name} | {n} | {method} | {b['dp']} x {b['tp']} x {b['pp']} | "
                          f"{b['micro_batch'] // b['dp']} | {b['grad_accum']} | {b['recompute']} | "
                          f"{b['zero_stage']} | {b['predicted_step_s']:.2f} | "
                          f"{b['predicted_tokens_per_s'] / n:.0f} | "
                          f"{b['predicted_peak_gib']:.1f} | {fit} | {dt:.1f} |")


if __name__ == "__main__":
    main()

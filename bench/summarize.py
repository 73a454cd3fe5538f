#!/usr/bin/env python3
"""bench/summarize.py — Markdown summary of one bench/run_bench.sh run (its JSON folder).

Reads ete_r*.json (ete_bench_train), torch_{system_t1,system_t2,eteblas_t2}_r*.json
(pytorch_train.py) and gemm.json (ete_bench_gemm); with several rounds each figure is the median
over rounds of the per-run medians. Model FLOP/s is given as a share of the measured sgemm peak
at the same thread count.
"""
import glob
import json
import os
import statistics
import sys


def load_runs(folder, pattern):
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(folder, pattern)))]
    if not runs:
        sys.exit(f"summarize.py: no {pattern} in {folder}")
    return runs


def med(runs, key):
    return statistics.median(r[key] for r in runs)


def row(label, runs, peak):
    threads = runs[0]["threads"]
    gf = med(runs, "model_flop_per_s") * 1e-9
    share = f"{100 * gf / peak[str(threads)]:.0f}%" if str(threads) in peak else "?"
    print(f"| {label} | {threads} | {runs[0]['openblas_core']} | {med(runs, 'median_step_ms'):.0f} "
          f"| {med(runs, 'tokens_per_s'):.0f} | {gf:.1f} | {share} |")


def throughput_table(r, peak):
    print("| run | threads | OpenBLAS core | median step (ms) | tokens/s | model GFLOP/s "
          "| share of sgemm peak |")
    print("|---|---:|---|---:|---:|---:|---:|")
    row("ETE", r["ete"], peak)
    row("PyTorch 1.13, OpenBLAS as installed (pthread)", r["torch_system_t1"], peak)
    row("PyTorch 1.13, OpenBLAS as installed (pthread)", r["torch_system_t2"], peak)
    row("PyTorch 1.13, ETE's OpenBLAS (OpenMP build)", r["torch_eteblas_t2"], peak)
    tps = {k: med(v, "tokens_per_s") for k, v in r.items()}
    installed = max(tps["torch_system_t1"], tps["torch_system_t2"])
    best = max(installed, tps["torch_eteblas_t2"])
    print(f"\nETE / PyTorch tokens/s (target >= 1.6x, stretch 2x): "
          f"**{tps['ete'] / installed:.2f}x** PyTorch's best as installed, "
          f"**{tps['ete'] / best:.2f}x** PyTorch's best on ETE's OpenBLAS build. "
          f"{len(r['ete'])} round(s) of {len(r['ete'][0]['step_ms'])} measured steps.")


def phase_table(r):
    # The round whose median step is the median over rounds.
    run = sorted(r["ete"], key=lambda x: x["median_step_ms"])[len(r["ete"]) // 2]
    total = sum(run["phases_ms"].values())
    print("\n| ETE step phase | ms/step | share |\n|---|---:|---:|")
    for name, ms in sorted(run["phases_ms"].items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {ms:.1f} | {100 * ms / total:.1f}% |")
    print(f"| total (mean step) | {total:.0f} | |")


def gemm_table(g):
    p = g["sgemm_peak_gflops"]
    print(f"\nsgemm peak (2048^3, OpenBLAS {g['openblas_core']}): {p['1']:.1f} GFLOP/s on 1 "
          f"thread, {p['2']:.1f} GFLOP/s on 2. GEMM table at {g['threads']} threads:\n")
    print("| product | M x N x K | ETE layout | ETE GFLOP/s | best layout | best GFLOP/s "
          "| ETE/best |\n|---|---|---|---:|---|---:|---:|")
    for c in g["cases"]:
        flag = " (below 0.90)" if c["ratio"] < 0.90 else ""
        print(f"| {c['name']} | {c['M']} x {c['N']} x {c['K']} | {c['layout']} "
              f"| {c['ete_gflops']:.1f} | {c['best_layout']} | {c['best_gflops']:.1f} "
              f"| {c['ratio']:.2f}{flag} |")
    s = g["step_gemm_ms"]
    print(f"\nGEMMs of one step (calls/step x median): ETE {s['ete']:.0f} ms, best layouts "
          f"{s['best']:.0f} ms ({g['step_gemm_gflops']:.1f} GFLOP/s).")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py RESULTS_DIR")
    folder = sys.argv[1]
    keys = ["ete", "torch_system_t1", "torch_system_t2", "torch_eteblas_t2"]
    r = {k: load_runs(folder, f"{k}_r*.json") for k in keys}
    gemm = json.load(open(os.path.join(folder, "gemm.json")))
    throughput_table(r, gemm["sgemm_peak_gflops"])
    phase_table(r)
    gemm_table(gemm)


if __name__ == "__main__":
    main()

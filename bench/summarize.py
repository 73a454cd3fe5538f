#!/usr/bin/env python3
"""bench/summarize.py — Markdown summary of one bench/run_bench.sh run (its JSON folder).

Reads ete_<model>_<precision>_r*.json (ete_bench_train), torch_<model>_<run>_r*.json
(pytorch_train.py), base_<model>_fp32_r*.json (a BASELINE build, optional), gemm.json
(ete_bench_gemm) and dnnl.json (ete_bench_dnnl). With several rounds each figure is the median
over rounds of the per-run medians. Model FLOP/s is given as a share of the measured GEMM peak of
its dtype (fp32 sgemm or bf16 oneDNN matmul, 2048^3) at the same thread count.
"""
import glob
import json
import os
import statistics
import sys

TORCH_RUNS = [("fp32_system_t1", "PyTorch 1.13 fp32, OpenBLAS as installed"),
              ("fp32_system_t2", "PyTorch 1.13 fp32, OpenBLAS as installed"),
              ("fp32_eteblas_t2", "PyTorch 1.13 fp32, ETE's OpenBLAS (OpenMP build)"),
              ("bf16_system_t1", "PyTorch 1.13 bf16 autocast"),
              ("bf16_system_t2", "PyTorch 1.13 bf16 autocast")]


def load(folder, pattern):
    return [json.load(open(p)) for p in sorted(glob.glob(os.path.join(folder, pattern)))]


def med(runs, key):
    return statistics.median(r[key] for r in runs)


def peaks(folder):
    """GFLOP/s of a 2048^3 GEMM by dtype and thread count."""
    g = json.load(open(os.path.join(folder, "gemm.json")))
    p = {("fp32", t): v for t, v in g["sgemm_peak_gflops"].items()}
    dnnl = os.path.join(folder, "dnnl.json")
    if os.path.exists(dnnl):
        for row in json.load(open(dnnl))["rows"]:
            if row["name"].startswith("2048"):
                p[("bf16", str(row["threads"]))] = row["gflops"].get("bf16->f32", 0)
    # A bf16 run's GEMMs take the faster engine (oneDNN's bf16, or sgemm on converted operands
    # where native bf16 is slower: docs/architecture.md), so its peak is the larger of the two.
    for (d, t), v in list(p.items()):
        if d == "fp32" and ("bf16", t) in p:
            p[("bf16", t)] = max(p[("bf16", t)], v)
    return p


def row(label, precision, runs, peak):
    threads = runs[0]["threads"]
    gf = med(runs, "model_flop_per_s") * 1e-9
    pk = peak.get((precision, str(threads)))
    share = f"{100 * gf / pk:.0f}%" if pk else "?"
    rss = f"{med(runs, 'peak_rss_mib'):.0f}" if "peak_rss_mib" in runs[0] else "-"
    print(f"| {label} | {precision} | {threads} | {med(runs, 'median_step_ms'):.0f} "
          f"| {med(runs, 'tokens_per_s'):.0f} | {gf:.1f} | {share} | {rss} |")
    return med(runs, "tokens_per_s")


def model_table(folder, model, peak):
    ete = {p: load(folder, f"ete_{model}_{p}_r*.json") for p in ("fp32", "bf16")}
    if not ete["fp32"]:
        return
    print(f"\n### {model}\n")
    print("| run | precision | threads | median step (ms) | tokens/s | model GFLOP/s "
          "| share of GEMM peak | peak RSS (MiB) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    tps = {}
    for p in ("fp32", "bf16"):
        tps[f"ete_{p}"] = row("ETE", p, ete[p], peak)
    base = load(folder, f"base_{model}_fp32_r*.json")
    if base:
        tps["base"] = row("ETE before this change (BASELINE)", "fp32", base, peak)
    for key, label in TORCH_RUNS:
        runs = load(folder, f"torch_{model}_{key}_r*.json")
        if runs:
            tps[key] = row(label, key.split("_")[0], runs, peak)
    fp32_installed = max(tps.get("fp32_system_t1", 0), tps.get("fp32_system_t2", 0))
    bf16_best = max(tps.get("bf16_system_t1", 0), tps.get("bf16_system_t2", 0))
    torch_best = max(v for k, v in tps.items() if not k.startswith(("ete", "base")))
    print(f"\n- ETE bf16 / PyTorch bf16 autocast (best of 1, 2 threads): "
          f"**{tps['ete_bf16'] / bf16_best:.2f}x**")
    print(f"- ETE fp32 / PyTorch fp32 as installed (same OpenBLAS core, best of 1, 2 threads): "
          f"**{tps['ete_fp32'] / fp32_installed:.2f}x**; on ETE's OpenBLAS build: "
          f"{tps['ete_fp32'] / tps['fp32_eteblas_t2']:.2f}x")
    print(f"- ETE's best / PyTorch's best (any precision, threads, BLAS): "
          f"**{max(tps['ete_fp32'], tps['ete_bf16']) / torch_best:.2f}x**")
    print(f"- peak RSS bf16 / fp32: {med(ete['bf16'], 'peak_rss_mib') / med(ete['fp32'], 'peak_rss_mib'):.2f}")
    if base:
        print(f"- ETE fp32 now / before: {tps['ete_fp32'] / tps['base']:.3f}")
    run = sorted(ete["bf16"], key=lambda x: x["median_step_ms"])[len(ete["bf16"]) // 2]
    gemm = {k: v for k, v in run.get("phases_gflops", {}).items() if k.startswith("gemm")}
    if gemm and peak.get(("bf16", str(run["threads"]))):
        pk = peak[("bf16", str(run["threads"]))]
        print("- ETE bf16 GEMMs against the bf16 GEMM peak (2048^3, the faster of oneDNN bf16 and "
              f"sgemm: {pk:.0f} GFLOP/s): " +
              ", ".join(f"{k} {v:.0f} ({100 * v / pk:.0f}%)" for k, v in gemm.items()))
    phase_table(ete, run["threads"])


def phase_table(ete, threads):
    print("\n| ETE step phase (ms/step) | fp32 | bf16 |\n|---|---:|---:|")
    runs = {p: sorted(v, key=lambda x: x["median_step_ms"])[len(v) // 2] for p, v in ete.items()}
    names = sorted(runs["fp32"]["phases_ms"], key=lambda n: -runs["fp32"]["phases_ms"][n])
    for n in names:
        print(f"| {n} | {runs['fp32']['phases_ms'][n]:.1f} | "
              f"{runs['bf16']['phases_ms'].get(n, 0):.1f} |")


def gemm_table(g):
    p = g["sgemm_peak_gflops"]
    print(f"\nsgemm peak (2048^3, OpenBLAS {g['openblas_core']}): {p['1']:.1f} GFLOP/s on 1 "
          f"thread, {p['2']:.1f} GFLOP/s on 2. fp32 GEMM table at {g['threads']} threads:\n")
    print("| product | M x N x K | ETE layout | ETE GFLOP/s | best layout | best GFLOP/s "
          "| ETE/best |\n|---|---|---|---:|---|---:|---:|")
    for c in g["cases"]:
        flag = " (below 0.90)" if c["ratio"] < 0.90 else ""
        print(f"| {c['name']} | {c['M']} x {c['N']} x {c['K']} | {c['layout']} "
              f"| {c['ete_gflops']:.1f} | {c['best_layout']} | {c['best_gflops']:.1f} "
              f"| {c['ratio']:.2f}{flag} |")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py RESULTS_DIR")
    folder = sys.argv[1]
    peak = peaks(folder)
    print(f"GEMM peaks (2048^3): " + ", ".join(
        f"{d} {t} thread(s) {v:.0f}" for (d, t), v in sorted(peak.items())) + " GFLOP/s")
    # Every model the run measured (MODELS): the bench Llama and GPT-2 first, then the others.
    found = {os.path.basename(f)[len("ete_"):-len("_fp32_r1.json")]
             for f in glob.glob(os.path.join(folder, "ete_*_fp32_r1.json"))}
    first = [m for m in ("llama-bench", "gpt2-124m") if m in found]
    for model in first + sorted(found - set(first)):
        model_table(folder, model, peak)
    gemm_table(json.load(open(os.path.join(folder, "gemm.json"))))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""bench/gen_llama_1b.py — a ~1.1B-parameter Llama with random weights as a BF16 HF model dir.

The LoRA/QLoRA benchmark's base (docs/benchmarks.md): TinyLlama-1.1B's shape (C 2048, F 5632,
L 22, H 32, KV 4, V 32000, untied head), weights normal(0, 0.02) (norms 1), written in BF16 the way
save_pretrained writes a LlamaForCausalLM (config.json with torch_dtype bfloat16, one
model.safetensors). Run with Debian's python3-torch:

    /usr/bin/python3 bench/gen_llama_1b.py --out /tmp/llama-1b      # ~2.2 GB, about a minute

Re-running gives identical bytes (fixed generator seed).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import gen_model_goldens as gmg  # noqa: E402
from gen_hf_dirs import write_json, write_safetensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=22)
    args = ap.parse_args()
    cfg = gmg.llama_config(V=32000, C=2048, H=32, KV=4, F_=5632, L=args.layers, max_pos=2048)
    cfg["torch_dtype"] = "bfloat16"
    cfg["rms_norm_eps"] = 1e-5
    gen = torch.Generator().manual_seed(1)
    tensors, n = {}, 0
    for name, shape, kind in gmg.llama_param_table(cfg):
        if kind == "norm":
            t = torch.ones(shape, dtype=torch.float32)
        else:
            t = torch.randn(shape, generator=gen, dtype=torch.float32) * 0.02
        tensors[name] = t.to(torch.bfloat16)
        n += t.numel()
    os.makedirs(args.out, exist_ok=True)
    write_json(os.path.join(args.out, "config.json"), cfg)
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors, {"format": "pt"})
    print(f"{args.out}: {n / 1e9:.3f}B parameters")


if __name__ == "__main__":
    main()

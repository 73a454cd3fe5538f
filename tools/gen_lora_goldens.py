#!/usr/bin/python3
"""LoRA / QLoRA whole-model goldens for tests/model/lora_golden_test.cpp.

Run from the repository root with Debian's python3-torch (1.13 CPU; no peft/bitsandbytes needed):

    /usr/bin/python3 tools/gen_lora_goldens.py            # writes tests/golden/lora_*.safetensors
    /usr/bin/python3 tools/gen_lora_goldens.py --out DIR  # somewhere else

Re-running produces identical bytes (fixed torch.Generator seeds, one thread, sorted JSON).

The models are the plain-torch Llama and GPT-2 of gen_model_goldens.py with PEFT-style adapters on
the targeted linears: y = base(x) + scale * (x @ A.T) @ B.T, A [r, in], B [out, r], scale =
alpha / r (alpha / sqrt(r) with rsLoRA). With an NF4 base every decoder linear weight is first
quantized and dequantized by gen_nf4_goldens.py's independent bitsandbytes implementation (block
64, double quantization) — the adapter trains against dequant(NF4), as in QLoRA. Embeddings, norms,
biases and the head stay f32. B starts NON-zero here (PEFT starts it at zero) so that every
adapter gradient carries signal. The maths runs in float64 on the f32 values.

Each variant becomes one safetensors file holding:
  <hf name>                     every base parameter, f32, HF layout, BEFORE quantization
  <module>.lora_A.weight, ...B  the adapters (PEFT layout, without the base_model.model. prefix)
  inputs, targets               I32 [B, T]; a few targets are -100 (ignored)
  logits                        F32 [B, T, V]
  loss                          F32 [] mean cross-entropy over non-ignored targets
  grad.<adapter name>           d loss / d adapter
and __metadata__ {"config": HF config.json, "lora": {r, alpha, rslora, targets, base_format,
nf4_block}} as JSON strings.
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_goldens as gmg  # noqa: E402
import gen_nf4_goldens as nf4  # noqa: E402
from gen_hf_dirs import write_safetensors  # noqa: E402

B, T = 2, 7

LLAMA_LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GPT2_LINEARS = ["c_attn", "c_proj", "c_fc"]


def nf4_roundtrip(w, bs):
    """dequant(NF4(w)) with double quantization, in f32 (w in ETE's (out, in) layout)."""
    codes, absmax = nf4.quantize_nf4(w, bs)
    _, _, _, absmax_dq = nf4.double_quant(absmax)
    return nf4.dequant(codes, absmax_dq, bs).view(w.shape)


def adapted_modules(table, targets):
    """(module, in, out, conv1d) of every targeted linear, by its weight in the table."""
    out = []
    for name, shape, kind in table:
        if kind != "matrix" or not name.endswith(".weight") or name == "lm_head.weight":
            continue
        module = name[: -len(".weight")]
        if module.split(".")[-1] not in targets:
            continue
        conv = module.split(".")[-1].startswith("c_")  # GPT-2 Conv1D: weight (in, out)
        fan_in, fan_out = (shape[0], shape[1]) if conv else (shape[1], shape[0])
        out.append((module, fan_in, fan_out, conv))
    return out


def make_variant(cfg, table, forward, lora, seed):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(seed)
    V = cfg["vocab_size"]
    params32 = gmg.init_params(table, gen)
    inputs = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    targets[0, 2] = targets[1, T - 1] = gmg.IGNORE_INDEX
    r, alpha = lora["r"], lora["alpha"]
    scale = alpha / math.sqrt(r) if lora["rslora"] else alpha / r
    mods = adapted_modules(table, lora["targets"])
    adapters = {}
    for module, fan_in, fan_out, _ in mods:
        bound = 1.0 / math.sqrt(fan_in)
        a = (torch.rand((r, fan_in), generator=gen) * 2 - 1) * bound
        b = torch.randn((fan_out, r), generator=gen) * 0.05
        adapters[module + ".lora_A.weight"] = a.float()
        adapters[module + ".lora_B.weight"] = b.float()

    base = dict(params32)
    if lora["base_format"] == "nf4":  # every decoder linear, ETE layout (out, in)
        for name, shape, kind in table:
            if kind != "matrix" or name == "lm_head.weight":
                continue
            conv = name.split(".")[-2].startswith("c_")
            w = params32[name].t() if conv else params32[name]
            d = nf4_roundtrip(w.contiguous(), lora["nf4_block"])
            base[name] = d.t().contiguous() if conv else d

    P = {n: p.double() for n, p in base.items()}
    A = {n: p.double().requires_grad_(True) for n, p in adapters.items()}

    def with_adapter(f):
        def wrapped(x, P_, name):
            y = f(x, P_, name)
            a = A.get(name + ".lora_A.weight")
            if a is None:
                return y
            return y + scale * ((x @ a.t()) @ A[name + ".lora_B.weight"].t())
        return wrapped

    saved = gmg.linear, gmg.conv1d
    gmg.linear, gmg.conv1d = with_adapter(saved[0]), with_adapter(saved[1])
    try:
        logits = forward(cfg, P, inputs)
    finally:
        gmg.linear, gmg.conv1d = saved
    loss = gmg.mean_loss(logits, targets)
    loss.backward()

    out = {n: params32[n] for n, _, _ in table}
    out.update(adapters)
    out["inputs"] = inputs.to(torch.int32)
    out["targets"] = targets.to(torch.int32)
    out["logits"] = logits.detach().float()
    out["loss"] = loss.detach().float().reshape(())
    for n in adapters:
        out["grad." + n] = A[n].grad.float()
    meta = {"config": json.dumps(cfg, sort_keys=True), "lora": json.dumps(lora, sort_keys=True)}
    return out, meta, float(loss), len(mods)


def variants():
    llama = gmg.llama_config(V=50, C=64, H=4, KV=2, F_=96, L=2, attention_bias=True)
    gpt2 = gmg.gpt2_config(V=50, C=48, H=4, L=2, n_positions=16)
    return [
        ("lora_llama_nf4", llama, gmg.llama_param_table(llama), gmg.llama_forward,
         {"r": 4, "alpha": 8.0, "rslora": False, "targets": LLAMA_LINEARS, "base_format": "nf4",
          "nf4_block": 64}, 301),
        ("lora_llama_f32", llama, gmg.llama_param_table(llama), gmg.llama_forward,
         {"r": 3, "alpha": 6.0, "rslora": False, "targets": ["q_proj", "v_proj", "down_proj"],
          "base_format": "f32", "nf4_block": 64}, 302),
        ("lora_gpt2_nf4", gpt2, gmg.gpt2_param_table(gpt2), gmg.gpt2_forward,
         {"r": 4, "alpha": 4.0, "rslora": True, "targets": GPT2_LINEARS, "base_format": "nf4",
          "nf4_block": 64}, 303),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(root, "tests", "golden"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    for name, cfg, table, forward, lora, seed in variants():
        tensors, meta, loss, n = make_variant(cfg, table, forward, lora, seed)
        path = os.path.join(args.out, name + ".safetensors")
        write_safetensors(path, tensors, meta)
        print(f"{name}: {n} adapted linears, loss {loss:.6f}, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()

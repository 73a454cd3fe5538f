#!/usr/bin/python3
"""bench/pytorch_lora.py — the LoRA step of the LoRA/QLoRA benchmark in plain PyTorch (the peer).

Loads a BF16 Llama HF dir (bench/gen_llama_1b.py) as a frozen bf16 base, the way a PyTorch user
fine-tunes with LoRA on CPU: every decoder linear wrapped with a PEFT-style adapter (A
Kaiming-uniform, B zero, fp32, scale alpha / r), forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16), AdamW over the adapters only, gradient clipping 1.0.
Random token ids, micro-batch 1. Prints one JSON line: median step seconds over the measured
steps and the process's peak RSS. Run under Debian's python3-torch (1.13, /usr/bin/python3) with
OPENBLAS_CORETYPE set to the core ETE reports.
"""
import argparse
import json
import math
import os
import resource
import statistics
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def load_safetensors(path):
    """Tensor by tensor (no whole-file buffer), so the peak is the model plus one tensor."""
    out = {}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        for name, e in header.items():
            if name == "__metadata__":
                continue
            a, b = e["data_offsets"]
            assert e["dtype"] == "BF16", name
            f.seek(8 + n + a)
            buf = bytearray(f.read(b - a))
            out[name] = torch.frombuffer(buf, dtype=torch.bfloat16).view(e["shape"]).clone()
    return out


class LoraLinear(nn.Module):
    def __init__(self, w, r, alpha):
        super().__init__()
        self.w = nn.Parameter(w, requires_grad=False)  # frozen bf16 base
        out_f, in_f = w.shape
        self.a = nn.Parameter(torch.empty(r, in_f))
        nn.init.kaiming_uniform_(self.a, a=math.sqrt(5))
        self.b = nn.Parameter(torch.zeros(out_f, r))
        self.scale = alpha / r

    def forward(self, x):
        return F.linear(x, self.w) + self.scale * F.linear(F.linear(x, self.a), self.b)


def rope(T, D, theta=10000.0):
    inv = 1.0 / (theta ** (torch.arange(0, D, 2).float() / D))
    f = torch.arange(T).float()[:, None] * inv[None, :]
    e = torch.cat([f, f], -1)
    return e.cos(), e.sin()


def rot(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


class Model(nn.Module):
    def __init__(self, cfg, w, r, alpha):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Parameter(w["model.embed_tokens.weight"], requires_grad=False)
        self.head = nn.Parameter(w["lm_head.weight"], requires_grad=False)
        self.norm = nn.Parameter(w["model.norm.weight"], requires_grad=False)
        L = cfg["num_hidden_layers"]
        self.layers = nn.ModuleList()
        for i in range(L):
            p = f"model.layers.{i}."
            m = nn.Module()
            m.ln1 = nn.Parameter(w[p + "input_layernorm.weight"], requires_grad=False)
            m.ln2 = nn.Parameter(w[p + "post_attention_layernorm.weight"], requires_grad=False)
            for n in ["q_proj", "k_proj", "v_proj", "o_proj"]:
                setattr(m, n, LoraLinear(w[p + "self_attn." + n + ".weight"], r, alpha))
            for n in ["gate_proj", "up_proj", "down_proj"]:
                setattr(m, n, LoraLinear(w[p + "mlp." + n + ".weight"], r, alpha))
            self.layers.append(m)

    def rms(self, x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)) * w.float()

    def forward(self, ids):
        c = self.cfg
        B, T = ids.shape
        H, KV = c["num_attention_heads"], c["num_key_value_heads"]
        D = c["hidden_size"] // H
        cos, sin = rope(T, D)
        x = self.embed[ids].float()
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        for m in self.layers:
            h = self.rms(x, m.ln1)
            q = m.q_proj(h).view(B, T, H, D).transpose(1, 2)
            k = m.k_proj(h).view(B, T, KV, D).transpose(1, 2)
            v = m.v_proj(h).view(B, T, KV, D).transpose(1, 2)
            q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
            k = k.repeat_interleave(H // KV, 1)
            v = v.repeat_interleave(H // KV, 1)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
            a = torch.softmax(s.masked_fill(mask, float("-inf")).float(), -1).to(v.dtype) @ v
            x = x + m.o_proj(a.transpose(1, 2).reshape(B, T, H * D)).float()
            h = self.rms(x, m.ln2)
            x = x + m.down_proj(F.silu(m.gate_proj(h)) * m.up_proj(h)).float()
        return F.linear(self.rms(x, self.norm), self.head)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    model = Model(cfg, load_safetensors(os.path.join(args.model, "model.safetensors")), args.r,
                  args.alpha)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    V = cfg["vocab_size"]
    times = []
    for i in range(args.warmup + args.steps):
        ids = torch.randint(0, V, (1, args.seq + 1))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, V), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "step_s": statistics.median(times),
                      "peak_rss_bytes": peak, "trainable": sum(p.numel() for p in params),
                      "loss": float(loss)}))


if __name__ == "__main__":
    main()

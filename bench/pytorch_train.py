#!/usr/bin/env python3
"""bench/pytorch_train.py — the ETE bench models trained in plain PyTorch (the side-by-side peer).

Same models and step as bench/train_throughput.cpp. --model llama-bench (default): a Llama with
V 8192, C 512, L 8, H 8, KV 4, F 1408, untied head, micro-batch (B, T) = (8, 256). --model
gemma-bench: Gemma 2 (Gemma2ForCausalLM's operations) on those shapes: tied head, (1 + w) norms in
fp32 before and after attention and the MLP, GeGLU, embedding x sqrt(C), scores and logits
soft-capped at 50 and 30, a window of 128 on the even layers. --model phi3-bench: Phi-3
(Phi3ForCausalLM's operations) on those shapes: q|k|v in one qkv_proj, gate|up in one
gate_up_proj, RoPE on the first 48 of each head's 64 dims. --model qwen2-bench (q/k/v biases,
tied head), qwen3-bench (per-head q/k RMSNorm before RoPE), mistral-bench (a window of 128 on
every layer): those families on the same shapes. --model
gpt2-124m: GPT-2 small as Hugging Face's GPT2LMHeadModel (V 50257, C 768, L 12, H 12, F 3072,
learned positions, LayerNorm, tanh GELU, biases, tied head; init std 0.02 with the residual
projections scaled by 1/sqrt(2L)) at (4, 64). Random token ids with a fixed seed; a step is
zero_grad, forward, F.cross_entropy (mean over the B*T tokens), backward, clip_grad_norm_(1.0)
and torch.optim.AdamW (weight decay on linear matrices only: not embeddings, norms, biases — ETE's
rule). --precision bf16 runs forward and loss under torch.autocast("cpu", dtype=torch.bfloat16)
(matmuls in bf16 through oneDNN; parameters, gradients and AdamW stay fp32), as PyTorch users do
on CPU. The Llama is written the way Hugging Face's LlamaForCausalLM writes it (separate q/k/v
and gate/up projections, RoPE rotate-half, GQA by repeating kv heads, causal attention as
matmul + mask + softmax + matmul, since PyTorch 1.13 has no scaled_dot_product_attention).

Prints one JSON object with the median tokens/s of the measured steps. Run it under Debian's
python3-torch (1.13, /usr/bin/python3). Its matmuls go through Debian's OpenBLAS (torch's
BLAS_INFO=generic links libblas.so.3), whose kernel is chosen by OPENBLAS_CORETYPE when the
library loads: set it to the core ETE reports so both run the same sgemm kernel.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = torch default)")
    p.add_argument("--steps", type=int, default=8, help="measured optimizer steps")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps (not measured)")
    p.add_argument("--model", choices=["llama-bench", "gemma-bench", "phi3-bench", "qwen2-bench",
                                       "qwen3-bench", "mistral-bench", "gpt2-124m"],
                   default="llama-bench")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--batch", type=int, default=0, help="micro-batch rows B (0: 8, gpt2 4)")
    p.add_argument("--seq", type=int, default=0, help="sequence length T (0: 256, gpt2 64)")
    p.add_argument("--seed", type=int, default=1234, help="init and token seed")
    a = p.parse_args()
    gpt2 = a.model == "gpt2-124m"
    a.batch = a.batch or (4 if gpt2 else 8)
    a.seq = a.seq or (64 if gpt2 else 256)
    if a.steps < 1 or a.warmup < 0 or a.threads < 0 or a.batch < 1 or a.seq < 1:
        p.error("--steps, --batch, --seq must be >= 1; --warmup, --threads >= 0")
    if a.seq > (1024 if gpt2 else 256):
        p.error("--seq exceeds the model's positions")
    return a


ARGS = parse_args()
if ARGS.threads > 0:
    # OpenBLAS (pthread build) sizes its own pool at load time; torch.set_num_threads only
    # sizes torch's OpenMP pool. Both must see the same count, so set it before importing torch.
    os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)

import torch  # noqa: E402  (after the thread environment above)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE = 8192, 512, 8, 8, 4, 1408
HEAD_DIM = HIDDEN // HEADS
ROPE_THETA, NORM_EPS, INIT_STD = 10000.0, 1e-6, 0.02
GEMMA_WINDOW, GEMMA_ATTN_CAP, GEMMA_FINAL_CAP = 128, 50.0, 30.0
PHI3_ROTARY = int(HEAD_DIM * 0.75)  # partial_rotary_factor 0.75 (Phi-4-mini)
MISTRAL_WINDOW = 128
G_VOCAB, G_POSITIONS, G_HIDDEN, G_LAYERS, G_HEADS, G_INTERMEDIATE = 50257, 1024, 768, 12, 12, 3072


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * self.weight


def rope_tables(T, D):
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)  # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x):
    """GQA as HF does it: query head h reads kv head h // (H / KV). expand + reshape (its
    backward is a sum), not repeat_interleave (whose backward is a slow index_add_ on CPU)."""
    B, KV, T, D = x.shape
    rep = HEADS // KV
    return x[:, :, None].expand(B, KV, rep, T, D).reshape(B, KV * rep, T, D)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, HEADS, HEAD_DIM).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, KV_HEADS, HEAD_DIM).transpose(1, 2)  # (B, KV, T, D)
        v = self.v_proj(x).view(B, T, KV_HEADS, HEAD_DIM).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)  # HF casts the tables to q's dtype
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k), repeat_kv(v)  # (B, H, T, D)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HEAD_DIM)  # (B, H, T, T)
        scores = scores.masked_fill(mask, float("-inf"))
        att = torch.matmul(F.softmax(scores, dim=-1), v)  # (B, H, T, D)
        return self.o_proj(att.transpose(1, 2).reshape(B, T, HEADS * HEAD_DIM))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.down_proj = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = RMSNorm(HIDDEN)
        self.self_attn = Attention()
        self.post_attention_layernorm = RMSNorm(HIDDEN)
        self.mlp = MLP()

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, T):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        cos, sin = rope_tables(T, HEAD_DIM)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = masked
        self.register_buffer("mask", mask, persistent=False)
        for p in self.parameters():
            if p.dim() == 2:  # linears and the embedding; norms stay at ones
                nn.init.normal_(p, std=INIT_STD)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        return self.lm_head(self.norm(x))  # (B, T, V)


class GemmaNorm(nn.Module):
    """Gemma2RMSNorm: in fp32, times (1 + w), w starting at 0."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + NORM_EPS)
        return (y * (1.0 + self.weight.float())).type_as(x)


class GemmaAttention(Attention):
    """Gemma2Attention: scores scaled by query_pre_attn_scalar^-1/2 (= head_dim here) and
    soft-capped at 50 before the (causal or sliding-window) mask."""

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(x).view(B, T, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV_HEADS, HEAD_DIM).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k), repeat_kv(v)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HEAD_DIM)
        scores = torch.tanh(scores / GEMMA_ATTN_CAP) * GEMMA_ATTN_CAP
        scores = scores.masked_fill(mask, float("-inf"))
        att = torch.matmul(F.softmax(scores, dim=-1), v)
        return self.o_proj(att.transpose(1, 2).reshape(B, T, HEADS * HEAD_DIM))


class GemmaBlock(nn.Module):
    """Gemma2DecoderLayer: norms before and after attention and the GeGLU MLP."""

    def __init__(self, local):
        super().__init__()
        self.local = local
        self.input_layernorm = GemmaNorm(HIDDEN)
        self.self_attn = GemmaAttention()
        self.post_attention_layernorm = GemmaNorm(HIDDEN)
        self.pre_feedforward_layernorm = GemmaNorm(HIDDEN)
        self.mlp = MLP()
        self.post_feedforward_layernorm = GemmaNorm(HIDDEN)

    def forward(self, x, cos, sin, mask):
        h = self.self_attn(self.input_layernorm(x), cos, sin, mask)
        x = x + self.post_attention_layernorm(h)
        m = self.pre_feedforward_layernorm(x)
        m = self.mlp.down_proj(F.gelu(self.mlp.gate_proj(m), approximate="tanh") *
                               self.mlp.up_proj(m))
        return x + self.post_feedforward_layernorm(m)


class Gemma(nn.Module):
    """Gemma2ForCausalLM on the Llama bench's shapes: embedding x sqrt(C), local (even) layers
    with a window of GEMMA_WINDOW, tied head, final logits soft-capped at 30."""

    def __init__(self, T):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(GemmaBlock(i % 2 == 0) for i in range(LAYERS))
        self.norm = GemmaNorm(HIDDEN)
        cos, sin = rope_tables(T, HEAD_DIM)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        local = causal | torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-GEMMA_WINDOW)
        self.register_buffer("mask", causal, persistent=False)
        self.register_buffer("local_mask", local, persistent=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=INIT_STD)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        x = x * torch.tensor(HIDDEN ** 0.5, dtype=x.dtype)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.local_mask if layer.local else self.mask)
        logits = F.linear(self.norm(x), self.embed_tokens.weight)
        return torch.tanh(logits / GEMMA_FINAL_CAP) * GEMMA_FINAL_CAP


class Phi3Attention(nn.Module):
    """Phi3Attention: one qkv_proj (q | k | v rows), RoPE on the first PHI3_ROTARY dims of each
    head (apply_rotary_pos_emb's q_rot / q_pass split)."""

    def __init__(self):
        super().__init__()
        self.qkv_proj = nn.Linear(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q, k, v = self.qkv_proj(x).split(
            [HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
        q = q.view(B, T, HEADS, HEAD_DIM).transpose(1, 2)
        k = k.view(B, T, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = v.view(B, T, KV_HEADS, HEAD_DIM).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        R = PHI3_ROTARY
        q = torch.cat((q[..., :R] * cos + rotate_half(q[..., :R]) * sin, q[..., R:]), dim=-1)
        k = torch.cat((k[..., :R] * cos + rotate_half(k[..., :R]) * sin, k[..., R:]), dim=-1)
        k, v = repeat_kv(k), repeat_kv(v)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HEAD_DIM)
        scores = scores.masked_fill(mask, float("-inf"))
        att = torch.matmul(F.softmax(scores, dim=-1), v)
        return self.o_proj(att.transpose(1, 2).reshape(B, T, HEADS * HEAD_DIM))


class Phi3Block(nn.Module):
    """Phi3DecoderLayer: Llama's block with gate | up in one gate_up_proj."""

    def __init__(self):
        super().__init__()
        self.input_layernorm = RMSNorm(HIDDEN)
        self.self_attn = Phi3Attention()
        self.post_attention_layernorm = RMSNorm(HIDDEN)
        self.gate_up_proj = nn.Linear(HIDDEN, 2 * INTERMEDIATE, bias=False)
        self.down_proj = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        gate, up = self.gate_up_proj(self.post_attention_layernorm(x)).chunk(2, dim=-1)
        return x + self.down_proj(up * F.silu(gate))


class Phi3(Llama):
    """Phi3ForCausalLM on the Llama bench's shapes (untied head, no window: Phi-3's 2047 is
    longer than the rows)."""

    def __init__(self, T):
        super().__init__(T)
        self.layers = nn.ModuleList(Phi3Block() for _ in range(LAYERS))
        cos, sin = rope_tables(T, PHI3_ROTARY)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for p in self.layers.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=INIT_STD)


class QwenAttention(Attention):
    """Qwen2Attention (q/k/v biases) or Qwen3Attention (Qwen3RMSNorm over each query and key head
    before RoPE); Mistral's is Llama's."""

    def __init__(self, qkv_bias, qk_norm):
        super().__init__()
        if qkv_bias:
            self.q_proj = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=True)
            self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=True)
            self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=True)
        self.q_norm = RMSNorm(HEAD_DIM) if qk_norm else None
        self.k_norm = RMSNorm(HEAD_DIM) if qk_norm else None

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, HEADS, HEAD_DIM)
        k = self.k_proj(x).view(B, T, KV_HEADS, HEAD_DIM)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV_HEADS, HEAD_DIM).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k), repeat_kv(v)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HEAD_DIM)
        scores = scores.masked_fill(mask, float("-inf"))
        att = torch.matmul(F.softmax(scores, dim=-1), v)
        return self.o_proj(att.transpose(1, 2).reshape(B, T, HEADS * HEAD_DIM))


class LlamaFamily(Llama):
    """Qwen2ForCausalLM (q/k/v biases, tied head as Qwen2.5's small models), Qwen3ForCausalLM
    (per-head q/k norms, untied) and MistralForCausalLM (a window of MISTRAL_WINDOW on every
    layer, untied) on the Llama bench's shapes."""

    def __init__(self, T, name):
        super().__init__(T)
        for layer in self.layers:
            layer.self_attn = QwenAttention(name == "qwen2-bench", name == "qwen3-bench")
        if name == "qwen2-bench":
            self.lm_head.weight = self.embed_tokens.weight
        if name == "mistral-bench":
            window = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-MISTRAL_WINDOW)
            self.register_buffer("mask", self.mask | window, persistent=False)
        for n, p in self.layers.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=INIT_STD)
            elif n.endswith("bias"):
                nn.init.zeros_(p)


class GPT2Block(nn.Module):
    """HF GPT2Block: pre-LayerNorm, fused c_attn (q|k|v), tanh GELU MLP, biases everywhere."""

    def __init__(self):
        super().__init__()
        C = G_HIDDEN
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, G_INTERMEDIATE)
        self.mlp_proj = nn.Linear(G_INTERMEDIATE, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        D = C // G_HEADS
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, G_HEADS, D).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
        scores = scores.masked_fill(mask, float("-inf"))
        att = torch.matmul(F.softmax(scores, dim=-1), v).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(att)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, T):
        super().__init__()
        self.wte = nn.Embedding(G_VOCAB, G_HIDDEN)
        self.wpe = nn.Embedding(G_POSITIONS, G_HIDDEN)
        self.h = nn.ModuleList(GPT2Block() for _ in range(G_LAYERS))
        self.ln_f = nn.LayerNorm(G_HIDDEN, eps=1e-5)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)
        # HF _init_weights: normal(0.02) for linears and embeddings, zero biases, and the
        # residual projections scaled by 1/sqrt(2L).
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = INIT_STD / math.sqrt(2 * G_LAYERS) if n.endswith(("c_proj.weight",
                                                                         "mlp_proj.weight")) \
                    else INIT_STD
                nn.init.normal_(p, std=std)
            elif n.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x, self.mask)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head


def make_optimizer(model):
    # Same groups as ETE's ParamSpec: decay on linear weights only (not embeddings, norms, biases).
    def decays(n, p):
        return p.dim() == 2 and not any(e in n for e in ("embed", "wte", "wpe"))
    decay = [p for n, p in model.named_parameters() if decays(n, p)]
    rest = [p for n, p in model.named_parameters() if not decays(n, p)]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8)


def train_step(model, opt, ids, bf16, vocab):
    inputs, targets = ids[:, :-1], ids[:, 1:]
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(inputs)
        # autocast runs cross_entropy in fp32 whatever the logits' dtype.
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def openblas_core():
    """The core type of the OpenBLAS torch loaded (the same shared object, so same state)."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "unknown"


def model_flops_per_step(gpt2, B, T):
    # Same formula as ete_bench_train: 6 * matmul params * tokens + causal attention (the tied
    # GPT-2 head counts as a matmul).
    if gpt2:
        C, L, H, V, F_ = G_HIDDEN, G_LAYERS, G_HEADS, G_VOCAB, G_INTERMEDIATE
        p_mm = L * (3 * C * C + C * C + 2 * F_ * C) + V * C
        return 6.0 * p_mm * B * T + 6.0 * L * B * C * T * (T + 1)
    S = (HEADS + 2 * KV_HEADS) * HEAD_DIM
    per_layer = S * HIDDEN + HEADS * HEAD_DIM * HIDDEN + 3 * INTERMEDIATE * HIDDEN
    p_mm = LAYERS * per_layer + VOCAB * HIDDEN
    return 6.0 * p_mm * B * T + 6.0 * LAYERS * B * HEADS * HEAD_DIM * T * (T + 1)


def main():
    a = ARGS
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    gpt2 = a.model == "gpt2-124m"
    model = (GPT2(a.seq) if gpt2 else Gemma(a.seq) if a.model == "gemma-bench" else
             Phi3(a.seq) if a.model == "phi3-bench" else
             LlamaFamily(a.seq, a.model) if a.model != "llama-bench" else Llama(a.seq))
    vocab = G_VOCAB if gpt2 else VOCAB
    opt = make_optimizer(model)
    gen = torch.Generator().manual_seed(a.seed)
    times, first_loss = [], None
    for s in range(a.warmup + a.steps):
        ids = torch.randint(0, vocab, (a.batch, a.seq + 1), generator=gen)
        t0 = time.perf_counter()
        loss = train_step(model, opt, ids, a.precision == "bf16", vocab)
        dt = time.perf_counter() - t0
        if first_loss is None:
            # Correctness before speed: at init the first loss must be near ln V.
            first_loss = loss
            if not abs(loss - math.log(vocab)) < 0.5:
                sys.exit(f"pytorch_train: first loss {loss} is not near ln(V) = {math.log(vocab)}")
        tag = "warmup" if s < a.warmup else "      "
        print(f"{tag} step {s:2d}: {dt * 1e3:8.1f} ms  loss {loss:.4f}", file=sys.stderr)
        if s >= a.warmup:
            times.append(dt)
    med = statistics.median(times)
    tokens = a.batch * a.seq
    flops = model_flops_per_step(gpt2, a.batch, a.seq)
    print(json.dumps({
        "bench": "pytorch_train", "torch": torch.__version__, "model": a.model,
        "precision": a.precision, "batch": a.batch, "seq": a.seq,
        "threads": torch.get_num_threads(), "openblas_core": openblas_core(),
        "params": sum(p.numel() for p in model.parameters()),
        "step_ms": [t * 1e3 for t in times], "median_step_ms": med * 1e3,
        "tokens_per_s": tokens / med, "model_flops_per_step": flops,
        "model_flop_per_s": flops / med, "first_loss": first_loss}))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Whole-model PyTorch goldens for tests/model/golden_test.cpp.

Run from the repository root with Debian's python3-torch (1.13 CPU; no `transformers` needed):

    /usr/bin/python3 tools/gen_model_goldens.py            # writes tests/golden/*.safetensors
    /usr/bin/python3 tools/gen_model_goldens.py --out DIR  # somewhere else

Re-running produces identical bytes (fixed torch.Generator seeds, one thread, sorted JSON).

The models below are plain-torch re-implementations of Hugging Face's LlamaForCausalLM,
Qwen2/Qwen3/Mistral/Gemma2/Gemma3/Phi3ForCausalLM and GPT2LMHeadModel (same tensor names, layouts
and operations). Parameters are
drawn in f32 and stored as f32; the model itself runs in float64 so each golden is the exact maths
of those f32 weights and the C++ test measures only ETE's own f32 rounding. The RoPE tables are the
exception: HF builds inv_freq and the angles position * inv_freq in f32, so we do the same.

Each variant becomes one safetensors file holding:
  <hf name>           every parameter, HF layout (GPT-2 Conv1D weights are (in, out)), F32
  inputs, targets     I32 [B, T]; a few targets are -100 (ignored)
  logits              F32 [B, T, V]
  loss                F32 [] mean cross-entropy over non-ignored targets
  grad.<hf name>      d loss / d parameter, HF layout
  adamw_losses        F32 [10] loss before each AdamW step (same batch every step)
  final.<hf name>     parameters after the 10 steps
and __metadata__ {"config": HF config.json, "adamw": hyper-parameters} as JSON strings.

<variant>.bf16.safetensors holds the same model trained as PyTorch users train in bf16: fp32
parameters (the masters), the forward under torch.autocast("cpu", dtype=torch.bfloat16) (its
matmuls take bf16 operands and return bf16, the rest follows type promotion, as in Hugging Face's
modules), the loss in fp32, fp32 gradients and fp32 AdamW:
  loss, grad.<hf name>, adamw_losses   as above, from the same weights, batch and hyper-parameters
rope_scaling.safetensors holds HF's yarn and longrope frequencies (<case>.inv_freq F32,
<case>.attention_factor F32 [1]) for the cases its "cases" metadata lists.
"""

import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

ADAMW = {
    "lr": 1e-2,
    "beta1": 0.9,
    "beta2": 0.95,
    "eps": 1e-8,
    "weight_decay": 0.1,  # matrices only: linear/Conv1D weights and an untied lm_head
    "clip_grad_norm": 1.0,
    "steps": 10,
}
IGNORE_INDEX = -100


# ----------------------------------------------------------------------------------------------
# Configs (HF config.json form, as ete::config_to_hf_json writes them)


def decoder_config(cls, model_type, V, C, H, KV, F_, L, max_pos, **keys):
    """The config.json keys every Llama-layout family shares, and the family's own `keys`."""
    cfg = {
        "architectures": [cls],
        "model_type": model_type,
        "vocab_size": V,
        "hidden_size": C,
        "intermediate_size": F_,
        "num_hidden_layers": L,
        "num_attention_heads": H,
        "num_key_value_heads": KV,
        "hidden_act": "silu",
        "max_position_embeddings": max_pos,
        "initializer_range": 0.02,
        "torch_dtype": "float32",
    }
    cfg.update(keys)
    return cfg


def llama_config(V, C, H, KV, F_, L, head_dim=None, max_pos=64, tie=False, rope_scaling=None,
                 attention_bias=False, mlp_bias=False):
    cfg = decoder_config("LlamaForCausalLM", "llama", V, C, H, KV, F_, L, max_pos,
                         rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=rope_scaling,
                         tie_word_embeddings=tie, attention_bias=attention_bias,
                         mlp_bias=mlp_bias)
    if head_dim is not None:
        cfg["head_dim"] = head_dim
    return cfg


def qwen2_config(V, C, H, KV, F_, L, max_pos=64, tie=False, window=None, window_from=None):
    """Qwen2ForCausalLM: Llama's decoder with q/k/v biases (and no o_proj or MLP biases); with a
    window, the layers from max_window_layers slide."""
    return decoder_config("Qwen2ForCausalLM", "qwen2", V, C, H, KV, F_, L, max_pos,
                          rms_norm_eps=1e-6, rope_theta=1000000.0, rope_scaling=None,
                          tie_word_embeddings=tie, use_sliding_window=window is not None,
                          sliding_window=window,
                          max_window_layers=L if window_from is None else window_from,
                          attention_dropout=0.0)


def qwen3_config(V, C, H, KV, F_, L, head_dim, window, window_from, max_pos=64):
    """Qwen3ForCausalLM: Qwen2's decoder with RMSNorm over each q and k head (q_norm, k_norm)
    before RoPE and attention_bias (false, as in the released models) for q/k/v/o biases."""
    return decoder_config("Qwen3ForCausalLM", "qwen3", V, C, H, KV, F_, L, max_pos,
                          head_dim=head_dim, rms_norm_eps=1e-6, rope_theta=1000000.0,
                          rope_scaling=None, attention_bias=False, tie_word_embeddings=False,
                          use_sliding_window=True, sliding_window=window,
                          max_window_layers=window_from, attention_dropout=0.0)


def mistral_config(V, C, H, KV, F_, L, head_dim, sliding_window, max_pos=64):
    """MistralForCausalLM: Llama's decoder without biases, attention over the last
    sliding_window positions."""
    return decoder_config("MistralForCausalLM", "mistral", V, C, H, KV, F_, L, max_pos,
                          head_dim=head_dim, rms_norm_eps=1e-5, rope_theta=1000000.0,
                          sliding_window=sliding_window, tie_word_embeddings=False,
                          attention_dropout=0.0)


def gemma_config(model_type, V, C, H, KV, F_, L, head_dim, window, qpas, max_pos=64, **keys):
    """Gemma2ForCausalLM / Gemma3ForCausalLM (gemma3_text): (1 + w) RMSNorms before and after
    attention and the MLP, GeGLU (gelu_pytorch_tanh), the embedding scaled by sqrt(hidden), the
    attention scale query_pre_attn_scalar^-1/2, tied head, sliding (local) and full layers."""
    cls = {"gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM"}[model_type]
    cfg = decoder_config(cls, model_type, V, C, H, KV, F_, L, max_pos, head_dim=head_dim,
                         rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=None,
                         attention_bias=False, tie_word_embeddings=True, sliding_window=window,
                         query_pre_attn_scalar=qpas, attention_dropout=0.0,
                         hidden_activation="gelu_pytorch_tanh", **keys)
    del cfg["hidden_act"]  # Gemma's classes read hidden_activation
    return cfg


def phi3_config(V, C, H, KV, F_, L, window, prf, orig, max_pos, rope_scaling, tie):
    """Phi3ForCausalLM (Phi-3, Phi-4): Mistral's decoder with q|k|v in one qkv_proj and gate|up
    in one gate_up_proj, RoPE on the first int(D * partial_rotary_factor) dims of each head,
    LongRoPE scaling against the top-level original_max_position_embeddings."""
    return decoder_config("Phi3ForCausalLM", "phi3", V, C, H, KV, F_, L, max_pos,
                          rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=rope_scaling,
                          partial_rotary_factor=prf, original_max_position_embeddings=orig,
                          sliding_window=window, tie_word_embeddings=tie, attention_dropout=0.0,
                          resid_pdrop=0.0, embd_pdrop=0.0)


def gpt2_config(V, C, H, L, n_positions):
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": V,
        "n_embd": C,
        "n_layer": L,
        "n_head": H,
        "n_inner": 4 * C,
        "n_positions": n_positions,
        "n_ctx": n_positions,
        "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new",
        "initializer_range": 0.02,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }


# ----------------------------------------------------------------------------------------------
# Parameters: (name, HF shape, kind) in execution order. kind: matrix | embedding | norm | bias.
# Only "matrix" gets weight decay (ete::param_decays).


def llama_biases(cfg):
    """(q/k/v, o_proj, MLP) biases of a Llama-layout family (ete::ModelConfig::has_*_bias)."""
    if cfg["model_type"] == "qwen2":
        return True, False, False
    if cfg["model_type"] == "mistral":
        return False, False, False
    if cfg["model_type"] == "qwen3":
        return cfg["attention_bias"], cfg["attention_bias"], False
    return cfg["attention_bias"], cfg["attention_bias"], cfg["mlp_bias"]


def llama_param_table(cfg):
    C, V, F_ = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim", C // H)
    t = [("model.embed_tokens.weight", (V, C), "embedding")]
    qkv = [("q_proj", H * D, C), ("k_proj", KV * D, C), ("v_proj", KV * D, C)]
    o = [("o_proj", C, H * D)]
    mlp = [("gate_proj", F_, C), ("up_proj", F_, C), ("down_proj", C, F_)]
    qkv_bias, o_bias, mlp_bias = llama_biases(cfg)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."

        def linears(group, table, bias):  # weights, then biases (ETE's fused-group order)
            out = [(f"{p}{group}.{n}.weight", (o, k), "matrix") for n, o, k in table]
            if bias:
                out += [(f"{p}{group}.{n}.bias", (o,), "bias") for n, o, _ in table]
            return out

        t.append((p + "input_layernorm.weight", (C,), "norm"))
        if qkv_bias == o_bias:  # the four weights, then the four biases (or none)
            t += linears("self_attn", qkv + o, qkv_bias)
        else:
            t += linears("self_attn", qkv, qkv_bias) + linears("self_attn", o, o_bias)
        if cfg["model_type"] == "qwen3":
            t += [(p + "self_attn.q_norm.weight", (D,), "norm"),
                  (p + "self_attn.k_norm.weight", (D,), "norm")]
        t.append((p + "post_attention_layernorm.weight", (C,), "norm"))
        t += linears("mlp", mlp, mlp_bias)
    t.append(("model.norm.weight", (C,), "norm"))
    if not cfg["tie_word_embeddings"]:
        t.append(("lm_head.weight", (V, C), "matrix"))
    return t


def gemma_param_table(cfg):
    """Gemma 2/3 in ETE's order; "gnorm" is a (1 + w) norm weight (never decayed)."""
    C, V, F_ = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    t = [("model.embed_tokens.weight", (V, C), "embedding")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.append((p + "input_layernorm.weight", (C,), "gnorm"))
        t += [(f"{p}self_attn.{n}.weight", (o, k), "matrix")
              for n, o, k in [("q_proj", H * D, C), ("k_proj", KV * D, C), ("v_proj", KV * D, C),
                              ("o_proj", C, H * D)]]
        if cfg["model_type"] == "gemma3_text":
            t += [(p + "self_attn.q_norm.weight", (D,), "gnorm"),
                  (p + "self_attn.k_norm.weight", (D,), "gnorm")]
        t += [(p + "post_attention_layernorm.weight", (C,), "gnorm"),
              (p + "pre_feedforward_layernorm.weight", (C,), "gnorm")]
        t += [(f"{p}mlp.{n}.weight", (o, k), "matrix")
              for n, o, k in [("gate_proj", F_, C), ("up_proj", F_, C), ("down_proj", C, F_)]]
        t.append((p + "post_feedforward_layernorm.weight", (C,), "gnorm"))
    t.append(("model.norm.weight", (C,), "gnorm"))
    return t


def phi3_param_table(cfg):
    C, V, F_ = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = C // H
    t = [("model.embed_tokens.weight", (V, C), "embedding")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t += [(p + "input_layernorm.weight", (C,), "norm"),
              (p + "self_attn.qkv_proj.weight", ((H + 2 * KV) * D, C), "matrix"),
              (p + "self_attn.o_proj.weight", (C, H * D), "matrix"),
              (p + "post_attention_layernorm.weight", (C,), "norm"),
              (p + "mlp.gate_up_proj.weight", (2 * F_, C), "matrix"),
              (p + "mlp.down_proj.weight", (C, F_), "matrix")]
    t.append(("model.norm.weight", (C,), "norm"))
    if not cfg["tie_word_embeddings"]:
        t.append(("lm_head.weight", (V, C), "matrix"))
    return t


def gpt2_param_table(cfg):
    C, V, P, F_ = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_inner"]
    t = [("wte.weight", (V, C), "embedding"), ("wpe.weight", (P, C), "embedding")]
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."

        def ln(n):
            return [(p + n + ".weight", (C,), "norm"), (p + n + ".bias", (C,), "bias")]

        def conv(n, inp, out):  # Conv1D: weight (in, out)
            return [(p + n + ".weight", (inp, out), "matrix"), (p + n + ".bias", (out,), "bias")]

        t += ln("ln_1") + conv("attn.c_attn", C, 3 * C) + conv("attn.c_proj", C, C)
        t += ln("ln_2") + conv("mlp.c_fc", C, F_) + conv("mlp.c_proj", F_, C)
    t += [("ln_f.weight", (C,), "norm"), ("ln_f.bias", (C,), "bias")]
    return t


def init_params(table, gen):
    """Non-trivial f32 values: matrices/embeddings normal(0.1), norms 1 + normal(0.1), biases
    normal(0.05), so every gradient path (including norm weights and biases) is exercised."""
    params = {}
    for name, shape, kind in table:
        x = torch.randn(shape, generator=gen, dtype=torch.float32)
        if kind == "norm":
            x = 1.0 + 0.1 * x
        elif kind == "gnorm":  # applied as 1 + w
            x = 0.1 * x
        elif kind == "bias":
            x = 0.05 * x
        else:
            x = 0.1 * x
        params[name] = x
    return params


# ----------------------------------------------------------------------------------------------
# Models (float64 maths, HF semantics)


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope_inv_freq(cfg, D, base=None, rs=None):
    # HF _compute_default_rope_parameters / _compute_linear_scaling_rope_parameters /
    # _compute_llama3_parameters, in f32 like HF.
    if base is None:
        base, rs = cfg["rope_theta"], cfg.get("rope_scaling")
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    if rs is None:
        return inv_freq
    if rs["rope_type"] == "linear":
        return inv_freq / rs["factor"]
    assert rs["rope_type"] == "llama3"
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    orig = rs["original_max_position_embeddings"]
    low_wl, high_wl = orig / lo, orig / hi
    wavelen = 2 * math.pi / inv_freq
    inv_llama = torch.where(wavelen > low_wl, inv_freq / factor, inv_freq)
    smooth = (orig / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
    medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
    return torch.where(medium, smoothed, inv_llama)


def rope_cos_sin(cfg, D, T, base=None):
    inv_freq = rope_inv_freq(cfg, D, base)
    pos = torch.arange(T, dtype=torch.float32)
    freqs = pos[:, None] * inv_freq[None, :]  # (T, D/2), f32 like HF
    emb = torch.cat([freqs, freqs], dim=-1)  # (T, D)
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def causal_attention(q, k, v, scale, window=None, softcap=None):
    # q (B, H, T, D); k, v (B, H, T, D) after repeat_kv. window: HF's sliding_window_overlay,
    # query i sees key j only if j > i - window. softcap (Gemma 2): scores capped before the mask.
    T = q.shape[2]
    s = (q @ k.transpose(-1, -2)) * scale
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    if window is not None:
        mask |= torch.ones(T, T, dtype=torch.bool).tril(-window)
    s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def layer_window(cfg, i):
    """The sliding window of layer i (HF layer_types: Mistral every layer, Qwen2 the layers from
    max_window_layers when use_sliding_window), or None."""
    if cfg["model_type"] == "mistral":
        return cfg.get("sliding_window")
    if cfg["model_type"] in ("qwen2", "qwen3") and cfg.get("use_sliding_window"):
        return cfg["sliding_window"] if i >= cfg["max_window_layers"] else None
    if cfg["model_type"] == "gemma2":
        return cfg["sliding_window"] if cfg["layer_types"][i] == "sliding_attention" else None
    if cfg["model_type"] == "gemma3_text":  # the first Gemma 3 configs: sliding_window_pattern
        slides = (i + 1) % cfg["sliding_window_pattern"] != 0
        return cfg["sliding_window"] if slides else None
    return None


def linear(x, P, name):
    y = x @ P[name + ".weight"].t()
    b = P.get(name + ".bias")
    return y if b is None else y + b


def self_attention(cfg, P, p, h, D, rope, head_norm, scale, window, softcap=None):
    """q/k/v (with head_norm over each q and k head before RoPE, or None), RoPE, causal GQA
    attention and o_proj of layer prefix p; h (B, T, C)."""
    B, T = h.shape[:2]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    cos, sin = rope
    q = linear(h, P, p + "self_attn.q_proj").view(B, T, H, D)
    k = linear(h, P, p + "self_attn.k_proj").view(B, T, KV, D)
    if head_norm is not None:
        q = head_norm(q, P[p + "self_attn.q_norm.weight"])
        k = head_norm(k, P[p + "self_attn.k_norm.weight"])
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    v = linear(h, P, p + "self_attn.v_proj").view(B, T, KV, D).transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    # repeat_kv: query head h uses kv head h // (H / KV)
    k = k.repeat_interleave(H // KV, dim=1)
    v = v.repeat_interleave(H // KV, dim=1)
    a = causal_attention(q, k, v, scale, window, softcap)
    return linear(a.transpose(1, 2).reshape(B, T, H * D), P, p + "self_attn.o_proj")


def llama_forward(cfg, P, inputs):
    T = inputs.shape[1]
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    D = cfg.get("head_dim", C // H)
    eps = cfg["rms_norm_eps"]
    cos, sin = (t.to(P["model.embed_tokens.weight"].dtype) for t in rope_cos_sin(cfg, D, T))
    # Qwen3RMSNorm over each q and k head, before RoPE
    head_norm = (lambda t, w: rms_norm(t, w, eps)) if cfg["model_type"] == "qwen3" else None
    x = P["model.embed_tokens.weight"][inputs]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        x = x + self_attention(cfg, P, p, h, D, (cos, sin), head_norm, D ** -0.5,
                               layer_window(cfg, i))
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        m = F.silu(linear(h, P, p + "mlp.gate_proj")) * linear(h, P, p + "mlp.up_proj")
        x = x + linear(m, P, p + "mlp.down_proj")
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else P["lm_head.weight"]
    return x @ head.t()


def gemma_norm(x, w, eps):
    """Gemma2RMSNorm / Gemma3RMSNorm: the weight applied as (1 + w)."""
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * (1.0 + w)


def gemma_forward(cfg, P, inputs):
    T = inputs.shape[1]
    C = cfg["hidden_size"]
    D, eps, gemma3 = cfg["head_dim"], cfg["rms_norm_eps"], cfg["model_type"] == "gemma3_text"
    E = P["model.embed_tokens.weight"]
    rope_global = rope_cos_sin(cfg, D, T)
    rope_local = rope_cos_sin(cfg, D, T, cfg["rope_local_base_freq"]) if gemma3 else rope_global
    x = E[inputs] * torch.tensor(C ** 0.5, dtype=E.dtype)  # the normalizer in the model's dtype
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        window = layer_window(cfg, i)
        cos, sin = (t.to(E.dtype) for t in (rope_local if window is not None else rope_global))
        h = gemma_norm(x, P[p + "input_layernorm.weight"], eps)
        head_norm = (lambda t, w: gemma_norm(t, w, eps)) if gemma3 else None
        o = self_attention(cfg, P, p, h, D, (cos, sin), head_norm,
                           cfg["query_pre_attn_scalar"] ** -0.5, window,
                           cfg.get("attn_logit_softcapping"))
        x = x + gemma_norm(o, P[p + "post_attention_layernorm.weight"], eps)
        h = gemma_norm(x, P[p + "pre_feedforward_layernorm.weight"], eps)
        m = gelu_new(linear(h, P, p + "mlp.gate_proj")) * linear(h, P, p + "mlp.up_proj")
        m = linear(m, P, p + "mlp.down_proj")
        x = x + gemma_norm(m, P[p + "post_feedforward_layernorm.weight"], eps)
    logits = gemma_norm(x, P["model.norm.weight"], eps) @ E.t()
    cap = cfg.get("final_logit_softcapping")
    return logits if cap is None else torch.tanh(logits / cap) * cap


def longrope_inv_freq(rs, R, base, max_pos, orig, T):
    """HF _compute_longrope_parameters: per-frequency factors (the long ones when the sequence
    passes the original context), and the attention factor sqrt(1 + ln s / ln orig) for
    s = max_position_embeddings / orig (or rope_scaling's factor)."""
    factor = rs.get("factor") or max_pos / orig
    attn = rs.get("attention_factor")
    if attn is None:
        attn = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    ext = torch.tensor(rs["long_factor"] if T > orig else rs["short_factor"], dtype=torch.float32)
    shape = torch.arange(0, R, 2, dtype=torch.int64).float() / R
    return 1.0 / (ext * base ** shape), attn


def yarn_inv_freq(rs, R, base, max_pos):
    """HF _compute_yarn_parameters, in f32 like HF."""
    orig = rs.get("original_max_position_embeddings") or max_pos
    factor = rs.get("factor") or max_pos / orig

    def get_mscale(scale, m=1):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attn = rs.get("attention_factor")
    if attn is None:
        if rs.get("mscale") and rs.get("mscale_all_dim"):
            attn = get_mscale(factor, rs["mscale"]) / get_mscale(factor, rs["mscale_all_dim"])
        else:
            attn = get_mscale(factor)
    beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

    def correction_dim(rot):
        return (R * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    lo, hi = correction_dim(beta_fast), correction_dim(beta_slow)
    if rs.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, R - 1)
    if lo == hi:
        hi += 0.001
    ramp = torch.clamp((torch.arange(R // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
    pos_freqs = base ** (torch.arange(0, R, 2).float() / R)
    extrapolation = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv, attn


def partial_rope(x, cos, sin):
    """Phi3's apply_rotary_pos_emb: rotate the first cos.shape[-1] dims, pass the rest."""
    R = cos.shape[-1]
    r = x[..., :R]
    return torch.cat([r * cos + rotate_half(r) * sin, x[..., R:]], dim=-1)


def phi3_forward(cfg, P, inputs):
    B, T = inputs.shape
    C, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D, eps = C // H, cfg["rms_norm_eps"]
    R = int(D * cfg["partial_rotary_factor"])
    inv_freq, attn = longrope_inv_freq(cfg["rope_scaling"], R, cfg["rope_theta"],
                                       cfg["max_position_embeddings"],
                                       cfg["original_max_position_embeddings"], T)
    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    E = P["model.embed_tokens.weight"]
    cos, sin = (emb.cos() * attn).to(E.dtype), (emb.sin() * attn).to(E.dtype)
    x = E[inputs]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        q, k, v = linear(h, P, p + "self_attn.qkv_proj").split([H * D, KV * D, KV * D], dim=-1)
        q = partial_rope(q.view(B, T, H, D).transpose(1, 2), cos, sin)
        k = partial_rope(k.view(B, T, KV, D).transpose(1, 2), cos, sin)
        v = v.view(B, T, KV, D).transpose(1, 2)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        a = causal_attention(q, k, v, D ** -0.5, cfg["sliding_window"])
        x = x + linear(a.transpose(1, 2).reshape(B, T, H * D), P, p + "self_attn.o_proj")
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        gate, up = linear(h, P, p + "mlp.gate_up_proj").chunk(2, dim=-1)
        x = x + linear(up * F.silu(gate), P, p + "mlp.down_proj")
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = E if cfg["tie_word_embeddings"] else P["lm_head.weight"]
    return x @ head.t()


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def conv1d(x, P, name):
    return x @ P[name + ".weight"] + P[name + ".bias"]


def gpt2_forward(cfg, P, inputs):
    B, T = inputs.shape
    C, H = cfg["n_embd"], cfg["n_head"]
    D, eps = C // H, cfg["layer_norm_epsilon"]

    def ln(x, n):
        return F.layer_norm(x, (C,), P[n + ".weight"], P[n + ".bias"], eps)

    x = P["wte.weight"][inputs] + P["wpe.weight"][torch.arange(T)]
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        qkv = conv1d(ln(x, p + "ln_1"), P, p + "attn.c_attn")
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in qkv.split(C, dim=-1))
        a = causal_attention(q, k, v, 1.0 / math.sqrt(D)).transpose(1, 2).reshape(B, T, C)
        x = x + conv1d(a, P, p + "attn.c_proj")
        m = gelu_new(conv1d(ln(x, p + "ln_2"), P, p + "mlp.c_fc"))
        x = x + conv1d(m, P, p + "mlp.c_proj")
    return ln(x, "ln_f") @ P["wte.weight"].t()


def mean_loss(logits, targets):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1).long(),
                           ignore_index=IGNORE_INDEX)


# ----------------------------------------------------------------------------------------------
# Golden computation


def make_golden(cfg, table, forward, B, T, seed):
    gen = torch.Generator().manual_seed(seed)
    V = cfg["vocab_size"]
    params32 = init_params(table, gen)
    inputs = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    for b, t in [(0, 2), (1, 0), (1, T - 1)]:  # ignored targets, incl. first/last positions
        targets[b, t] = IGNORE_INDEX

    P = {n: p.double().requires_grad_(True) for n, p in params32.items()}
    logits = forward(cfg, P, inputs)
    loss = mean_loss(logits, targets)
    loss.backward()

    out = {n: params32[n] for n, _, _ in table}
    out["inputs"] = inputs.to(torch.int32)
    out["targets"] = targets.to(torch.int32)
    out["logits"] = logits.detach().float()
    out["loss"] = loss.detach().float().reshape(())
    for n, _, _ in table:
        out["grad." + n] = P[n].grad.float()

    losses, final = adamw_trajectory(
        table, {n: p.double() for n, p in params32.items()},
        lambda P: mean_loss(forward(cfg, P, inputs), targets))
    out["adamw_losses"] = torch.tensor(losses, dtype=torch.float64).float()
    for n, _, _ in table:
        out["final." + n] = final[n].float()
    meta = {"config": json.dumps(cfg, sort_keys=True), "adamw": json.dumps(ADAMW, sort_keys=True)}
    return out, meta, float(loss)


def adamw_trajectory(table, params, loss_of):
    """ADAMW["steps"] AdamW steps on the same batch from `params` (fresh tensors: float64 copies,
    or the fp32 masters of a bf16 run); the loss before each step, and the final parameters."""
    P = {n: p.requires_grad_(True) for n, p in params.items()}
    decay = [P[n] for n, _, kind in table if kind == "matrix"]  # ete::param_decays
    no_decay = [P[n] for n, _, kind in table if kind != "matrix"]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": ADAMW["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"], foreach=False)
    losses = []
    for _ in range(ADAMW["steps"]):
        opt.zero_grad(set_to_none=False)
        loss = loss_of(P)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), ADAMW["clip_grad_norm"])
        opt.step()
        losses.append(float(loss))
    return losses, {n: p.detach() for n, p in P.items()}


def autocast_loss(cfg, forward, P, inputs, targets):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = forward(cfg, P, inputs)
    return mean_loss(logits.float(), targets)


def make_bf16_golden(cfg, table, forward, B, T, seed):
    """The bf16 autocast run of make_golden's model and batch (same generator draws)."""
    gen = torch.Generator().manual_seed(seed)
    V = cfg["vocab_size"]
    params32 = init_params(table, gen)
    inputs = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    for b, t in [(0, 2), (1, 0), (1, T - 1)]:
        targets[b, t] = IGNORE_INDEX
    P = {n: p.clone().requires_grad_(True) for n, p in params32.items()}
    loss = autocast_loss(cfg, forward, P, inputs, targets)
    loss.backward()
    out = {"loss": loss.detach().float().reshape(())}
    for n, _, _ in table:
        out["grad." + n] = P[n].grad.float()
    losses, _ = adamw_trajectory(table, {n: p.clone() for n, p in params32.items()},
                                 lambda P: autocast_loss(cfg, forward, P, inputs, targets))
    out["adamw_losses"] = torch.tensor(losses, dtype=torch.float64).float()
    meta = {"autocast": "cpu bfloat16", "torch": torch.__version__}
    return out, meta, float(loss)


# ----------------------------------------------------------------------------------------------
# safetensors writer (the official layout: u64 LE header length, JSON padded with spaces to a
# multiple of 8, data ordered by dtype alignment then name)

DTYPES = {torch.float32: ("F32", 4), torch.int32: ("I32", 4)}


def write_safetensors(path, tensors, metadata):
    order = sorted(tensors, key=lambda n: (-DTYPES[tensors[n].dtype][1], n))
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for n in order:
        t = tensors[n].contiguous()
        data = t.numpy().tobytes()  # host order; main() checks it is little-endian
        header[n] = {"dtype": DTYPES[t.dtype][0], "shape": list(t.shape),
                     "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def variants():
    llama = llama_config(V=97, C=32, H=4, KV=2, F_=56, L=2)
    gpt2 = gpt2_config(V=101, C=32, H=4, L=2, n_positions=16)
    # Llama-3 rope scaling, explicit head_dim (H·D = 64 != C = 32), MQA, tied embeddings and
    # biases. original_max_position_embeddings = 32 (not 8) so the three inv_freq branches all
    # occur with D = 16: wavelength 2π < 8 kept, 19.9 in [8, 32] blended, the rest divided.
    llama3 = llama_config(V=97, C=32, H=4, KV=1, F_=56, L=2, head_dim=16, max_pos=128, tie=True,
                          rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 32},
                          attention_bias=True, mlp_bias=True)
    # Qwen2: q/k/v biases only, GQA, rope_theta 1e6, tied; layer 0 full, layer 1 a window of 5
    # (max_window_layers 1). Mistral: no biases, head_dim 16 (H·D = 64 != C), every layer a window
    # of 4. The sequences (T = 9) are longer than both windows.
    qwen2 = qwen2_config(V=97, C=32, H=4, KV=2, F_=56, L=2, tie=True, window=5, window_from=1)
    mistral = mistral_config(V=97, C=32, H=4, KV=2, F_=56, L=2, head_dim=16, sliding_window=4)
    # Qwen3: per-head q/k norms, head_dim 16 (H·D = 64 != C), untied, layer 1 a window of 5.
    qwen3 = qwen3_config(V=97, C=32, H=4, KV=2, F_=56, L=2, head_dim=16, window=5, window_from=1)
    # Gemma 2: three layers (sliding, full, sliding: layer_types) with a window of 4, head_dim 16,
    # query_pre_attn_scalar 24 (not head_dim), and soft-caps small enough (1 on the scores, 2 on
    # the logits) that tanh bends the tiny model's values, as 50 and 30 do a real one's.
    gemma2 = gemma_config("gemma2", V=97, C=32, H=4, KV=2, F_=56, L=3, head_dim=16, window=4,
                          qpas=24, attn_logit_softcapping=1.0, final_logit_softcapping=2.0,
                          layer_types=["sliding_attention", "full_attention",
                                       "sliding_attention"])
    # Gemma 3: (1 + w) q/k norms, two sliding layers then a full one (sliding_window_pattern 3),
    # the full layer at rope_theta 1e6 with linear scaling 8 (as the 4B+ models), the sliding
    # ones at rope_local_base_freq 1e4, no caps.
    gemma3 = gemma_config("gemma3_text", V=97, C=32, H=4, KV=2, F_=56, L=3, head_dim=16,
                          window=4, qpas=20, sliding_window_pattern=3,
                          attn_logit_softcapping=None, final_logit_softcapping=None,
                          rope_local_base_freq=10000.0)
    gemma3["rope_theta"] = 1000000.0
    gemma3["rope_scaling"] = {"rope_type": "linear", "factor": 8.0}
    # Phi-3: fused qkv_proj (GQA, two query heads on one kv head: q twice as wide as k and v) and
    # gate_up_proj, D = 16 with partial_rotary_factor 0.75 (12 rotary dims, 4 passed through),
    # LongRoPE with the sequence (T = 9) past the original context of 8 (so long_factor applies;
    # the attention factor is sqrt(1 + ln 8 / ln 8) = sqrt 2), a window of 5 on every layer,
    # untied head. (At C = 64 with four heads the model memorises the batch in ten steps, loss
    # 4.9 -> 0.015, too fast for a relative bf16 trajectory bound.)
    phi3 = phi3_config(V=97, C=32, H=2, KV=1, F_=56, L=2, window=5, prf=0.75, orig=8, max_pos=64,
                       rope_scaling={"type": "longrope",
                                     "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                                     "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0]},
                       tie=False)
    return [
        ("llama_gqa", llama, llama_param_table(llama), llama_forward, 1001),
        ("phi3_longrope", phi3, phi3_param_table(phi3), phi3_forward, 1009),
        ("gemma2_softcap", gemma2, gemma_param_table(gemma2), gemma_forward, 1007),
        ("gemma3_local_global", gemma3, gemma_param_table(gemma3), gemma_forward, 1008),
        ("qwen2_bias", qwen2, llama_param_table(qwen2), llama_forward, 1004),
        ("mistral_window", mistral, llama_param_table(mistral), llama_forward, 1005),
        ("qwen3_qk_norm", qwen3, llama_param_table(qwen3), llama_forward, 1006),
        ("gpt2", gpt2, gpt2_param_table(gpt2), gpt2_forward, 1002),
        ("llama3_rope_tied", llama3, llama_param_table(llama3), llama_forward, 1003),
    ]


def rope_cases():
    """(name, rope dict, rotary dims, theta, max_position_embeddings, top-level original or 0,
    sequence length): Qwen2.5's yarn, DeepSeek's yarn with mscale / mscale_all_dim and no
    truncation, Phi-3's longrope short and long, and one with explicit factors."""
    lr = {"type": "longrope", "short_factor": [1.0, 1.02, 1.1, 1.3, 1.7, 2.2, 3.0, 4.1],
          "long_factor": [1.1, 1.6, 2.6, 4.4, 7.5, 12.0, 19.0, 30.0]}
    return [
        ("yarn_qwen", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
         16, 1000000.0, 128, 0, 16),
        ("yarn_mscale", {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 64,
                         "beta_fast": 16, "beta_slow": 2, "mscale": 1.0,
                         "mscale_all_dim": 0.707, "truncate": False}, 32, 10000.0, 2560, 0, 16),
        ("longrope_short", lr, 16, 10000.0, 4096, 256, 200),
        ("longrope_long", lr, 16, 10000.0, 4096, 256, 300),
        ("longrope_given", dict(lr, factor=2.0, attention_factor=1.25), 16, 10000.0, 4096, 256,
         300),
    ]


def rope_goldens(path):
    """inv_freq (F32) and the attention factor of each rope_cases() entry, as HF computes them."""
    tensors, meta = {}, []
    for name, rs, R, base, max_pos, orig, T in rope_cases():
        if rs.get("rope_type", rs.get("type")) == "yarn":
            inv, attn = yarn_inv_freq(rs, R, base, max_pos)
        else:
            o = rs.get("original_max_position_embeddings") or orig or max_pos
            inv, attn = longrope_inv_freq(rs, R, base, max_pos, o, T)
        tensors[name + ".inv_freq"] = inv.float()
        tensors[name + ".attention_factor"] = torch.tensor([attn], dtype=torch.float32)
        meta.append({"name": name, "rope": rs, "rotary_dim": R, "theta": base,
                     "max_position_embeddings": max_pos, "original": orig, "seq_len": T})
    write_safetensors(path, tensors, {"cases": json.dumps(meta, sort_keys=True)})
    print(f"{path}: {len(meta)} cases")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(root, "tests", "golden"))
    args = ap.parse_args()
    assert sys.byteorder == "little", "safetensors is little-endian"
    torch.set_num_threads(1)  # bitwise-reproducible reductions
    os.makedirs(args.out, exist_ok=True)
    B, T = 2, 9
    for name, cfg, table, forward, seed in variants():
        tensors, meta, loss = make_golden(cfg, table, forward, B, T, seed)
        path = os.path.join(args.out, name + ".safetensors")
        write_safetensors(path, tensors, meta)
        print(f"{path}: loss {loss:.6f}, {len(tensors)} tensors, {os.path.getsize(path)} bytes")
        tensors, meta, loss = make_bf16_golden(cfg, table, forward, B, T, seed)
        path = os.path.join(args.out, name + ".bf16.safetensors")
        write_safetensors(path, tensors, meta)
        print(f"{path}: loss {loss:.6f}, {len(tensors)} tensors, {os.path.getsize(path)} bytes")
    rope_goldens(os.path.join(args.out, "rope_scaling.safetensors"))


if __name__ == "__main__":
    main()

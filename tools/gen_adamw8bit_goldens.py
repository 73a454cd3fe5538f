#!/usr/bin/python3
"""Goldens for 8-bit AdamW (tests/optim/adamw8bit_test.cpp): the dynamic maps, blockwise
quantization of moments, and whole 8-bit AdamW steps.

Run from the repository root with Debian's python3-torch (1.13, CPU):

    /usr/bin/python3 tools/gen_adamw8bit_goldens.py   # writes tests/golden/adamw8bit.safetensors

Re-running produces identical bytes (fixed seeds).

The maps follow bitsandbytes' create_dynamic_map (bitsandbytes/functional.py): for i = 0..6 the
n - 1 midpoints of linspace(0.1, 1, n) scaled by 10**(i - 6) (signed: n = 2**i + 1 and both signs;
unsigned: n = 2**(i + 1) + 1), then 0 and 1, sorted — here computed in double and rounded once to
float32 (torch.linspace in float32 can differ by an ulp), as ETE does (core/dynamic_map.cpp). The
first moment's map is the signed one with its lowest value made -1 (so a block's absmax element
maps to +-1 exactly and requantizing a dequantized block is the identity); the second moment uses
the unsigned map.

Blockwise quantization (as bitsandbytes' blockwise 8-bit optimizers, blocks of 256): a block's
absmax a = max |x| (fp32), each element the index of the map value nearest to x / a (float32
division; float32 distances to the two neighbours; a tie goes to the lower index); a = 0 stores the
index of 0. One step of 8-bit AdamW per block: dequantize (map[code] * a), then torch.optim.AdamW's
single-tensor arithmetic in float32, one rounding per operation (ETE compiles its kernels without
fma contraction for this):
    g = g * grad_scale (when != 1); p = p * (1 - lr * wd); m = m + (g - m) * (1 - beta1)
    v = v * beta2 + (1 - beta2) * g * g; denom = sqrt(v) / sqrt(bc2) + eps
    p = p - (lr / bc1) * (m / denom)
with the fresh fp32 m, v (as bitsandbytes updates from registers), then m and v requantized with
their block's new absmax.

The file holds map.signed, map.unsigned (F32 [256]); quant.x (F32), quant.block (I32 [1]),
quant.m_codes / quant.m_absmax (x with the signed map), quant.v_codes / quant.v_absmax (|x| with
the unsigned map); per step case <c>: <c>.p, <c>.g, <c>.m_codes, <c>.m_absmax, <c>.v_codes,
<c>.v_absmax (before), <c>.hyper (F32 [11]: lr, beta1, beta2, eps, weight_decay, bc1, bc2,
grad_scale, block, n, t; bc = 1 - beta**t from the double hyper-parameters, as ete::AdamW8bit) and <c>.out.p, <c>.out.m_codes, <c>.out.m_absmax, <c>.out.v_codes, <c>.out.v_absmax.
"""

import json
import os
import struct
import sys

import numpy as np
import torch

f32 = np.float32


def dynamic_map(signed):
    v = []
    for i in range(7):
        n = 2 ** i + 1 if signed else 2 ** (i + 1) + 1
        scale = 10.0 ** (i - 6)
        for j in range(n - 1):
            lo, hi = 0.1 + 0.9 * j / (n - 1), 0.1 + 0.9 * (j + 1) / (n - 1)
            m = (lo + hi) / 2
            v.append(scale * m)
            if signed:
                v.append(-scale * m)
    v += [0.0, 1.0]
    v.sort()
    assert len(v) == 256
    return np.array(v, dtype=np.float32)


SIGNED = dynamic_map(True)
SIGNED[0] = f32(-1.0)
UNSIGNED = dynamic_map(False)


def codes_of(xn, qmap):
    j = np.clip(np.searchsorted(qmap, xn, side="right"), 1, 255)
    below = (xn - qmap[j - 1]).astype(np.float32)
    above = (qmap[j] - xn).astype(np.float32)
    return np.where(above < below, j, j - 1).astype(np.uint8)


def quantize(x, block, qmap, signed):
    codes = np.zeros(x.shape, np.uint8)
    absmax = []
    zero = codes_of(np.array([0.0], np.float32), qmap)[0]
    for b0 in range(0, len(x), block):
        xb = x[b0:b0 + block]
        a = f32(np.max(np.abs(xb) if signed else xb))
        absmax.append(a)
        codes[b0:b0 + block] = zero if a == 0 else codes_of((xb / a).astype(np.float32), qmap)
    return codes, np.array(absmax, np.float32)


def dequantize(codes, absmax, block, qmap):
    x = np.zeros(codes.shape, np.float32)
    for b, b0 in enumerate(range(0, len(codes), block)):
        x[b0:b0 + block] = qmap[codes[b0:b0 + block]] * absmax[b]
    return x


def step(p, g, mc, ma, vc, va, lr, beta1, beta2, eps, wd, t, grad_scale, block):
    m = dequantize(mc, ma, block, SIGNED)
    v = dequantize(vc, va, block, UNSIGNED)
    bc1 = f32(1.0 - beta1 ** t)
    bc2 = f32(1.0 - beta2 ** t)
    lr, beta1, beta2, eps, wd, gs = (f32(x) for x in (lr, beta1, beta2, eps, wd, grad_scale))
    step_size = f32(lr / bc1)
    bc2_sqrt = np.sqrt(bc2)
    gi = g if gs == f32(1) else (g * gs).astype(np.float32)
    p = (p * f32(f32(1) - lr * wd)).astype(np.float32)
    m = (m + (gi - m) * f32(f32(1) - beta1)).astype(np.float32)
    v = (v * beta2 + (f32(1) - beta2) * gi * gi).astype(np.float32)
    denom = (np.sqrt(v) / bc2_sqrt + eps).astype(np.float32)
    p = (p - step_size * (m / denom)).astype(np.float32)
    mc, ma = quantize(m, block, SIGNED, True)
    vc, va = quantize(v, block, UNSIGNED, False)
    return p, mc, ma, vc, va


DTYPES = {np.dtype(np.float32): ("F32", 4), np.dtype(np.int32): ("I32", 4),
          np.dtype(np.uint8): ("U8", 1)}


def write_safetensors(path, tensors, metadata):
    order = sorted(tensors, key=lambda n: (-DTYPES[tensors[n].dtype][1], n))
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for n in order:
        data = np.ascontiguousarray(tensors[n]).tobytes()
        header[n] = {"dtype": DTYPES[tensors[n].dtype][0], "shape": list(tensors[n].shape),
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


def quant_case(gen):
    """Blocks of 256: normal values over six decades, a block of zeros, one whose absmax element
    is negative, exact midpoints between neighbouring codes (ties), codes themselves, and a short
    last block."""
    block = 256
    x = (torch.randn(5 * block + 77, generator=gen) *
         10.0 ** torch.randint(-6, 1, (5 * block + 77,), generator=gen).float()).numpy()
    x = x.astype(np.float32)
    x[block:2 * block] = 0
    b = 2 * block
    x[b:b + block] = np.abs(x[b:b + block])
    x[b + 7] = -2.0 * np.max(x[b:b + block])
    b = 3 * block  # absmax 1: x / a = x exactly
    x[b] = 1.0
    mids = ((SIGNED[:-1] + SIGNED[1:]) / 2).astype(np.float32)
    x[b + 1:b + 1 + 200] = mids[::-1][:200]
    b = 4 * block
    x[b] = -1.0
    x[b + 1:b + 1 + 255] = SIGNED[1:256][::-1][:255]
    return x, block


def step_case(gen, n, block, hyper, warm):
    """p, g and moments from `warm` earlier fp32 steps' worth of gradients, quantized."""
    p = torch.randn(n, generator=gen).numpy().astype(np.float32) * f32(0.1)
    g = torch.randn(n, generator=gen).numpy().astype(np.float32) * f32(0.01)
    m = np.zeros(n, np.float32)
    v = np.zeros(n, np.float32)
    for _ in range(warm):
        h = torch.randn(n, generator=gen).numpy().astype(np.float32) * f32(0.01)
        m = (m * f32(0.9) + f32(0.1) * h).astype(np.float32)
        v = (v * f32(0.95) + f32(0.05) * h * h).astype(np.float32)
    m[block:2 * block] = 0  # a block of zeros (absmax 0) before the step
    mc, ma = quantize(m, block, SIGNED, True)
    vc, va = quantize(v, block, UNSIGNED, False)
    out = step(p, g, mc, ma, vc, va, block=block, **hyper)
    return (p, g, mc, ma, vc, va), out


def main():
    assert sys.byteorder == "little"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "tests", "golden", "adamw8bit.safetensors")
    gen = torch.Generator().manual_seed(88)
    t = {"map.signed": SIGNED, "map.unsigned": UNSIGNED}
    x, block = quant_case(gen)
    t["quant.x"] = x
    t["quant.block"] = np.array([block], np.int32)
    t["quant.m_codes"], t["quant.m_absmax"] = quantize(x, block, SIGNED, True)
    t["quant.v_codes"], t["quant.v_absmax"] = quantize(np.abs(x), block, UNSIGNED, False)
    cases = {
        "first": (3 * 256 + 100, 256, dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.0,
                                           t=1, grad_scale=1.0), 0),
        "later": (2 * 256 + 188, 256, dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, wd=0.1,
                                           t=7, grad_scale=0.5), 6),
        "small_blocks": (200, 64, dict(lr=1e-2, beta1=0.8, beta2=0.99, eps=1e-6, wd=0.01,
                                       t=3, grad_scale=1.0), 2),
    }
    for name, (n, blk, hyper, warm) in cases.items():
        before, after = step_case(gen, n, blk, hyper, warm)
        for k, v in zip(("p", "g", "m_codes", "m_absmax", "v_codes", "v_absmax"), before):
            t[f"{name}.{k}"] = v
        for k, v in zip(("p", "m_codes", "m_absmax", "v_codes", "v_absmax"), after):
            t[f"{name}.out.{k}"] = v
        h = hyper
        t[f"{name}.hyper"] = np.array(
            [h["lr"], h["beta1"], h["beta2"], h["eps"], h["wd"], 1.0 - h["beta1"] ** h["t"],
             1.0 - h["beta2"] ** h["t"], h["grad_scale"], blk, n, h["t"]], np.float32)
    write_safetensors(path, t, {"format": "ete", "script": "tools/gen_adamw8bit_goldens.py"})
    print(f"{path}: {len(t)} tensors, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()

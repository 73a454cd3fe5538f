#!/usr/bin/python3
"""QAT goldens: PyTorch's observers and fake quantization, for tests/quant/fake_quant_test.cpp.

Run from the repository root with Debian's python3-torch (1.13 CPU):

    /usr/bin/python3 tools/gen_qat_goldens.py             # writes tests/golden/qat.safetensors
    /usr/bin/python3 tools/gen_qat_goldens.py --out PATH  # somewhere else

Re-running produces identical bytes (a fixed torch.Generator seed, one thread).

Each case <c> holds `<c>.x` F32 [rows, cols] (values exactly on rounding ties and at the clamp
edges mixed into random ones), the observer's `<c>.scale` and `<c>.zero` F32 [blocks], the fake
quantized `<c>.y` F32 [rows, cols] and `<c>.mask` F32 [rows, cols] (the gradient of y.sum(), so
PyTorch's straight-through mask). `__metadata__["cases"]` is a JSON list of {name, rows, cols,
qmin, qmax, rule, granularity, group, observer, averaging_constant, batches}; observer cases
observe `<c>.batch<k>` F32 [rows, cols] (k = 0..batches-1; one for min/max observers) and
quantize x with the result. Every observer is PyTorch's own (torch.ao.quantization): MinMaxObserver,
PerChannelMinMaxObserver, MovingAverage(PerChannel)MinMaxObserver; per-group weights are
per-channel over the (rows * cols / group, group) reshape (torchao's per-group); per-token
activations use torchao's choose_qparams_per_token_asymmetric, re-implemented here from its
published formula (torchao is not a Debian package).
"""

import argparse
import json
import os
import sys

import torch
from torch.ao.quantization import observer as obs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_hf_dirs import write_safetensors  # noqa: E402  (the official layout)

EPS = torch.finfo(torch.float32).eps


def tricky(gen, rows, cols, spread):
    """Random values with some rows full of rounding ties and clamp-edge values."""
    x = torch.randn(rows, cols, generator=gen) * spread
    x[0, 0] = spread * 4  # the range
    x[rows - 1, cols - 1] = -spread * 3
    return x


def plant_edges(x, scale, zero, qmin, qmax, per_row):
    """Overwrite a few elements with (k + 1/2) * s ties and values half a step beyond the grid."""
    rows, cols = x.shape
    for r in range(rows):
        s = float(scale[r if per_row else 0])
        z = float(zero[r if per_row else 0])
        picks = [(0.5, 1), (2.5, 2), (-3.5, 3), (qmax - z + 0.5, 4), (qmin - z - 0.5, 5),
                 (qmax - z + 0.49, 6), (qmin - z - 0.51, 7), (qmax - z, 8)]
        for k, c in picks:
            if c < cols:
                x[r, c] = torch.tensor(k, dtype=torch.float32) * torch.tensor(s)
    return x


def fake_quant(x, scale, zero, qmin, qmax, per_channel):
    x = x.clone().requires_grad_(True)
    if per_channel:
        y = torch.fake_quantize_per_channel_affine(x, scale, zero.to(torch.int32), 0, qmin, qmax)
    else:
        y = torch.fake_quantize_per_tensor_affine(x, float(scale[0]), int(zero[0]), qmin, qmax)
    y.sum().backward()
    return y.detach(), x.grad.detach()


def torch_observer(kind, per_channel, symmetric, qmin, qmax, c):
    qscheme = {(False, True): torch.per_tensor_symmetric, (False, False): torch.per_tensor_affine,
               (True, True): torch.per_channel_symmetric,
               (True, False): torch.per_channel_affine}[(per_channel, symmetric)]
    kw = dict(dtype=torch.qint8, qscheme=qscheme, quant_min=qmin, quant_max=qmax)
    if per_channel:
        kw["ch_axis"] = 0
    if kind == "moving_average":
        kw["averaging_constant"] = c
        cls = obs.MovingAveragePerChannelMinMaxObserver if per_channel else \
            obs.MovingAverageMinMaxObserver
    else:
        cls = obs.PerChannelMinMaxObserver if per_channel else obs.MinMaxObserver
    return cls(**kw)


def per_token_qparams(x, qmin, qmax):
    """torchao.quantization.quant_primitives.choose_qparams_per_token_asymmetric, from its formula."""
    min_val = torch.amin(x, dim=-1, keepdim=True)
    max_val = torch.amax(x, dim=-1, keepdim=True)
    min_neg = torch.min(min_val, torch.zeros_like(min_val))
    max_pos = torch.max(max_val, torch.zeros_like(max_val))
    scale = ((max_pos - min_neg) / float(qmax - qmin)).clamp(min=EPS)
    dmin, dmax = min_neg / scale, max_pos / scale
    zero = torch.where((qmin + dmin) + (qmax + dmax) > 0, qmin - dmin, qmax - dmax)
    zero = torch.clamp(zero, qmin, qmax).round()
    return scale.reshape(-1), zero.reshape(-1)


def make_case(gen, tensors, c):
    rows, cols, qmin, qmax = c["rows"], c["cols"], c["qmin"], c["qmax"]
    gran, group, name = c["granularity"], c["group"], c["name"]
    zero_range = c.get("zero_range", False)
    x = torch.zeros(rows, cols) if zero_range else tricky(gen, rows, cols, c.get("spread", 1.0))
    if gran == "token":
        scale, zero = per_token_qparams(x, qmin, qmax)
        shaped, per_channel = x, True
    else:
        # The observer sees the batches; x, with ties and edge values planted for the grid it
        # gave, is only quantized.
        shaped = x.reshape(-1, group) if gran == "group" else x
        per_channel = gran in ("channel", "group")
        o = torch_observer(c["observer"], per_channel, c["rule"] == "symmetric", qmin, qmax,
                           c["averaging_constant"])
        for k in range(c["batches"]):
            b = torch.zeros(rows, cols) if zero_range else tricky(gen, rows, cols, 1.0 + 0.5 * k)
            tensors[f"{name}.batch{k}"] = b
            o(b.reshape(shaped.shape))
        scale, zero = o.calculate_qparams()
        scale, zero = scale.reshape(-1).to(torch.float32), zero.reshape(-1).to(torch.float32)
        if not zero_range and gran != "group":
            x = plant_edges(x, scale, zero, qmin, qmax, per_channel)
            shaped = x
    y, mask = fake_quant(shaped, scale, zero, qmin, qmax, per_channel)
    tensors[f"{name}.x"] = x.contiguous()
    tensors[f"{name}.scale"] = scale.contiguous()
    tensors[f"{name}.zero"] = zero.contiguous()
    tensors[f"{name}.y"] = y.reshape(rows, cols).contiguous()
    tensors[f"{name}.mask"] = mask.reshape(rows, cols).contiguous()


CASES = [
    dict(name="w8_tensor_sym", rows=5, cols=24, qmin=-127, qmax=127, rule="symmetric",
         granularity="tensor", group=24, observer="minmax", averaging_constant=0.01, batches=1),
    dict(name="w4_channel_sym", rows=6, cols=20, qmin=-7, qmax=7, rule="symmetric",
         granularity="channel", group=20, observer="minmax", averaging_constant=0.01, batches=1),
    dict(name="w8_channel_sym", rows=7, cols=33, qmin=-127, qmax=127, rule="symmetric",
         granularity="channel", group=33, observer="minmax", averaging_constant=0.01, batches=1,
         spread=0.05),
    dict(name="w4_group_sym", rows=4, cols=64, qmin=-7, qmax=7, rule="symmetric",
         granularity="group", group=16, observer="minmax", averaging_constant=0.01, batches=1),
    dict(name="a8_tensor_affine", rows=9, cols=17, qmin=-128, qmax=127, rule="affine",
         granularity="tensor", group=17, observer="minmax", averaging_constant=0.01, batches=1),
    dict(name="a8_tensor_moving", rows=8, cols=12, qmin=-128, qmax=127, rule="affine",
         granularity="tensor", group=12, observer="moving_average", averaging_constant=0.1,
         batches=3),
    dict(name="w8_channel_moving", rows=5, cols=16, qmin=-127, qmax=127, rule="symmetric",
         granularity="channel", group=16, observer="moving_average", averaging_constant=0.25,
         batches=2),
    dict(name="a8_token", rows=10, cols=21, qmin=-128, qmax=127, rule="per_token",
         granularity="token", group=21, observer="none", averaging_constant=0.01, batches=0),
    dict(name="zero_range_affine", rows=3, cols=8, qmin=-128, qmax=127, rule="affine",
         granularity="tensor", group=8, observer="minmax", averaging_constant=0.01, batches=1,
         zero_range=True),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden/qat.safetensors")
    args = ap.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20261201)
    tensors = {}
    for c in CASES:
        make_case(gen, tensors, c)
    meta = {"cases": json.dumps(CASES, sort_keys=True),
            "generator": f"tools/gen_qat_goldens.py, torch {torch.__version__}"}
    write_safetensors(args.out, tensors, meta)
    print(f"wrote {args.out}: {len(CASES)} cases, {len(tensors)} tensors")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""NF4 (bitsandbytes 4-bit NormalFloat, blockwise, optional double quantization) goldens.

Run from the repository root with Debian's python3-torch (1.13 CPU; no bitsandbytes needed):

    /usr/bin/python3 tools/gen_nf4_goldens.py             # writes tests/golden/nf4.safetensors
    /usr/bin/python3 tools/gen_nf4_goldens.py --out PATH  # somewhere else

Re-running produces identical bytes (fixed torch.Generator seeds, one thread, sorted JSON).

The algorithm, implemented here from its specification (not from ETE's code):
  quantize   flatten row-major to n f32 values, blocks of `blocksize` (the last may be partial);
             absmax = max |x|; inv = f32(1 / absmax); s = clamp(f32(x * inv), -1, 1); the code is
             the number of NF4 thresholds (bitsandbytes' decision-tree constants, the
             code midpoints, each decimal rounded once to f32) strictly below s (a value exactly on a midpoint takes the
             LOWER code); an all-zero block stores absmax 0 and code 7 (0.0) everywhere. Two codes
             a byte: element 2k in the high nibble, 2k+1 in the low one, an odd tail's low nibble 0.
  dequantize f32(code[c] * absmax).
  double     offset = f32(mean(absmax) in f64); r = f32(absmax - offset); r is quantized in nested
  quant      blocks of 256 with bitsandbytes' signed 8-bit dynamic map (nearest value, f64 distance,
             exact ties to the lower index; a zero nested block gets the index of 0.0);
             absmax_dq = f32(f32(map[q] * nested_absmax) + offset); dequant uses absmax_dq.
Every case is computed twice, vectorised in torch and element by element in plain Python with
explicit IEEE f32 rounding, and the two must agree bit for bit.

The file holds `nf4_code` F32 [16], `dynamic_map` F32 [256] and, per case <c>: `<c>.input` F32
[rows, cols], `<c>.packed` U8 [ceil(n/2)], `<c>.absmax` F32 [nb], `<c>.dequant` F32 [rows, cols];
double-quant cases add `<c>.absmax_q` U8 [nb], `<c>.nested_absmax` F32 [ceil(nb/256)], `<c>.offset`
F32 [1], `<c>.absmax_dq` F32 [nb]. `__metadata__` has "cases" (a JSON list of {name, rows, cols,
blocksize, double_quant}) and "generator".
"""

import argparse
import hashlib
import json
import math
from fractions import Fraction
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_hf_dirs import write_safetensors  # noqa: E402  (the official layout)


NF4_CODE = [
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
]
CODE = torch.tensor(NF4_CODE, dtype=torch.float32)
# The thresholds: bitsandbytes' decision-tree constants, float literals in its CUDA/C++ kernels,
# so each decimal string is rounded ONCE, straight to the nearest f32 (exact rational arithmetic).
# Going decimal -> f64 -> f32 (what torch.tensor(list) does) rounds twice and lands one ulp off
# for the first and the last threshold.
BNB_THRESHOLDS = [
    "-0.8480964004993439", "-0.6106329262256622", "-0.4599952697753906", "-0.33967943489551544",
    "-0.23460740596055984", "-0.13791173323988914", "-0.045525018125772476", "0.03979014977812767",
    "0.1202552504837513", "0.2035212516784668", "0.2920137718319893", "0.3893125355243683",
    "0.5016634166240692", "0.6427869200706482", "0.8614784181118011",
]


def f32_nearest(decimal):
    """The f32 nearest to the exact value of a decimal string (ties to an even mantissa)."""
    exact = Fraction(decimal)
    guess = struct.unpack("<f", struct.pack("<f", float(exact)))[0]
    cands = [guess, float(torch.nextafter(torch.tensor(guess), torch.tensor(math.inf))),
             float(torch.nextafter(torch.tensor(guess), torch.tensor(-math.inf)))]
    def key(c):
        bits = struct.unpack("<I", struct.pack("<f", c))[0]
        return (abs(Fraction(c) - exact), bits & 1)
    return min(cands, key=key)


MID = torch.tensor([f32_nearest(t) for t in BNB_THRESHOLDS], dtype=torch.float32)
for _i in range(15):  # each threshold lies strictly between its two codes
    assert CODE[_i] < MID[_i] < CODE[_i + 1]
ZERO_CODE = 7
NESTED = 256  # double-quant nested block size


def create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    """bitsandbytes.functional.create_dynamic_map, verbatim in its arithmetic (torch f32)."""
    data = []
    non_sign_bits = total_bits - (1 if signed else 0)
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    assert additional_items == 0  # the (7, 8) map: linspace sizes 2**i + 1
    for i in range(max_exponent_bits):
        fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                             else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        boundaries = torch.linspace(0.1, 1, fraction_items)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    data.append(0)
    data.append(1.0)
    data.sort()
    return torch.tensor(data, dtype=torch.float32)


DMAP = create_dynamic_map()
DMAP_ZERO = int((DMAP == 0).nonzero()[0, 0])


# ---------------------------------------------------------------------------------------------
# vectorised torch implementation


def quantize_nf4(x, bs):
    flat = x.reshape(-1).to(torch.float32)
    n = flat.numel()
    nb = -(-n // bs)
    blocks = torch.zeros(nb * bs, dtype=torch.float32)
    blocks[:n] = flat  # zero padding never raises a block's absmax
    blocks = blocks.view(nb, bs)
    absmax = blocks.abs().amax(dim=1)
    nz = absmax > 0
    inv = torch.zeros(nb, dtype=torch.float32)
    inv[nz] = torch.div(torch.ones(int(nz.sum()), dtype=torch.float32), absmax[nz])
    s = (blocks * inv[:, None]).clamp(-1.0, 1.0)
    codes = (s.unsqueeze(-1) > MID).sum(dim=-1)
    codes[~nz] = ZERO_CODE
    codes = codes.reshape(-1)[:n]
    return codes, absmax


def pack(codes):
    c = codes.to(torch.uint8)
    if c.numel() % 2:
        c = torch.cat([c, torch.zeros(1, dtype=torch.uint8)])
    return (c[0::2] << 4) | c[1::2]


def unpack(packed, n):
    return torch.stack([packed >> 4, packed & 15], dim=1).reshape(-1)[:n].long()


def dequant(codes, absmax, bs):
    n = codes.numel()
    return CODE[codes] * absmax.repeat_interleave(bs)[:n]


def double_quant(absmax):
    nb = absmax.numel()
    offset = torch.tensor([math.fsum(absmax.tolist()) / nb], dtype=torch.float32)
    # the spec says "mean in float64": a plain f64 mean must round to the same f32
    assert torch.equal(absmax.double().mean().float().reshape(1), offset)
    r = absmax - offset
    nnb = -(-nb // NESTED)
    rb = torch.zeros(nnb * NESTED, dtype=torch.float32)
    rb[:nb] = r
    rb = rb.view(nnb, NESTED)
    nabs = rb.abs().amax(dim=1)
    nz = nabs > 0
    inv = torch.zeros(nnb, dtype=torch.float32)
    inv[nz] = torch.div(torch.ones(int(nz.sum()), dtype=torch.float32), nabs[nz])
    s = (rb * inv[:, None]).clamp(-1.0, 1.0).reshape(-1)[:nb]
    dist = (s.double()[:, None] - DMAP.double()[None, :]).abs()
    best = dist.min(dim=1, keepdim=True).values
    idx = torch.arange(256).expand(nb, 256)
    q = torch.where(dist == best, idx, torch.full_like(idx, 256)).min(dim=1).values  # lowest tie
    blk = torch.arange(nb) // NESTED
    q[~nz[blk]] = DMAP_ZERO
    absmax_dq = DMAP[q] * nabs[blk] + offset
    return q, nabs, offset, absmax_dq


# ---------------------------------------------------------------------------------------------
# scalar cross-check: plain Python floats (f64) with explicit rounding to f32. A single +, *, /
# of two f32 values done in f64 and rounded to f32 is the correctly rounded f32 result.


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def scalar_reference(xs, bs, dq):
    mids, code, dmap = MID.tolist(), CODE.tolist(), DMAP.tolist()
    n = len(xs)
    nb = -(-n // bs)
    codes, absmax = [], []
    for b in range(nb):
        blk = xs[b * bs:(b + 1) * bs]
        a = max(abs(v) for v in blk)
        absmax.append(a)
        if a == 0:
            codes += [ZERO_CODE] * len(blk)
            continue
        inv = f32(1.0 / a)
        for v in blk:
            s = min(1.0, max(-1.0, f32(v * inv)))
            codes.append(sum(1 for m in mids if s > m))
    out = {"codes": codes, "absmax": absmax}
    scale = absmax
    if dq:
        offset = f32(math.fsum(absmax) / nb)
        r = [f32(a - offset) for a in absmax]
        q, nabs = [], []
        for b in range(-(-nb // NESTED)):
            blk = r[b * NESTED:(b + 1) * NESTED]
            na = max(abs(v) for v in blk)
            nabs.append(na)
            if na == 0:
                q += [DMAP_ZERO] * len(blk)
                continue
            inv = f32(1.0 / na)
            for v in blk:
                s = min(1.0, max(-1.0, f32(v * inv)))
                d = [abs(s - m) for m in dmap]
                q.append(d.index(min(d)))  # first (lowest) index on an exact tie
        scale = [f32(f32(dmap[q[i]] * nabs[i // NESTED]) + offset) for i in range(nb)]
        out.update(q=q, nabs=nabs, offset=offset, absmax_dq=scale)
    out["dequant"] = [f32(code[c] * scale[i // bs]) for i, c in enumerate(codes)]
    return out


# ---------------------------------------------------------------------------------------------
# cases


def scaled_normal(rows, cols, seed, lo=0.01, hi=3.0):
    """Random normal with a per-row scale drawn log-uniformly from [lo, hi]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g, dtype=torch.float32)
    u = torch.rand(rows, 1, generator=g, dtype=torch.float32)
    scale = torch.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
    return x * scale


def ties_input():
    """5 blocks of 64; absmax 1 or 2 (exact reciprocal), each holding every midpoint, its f32
    neighbours above and below, all 16 code values, -0.0, +-0.5 (all times the absmax)."""
    up = torch.nextafter(MID, torch.full_like(MID, math.inf))
    down = torch.nextafter(MID, torch.full_like(MID, -math.inf))
    base = torch.cat([MID, up, down, CODE, torch.tensor([-0.0, 0.5, -0.5])])
    assert base.numel() == 64
    neg = base.clone()  # the negative-absmax variant: +1.0 replaced by the f32 just below it
    neg[45 + 15] = torch.nextafter(torch.tensor(1.0), torch.tensor(0.0))
    g = torch.Generator().manual_seed(1001)
    rows = [base * 1.0,
            (base * 2.0)[torch.randperm(64, generator=g)],
            base.roll(1),  # with row 0: every midpoint in both the high and the low nibble
            (neg * 2.0)[torch.randperm(64, generator=g)],
            neg[torch.randperm(64, generator=g)]]
    return torch.stack(rows)


def check_ties(x, codes, absmax):
    assert absmax.tolist() == [1.0, 2.0, 1.0, 2.0, 1.0]
    c = codes.view(5, 64)
    for i in range(15):  # rows 0 and 2 put every midpoint at both nibble parities
        par = {int((x[r] == MID[i]).nonzero()) % 2 for r in (0, 2)}
        assert par == {0, 1}
    for row in range(5):
        a = absmax[row]
        for i in range(15):
            at = (x[row] == MID[i] * a).nonzero().view(-1)
            above = (x[row] == torch.nextafter(MID[i], torch.tensor(math.inf)) * a).nonzero()
            below = (x[row] == torch.nextafter(MID[i], torch.tensor(-math.inf)) * a).nonzero()
            assert at.numel() == 1 and above.numel() == 1 and below.numel() == 1
            assert int(c[row, at]) == i, "an exact midpoint must take the LOWER code"
            assert int(c[row, above.view(-1)]) == i + 1 and int(c[row, below.view(-1)]) == i
        amax_pos = (x[row] == a).nonzero().view(-1)
        amax_neg = (x[row] == -a).nonzero().view(-1)
        assert amax_neg.numel() == 1 and int(c[row, amax_neg]) == 0
        if row >= 3:  # negative-absmax blocks: the largest |x| is negative
            assert amax_pos.numel() == 0 and x[row].max() < a
        else:
            assert amax_pos.numel() == 1 and int(c[row, amax_pos]) == 15


# name, rows, cols, blocksize, double_quant, input
def cases():
    zb = scaled_normal(3, 32, 1003, 0.5, 2.0)
    zb[1] = 0.0
    dz = torch.randn(4, 64 * 5, generator=torch.Generator().manual_seed(1010))
    dz[1, 2 * 64:3 * 64] = 0.0  # block 7 of 20
    return [
        ("ties", 5, 64, 64, False, ties_input()),
        ("odd", 1, 101, 64, False,
         torch.randn(1, 101, generator=torch.Generator().manual_seed(1002))),
        ("zero_block", 3, 32, 32, False, zb),
        ("bs32", 7, 300, 32, False, scaled_normal(7, 300, 1004)),
        ("bs128", 16, 256, 128, False, scaled_normal(16, 256, 1005)),
        ("bs256", 5, 1000, 256, False, scaled_normal(5, 1000, 1006)),
        ("bs1024", 4, 1024, 1024, False, scaled_normal(4, 1024, 1007)),
        ("bs4096", 3, 3000, 4096, False, scaled_normal(3, 3000, 1008)),
        ("dq64", 300, 130, 64, True, scaled_normal(300, 130, 1009)),
        ("dq_zero", 4, 64 * 5, 64, True, dz),
        ("dq256", 16, 1100, 256, True, scaled_normal(16, 1100, 1011)),
    ]


def build():
    tensors = {"nf4_code": CODE.clone(), "dynamic_map": DMAP.clone()}
    meta_cases = []
    for name, rows, cols, bs, dq, x in cases():
        x = x.to(torch.float32).contiguous()
        assert list(x.shape) == [rows, cols] and torch.isfinite(x).all()
        n = x.numel()
        codes, absmax = quantize_nf4(x, bs)
        nb = absmax.numel()
        packed = pack(codes)
        assert packed.numel() == (n + 1) // 2 and torch.equal(unpack(packed, n), codes)
        ref = scalar_reference(x.reshape(-1).tolist(), bs, dq)
        assert codes.tolist() == ref["codes"] and absmax.tolist() == ref["absmax"]
        t = {"input": x, "packed": packed, "absmax": absmax}
        extra = ""
        if dq:
            q, nabs, offset, absmax_dq = double_quant(absmax)
            assert q.tolist() == ref["q"] and nabs.tolist() == ref["nabs"]
            assert offset.item() == ref["offset"] and absmax_dq.tolist() == ref["absmax_dq"]
            deq = dequant(codes, absmax_dq, bs)
            t.update(absmax_q=q.to(torch.uint8), nested_absmax=nabs, offset=offset,
                     absmax_dq=absmax_dq)
            extra = (f", nested {nabs.numel()} (last {nb - (nabs.numel() - 1) * NESTED}),"
                     f" offset {offset.item():.6g},"
                     f" max|absmax_dq-absmax| {(absmax_dq - absmax).abs().max().item():.3g}")
        else:
            deq = dequant(codes, absmax, bs)
        assert deq.tolist() == ref["dequant"]
        t["dequant"] = deq.view(rows, cols)

        if name == "ties":
            check_ties(x, codes, absmax)
        if name == "odd":
            assert n % 2 == 1 and n % bs == 37 and int(packed[-1]) & 15 == 0
        if name == "zero_block":
            assert absmax[1] == 0 and (codes.view(3, 32)[1] == ZERO_CODE).all()
            assert (t["dequant"][1] == 0).all() and not torch.signbit(t["dequant"][1]).any()
        if name == "dq_zero":
            assert absmax[7] == 0 and (absmax > 0).sum() == nb - 1
            z = deq[7 * 64:8 * 64]
            assert (codes[7 * 64:8 * 64] == ZERO_CODE).all() and (z == 0).all()
            assert not torch.signbit(z).any(), "the zero block's dequant should be +0.0"
        if name == "dq64":
            assert nb == 610 and nabs.numel() == 3

        for k, v in t.items():
            tensors[f"{name}.{k}"] = v.contiguous()
        meta_cases.append({"name": name, "rows": rows, "cols": cols, "blocksize": bs,
                           "double_quant": dq})
        err = (deq - x.reshape(-1)).abs().max().item()
        last = n - (nb - 1) * bs
        print(f"{name:10s} [{rows}, {cols}] n={n} bs={bs} blocks={nb} (last {last})"
              f" packed={packed.numel()}B max|err|={err:.3g}{extra}")
    metadata = {"cases": json.dumps(meta_cases), "generator": "tools/gen_nf4_goldens.py"}
    return tensors, metadata


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(root, "tests", "golden", "nf4.safetensors"))
    args = ap.parse_args()
    assert sys.byteorder == "little", "safetensors is little-endian"
    torch.set_num_threads(1)  # bitwise-reproducible reductions
    assert DMAP.numel() == 256 and DMAP_ZERO == 127 and DMAP[-1] == 1.0
    assert torch.equal(DMAP, DMAP.sort().values) and DMAP.unique().numel() == 256
    tensors, metadata = build()
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(args.out, tensors, metadata)
    with open(args.out, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    print(f"{args.out}: {len(tensors)} tensors, {os.path.getsize(args.out)} bytes, sha256 {digest}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""A tiny Hugging Face Llama directory with bitsandbytes 4-bit NF4 (double-quantized) weights.

Run from the repository root with Debian's python3-torch (1.13 CPU; no bitsandbytes or
`transformers` needed):

    /usr/bin/python3 tools/gen_bnb_dir.py            # writes tests/golden/hf/llama_bnb_nf4/
    /usr/bin/python3 tools/gen_bnb_dir.py --out DIR  # somewhere else

Re-running produces identical bytes (fixed torch.Generator seed, one thread, sorted JSON).

The layout is implemented here from its specification (what bitsandbytes' Params4bit /
QuantState.as_dict(packed=True) makes save_pretrained write), not from ETE's code; the NF4 and
double-quant arithmetic comes from tools/gen_nf4_goldens.py, the model, its parameters and the
float64 forward from tools/gen_model_goldens.py, the safetensors writer from tools/gen_hf_dirs.py.

The directory holds:
  config.json        LlamaForCausalLM (V=40, C=64, H=4, KV=2, F=100, L=2, untied lm_head),
                     torch_dtype float32, and a quantization_config for bitsandbytes nf4 with
                     double quant (compute dtype float32).
  model.safetensors  every decoder linear weight P.weight ([out, in], q/k/v/o/gate/up/down_proj)
                     NF4-quantized, blocksize 64, row-major, double-quantized (nested blocks 256),
                     stored as
                       P.weight                                 U8 [ceil(n/2), 1] packed codes
                                                                (element 2k in the high nibble)
                       P.weight.absmax                          U8 [blocks] 8-bit absmax codes
                       P.weight.quant_map                       F32 [16] the NF4 code table
                       P.weight.nested_absmax                   F32 [ceil(blocks/256)]
                       P.weight.nested_quant_map                F32 [256] signed dynamic map
                       P.weight.quant_state.bitsandbytes__nf4   U8 [len] UTF-8 JSON of
                                                                {quant_type, blocksize, dtype,
                                                                shape, nested_blocksize,
                                                                nested_dtype, nested_offset}
                     embed_tokens, the norms and lm_head stay F32 under their HF names.
                     __metadata__ {"format": "pt"}.
  expected.safetensors (a test artifact, not part of HF; __metadata__ {"generator": ...})
                     dequant.P.weight F32 [out, in] the double-quantized reconstruction of each
                     quantized weight; inputs I32 [2, 7]; logits F32 [2, 7, 40] from the
                     plain-torch Llama forward in float64 on the dequantized weights (all other
                     parameters their f32 values), so the C++ test measures only ETE's f32 rounding.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_goldens as gmg  # noqa: E402  (config, parameter table, forward)
import gen_nf4_goldens as nf4  # noqa: E402  (NF4 quantization, double quant, maps)
from gen_hf_dirs import write_json, write_safetensors  # noqa: E402  (the official layout)

B, T = 2, 7
SEED = 401
BLOCKSIZE = 64
NESTED_BLOCKSIZE = 256
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
QUANT_CONFIG = {
    "quant_method": "bitsandbytes",
    "load_in_4bit": True,
    "load_in_8bit": False,
    "bnb_4bit_quant_type": "nf4",
    "bnb_4bit_use_double_quant": True,
    "bnb_4bit_compute_dtype": "float32",
}


def is_quantized(name):
    return name.startswith("model.layers.") and any(
        name.endswith(f".{p}.weight") for p in LINEARS)


def quantize_weight(name, w):
    """The save_pretrained entries of one Params4bit weight, and its f32 reconstruction."""
    out_f, in_f = w.shape
    n = w.numel()
    codes, absmax = nf4.quantize_nf4(w, BLOCKSIZE)
    nb = absmax.numel()
    q, nabs, offset, absmax_dq = nf4.double_quant(absmax)
    packed = nf4.pack(codes)
    assert packed.numel() == (n + 1) // 2 and torch.equal(nf4.unpack(packed, n), codes)
    assert int(q.min()) >= 0 and int(q.max()) <= 255
    assert nabs.numel() == -(-nb // NESTED_BLOCKSIZE) and offset.numel() == 1
    state = {"quant_type": "nf4", "blocksize": BLOCKSIZE, "dtype": "float32",
             "shape": [out_f, in_f], "nested_blocksize": NESTED_BLOCKSIZE,
             "nested_dtype": "float32", "nested_offset": offset.item()}
    state_bytes = json.dumps(state).encode("utf-8")
    entries = {
        name: packed.view(-1, 1).contiguous(),
        name + ".absmax": q.to(torch.uint8),
        name + ".quant_map": nf4.CODE.clone(),
        name + ".nested_absmax": nabs.to(torch.float32),
        name + ".nested_quant_map": nf4.DMAP.clone(),
        name + ".quant_state.bitsandbytes__nf4": torch.tensor(list(state_bytes),
                                                              dtype=torch.uint8),
    }
    deq = nf4.dequant(codes, absmax_dq, BLOCKSIZE).view(out_f, in_f).contiguous()
    assert deq.dtype == torch.float32
    return entries, deq


def build():
    cfg = gmg.llama_config(V=40, C=64, H=4, KV=2, F_=100, L=2)
    table = gmg.llama_param_table(cfg)
    gen = torch.Generator().manual_seed(SEED)
    P32 = gmg.init_params(table, gen)
    inputs = torch.randint(0, cfg["vocab_size"], (B, T), generator=gen, dtype=torch.int64)

    model, expected, P64 = {}, {}, {}
    for name, shape, _ in table:
        w = P32[name]
        assert tuple(w.shape) == tuple(shape) and w.dtype == torch.float32
        if is_quantized(name):
            entries, deq = quantize_weight(name, w)
            model.update(entries)
            expected["dequant." + name] = deq
            P64[name] = deq.double()
        else:
            model[name] = w.contiguous()
            P64[name] = w.double()
    assert len(expected) == len(LINEARS) * cfg["num_hidden_layers"]
    logits = gmg.llama_forward(cfg, P64, inputs)
    assert logits.shape == (B, T, cfg["vocab_size"]) and torch.isfinite(logits).all()
    expected["inputs"] = inputs.to(torch.int32)
    expected["logits"] = logits.float()
    cfg = dict(cfg, torch_dtype="float32", quantization_config=QUANT_CONFIG)
    return cfg, model, expected


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(root, "tests", "golden", "hf", "llama_bnb_nf4"))
    args = ap.parse_args()
    assert sys.byteorder == "little", "safetensors is little-endian"
    torch.set_num_threads(1)  # bitwise-reproducible reductions
    cfg, model, expected = build()
    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    write_json(os.path.join(out, "config.json"), cfg)
    write_safetensors(os.path.join(out, "model.safetensors"), model, {"format": "pt"})
    write_safetensors(os.path.join(out, "expected.safetensors"), expected,
                      {"generator": "tools/gen_bnb_dir.py"})
    total = 0
    for f in sorted(os.listdir(out)):
        path = os.path.join(out, f)
        with open(path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        total += os.path.getsize(path)
        print(f"{path}: {os.path.getsize(path)} bytes, sha256 {digest}")
    print(f"{out}: {len(model)} model tensors, {len(expected)} expected tensors, {total} bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Tiny Hugging Face model directories for tests/io/hf_dirs_test.cpp.

Run from the repository root with Debian's python3-torch (1.13 CPU; no `transformers` needed):

    /usr/bin/python3 tools/gen_hf_dirs.py            # writes tests/golden/hf/<variant>/
    /usr/bin/python3 tools/gen_hf_dirs.py --out DIR  # somewhere else

Re-running produces identical bytes (fixed torch.Generator seeds, one thread, sorted JSON).

Each directory is laid out the way save_pretrained writes it, including the quirks ETE must accept:
  gpt2_prefixed      GPT2LMHeadModel keys with the `transformer.` prefix, the old causal-mask
                     buffers h.i.attn.bias [1, 1, P, P] and h.i.attn.masked_bias [], Conv1D
                     weights (in, out), F32, config.json with n_inner null.
  llama_bf16         LlamaForCausalLM with GQA and an untied lm_head, stored in BF16
                     (torch_dtype bfloat16).
  llama_bf16_sharded the same weights split into model-0000k-of-00003.safetensors plus
                     model.safetensors.index.json.
Every directory also holds expected.safetensors (a test artifact, not part of HF): `inputs` I32
[B, T] and `logits` F32 [B, T, V] from the plain-torch forwards of tools/gen_model_goldens.py run in
float64 on the stored weights (BF16 weights upcast exactly), so the C++ test measures only ETE's f32
rounding.
"""

import argparse
import json
import os
import shutil
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_goldens as gmg  # noqa: E402  (forwards, configs, parameter tables)

B, T = 2, 9
DTYPES = {torch.float32: ("F32", 4), torch.int32: ("I32", 4), torch.bfloat16: ("BF16", 2),
          torch.uint8: ("U8", 1)}


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: reinterpret the same 2-byte pattern
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write_safetensors(path, tensors, metadata):
    """The official layout: u64 LE header length, JSON padded with spaces to a multiple of 8, data
    ordered by dtype alignment then name."""
    order = sorted(tensors, key=lambda n: (-DTYPES[tensors[n].dtype][1], n))
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for n in order:
        data = tensor_bytes(tensors[n])
        header[n] = {"dtype": DTYPES[tensors[n].dtype][0], "shape": list(tensors[n].shape),
                     "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def write_json(path, obj):
    with open(path, "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def nbytes(t):
    return t.numel() * t.element_size()


def shard(names, tensors, max_bytes):
    """HF's split: tensors in order, a new shard when the next one would exceed max_bytes."""
    shards, size = [[]], 0
    for n in names:
        if shards[-1] and size + nbytes(tensors[n]) > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(n)
        size += nbytes(tensors[n])
    return shards


def write_dir(out, cfg, tensors, order, inputs, logits, num_shards=1):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    write_json(os.path.join(out, "config.json"), cfg)
    gen = {"_from_model_config": True}
    for k in ("bos_token_id", "eos_token_id"):
        if k in cfg:
            gen[k] = cfg[k]
    write_json(os.path.join(out, "generation_config.json"), gen)
    meta = {"format": "pt"}
    if num_shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), tensors, meta)
    else:
        total = sum(nbytes(t) for t in tensors.values())
        limit = total // num_shards
        while len(shard(order, tensors, limit)) > num_shards:  # smallest limit giving num_shards
            limit += 64
        shards = shard(order, tensors, limit)
        weight_map = {}
        for k, names in enumerate(shards):
            file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
            write_safetensors(os.path.join(out, file), {n: tensors[n] for n in names}, meta)
            weight_map.update({n: file for n in names})
        write_json(os.path.join(out, "model.safetensors.index.json"),
                   {"metadata": {"total_size": total}, "weight_map": weight_map})
    write_safetensors(os.path.join(out, "expected.safetensors"),
                      {"inputs": inputs.to(torch.int32), "logits": logits.float()}, None)


def gpt2_dir():
    cfg = gmg.gpt2_config(V=101, C=32, H=4, L=2, n_positions=16)
    table = gmg.gpt2_param_table(cfg)
    gen = torch.Generator().manual_seed(2001)
    P32 = gmg.init_params(table, gen)
    inputs = torch.randint(0, cfg["vocab_size"], (B, T), generator=gen, dtype=torch.int64)
    logits = gmg.gpt2_forward(cfg, {n: p.double() for n, p in P32.items()}, inputs)
    Pn = cfg["n_positions"]
    tensors, order = {}, []
    for n, _, _ in table:
        tensors["transformer." + n] = P32[n]
        order.append("transformer." + n)
    for i in range(cfg["n_layer"]):  # old checkpoints' buffers: causal mask and its fill value
        tensors[f"transformer.h.{i}.attn.bias"] = torch.ones(Pn, Pn).tril().view(1, 1, Pn, Pn)
        tensors[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    cfg = dict(cfg, n_inner=None, bos_token_id=100, eos_token_id=100)  # HF's default n_inner
    return cfg, tensors, order, inputs, logits


def llama_dir():
    cfg = gmg.llama_config(V=97, C=32, H=4, KV=2, F_=56, L=2, tie=False)
    table = gmg.llama_param_table(cfg)
    gen = torch.Generator().manual_seed(2002)
    P16 = {n: p.to(torch.bfloat16) for n, p in gmg.init_params(table, gen).items()}
    inputs = torch.randint(0, cfg["vocab_size"], (B, T), generator=gen, dtype=torch.int64)
    logits = gmg.llama_forward(cfg, {n: p.double() for n, p in P16.items()}, inputs)
    cfg = dict(cfg, torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2)
    return cfg, P16, [n for n, _, _ in table], inputs, logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(root, "tests", "golden", "hf"))
    args = ap.parse_args()
    assert sys.byteorder == "little", "safetensors is little-endian"
    torch.set_num_threads(1)  # bitwise-reproducible reductions
    llama = llama_dir()
    for name, args_, shards in [("gpt2_prefixed", gpt2_dir(), 1), ("llama_bf16", llama, 1),
                                ("llama_bf16_sharded", llama, 3)]:
        out = os.path.join(args.out, name)
        write_dir(out, *args_, num_shards=shards)
        files = sorted(os.listdir(out))
        size = sum(os.path.getsize(os.path.join(out, f)) for f in files)
        print(f"{out}: {len(files)} files, {size} bytes")


if __name__ == "__main__":
    main()

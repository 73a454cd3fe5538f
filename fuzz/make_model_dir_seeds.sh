#!/usr/bin/env bash
# fuzz/make_model_dir_seeds.sh ETE_BINARY — (re)writes fuzz/model_dir_seeds/ from files the ete
# binary itself writes for the tiny Llama model_dirs_fuzz.cpp reads them against (hidden 32,
# intermediate 32, one layer, 2 heads, 1 kv head, vocab 64): a LoRA adapter dir (q_proj, v_proj,
# r 2, with and without a rank/alpha pattern), the NF4 tensors of `ete quantize` (double quant on
# and off), and the quantization_config of `ete quantize --scheme w8a8` (per tensor and per token).
# Each seed is one input of the fuzz target (its first byte picks the reader; see the target).
set -euo pipefail
ete="$(realpath "${1:?usage: make_model_dir_seeds.sh ETE_BINARY}")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/fuzz/model_dir_seeds"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 -c "
import struct
ids = [(i * 7 + i // 3) % 64 for i in range(4096)]
open('toks.bin', 'wb').write(b'ETETOK01' + struct.pack('<IIQ', 2, 64, len(ids)) +
                             struct.pack('<%dH' % len(ids), *ids))
"
cat >tiny.toml <<TOML
[model]
arch = "llama"
vocab_size = 64
hidden_size = 32
intermediate_size = 32
num_layers = 1
num_heads = 2
num_kv_heads = 1
max_position_embeddings = 16
[train]
steps = 1
micro_batch = 2
seq_len = 8
eval_every = 0
[data]
train = "$work/toks.bin"
tokenizer = ""
val_fraction = 0.0
TOML
run() { "$ete" "$@" >/dev/null 2>&1 || { echo "failed: ete $*" >&2; exit 1; }; }
run train tiny.toml --out base
lora="--set model.init_from=base/final --set lora.enabled=true --set lora.targets=q_proj,v_proj"
run train tiny.toml --out lora $lora --set lora.r=2
run quantize --scheme nf4 --blocksize 32 --model base/final --out nf4
run quantize --scheme nf4 --blocksize 32 --double-quant 0 --model base/final --out nf4b
run quantize --scheme w8a8 --model base/final --calib toks.bin --calib-batches 1 --batch 1 \
    --seq 8 --out w8a8
run quantize --scheme w4a8 --model base/final --calib toks.bin --calib-batches 1 --batch 1 \
    --seq 8 --act-granularity token --weight-granularity group --group-size 16 --out w4a8
rm -rf "$out"
mkdir -p "$out"
python3 - "$out" <<'PY'
import json, struct, sys
out = sys.argv[1]

def entries(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: (v, b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}

def st_file(tensors):
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, (info, raw) in tensors.items():
        header[name] = {"dtype": info["dtype"], "shape": info["shape"],
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data

def adapter(name, cfg, st):
    open(f"{out}/{name}", "wb").write(b"\0" + struct.pack("<I", len(cfg)) + cfg + st)

d = "lora/final"
adapter("adapter", open(f"{d}/adapter_config.json", "rb").read(),
        open(f"{d}/adapter_model.safetensors", "rb").read())
# PEFT's patterns: q_proj at rank 1 (its A's first row, its B's first column), v_proj's own alpha.
cfg = json.load(open(f"{d}/adapter_config.json"))
cfg["rank_pattern"] = {"q_proj": 1}
cfg["alpha_pattern"] = {"layers.0.self_attn.v_proj": 8.0}
t = entries(f"{d}/adapter_model.safetensors")
for k, (info, raw) in list(t.items()):
    if ".q_proj." not in k:
        continue
    rows, cols = info["shape"]
    vals = struct.unpack(f"<{rows * cols}f", raw)
    if ".lora_A." in k:
        info, raw = dict(info, shape=[1, cols]), struct.pack(f"<{cols}f", *vals[:cols])
    else:
        info, raw = dict(info, shape=[rows, 1]), struct.pack(f"<{rows}f", *vals[::cols])
    t[k] = (info, raw)
adapter("adapter_patterns", json.dumps(cfg, indent=1).encode(), st_file(t))
for name, d in (("nf4_double_quant", "nf4"), ("nf4_plain", "nf4b")):
    t = entries(f"{d}/model.safetensors")
    keep = {k: v for k, v in t.items() if ".q_proj." in k or ".down_proj." in k}
    open(f"{out}/{name}", "wb").write(b"\1" + st_file(keep))
for name in ("w8a8", "w4a8"):
    q = json.load(open(f"{name}/config.json"))["quantization_config"]
    open(f"{out}/int8_{name}", "wb").write(b"\2" + json.dumps(q, indent=1).encode())
PY
ls -l "$out"

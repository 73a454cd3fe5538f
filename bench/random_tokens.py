#!/usr/bin/env python3
"""A token shard of seeded random ids for the benchmark scripts: random_tokens.py PATH N VOCAB.

docs/formats.md: "ETETOK01", u32 bytes per token (2: u16 ids), u32 vocab size, u64 count, ids.
The ids are random.Random(1) draws, so a script gets the same shard on every run.
"""
import random
import struct
import sys

path, n, v = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(1)
with open(path, "wb") as f:
    f.write(b"ETETOK01" + struct.pack("<IIQ", 2, v, n))
    f.write(struct.pack(f"<{n}H", *(rng.randrange(v) for _ in range(n))))

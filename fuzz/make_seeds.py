#!/usr/bin/env python3
"""fuzz/make_seeds.py — (re)writes the committed seed corpus in fuzz/seeds/.

valid_*: files SafetensorsFile::open accepts (F32/BF16/I64/U8/F16/F64, metadata, a scalar, a
zero-element tensor, a misaligned tensor). reject_*: one file per reject rule of the reader, each
valid except for that rule (mirrors tests/io/safetensors_test.cpp). crash_*: reproducers of bugs
the fuzzer found, kept so every run replays them first.
Usage: python3 fuzz/make_seeds.py [out_dir]   (default: fuzz/seeds next to this script)
"""
import json
import os
import struct
import sys


def st_file(header, data=b""):
    """Length prefix + header + data; `header` is a str (written as UTF-8) or raw bytes."""
    h = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(h)) + h + data


def entry(name, dtype, shape, offsets):
    return f'"{name}": {{"dtype": "{dtype}", "shape": {shape}, "data_offsets": {offsets}}}'


def valid_file(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes), laid out in the order given."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - (8 + len(text)) % 8) % 8)  # data buffer 8-aligned, like the writer
    return st_file(text, data)


def f32(*v):
    return struct.pack(f"<{len(v)}f", *v)


def bf16(*v):
    return b"".join(struct.pack("<f", x)[2:] for x in v)  # exact for these values


GOOD = entry("a", "F32", "[2]", "[0, 8]")
GOOD_DATA = bytes(8)


def valid_seeds():
    misaligned = "{" + entry("w", "F32", "[3]", "[0, 12]") + "}"
    misaligned += " " * ((1 - (8 + len(misaligned)) % 8) % 8)  # data at file offset 8k+1
    return {
        "valid_f32": valid_file([("w", "F32", [2, 3], f32(1, -2, 0.5, 3, 4.25, -0.0))]),
        "valid_bf16": valid_file([("b", "BF16", [4], bf16(1, -2, 0.5, 65536))]),
        "valid_i64": valid_file([("i", "I64", [3], struct.pack("<3q", -1, 0, 2**62))]),
        "valid_u8": valid_file([("u", "U8", [5], b"\x00\x01\x7f\x80\xff")]),
        "valid_f16_f64": valid_file([("d", "F64", [2], struct.pack("<2d", 1e300, -0.25)),
                                     ("h", "F16", [2], struct.pack("<2H", 0x3c00, 0x7c00))]),
        "valid_scalar": valid_file([("s", "F32", [], f32(3.5))]),
        "valid_zero_element": valid_file([("z", "F32", [0, 4], b""), ("u", "U8", [1], b"\x07")]),
        "valid_metadata": valid_file([("w", "BF16", [2], bf16(1, 2)), ("e", "I64", [0], b"")],
                                     {"format": "pt", "note": "caf\u00e9"}),
        "valid_mixed": valid_file([("a", "F64", [1], struct.pack("<d", 2.0)),
                                   ("b", "F32", [2], f32(1, 2)), ("c", "BF16", [1], bf16(1)),
                                   ("d", "U8", [3], b"xyz"), ("e", "I64", [1, 1], bytes(8))],
                                  {"k": "v"}),
        "valid_empty_header": st_file("{}"),
        "valid_misaligned": st_file(misaligned, f32(1, 2, 3)),
        "valid_out_of_order": st_file("{" + entry("zeta", "U8", "[2]", "[2, 4]") + ", " +
                                      entry("alpha", "U8", "[2]", "[0, 2]") + "}", b"ABCD"),
    }


def reject_seeds():
    nested = '{"a": ' + "[" * 50 + "]" * 50 + "}"
    return {
        "reject_short_file": b"abc",
        "reject_header_over_limit": struct.pack("<Q", 100_000_001) + b"{}      ",
        "reject_header_past_end": struct.pack("<Q", 64) + b'{"a": 1}',
        "reject_not_utf8": st_file(b'{"\xc0\xaf": 1}'),
        "reject_not_brace": st_file("  [1, 2]"),
        "reject_not_json": st_file('{"a": 1} /* c */'),
        "reject_too_deep": st_file(nested),
        "reject_duplicate_key": st_file("{" + GOOD + ", " + GOOD + "}", GOOD_DATA),
        "reject_entry_not_object": st_file('{"a": ["F32", [2], [0, 8]]}', GOOD_DATA),
        "reject_missing_field": st_file('{"a": {"dtype": "F32", "shape": [2]}}', GOOD_DATA),
        "reject_unknown_field": st_file(
            '{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "strides": [1]}}',
            GOOD_DATA),
        "reject_unknown_dtype": st_file("{" + entry("a", "F8_E4M3", "[8]", "[0, 8]") + "}",
                                        GOOD_DATA),
        "reject_bad_shape": st_file("{" + entry("a", "F32", "[2.0]", "[0, 8]") + "}", GOOD_DATA),
        "reject_count_overflow": st_file(
            "{" + entry("a", "F32", "[4294967296, 4294967296]", "[0, 8]") + "}", GOOD_DATA),
        "reject_bad_offsets": st_file("{" + entry("a", "F32", "[2]", "[8, 0]") + "}", GOOD_DATA),
        "reject_length_mismatch": st_file("{" + entry("a", "BF16", "[2]", "[0, 8]") + "}",
                                          GOOD_DATA),
        "reject_gap": st_file("{" + entry("a", "U8", "[4]", "[0, 4]") + ", " +
                              entry("b", "U8", "[4]", "[8, 12]") + "}", bytes(12)),
        "reject_overlap": st_file("{" + entry("a", "U8", "[4]", "[0, 4]") + ", " +
                                  entry("b", "U8", "[4]", "[2, 6]") + "}", bytes(6)),
        "reject_trailing_bytes": st_file("{" + GOOD + "}", bytes(10)),
        "reject_truncated_data": st_file("{" + GOOD + "}", bytes(4)),
        "reject_bad_metadata": st_file('{"__metadata__": {"k": 1}, ' + GOOD + "}", GOOD_DATA),
    }


def crash_seeds():
    # Found by this fuzzer: open() accepted a zero-element shape whose prefix product passes 2^63
    # (numel 0) and to_tensor then threw; open() now refuses it ("element count overflows").
    zero_big = entry("z", "F32", "[4611686018427387904, 2, 0]", "[0, 0]")
    return {"crash_zero_numel_prefix_overflow": st_file("{" + zero_big + "}")}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "seeds")
    os.makedirs(out, exist_ok=True)
    seeds = {**valid_seeds(), **reject_seeds(), **crash_seeds()}
    for name, raw in seeds.items():
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(raw)
    print(f"wrote {len(seeds)} seeds to {out}")


if __name__ == "__main__":
    main()

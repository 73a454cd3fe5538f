#!/usr/bin/env python3
"""fuzz/make_tokenizer_seeds.py — (re)writes the small tokenizer.json seeds in fuzz/tokenizer_seeds/.

Each is a file ETE accepts, small enough to mutate fast, together touching every component kind
ETE reads: normalizers (Sequence, NFC/NFKC, Lowercase, Strip, Replace with a string and a regex,
Prepend), pre-tokenizers (ByteLevel, Metaspace, Split, Sequence), post-processors
(TemplateProcessing, ByteLevel), decoders (ByteLevel, Metaspace, Sequence of Replace, ByteFallback,
Fuse, Strip) and added tokens. The tokenizer goldens in tests/golden/tokenizers/ are seeds too.
Usage: python3 fuzz/make_tokenizer_seeds.py [out_dir]   (default: fuzz/tokenizer_seeds)
"""
import json
import os
import sys


def bpe(vocab, merges, **extra):
    m = {"type": "BPE", "vocab": {t: i for i, t in enumerate(vocab)}, "merges": merges}
    m.update(extra)
    return m


def byte_level():
    # The 256 byte symbols of GPT-2's byte-to-unicode map, then a few merges.
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    syms = [chr(c) for c in cs]
    vocab = syms + ["Ġt", "he", "Ġthe", "in", "<|endoftext|>"]
    return {
        "version": "1.0",
        "added_tokens": [{"id": len(vocab) - 1, "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFC"},
            {"type": "Replace", "pattern": {"String": "\r\n"}, "content": "\n"}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": bpe(vocab, [["Ġ", "t"], ["h", "e"], ["Ġt", "he"], ["i", "n"]]),
    }


def metaspace():
    vocab = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + \
        ["▁", "a", "b", "c", "▁a", "ab", "▁ab"]
    return {
        "version": "1.0",
        "added_tokens": [
            {"id": 0, "content": "<unk>", "special": True, "normalized": False},
            {"id": 1, "content": "<s>", "special": True, "normalized": False},
            {"id": 2, "content": "</s>", "special": True, "normalized": False}],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": bpe(vocab, [["▁", "a"], ["a", "b"], ["▁a", "b"]], unk_token="<unk>",
                     byte_fallback=True, fuse_unk=True),
    }


def normalizers():
    vocab = ["<unk>", "a", "b", " ", "ab", "[x]"]
    return {
        "added_tokens": [{"id": 5, "content": "[x]", "special": False, "normalized": True}],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Lowercase"},
            {"type": "Strip", "strip_left": True, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"},
        "post_processor": None,
        "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"},
        "model": bpe(vocab, [["a", "b"]], unk_token="<unk>"),
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                            "tokenizer_seeds")
    os.makedirs(out, exist_ok=True)
    for name, tok in [("byte_level", byte_level()), ("metaspace", metaspace()),
                      ("normalizers", normalizers())]:
        with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()

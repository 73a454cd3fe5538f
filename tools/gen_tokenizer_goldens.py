#!/usr/bin/python3
"""Reference tokenizer goldens for tests/data/tokenizer_reference_test.cpp.

Needs Debian's python3-sentencepiece (0.1.97) and python3-regex, the `bible` command (bible-kjv)
and a built `ete` binary (for `ete tokenizer train`). The HF `tokenizers` package is not needed.
Run from the repository root:

    apt-get install -y python3-sentencepiece python3-regex bible-kjv
    ninja -C build ete
    /usr/bin/python3 tools/gen_tokenizer_goldens.py --ete build/ete  # -> tests/golden/tokenizers/

CI never runs this script; it uses the committed files. Re-running with the same package versions
gives the same bytes (fixed corpus, one SentencePiece training thread, vocab written in id order).

Corpus: Genesis from the KJV (`bible 'Gen1:1-Gen50:26'`, about 200 KB) plus the multilingual
lines below (accents, Greek, Cyrillic, CJK, emoji), a few copies each, so some of their characters
make it into the vocabularies and some do not (which exercises byte fallback).

(a) Llama-2 style. SentencePiece trains a BPE model with Llama-2's settings (byte_fallback,
identity normalization, no whitespace collapsing, dummy prefix, split digits). It is converted to
a tokenizer.json the way transformers' LlamaConverter does:
  - vocab: every piece with its SentencePiece id (<unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258,
    then merged pieces, then single characters);
  - merges (SentencePieceExtractor.extract(vocab_scores)): for each piece, every split into two
    pieces that are both in the vocab, ordered by (left id, right id), then all of them stably
    sorted by the piece's score, highest first. SentencePiece's BPE encoder repeatedly joins the
    adjacent pair whose concatenation is the highest-scoring piece (leftmost on ties); HF joins the
    lowest-ranked listed merge (leftmost on ties). BPE piece scores are distinct and decrease with
    the id, so both orders agree; several merges making the same piece get consecutive ranks, and
    whichever is applied first the other one follows at once, so the results agree too.
  - two files: llama2_legacy.json (normalizer Sequence [Prepend "▁", Replace " " -> "▁"], no
    pre-tokenizer, merges as "a b" strings: the legacy Llama-2 layout) and llama2_metaspace.json
    (no normalizer, Metaspace pre-tokenizer prepend_scheme "first", split false, merges as
    ["a", "b"] pairs: the legacy=False layout of newer transformers). Both: decoder Sequence
    [Replace "▁" -> " ", ByteFallback, Fuse, Strip(" ", 1, 0)], BPE with unk_token "<unk>",
    fuse_unk and byte_fallback, <unk>/<s>/</s> as special added tokens.
  Expected ids come from SentencePiece's own encode(). Known, legitimate differences, handled by
  deriving the HF expectation from SentencePiece on the right pieces of text:
  - SentencePiece never matches "<s>", "</s>" or "<unk>" in input text (they are control pieces);
    HF cuts added tokens out of the raw text first and normalizes each stretch between them on
    its own. So the expected ids of "a<s>b" are sp("a") + [1] + sp("b"), not sp("a<s>b").
  - add_dummy_prefix: SentencePiece puts one "▁" before the whole text, even one that starts with a
    space (" x" -> "▁▁x"). The legacy Prepend normalizer does the same for every stretch. The
    Metaspace pre-tokenizer with prepend_scheme "first" adds it only to the stretch at text offset
    0 and only when that stretch does not already start with "▁" (a space or a literal "▁":
    " x" -> "▁x"); other stretches are encoded with a copy of the model whose
    normalizer_spec.add_dummy_prefix is false.
  - SentencePiece's decode() drops control pieces and the dummy prefix; a string "round-trips" in
    the goldens when sp.decode(expected ids) gives it back.

(b) Byte-level BPE. `ete tokenizer train` learns merges on the same corpus (GPT-2 layout:
ByteLevel pre-tokenizer with GPT-2's regex). Expected ids come from the independent
implementation below of GPT-2's published algorithm (encoder.py): bytes_to_unicode, regex
pre-tokenization with the `regex` module, then the lowest-ranked pair merged everywhere until no
pair has a rank. Added tokens ("<|endoftext|>") are cut out first, as HF does. Two files:
  - gpt2.json: as trained (ByteLevel pre-tokenizer, use_regex true, GPT-2's pattern);
  - llama3.json: the same vocab and merges in Llama-3's layout: Sequence [Split(Llama-3 regex,
    Isolated), ByteLevel(use_regex false)] and ignore_merges true (a pre-token that is itself in
    the vocab is taken whole, before any merging).
  The regex module's \\s is Unicode White_Space, as in HF (Oniguruma), tiktoken and Rust's regex.

Output (tests/golden/tokenizers/): the four tokenizer.json files and expected_ids.json:
  {"tokenizers": [{"file", "reference", "cases": [{"text", "ids", "round_trip", "pieces"}]}]}
where "pieces" (byte-level only) are the regex pre-tokens of the whole text.
"""

import argparse
import io
import json
import os
import subprocess
import tempfile

import regex
import sentencepiece as spm

META = "\u2581"  # '▁'
SPECIALS_SP = ["<unk>", "<s>", "</s>"]
SPECIAL_BYTE_LEVEL = "<|endoftext|>"
SP_VOCAB_SIZE = 1000
BYTE_LEVEL_VOCAB_SIZE = 1000

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Added to the KJV so the vocabularies see (some of) these characters.
MULTILINGUAL_LINES = [
    "Ça va très bien, merci ! Où est la boulangerie ? Déjà vu, crème brûlée, garçon.",
    "Straße, Mädchen, Größe, schön, über, naïve café, señor, año, coração, ação.",
    "Ελληνικά: η αρχή ήταν ο λόγος. Русский текст: в начале было слово.",
    "日本語のテキストです。東京は大きい都市です。中文文本：你好，世界！天地。",
    "한국어 문장입니다. Tiếng Việt có dấu. हिन्दी पाठ। עברית, العربية.",
    "Emoji: 🙂🚀🎉 mixed with text 🙂 and 👍 again 🙂, numbers 3.14159 and 2024-06-01.",
    "Tabs\tand  double  spaces,   triple spaces, trailing space. ",
]
MULTILINGUAL_COPIES = 8

# Llama-3 variant only: vocab entries without merges (pieces of a test string below).
WHOLE_PIECE_TOKENS = ["supercalifragilisticexpialidocious", " antidisestablishmentarianism"]

# Every golden tokenizer is checked on each of these (specials are plain text where not added).
TEST_STRINGS = [
    "",
    " ",
    "   ",
    "\n",
    "Hello world",
    "In the beginning God created the heaven and the earth.",
    "AND THE LORD SAID UNTO MOSES",
    " single leading space",
    "  two leading spaces",
    "trailing spaces   ",
    "multiple    spaces   inside  words",
    "line one\nline two\n\nline four\r\nend\n",
    "\ttab\tand space \t mixed",
    "digits 0 12 345 6789 1234567890 and 3.14159, 2024-06-01",
    "punctuation: !?.,;:'\"()[]{}<>/\\|@#$%^&*-_=+~` ...",
    "contractions: I'm, you're, it's, we've, they'll, he'd, DON'T, IT'S",
    "Ça va très bien, naïve café, Straße, Mädchen",
    "decomposed e\u0301 vs composed \u00e9",
    "日本語のテキスト 中文文本：你好，世界！",
    "Ελληνικά русский עברית العربية 한국어",
    "Emoji 🙂🚀🎉 family 👩\u200d👩\u200d👧 heart ❤\ufe0f flag 🇫🇷",
    "math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 letters",
    "odd spaces: nbsp\u00a0x ideographic\u3000y nel\u0085z mvs\u180ew zwsp\u200bv",
    "not White_Space: x\u180e!? y\u180e  \u200b. \x1c\x1f",
    "long s: IT'\u017f, dotless: I'\u0131",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "          ten spaces",
    "  \n  indented\n\t\n",
    "$5 \"quoted\" (paren) [x] a.b,c",
    "literal \u2581 meta and <0x41> byte text",
    "\u2581starts with a literal meta",
    "<s>",
    "<s",
    "<s><s></s>x</s>",
    "<s>In the beginning</s>",
    "a<s>b",
    " <s> spaced </s> ",
    "<unk> unknown</s>",
    "<|endoftext|>",
    "first<|endoftext|>second<|endoftext|> third",
    "<|endoftext|><|endoftext|><|endoftext",
]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, **kw)


def corpus_lines():
    kjv = run(["bible", "Gen1:1-Gen50:26"]).stdout.decode("utf-8")
    lines = [ln for ln in kjv.split("\n") if ln.strip()]
    for _ in range(MULTILINGUAL_COPIES):
        lines.extend(MULTILINGUAL_LINES)
    return lines


def split_added(text, specials):
    """HF's added-token split: leftmost match, the longest on ties. Yields (text, is_special)."""
    pos = 0
    while True:
        hits = [(text.find(s, pos), -len(s), s) for s in specials if text.find(s, pos) >= 0]
        if not hits:
            break
        at, _, s = min(hits)
        if at > pos:
            yield text[pos:at], False
        yield s, True
        pos = at + len(s)
    if pos < len(text):
        yield text[pos:], False


# ---------------------------------------------------------------------------------------------
# (a) SentencePiece, Llama-2 style


def train_sentencepiece(lines):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        model_type="bpe",
        vocab_size=SP_VOCAB_SIZE,
        byte_fallback=True,
        character_coverage=0.9995,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        max_sentencepiece_length=16,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def read_varint(buf, i):
    value, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def write_varint(value):
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        out.append(b | (0x80 if value else 0))
        if not value:
            return bytes(out)


def proto_fields(buf):
    """(field number, wire type, raw bytes of the whole field) for each top-level field."""
    i = 0
    while i < len(buf):
        start = i
        key, i = read_varint(buf, i)
        wire = key & 7
        if wire == 0:
            _, i = read_varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 2:
            n, i = read_varint(buf, i)
            i += n
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"protobuf wire type {wire} not expected in a SentencePiece model")
        yield key >> 3, wire, buf[start:i]


def without_dummy_prefix(model):
    """The model with normalizer_spec (ModelProto field 3) add_dummy_prefix (field 3) = false.

    Written by hand because Debian's sentencepiece has no protobuf runtime to do it with."""
    out = bytearray()
    for num, wire, raw in proto_fields(model):
        if num != 3 or wire != 2:
            out += raw
            continue
        key_len = len(write_varint((3 << 3) | 2))
        n, body_at = read_varint(raw, key_len)
        body = raw[body_at : body_at + n]
        spec = b"".join(r for f, _, r in proto_fields(body) if f != 3)
        spec += write_varint(3 << 3) + write_varint(0)
        out += write_varint((3 << 3) | 2) + write_varint(len(spec)) + spec
    return bytes(out)


def sp_processor(model):
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model)
    return sp


def hf_merges(sp):
    """transformers' SentencePieceExtractor.extract(vocab_scores) (see the module docstring)."""
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    merges = []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        local = [
            (piece[:k], piece[k:])
            for k in range(1, len(piece))
            if piece[:k] in vocab and piece[k:] in vocab
        ]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend((l, r, sp.get_score(i)) for l, r in local)
    merges.sort(key=lambda m: m[2], reverse=True)  # stable: ties keep the order above
    # SentencePiece never merges into a control or byte piece ("<s>", "<0x41>"); HF would if a
    # merge made one. None does here, so the two agree.
    for l, r, _ in merges:
        merged = sp.piece_to_id(l + r)
        assert not (sp.is_control(merged) or sp.is_byte(merged) or sp.is_unknown(merged))
    return [(l, r) for l, r, _ in merges]


def llama2_json(sp, metaspace):
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    assert [sp.id_to_piece(i) for i in range(3)] == SPECIALS_SP
    merges = hf_merges(sp)
    added = [
        {
            "id": i,
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, s in enumerate(SPECIALS_SP)
    ]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    post = {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [
            bos,
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": "<s>", "type_id": 1}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
    }
    normalizer = {
        "type": "Sequence",
        "normalizers": [
            {"type": "Prepend", "prepend": META},
            {"type": "Replace", "pattern": {"String": " "}, "content": META},
        ],
    }
    pre = {"type": "Metaspace", "replacement": META, "prepend_scheme": "first", "split": False}
    decoder = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": META}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None if metaspace else normalizer,
        "pre_tokenizer": pre if metaspace else None,
        "post_processor": post,
        "decoder": decoder,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[l, r] for l, r in merges] if metaspace else [f"{l} {r}" for l, r in merges],
        },
    }


def llama2_cases(sp, sp_bare, metaspace):
    """Expected HF ids per test string, from SentencePiece on each stretch between added tokens."""
    ids_of = {s: i for i, s in enumerate(SPECIALS_SP)}
    cases = []
    for text in TEST_STRINGS:
        ids, offset = [], 0
        for part, special in split_added(text, SPECIALS_SP):
            if special:
                ids.append(ids_of[part])
            elif not metaspace or (offset == 0 and not part.startswith((" ", META))):
                ids.extend(sp.encode(part))  # dummy prefix: Prepend / Metaspace "first"
            else:
                ids.extend(sp_bare.encode(part))
            offset += len(part)
        cases.append({"text": text, "ids": ids, "round_trip": sp.decode(ids) == text})
    return cases


def check_llama2_coverage(sp, cases):
    """The goldens must exercise byte fallback, known non-ASCII pieces and whitespace pieces."""
    pieces = {sp.id_to_piece(i) for c in cases for i in c["ids"]}
    assert any(sp.is_byte(sp.piece_to_id(p)) for p in pieces), "no byte fallback in the goldens"
    assert any(ord(ch) > 0x3000 for p in pieces for ch in p), "no CJK piece in the goldens"
    assert META + META in pieces, "no whitespace-only piece in the goldens"


# ---------------------------------------------------------------------------------------------
# (b) byte-level BPE, GPT-2's algorithm


def bytes_to_unicode():
    """GPT-2's map: printable bytes stand for themselves, the others for U+0100 upwards."""
    bs = list(range(ord("!"), ord("~") + 1))
    bs += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_ENCODER = bytes_to_unicode()


def gpt2_bpe(token, ranks):
    """GPT-2's encoder.py bpe(): merge the lowest-ranked pair everywhere, left to right."""
    word = tuple(token)
    while len(word) > 1:
        pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
        best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if best not in ranks:
            break
        merged, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                merged.append(word[i] + word[i + 1])
                i += 2
            else:
                merged.append(word[i])
                i += 1
        word = tuple(merged)
    return word


def split_isolated(pattern, text):
    """HF Split(behavior Isolated): the matches and the gaps between them, in order."""
    pieces, pos = [], 0
    for m in regex.finditer(pattern, text):
        if m.start() > pos:
            pieces.append(text[pos : m.start()])
        pieces.append(m.group())
        pos = m.end()
    if pos < len(text):
        pieces.append(text[pos:])
    return pieces


def byte_level_encode(text, vocab, ranks, pattern, ignore_merges, specials):
    ids = []
    for part, special in split_added(text, specials):
        if special:
            ids.append(vocab[part])
            continue
        for piece in split_isolated(pattern, part):
            token = "".join(BYTE_ENCODER[b] for b in piece.encode("utf-8"))
            if ignore_merges and token in vocab:
                ids.append(vocab[token])
            else:
                ids.extend(vocab[t] for t in gpt2_bpe(token, ranks))
    return ids


def train_byte_level(ete, lines, tmp):
    corpus = os.path.join(tmp, "corpus.txt")
    out = os.path.join(tmp, "gpt2.json")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    run([ete, "tokenizer", "train", corpus, "--vocab-size", str(BYTE_LEVEL_VOCAB_SIZE),
         "--out", out])
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def llama3_layout(gpt2):
    t = json.loads(json.dumps(gpt2))
    split = {
        "type": "Split",
        "pattern": {"Regex": LLAMA3_PATTERN},
        "behavior": "Isolated",
        "invert": False,
    }
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": False}
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, byte_level]}
    t["model"]["ignore_merges"] = True
    # Tokens that no merge sequence reaches (tiktoken-converted files have them): only the
    # whole-piece lookup of ignore_merges produces them.
    vocab = t["model"]["vocab"]
    for word in WHOLE_PIECE_TOKENS:
        vocab["".join(BYTE_ENCODER[b] for b in word.encode("utf-8"))] = max(vocab.values()) + 1
    return t


def byte_level_cases(tok, pattern, ignore_merges):
    pre = tok["pre_tokenizer"]
    assert pre["type"] == "Sequence" or (pre["use_regex"] and not pre["add_prefix_space"])
    vocab = tok["model"]["vocab"]
    ranks = {tuple(m.split(" ")): r for r, m in enumerate(tok["model"]["merges"])}
    specials = [a["content"] for a in tok["added_tokens"]]
    assert specials == [SPECIAL_BYTE_LEVEL]
    decoder = {i: t for t, i in vocab.items()}
    byte_decoder = {c: b for b, c in BYTE_ENCODER.items()}
    cases = []
    for text in TEST_STRINGS:
        ids = byte_level_encode(text, vocab, ranks, pattern, ignore_merges, specials)
        raw = b"".join(
            decoder[i].encode() if decoder[i] in specials
            else bytes(byte_decoder[c] for c in decoder[i])
            for i in ids
        )
        cases.append({"text": text, "ids": ids, "round_trip": raw == text.encode("utf-8"),
                      "pieces": split_isolated(pattern, text)})
    return cases


def count_ignore_merges_effect(tok, pattern):
    """How many test strings ignore_merges changes (must be some, or it goes untested)."""
    vocab = tok["model"]["vocab"]
    ranks = {tuple(m.split(" ")): r for r, m in enumerate(tok["model"]["merges"])}
    return sum(
        byte_level_encode(t, vocab, ranks, pattern, True, [SPECIAL_BYTE_LEVEL])
        != byte_level_encode(t, vocab, ranks, pattern, False, [SPECIAL_BYTE_LEVEL])
        for t in TEST_STRINGS
    )


# ---------------------------------------------------------------------------------------------


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def write_expected(path, entries):
    """One case per line, so a regenerated golden diffs line by line."""
    out = ['{"generator": "tools/gen_tokenizer_goldens.py", "tokenizers": [']
    for e, entry in enumerate(entries):
        out.append(f' {{"file": {dumps(entry["file"])}, "reference": {dumps(entry["reference"])},')
        out.append('  "cases": [')
        for c, case in enumerate(entry["cases"]):
            comma = "," if c + 1 < len(entry["cases"]) else ""
            out.append(f"   {dumps(case)}{comma}")
        out.append("  ]}" + ("," if e + 1 < len(entries) else ""))
    out.append("]}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ete", required=True, help="the ete binary (for `ete tokenizer train`)")
    ap.add_argument("--out", default="tests/golden/tokenizers", help="output directory")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lines = corpus_lines()

    model = train_sentencepiece(lines)
    sp, sp_bare = sp_processor(model), sp_processor(without_dummy_prefix(model))
    assert sp_bare.encode("x", out_type=str)[0] != META + "x" and sp.encode("", out_type=str) == []
    entries = []
    for name, metaspace in (("llama2_legacy.json", False), ("llama2_metaspace.json", True)):
        write_json(os.path.join(args.out, name), llama2_json(sp, metaspace))
        cases = llama2_cases(sp, sp_bare, metaspace)
        check_llama2_coverage(sp, cases)
        entries.append(
            {"file": name, "reference": f"sentencepiece {spm.__version__} encode()",
             "cases": cases})

    with tempfile.TemporaryDirectory() as tmp:
        gpt2 = train_byte_level(args.ete, lines, tmp)
    llama3 = llama3_layout(gpt2)
    assert count_ignore_merges_effect(llama3, LLAMA3_PATTERN) >= 1
    for name, tok, pattern, ignore in (("gpt2.json", gpt2, GPT2_PATTERN, False),
                                       ("llama3.json", llama3, LLAMA3_PATTERN, True)):
        write_json(os.path.join(args.out, name), tok)
        entries.append(
            {"file": name, "reference": "GPT-2 byte-level BPE (this script, regex module)",
             "cases": byte_level_cases(tok, pattern, ignore)})

    write_expected(os.path.join(args.out, "expected_ids.json"), entries)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench/multilingual_text.py — the multilingual text of the tokenizer benchmark (docs/benchmarks.md).

Real translated text from what Debian 12 installs: every translation (msgstr) of the message
catalogs glib20 (libglib2.0-data), gtk20 and gtk20-properties (libgtk2.0-common) and iso_3166-1
(iso-codes: country names) in 27 languages — Latin with accents (de fr es pt_BR pl cs vi tr), Greek, Cyrillic (ru uk
bg sr), Arabic, Persian, Hebrew, Devanagari, Bengali, Tamil, Thai, Georgian, Armenian, Amharic,
Chinese (zh_CN zh_TW), Japanese, Korean. The languages take turns, one message each, so every
script sits next to the others; every 16th line is a case of the shared tokenizer golden texts
(tests/golden/tokenizers/families/texts.json: the script and emoji cases, in turn), which brings
emoji (ZWJ sequences, flags, skin tones, keycaps) and the rarer scripts. The catalogs are read
in sorted key order, so the same packages give the same bytes.

    python3 bench/multilingual_text.py OUT.txt [--repeat R]

--repeat R (default 1) writes the text R times, which keeps the mix and multiplies the size.
"""
import argparse
import json
import os
import struct
import sys

LOCALE_DIR = "/usr/share/locale"
LANGS = ["de", "fr", "es", "pt_BR", "pl", "cs", "vi", "tr", "el", "ru", "uk", "bg", "sr", "ar",
         "fa", "he", "hi", "bn", "ta", "th", "ka", "hy", "am", "zh_CN", "zh_TW", "ja", "ko"]
DOMAINS = ["glib20", "gtk20", "gtk20-properties", "iso_3166-1"]
GOLDEN_CASES = ["accents_precomposed_nfc", "greek", "cyrillic", "arabic_rtl_bidi",
                "hebrew_rtl_bidi", "devanagari", "thai", "chinese", "japanese", "korean_hangul",
                "other_scripts", "vietnamese_turkish_german", "mixed_scripts_no_spaces",
                "emoji_basic", "emoji_zwj_sequences", "emoji_flags", "emoji_skin_tones",
                "emoji_keycaps", "emoji_variation_selectors"]
GOLDEN_EVERY = 16


def mo_translations(path):
    """The non-empty translations of a GNU .mo file, by sorted original (plural forms split)."""
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    end = "<" if magic == 0x950412DE else ">"
    _, n, orig_at, trans_at = struct.unpack(end + "4I", data[4:20])
    pairs = []
    for k in range(n):
        olen, ooff = struct.unpack(end + "2I", data[orig_at + 8 * k:orig_at + 8 * k + 8])
        tlen, toff = struct.unpack(end + "2I", data[trans_at + 8 * k:trans_at + 8 * k + 8])
        orig = data[ooff:ooff + olen]
        if not orig:
            continue  # the catalog header
        for t in data[toff:toff + tlen].split(b"\0"):
            if t:
                pairs.append((orig, t.decode("utf-8")))
    pairs.sort(key=lambda p: p[0])
    return [t for _, t in pairs]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    texts = json.load(open(os.path.join(root, "tests/golden/tokenizers/families/texts.json")))
    golden = {c["name"]: c["text"] for c in texts}
    extras = [golden[name] for name in GOLDEN_CASES]
    queues = []
    for lang in LANGS:
        q = []
        for dom in DOMAINS:
            p = os.path.join(LOCALE_DIR, lang, "LC_MESSAGES", dom + ".mo")
            if not os.path.exists(p):
                sys.exit(f"multilingual_text.py: {p} is missing (apt-get install "
                         "libglib2.0-data libgtk2.0-common iso-codes)")
            q += mo_translations(p)
        queues.append(q)
    lines, pos, extra = [], [0] * len(queues), 0
    while any(pos[i] < len(q) for i, q in enumerate(queues)):
        for i, q in enumerate(queues):
            if pos[i] < len(q):
                lines.append(q[pos[i]])
                pos[i] += 1
                if len(lines) % GOLDEN_EVERY == 0:
                    lines.append(extras[extra % len(extras)])
                    extra += 1
    text = "\n".join(lines) + "\n"
    with open(args.out, "w", encoding="utf-8", newline="") as f:
        for _ in range(args.repeat):
            f.write(text)
    print(f"{args.out}: {len(text.encode()) * args.repeat} bytes, {len(lines) * args.repeat} "
          "lines", file=sys.stderr)


if __name__ == "__main__":
    main()

